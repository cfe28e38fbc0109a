"""The sampling loop of a rollout worker: steps gymnasium envs in lock-step,
batches every waiting agent through its policy, and turns finished
trajectory pieces into postprocessed batches.

Single-agent envs are driven as one-agent multi-agent envs (agent id
``"agent0"``). A trajectory piece is cut when its episode ends, or (with
``batch_mode="truncate_episodes"``) when the fragment is full; every piece is
postprocessed exactly once, together with the pieces of the other agents of
the same episode (``other_agent_batches``). Terminated and truncated are kept
apart: postprocessing bootstraps the value after a truncated or cut piece.

Lean branch: in ``truncate_episodes`` mode, when every sub-env is a single-agent
env whose agent acts through the same feed-forward policy on its observation
alone (``_columnar.lean_policy``; no horizon, ``no_done_at_end`` or finite
checks), a ``sample()`` call keeps the steps in ``[ticks, envs]`` columns
(``_columnar.ColumnarRun``) instead of per-agent rows, and cuts pieces by
slicing them. Episodes, callbacks and the batches are the same as on the general
path; the branch hands its rows back to the trajectories when the call ends or
when a tick no longer fits (e.g. a new episode mapped to another policy).
"""

from __future__ import annotations

import inspect
import logging
import queue
import threading
import warnings
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import tree

from rlpolicy.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv
from rlpolicy.evaluation._columnar import ColumnarRun, lean_policy
from rlpolicy.evaluation.agent_trajectory import (
    AgentTrajectory,
    flat_action,
    flattens_actions,
    object_column,
    stack_column,
    stack_values,
    unroll_id_counter,
    view_plan,
)
from rlpolicy.evaluation.episode import _DUMMY_AGENT_ID, Episode
from rlpolicy.policy._callbacks import DefaultCallbacks
from rlpolicy.policy._obs_prep import flatten_single_obs
from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch, concat_samples

logger = logging.getLogger(__name__)

BATCH_MODES = ("truncate_episodes", "complete_episodes")
COUNT_STEPS_BY = ("env_steps", "agent_steps")


class RolloutMetrics(NamedTuple):
    """Statistics of one finished episode (RLlib 1.11's ``RolloutMetrics``)."""

    episode_length: int
    episode_reward: float
    agent_rewards: Dict[Tuple[Any, str], float]
    custom_metrics: Dict[str, float]
    perf_stats: Dict[str, float]
    hist_data: Dict[str, List[float]]
    media: Dict[str, Any]


class SubEnvironments:
    """The vector of sub-environments of one worker, as callbacks see it (``base_env``)."""

    def __init__(self, envs: List[Any]):
        self.envs = envs

    def get_sub_environments(self) -> List[Any]:
        """The sub-environments (the envs the env creator returned)."""
        return list(self.envs)

    get_unwrapped = get_sub_environments  # RLlib's older name

    def stop(self) -> None:
        """Closes every sub-environment."""
        for env in self.envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()


_GYMNASIUM_API = (
    "the gymnasium API: reset(*, seed=None, options=None) -> (obs, info) and "
    "step(action) -> (obs, reward, terminated, truncated, info)"
)


def _reset_takes_seed(env: Any) -> bool:
    try:
        params = inspect.signature(env.reset).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "seed" or p.kind == inspect.Parameter.VAR_KEYWORD for p in params)


class _SingleAgentAdapter:
    """Presents a gymnasium env through the multi-agent dict API (one agent).

    An env with the old gym API (``reset()`` returning only the observation,
    ``step()`` a 4-tuple with ``done``) is adapted, with a warning, as
    gymnasium's compatibility wrappers do: ``truncated`` is
    ``info["TimeLimit.truncated"]``, ``terminated`` the rest of ``done``.
    """

    def __init__(self, env: Any):
        self.env = env
        self.old_api = False
        self._takes_seed: Optional[bool] = None  # read from reset's signature at the first reset

    def reset(self, seed: Optional[int] = None) -> Tuple[dict, dict]:
        if self._takes_seed is None:
            self._takes_seed = _reset_takes_seed(self.env)
        takes_seed = self._takes_seed
        out = self.env.reset(seed=seed) if takes_seed else self.env.reset()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
            obs, info = out
        else:
            self._use_old_api("reset() returned only the observation")
            obs, info = out, {}
            if seed is not None and not takes_seed and hasattr(self.env, "seed"):
                self.env.seed(seed)
        return {_DUMMY_AGENT_ID: obs}, {_DUMMY_AGENT_ID: info}

    def step(self, action_dict: dict) -> Tuple[dict, dict, dict, dict, dict]:
        obs, reward, terminated, truncated, info = self.step_single(action_dict[_DUMMY_AGENT_ID])
        a = _DUMMY_AGENT_ID
        return (
            {a: obs},
            {a: reward},
            {a: terminated, ALL_AGENTS: terminated},
            {a: truncated, ALL_AGENTS: truncated},
            {a: info},
        )

    def step_single(self, action: Any) -> Tuple[Any, Any, Any, Any, Any]:
        """The env's step as gymnasium's 5-tuple (the old 4-tuple adapted)."""
        out = self.env.step(action)
        if type(out) is tuple and len(out) == 5:
            return out
        if isinstance(out, tuple) and len(out) == 4:
            self._use_old_api("step() returned 4 values (obs, reward, done, info)")
            obs, reward, done, info = out
            truncated = bool((info or {}).get("TimeLimit.truncated", False)) and bool(done)
            terminated = bool(done) and not truncated
        elif isinstance(out, tuple) and len(out) == 5:
            obs, reward, terminated, truncated, info = out
        else:
            raise ValueError(
                f"{type(self.env).__name__}.step() returned {_describe_out(out)}; rlpolicy needs "
                f"{_GYMNASIUM_API}"
            )
        return obs, reward, terminated, truncated, info

    def _use_old_api(self, what: str) -> None:
        if not self.old_api:
            self.old_api = True
            msg = (
                f"{type(self.env).__name__} follows the old gym API ({what}); rlpolicy expects "
                f"{_GYMNASIUM_API}. It is adapted (done -> terminated, or truncated where "
                "info['TimeLimit.truncated']); port the env, or wrap it with "
                "shimmy.GymV21CompatibilityV0(env=env), to silence this warning"
            )
            warnings.warn(msg, UserWarning, stacklevel=3)
            logger.warning(msg)


