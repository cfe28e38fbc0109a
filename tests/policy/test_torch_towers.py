"""Tower helpers (rlpolicy._core.towers) and TorchPolicy's multi-tower SGD path."""
import copy
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy._core.towers import (  # noqa: E402
    TowerRunner,
    compute_tower_grads,
    equal_split_length,
    mean_reduce_grads,
    slice_device_batches,
    sync_tower_weights,
)


# ---------------------------------------------------------------- pure helpers


def test_equal_split_length():
    assert equal_split_length(101, 2) == 50
    assert equal_split_length(7, 1) == 7
    with pytest.raises(ValueError, match="num_devices=0 is invalid"):
        equal_split_length(10, 0)


@pytest.mark.parametrize(
    "offset, size, expected",
    [
        (0, 2, [[0, 1], [10, 11]]),
        (2, 2, [[2, 3], [12, 13]]),
        (3, 3, [[3], [13]]),  # runs off the end: shorter slices
        (0, 8, [[0, 1, 2, 3], [10, 11, 12, 13]]),  # covers all 8: whole buffers
        (5, 9, [[0, 1, 2, 3], [10, 11, 12, 13]]),
    ],
)
def test_slice_device_batches(offset, size, expected):
    buffers = [[0, 1, 2, 3], [10, 11, 12, 13]]
    assert slice_device_batches(buffers, offset, size) == expected


def _net():
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                               torch.nn.Linear(4, 2))


def test_sync_tower_weights_copies_params_and_buffers_in_place():
    torch.manual_seed(0)
    main = _net()
    towers = [main, copy.deepcopy(main), copy.deepcopy(main)]
    with torch.no_grad():
        for p in main.parameters():
            p.add_(1.0)
        main[1].running_mean.fill_(3.0)
    ids_before = [id(p) for p in towers[1].parameters()]
    sync_tower_weights(main, towers)
    for t in towers[1:]:
        for (k, a), b in zip(main.state_dict().items(), t.state_dict().values()):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)
    assert [id(p) for p in towers[1].parameters()] == ids_before


def test_mean_reduce_grads_matches_numpy():
    rng = np.random.default_rng(0)
    a = [rng.normal(size=(2, 3)).astype(np.float32) for _ in range(3)]
    b = [rng.normal(size=(2, 3)).astype(np.float32) for _ in range(3)]
    tg = [[torch.tensor(a[0]), None, torch.tensor(a[2])],
          [torch.tensor(b[0]), torch.tensor(b[1]), torch.tensor(b[2])]]
    out = mean_reduce_grads(tg, "cpu")
    np.testing.assert_allclose(out[0].numpy(), (a[0] + b[0]) / 2, rtol=1e-6)
    assert out[1] is None  # None in tower 0 stays None (RLlib 1.11)
    np.testing.assert_allclose(out[2].numpy(), (a[2] + b[2]) / 2, rtol=1e-6)
    single = [torch.tensor(a[0])]
    assert mean_reduce_grads([single], "cpu")[0] is single[0]


