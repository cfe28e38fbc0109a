"""rlpolicy.utils.numpy against hand-worked cases and independent formulas."""

import sys
from types import MappingProxyType

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.utils import numpy as rnp


def test_constants():
    assert rnp.SMALL_NUMBER == 1e-6
    assert rnp.LARGE_INTEGER == 100000000
    assert (rnp.MIN_LOG_NN_OUTPUT, rnp.MAX_LOG_NN_OUTPUT) == (-5, 2)


def test_module_import_does_not_load_frameworks():
    import subprocess

    code = (
        "import sys, rlpolicy.utils.numpy, rlpolicy.utils.spaces.space_utils, "
        "rlpolicy.utils.schedules, rlpolicy.agents.callbacks, rlpolicy.evaluation, "
        "rlpolicy.agents, rlpolicy._core.config; "
        "print('torch' in sys.modules, 'tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_one_hot_hand_worked():
    np.testing.assert_array_equal(
        rnp.one_hot(np.array([0, 2, 1]), depth=3), [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    )
    np.testing.assert_array_equal(rnp.one_hot(2), [0, 0, 1])  # depth inferred: max + 1
    np.testing.assert_array_equal(
        rnp.one_hot(np.array([[1], [0]]), depth=2, on_value=5.0, off_value=-1.0), [[[-1, 5]], [[5, -1]]]
    )
    # Bool input: always depth 2.
    np.testing.assert_array_equal(rnp.one_hot(np.array([True, False])), [[0, 1], [1, 0]])


def test_one_hot_out_of_range_raises():
    with pytest.raises(ValueError, match="depth"):
        rnp.one_hot(np.array([0, 3]), depth=3)


def test_activations_and_losses():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 3.0])
    np.testing.assert_allclose(
        rnp.sigmoid(x),
        [1 / (1 + np.exp(2.0)), 1 / (1 + np.exp(0.5)), 0.5, 1 / (1 + np.exp(-0.5)), 1 / (1 + np.exp(-3.0))],
        rtol=1e-10,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        rnp.sigmoid(np.array([0.25]), derivative=True), [0.1875], rtol=1e-10, atol=1e-12
    )
    np.testing.assert_array_equal(rnp.relu(x), [0, 0, 0, 0.5, 3.0])
    np.testing.assert_allclose(rnp.relu(x, alpha=0.1), [-0.2, -0.05, 0, 0.5, 3.0], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(x, [-2.0, -0.5, 0.0, 0.5, 3.0])  # input untouched
    # Huber, delta=1: |x|<1 -> x^2/2, else |x|-0.5.
    np.testing.assert_allclose(rnp.huber_loss(x), [1.5, 0.125, 0.0, 0.125, 2.5], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        rnp.huber_loss(x, delta=2.0), [2.0, 0.125, 0, 0.125, 4.0], rtol=1e-10, atol=1e-12
    )
    assert rnp.l2_loss(np.array([1.0, 2.0, 3.0])) == pytest.approx(7.0, abs=1e-12)


def test_softmax():
    logits = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, -1000.0]])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(rnp.softmax(logits)[0], e / e.sum(), rtol=1e-10, atol=1e-12)
    # Tiny probabilities are floored at epsilon (SMALL_NUMBER by default).
    np.testing.assert_allclose(rnp.softmax(logits)[1], [0.5, 0.5, 1e-6], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rnp.softmax(logits, epsilon=1e-3)[1], [0.5, 0.5, 1e-3], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rnp.softmax(logits[:1].T, axis=0)[:, 0], e / e.sum(), rtol=1e-10, atol=1e-12)


def test_fc_numpy_and_torch_layout():
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(4, 3)), rng.normal(size=(3, 2)), rng.normal(size=2)
    expected = np.array(
        [[sum(x[i, k] * w[k, j] for k in range(3)) + b[j] for j in range(2)] for i in range(4)]
    )
    np.testing.assert_allclose(rnp.fc(x, w, b), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rnp.fc(x, w), expected - b, rtol=1e-10, atol=1e-12)
    # torch stores [out, in]: transposed automatically.
    np.testing.assert_allclose(rnp.fc(x, w.T, b, framework="torch"), expected, rtol=1e-10, atol=1e-12)


def test_fc_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    layer = torch.nn.Linear(3, 2)
    x = torch.randn(5, 3)
    out = rnp.fc(x, layer.weight, layer.bias, framework="torch")
    np.testing.assert_allclose(out, layer(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def _manual_lstm_step(x_t, h, c, W, b, units, forget_bias):
    """Gates written out one by one: kernel columns are [i, j(candidate), f, o]."""
    z = np.concatenate([x_t, h], axis=1) @ W + b
    i = 1 / (1 + np.exp(-z[:, :units]))
    j = np.tanh(z[:, units : 2 * units])
    f = 1 / (1 + np.exp(-(z[:, 2 * units : 3 * units] + forget_bias)))
    o = 1 / (1 + np.exp(-z[:, 3 * units :]))
    c_new = f * c + i * j
    return o * np.tanh(c_new), c_new


@pytest.mark.parametrize("time_major", [False, True])
def test_lstm_against_manual_gates(time_major):
    rng = np.random.default_rng(1)
    B, T, n_in, units = 2, 4, 3, 5
    x = rng.normal(size=(B, T, n_in))
    W = rng.normal(size=(n_in + units, 4 * units)) * 0.5
    b = rng.normal(size=4 * units) * 0.1
    c0, h0 = rng.normal(size=(B, units)), rng.normal(size=(B, units))
    h, c = h0, c0
    hs = []
    for t in range(T):
        h, c = _manual_lstm_step(x[:, t], h, c, W, b, units, 1.0)
        hs.append(h)
    expected = np.stack(hs, axis=1)
    inp = np.transpose(x, (1, 0, 2)) if time_major else x
    out, (c_out, h_out) = rnp.lstm(inp, W, b, initial_internal_states=(c0, h0), time_major=time_major)
    if time_major:
        out = np.transpose(out, (1, 0, 2))
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h_out, h, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c_out, c, rtol=1e-10, atol=1e-12)


def test_lstm_zero_state_and_forget_bias():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 2, 2))
    W = rng.normal(size=(2 + 3, 12))
    b = np.zeros(12)
    z = np.zeros((1, 3))
    h1, c1 = _manual_lstm_step(x[:, 0], z, z, W, b, 3, 0.0)
    h2, c2 = _manual_lstm_step(x[:, 1], h1, c1, W, b, 3, 0.0)
    out, (c, h) = rnp.lstm(x, W, b, forget_bias=0.0)
    np.testing.assert_allclose(out[:, 1], h2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c, c2, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="3D"):
        rnp.lstm(x[0], W, b)