def _describe_out(out: Any) -> str:
    if isinstance(out, tuple):
        return f"a tuple of {len(out)} values"
    return f"a {type(out).__name__}"


class _MultiAgentAdapter:
    """Checks a MultiAgentEnv's outputs (the ``"__all__"`` key) as they come."""

    def __init__(self, env: MultiAgentEnv):
        self.env = env
        self._takes_seed: Optional[bool] = None

    def reset(self, seed: Optional[int] = None) -> Tuple[dict, dict]:
        if self._takes_seed is None:
            self._takes_seed = _reset_takes_seed(self.env)
        out = self.env.reset(seed=seed) if self._takes_seed else self.env.reset()
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ValueError(
                f"{type(self.env).__name__}.reset() must return (obs_dict, infos_dict), "
                f"got {_describe_out(out)}: MultiAgentEnv follows the gymnasium API "
                "(reset(*, seed=None, options=None) -> (obs_dict, infos_dict))"
            )
        return out

    def step(self, action_dict: dict) -> Tuple[dict, dict, dict, dict, dict]:
        out = self.env.step(action_dict)
        if not (isinstance(out, tuple) and len(out) == 5):
            raise ValueError(
                f"{type(self.env).__name__}.step() must return (obs, rewards, "
                f"terminateds, truncateds, infos) dicts, got {_describe_out(out)}: "
                "MultiAgentEnv follows the gymnasium API (the old (obs, rewards, dones, "
                "infos) becomes terminateds/truncateds dicts, each with an '__all__' key)"
            )
        obs, rewards, terms, truncs, infos = out
        if ALL_AGENTS not in terms:
            raise ValueError(
                f"{type(self.env).__name__}.step(): terminateds has no '__all__' key "
                f"(got keys {sorted(map(str, terms))})"
            )
        return obs, rewards, terms, truncs, infos


def wrap_env(env: Any) -> Any:
    """The dict-API adapter for a gymnasium env or a MultiAgentEnv."""
    return _MultiAgentAdapter(env) if isinstance(env, MultiAgentEnv) else _SingleAgentAdapter(env)


@dataclass
class _Slot:
    """One sub-environment and its running episode."""

    index: int
    env: Any
    episode: Optional[Episode] = None
    agents: Dict[Any, AgentTrajectory] = field(default_factory=dict)
    to_act: List[Any] = field(default_factory=list)


@dataclass
class SamplerSettings:
    """How the sampler cuts and counts (the RolloutWorker's arguments)."""

    batch_mode: str = "truncate_episodes"
    rollout_fragment_length: int = 200
    count_steps_by: str = "env_steps"
    explore: Optional[bool] = None
    normalize_actions: Optional[bool] = None  # None: each policy's config
    clip_actions: Optional[bool] = None
    horizon: Optional[int] = None  # RLlib 1.11's episode_horizon
    soft_horizon: bool = False
    no_done_at_end: bool = False
    clip_rewards: Any = None  # True: sign; a number: clip to +-it
    check_finite: bool = False  # config["_check_finite_samples"]: NaN/inf obs or rewards raise


class ExtraBatchCollector:
    """The sampler's ``sample_collector``: takes ready (postprocessed) batches to
    add to the next ``sample()`` output, as RLlib 1.11's model-based rollouts add
    them (there via the collector's episode-building API and
    ``episode.add_extra_batch``; here ``add_extra_batch`` on either). Their rows
    count as agent steps, not env steps."""

    def __init__(self, runner: "EnvRunner"):
        self._runner = runner

    def add_extra_batch(self, batch: Any, policy_id: str = DEFAULT_POLICY_ID) -> None:
        """Adds ``batch`` (a SampleBatch for ``policy_id``, or a MultiAgentBatch) to the output.

        Raises:
            ValueError: For anything else, or an unknown policy id (nothing added).
        """
        if isinstance(batch, MultiAgentBatch):
            parts = dict(batch.policy_batches)
        elif isinstance(batch, SampleBatch):
            parts = {policy_id: batch}
        else:
            raise ValueError(
                f"sample_collector.add_extra_batch: expected a SampleBatch or MultiAgentBatch, got {type(batch).__name__}"
            )
        unknown = [pid for pid in parts if pid not in self._runner.policy_map]
        if unknown:
            raise ValueError(
                f"sample_collector.add_extra_batch: unknown policy id(s) {unknown}; known: {list(self._runner.policy_map)}"
            )
        for pid, part in parts.items():
            self._runner.add_output(pid, part)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotImplementedError(
            f"sample_collector.{name}: RLlib 1.11's episode-building collector API is not provided; "
            "build the SampleBatch yourself and pass it to sample_collector.add_extra_batch(batch, policy_id)"
        )


_INPUT_FLAGS = {"_is_training": False, "_time_major": None, "_zero_padded": False, "_max_seq_len": None}


