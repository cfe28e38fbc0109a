"""Tiny environments for the RolloutWorker / WorkerSet tests (no Ray needed to import)."""

import os

import gymnasium as gym
import numpy as np

from rlpolicy.env.multi_agent_env import MultiAgentEnv

OBS_SPACE = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)


class CountingEnv(gym.Env):
    """obs = [t, last action]; reward = t (after the step); ends after ``length`` steps,
    terminated or (``truncate=True``) truncated. ``reset`` draws nothing: fully deterministic."""

    observation_space = OBS_SPACE
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length=5, truncate=False):
        self.length, self.truncate = length, truncate
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        obs = np.array([float(self.t), float(action)], np.float32)
        return obs, float(self.t), end and not self.truncate, end and self.truncate, {"t": self.t}


class NoisyEnv(CountingEnv):
    """CountingEnv whose first observation is random (drawn from the env's seeded RNG)."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.normal(size=2).astype(np.float32), {}


class CrashingEnv(CountingEnv):
    """CountingEnv for Ray tests: when ``arm_file`` exists (and ``done_file`` not yet),
    the env of worker ``crash_worker`` kills its whole process in the middle of a
    fragment (after writing ``done_file``, so the recreated worker runs normally)."""

    def __init__(self, config):
        super().__init__(length=config.get("length", 5))
        self.config = config
        self.worker_index = getattr(config, "worker_index", 0)

    def step(self, action):
        cfg = self.config
        if (
            self.worker_index == cfg.get("crash_worker")
            and cfg.get("arm_file")
            and os.path.exists(cfg["arm_file"])
            and not os.path.exists(cfg["done_file"])
        ):
            with open(cfg["done_file"], "w") as f:
                f.write(str(os.getpid()))
            os._exit(1)
        return super().step(action)


class TwoTeamEnv(MultiAgentEnv):
    """Three agents: ``"red_0"``, ``"red_1"`` and ``"blue_0"``; obs = [team code, t]
    (red 1.0, blue 2.0), reward = team code. ``red_1`` is terminated after 2 steps,
    the episode ends for all after ``length`` steps."""

    observation_space = OBS_SPACE
    action_space = gym.spaces.Discrete(2)
    CODES = {"red_0": 1.0, "red_1": 1.0, "blue_0": 2.0}

    def __init__(self, config=None):
        super().__init__()
        self.length = (config or {}).get("length", 4)
        self._agent_ids = set(self.CODES)
        self.t = 0

    def _obs(self, agent):
        return np.array([self.CODES[agent], float(self.t)], np.float32)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {a: self._obs(a) for a in self.CODES}, {a: {} for a in self.CODES}

    def step(self, action_dict):
        self.t += 1
        over = self.t >= self.length
        obs = {a: self._obs(a) for a in action_dict}
        rewards = {a: self.CODES[a] for a in action_dict}
        terms = {a: over or (a == "red_1" and self.t >= 2) for a in action_dict}
        terms["__all__"] = over
        return obs, rewards, terms, {"__all__": False}, {a: {} for a in action_dict}


def team_mapping_fn(agent_id, episode, worker=None, **kwargs):
    """red_* -> policy "red", blue_* -> policy "blue"."""
    return agent_id.split("_")[0]
