"""rlpolicy.utils.tf_utils in TF graph mode (own tf1.Graph) and eagerly, against numpy references."""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.utils import tf_utils as tfu  # noqa: E402

pytestmark = pytest.mark.tf


@pytest.fixture
def graph_session(tf_modules):
    tf1, _ = tf_modules
    graph = tf1.Graph()
    with graph.as_default():
        sess = tf1.Session(graph=graph)
        yield graph, sess
        sess.close()


@pytest.mark.tf_eager_code
def test_eager_losses_and_explained_variance(tf_modules):
    _, tf = tf_modules
    rng = np.random.default_rng(0)
    y = rng.normal(size=40).astype(np.float32)
    pred = (y + 0.5 * rng.normal(size=40)).astype(np.float32)
    expected = max(-1.0, 1 - np.var(y - pred) / np.var(y))  # biased variances, as tf.nn.moments
    assert float(tfu.explained_variance(tf.constant(y), tf.constant(pred))) == pytest.approx(
        expected, rel=1e-5, abs=1e-6
    )
    assert float(tfu.explained_variance(tf.constant(y), tf.constant(-5 * y))) == -1.0
    x = np.array([-2.0, -0.5, 0.25, 3.0], np.float32)
    np.testing.assert_allclose(
        tfu.huber_loss(tf.constant(x)).numpy(), [1.5, 0.125, 0.03125, 2.5], rtol=1e-6, atol=1e-6
    )
    assert float(tfu.l2_loss(tf.constant(x))) == pytest.approx(0.5 * np.sum(x**2), abs=1e-6)
    masked = tf.constant([[1.0, tf.float32.min, 5.0]])
    assert float(tfu.reduce_mean_ignore_inf(masked)) == pytest.approx(3.0, abs=1e-6)


@pytest.mark.tf_eager_code
def test_eager_one_hot_and_flatten(tf_modules):
    _, tf = tf_modules
    np.testing.assert_array_equal(
        tfu.one_hot(tf.constant([1, 0]), gym.spaces.Discrete(2)).numpy(), [[0, 1], [1, 0]]
    )
    np.testing.assert_array_equal(
        tfu.one_hot(tf.constant([[1, 2]]), gym.spaces.MultiDiscrete([2, 3])).numpy(), [[0, 1, 0, 0, 1]]
    )
    with pytest.raises(ValueError, match="Unsupported space"):
        tfu.one_hot(tf.constant([1.0]), gym.spaces.Box(0, 1, (1,)))
    spaces = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,))}
    out = tfu.flatten_inputs_to_1d_tensor(
        {"a": tf.constant([2, 1]), "b": tf.constant([[0.5, 1.0], [2.0, 3.0]])}, spaces
    )
    np.testing.assert_array_equal(out.numpy(), [[0, 0, 1, 0.5, 1.0], [0, 1, 0, 2.0, 3.0]])
    timed = tfu.flatten_inputs_to_1d_tensor(
        {"a": tf.constant([[2, 1]]), "b": tf.constant([[[0.5, 1.0], [2.0, 3.0]]])}, spaces, time_axis=True
    )
    np.testing.assert_array_equal(timed.numpy(), [[[0, 0, 1, 0.5, 1.0], [0, 1, 0, 2.0, 3.0]]])


@pytest.mark.tf_eager_code
def test_zero_logps_from_actions(tf_modules):
    _, tf = tf_modules
    out = tfu.zero_logps_from_actions({"x": tf.ones((4, 3, 2)), "y": tf.ones((4,))})
    assert out.shape == (4,) and out.dtype == tf.float32 and float(tf.reduce_sum(out)) == 0.0


def test_get_gpu_devices_cpu_machine():
    devices = tfu.get_gpu_devices()
    assert isinstance(devices, list) and all("GPU" in d for d in devices)


@pytest.mark.tf_eager_code
def test_make_tf_callable_eager_returns_fn(tf_modules):
    def fn(x):
        return x * 2

    assert tfu.make_tf_callable(None)(fn) is fn


def test_make_tf_callable_graph(graph_session, tf_modules):
    _, tf = tf_modules
    graph, sess = graph_session
    calls = []

    @tfu.make_tf_callable(sess, dynamic_shape=True)
    def affine(x, scale, bias=None):
        calls.append(1)
        return x * scale + bias["b"]

    out = affine(np.ones((2, 3), np.float32), np.float32(2.0), bias={"b": np.float32(0.5)})
    np.testing.assert_allclose(out, np.full((2, 3), 2.5), rtol=1e-6, atol=1e-6)
    # Second call with another batch size reuses the same placeholders/ops.
    out = affine(
        np.arange(5, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32),
        np.float32(3.0),
        bias={"b": np.float32(1.0)},
    )
    np.testing.assert_allclose(out[:, 0], np.arange(5) * 3.0 + 1.0, rtol=1e-6, atol=1e-6)
    assert len(calls) == 1
    assert not tf.executing_eagerly()  # the fixture keeps us inside the graph


def test_make_tf_callable_needs_session_in_graph(graph_session):
    with pytest.raises(ValueError, match="session"):
        tfu.make_tf_callable(None)