class EnvRunner:
    """Runs the sub-environments of one worker and collects postprocessed batches.

    Args:
        worker: The owning RolloutWorker (passed to callbacks and mapping fns).
        envs: The sub-environments (gymnasium envs or MultiAgentEnvs).
        policy_map: Policy id -> Policy.
        policy_mapping_fn: ``fn(agent_id, episode, worker=..., **kw) -> policy_id``.
        callbacks: A DefaultCallbacks instance.
        settings: Batch mode, fragment length, step counting, exploration.
        seeds: Seed of each sub-environment's first reset (or None).
        process_obs: ``fn(policy_id, policy, raw_obs) -> obs``: what the
            policy gets (the worker's preprocessing and observation filter);
            default: the policy's own Dict/Tuple flattening.
    """

    def __init__(
        self,
        worker: Any,
        envs: List[Any],
        policy_map: Dict[str, Any],
        policy_mapping_fn: Callable[..., str],
        callbacks: Any,
        settings: SamplerSettings,
        seeds: Optional[List[Optional[int]]] = None,
        process_obs: Optional[Callable[[str, Any, Any], Any]] = None,
    ):
        self.worker = worker
        self._process_obs = process_obs or _flatten_for_policy
        self.base_env = SubEnvironments(envs)
        self.policy_map = policy_map
        self.policy_mapping_fn = policy_mapping_fn
        self.callbacks = callbacks
        self.settings = settings
        self._unroll_ids = unroll_id_counter()
        self._slots = [_Slot(i, wrap_env(env)) for i, env in enumerate(envs)]
        self._seeds = list(seeds) if seeds is not None else [None] * len(envs)
        self._outputs: Dict[str, List[SampleBatch]] = defaultdict(list)
        self._out_env_steps = 0
        self._out_agent_steps = 0
        self.sample_collector = ExtraBatchCollector(self)
        self.total_env_steps = 0
        self.new_metrics: List[RolloutMetrics] = []
        self.episode_returns: Deque[float] = deque(maxlen=100)
        self.episode_lengths: Deque[int] = deque(maxlen=100)
        self.num_episodes = 0
        # Episode statistics may be read from another thread than the sampling one.
        self._stats_lock = threading.Lock()
        # Per policy object: its ViewPlan and env-action function, rebuilt when the
        # policy's view requirements (dict or entries) or config change.
        self._plans: Dict[int, Tuple[Any, Any, Any]] = {}
        self._to_env: Dict[int, Tuple[Any, Callable[[Any], Any], Any]] = {}
        self._step_callback = True  # whether on_episode_step may do anything (read per tick)
        self._lean: Optional[ColumnarRun] = None  # the columns of the lean branch, while it runs

    # ------------------------------------------------------------------ public
    def add_output(self, policy_id: str, batch: SampleBatch) -> None:
        """Adds a ready batch of ``policy_id`` to the next ``sample()`` output (its
        rows count as agent steps, not env steps); see ``sample_collector``."""
        self._outputs[policy_id].append(batch)
        self._out_agent_steps += batch.count

    def sample(self) -> Any:
        """One rollout fragment of every sub-environment, postprocessed.

        Returns:
            A SampleBatch (only ``"default_policy"`` collected data) or a MultiAgentBatch.
        """
        self._step_callback = _overrides_step_callback(self.callbacks)
        for slot in self._slots:
            if slot.episode is None:
                self._start_episode(slot, self._seeds[slot.index])
        s = self.settings
        if s.batch_mode == "truncate_episodes":
            target = s.rollout_fragment_length * len(self._slots)
            counted = 0
            self._lean = self._columnar_run()
            try:
                while counted < target:
                    env_steps, agent_steps = self._tick_lean() if self._lean is not None else self._tick()
                    counted += env_steps if s.count_steps_by == "env_steps" else agent_steps
                    self._out_env_steps += env_steps
                for slot in self._slots:
                    self._postprocess_slot(slot)
            finally:
                self._leave_lean()
        else:
            while self._counted_output() < s.rollout_fragment_length:
                self._tick()
        return self._take_outputs()

    def sub_environments(self) -> List[Any]:
        """The raw sub-environments."""
        return self.base_env.get_sub_environments()

    def pop_metrics(self) -> List[RolloutMetrics]:
        """The metrics of the episodes finished since the last call."""
        with self._stats_lock:
            out, self.new_metrics = self.new_metrics, []
        return out

    def episode_stats(self) -> Tuple[List[float], List[int], int]:
        """(last returns, last lengths, episodes finished) -- a consistent snapshot."""
        with self._stats_lock:
            return list(self.episode_returns), list(self.episode_lengths), self.num_episodes

    def stop(self) -> None:
        """Closes the sub-environments."""
        self.base_env.stop()

    # ------------------------------------------------------------------ episodes
    def _start_episode(self, slot: _Slot, seed: Optional[int] = None) -> None:
        # A reset that raises leaves the slot without an episode, so the next
        # sample() resets again (instead of stepping a half-started episode).
        slot.episode, slot.agents, slot.to_act = None, {}, []
        obs, infos = slot.env.reset(seed=seed)
        episode = Episode(
            self.policy_map,
            self.policy_mapping_fn,
            extra_batch_callback=self.sample_collector.add_extra_batch,
            env_id=slot.index,
            worker=self.worker,
        )
        slot.episode, slot.agents, slot.to_act = episode, {}, []
        for policy in self.policy_map.values():
            exploration = getattr(policy, "exploration", None)
            if exploration is not None:
                exploration.on_episode_start(
                    policy, environment=self.base_env, episode=episode, tf_sess=policy.get_session()
                )
        self.callbacks.on_episode_start(
            worker=self.worker,
            base_env=self.base_env,
            policies=self.policy_map,
            episode=episode,
            env_index=slot.index,
        )
        for agent_id, ob in obs.items():
            info = infos.get(agent_id) or {}
            self._add_agent(slot, agent_id, ob, info)
            slot.to_act.append(agent_id)

    def _check_finite(self, slot: _Slot, value: Any, column: str, agent_id: Any) -> None:
        if self.settings.check_finite:
            env = self.base_env.get_sub_environments()[slot.index]
            _check_finite_samples(value, column, env, slot.index, agent_id)

    def _add_agent(self, slot: _Slot, agent_id: Any, raw_obs: Any, info: dict) -> AgentTrajectory:
        self._check_finite(slot, raw_obs, SampleBatch.OBS, agent_id)
        episode = slot.episode
        policy_id = episode.policy_for(agent_id)
        policy = self.policy_map[policy_id]
        obs = self._process_obs(policy_id, policy, raw_obs)
        traj = AgentTrajectory(
            agent_id,
            episode._agent_index(agent_id),
            policy_id,
            policy,
            episode.episode_id,
            slot.index,
            self._unroll_ids,
            obs,
            info,
            init_t=episode.length - 1,
            plan=self._plan_for(policy),
        )
        slot.agents[agent_id] = traj
        episode._set_last_observation(agent_id, obs)
        episode._set_last_raw_obs(agent_id, raw_obs)
        episode._set_last_info(agent_id, info)
        return traj

    def _plan_for(self, policy: Any) -> Any:
        reqs = policy.view_requirements
        key = [(col, id(req)) for col, req in reqs.items()]
        cached = self._plans.get(id(policy))
        if cached is None or cached[0] != key or cached[1].view_requirements is not reqs:
            cached = (key, view_plan(reqs), policy)  # (the policy kept alive: its id stays its own)
            self._plans[id(policy)] = cached
        return cached[1]

    def _end_episode(self, slot: _Slot, soft: bool = False) -> None:
        """Postprocesses the slot's episode, reports it, and starts the next one
        (``soft``: at a soft horizon, without resetting the env)."""
        episode = slot.episode
        self._postprocess_slot(slot)
        if self.settings.batch_mode == "complete_episodes":
            self._out_env_steps += episode.length
        for policy in self.policy_map.values():
            exploration = getattr(policy, "exploration", None)
            if exploration is not None:
                exploration.on_episode_end(
                    policy, environment=self.base_env, episode=episode, tf_sess=policy.get_session()
                )
        self.callbacks.on_episode_end(
            worker=self.worker,
            base_env=self.base_env,
            policies=self.policy_map,
            episode=episode,
            env_index=slot.index,
        )
        metrics = RolloutMetrics(
            episode.length,
            episode.total_reward,
            dict(episode.agent_rewards),
            dict(episode.custom_metrics),
            {},
            dict(episode.hist_data),
            dict(episode.media),
        )
        with self._stats_lock:
            self.new_metrics.append(metrics)
            self.episode_returns.append(episode.total_reward)
            self.episode_lengths.append(episode.length)
            self.num_episodes += 1
        if soft:
            self._continue_episode(slot)
        else:
            self._start_episode(slot)

    def _continue_episode(self, slot: _Slot) -> None:
        """Soft horizon (RLlib 1.11): the same Episode object gets a new id and zero
        length; each agent still acting starts a new trajectory at its current
        observation, keeping its RNN state. The env is not reset."""
        episode = slot.episode
        episode.soft_reset()
        old, slot.agents = slot.agents, {}
        for agent_id in slot.to_act:
            prev = old[agent_id]
            traj = AgentTrajectory(
                agent_id,
                prev.agent_index,
                prev.policy_id,
                prev.policy,
                episode.episode_id,
                slot.index,
                self._unroll_ids,
                prev.obs[-1],
                prev.last_info,
                plan=self._plan_for(prev.policy),
            )
            traj.initial_state = prev.current_state()
            slot.agents[agent_id] = traj

    # ------------------------------------------------------------------ stepping
    def _tick(self) -> Tuple[int, int]:
        """Acts for every waiting agent, then steps every sub-env once.

        Returns:
            (env steps, agent steps) taken.
        """
        requests: Dict[str, List[Tuple[_Slot, AgentTrajectory]]] = defaultdict(list)
        for slot in self._slots:
            for agent_id in slot.to_act:
                traj = slot.agents[agent_id]
                requests[traj.policy_id].append((slot, traj))
        env_actions: List[Dict[Any, Any]] = [{} for _ in self._slots]
        for policy_id, items in requests.items():
            self._act(self.policy_map[policy_id], items, env_actions)
        return self._step_slots(env_actions)

    def _step_slots(self, env_actions: List[Dict[Any, Any]]) -> Tuple[int, int]:
        """Steps every sub-env with its agents' actions; returns (env steps, agent steps)."""
        agent_steps = 0
        for slot in self._slots:
            actions = env_actions[slot.index]
            if type(slot.env) is _SingleAgentAdapter and len(actions) == 1 and _DUMMY_AGENT_ID in actions:
                agent_steps += self._step_single(slot, actions[_DUMMY_AGENT_ID])
            else:
                agent_steps += self._step_env(slot, actions)
        self.total_env_steps += len(self._slots)
        return len(self._slots), agent_steps

    def _act(
        self, policy: Any, items: List[Tuple[_Slot, AgentTrajectory]], env_actions: List[Dict[Any, Any]]
    ) -> None:
        plan_columns = items[0][1].plan.action_columns
        if len(plan_columns) == 1 and plan_columns[0][1:] == (SampleBatch.OBS, "single", 0):
            # Only the current observations (the common case): one stack, no per-agent rows.
            columns = {plan_columns[0][0]: stack_values([traj.current_obs() for _, traj in items])}
        else:
            rows = [traj.action_inputs() for _, traj in items]
            columns = {k: stack_column(k, [r[k] for r in rows]) for k in rows[0]}
        # Every column has one row per item (stacked above): no need to count and check them again.
        input_dict = SampleBatch._trusted(columns, len(items), _INPUT_FLAGS)
        input_dict._derive_dones()
        infos_req = policy.view_requirements.get(SampleBatch.INFOS)
        if infos_req is not None and infos_req.used_for_compute_actions:
            # The info dict that came with each agent's current observation (RLlib 1.11).
            input_dict[SampleBatch.INFOS] = object_column([traj.last_info for _, traj in items])
        outputs = policy.compute_actions_from_input_dict(
            input_dict, explore=self.settings.explore, episodes=[slot.episode for slot, _ in items]
        )
        self._apply_actions(policy, items, *_outputs_as_numpy(policy, outputs, len(items)), env_actions)

    def _apply_actions(
        self,
        policy: Any,
        items: List[Tuple[_Slot, AgentTrajectory]],
        actions: Any,
        state_out: List[np.ndarray],
        extras: Dict[str, Any],
        env_actions: List[Dict[Any, Any]],
    ) -> None:
        """Stages each agent's action row and records it on its episode."""
        to_env = self._env_action_fn(policy)
        flatten = flattens_actions(policy)
        plain = isinstance(actions, np.ndarray) and all(isinstance(v, np.ndarray) for v in extras.values())
        extra_items = list(extras.items())
        if plain:  # rows split off whole columns at once (the same values as indexing each row)
            action_rows = list(actions)
            keys = [k for k, _ in extra_items]
            extra_rows = [dict(zip(keys, row)) for row in zip(*(list(v) for _, v in extra_items))]
        for j, (slot, traj) in enumerate(items):
            if plain:
                action = action_rows[j]
                extra = extra_rows[j] if keys else {}
            else:
                action = _row(actions, j)
                extra = {k: _row(v, j) for k, v in extra_items}
            state = [s[j] for s in state_out]
            traj.stage_action(flat_action(action) if flatten else action, state, extra)
            episode = slot.episode
            agent_id = traj.agent_id
            episode._set_last_action(agent_id, action)
            episode._set_rnn_state(agent_id, state)
            episode._set_last_extra_action_outs(agent_id, extra)
            env_actions[slot.index][agent_id] = to_env(action)

    def _step_env(self, slot: _Slot, action_dict: Dict[Any, Any]) -> int:
        obs, rewards, terms, truncs, infos = slot.env.step(action_dict)
        episode = slot.episode
        s = self.settings
        all_term = bool(terms.get(ALL_AGENTS, False))
        all_trunc = bool(truncs.get(ALL_AGENTS, False)) and not all_term
        episode.length += 1
        hit_horizon = s.horizon is not None and episode.length >= s.horizon and not (all_term or all_trunc)
        if hit_horizon and not s.soft_horizon:
            all_trunc = True  # the horizon truncates the episode (RLlib 1.11: done, env reset)
        over = all_term or all_trunc
        soft_end = hit_horizon and s.soft_horizon
        # RLlib 1.11: with no_done_at_end, and at a soft horizon, rows are recorded as not done.
        record = not (s.no_done_at_end or soft_end)
        if s.check_finite:
            for agent_id, reward in rewards.items():
                self._check_finite(slot, reward, SampleBatch.REWARDS, agent_id)
        episode._add_agent_rewards({a: r for a, r in rewards.items() if a != ALL_AGENTS})
        for agent_id, reward in rewards.items():
            traj = slot.agents.get(agent_id)
            if traj is not None and traj.staged is not None:
                traj.add_reward(reward)
        rows, to_act = 0, []
        for agent_id, ob in obs.items():
            term = bool(terms.get(agent_id, False)) or all_term
            trunc = (bool(truncs.get(agent_id, False)) or all_trunc) and not term
            rows += self._observe(slot, agent_id, ob, term, trunc, infos.get(agent_id) or {}, record)
            if not (term or trunc or over):
                to_act.append(agent_id)
        if over:  # agents that acted but got no final observation end on their last one
            for traj in slot.agents.values():
                if traj.staged is not None:
                    traj.close_step(
                        traj.obs[-1], all_term and record, all_trunc and record, {}, env_t=episode.length - 1
                    )
                    traj.done = True
                    rows += 1
        slot.to_act = to_act
        return rows + self._after_step(slot, over, soft_end)

    def _after_step(self, slot: _Slot, over: bool, soft_end: bool) -> int:
        """on_episode_step (unless it is DefaultCallbacks' own doing nothing), then the
        episode's end (over, or a soft horizon). Returns 0 (no rows of its own)."""
        if self._step_callback:
            self.callbacks.on_episode_step(
                worker=self.worker,
                base_env=self.base_env,
                policies=self.policy_map,
                episode=slot.episode,
                env_index=slot.index,
            )
        if over:
            self._end_episode(slot)
        elif soft_end:
            self._end_episode(slot, soft=True)
        return 0

    def _step_single(self, slot: _Slot, action: Any) -> int:
        """``_step_env`` for a single-agent env (the same outcome without the
        multi-agent dicts): the one agent acted, so it gets the new observation."""
        agent_id = _DUMMY_AGENT_ID
        ob, reward, term, trunc, info = slot.env.step_single(action)
        episode = slot.episode
        s = self.settings
        term = bool(term)
        trunc = bool(trunc) and not term
        episode.length += 1
        hit_horizon = s.horizon is not None and episode.length >= s.horizon and not (term or trunc)
        if hit_horizon and not s.soft_horizon:
            trunc = True
        over = term or trunc
        soft_end = hit_horizon and s.soft_horizon
        record = not (s.no_done_at_end or soft_end)
        if s.check_finite:
            self._check_finite(slot, reward, SampleBatch.REWARDS, agent_id)
        episode._add_agent_rewards({agent_id: reward})
        traj = slot.agents.get(agent_id)
        if traj is not None and traj.staged is not None:
            traj.add_reward(reward)
        rows = self._observe(slot, agent_id, ob, term, trunc, info or {}, record)
        slot.to_act = [] if over else [agent_id]
        return rows + self._after_step(slot, over, soft_end)

    # ------------------------------------------------------------------ lean branch
    def _columnar_run(self) -> Optional[ColumnarRun]:
        """Columns for this sample() call if every sub-env takes the lean branch: a
        single-agent env whose one agent acts through the same feed-forward policy
        (``lean_policy``), without horizon, ``no_done_at_end`` or finite checks.
        Otherwise None (the general per-agent path)."""
        s = self.settings
        if s.horizon is not None or s.no_done_at_end or s.check_finite:
            return None
        trajs = []
        for slot in self._slots:
            if (
                type(slot.env) is not _SingleAgentAdapter
                or slot.episode is None
                or slot.to_act != [_DUMMY_AGENT_ID]
            ):
                return None
            traj = slot.agents.get(_DUMMY_AGENT_ID)
            if traj is None or len(slot.agents) != 1 or not ColumnarRun.fits(traj):
                return None
            trajs.append(traj)
        policy = trajs[0].policy
        if any(t.policy is not policy for t in trajs) or not lean_policy(
            policy, trajs[0].plan, trajs[0].initial_state
        ):
            return None
        lean = ColumnarRun(policy, trajs, s.rollout_fragment_length + 1)
        lean.to_env = self._env_action_fn(policy)
        infos_req = policy.view_requirements.get(SampleBatch.INFOS)
        lean.infos_for_acting = infos_req is not None and infos_req.used_for_compute_actions
        return lean

    def _leave_lean(self) -> None:
        """Hands the lean branch's rows back to the trajectories (the general path's state)."""
        lean, self._lean = self._lean, None
        if lean is not None:
            lean.materialize()

    def _tick_lean(self) -> Tuple[int, int]:
        """``_tick`` on the columns: one stack of the current observations, the policy's
        outputs written as whole rows, each env's outcome into its cell; the Episode
        and callback calls are those of the general path, in the same order."""
        lean, slots = self._lean, self._slots
        agent_id = _DUMMY_AGENT_ID
        policy = lean.policy
        obs = None
        episodes = [slot.episode for slot in slots]
        if None not in episodes and all(
            slot.to_act == [agent_id] and slot.agents[agent_id].policy is policy for slot in slots
        ):
            obs = lean.stacked_obs()
        if obs is None:  # (a new episode maps to another policy, or odd observations)
            self._leave_lean()
            return self._tick()
        n = len(slots)
        input_dict = SampleBatch._trusted({SampleBatch.OBS: obs}, n, _INPUT_FLAGS)
        input_dict._derive_dones()
        if lean.infos_for_acting:
            input_dict[SampleBatch.INFOS] = object_column(lean.cur_info)
        outputs = policy.compute_actions_from_input_dict(
            input_dict, explore=self.settings.explore, episodes=episodes
        )
        actions, state_out, extras = _outputs_as_numpy(policy, outputs, n)
        if state_out or lean.write_tick(obs, actions, extras) is None:
            self._leave_lean()
            env_actions: List[Dict[Any, Any]] = [{} for _ in slots]
            items = [(slot, slot.agents[agent_id]) for slot in slots]
            self._apply_actions(policy, items, actions, state_out, extras, env_actions)
            return self._step_slots(env_actions)
        to_env = lean.to_env
        action_rows = list(actions)  # (rows split off whole columns: the same values as indexing)
        if extras:
            keys = list(extras)
            extra_rows = [dict(zip(keys, row)) for row in zip(*(list(v) for v in extras.values()))]
        else:
            extra_rows = [{} for _ in slots]
        sends = []
        for j, episode in enumerate(episodes):
            action = action_rows[j]
            episode._record_action(agent_id, action, [], extra_rows[j])
            sends.append(to_env(action))
        process_obs, write_step, step_callback = self._process_obs, lean.write_step, self._step_callback
        for j, slot in enumerate(slots):
            ob, reward, term, trunc, info = slot.env.step_single(sends[j])
            episode = episodes[j]
            traj = lean.trajs[j]
            term = bool(term)
            trunc = bool(trunc) and not term
            over = term or trunc
            episode.length += 1
            info = info or {}
            new_obs = process_obs(traj.policy_id, traj.policy, ob)
            write_step(j, new_obs, float(reward), term, trunc, info)
            episode._record_step(agent_id, reward, new_obs, ob, info, over)
            if over:
                slot.to_act = []
                if step_callback:
                    self._after_step(slot, False, False)
                self._end_episode(slot)
                lean.restart(j, slot.agents[agent_id])
            elif step_callback:
                self._after_step(slot, False, False)
        self.total_env_steps += n
        return n, n

    def _observe(
        self,
        slot: _Slot,
        agent_id: Any,
        raw_obs: Any,
        term: bool,
        trunc: bool,
        info: dict,
        record_done: bool = True,
    ) -> int:
        """Records an agent's new observation; returns the number of rows completed (0 or 1).

        ``record_done=False`` writes the row as not done (``no_done_at_end``, soft
        horizon) while the agent still stops acting when it is done."""
        episode = slot.episode
        traj = slot.agents.get(agent_id)
        rows = 0
        if traj is None:
            traj = self._add_agent(slot, agent_id, raw_obs, info)
            obs = traj.obs[-1]
        else:
            if self.settings.check_finite:
                self._check_finite(slot, raw_obs, SampleBatch.NEXT_OBS, agent_id)
            obs = self._process_obs(traj.policy_id, traj.policy, raw_obs)
            if traj.staged is not None:
                traj.close_step(
                    obs, term and record_done, trunc and record_done, info, env_t=episode.length - 1
                )
                traj.done = bool(term or trunc)
                rows = 1
            elif not traj.done:
                traj.obs[-1] = obs  # observed again before acting: the newest observation counts
        episode._set_last_observation(agent_id, obs)
        episode._set_last_raw_obs(agent_id, raw_obs)
        episode._set_last_info(agent_id, info)
        episode._set_last_done(agent_id, term or trunc)
        return rows

    # ------------------------------------------------------------------ batches
    def _postprocess_slot(self, slot: _Slot) -> None:
        """Postprocesses every agent's current piece of the slot's episode, then cuts them.

        Before postprocessing (RLlib 1.11): rows whose info says
        ``training_enabled=False`` are left out, and rewards are clipped
        (``clip_rewards``)."""
        pre = {}
        lean = self._lean
        for agent_id, traj in slot.agents.items():
            if lean is not None:  # (the one agent: its rows are in the columns)
                cols = lean.piece(slot.index)
                if cols is None:
                    continue
                # Arrays of equal length: SampleBatch(cols) without its per-column checks.
                batch = SampleBatch._trusted(cols, len(cols[SampleBatch.OBS]), _INPUT_FLAGS)
            elif traj.num_fragment_rows == 0:
                continue
            else:
                batch = traj.build_fragment()
            batch = _trainable_rows(batch)
            if batch is not None:
                _clip_rewards(batch, self.settings.clip_rewards)
                pre[agent_id] = (traj.policy, batch)
        # The pre-postprocessing batches, for callbacks that read them (copies, since
        # postprocessing may change the batches in place).
        originals = (
            {a: (p, b.copy(shallow=True)) for a, (p, b) in pre.items()} if self._reads_originals() else {}
        )
        for agent_id, (policy, batch) in pre.items():
            others = {a: v for a, v in pre.items() if a != agent_id}
            post = policy.postprocess_trajectory(batch, others, slot.episode)
            traj = slot.agents[agent_id]
            self.callbacks.on_postprocess_trajectory(
                worker=self.worker,
                episode=slot.episode,
                agent_id=agent_id,
                policy_id=traj.policy_id,
                policies=self.policy_map,
                postprocessed_batch=post,
                original_batches=originals,
            )
            self._outputs[traj.policy_id].append(post)
            self._out_agent_steps += post.count
        if lean is not None:
            lean.cut(slot.index)
            return
        for traj in slot.agents.values():
            traj.cut()

    def _reads_originals(self) -> bool:
        """Whether on_postprocess_trajectory may read ``original_batches``: not when it
        is DefaultCallbacks' own and no legacy ``on_postprocess_traj`` hook is set."""
        cb = self.callbacks
        if type(cb).on_postprocess_trajectory is not DefaultCallbacks.on_postprocess_trajectory:
            return True
        return bool((getattr(cb, "legacy_callbacks", None) or {}).get("on_postprocess_traj"))

    def _counted_output(self) -> int:
        return self._out_env_steps if self.settings.count_steps_by == "env_steps" else self._out_agent_steps

    def _take_outputs(self) -> Any:
        batches = {pid: _concat(b) for pid, b in self._outputs.items() if b}
        env_steps = self._out_env_steps
        self._outputs = defaultdict(list)
        self._out_env_steps = self._out_agent_steps = 0
        return MultiAgentBatch.wrap_as_needed(batches, env_steps)

    def _env_action_fn(self, policy: Any) -> Callable[[Any], Any]:
        config = getattr(policy, "config", None) or {}
        key = (
            config.get("normalize_actions", True),
            config.get("clip_actions", False),
            id(policy.action_space),
        )
        cached = self._to_env.get(id(policy))
        if cached is None or cached[0] != key or cached[2] is not policy:
            fn = env_action_fn(policy, self.settings.normalize_actions, self.settings.clip_actions)
            cached = (key, fn, policy)
            self._to_env[id(policy)] = cached
        return cached[1]


