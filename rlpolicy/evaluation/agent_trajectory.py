"""One agent's view of a running episode: the history window a sampler needs
to build the policy's inputs (``compute_actions``) and its training rows.

Columns follow the policy's view requirements: a view column reads a data
column (``obs`` or a per-step column such as ``actions``, ``rewards`` or
``state_out_0``) at a time shift, e.g. ``prev_actions`` = ``actions`` at
``-1`` and ``state_in_0`` = ``state_out_0`` at ``-1``. Before the episode's
first step, shifted values are zeros (``state_out_*``: the policy's initial
state; ``infos``: empty dicts).
"""

from __future__ import annotations

import itertools
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import tree

from rlpolicy.policy.sample_batch import SampleBatch

_STRUCT_SPACES = (gym.spaces.Dict, gym.spaces.Tuple)

_OBS = SampleBatch.OBS
_INFOS = SampleBatch.INFOS
# Data columns that inputs to compute_actions may read.
_ACTION_TIME_COLUMNS = frozenset(
    [_OBS, SampleBatch.ACTIONS, SampleBatch.REWARDS, SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS]
)
# Columns every trajectory gets, whatever the view requirements say.
_SHIFTED_DEFAULTS = {
    SampleBatch.NEXT_OBS: (_OBS, 1),
    SampleBatch.PREV_ACTIONS: (SampleBatch.ACTIONS, -1),
    SampleBatch.PREV_REWARDS: (SampleBatch.REWARDS, -1),
}


# Value types ``np.array`` stacks as ``stack_values`` would (no dict/tuple nesting).
_PLAIN_TYPES = frozenset([np.ndarray, np.float32, np.float64, np.int64, np.int32, np.bool_, bool, float, int])
_STATE_PREFIXES = ("state_in_", "state_out_")


def stack_values(values: Sequence[Any]) -> Any:
    """Stacks equally nested values (arrays, dicts, tuples of arrays) along a new axis 0."""
    first = values[0]
    if isinstance(first, dict):
        return {k: stack_values([v[k] for v in values]) for k in first}
    if isinstance(first, tuple):
        return tuple(stack_values([v[i] for v in values]) for i in range(len(first)))
    try:  # np.array gives np.stack's result (shape and dtype) at a fraction of its cost
        return np.array(values)
    except ValueError:  # (ragged: np.stack's own error, or its result)
        return np.stack([np.asarray(v) for v in values])


def _opaque(value: Any) -> bool:
    """A state value that is no array (RLlib 1.11 allows any Python structure)."""
    return isinstance(value, (dict, list, str)) or (
        isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 0
    )


def stack_column(key: str, values: Sequence[Any]) -> Any:
    """``stack_values``, except that RNN state columns holding arbitrary Python
    values (RLlib 1.11 keeps them whole) become a 1-D object column."""
    if key.startswith(("state_in_", "state_out_")) and any(_opaque(v) for v in values):
        return object_column([v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v for v in values])
    return stack_values(values)


