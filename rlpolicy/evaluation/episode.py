"""``Episode``: the state of one running episode as seen by policies and callbacks
(RLlib 1.11's ``ray.rllib.evaluation.episode``)."""

from __future__ import annotations

import inspect
import random
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.deprecation import deprecation_warning
from rlpolicy.utils.spaces.space_utils import flatten_to_single_ndarray
from rlpolicy.utils.typing import AgentID, EnvActionType, EnvID, EnvInfoDict, EnvObsType, PolicyID, TensorType

# Agent id used in single-agent envs (RLlib's ``_DUMMY_AGENT_ID``).
_DUMMY_AGENT_ID = "agent0"
_DEFAULT_POLICY_ID = "default_policy"


def _default_policy_mapping_fn(
    agent_id: AgentID, episode: "Episode", worker: Any = None, **kwargs
) -> PolicyID:
    return _DEFAULT_POLICY_ID


def resolve_policy_mapping_fn(fn: Callable[..., PolicyID]) -> Callable[..., PolicyID]:
    """``fn`` as a callable ``(agent_id, episode, worker=None, **kwargs) -> policy_id``.

    RLlib 1.x mapping functions come in several signatures: ``fn(agent_id)``
    (before 1.4), ``fn(agent_id, episode)``, ``fn(agent_id, episode, worker,
    **kwargs)``. RLlib 1.11 retries the old form after a TypeError; here the
    form is read from ``fn``'s signature once, so a TypeError raised inside
    ``fn`` reaches the caller unchanged. Keyword arguments ``fn`` does not
    accept are not passed.
    """
    if _has_current_signature(fn):
        return fn
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature (some builtins): call as RLlib 1.11 does
        return fn
    kinds = inspect.Parameter
    positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind == kinds.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind == kinds.VAR_KEYWORD for p in params)
    n_args = 2 if var_pos or len(positional) >= 2 else 1
    taken = {p.name for p in positional[:n_args]}
    keywords = {
        p.name
        for p in params
        if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY) and p.name not in taken
    }
    if n_args == 2 and var_kw:
        return fn  # the current signature: nothing to adapt

    def mapping_fn(agent_id: AgentID, episode: Any = None, worker: Any = None, **kwargs) -> PolicyID:
        args = (agent_id, episode)[:n_args]
        extra = {"worker": worker, **kwargs}
        return fn(*args, **(extra if var_kw else {k: v for k, v in extra.items() if k in keywords}))

    mapping_fn.__wrapped__ = fn
    return mapping_fn


def _has_current_signature(fn: Any) -> bool:
    """Whether a plain function or bound method takes two positional arguments and
    ``**kwargs`` (read from its code object: ``inspect.signature`` costs ~20 us per
    episode). Anything with ``__wrapped__`` or ``__signature__`` is left to inspect."""
    func, skip = (fn.__func__, 1) if inspect.ismethod(fn) else (fn, 0)
    code = getattr(func, "__code__", None)
    if code is None or not inspect.isfunction(func):
        return False
    if hasattr(fn, "__wrapped__") or hasattr(fn, "__signature__") or hasattr(func, "__wrapped__"):
        return False
    return code.co_argcount - skip >= 2 and bool(code.co_flags & inspect.CO_VARKEYWORDS)


def _no_batch_builder() -> None:
    return None


def _ignore_extra_batch(batch: Any) -> None:
    return None


