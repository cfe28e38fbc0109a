"""rlpolicy.utils.tf_run_builder.TFRunBuilder in a private tf1.Graph."""

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.utils.tf_run_builder import TFRunBuilder  # noqa: E402

pytestmark = pytest.mark.tf


@pytest.fixture
def graph_ops(tf_modules):
    tf1, tf = tf_modules
    graph = tf1.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None], name="x")
        y = tf1.placeholder(tf.float32, [None], name="y")
        counter = tf1.get_variable("counter", initializer=np.float32(0.0))
        inc = tf1.assign_add(counter, 1.0)
        sess = tf1.Session(graph=graph)
        sess.run(tf1.global_variables_initializer())
        yield {"x": x, "y": y, "sum": x + y, "prod": x * y, "inc": inc, "sess": sess, "counter": counter}
        sess.close()


def test_fetch_indices_and_single_run(graph_ops):
    ops = graph_ops
    builder = TFRunBuilder(ops["sess"], "test_run")
    builder.add_feed_dict({ops["x"]: [1.0, 2.0]})
    builder.add_feed_dict({ops["y"]: [3.0, 4.0]})
    assert builder.add_fetches([ops["sum"], ops["prod"]]) == [0, 1]
    assert builder.add_fetches([ops["inc"]]) == [2]
    np.testing.assert_allclose(builder.get(1), [3.0, 8.0], rtol=1e-6, atol=1e-6)
    out = builder.get([0, (1, 2)])
    np.testing.assert_allclose(out[0], [4.0, 6.0], rtol=1e-6, atol=1e-6)
    assert isinstance(out[1], tuple) and out[1][1] == 1.0
    # The session ran exactly once (the counter was incremented once).
    assert ops["sess"].run(ops["counter"]) == 1.0


@pytest.mark.parametrize(
    "action, exc, match",
    [
        ("double_feed", ValueError, "added twice"),
        ("bad_fetch", ValueError, "unsupported fetch type"),
        ("feed_after_run", RuntimeError, "after the run"),
        ("fetch_after_run", RuntimeError, "after the run"),
    ],
)
def test_errors(graph_ops, action, exc, match):
    ops = graph_ops
    builder = TFRunBuilder(ops["sess"], "my_debug_name")
    builder.add_feed_dict({ops["x"]: [1.0], ops["y"]: [1.0]})
    builder.add_fetches([ops["sum"]])
    with pytest.raises(exc, match=match) as info:
        if action == "double_feed":
            builder.add_feed_dict({ops["x"]: [2.0]})
        elif action == "bad_fetch":
            builder.get("0")
        else:
            builder.get(0)
            if action == "feed_after_run":
                builder.add_feed_dict({ops["prod"]: [1.0]})
            else:
                builder.add_fetches([ops["prod"]])
    assert "my_debug_name" in str(info.value)


def test_session_error_names_the_run(graph_ops, tf_modules):
    _, tf = tf_modules
    ops = graph_ops
    builder = TFRunBuilder(ops["sess"], "compute_gradients")
    builder.add_feed_dict({ops["x"]: [1.0]})  # y not fed
    builder.add_fetches([ops["sum"]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="compute_gradients"):
        builder.get(0)


def test_timeline_dir(graph_ops, tmp_path, monkeypatch):
    monkeypatch.setenv("TF_TIMELINE_DIR", str(tmp_path))
    ops = graph_ops
    builder = TFRunBuilder(ops["sess"], "traced")
    builder.add_feed_dict({ops["x"]: [1.0], ops["y"]: [2.0]})
    idx = builder.add_fetches([ops["sum"]])
    np.testing.assert_allclose(builder.get(idx), [[3.0]], rtol=1e-6, atol=1e-6)
    files = list(tmp_path.glob("timeline-traced-*.json"))
    assert len(files) == 1 and files[0].stat().st_size > 0


def test_python_side_error_names_the_run(graph_ops):
    ops = graph_ops
    builder = TFRunBuilder(ops["sess"], "learn_on_batch")
    builder.add_feed_dict({ops["x"]: ["not-a-number"], ops["y"]: [1.0]})
    builder.add_fetches([ops["sum"]])
    with pytest.raises((ValueError, TypeError), match="learn_on_batch") as info:
        builder.get(0)
    assert info.value.__cause__ is not None  # the original error is chained


class _TwoArgError(Exception):
    """An error whose constructor needs two arguments: _renamed cannot re-create it."""

    def __init__(self, code, text):
        super().__init__(f"{code}: {text}")


class _NoNotesError(_TwoArgError):
    """As on Python 3.10, which has no BaseException.add_note."""

    @property
    def add_note(self):
        raise AttributeError("add_note")


def test_renamed_error_keeps_an_error_it_cannot_recreate():
    from rlpolicy.utils.tf_run_builder import _renamed

    e = _TwoArgError(7, "boom")
    assert _renamed(e, "step") is e
    if hasattr(BaseException, "add_note"):  # Python 3.11+: the run's name is noted on it
        assert e.__notes__ == ["TFRunBuilder('step') run failed"]
    # Without add_note (Python 3.10) the same error comes back, instead of an AttributeError.
    e10 = _NoNotesError(7, "boom")
    assert _renamed(e10, "step") is e10
    assert not hasattr(e10, "__notes__")