class AsyncEnvRunner:
    """An EnvRunner sampling in a background thread (RLlib 1.11's ``AsyncSampler``).

    The thread collects fragments ahead of time into a queue of at most
    ``queue_size``; :meth:`sample` returns the oldest one. An exception in the
    thread is raised again by the next :meth:`sample`. Policies are used from
    both threads, so their own locks (torch and graph TF policies have them)
    keep weight updates and inference apart; observation filters must be
    concurrent (``ConcurrentMeanStdFilter``).
    """

    def __init__(self, runner: EnvRunner, queue_size: int = 5):
        self.runner = runner
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=queue_size)
        self._stopped = threading.Event()
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="rlpolicy-async-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                batch = self.runner.sample()
                while not self._stopped.is_set():
                    try:
                        self._queue.put(batch, timeout=0.05)
                        break
                    except queue.Full:
                        continue
        except BaseException as err:  # handed to the caller of sample()
            self._error = err

    def sample(self) -> Any:
        """The next fragment the thread collected (waits for one).

        Raises:
            RuntimeError: If the sampling thread failed (its exception is the cause)
                or was stopped.
        """
        while True:
            try:
                return self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._error is not None:
                    raise RuntimeError(
                        f"RolloutWorker: the async sampling thread failed: "
                        f"{type(self._error).__name__}: {self._error}"
                    ) from self._error
                if not self._thread.is_alive():
                    raise RuntimeError("RolloutWorker: the async sampling thread was stopped") from None

    def stop(self) -> None:
        """Stops the thread (after its current fragment), then closes the sub-environments."""
        self._stopped.set()
        self._thread.join(timeout=60)
        self.runner.stop()

    def __getattr__(self, name: str) -> Any:  # total_env_steps, base_env, pop_metrics, ...
        runner = self.__dict__.get("runner")
        if runner is None:
            raise AttributeError(name)
        return getattr(runner, name)


