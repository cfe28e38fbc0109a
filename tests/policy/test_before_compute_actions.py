"""Exploration.before_compute_actions: the policies skip the base class's (it does
nothing) but call an override, class-level or set on the instance, once per
compute_actions with the call's explore flag and timestep."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np

from rlpolicy.utils.exploration.stochastic_sampling import StochasticSampling

CALLS: list = []


class RecordingSampling(StochasticSampling):
    """StochasticSampling that records each before_compute_actions call."""

    def before_compute_actions(self, *, timestep=None, explore=None, tf_sess=None, **kwargs):
        CALLS.append((int(timestep), bool(explore)))


def _policy(framework, exploration_type):
    from rlpolicy.agents.ppo.ppo import DEFAULT_CONFIG

    config = copy.deepcopy(DEFAULT_CONFIG)
    config.update(framework=framework, num_workers=0, exploration_config={"type": exploration_type})
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    act_space = gym.spaces.Discrete(2)
    if framework == "torch":
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

        return PPOTorchPolicy(obs_space, act_space, config)
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

    cls = PPOTFPolicy.as_eager() if framework == "tf2" else PPOTFPolicy
    return cls(obs_space, act_space, config)


def test_an_overriding_exploration_class_is_called_per_compute_actions(framework):
    policy = _policy(framework, RecordingSampling)
    obs = np.zeros((4, 3), np.float32)
    CALLS.clear()
    policy.compute_actions(obs, explore=False, timestep=7)
    policy.compute_actions(obs[:2])  # explore: config["explore"] (True); timestep: 4 rows so far
    assert CALLS == [(7, False), (4, True)]


def test_an_instance_level_hook_is_called_and_the_base_one_changes_nothing(framework):
    policy = _policy(framework, "StochasticSampling")
    obs = np.zeros((3, 3), np.float32)
    policy.compute_actions(obs)  # the base hook: skipped, the call still acts
    assert policy.global_timestep == 3
    seen = []
    policy.exploration.before_compute_actions = lambda **kw: seen.append(
        (int(kw["timestep"]), bool(kw["explore"]))
    )
    policy.compute_actions(obs, explore=True)
    assert seen == [(3, True)]
