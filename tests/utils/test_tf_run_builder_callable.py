"""TFRunBuilder's cached session callables give what ``session.run`` gives."""

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.utils import tf_run_builder  # noqa: E402
from rlpolicy.utils.tf_run_builder import TFRunBuilder  # noqa: E402

pytestmark = pytest.mark.tf


@pytest.fixture
def graph_ops(tf_modules):
    tf1, tf = tf_modules
    graph = tf1.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 2], name="x")
        flag = tf1.placeholder_with_default(True, [], name="flag")
        step = tf1.placeholder(tf.int64, [], name="step")
        counter = tf1.get_variable("counter", initializer=np.float32(0.0))
        inc = tf1.assign_add(counter, 1.0)
        total = tf.reduce_sum(x, axis=1)
        double_step = step * 2
        picked = tf.where(flag, total, -total)
        sess = tf1.Session(graph=graph)
        sess.run(tf1.global_variables_initializer())
        yield {
            "x": x,
            "flag": flag,
            "step": step,
            "inc": inc,
            "total": total,
            "picked": picked,
            "sess": sess,
            "counter": counter,
            "tf": tf,
            "double_step": double_step,
        }
        sess.close()


def _run(ops, feeds, fetches):
    builder = TFRunBuilder(ops["sess"], "callable_test")
    builder.add_feed_dict(feeds)
    idx = builder.add_fetches(fetches)
    return builder.get(idx)


def test_nested_fetches_ops_and_conversions(graph_ops):
    ops = graph_ops
    obs = np.array([[1.0, 2.0], [3.0, -4.0]], dtype=np.float64)  # converted to float32
    for i, flag in enumerate([True, False, True]):
        out = _run(
            ops,
            {ops["x"]: obs, ops["flag"]: flag, ops["step"]: i},
            [ops["picked"], {"stats": {"t": ops["total"], "s": ops["double_step"]}}, ops["inc"].op],
        )
        sign = 1.0 if flag else -1.0
        np.testing.assert_allclose(out[0], sign * np.array([3.0, -1.0]), rtol=1e-6, atol=1e-6)
        assert out[0].dtype == np.float32
        assert set(out[1]) == {"stats"} and set(out[1]["stats"]) == {"t", "s"}
        np.testing.assert_allclose(out[1]["stats"]["t"], [3.0, -1.0], rtol=1e-6, atol=1e-6)
        assert out[1]["stats"]["s"] == 2 * i
        assert out[2] is None
    # Each step ran the assign once, and one cached callable serves all three steps.
    assert ops["sess"].run(ops["counter"]) == 3.0
    cache = ops["sess"].__dict__[tf_run_builder._CACHE_ATTR]
    assert len(cache) == 1 and list(cache.values())[0] is not None


def test_default_placeholder_unfed_and_fetched_feed(graph_ops):
    ops = graph_ops
    out = _run(ops, {ops["x"]: [[1.0, 1.0]]}, [ops["picked"]])
    np.testing.assert_allclose(out[0], [2.0], rtol=1e-6, atol=1e-6)
    # A fetched tensor that is also fed comes back as the fed value (as with session.run).
    out = _run(ops, {ops["x"]: [[1.0, 1.0]], ops["total"]: [7.0]}, [ops["total"], ops["picked"]])
    np.testing.assert_allclose(out[0], [7.0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[1], [7.0], rtol=1e-6, atol=1e-6)


def test_bad_feeds_raise_session_run_errors(graph_ops):
    ops = graph_ops
    with pytest.raises(ValueError, match="callable_test.*shape"):
        _run(ops, {ops["x"]: np.zeros((2, 3))}, [ops["total"]])
    with pytest.raises(ops["tf"].errors.InvalidArgumentError, match="callable_test.*step"):
        _run(ops, {ops["x"]: np.zeros((1, 2))}, [ops["step"]])


def test_patched_run_is_respected(graph_ops):
    ops = graph_ops
    sess = ops["sess"]
    calls = []
    real_run = sess.run

    def counting_run(*args, **kwargs):
        calls.append(1)
        return real_run(*args, **kwargs)

    sess.run = counting_run
    try:
        out = _run(ops, {ops["x"]: [[2.0, 3.0]]}, [ops["total"]])
    finally:
        del sess.run
    np.testing.assert_allclose(out[0], [5.0], rtol=1e-6, atol=1e-6)
    assert calls == [1]


def test_closed_session_raises(graph_ops):
    ops = graph_ops
    _run(ops, {ops["x"]: [[2.0, 3.0]]}, [ops["total"]])  # caches a callable
    ops["sess"].close()
    with pytest.raises(RuntimeError, match="callable_test.*closed Session"):
        _run(ops, {ops["x"]: [[2.0, 3.0]]}, [ops["total"]])