def env_action_fn(
    policy: Any, normalize_actions: Optional[bool] = None, clip_actions: Optional[bool] = None
) -> Callable[[Any], Any]:
    """How a policy's action is sent to the env (RLlib 1.11): unsquashed from
    ``[-1, 1]`` to the Box bounds with ``normalize_actions``, else clipped with
    ``clip_actions``; 0-d arrays become Python scalars. None: the policy's config."""
    from rlpolicy.utils.spaces.space_utils import clip_action, unsquash_action

    config = getattr(policy, "config", {}) or {}
    normalize = config.get("normalize_actions", True) if normalize_actions is None else normalize_actions
    clip = config.get("clip_actions", False) if clip_actions is None else clip_actions
    struct = getattr(policy, "action_space_struct", policy.action_space)
    has_box = any(
        getattr(s, "dtype", None) in (np.float32, np.float64) and hasattr(s, "low")
        for s in tree.flatten(struct)
    )

    def to_env(action: Any) -> Any:
        if has_box and normalize:
            action = unsquash_action(action, struct)
        elif has_box and clip:
            action = clip_action(action, struct)
        if isinstance(action, np.ndarray):
            return _scalar_if_0d(action)
        if isinstance(action, (np.generic, int, float)):  # a row of a primitive batch: as it is
            return action
        return tree.map_structure(_scalar_if_0d, action)

    return to_env


