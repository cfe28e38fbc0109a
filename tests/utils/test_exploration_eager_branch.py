"""Eager TF explorations take the ``explore`` branch in Python (issue 19).

While TF executes eagerly and ``explore`` is known (a Python bool or an eager
scalar), StochasticSampling and EpsilonGreedy compute only the ops of the taken
branch. These tests check that the results are the ones the tf.cond path gives
(numpy references on fixed logits), that the timestep state still advances, and
that the untaken branch's ops are not run (counted with a TF op callback).
"""

from __future__ import annotations

import collections

import gymnasium as gym
import numpy as np
import pytest

pytestmark = [pytest.mark.tf, pytest.mark.tf_eager_code]

LOGITS = np.array([[2.0, -1.0, 0.5], [-3.0, 1.5, 1.0], [0.0, 0.0, 4.0]], np.float32)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


@pytest.fixture
def tf(tf_modules):
    return tf_modules[1]


def _dist(tf, logits=LOGITS):
    from rlpolicy.models.tf.tf_action_dist import Categorical

    return Categorical(tf.convert_to_tensor(logits), None)


def _stochastic(random_timesteps=0):
    from rlpolicy.utils.exploration.stochastic_sampling import StochasticSampling

    return StochasticSampling(
        gym.spaces.Discrete(3),
        framework="tf2",
        model=None,
        policy_config={},
        num_workers=0,
        worker_index=0,
        random_timesteps=random_timesteps,
    )


def _ops_run(fn):
    """(fn's result, Counter of the op types TF executed while it ran)."""
    from tensorflow.python.framework import op_callbacks

    seen: collections.Counter = collections.Counter()

    def callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        seen[op_type if isinstance(op_type, str) else op_type.decode()] += 1

    op_callbacks.add_op_callback(callback)
    try:
        out = fn()
    finally:
        op_callbacks.remove_op_callback(callback)
    return out, seen


@pytest.mark.parametrize("flag", ["python", "tensor"])
def test_stochastic_sampling_explore_samples_with_their_logp(tf, flag):
    exp = _stochastic()
    explore = True if flag == "python" else tf.constant(True)
    tf.random.set_seed(3)
    dist = _dist(tf)  # (a TF distribution draws its sample when built)
    (actions, logp), ops_run = _ops_run(
        lambda: exp.get_exploration_action(action_distribution=dist, timestep=None, explore=explore)
    )
    actions, logp = actions.numpy(), logp.numpy()
    assert actions.shape == (3,) and set(actions) <= {0, 1, 2}
    np.testing.assert_allclose(logp, _log_softmax(LOGITS)[np.arange(3), actions], atol=1e-5)
    # Only the sampling branch ran: no argmax, no zero logps, no branch selection.
    for op in ("ArgMax", "Fill", "Less", "LogicalAnd", "LogicalNot", "StridedSlice"):
        assert ops_run[op] == 0, (op, dict(ops_run))
    assert exp.last_timestep.numpy() == 1


def test_stochastic_sampling_traced_keeps_the_tensor_branches(tf):
    """Inside a tf.function ``explore`` is a tensor: one trace serves both values."""
    exp = _stochastic()

    @tf.function
    def traced(x, explore):
        return exp.get_exploration_action(action_distribution=_dist(tf, x), timestep=None, explore=explore)

    logits = tf.constant(np.tile(LOGITS, (20, 1)))
    actions, logp = traced(logits, tf.constant(True))
    np.testing.assert_allclose(
        logp.numpy(), _log_softmax(logits.numpy())[np.arange(60), actions.numpy()], atol=1e-5
    )
    greedy, zeros = traced(logits, tf.constant(False))
    np.testing.assert_array_equal(greedy.numpy(), np.tile([0, 1, 2], 20))
    np.testing.assert_array_equal(zeros.numpy(), np.zeros(60, np.float32))
    assert traced.experimental_get_tracing_count() == 1
    assert exp.last_timestep.numpy() == 2