def test_graph_placeholders(graph_session, tf_modules):
    tf1, tf = tf_modules
    box = gym.spaces.Box(-1, 1, (3, 2), dtype=np.float64)
    ph = tfu.get_placeholder(space=box, name="obs")
    assert ph.shape.as_list() == [None, 3, 2] and ph.dtype == tf.float32
    ph_t = tfu.get_placeholder(space=gym.spaces.Discrete(4), name="a", time_axis=True)
    assert ph_t.shape.as_list() == [None, None] and ph_t.dtype == tf.int64
    nested = gym.spaces.Dict({"d": gym.spaces.Discrete(2), "m": gym.spaces.MultiDiscrete([2, 2])})
    flat = tfu.get_placeholder(space=nested, name="act")
    assert flat.shape.as_list() == [None, 3] and flat.dtype == tf.int64
    mixed = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2, 2))))
    assert tfu.get_placeholder(space=mixed, name="mix").shape.as_list() == [None, 5]
    struct = tfu.get_placeholder(space=mixed, name="mix2", flatten=False)
    assert isinstance(struct, tuple) and struct[1].shape.as_list() == [None, 2, 2]
    assert struct[0].name.startswith("mix2.0")
    from_value = tfu.get_placeholder(value=np.zeros((7, 4), np.float64), name="v")
    assert from_value.shape.as_list() == [None, 4] and from_value.dtype == tf.float32
    with pytest.raises(ValueError, match="space"):
        tfu.get_placeholder(name="nothing")


def test_graph_minimize_and_clip_and_scope_vars(graph_session, tf_modules):
    tf1, tf = tf_modules
    graph, sess = graph_session
    with tf1.variable_scope("net"):
        w = tf1.get_variable("w", initializer=np.array([3.0, 4.0], np.float32))
        frozen = tf1.get_variable("frozen", initializer=np.float32(1.0), trainable=False)
    unused = tf1.get_variable("unused", initializer=np.float32(0.0))
    loss = tf.reduce_sum(w * w)  # grad = 2w = [6, 8], norm 10
    opt = tf1.train.GradientDescentOptimizer(0.1)
    gv = tfu.minimize_and_clip(opt, loss, [w, unused], clip_val=5.0)
    assert len(gv) == 1 and gv[0][1] is w
    sess.run(tf1.global_variables_initializer())
    np.testing.assert_allclose(sess.run(gv[0][0]), [3.0, 4.0], rtol=1e-6, atol=1e-6)
    unclipped = tfu.minimize_and_clip(opt, loss, [w], clip_val=None)
    np.testing.assert_allclose(sess.run(unclipped[0][0]), [6.0, 8.0], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="clip_val"):
        tfu.minimize_and_clip(opt, loss, [w], clip_val=0.0)
    assert set(tfu.scope_vars("net")) == {w, frozen}
    assert tfu.scope_vars("net", trainable_only=True) == [w]
    # Graph-mode ops agree with the eager results.
    y = tf1.placeholder(tf.float32, [None])
    p = tf1.placeholder(tf.float32, [None])
    ev = sess.run(tfu.explained_variance(y, p), {y: [1.0, 2.0, 3.0, 4.0], p: [1.0, 2.0, 3.0, 3.0]})
    yy, pp = np.array([1.0, 2, 3, 4]), np.array([1.0, 2, 3, 3])
    assert ev == pytest.approx(1 - np.var(yy - pp) / np.var(yy), rel=1e-6, abs=1e-6)


@pytest.mark.tf_eager_code
def test_eager_minimize_and_clip_uses_tape(tf_modules):
    _, tf = tf_modules
    w = tf.Variable([3.0, 4.0])

    class Opt:
        pass

    opt = Opt()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w)
    opt.tape = tape
    gv = tfu.minimize_and_clip(opt, loss, [w], clip_val=5.0)
    np.testing.assert_allclose(gv[0][0].numpy(), [3.0, 4.0], rtol=1e-6, atol=1e-6)


@pytest.mark.tf_eager_code
def test_eager_minimize_and_clip_zero_small_and_unused_gradients(tf_modules):
    """Eagerly: a zero gradient stays zero (no NaN), one under the limit is kept as it
    is, a variable the loss does not use is dropped (numbers worked by hand)."""
    _, tf = tf_modules
    w, z, small, unused = (
        tf.Variable([3.0, 4.0]),
        tf.Variable([1.0, 2.0]),
        tf.Variable([0.3, 0.4]),
        tf.Variable([1.0]),
    )

    class Opt:
        pass

    opt = Opt()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w) + 0.0 * tf.reduce_sum(z) + tf.reduce_sum(small * small)
    opt.tape = tape
    gv = tfu.minimize_and_clip(opt, loss, [w, z, small, unused], clip_val=5.0)
    assert [v for _, v in gv] == [w, z, small]
    np.testing.assert_allclose(gv[0][0].numpy(), [3.0, 4.0], atol=1e-6)  # [6, 8] -> norm 5
    np.testing.assert_array_equal(gv[1][0].numpy(), [0.0, 0.0])
    np.testing.assert_allclose(gv[2][0].numpy(), [0.6, 0.8], atol=1e-6)  # norm 1 < 5
