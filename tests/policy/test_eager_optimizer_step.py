"""The eager TF policy steps tf_keras' own optimizers through one traced update (issue 19).

``rlpolicy.policy._eager.learning.apply_gradients`` runs an eager Keras
optimizer's update as a cached ``tf.function``: these tests check the result
against a numpy Adam, that the step is traced once across calls, that a
learning-rate change still applies, and that user subclasses stay eager.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.tf, pytest.mark.tf_eager_code]

SHAPES = [(3, 4), (4,)]


@pytest.fixture
def tf(tf_modules):
    return tf_modules[1]


def _numpy_adam(w, grads, lr, b1=0.9, b2=0.999, eps=1e-7):
    """Keras' Adam update, in numpy: alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)."""
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        alpha = lr[t - 1] * np.sqrt(1 - b2**t) / (1 - b1**t)
        w = w - alpha * m / (np.sqrt(v) + eps)
    return w


def _setup(tf, opt_cls=None):
    from rlpolicy.utils.framework import get_keras

    rng = np.random.default_rng(0)
    start = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    variables = [tf.Variable(w) for w in start]
    opt = (opt_cls or get_keras().optimizers.Adam)(learning_rate=0.1)
    opt.build(variables)
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(3)]
    return start, variables, opt, grads


def test_traced_keras_adam_step_matches_numpy_and_traces_once(tf):
    from rlpolicy.policy._eager import learning

    start, variables, opt, grads = _setup(tf)
    lrs = [0.1, 0.1, 0.02]
    steps = learning.ApplySteps()  # the policy's holder of its traced updates
    for step, gs in enumerate(grads):
        if step == 2:
            opt.learning_rate = 0.02  # a schedule's change reaches the traced step
        learning.step_optimizers([opt], [(tf.constant(g), v) for g, v in zip(gs, variables)], False, steps)
    for i, var in enumerate(variables):
        want = _numpy_adam(start[i], [gs[i] for gs in grads], lrs)
        np.testing.assert_allclose(var.numpy(), want, atol=1e-5)
    ((_, step_fn),) = steps.steps.values()
    assert step_fn.experimental_get_tracing_count() == 1
    assert int(opt.iterations.numpy()) == 3


def test_none_gradients_skip_their_variables(tf):
    from rlpolicy.policy._eager import learning

    start, variables, opt, grads = _setup(tf)
    learning.step_optimizers(
        [opt], [(tf.constant(grads[0][0]), variables[0]), (None, variables[1])], multi=False
    )
    np.testing.assert_array_equal(variables[1].numpy(), start[1])
    want = _numpy_adam(start[0], [grads[0][0]], [0.1])
    np.testing.assert_allclose(variables[0].numpy(), want, atol=1e-5)


def test_user_optimizer_subclass_runs_eagerly(tf):
    from rlpolicy.policy._eager import learning
    from rlpolicy.utils.framework import get_keras

    calls = []

    class CountingAdam(get_keras().optimizers.Adam):
        def apply_gradients(self, grads_and_vars, *args, **kwargs):
            calls.append(tf.executing_eagerly())  # Python side effect, every call
            return super().apply_gradients(grads_and_vars, *args, **kwargs)

    _, variables, opt, grads = _setup(tf, CountingAdam)
    steps = learning.ApplySteps()
    for gs in grads:
        learning.step_optimizers([opt], [(tf.constant(g), v) for g, v in zip(gs, variables)], False, steps)
    assert calls == [True, True, True]
    assert steps.steps == {}