@pytest.mark.parametrize("flag", [False, "tensor"])
def test_stochastic_sampling_no_explore_is_argmax_with_zero_logp(tf, flag):
    exp = _stochastic()
    explore = tf.constant(False) if flag == "tensor" else False
    dist = _dist(tf)
    (actions, logp), ops_run = _ops_run(
        lambda: exp.get_exploration_action(
            action_distribution=dist, timestep=tf.constant(7, tf.int64), explore=explore
        )
    )
    np.testing.assert_array_equal(actions.numpy(), [0, 1, 2])
    assert logp.numpy().dtype == np.float32
    np.testing.assert_array_equal(logp.numpy(), np.zeros(3, np.float32))
    for op in ("Less", "LogicalAnd", "LogicalNot", "Fill", "Identity"):
        assert ops_run[op] == 0, (op, dict(ops_run))
    assert exp.last_timestep.numpy() == 7


def test_stochastic_sampling_random_phase_then_sampling(tf):
    """random_timesteps=3: timesteps 1 and 2 are in the random phase (logp 0), 3 samples."""
    exp = _stochastic(random_timesteps=3)
    # Logits that make one action near-certain: sampling always gives it.
    logits = np.array([[-50.0, 50.0, -50.0]] * 64, np.float32)
    seen_random = []
    for step in range(1, 5):
        actions, logp = exp.get_exploration_action(
            action_distribution=_dist(tf, logits), timestep=None, explore=True
        )
        assert exp.last_timestep.numpy() == step
        if step < 3:
            np.testing.assert_array_equal(logp.numpy(), np.zeros(64, np.float32))
            seen_random.append(set(actions.numpy()))
        else:
            np.testing.assert_array_equal(actions.numpy(), np.ones(64))
            np.testing.assert_allclose(logp.numpy(), np.zeros(64), atol=1e-5)  # log(~1)
    # Uniform draws over 3 actions in 64 rows cover more than the near-certain one.
    assert all(len(s) > 1 for s in seen_random)


def test_stochastic_sampling_timestep_given_as_python_int(tf):
    exp = _stochastic(random_timesteps=5)
    logits = np.array([[-50.0, 50.0, -50.0]] * 8, np.float32)
    actions, _ = exp.get_exploration_action(action_distribution=_dist(tf, logits), timestep=10, explore=True)
    np.testing.assert_array_equal(actions.numpy(), np.ones(8))  # past the random phase
    assert exp.last_timestep.numpy() == 10


def test_epsilon_greedy_eager_branches(tf):
    from rlpolicy.utils.exploration.epsilon_greedy import EpsilonGreedy

    exp = EpsilonGreedy(
        gym.spaces.Discrete(3),
        framework="tf2",
        model=None,
        policy_config={},
        num_workers=0,
        worker_index=0,
        initial_epsilon=1.0,
        final_epsilon=1.0,
        epsilon_timesteps=10,
    )
    logits = np.tile(LOGITS, (40, 1))
    dist = _dist(tf, logits)
    (greedy, logp), ops_run = _ops_run(
        lambda: exp.get_exploration_action(action_distribution=dist, timestep=None, explore=False)
    )
    np.testing.assert_array_equal(greedy.numpy(), np.tile([0, 1, 2], 40))
    np.testing.assert_array_equal(logp.numpy(), np.zeros(120, np.float32))
    assert ops_run["Multinomial"] == 0 and ops_run["RandomUniform"] == 0, dict(ops_run)
    assert exp.last_timestep.numpy() == 1
    # epsilon = 1: every action is uniform over the 3 actions.
    actions, _ = exp.get_exploration_action(
        action_distribution=_dist(tf, logits), timestep=None, explore=tf.constant(True)
    )
    assert exp.last_timestep.numpy() == 2
    counts = np.bincount(actions.numpy(), minlength=3) / 120
    assert np.abs(counts - 1 / 3).max() < 0.15
