"""A single-process sampler: steps gymnasium envs with one policy and returns
postprocessed trajectories as one ``SampleBatch``.

Each environment keeps its own trajectory; a trajectory is cut at an episode's
end (terminated or truncated) or at the end of a rollout fragment, turned into a
``SampleBatch`` and handed to ``policy.postprocess_trajectory`` exactly once, as
RLlib's samplers do. ``dones`` is ``terminateds or truncateds``; postprocessing
bootstraps the value of truncated and unfinished fragments.
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional

import numpy as np
import tree

from rlpolicy.policy.sample_batch import SampleBatch, concat_samples

_EPISODE_IDS = itertools.count(np.random.randint(0, 2**31 - 1))


@dataclass
class _Trajectory:
    """Columns of one env's current trajectory fragment, appended step by step."""

    eps_id: int
    unroll_id: int
    t0: int
    columns: Dict[str, List[Any]] = field(default_factory=dict)

    def add(self, **values: Any) -> None:
        for key, value in values.items():
            self.columns.setdefault(key, []).append(value)

    def __len__(self) -> int:
        return len(self.columns.get(SampleBatch.OBS, ()))


@dataclass
class _EnvSlot:
    env: Any
    obs: Any
    state: List[np.ndarray]
    prev_action: Any
    prev_reward: float
    episode_return: float = 0.0
    episode_length: int = 0
    traj: Optional[_Trajectory] = None


