"""rlpolicy.utils.torch_utils against numpy references."""

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy.utils import torch_utils as tu  # noqa: E402


def test_float_limits():
    assert tu.FLOAT_MIN == -3.4e38 and tu.FLOAT_MAX == 3.4e38
    assert torch.tensor(tu.FLOAT_MIN, dtype=torch.float32).isfinite()


@pytest.mark.parametrize("time_major", [False, True])
def test_sequence_mask_vs_numpy(time_major):
    lengths = np.array([3, 0, 5, 1])
    expected = np.arange(5)[None, :] < lengths[:, None]
    mask = tu.sequence_mask(torch.tensor(lengths), time_major=time_major)
    assert mask.dtype == torch.bool
    np.testing.assert_array_equal(mask.numpy(), expected.T if time_major else expected)
    wide = tu.sequence_mask(torch.tensor(lengths), maxlen=7, dtype=torch.float32)
    assert wide.dtype == torch.float32
    np.testing.assert_array_equal(wide.numpy(), (np.arange(7)[None, :] < lengths[:, None]).astype(np.float32))


def test_explained_variance_vs_numpy():
    rng = np.random.default_rng(0)
    y = rng.normal(size=50)
    pred = y + 0.3 * rng.normal(size=50)
    expected = max(-1.0, 1 - np.var(y - pred, ddof=1) / np.var(y, ddof=1))
    out = tu.explained_variance(torch.tensor(y, dtype=torch.float32), torch.tensor(pred, dtype=torch.float32))
    assert out.shape == () and float(out) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # Terrible predictions are floored at -1.
    bad = tu.explained_variance(torch.tensor(y), torch.tensor(-10 * y))
    assert float(bad) == -1.0


def test_global_norm_vs_numpy():
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=(3, 4)), rng.normal(size=5), rng.normal(size=())]
    expected = np.sqrt(sum(np.sum(a**2) for a in arrays))
    assert float(tu.global_norm([torch.tensor(a) for a in arrays])) == pytest.approx(expected, abs=1e-6)


def test_losses_vs_numpy():
    x = np.array([-3.0, -0.2, 0.0, 0.7, 2.0])
    expected = np.where(np.abs(x) < 1.5, 0.5 * x**2, 1.5 * (np.abs(x) - 0.75))
    np.testing.assert_allclose(
        tu.huber_loss(torch.tensor(x), delta=1.5).numpy(), expected, rtol=1e-6, atol=1e-6
    )
    assert float(tu.l2_loss(torch.tensor(x))) == pytest.approx(0.5 * np.sum(x**2), abs=1e-6)


def test_huber_loss_gradient_vs_numpy():
    # d huber / dx = x inside |x| < delta, delta * sign(x) outside (and at +-delta).
    x = np.array([-3.0, -1.5, -0.2, 0.0, 0.7, 1.5, 2.0], np.float32)
    t = torch.tensor(x, requires_grad=True)
    tu.huber_loss(t, delta=1.5).sum().backward()
    expected = np.where(np.abs(x) < 1.5, x, 1.5 * np.sign(x))
    np.testing.assert_allclose(t.grad.numpy(), expected, atol=1e-6)
    assert tu.huber_loss(torch.tensor(x), delta=1.5).dtype == torch.float32
    logits = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    labels = np.array([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5]])
    log_sm = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(
        tu.softmax_cross_entropy_with_logits(torch.tensor(logits), torch.tensor(labels)).numpy(),
        -(labels * log_sm).sum(-1),
        rtol=1e-6,
        atol=1e-6,
    )


def test_reduce_mean_ignore_inf_and_atanh():
    x = torch.tensor([[1.0, float("-inf"), 3.0], [2.0, 4.0, float("-inf")]])
    assert float(tu.reduce_mean_ignore_inf(x)) == pytest.approx(2.5, abs=1e-6)
    np.testing.assert_allclose(tu.reduce_mean_ignore_inf(x, 1).numpy(), [2.0, 3.0], rtol=1e-6, atol=1e-6)
    v = np.array([-0.9, 0.0, 0.5])
    np.testing.assert_allclose(tu.atanh(torch.tensor(v)).numpy(), np.arctanh(v), rtol=1e-6, atol=1e-6)
    assert torch.isfinite(tu.atanh(torch.tensor([1.0, -1.0]))).all()


def test_one_hot():
    np.testing.assert_array_equal(
        tu.one_hot(torch.tensor([2, 0]), gym.spaces.Discrete(3)).numpy(), [[0, 0, 1], [1, 0, 0]]
    )
    md = tu.one_hot(torch.tensor([[1, 0], [0, 2]]), gym.spaces.MultiDiscrete([2, 3]))
    np.testing.assert_array_equal(md.numpy(), [[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]])
    with pytest.raises(ValueError, match="Unsupported space"):
        tu.one_hot(torch.tensor([0.5]), gym.spaces.Box(0, 1, (1,)))