def test_convert_to_numpy_nested_torch():
    torch = pytest.importorskip("torch")
    data = {
        "a": torch.tensor([1.0, 2.0], dtype=torch.float64),
        "b": (torch.tensor(3), [np.int64(4)]),
        "c": np.arange(3, dtype=np.int64),
        "img": np.zeros(2, dtype=np.uint8),
    }
    out = rnp.convert_to_numpy(data)
    assert out["a"].dtype == np.float32 and out["a"].tolist() == [1.0, 2.0]
    assert out["b"][0] == 3 and isinstance(out["b"][0], int)  # 0-D tensor -> python number
    assert out["c"].dtype == np.int32
    assert out["img"].dtype == np.uint8
    kept = rnp.convert_to_numpy({"a": torch.ones(2, dtype=torch.float64)}, reduce_type=False)
    assert kept["a"].dtype == np.float64


@pytest.mark.tf_eager_code
def test_convert_to_numpy_eager_tf():
    tf = pytest.importorskip("tensorflow")
    out = rnp.convert_to_numpy([tf.constant([1.5, 2.5]), tf.Variable([[1, 2]], dtype=tf.int64)])
    np.testing.assert_array_equal(out[0], [1.5, 2.5])
    assert out[1].dtype == np.int32


def test_convert_to_numpy_deprecated_reduce_floats():
    with pytest.warns(DeprecationWarning):
        out = rnp.convert_to_numpy(np.ones(2), reduce_floats=False)
    assert out.dtype == np.float64


def test_flatten_inputs_to_1d_tensor():
    spaces = {
        "a": gym.spaces.Discrete(3),
        "b": gym.spaces.Box(-1, 1, (2, 2)),
        "c": gym.spaces.MultiDiscrete([2, 3]),
    }
    inputs = {"a": np.array([2, 0]), "b": np.arange(8.0).reshape(2, 2, 2), "c": np.array([[1, 0], [0, 2]])}
    out = rnp.flatten_inputs_to_1d_tensor(inputs, spaces)
    # dm-tree order: a, b, c.
    expected = np.array(
        [[0, 0, 1, 0, 1, 2, 3, 0, 1, 1, 0, 0], [1, 0, 0, 4, 5, 6, 7, 1, 0, 0, 0, 1]], dtype=np.float32
    )
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == np.float32
    # With a time axis: [B=1, T=2].
    timed = rnp.flatten_inputs_to_1d_tensor(
        {"a": np.array([[2, 0]]), "b": np.arange(8.0).reshape(1, 2, 2, 2), "c": np.array([[[1, 0], [0, 2]]])},
        spaces,
        time_axis=True,
    )
    np.testing.assert_array_equal(timed, expected[None])
    # Without spaces everything is just flattened.
    np.testing.assert_array_equal(
        rnp.flatten_inputs_to_1d_tensor([np.ones((2, 3)), np.zeros((2, 1))]), [[1, 1, 1, 0], [1, 1, 1, 0]]
    )


def test_make_action_immutable():
    a = np.zeros(3)
    out = rnp.make_action_immutable(a)
    with pytest.raises(ValueError):
        out[0] = 1.0
    d = rnp.make_action_immutable({"x": 1})
    assert isinstance(d, MappingProxyType)
    with pytest.raises(TypeError):
        d["x"] = 2
    assert rnp.make_action_immutable(5) == 5


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8, np.int64])
def test_aligned_array(dtype):
    a = rnp.aligned_array(10, np.dtype(dtype))
    assert a.shape == (10,) and a.dtype == dtype and a.ctypes.data % 64 == 0
    assert rnp.aligned_array(0, np.float32).shape == (0,)


def test_concat_aligned():
    items = [np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)]
    out = rnp.concat_aligned(items)
    np.testing.assert_array_equal(out, np.concatenate(items))
    assert out.ctypes.data % 64 == 0
    tm = [np.ones((4, 2, 3)), np.zeros((4, 1, 3))]
    np.testing.assert_array_equal(rnp.concat_aligned(tm, time_major=True), np.concatenate(tm, axis=1))
    ints = [np.array([1, 2]), np.array([3])]
    np.testing.assert_array_equal(rnp.concat_aligned(ints), [1, 2, 3])
    assert rnp.concat_aligned([]) == []
    assert rnp.concat_aligned([items[0]]) is items[0]