def _overrides_step_callback(callbacks: Any) -> bool:
    """Whether ``callbacks.on_episode_step`` may do anything: not when it is
    DefaultCallbacks' own and no legacy ``on_episode_step`` hook is set."""
    if type(callbacks).on_episode_step is not DefaultCallbacks.on_episode_step:
        return True
    if "on_episode_step" in getattr(callbacks, "__dict__", {}):
        return True
    return bool((getattr(callbacks, "legacy_callbacks", None) or {}).get("on_episode_step"))


def _concat(batches: List[SampleBatch]) -> SampleBatch:
    """``concat_samples(batches)``; one plain batch becomes a new SampleBatch over the
    same columns instead (what concatenating one batch gives, without copying)."""
    if len(batches) == 1:
        b = batches[0]
        if type(b) is SampleBatch and b.count > 0 and SampleBatch.SEQ_LENS not in b and b._slice_map is None:
            flags = {"_is_training": False, "_time_major": b.time_major, "_zero_padded": b.zero_padded}
            return SampleBatch._trusted(dict(b), b.count, {**flags, "_max_seq_len": b.max_seq_len})
    return concat_samples(batches)


def _flatten_for_policy(policy_id: str, policy: Any, raw_obs: Any) -> Any:
    """The policy's own preprocessing (Dict/Tuple observations flattened)."""
    return flatten_single_obs(policy, raw_obs)