def test_flatten_inputs_to_1d_tensor_time_axis():
    spaces = (gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2, 2)), gym.spaces.MultiDiscrete([2, 2]))
    inputs = (np.array([[1, 2]]), np.arange(8.0).reshape(1, 2, 2, 2), np.array([[[0, 1], [1, 1]]]))
    expected = np.array(
        [[[0, 1, 0, 0, 1, 2, 3, 1, 0, 0, 1], [0, 0, 1, 4, 5, 6, 7, 0, 1, 0, 1]]], dtype=np.float32
    )
    out = tu.flatten_inputs_to_1d_tensor(tuple(torch.tensor(i) for i in inputs), spaces, time_axis=True)
    assert out.shape == (1, 2, 3 + 4 + 4) and out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), expected)


def test_convert_to_torch_tensor_nested():
    ro = np.ones(2)
    ro.setflags(write=False)
    data = {
        "f": np.zeros((2, 3)),
        "i": [np.array([1, 2], dtype=np.int64), 3],
        "ro": ro,
        "obj": np.array([{"a": 1}, None], dtype=object),
        "t": torch.ones(1, dtype=torch.float64),
    }
    out = tu.convert_to_torch_tensor(data, device="cpu")
    assert out["f"].dtype == torch.float32 and out["f"].shape == (2, 3)
    assert out["i"][0].dtype == torch.int64 and int(out["i"][1]) == 3
    assert out["ro"].dtype == torch.float32
    assert out["obj"] is data["obj"]
    assert out["t"] is data["t"]  # existing tensors are only moved (cpu -> cpu: the same object)


def test_convert_to_torch_tensor_sample_batch():
    from rlpolicy.policy.sample_batch import SampleBatch

    batch = SampleBatch(
        {"obs": np.zeros((3, 2)), "actions": np.array([0, 1, 1]), "seq_lens": np.array([1, 2])},
        _max_seq_len=2,
    )
    out = tu.convert_to_torch_tensor(batch)
    assert isinstance(out, SampleBatch) and out is not batch
    assert torch.is_tensor(out["obs"]) and out["obs"].dtype == torch.float32
    assert isinstance(batch["obs"], np.ndarray)  # original untouched
    assert out.max_seq_len == 2 and len(out) == 3


def test_convert_to_torch_tensor_single_leaves():
    f = tu.convert_to_torch_tensor(np.array([1.5, 2.5]))  # float64 -> float32
    assert f.dtype == torch.float32 and f.tolist() == [1.5, 2.5]
    s = tu.convert_to_torch_tensor(3)
    assert torch.is_tensor(s) and s.shape == () and int(s) == 3
    t = torch.ones(2, dtype=torch.float64)
    assert tu.convert_to_torch_tensor(t) is t
    obj = np.array([{}, None], dtype=object)
    assert tu.convert_to_torch_tensor(obj) is obj
    arr = np.arange(3, dtype=np.int32)
    shared = tu.convert_to_torch_tensor(arr)
    arr[0] = 7  # from_numpy: the tensor shares memory with the array, as in RLlib
    assert shared.dtype == torch.int32 and shared.tolist() == [7, 1, 2]


def test_convert_to_torch_tensor_does_not_mark_keys_accessed():
    """Converting a batch is not "reading" it: view-requirement pruning relies on
    accessed_keys holding only the columns a loss really read."""
    from rlpolicy.policy.sample_batch import SampleBatch

    batch = SampleBatch(
        {
            "obs": np.zeros((2, 2)),
            "actions": np.array([0, 1]),
            "nested": {"x": np.ones(2)},
            "infos": np.array([{}, {}], dtype=object),
        }
    )
    _ = batch["actions"]
    out = tu.convert_to_torch_tensor(batch, device="cpu")
    assert batch.accessed_keys == {"actions"}
    assert out.accessed_keys is batch.accessed_keys  # the copy still shares tracking (as RLlib's copy)
    assert torch.is_tensor(dict.__getitem__(out, "obs")) and torch.is_tensor(
        dict.__getitem__(out, "nested")["x"]
    )
    assert isinstance(dict.__getitem__(out, "infos"), np.ndarray)  # object column left alone
    assert out.added_keys == set() and out.deleted_keys == set()
    _ = out["obs"]  # reading the converted batch is tracked as usual
    assert batch.accessed_keys == {"actions", "obs"}