def object_column(values: Sequence[Any]) -> np.ndarray:
    """A 1-D object array holding ``values`` as they are (e.g. info dicts)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


# Per-step bookkeeping columns the sampler knows at any step (RLlib 1.11's collector
# keeps them beside the obs, so views may read them for acting and training).
_META_COLUMNS = frozenset(
    [SampleBatch.T, SampleBatch.EPS_ID, SampleBatch.AGENT_INDEX, SampleBatch.ENV_ID, SampleBatch.UNROLL_ID]
)


def _sampler_produces(data_col: str) -> bool:
    return data_col in _ACTION_TIME_COLUMNS or data_col.startswith("state_out_")


def lookback_of(view_requirements: Dict[str, Any]) -> int:
    """How many past steps the view requirements read (at least 1, for ``prev_*``)."""
    back = 1
    for req in view_requirements.values():
        shifts = np.atleast_1d(req.shift_arr) if req.shift_arr is not None else np.array([req.shift])
        if len(shifts):
            back = max(back, -int(np.min(shifts)))
    return back


class ViewPlan(NamedTuple):
    """What a policy's view requirements ask of a trajectory, read once per policy:
    the lookback and, per ``compute_actions`` input column, how to build it
    (``(col, data_col, kind, req)``; kind ``"meta"``, ``"range"`` or ``"single"``)."""

    view_requirements: Dict[str, Any]
    lookback: int
    action_columns: Tuple[Tuple[str, str, str, Any], ...]


def view_plan(view_requirements: Dict[str, Any]) -> ViewPlan:
    """The ViewPlan of ``view_requirements``."""
    columns = []
    for col, req in view_requirements.items():
        if not req.used_for_compute_actions:
            continue
        data_col = req.data_col or col
        if data_col in _META_COLUMNS:
            columns.append((col, data_col, "meta", req))
        elif not _sampler_produces(data_col):
            continue  # e.g. a column a custom model adds itself
        elif req.shift_arr is not None and np.ndim(req.shift_arr) > 0 and req.shift_from is not None:
            columns.append((col, data_col, "range", tuple(int(x) for x in req.shift_arr)))
        else:
            columns.append((col, data_col, "single", int(req.shift)))
    return ViewPlan(view_requirements, lookback_of(view_requirements), tuple(columns))


class AgentTrajectory:
    """History of one agent in one episode, cut into fragments for training.

    ``obs[k]`` is the observation at episode step ``base + k``; ``steps[col][k]``
    holds what happened at that step (``actions``, ``rewards``, ``terminateds``,
    ``truncateds``, ``infos``, ``state_out_*`` and the policy's extra action
    outputs). Rows from ``frag_start`` to ``t`` belong to the current fragment.

    Args:
        agent_id: The agent.
        agent_index: The agent's index within the episode.
        policy_id: The policy the agent maps to.
        policy: That policy (for view requirements, initial state, spaces).
        eps_id: The episode id.
        env_id: Index of the sub-environment.
        unroll_ids: Shared counter handing out fragment ids.
        init_obs: The agent's first observation.
        init_info: The info dict that came with it.
        init_t: The episode's step index at that observation (RLlib 1.11's ``t``:
            the episode length minus one, so -1 at the reset observation).
        plan: The policy's ViewPlan, if the caller keeps one (default: read now).
    """

    def __init__(
        self,
        agent_id: Any,
        agent_index: int,
        policy_id: str,
        policy: Any,
        eps_id: int,
        env_id: int,
        unroll_ids: Iterator[int],
        init_obs: Any,
        init_info: Optional[dict],
        init_t: int = -1,
        plan: Optional[ViewPlan] = None,
    ):
        self.agent_id, self.agent_index = agent_id, agent_index
        self.policy_id, self.policy = policy_id, policy
        self.eps_id, self.env_id = eps_id, env_id
        self._unroll_ids = unroll_ids
        self.unroll_id = next(unroll_ids)
        if plan is None or plan.view_requirements is not policy.view_requirements:
            plan = view_plan(policy.view_requirements)
        self._plan = plan
        self.view_requirements = policy.view_requirements
        self.initial_state = [np.asarray(s) for s in policy.get_initial_state()]
        self._lookback = plan.lookback
        self.obs: List[Any] = [init_obs]
        self.obs_t: List[int] = [int(init_t)]  # the episode's ``t`` at each of ``obs``
        self._first_t = int(init_t)  # (RLlib 1.11 pads before the first obs with it)
        self.steps: Dict[str, List[Any]] = {}
        self.base = 0
        self.t = 0  # completed steps (rows) in this episode
        self.frag_start = 0
        self.last_info = init_info or {}
        self.staged: Optional[Dict[str, Any]] = None  # the action taken, awaiting its outcome
        self.pending_reward = 0.0
        self.done = False
        self._fills: Dict[str, Any] = {}

    # ------------------------------------------------------------------ stepping
    @property
    def num_fragment_rows(self) -> int:
        """Rows collected since the current fragment started."""
        return self.t - self.frag_start

    def current_state(self) -> List[np.ndarray]:
        """The RNN state to feed into the next action (the last ``state_out``)."""
        if self.t == 0:
            return self.initial_state
        return [np.asarray(self.steps[f"state_out_{i}"][-1]) for i in range(len(self.initial_state))]

    @property
    def plan(self) -> ViewPlan:
        """The policy's ViewPlan this trajectory builds its inputs from."""
        return self._plan

    def current_obs(self) -> Any:
        """The observation at step ``t`` (what the next action is computed from)."""
        t = self.t
        return self.obs[-1] if t - self.base == len(self.obs) - 1 else self._value(_OBS, t)

    def action_inputs(self) -> Dict[str, Any]:
        """One row of inputs for ``compute_actions_from_input_dict`` at step ``t``."""
        row = {}
        t = self.t
        for col, data_col, kind, arg in self._plan.action_columns:
            if kind == "single":
                if data_col == _OBS and arg == 0:
                    row[col] = self.current_obs()
                else:
                    row[col] = self._value(data_col, t + arg)
            elif kind == "meta":
                row[col] = self._meta_values(data_col, t, arg)  # at the current obs
            else:
                row[col] = stack_values([self._value(data_col, t + s) for s in arg])
        return row

    def stage_action(self, action: Any, state_out: List[Any], extras: Dict[str, Any]) -> None:
        """Remembers the action taken at step ``t`` (its reward and next obs come later)."""
        staged = {SampleBatch.ACTIONS: action}
        for i, s in enumerate(state_out):
            staged[f"state_out_{i}"] = s
        staged.update(extras)
        self.staged = staged
        self.pending_reward = 0.0

    def add_reward(self, reward: float) -> None:
        """Adds a reward to the staged step (rewards may come before the next obs)."""
        self.pending_reward += float(reward)

    def close_step(
        self,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
        info: Optional[dict],
        env_t: Optional[int] = None,
    ) -> None:
        """Completes the staged step with its outcome; it becomes row ``t``.

        ``env_t`` is the episode's step index at ``next_obs`` (default: one past
        the previous observation's); in multi-agent episodes where agents take
        turns it runs ahead of the agent's own row count (RLlib 1.11's ``t``)."""
        row = self.staged
        row[SampleBatch.REWARDS] = np.float32(self.pending_reward)
        row[SampleBatch.TERMINATEDS] = bool(terminated)
        row[SampleBatch.TRUNCATEDS] = bool(truncated)
        row[_INFOS] = info if info is not None else {}
        steps = self.steps
        for col, value in row.items():
            column = steps.get(col)
            if column is None:
                steps[col] = [value]
            else:
                column.append(value)
        self.obs.append(next_obs)
        self.obs_t.append(int(env_t) if env_t is not None else self.obs_t[-1] + 1)
        self.last_info = row[_INFOS]
        self.staged, self.pending_reward = None, 0.0
        self.t += 1
        self.done = bool(terminated or truncated)

    # ------------------------------------------------------------------ building
    def build_fragment(self) -> SampleBatch:
        """The rows since the last cut as a SampleBatch (not yet postprocessed)."""
        a, b = self.frag_start, self.t
        n = b - a
        cols: Dict[str, Any] = {_OBS: self._stacked(_OBS, a, b, 0)}
        for col in self.steps:
            cols[col] = self._stacked(col, a, b, 0)
        for col, (data_col, shift) in _SHIFTED_DEFAULTS.items():
            req = self.view_requirements.get(col)
            if req is not None and req.shift_from is not None:
                continue  # a range view (e.g. the last n actions of an attention net): below
            cols[col] = self._stacked(data_col, a, b, shift)
        for i in range(len(self.initial_state)):
            cols[f"state_in_{i}"] = self._stacked(f"state_out_{i}", a, b, -1)
        self._add_view_columns(cols, a, b)
        # ``t`` at each row's next observation (the kept history always holds them).
        cols[SampleBatch.T] = np.array(self.obs_t[a + 1 - self.base : b + 1 - self.base], dtype=np.int64)
        cols[SampleBatch.EPS_ID] = np.full(n, self.eps_id, dtype=np.int64)
        cols[SampleBatch.UNROLL_ID] = np.full(n, self.unroll_id, dtype=np.int64)
        cols[SampleBatch.AGENT_INDEX] = np.full(n, self.agent_index, dtype=np.int64)
        cols[SampleBatch.ENV_ID] = np.full(n, self.env_id, dtype=np.int64)
        cols[SampleBatch.DONES] = np.logical_or(cols[SampleBatch.TERMINATEDS], cols[SampleBatch.TRUNCATEDS])
        return SampleBatch(cols)

    def cut(self) -> None:
        """Starts a new fragment at step ``t`` and forgets history no view reaches back to."""
        self.frag_start = self.t
        self.new_unroll_id()
        drop = (self.t - self._lookback) - self.base
        if drop > 0:
            self.obs = self.obs[drop:]
            self.obs_t = self.obs_t[drop:]
            for col, values in self.steps.items():
                self.steps[col] = values[drop:]
            self.base += drop

    def new_unroll_id(self) -> None:
        """Gives the trajectory's next fragment a new id (from the shared counter)."""
        self.unroll_id = next(self._unroll_ids)

    def _meta_values(self, data_col: str, obs_index: Any, req: Any) -> np.ndarray:
        """``data_col`` (one of ``_META_COLUMNS``) at observation index(es)
        ``obs_index`` (an int or an array) through ``req``'s shift(s).

        RLlib 1.11 keeps these beside the observations: ``t`` is the episode's
        step index at each observation (-1 at the reset one); before the first
        observation it repeats the first value. The others are constant."""
        k = np.asarray(obs_index, dtype=np.int64)
        if req is not None and req.shift_from is not None and req.shift_arr is not None:
            k = k[..., None] + np.asarray(req.shift_arr, dtype=np.int64)  # [rows, len(shifts)]
        elif req is not None:
            k = k + int(req.shift)
        if data_col == SampleBatch.T:
            known = np.asarray(self.obs_t, dtype=np.int64)
            rel = k - self.base
            if np.any((rel < 0) & (k >= 0)):
                raise RuntimeError(f"AgentTrajectory: 't' before step {self.base} was already dropped")
            return np.where(k < 0, self._first_t, known[np.clip(rel, 0, len(known) - 1)])
        value = {
            SampleBatch.EPS_ID: self.eps_id,
            SampleBatch.AGENT_INDEX: self.agent_index,
            SampleBatch.ENV_ID: self.env_id,
            SampleBatch.UNROLL_ID: self.unroll_id,
        }[data_col]
        return np.full(k.shape, value, dtype=np.int64)

    def _add_view_columns(self, cols: Dict[str, Any], a: int, b: int) -> None:
        """Columns the view requirements ask for beyond the defaults (e.g. custom shifts)."""
        for col, req in self.view_requirements.items():
            data_col = req.data_col or col
            if col not in cols and data_col in _META_COLUMNS and col != data_col:
                # Row i's bookkeeping values are those at its next observation (RLlib 1.11).
                cols[col] = self._meta_values(data_col, np.arange(a + 1, b + 1), req)
                continue
            if col in cols or (data_col != _OBS and data_col not in self.steps):
                continue
            if req.shift_from is not None:
                # One [rows, ...] column per shift, stacked on a new axis 1: [rows, len(shifts), ...].
                parts = [self._stacked(data_col, a, b, int(s)) for s in req.shift_arr]
                cols[col] = tree.map_structure(lambda *xs: np.stack(xs, axis=1), *parts)
            else:
                cols[col] = self._stacked(data_col, a, b, int(req.shift))

    def _sequence(self, data_col: str) -> List[Any]:
        return self.obs if data_col == _OBS else self.steps[data_col]

    def _value(self, data_col: str, index: int) -> Any:
        """``data_col`` at episode step ``index`` (the fill value outside the history)."""
        seq = self._sequence(data_col) if data_col == _OBS or data_col in self.steps else ()
        k = index - self.base
        if index < 0 or k >= len(seq):
            return self._fill(data_col)
        if k < 0:
            raise RuntimeError(
                f"AgentTrajectory: step {index} of column {data_col!r} was already "
                f"dropped (history starts at step {self.base})"
            )
        return seq[k]

    def _stacked(self, data_col: str, a: int, b: int, shift: int) -> Any:
        """``data_col`` at steps ``a + shift .. b + shift - 1``, stacked (fill outside)."""
        seq = self._sequence(data_col)
        lo, hi = a + shift, b + shift
        base = self.base
        if lo >= 0 and lo >= base and hi - base <= len(seq):  # all inside the kept history
            values = seq[lo - base : hi - base]
            if data_col == _INFOS:
                return object_column(values)
            if type(values[0]) in _PLAIN_TYPES and not data_col.startswith(_STATE_PREFIXES):
                try:  # (what stack_column gives for plain values, without its checks)
                    return np.array(values)
                except ValueError:
                    pass
            return stack_column(data_col, values)
        before = max(0, min(hi, 0) - lo)
        start, stop = max(lo, 0) - self.base, hi - self.base
        if start < 0 and before < hi - lo:
            raise RuntimeError(
                f"AgentTrajectory: column {data_col!r} from step {max(lo, 0)} was already "
                f"dropped (history starts at step {self.base})"
            )
        middle = list(seq[max(start, 0) : max(stop, 0)])
        after = (hi - lo) - before - len(middle)
        values = middle
        if before or after:
            fill = self._fill(data_col)
            values = [fill] * before + middle + [fill] * after
        if data_col == _INFOS:
            return object_column(values)
        return stack_column(data_col, values)

    def _fill(self, data_col: str) -> Any:
        """The value of ``data_col`` before the episode started."""
        fill = self._fills.get(data_col)
        if fill is not None:
            return fill
        if data_col.startswith("state_out_") and int(data_col[len("state_out_") :]) < len(self.initial_state):
            fill = self.initial_state[int(data_col[len("state_out_") :])]
        elif data_col.startswith("state_out_"):
            # A memory stream without an initial state (attention nets, RLlib 1.11):
            # zeros shaped like the state_out_i view's space.
            fill = self._fill_from_space(data_col)
        elif data_col == _INFOS:
            return {}
        elif data_col == SampleBatch.REWARDS:
            fill = np.float32(0.0)
        elif data_col in (SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS):
            fill = False
        elif data_col in self.steps and self.steps[data_col]:
            fill = tree.map_structure(lambda v: np.zeros_like(np.asarray(v)), self.steps[data_col][0])
        elif data_col == _OBS:
            fill = tree.map_structure(lambda v: np.zeros_like(np.asarray(v)), self.obs[0])
        else:
            fill = self._fill_from_space(data_col)
        self._fills[data_col] = fill
        return fill

    def _fill_from_space(self, data_col: str) -> Any:
        """Zeros shaped like one value of ``data_col``'s space: the action space
        (flattened as the batch stores it), else the space of the column's own
        view requirement or of a view reading it (e.g. ``state_in_0`` reading
        ``state_out_0`` of a policy without an initial state, RLlib 1.11)."""
        if data_col == SampleBatch.ACTIONS:
            zeros = tree.map_structure(
                lambda v: np.zeros_like(np.asarray(v)), self.policy.action_space.sample()
            )
            return flat_action(zeros) if flattens_actions(self.policy) else zeros
        req = self.view_requirements.get(data_col)
        space = getattr(req, "space", None)
        if space is None:
            space = next(
                (
                    r.space
                    for r in self.view_requirements.values()
                    if r.data_col == data_col and getattr(r, "space", None) is not None
                ),
                None,
            )
        if space is None:
            return np.float32(0.0)
        return tree.map_structure(lambda v: np.zeros_like(np.asarray(v)), space.sample())


def flattens_actions(policy: Any) -> bool:
    """Whether batches store ``policy``'s actions flattened into one vector per row:
    Dict/Tuple action spaces unless ``_disable_action_flattening`` (RLlib 1.11's collector)."""
    space = getattr(policy, "action_space", None)
    config = getattr(policy, "config", None) or {}
    return isinstance(space, _STRUCT_SPACES) and not config.get("_disable_action_flattening", False)


def flat_action(action: Any) -> np.ndarray:
    """One struct action as the flat vector RLlib 1.11 stores: its leaves (dm-tree
    order) reshaped to 1-D and concatenated; float64 narrowed to float32."""
    flat = np.concatenate([np.reshape(np.asarray(leaf), [-1]) for leaf in tree.flatten(action)])
    return flat.astype(np.float32) if flat.dtype == np.float64 else flat


def unroll_id_counter() -> Iterator[int]:
    """A fresh counter of fragment ids."""
    return itertools.count()


__all__ = [
    "AgentTrajectory",
    "lookback_of",
    "ViewPlan",
    "view_plan",
    "stack_values",
    "stack_column",
    "object_column",
    "unroll_id_counter",
    "flattens_actions",
    "flat_action",
]