def _trainable_rows(batch: SampleBatch) -> Optional[SampleBatch]:
    """``batch`` without the rows whose info has ``training_enabled=False`` (None if none remain)."""
    infos = batch.get(SampleBatch.INFOS)
    if infos is None:
        return batch
    keep = np.array(
        [not (isinstance(i, dict) and i.get("training_enabled", True) is False) for i in infos], dtype=bool
    )
    if keep.all():
        return batch
    if not keep.any():
        return None
    idx = np.nonzero(keep)[0]
    return SampleBatch(
        {
            k: tree.map_structure(lambda v: np.asarray(v)[idx], v) if k != SampleBatch.INFOS else v[idx]
            for k, v in batch.items()
        }
    )


def _check_finite_samples(value: Any, column: str, env: Any, env_index: int, agent_id: Any) -> None:
    """Raises NonFiniteSampleError naming the env, the agent and the column if
    ``value`` (an observation or reward the env returned) holds a NaN or inf."""
    for leaf in tree.flatten(value):
        arr = np.asarray(leaf)
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            from rlpolicy.utils.error import NonFiniteSampleError

            name = getattr(getattr(env, "spec", None), "id", None) or type(env).__name__
            agent = "" if agent_id == _DUMMY_AGENT_ID else f", agent {agent_id!r}"
            raise NonFiniteSampleError(
                f"env {name!r} (sub-environment {env_index}{agent}) returned NaN/inf in column "
                f"{column!r}: {np.array2string(arr.ravel()[:8], precision=4)}; fix the env, or set "
                "config _check_finite_samples=False to let such values through"
            )


