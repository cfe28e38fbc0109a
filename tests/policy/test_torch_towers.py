"""Tower helpers (rlpolicy.policy._torch.towers) and TorchPolicy's multi-tower SGD path."""

import copy
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy.policy._torch.towers import (  # noqa: E402
    TowerRunner,
    compute_tower_grads,
    mean_reduce_grads,
    sync_tower_weights,
)

# ---------------------------------------------------------------- pure helpers
# (Batch splitting and buffer bookkeeping: tests/core/test_tower_buffers.py.)


def _net():
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))


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
    tg = [
        [torch.tensor(a[0]), None, torch.tensor(a[2])],
        [torch.tensor(b[0]), torch.tensor(b[1]), torch.tensor(b[2])],
    ]
    out = mean_reduce_grads(tg, "cpu")
    np.testing.assert_allclose(out[0].numpy(), (a[0] + b[0]) / 2, rtol=1e-6, atol=1e-6)
    assert out[1] is None  # None in tower 0 stays None (RLlib 1.11)
    np.testing.assert_allclose(out[2].numpy(), (a[2] + b[2]) / 2, rtol=1e-6, atol=1e-6)
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
    grads, info, losses = compute_tower_grads(
        loss_fn,
        model,
        (torch.tensor(x), torch.tensor(y)),
        [opt],
        [{0}],
        lambda o, _loss: seen.append(o) or {"gp": 1},
    )
    expected = 2.0 / 8 * x.T @ (x @ w - y)
    np.testing.assert_allclose(grads[0].numpy().reshape(-1), expected, rtol=1e-5, atol=1e-6)
    assert grads[0] is model.weight.grad
    assert info == {"allreduce_latency": 0.0, "gp": 1} and seen == [opt]
    assert len(losses) == 1 and losses[0].item() == pytest.approx(
        ((x @ w - y) ** 2).mean(), rel=1e-5, abs=1e-6
    )
    # Without grad_process only the raw gradients are computed.
    assert compute_tower_grads(loss_fn, model, (torch.tensor(x), torch.tensor(y)), [opt], [{0}]).info == {
        "allreduce_latency": 0.0
    }


def test_compute_tower_grads_two_optimizers_own_their_params():
    a = torch.nn.Parameter(torch.tensor([1.0]))
    b = torch.nn.Parameter(torch.tensor([2.0]))
    model = torch.nn.Module()
    model.a, model.b = a, b
    opts = [torch.optim.SGD([a], lr=1.0), torch.optim.SGD([b], lr=1.0)]

    def loss_fn(m, batch):
        return [(m.a * m.b) ** 2, 3.0 * m.b * m.a]

    grads, _, _ = compute_tower_grads(loss_fn, model, None, opts, [{0}, {1}], lambda o, _loss: {})
    # As in RLlib 1.11, each optimizer zeroes only its own params before its
    # backward and the returned grads are references: b's grad from loss 0
    # (2a^2b = 4) is zeroed before loss 1 (d/db 3ab = 3a = 3), while a keeps
    # accumulating: 2ab^2 = 8 from loss 0 plus d/da 3ab = 3b = 6 from loss 1.
    assert grads[0].item() == pytest.approx(14.0, abs=1e-6)
    assert grads[1].item() == pytest.approx(3.0, abs=1e-6)


def test_compute_tower_grads_rejects_wrong_loss_count():
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    with pytest.raises(ValueError, match="returned 2 loss terms for 1 optimizers"):
        compute_tower_grads(
            lambda m, b: [m.weight.sum(), m.bias.sum()], model, None, [opt], [{0, 1}], lambda o, _loss: {}
        )


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
    from rlpolicy.policy._torch.towers import make_towers

    model, target = _net(), _net()
    towers, targets = make_towers(model, ["cpu", "cpu", "cpu"], on_gpu=False, target_model=target)
    assert towers[0] is model and len({id(t) for t in towers}) == 3
    assert list(targets) == towers and all(v is target for v in targets.values())
    assert make_towers(model, ["cpu"], on_gpu=False)[1] is None


def test_make_towers_gpu_layout_copies_everything():
    from rlpolicy.policy._torch.towers import make_towers

    # The GPU layout, exercised with CPU device names: every tower and every
    # target is its own copy (tower 0 too), moved to its device.
    model, target = _net(), _net()
    towers, targets = make_towers(model, ["cpu", "cpu"], on_gpu=True, target_model=target)
    assert all(t is not model for t in towers) and towers[0] is not towers[1]
    assert len({id(v) for v in targets.values()}) == 2 and target not in targets.values()
    for t in towers:
        for a, b in zip(t.parameters(), model.parameters()):
            assert torch.equal(a, b)