@DeveloperAPI
class Episode:
    """Tracks one episode: rewards, length, and each agent's last obs/action/state.

    Callbacks read it and can store ``user_data``, ``custom_metrics``,
    ``hist_data`` and ``media``. Samplers update it through the ``_set_*`` and
    ``_add_agent_rewards`` methods.

    Attributes:
        episode_id: Random id of this episode.
        env_id: Id of the (sub-)environment running it.
        length: Number of env steps so far.
        total_reward: Sum of all agents' rewards so far.
        agent_rewards: ``(agent_id, policy_id) -> summed reward``.
        user_data: Free-form scratch data.
        custom_metrics: Metrics to report (name -> number).
        hist_data: Histogram data (name -> list of numbers).
        media: Other data to report (e.g. videos).
        policy_map: Policy id -> Policy.
        batch_builder: What ``batch_builder_factory`` returned.
    """

    def __init__(
        self,
        policies: Optional[Dict[PolicyID, Any]] = None,
        policy_mapping_fn: Optional[Callable[..., PolicyID]] = None,
        batch_builder_factory: Optional[Callable[[], Any]] = None,
        extra_batch_callback: Optional[Callable[[Any], None]] = None,
        env_id: Optional[EnvID] = None,
        *,
        worker: Optional[Any] = None,
    ):
        """Initializes an Episode.

        Args:
            policies: Policy id -> Policy (default: empty).
            policy_mapping_fn: ``fn(agent_id, episode, worker=..., **kwargs) -> policy_id``
                (default: always ``"default_policy"``); the older ``fn(agent_id)`` and
                ``fn(agent_id, episode)`` work too (see :func:`resolve_policy_mapping_fn`).
            batch_builder_factory: Creates ``self.batch_builder`` (default: None).
            extra_batch_callback: Stored as ``add_extra_batch`` (default: no-op).
            env_id: Id of the sub-environment.
            worker: The rollout worker running the episode.
        """
        self.new_batch_builder = batch_builder_factory or _no_batch_builder
        self.add_extra_batch = extra_batch_callback or _ignore_extra_batch
        self.batch_builder = self.new_batch_builder()
        self.env_id = env_id
        self.worker = worker
        self.custom_metrics: Dict[str, float] = {}
        self.user_data: Dict[str, Any] = {}
        self.hist_data: Dict[str, List[float]] = {}
        self.media: Dict[str, Any] = {}
        self.policy_map = policies if policies is not None else {}
        self._policies = self.policy_map  # old name, kept for compatibility
        self.policy_mapping_fn = policy_mapping_fn or _default_policy_mapping_fn
        self._mapping_source = self.policy_mapping_fn
        self._mapping_call = resolve_policy_mapping_fn(self.policy_mapping_fn)
        self._next_agent_index = 0
        self._agent_to_index: Dict[AgentID, int] = {}
        self._agent_to_policy: Dict[AgentID, PolicyID] = {}
        self._agent_to_rnn_state: Dict[AgentID, List[Any]] = {}
        self._agent_to_last_obs: Dict[AgentID, EnvObsType] = {}
        self._agent_to_last_raw_obs: Dict[AgentID, EnvObsType] = {}
        self._agent_to_last_done: Dict[AgentID, bool] = {}
        self._agent_to_last_info: Dict[AgentID, EnvInfoDict] = {}
        self._agent_to_last_action: Dict[AgentID, EnvActionType] = {}
        self._agent_to_last_extra_action_outs: Dict[AgentID, dict] = {}
        self._agent_to_prev_action: Dict[AgentID, EnvActionType] = {}
        self.soft_reset()

    def soft_reset(self) -> None:
        """Starts a new episode id and clears length and rewards (keeps agent data)."""
        self.length = 0
        self.episode_id = random.randrange(int(2e9))
        self.total_reward = 0.0
        self.agent_rewards: Dict[tuple, float] = defaultdict(float)
        self._agent_reward_history: Dict[AgentID, List[float]] = defaultdict(list)

    def policy_for(self, agent_id: AgentID = _DUMMY_AGENT_ID, refresh: bool = False) -> PolicyID:
        """The policy id for ``agent_id`` (asked from ``policy_mapping_fn`` once, then cached).

        Args:
            agent_id: The agent.
            refresh: Ask ``policy_mapping_fn`` again.

        Raises:
            KeyError: If the mapping function returns an id not in the policy map.
        """
        if agent_id not in self._agent_to_policy or refresh:
            if self._mapping_source is not self.policy_mapping_fn:  # replaced by the user
                self._mapping_source = self.policy_mapping_fn
                self._mapping_call = resolve_policy_mapping_fn(self.policy_mapping_fn)
            self._agent_to_policy[agent_id] = self._mapping_call(agent_id, self, worker=self.worker)
        policy_id = self._agent_to_policy[agent_id]
        if policy_id not in self.policy_map:
            raise KeyError(
                f"policy_mapping_fn returned invalid policy id {policy_id!r} for agent "
                f"{agent_id!r}; known policy ids: {sorted(self.policy_map)}"
            )
        return policy_id

    def last_observation_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> Optional[EnvObsType]:
        """The agent's last (preprocessed) observation, or None."""
        return self._agent_to_last_obs.get(agent_id)

    def last_raw_obs_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> Optional[EnvObsType]:
        """The agent's last raw observation (as the env returned it), or None."""
        return self._agent_to_last_raw_obs.get(agent_id)

    def last_info_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> Optional[EnvInfoDict]:
        """The agent's last info dict, or None."""
        return self._agent_to_last_info.get(agent_id)

    def last_action_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> EnvActionType:
        """The agent's last action, flattened; zeros shaped like an action before the first one."""
        if agent_id in self._agent_to_last_action:
            return flatten_to_single_ndarray(self._agent_to_last_action[agent_id])
        space = self.policy_map[self.policy_for(agent_id)].action_space
        flat = flatten_to_single_ndarray(space.sample())
        if hasattr(space, "dtype") and space.dtype is not None:
            return np.zeros_like(flat, dtype=space.dtype)
        return np.zeros_like(flat)

    def prev_action_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> EnvActionType:
        """The action before the last one, flattened; zeros at the start."""
        if agent_id in self._agent_to_prev_action:
            return flatten_to_single_ndarray(self._agent_to_prev_action[agent_id])
        return np.zeros_like(self.last_action_for(agent_id))

    def last_reward_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> float:
        """The agent's last reward (0.0 if none yet)."""
        history = self._agent_reward_history[agent_id]
        return history[-1] if len(history) >= 1 else 0.0

    def prev_reward_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> float:
        """The reward before the last one (0.0 if fewer than two so far)."""
        history = self._agent_reward_history[agent_id]
        return history[-2] if len(history) >= 2 else 0.0

    def rnn_state_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> List[Any]:
        """The agent's last RNN state (the policy's initial state at first)."""
        if agent_id not in self._agent_to_rnn_state:
            policy = self.policy_map[self.policy_for(agent_id)]
            self._agent_to_rnn_state[agent_id] = policy.get_initial_state()
        return self._agent_to_rnn_state[agent_id]

    def last_done_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> bool:
        """The agent's last done flag (False if none yet)."""
        return self._agent_to_last_done.get(agent_id, False)

    def last_extra_action_outs_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> dict:
        """The extra action outputs (e.g. logits, vf preds) of the agent's last action, or ``{}``."""
        return self._agent_to_last_extra_action_outs.get(agent_id, {})

    def last_pi_info_for(self, agent_id: AgentID = _DUMMY_AGENT_ID) -> dict:
        """Old name of :meth:`last_extra_action_outs_for`."""
        return self.last_extra_action_outs_for(agent_id)

    def get_agents(self) -> List[AgentID]:
        """The agents that have received an observation in this episode."""
        return list(self._agent_to_last_obs.keys())

    def _add_agent_rewards(self, reward_dict: Dict[AgentID, float]) -> None:
        for agent_id, reward in reward_dict.items():
            if reward is not None:
                self.agent_rewards[agent_id, self.policy_for(agent_id)] += reward
                self.total_reward += reward
                self._agent_reward_history[agent_id].append(reward)

    def _record_action(
        self, agent_id: AgentID, action: EnvActionType, rnn_state: List[Any], extra: dict
    ) -> None:
        """``_set_last_action``, ``_set_rnn_state`` and ``_set_last_extra_action_outs`` in one call."""
        last = self._agent_to_last_action
        if agent_id in last:
            self._agent_to_prev_action[agent_id] = last[agent_id]
        last[agent_id] = action
        self._agent_to_rnn_state[agent_id] = rnn_state
        self._agent_to_last_extra_action_outs[agent_id] = extra

    def _record_step(
        self, agent_id: AgentID, reward: Any, obs: Any, raw_obs: Any, info: EnvInfoDict, done: bool
    ) -> None:
        """One agent's env step: ``_add_agent_rewards({agent_id: reward})``, then its
        last observation, raw observation, info and done."""
        if reward is not None:
            self.agent_rewards[agent_id, self.policy_for(agent_id)] += reward
            self.total_reward += reward
            self._agent_reward_history[agent_id].append(reward)
        self._agent_to_last_obs[agent_id] = obs
        self._agent_to_last_raw_obs[agent_id] = raw_obs
        self._agent_to_last_info[agent_id] = info
        self._agent_to_last_done[agent_id] = done

    def _set_rnn_state(self, agent_id: AgentID, rnn_state: List[Any]) -> None:
        self._agent_to_rnn_state[agent_id] = rnn_state

    def _set_last_observation(self, agent_id: AgentID, obs: EnvObsType) -> None:
        self._agent_to_last_obs[agent_id] = obs

    def _set_last_raw_obs(self, agent_id: AgentID, obs: EnvObsType) -> None:
        self._agent_to_last_raw_obs[agent_id] = obs

    def _set_last_done(self, agent_id: AgentID, done: bool) -> None:
        self._agent_to_last_done[agent_id] = done

    def _set_last_info(self, agent_id: AgentID, info: EnvInfoDict) -> None:
        self._agent_to_last_info[agent_id] = info

    def _set_last_action(self, agent_id: AgentID, action: EnvActionType) -> None:
        # The old last action becomes the previous action.
        if agent_id in self._agent_to_last_action:
            self._agent_to_prev_action[agent_id] = self._agent_to_last_action[agent_id]
        self._agent_to_last_action[agent_id] = action

    def _set_last_extra_action_outs(self, agent_id: AgentID, pi_info: Dict[str, TensorType]) -> None:
        self._agent_to_last_extra_action_outs[agent_id] = pi_info

    # Old name of `_set_last_extra_action_outs`.
    _set_last_pi_info = _set_last_extra_action_outs

    def _agent_index(self, agent_id: AgentID) -> int:
        if agent_id not in self._agent_to_index:
            self._agent_to_index[agent_id] = self._next_agent_index
            self._next_agent_index += 1
        return self._agent_to_index[agent_id]


class MultiAgentEpisode(Episode):
    """Deprecated name of :class:`Episode`."""

    def __init__(self, *args, **kwargs):
        deprecation_warning(old="MultiAgentEpisode", new="Episode", error=False)
        super().__init__(*args, **kwargs)


__all__ = ["Episode", "MultiAgentEpisode", "resolve_policy_mapping_fn"]