def _clip_rewards(batch: SampleBatch, clip: Any) -> None:
    """RLlib 1.11's ``clip_rewards``: True -> sign of each reward, a number c -> clip to [-c, c]."""
    if not clip:
        return
    rewards = np.asarray(batch[SampleBatch.REWARDS])
    if clip is True:
        batch[SampleBatch.REWARDS] = np.sign(rewards).astype(rewards.dtype)
    else:
        batch[SampleBatch.REWARDS] = np.clip(rewards, -float(clip), float(clip)).astype(rewards.dtype)


def _scalar_if_0d(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def _as_numpy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value
    return tree.map_structure(np.asarray, value)


def _check_action_count(policy: Any, actions: Any, n: int) -> None:
    """Raises if ``actions`` holds fewer rows than observations. RLlib 1.11 fails
    with an IndexError when a policy acting on one observation at a time (its
    ES/ARS policies) is handed several; here the error says why."""
    leaves = [actions] if isinstance(actions, np.ndarray) else tree.flatten(actions)
    got = len(leaves[0]) if leaves and getattr(leaves[0], "ndim", 1) > 0 else None
    if got is not None and got < n:  # (more rows than observations: 1.11 reads the first n)
        raise ValueError(
            f"{type(policy).__name__}.compute_actions returned {got} action(s) for {n} observations; a policy "
            "that acts on one observation at a time (as RLlib 1.11's ES/ARS policies) needs num_envs=1 and "
            "one agent per policy and step"
        )


def _outputs_as_numpy(
    policy: Any, outputs: Tuple[Any, Any, Any], n: int
) -> Tuple[Any, List[np.ndarray], Dict[str, Any]]:
    """compute_actions' (actions, state_out, extras) as numpy, the action count checked."""
    actions, state_out, extras = outputs
    if isinstance(actions, list):  # a batch of primitive actions as a list (RLlib 1.11: np.array)
        actions = np.array(actions)
    actions = _as_numpy(actions)
    _check_action_count(policy, actions, n)
    return actions, [np.asarray(s) for s in state_out], {k: _as_numpy(v) for k, v in extras.items()}


def _row(value: Any, j: int) -> Any:
    """Row ``j`` of a batched (possibly nested) value."""
    if isinstance(value, np.ndarray):
        return value[j]
    return tree.map_structure(lambda v: v[j], value)


__all__ = [
    "EnvRunner",
    "AsyncEnvRunner",
    "RolloutMetrics",
    "SamplerSettings",
    "SubEnvironments",
    "wrap_env",
    "env_action_fn",
    "BATCH_MODES",
    "COUNT_STEPS_BY",
]
