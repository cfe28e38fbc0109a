"""The per-signature call cache of ``rlpolicy.policy._eager.tracing.make_traced``.

After a signature's first call, a traced helper runs TF's concrete function
for it directly (skipping tf.function's dispatch). These tests pin that the
cached path returns what the plain Python function computes (checked with
numpy), keeps nested outputs (None leaves included), counts traces the way
tf.function does, and never caches what it cannot key.
"""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rlpolicy.policy._eager.tracing import TraceCounter, make_traced, signature_key  # noqa: E402

pytestmark = pytest.mark.tf


def _body(batch, states, flag, scale):
    """A helper shaped like the policy's: a dict batch, a state list, Python constants."""
    out = batch["obs"] * scale + tf.cast(batch["actions"], tf.float32)[:, None]
    extra = {"sum": tf.reduce_sum(out), "none": None, "n_states": len(states)}
    return (out if flag else -out), [s + 1.0 for s in states], extra


def _args(rows, seed=0, states=()):
    rng = np.random.default_rng(seed)
    batch = {
        "obs": tf.constant(rng.normal(size=(rows, 2)).astype(np.float32)),
        "actions": tf.constant(rng.integers(0, 3, rows)),
    }
    return batch, [tf.constant(s) for s in states], True, tf.constant(2.0)


def _expected(batch, states, flag, scale):
    out = batch["obs"].numpy() * scale.numpy() + batch["actions"].numpy()[:, None]
    return (out if flag else -out), [s.numpy() + 1.0 for s in states]


@pytest.mark.tf_eager_code
def test_cached_calls_match_numpy_and_keep_structure():
    counter = TraceCounter("T", max_retraces=None)
    call = make_traced(_body, "body", counter)
    for seed in range(4):  # same signature: one trace, later calls use the cache
        args = _args(5, seed, states=[np.ones(3, np.float32)])
        out, states, extra = call(*args)
        want_out, want_states = _expected(*args)
        np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(states[0].numpy(), want_states[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(extra["sum"].numpy(), want_out.sum(), rtol=1e-5, atol=1e-5)
        assert extra["none"] is None
        assert int(extra["n_states"]) == 1
    assert counter.counts == {"body": 1}


@pytest.mark.tf_eager_code
def test_python_constants_and_shapes_select_their_own_trace():
    counter = TraceCounter("T", max_retraces=None)
    call = make_traced(_body, "body", counter)
    b, s, _, scale = _args(4)
    pos = call(b, s, True, scale)[0].numpy()
    neg = call(b, s, False, scale)[0].numpy()  # a new Python value: traced again
    np.testing.assert_allclose(neg, -pos, rtol=1e-6, atol=1e-6)
    assert counter.counts["body"] == 2
    np.testing.assert_allclose(call(b, s, True, scale)[0].numpy(), pos, rtol=1e-6, atol=1e-6)
    assert counter.counts["body"] == 2  # cached, not traced
    b7, s7, _, _ = _args(7, seed=3)
    want, _ = _expected(b7, s7, True, scale)
    np.testing.assert_allclose(call(b7, s7, True, scale)[0].numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.tf_eager_code
def test_cache_is_bounded():
    counter = TraceCounter("T", max_retraces=None)
    call = make_traced(lambda x: x * 2.0, "double", counter, max_cached=2)
    for rows in (1, 2, 3, 4, 1, 2):
        x = tf.ones((rows, 2))
        np.testing.assert_allclose(call(x).numpy(), np.full((rows, 2), 2.0), rtol=0, atol=0)
    # reduce_retracing generalises the batch size after the second shape, so
    # later sizes reuse that trace even after the cache was cleared.
    assert counter.counts["double"] <= 3


@pytest.mark.tf_eager_code
def test_signature_key():
    a, b = tf.zeros((2, 3)), tf.ones((2, 3))
    assert signature_key(({"x": a}, [a], None, True)) == signature_key(({"x": b}, [b], None, True))
    assert signature_key(({"x": a},)) != signature_key(({"y": a},))
    assert signature_key((a,)) != signature_key((tf.zeros((3, 3)),))
    assert signature_key((a,)) != signature_key((tf.zeros((2, 3), tf.float64),))
    assert signature_key((True,)) != signature_key((1,))
    assert signature_key((a, 1)) != signature_key((a, 2))
    # Things tf.function would treat differently (arrays, variables, objects): not keyed.
    assert signature_key((np.zeros(2),)) is None
    assert signature_key(([tf.Variable(1.0)],)) is None
    assert signature_key(({"x": object()},)) is None
    assert signature_key(({1: a, "b": a},)) is None


@pytest.mark.tf_eager_code
def test_to_numpy_copies_tensors_and_variables_without_sharing_memory():
    from rlpolicy.policy._eager.tracing import to_numpy

    var = tf.Variable([1.0, 2.0])
    tensor = tf.constant([[3, 4]])
    out = to_numpy({"v": var, "t": tensor, "s": tf.constant(5.0), "n": None, "a": np.ones(2)})
    assert type(out["v"]) is np.ndarray and type(out["t"]) is np.ndarray and type(out["s"]) is np.ndarray
    np.testing.assert_array_equal(out["v"], [1.0, 2.0])
    np.testing.assert_array_equal(out["t"], [[3, 4]])
    assert out["s"].shape == () and out["s"] == 5.0 and out["t"].dtype == np.int32
    assert out["n"] is None and type(out["a"]) is np.ndarray
    var.assign([7.0, 8.0])  # a later variable update does not reach the returned copy
    np.testing.assert_array_equal(out["v"], [1.0, 2.0])
    out["t"][0, 0] = 99  # nor does writing to the copy reach the tensor
    assert tensor.numpy()[0, 0] == 3