# ---------------------------------------------------------------- TorchPolicy: towers == one device

from torch_pg_policies import ACT, OBS, PG, pg_batch  # noqa: E402

from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402

N_ROWS = 24  # divisible by 1, 2 and 3 towers (and into whole 4-step sequences)
SEQ_LEN = 4
CELL = 8
MODELS = {
    "ff": {"fcnet_hiddens": [8]},
    "lstm": {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": CELL, "max_seq_len": SEQ_LEN},
}
OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


class OptPG(PG):
    """PG with the optimizer class named by ``config["_test_optimizer"]``."""

    def optimizer(self):
        return OPTIMIZERS[self.config["_test_optimizer"]](self.model.parameters(), lr=0.05)


def _batch(model_name):
    batch = pg_batch(N_ROWS, seed=5)
    if model_name == "lstm":
        n_seq = N_ROWS // SEQ_LEN
        rng = np.random.default_rng(6)
        batch[SampleBatch.SEQ_LENS] = np.full(n_seq, SEQ_LEN, np.int32)
        for k in range(2):
            batch[f"state_in_{k}"] = rng.normal(size=(n_seq, CELL)).astype(np.float32)
    return batch


def _policy(model_name, opt, grad_clip, num_gpus):
    torch.manual_seed(0)
    config = {
        "lr": 0.05,
        "seed": 0,
        "model": dict(MODELS[model_name]),
        "grad_clip": grad_clip,
        "_test_optimizer": opt,
        "train_batch_size": N_ROWS,
        "sgd_minibatch_size": N_ROWS,
    }
    if num_gpus:
        config.update(num_gpus=num_gpus, _fake_gpus=True)
    return OptPG(OBS, ACT, config, max_seq_len=SEQ_LEN)


def _params(policy):
    return [p.detach().numpy().copy() for p in policy.model.parameters()]


def _assert_all_close(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


@pytest.fixture(params=[1, 2, 3], ids=lambda n: f"towers{n}")
def num_towers(request):
    return request.param


@pytest.fixture(params=list(MODELS))
def model_name(request):
    return request.param


@pytest.fixture(params=list(OPTIMIZERS))
def opt_name(request):
    return request.param


CLIP = 0.02  # the batches' gradient norm is ~0.24: clipping is active


@pytest.fixture(params=[None, CLIP], ids=["noclip", "clip"])
def grad_clip(request):
    return request.param


@pytest.fixture
def pair(num_towers, model_name, opt_name, grad_clip):
    """(multi-tower policy, single-device policy with the same weights, batch maker)."""
    towers = _policy(model_name, opt_name, grad_clip, num_towers)
    single = _policy(model_name, opt_name, grad_clip, 0)
    single.set_weights(towers.get_weights())
    assert len(towers.model_gpu_towers) == num_towers and len(single.devices) == 1
    return towers, single, lambda: _batch(model_name)


def _grads_np(grads):
    return [None if g is None else g.numpy() for g in grads]


def _assert_grads_close(actual, expected):
    assert [g is None for g in actual] == [g is None for g in expected]
    _assert_all_close(
        [g for g in _grads_np(actual) if g is not None], [g for g in _grads_np(expected) if g is not None]
    )


def _reference_norm_exceeds_clip(stats, grad_clip):
    # The clip case must actually clip, or it would not test anything.
    if grad_clip:
        assert float(stats["grad_gnorm"]) > 5 * grad_clip


def test_learn_on_batch_equals_single_device(pair, grad_clip):
    towers, single, batch = pair
    for _ in range(2):  # the second step re-syncs the towers (and uses Adam's state)
        out = single.learn_on_batch(batch())
        _reference_norm_exceeds_clip(out["learner_stats"], grad_clip)
        towers.learn_on_batch(batch())
    _assert_all_close(_params(towers), _params(single))


def _per_tower_clipped_mean(single, batch, num_towers):
    """RLlib 1.11's multi-tower result: each tower clips its own gradients."""
    size = N_ROWS // num_towers
    per_tower = [
        _grads_np(single.compute_gradients(batch()[i * size : (i + 1) * size])[0]) for i in range(num_towers)
    ]
    return [None if g[0] is None else np.mean(g, axis=0) for g in zip(*per_tower)]


def test_compute_gradients_equals_single_device(pair, grad_clip, num_towers):
    towers, single, batch = pair
    expected, info = single.compute_gradients(batch())
    _reference_norm_exceeds_clip(info["learner_stats"], grad_clip)
    expected = [None if g is None else g.clone() for g in expected]
    if grad_clip and num_towers > 1:
        # Clipping per tower would give a measurably different result.
        old = _per_tower_clipped_mean(single, batch, num_towers)
        assert max(np.abs(a - e.numpy()).max() for a, e in zip(old, expected) if e is not None) > 1e-3
    grads, info = towers.compute_gradients(batch())
    _assert_grads_close(grads, expected)
    if grad_clip:
        assert float(info["learner_stats"]["grad_gnorm"]) == pytest.approx(
            float(single.compute_gradients(batch())[1]["learner_stats"]["grad_gnorm"]), rel=1e-4, abs=1e-5
        )
    # The averaged gradients are left in the main model for apply_gradients.
    _assert_grads_close([p.grad for p in towers.model.parameters()], expected)


def test_learn_on_loaded_batch_equals_single_device(pair, num_towers):
    towers, single, batch = pair
    assert towers.load_batch_into_buffer(batch()) == N_ROWS // num_towers
    for _ in range(2):
        fetches = towers.learn_on_loaded_batch(0)
        single.learn_on_batch(batch())
    _assert_all_close(_params(towers), _params(single))
    if num_towers > 1:
        assert {f"tower_{i}" for i in range(num_towers)} <= set(fetches)


def test_every_tower_sees_its_share_in_learn_on_batch():
    policy = _policy("ff", "sgd", None, 3)
    seen = {}
    for i, tower in enumerate(policy.model_gpu_towers):
        # ModelV2.__call__ bypasses nn.Module hooks: hook the first layer instead.
        first = next(m for m in tower.modules() if isinstance(m, torch.nn.Linear))
        first.register_forward_hook(lambda m, args, out, i=i: seen.setdefault(i, []).append(len(out)))
    batch = pg_batch(13, seed=1)  # 13 // 3 = 4 rows per tower, one dropped
    policy.learn_on_batch(batch)
    assert seen == {0: [4], 1: [4], 2: [4]}
    seen.clear()
    policy.compute_gradients(batch)
    assert seen == {0: [4], 1: [4], 2: [4]}


def test_towers_differ_from_tower0_only_run_fails():
    # Sanity check of the equality tests above: tower 0 alone on half the
    # batch gives a different step than both towers together.
    towers = _policy("ff", "sgd", None, 2)
    alone = _policy("ff", "sgd", None, 0)
    alone.set_weights(towers.get_weights())
    towers.learn_on_batch(pg_batch(N_ROWS, seed=5))
    alone.learn_on_batch(pg_batch(N_ROWS, seed=5)[: N_ROWS // 2])
    diff = max(np.abs(a - b).max() for a, b in zip(_params(towers), _params(alone)))
    assert diff > 1e-4


# ---------------------------------------------------------------- plain dicts are SampleBatches


@pytest.fixture(params=[0, 2], ids=["cpu", "fake-gpu-x2"])
def dict_pair(request):
    a = _policy("ff", "sgd", 1e-3, request.param)
    b = _policy("ff", "sgd", 1e-3, request.param)
    b.set_weights(a.get_weights())
    return a, b


def test_dict_is_taken_as_sample_batch(dict_pair):
    from_dict, from_batch = dict_pair
    as_dict = dict(pg_batch(N_ROWS, seed=2))
    assert not isinstance(as_dict, SampleBatch)
    stats = from_dict.learn_on_batch(dict(as_dict))
    assert "learner_stats" in stats
    from_batch.learn_on_batch(pg_batch(N_ROWS, seed=2))
    _assert_all_close(_params(from_dict), _params(from_batch))
    grads, _ = from_dict.compute_gradients(dict(as_dict))
    expected, _ = from_batch.compute_gradients(pg_batch(N_ROWS, seed=2))
    _assert_grads_close(grads, expected)
    n = len(from_dict.devices)
    assert from_dict.load_batch_into_buffer(dict(as_dict)) == N_ROWS // n
    assert from_batch.load_batch_into_buffer(pg_batch(N_ROWS, seed=2)) == N_ROWS // n
    from_dict.learn_on_loaded_batch(0)
    from_batch.learn_on_loaded_batch(0)
    _assert_all_close(_params(from_dict), _params(from_batch))


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_bad_tower_stack_count_fails_at_construction(value):
    with pytest.raises(ValueError, match=r"config\['num_multi_gpu_tower_stacks'\]=.* is invalid"):
        OptPG(
            OBS,
            ACT,
            {"num_multi_gpu_tower_stacks": value, "_test_optimizer": "sgd", "model": {"fcnet_hiddens": [8]}},
        )