def test_convert_to_torch_tensor_with_interceptor_set():
    from rlpolicy.policy.sample_batch import SampleBatch

    calls = []

    def interceptor(v):
        calls.append(1)
        return v

    batch = SampleBatch({"obs": np.zeros((2, 2)), "r": np.ones(2)})
    batch.set_get_interceptor(interceptor)
    out = tu.convert_to_torch_tensor(batch)
    assert calls == [] and batch.accessed_keys == set()  # conversion neither intercepts nor tracks
    assert out["r"].dtype == torch.float32 and calls == [1]


def test_convert_to_non_torch_type():
    out = tu.convert_to_non_torch_type({"a": torch.tensor(2.5), "b": [torch.ones(2)], "c": "x"})
    assert out["a"] == 2.5 and isinstance(out["a"], float)
    np.testing.assert_array_equal(out["b"][0], [1.0, 1.0]) and isinstance(out["b"][0], np.ndarray)
    assert out["c"] == "x"


def test_convert_to_non_torch_type_flat_dict_of_tensors():
    w = torch.ones(2, requires_grad=True)
    stats = {"z": w * 2.0, "a": torch.tensor(1.5), "m": torch.arange(3)}
    out = tu.convert_to_non_torch_type(stats)
    assert list(out) == ["z", "a", "m"] and out is not stats  # key order kept, a new dict
    np.testing.assert_array_equal(out["z"], [2.0, 2.0]) and isinstance(out["z"], np.ndarray)
    assert out["a"] == 1.5 and isinstance(out["a"], float)
    assert out["m"].dtype == np.int64 and list(out["m"]) == [0, 1, 2]
    assert all(type(v) is torch.Tensor for v in stats.values())  # the input is left alone


class _FakePolicy:
    def __init__(self, grad_clip):
        self.config = {"grad_clip": grad_clip}


def _params_with_grads():
    a = torch.nn.Parameter(torch.zeros(2))
    b = torch.nn.Parameter(torch.zeros(1))
    c = torch.nn.Parameter(torch.zeros(1))  # no grad
    a.grad = torch.tensor([3.0, 0.0])
    b.grad = torch.tensor([4.0])
    return a, b, c


def test_apply_grad_clipping():
    a, b, c = _params_with_grads()
    opt = torch.optim.SGD([a, b, c], lr=0.1)
    info = tu.apply_grad_clipping(_FakePolicy(1.0), opt, loss=None)
    assert float(info["grad_gnorm"]) == pytest.approx(5.0, abs=1e-6)  # pre-clip global norm
    np.testing.assert_allclose(a.grad.numpy(), [0.6, 0.0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [0.8], rtol=1e-5, atol=1e-6)
    assert c.grad is None
    a, b, c = _params_with_grads()
    assert tu.apply_grad_clipping(_FakePolicy(None), torch.optim.SGD([a, b], lr=0.1), None) == {}
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 0.0], rtol=1e-6, atol=1e-6)


def test_apply_grad_clipping_per_param_group():
    a, b, _ = _params_with_grads()
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
    info = tu.apply_grad_clipping(_FakePolicy(2.0), opt, None)
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 0.0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [2.0], rtol=1e-5, atol=1e-6)
    assert float(info["grad_gnorm"]) == pytest.approx(4.0, abs=1e-6)  # last group's norm


def test_minimize_and_clip_per_parameter():
    a, b, _ = _params_with_grads()
    tu.minimize_and_clip(torch.optim.SGD([a, b], lr=0.1), clip_val=2.0)
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 0.0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [2.0], rtol=1e-5, atol=1e-6)


def test_concat_multi_gpu_td_errors():
    class Tower:
        def __init__(self, stats):
            self.tower_stats = stats

    class P:
        device = torch.device("cpu")
        model_gpu_towers = [
            Tower({"td_error": torch.tensor([1.0, 2.0])}),
            Tower({}),
            Tower({"td_error": torch.tensor([3.0])}),
        ]

    p = P()
    out = tu.concat_multi_gpu_td_errors(p)
    np.testing.assert_array_equal(out["td_error"].numpy(), [1.0, 2.0, 0.0, 3.0])
    assert float(out["mean_td_error"]) == pytest.approx(1.5, abs=1e-6)
    assert p.td_error is out["td_error"]


def test_set_torch_seed_reproducible():
    was = torch.are_deterministic_algorithms_enabled()
    try:
        tu.set_torch_seed(123)
        a = torch.rand(3)
        tu.set_torch_seed(123)
        np.testing.assert_array_equal(torch.rand(3).numpy(), a.numpy())
        tu.set_torch_seed(None)  # no-op
    finally:
        torch.use_deterministic_algorithms(was)
