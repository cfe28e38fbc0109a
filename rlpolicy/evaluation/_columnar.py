"""Columnar per-step buffers for the sampler's lean branch (issue 26).

When every sub-env is a single-agent env acting through one feed-forward policy
with plain (array) actions and default views, ``EnvRunner`` writes each tick's
observations, actions and extra outputs for all envs as whole rows of
``[ticks, envs, ...]`` columns, and each env's rewards, flags and infos into
its cell, instead of a row per agent in an ``AgentTrajectory``. A trajectory
piece is then env ``j``'s rows ``a..b`` of every column, sliced; the batch is
the same one ``AgentTrajectory.build_fragment`` gives (same columns, order,
dtypes and values). The trajectories stay the owners of their episode's ids
and are brought up to date (:meth:`ColumnarRun.materialize`) before anything
else reads them: at the end of ``sample()`` and when the branch is left.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy.policy.sample_batch import SampleBatch

_OBS, _ACTIONS, _REWARDS = SampleBatch.OBS, SampleBatch.ACTIONS, SampleBatch.REWARDS
_TERMS, _TRUNCS, _INFOS = SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS, SampleBatch.INFOS
# Columns AgentTrajectory.build_fragment builds whatever the view requirements say.
_BUILT = frozenset(
    [
        _OBS,
        _ACTIONS,
        _REWARDS,
        _TERMS,
        _TRUNCS,
        _INFOS,
        SampleBatch.NEXT_OBS,
        SampleBatch.PREV_ACTIONS,
        SampleBatch.PREV_REWARDS,
    ]
)
_META = frozenset(
    [SampleBatch.T, SampleBatch.EPS_ID, SampleBatch.AGENT_INDEX, SampleBatch.ENV_ID, SampleBatch.UNROLL_ID]
)


def lean_policy(policy: Any, plan: Any, initial_state: List[Any]) -> bool:
    """Whether ``policy``'s trajectories can live in columns: acts on the current
    observation only, keeps no RNN state, has a non-struct action space, and asks
    for no view column beyond those every trajectory gets (no shifted or range
    views of data columns, no renamed bookkeeping columns)."""
    cols = plan.action_columns
    if len(cols) != 1 or cols[0][1:] != (_OBS, "single", 0) or initial_state or plan.lookback != 1:
        return False
    if isinstance(getattr(policy, "action_space", None), (gym.spaces.Dict, gym.spaces.Tuple)):
        return False
    for col, req in policy.view_requirements.items():
        data_col = req.data_col or col
        if col.startswith(("state_in_", "state_out_")) or data_col.startswith("state_out_"):
            return False
        if col in _BUILT:
            if req.shift_from is not None and col in (
                SampleBatch.NEXT_OBS,
                SampleBatch.PREV_ACTIONS,
                SampleBatch.PREV_REWARDS,
            ):
                return False
            continue
        if data_col in _META:
            if col != data_col:
                return False
            continue
        if data_col == _OBS or data_col in (_ACTIONS, _REWARDS, _TERMS, _TRUNCS, _INFOS):
            return False
        # Another data column (an extra action output or a postprocessing column):
        # only its own unshifted values, which the columns hold.
        if col != data_col or req.shift_from is not None or int(req.shift) != 0:
            return False
    return True


class ColumnarRun:
    """One ``sample()`` call's columns for the sub-envs ``slots`` (each with one
    agent, trajectory ``trajs[j]``) acting through ``policy``.

    Row 0 holds each env's last step before the call (for ``prev_actions`` and
    ``prev_rewards``); tick ``k`` writes row ``k``. Per env: ``row0`` is the first
    row of its current piece, ``e0`` the episode step of that row, ``has_prev``
    whether the row before it belongs to the same episode, ``last`` the last row
    written."""

    def __init__(self, policy: Any, trajs: List[Any], capacity: int):
        n = len(trajs)
        self.policy = policy
        self.n = n
        self.capacity = max(2, capacity)
        self.trajs = list(trajs)
        self.cur_obs = [t.obs[-1] for t in trajs]
        self.cur_info = [t.last_info for t in trajs]
        self.final_obs: List[Any] = [None] * n  # next obs of each env's last written row
        self.row0 = [1] * n
        self.e0 = [t.t for t in trajs]
        self.has_prev = [t.t > 0 for t in trajs]
        self.last = [0] * n
        self.k = 0
        self.cols: Optional[Dict[str, np.ndarray]] = None
        self.step_keys: List[str] = []
        self._extra_keys: List[str] = []
        self._specs: List[Tuple[np.dtype, Tuple[int, ...]]] = []  # per step key: dtype, [n, ...] shape
        # Read once per call by the sampler: how actions go to the env, whether acting reads infos.
        self.to_env: Any = None
        self.infos_for_acting = False

    @staticmethod
    def fits(traj: Any) -> bool:
        """Whether ``traj`` is in the state the columns start from (nothing staged,
        the kept history one step back at most)."""
        if traj.staged is not None or traj.done or traj.t - traj.base != len(traj.obs) - 1:
            return False
        return traj.t == 0 or traj.base == traj.t - 1

    # ------------------------------------------------------------------ acting
    def stacked_obs(self) -> Optional[np.ndarray]:
        """The current observations of all envs as one array (None if they do not
        stack into the obs column's dtype and shape)."""
        try:
            obs = np.array(self.cur_obs)
        except ValueError:
            return None
        if obs.dtype == object or obs.ndim < 1:
            return None
        if self.cols is not None:
            col = self.cols[_OBS]
            if obs.dtype != col.dtype or obs.shape[1:] != col.shape[2:]:
                return None
        return obs

    def write_tick(
        self, obs: np.ndarray, actions: np.ndarray, extras: Dict[str, np.ndarray]
    ) -> Optional[int]:
        """Writes one tick's acting rows; returns its row (None, writing nothing, if
        the outputs do not fit the columns: the branch must be left)."""
        if self.cols is None:
            if not self._allocate(obs, actions, extras):
                return None
        try:  # each output as the columns hold it: dtype and [n, ...] shape
            if actions.dtype != self._specs[0][0] or actions.shape != self._specs[0][1]:
                return None
            if list(extras) != self._extra_keys:
                return None
            for value, (dtype, shape) in zip(extras.values(), self._specs[1:]):
                if value.dtype != dtype or value.shape != shape:
                    return None
        except AttributeError:  # (not an array)
            return None
        cols = self.cols
        k = self.k + 1
        if k >= self.capacity:
            self._grow()
            cols = self.cols
        cols[_OBS][k] = obs
        cols[_ACTIONS][k] = actions
        for key, value in extras.items():
            cols[key][k] = value
        self.k = k
        return k

    def _allocate(self, obs: np.ndarray, actions: Any, extras: Dict[str, Any]) -> bool:
        keys = [_ACTIONS, *extras]
        if not all(isinstance(v, np.ndarray) and v.ndim >= 1 for v in (actions, *extras.values())):
            return False
        for traj in self.trajs:  # the row before the call must have every column
            if traj.t > 0 and list(traj.steps) != keys + [_REWARDS, _TERMS, _TRUNCS, _INFOS]:
                return False
        cap, n = self.capacity, self.n
        cols = {_OBS: np.empty((cap, n) + obs.shape[1:], obs.dtype)}
        for key, value in ((_ACTIONS, actions), *extras.items()):
            cols[key] = np.empty((cap, n) + value.shape[1:], value.dtype)
        cols[_REWARDS] = np.zeros((cap, n), np.float32)
        cols[_TERMS] = np.zeros((cap, n), bool)
        cols[_TRUNCS] = np.zeros((cap, n), bool)
        cols[_INFOS] = np.empty((cap, n), object)
        try:
            for j, traj in enumerate(self.trajs):
                if self.has_prev[j]:
                    cols[_OBS][0, j] = traj.obs[-2]
                    for key in traj.steps:
                        cols[key][0, j] = traj.steps[key][-1]
        except (ValueError, TypeError):
            return False
        self.cols = cols
        self.step_keys = keys
        self._extra_keys = keys[1:]
        self._specs = [(cols[key].dtype, (n,) + cols[key].shape[2:]) for key in keys]
        return True

    def _grow(self) -> None:
        self.capacity *= 2
        for key, col in list(self.cols.items()):
            bigger = np.zeros((self.capacity,) + col.shape[1:], col.dtype)
            bigger[: len(col)] = col
            self.cols[key] = bigger

    # ------------------------------------------------------------------ stepping
    def write_step(self, j: int, obs: Any, reward: float, term: bool, trunc: bool, info: dict) -> None:
        """Env ``j``'s outcome of the current tick (``obs``: its processed next obs)."""
        k = self.k
        cols = self.cols
        cols[_REWARDS][k, j] = reward
        cols[_TERMS][k, j] = term
        cols[_TRUNCS][k, j] = trunc
        cols[_INFOS][k, j] = info
        self.last[j] = k
        self.final_obs[j] = obs
        self.cur_obs[j] = obs
        self.cur_info[j] = info

    def restart(self, j: int, traj: Any) -> None:
        """Env ``j`` began a new episode (trajectory ``traj``) after the current tick."""
        self.trajs[j] = traj
        self.cur_obs[j] = traj.obs[-1]
        self.cur_info[j] = traj.last_info
        self.row0[j] = self.k + 1
        self.last[j] = self.k
        self.e0[j] = 0
        self.has_prev[j] = False

    # ------------------------------------------------------------------ pieces
    def piece(self, j: int) -> Optional[Dict[str, np.ndarray]]:
        """Env ``j``'s rows since its last cut (None if none): the columns, in order,
        of the batch ``AgentTrajectory.build_fragment`` builds, each an array of
        ``len(cols["obs"])`` rows."""
        a, b = self.row0[j], self.last[j] + 1
        n = b - a
        if n <= 0:
            return None
        src = self.cols
        traj = self.trajs[j]
        obs = src[_OBS][a:b, j].copy()
        cols: Dict[str, Any] = {_OBS: obs}
        for key in self.step_keys:
            cols[key] = src[key][a:b, j].copy()
        for key in (_REWARDS, _TERMS, _TRUNCS, _INFOS):
            cols[key] = src[key][a:b, j].copy()
        final = self.final_obs[j]
        if isinstance(final, np.ndarray) and final.dtype == obs.dtype and final.shape == obs.shape[1:]:
            new_obs = np.empty_like(obs)
            new_obs[:-1] = obs[1:]
            new_obs[-1] = final
        else:  # (np.array's promotion, as build_fragment stacks the rows)
            new_obs = np.array(list(obs[1:]) + [final])
        cols[SampleBatch.NEXT_OBS] = new_obs
        for out_key, key in ((SampleBatch.PREV_ACTIONS, _ACTIONS), (SampleBatch.PREV_REWARDS, _REWARDS)):
            if self.has_prev[j]:
                cols[out_key] = src[key][a - 1 : b - 1, j].copy()
            else:
                prev = np.empty_like(cols[key])
                prev[0] = 0
                prev[1:] = cols[key][:-1]
                cols[out_key] = prev
        e0 = self.e0[j]
        cols[SampleBatch.T] = np.arange(e0, e0 + n, dtype=np.int64)
        cols[SampleBatch.EPS_ID] = np.full(n, traj.eps_id, dtype=np.int64)
        cols[SampleBatch.UNROLL_ID] = np.full(n, traj.unroll_id, dtype=np.int64)
        cols[SampleBatch.AGENT_INDEX] = np.full(n, traj.agent_index, dtype=np.int64)
        cols[SampleBatch.ENV_ID] = np.full(n, traj.env_id, dtype=np.int64)
        cols[SampleBatch.DONES] = np.logical_or(cols[_TERMS], cols[_TRUNCS])
        return cols

    def cut(self, j: int) -> None:
        """Starts env ``j``'s next piece after its last written row (a new fragment id)."""
        n = self.last[j] + 1 - self.row0[j]
        if n > 0:
            self.e0[j] += n
            self.row0[j] = self.last[j] + 1
            self.has_prev[j] = True
        self.trajs[j].new_unroll_id()

    # ------------------------------------------------------------------ leaving
    def materialize(self) -> None:
        """Writes each env's current piece (and the step before it) back into its
        trajectory, as the general path would have left it."""
        for j, traj in enumerate(self.trajs):
            a, w = self.row0[j], self.last[j] + 1
            lo = a - 1 if self.has_prev[j] else a
            if w <= lo or self.cols is None:
                continue  # nothing written (a fresh trajectory, or as it was loaded)
            src = self.cols
            traj.base = self.e0[j] - (a - lo)
            traj.t = self.e0[j] + (w - a)
            traj.frag_start = self.e0[j]
            traj.obs = list(src[_OBS][lo:w, j].copy()) + [self.cur_obs[j]]
            traj.obs_t = list(range(traj.base - 1, traj.t))
            traj.steps = {
                key: list(src[key][lo:w, j].copy()) for key in self.step_keys + [_REWARDS, _TERMS, _TRUNCS]
            }
            traj.steps[_INFOS] = list(src[_INFOS][lo:w, j])
            traj.staged, traj.pending_reward, traj.done = None, 0.0, False
            traj.last_info = self.cur_info[j]
