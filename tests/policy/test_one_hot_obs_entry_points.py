"""A policy a RolloutWorker built for a Discrete / MultiDiscrete env works on the
one-hot Box (RLlib 1.11's preprocessor); outside the worker (evaluation, export
checks, user code) it is handed the env's raw integer observations and must
encode them the way the worker did."""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.evaluation.rollout_worker import worker_observation_space

torch = pytest.importorskip("torch")

from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy  # noqa: E402


def _policy(obs_space):
    torch.manual_seed(0)
    return PGTorchPolicy(
        worker_observation_space(obs_space), gym.spaces.Discrete(3), {"model": {"fcnet_hiddens": [8]}}
    )


def _greedy_logits(policy, obs):
    _, _, extra = policy.compute_actions(obs, explore=False)
    return extra["action_dist_inputs"]


def test_raw_discrete_observations_are_one_hot_encoded():
    policy = _policy(gym.spaces.Discrete(5))
    raw = np.array([3, 0, 4])
    hand = np.eye(5, dtype=np.float32)[raw]  # hand-made one-hot rows
    np.testing.assert_allclose(_greedy_logits(policy, raw), _greedy_logits(policy, hand), atol=1e-6)
    np.testing.assert_allclose(_greedy_logits(policy, [3, 0, 4]), _greedy_logits(policy, hand), atol=1e-6)
    a_raw, _, e_raw = policy.compute_single_action(2, explore=False)
    a_hot, _, e_hot = policy.compute_single_action(np.eye(5, dtype=np.float32)[2], explore=False)
    assert a_raw == a_hot
    np.testing.assert_allclose(e_raw["action_dist_inputs"], e_hot["action_dist_inputs"], atol=1e-6)


def test_raw_multi_discrete_observations_are_one_hot_encoded():
    policy = _policy(gym.spaces.MultiDiscrete([2, 3]))
    raw = np.array([[1, 2], [0, 0]])
    hand = np.array([[0, 1, 0, 0, 1], [1, 0, 1, 0, 0]], np.float32)
    np.testing.assert_allclose(_greedy_logits(policy, raw), _greedy_logits(policy, hand), atol=1e-6)


def test_out_of_space_raw_observation_is_named():
    policy = _policy(gym.spaces.Discrete(5))
    with pytest.raises(ValueError, match=r"row 0 holds \[5\], outside Discrete\(5\)"):
        policy.compute_actions(np.array([5]))


def test_cli_evaluation_plays_a_worker_built_policy_on_the_raw_env():
    from rlpolicy.cli.training import evaluate_policy

    policy = _policy(gym.spaces.Discrete(16))
    returns = evaluate_policy(policy, lambda: gym.make("FrozenLake-v1"), num_episodes=3)
    assert len(returns) == 3 and all(r in (0.0, 1.0) for r in returns)