def test_compute_tower_grads_linear_regression():
    # loss = mean((x @ w)^2 ... ) -> analytic gradient 2/N * X^T (Xw - y).
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8,)).astype(np.float32)
    model = torch.nn.Linear(3, 1, bias=False)
    w = model.weight.detach().numpy().copy().reshape(-1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.weight.grad = torch.full_like(model.weight, 7.0)  # stale grad must be zeroed

    def loss_fn(m, batch):
        xb, yb = batch
        return [((m(xb).squeeze(-1) - yb) ** 2).mean()]

    seen = []
    grads, info = compute_tower_grads(loss_fn, model, (torch.tensor(x), torch.tensor(y)),
                                      [opt], [{0}], lambda o, l: seen.append(o) or {"gp": 1})
    expected = 2.0 / 8 * x.T @ (x @ w - y)
    np.testing.assert_allclose(grads[0].numpy().reshape(-1), expected, rtol=1e-5)
    assert grads[0] is model.weight.grad
    assert info == {"allreduce_latency": 0.0, "gp": 1} and seen == [opt]


def test_compute_tower_grads_two_optimizers_own_their_params():
    a = torch.nn.Parameter(torch.tensor([1.0]))
    b = torch.nn.Parameter(torch.tensor([2.0]))
    model = torch.nn.Module()
    model.a, model.b = a, b
    opts = [torch.optim.SGD([a], lr=1.0), torch.optim.SGD([b], lr=1.0)]

    def loss_fn(m, batch):
        return [(m.a * m.b) ** 2, 3.0 * m.b * m.a]

    grads, _ = compute_tower_grads(loss_fn, model, None, opts, [{0}, {1}], lambda o, l: {})
    # As in RLlib 1.11, each optimizer zeroes only its own params before its
    # backward and the returned grads are references: b's grad from loss 0
    # (2a^2b = 4) is zeroed before loss 1 (d/db 3ab = 3a = 3), while a keeps
    # accumulating: 2ab^2 = 8 from loss 0 plus d/da 3ab = 3b = 6 from loss 1.
    assert grads[0].item() == pytest.approx(14.0)
    assert grads[1].item() == pytest.approx(3.0)


def test_compute_tower_grads_rejects_wrong_loss_count():
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    with pytest.raises(ValueError, match="returned 2 loss terms for 1 optimizers"):
        compute_tower_grads(lambda m, b: [m.weight.sum(), m.bias.sum()], model, None,
                            [opt], [{0, 1}], lambda o, l: {})


def test_tower_runner_threads_grad_mode_and_pool_reuse():
    runner = TowerRunner(["cpu", "cpu", "cpu"])
    barrier = threading.Barrier(3, timeout=5)

    def fn(i):
        barrier.wait()  # all three towers must run at the same time
        return i, threading.current_thread().name, torch.is_grad_enabled()

    with torch.no_grad():
        out = runner.run(fn, [(0,), (1,), (2,)])
    assert [o[0] for o in out] == [0, 1, 2]
    assert out[0][1] == threading.current_thread().name  # tower 0 inline
    assert all(o[1].startswith("rlpolicy-tower") for o in out[1:])
    assert not any(o[2] for o in out)  # caller's no_grad applied in threads
    pool = runner._pool
    barrier.reset()
    out = runner.run(fn, [(0,), (1,), (2,)])
    assert runner._pool is pool and all(o[2] for o in out)
    runner.shutdown()
    assert runner._pool is None


def test_tower_runner_single_tower_is_inline_and_has_no_pool():
    runner = TowerRunner(["cpu"])
    out = runner.run(lambda: threading.current_thread().name, [()])
    assert out == [threading.current_thread().name] and runner._pool is None


@pytest.mark.parametrize("bad_tower", [0, 1])
def test_tower_runner_names_failing_tower(bad_tower):
    runner = TowerRunner(["cpu", "cpu"])

    def fn(i):
        if i == bad_tower:
            raise KeyError("advantages")
        return i

    with pytest.raises(ValueError, match=f"Error in tower {bad_tower} on device cpu.*KeyError") as ei:
        runner.run(fn, [(0,), (1,)])
    assert isinstance(ei.value.__cause__, KeyError)
    with pytest.raises(ValueError, match="got work for 3 towers but only 2 devices"):
        runner.run(fn, [(0,), (1,), (2,)])
    runner.shutdown()


def test_make_towers_cpu_layout_shares_model_and_target():
    from rlpolicy._core.towers import make_towers

    model, target = _net(), _net()
    towers, targets = make_towers(model, ["cpu", "cpu", "cpu"], on_gpu=False, target_model=target)
    assert towers[0] is model and len({id(t) for t in towers}) == 3
    assert list(targets) == towers and all(v is target for v in targets.values())
    assert make_towers(model, ["cpu"], on_gpu=False)[1] is None


def test_make_towers_gpu_layout_copies_everything():
    from rlpolicy._core.towers import make_towers

    # The GPU layout, exercised with CPU device names: every tower and every
    # target is its own copy (tower 0 too), moved to its device.
    model, target = _net(), _net()
    towers, targets = make_towers(model, ["cpu", "cpu"], on_gpu=True, target_model=target)
    assert all(t is not model for t in towers) and towers[0] is not towers[1]
    assert len({id(v) for v in targets.values()}) == 2 and target not in targets.values()
    for t in towers:
        for a, b in zip(t.parameters(), model.parameters()):
            assert torch.equal(a, b)


class _Rows:
    """A minimal batch: rows, slicing, timeslices, to_device (records calls)."""

    def __init__(self, rows, seq=False):
        self.rows, self.seq, self.padded, self.device = list(rows), seq, False, None

    def __len__(self):
        return len(self.rows)

    def __contains__(self, key):
        return key == "seq_lens" and self.seq

    def __getitem__(self, s):
        return _Rows(self.rows[s], self.seq)

    def timeslices(self, num_slices):
        k = len(self) // num_slices
        return [self[i * k:(i + 1) * k if i < num_slices - 1 else None]
                for i in range(num_slices)]

    def to_device(self, d):
        self.device = d
        return self


def test_split_for_devices_drops_excess_and_pads():
    from rlpolicy._core.towers import split_for_devices

    def pad(b):
        b.padded = True

    slices = split_for_devices(_Rows(range(9)), 2, pad, ["cpu", "meta"])
    assert [s.rows for s in slices] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # row 8 dropped
    assert all(s.padded for s in slices) and [s.device for s in slices] == ["cpu", "meta"]
    # With sequences nothing is dropped up front (timeslices decides).
    slices = split_for_devices(_Rows(range(9), seq=True), 2, pad, ["cpu", "cpu"])
    assert sum(len(s) for s in slices) == 9


def test_tower_optimizer_view_swaps_params():
    from rlpolicy._core.towers import TowerOptimizerView, make_optimizer_views

    main = torch.nn.Linear(2, 2)
    other = copy.deepcopy(main)
    opt = torch.optim.SGD([{"params": [main.weight], "lr": 0.1},
                           {"params": [main.bias], "lr": 0.2}])
    view = TowerOptimizerView(opt, list(main.parameters()), list(other.parameters()))
    groups = view.param_groups
    assert groups[0]["params"][0] is other.weight and groups[1]["params"][0] is other.bias
    assert [g["lr"] for g in groups] == [0.1, 0.2] and view.defaults is opt.defaults
    opt.param_groups[0]["lr"] = 0.5  # live view of the hyper-parameters
    assert view.param_groups[0]["lr"] == 0.5
    views = make_optimizer_views([opt], main, [main, other])
    assert list(views) == [1] and views[1][0].param_groups[0]["params"][0] is other.weight
