"""``check_env`` (RLlib's ``utils.pre_checks.env``) on 1.x-style user envs, gymnasium API."""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.env.multi_agent_env import MultiAgentEnv
from rlpolicy.utils import check_env  # 1.11 re-exports it from ray.rllib.utils


class CorridorEnv(gym.Env):
    """A walk along a corridor; ``fault`` breaks one thing on purpose."""

    def __init__(self, fault=None):
        self.observation_space = gym.spaces.Box(0.0, 10.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.fault, self.pos = fault, 0.0

    def reset(self, *, seed=None, options=None):
        self.pos = 0.0
        obs = np.array([self.pos], np.float32)
        if self.fault == "old_reset":
            return obs
        return obs, (None if self.fault == "reset_info" else {})

    def step(self, action):
        self.pos += float(action)
        obs = np.array([99.0 if self.fault == "obs_out_of_space" else self.pos], np.float32)
        reward = {"reward_str": "1", "reward_bool": True}.get(self.fault, 1.0)
        terminated = 0 if self.fault == "int_done" else self.pos >= 5
        info = None if self.fault == "info" else {}
        if self.fault == "old_step":
            return obs, reward, terminated, info
        return obs, reward, terminated, False, info


def test_good_envs_pass():
    check_env(CorridorEnv())
    check_env(gym.make("CartPole-v1"))


@pytest.mark.parametrize(
    "fault, exc, match",
    [
        ("old_reset", ValueError, r"reset\(\) returned ndarray; gymnasium's API is reset\(\*, seed=None"),
        (
            "old_step",
            ValueError,
            r"step\(\) returned a 4-tuple; gymnasium's API is step\(action\) -> \(obs, reward, "
            r"terminated, truncated, info\)",
        ),
        (
            "obs_out_of_space",
            ValueError,
            r"observation from step\(sampled_action\) is not in the env's observation",
        ),
        ("reward_str", AssertionError, "reward from step\\(\\) must be an int or float, got '1'"),
        ("reward_bool", AssertionError, "reward from step\\(\\) must be an int or float, got True"),
        ("int_done", AssertionError, "terminated flag from step\\(\\) must be a bool, got 0"),
        ("info", AssertionError, "info from step\\(\\) must be a dict, got NoneType"),
        ("reset_info", AssertionError, "info from reset\\(\\) must be a dict"),
    ],
)
def test_faulty_env(fault, exc, match):
    with pytest.raises(exc, match=match):
        check_env(CorridorEnv(fault))


def test_not_an_env_and_missing_spaces():
    with pytest.raises(ValueError, match="gymnasium.Env or a MultiAgentEnv, got object"):
        check_env(object())
    env = CorridorEnv()
    env.observation_space = None
    with pytest.raises(AttributeError, match="observation_space"):
        check_env(env)
    env = CorridorEnv()
    env.action_space = [0, 1]
    with pytest.raises(ValueError, match="action_space must be a gymnasium.spaces.Space, got list"):
        check_env(env)


class TwoAgentEnv(MultiAgentEnv):
    """Two agents that each observe their own counter."""

    def __init__(self, fault=None):
        super().__init__()
        self._agent_ids = {"a", "b"}
        self.observation_space = gym.spaces.Box(0.0, 10.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.fault = fault

    def reset(self, *, seed=None, options=None):
        obs = {"a": np.zeros(1, np.float32), "b": np.zeros(1, np.float32)}
        if self.fault == "stranger":
            obs["c"] = np.zeros(1, np.float32)
        return obs if self.fault == "old_reset" else (obs, {})

    def step(self, action_dict):
        obs = {aid: np.array([float(a)], np.float32) for aid, a in action_dict.items()}
        if self.fault == "obs_out_of_space":
            obs["b"] = np.array([-3.0], np.float32)
        terminateds = {"a": False, "b": False}
        if self.fault != "no_all":
            terminateds["__all__"] = False
        rewards = {"a": 1.0, "b": None if self.fault == "reward" else 0.5}
        return obs, rewards, terminateds, {"__all__": False}, {"a": {}, "b": {}}


def test_good_multiagent_env_passes():
    check_env(TwoAgentEnv())


@pytest.mark.parametrize(
    "fault, exc, match",
    [
        (
            "old_reset",
            ValueError,
            r"reset\(\) returned dict; gymnasium's API is reset\(\*, seed=None, options=None\) "
            r"-> \(obs, infos\)",
        ),
        (
            "stranger",
            ValueError,
            r"reset\(\) obs has keys \['c'\] that are not agent ids of the env \(\['a', 'b'\]\)",
        ),
        ("no_all", ValueError, "terminateds must have the key '__all__'"),
        ("obs_out_of_space", ValueError, r"observation from step\(sampled_actions\) for agent 'b' is not in"),
        ("reward", AssertionError, r"reward from step\(\) for agent 'b' must be an int or float, got None"),
    ],
)
def test_faulty_multiagent_env(fault, exc, match):
    with pytest.raises(exc, match=match):
        check_env(TwoAgentEnv(fault))