class RolloutWorker:
    """Collects experience from ``num_envs`` copies of an environment.

    Args:
        env_creator: Callable returning a gymnasium environment.
        policy: The policy computing actions (any ``Policy``).
        num_envs: Environments stepped in lock-step, batched through the policy.
        rollout_fragment_length: Steps taken per environment in one ``sample()``.
        seed: Seed of the environments' first reset.
        explore: Passed to ``compute_actions`` (None: the policy's config).
    """

    def __init__(self, env_creator: Callable[[], Any], policy: Any, *, num_envs: int = 1,
                 rollout_fragment_length: int = 200, seed: Optional[int] = None,
                 explore: Optional[bool] = None):
        if num_envs < 1 or rollout_fragment_length < 1:
            raise ValueError(
                f"num_envs ({num_envs}) and rollout_fragment_length ({rollout_fragment_length}) must be >= 1"
            )
        self.policy = policy
        self.num_envs = num_envs
        self.rollout_fragment_length = rollout_fragment_length
        self.explore = explore
        self._unroll_ids = itertools.count()
        self.episode_returns: Deque[float] = deque(maxlen=100)
        self.episode_lengths: Deque[int] = deque(maxlen=100)
        self.total_env_steps = 0
        self._slots = [self._new_slot(env_creator(), seed if seed is None else seed + i)
                       for i in range(num_envs)]

    def _new_slot(self, env: Any, seed: Optional[int]) -> _EnvSlot:
        obs, _ = env.reset(seed=seed)
        slot = _EnvSlot(env=env, obs=obs, state=[], prev_action=None, prev_reward=0.0)
        self._start_episode(slot)
        return slot

    def _start_episode(self, slot: _EnvSlot) -> None:
        slot.state = [np.asarray(s) for s in self.policy.get_initial_state()]
        slot.prev_action = _zeros_like_space_sample(self.policy.action_space)
        slot.prev_reward = 0.0
        slot.episode_return, slot.episode_length = 0.0, 0
        slot.traj = _Trajectory(eps_id=next(_EPISODE_IDS), unroll_id=next(self._unroll_ids), t0=0)

    def sample(self) -> SampleBatch:
        """Steps every env ``rollout_fragment_length`` times; returns the postprocessed batch."""
        done_batches: List[SampleBatch] = []
        for _ in range(self.rollout_fragment_length):
            done_batches.extend(self._step_all())
        for slot in self._slots:  # cut unfinished fragments (bootstrapped later)
            if slot.traj is not None and len(slot.traj):
                done_batches.append(self._finish(slot.traj))
                slot.traj = _Trajectory(eps_id=slot.traj.eps_id, unroll_id=next(self._unroll_ids),
                                        t0=slot.episode_length)
        return concat_samples(done_batches)

    def _step_all(self) -> List[SampleBatch]:
        slots = self._slots
        obs_batch = np.stack([s.obs for s in slots])
        state_batches = [np.stack([s.state[i] for s in slots]) for i in range(len(slots[0].state))]
        prev_actions = _stack([s.prev_action for s in slots])
        prev_rewards = np.asarray([s.prev_reward for s in slots], dtype=np.float32)
        actions, state_out, extra = self.policy.compute_actions(
            obs_batch, state_batches=state_batches or None, prev_action_batch=prev_actions,
            prev_reward_batch=prev_rewards, explore=self.explore,
        )
        finished = []
        for i, slot in enumerate(slots):
            action = tree.map_structure(lambda a: a[i], actions)
            new_obs, reward, terminated, truncated, _ = slot.env.step(_env_action(action))
            row = {
                SampleBatch.OBS: slot.obs, SampleBatch.ACTIONS: action,
                SampleBatch.REWARDS: np.float32(reward), SampleBatch.NEXT_OBS: new_obs,
                SampleBatch.DONES: bool(terminated or truncated),
                SampleBatch.TERMINATEDS: bool(terminated), SampleBatch.TRUNCATEDS: bool(truncated),
                SampleBatch.PREV_ACTIONS: slot.prev_action,
                SampleBatch.PREV_REWARDS: np.float32(slot.prev_reward),
                SampleBatch.T: slot.episode_length,
                **{k: v[i] for k, v in extra.items()},
            }
            for j, s in enumerate(slot.state):
                row[f"state_in_{j}"] = s
                row[f"state_out_{j}"] = np.asarray(state_out[j][i])
            slot.traj.add(**row)
            slot.state = [np.asarray(s[i]) for s in state_out]
            slot.prev_action, slot.prev_reward = action, float(reward)
            slot.episode_return += float(reward)
            slot.episode_length += 1
            slot.obs = new_obs
            self.total_env_steps += 1
            if terminated or truncated:
                finished.append(self._finish(slot.traj))
                self.episode_returns.append(slot.episode_return)
                self.episode_lengths.append(slot.episode_length)
                slot.obs, _ = slot.env.reset()
                self._start_episode(slot)
        return finished

    def _finish(self, traj: _Trajectory) -> SampleBatch:
        n = len(traj)
        cols = {k: _stack(v) for k, v in traj.columns.items()}
        cols[SampleBatch.EPS_ID] = np.full(n, traj.eps_id, dtype=np.int64)
        cols[SampleBatch.UNROLL_ID] = np.full(n, traj.unroll_id, dtype=np.int64)
        cols[SampleBatch.AGENT_INDEX] = np.zeros(n, dtype=np.int64)
        batch = SampleBatch(cols)
        return self.policy.postprocess_trajectory(batch)

    def metrics(self) -> Dict[str, float]:
        """Mean return / length over the last 100 finished episodes."""
        returns = list(self.episode_returns)
        return {
            "episode_reward_mean": float(np.mean(returns)) if returns else float("nan"),
            "episode_len_mean": float(np.mean(self.episode_lengths)) if returns else float("nan"),
            "episodes_total": len(returns),
            "timesteps_total": self.total_env_steps,
        }

    def set_weights(self, weights: dict, global_vars: Optional[dict] = None) -> None:
        self.policy.set_weights(weights)
        if global_vars:
            self.policy.on_global_var_update(global_vars)

    def get_weights(self) -> dict:
        return self.policy.get_weights()


def _stack(values: List[Any]) -> Any:
    first = values[0]
    if isinstance(first, dict):
        return {k: _stack([v[k] for v in values]) for k in first}
    if isinstance(first, tuple):
        return tuple(_stack([v[i] for v in values]) for i in range(len(first)))
    return np.stack([np.asarray(v) for v in values])


def _env_action(action: Any) -> Any:
    if isinstance(action, np.ndarray) and action.ndim == 0:
        return action.item()
    return action


def _zeros_like_space_sample(space: Any) -> Any:
    return tree.map_structure(lambda x: np.zeros_like(np.asarray(x)), space.sample())
