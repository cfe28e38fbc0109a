"""Policies whose ``compute_actions`` handles one observation, as RLlib 1.11's ES and
ARS policies do (they take ``observation[0]`` and return one action).

1.11 samples them with one sub-env and one agent (ES/ARS force
``num_envs_per_worker=1``); handed several observations at once, its sampler fails
with an IndexError. rlpolicy samples them the same way and, for a batch, raises an
error that says why. Expected actions: obs[0] > 0 -> 1, worked out from the env.
"""

import gymnasium as gym
import numpy as np
import pytest
from sampling_policies import ActOnlyPolicy

from rlpolicy.evaluation.rollout_worker import RolloutWorker


class SingleObsPolicy(ActOnlyPolicy):
    def compute_actions(self, observation, add_noise=False, update=True, **kwargs):
        observation = observation[0]  # (1.11's ES: "we always calculate actions for only a single obs")
        return [int(observation[0] > 0)], [], {}


class SignEnv(gym.Env):
    """obs = [+1 or -1 alternating, 0]; reward 1."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.sign = 1.0
        return np.array([self.sign, 0.0], np.float32), {}

    def step(self, action):
        self.sign = -self.sign
        return np.array([self.sign, 0.0], np.float32), 1.0, False, False, {}


def _worker(num_envs):
    return RolloutWorker(
        env_creator=lambda: SignEnv(),
        policy_spec=SingleObsPolicy,
        rollout_fragment_length=4,
        num_envs=num_envs,
    )


def test_one_env_samples_one_observation_at_a_time():
    batch = _worker(1).sample()
    assert batch["actions"].tolist() == [1, 0, 1, 0]
    policy = _worker(1).get_policy()
    assert int(policy.compute_single_action(np.array([0.5, 0.0], np.float32))[0]) == 1
    assert int(policy.compute_single_action(np.array([-0.5, 0.0], np.float32))[0]) == 0


def test_several_observations_at_once_say_why_they_fail():
    with pytest.raises(
        ValueError, match=r"SingleObsPolicy.compute_actions returned 1 action\(s\) for 2 observations"
    ):
        _worker(2).sample()
