"""``RolloutWorker``: a set of policies plus the environments they act in
(RLlib 1.11's ``ray.rllib.evaluation.rollout_worker``).

A worker builds its policies (a ``PolicyMap``) from a policy class or a dict
of ``PolicySpec``s, creates ``num_envs`` sub-environments, and returns one
postprocessed rollout fragment per :meth:`RolloutWorker.sample` call: a
``SampleBatch``, or a ``MultiAgentBatch`` when agents map to policies other
than ``"default_policy"``. It also applies weights, global vars and gradients,
so the same object serves as the driver's local worker and, through
:meth:`RolloutWorker.as_remote`, as a Ray actor in a ``WorkerSet``.

The sampling loop lives in :mod:`rlpolicy.evaluation.sampler`.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import random
import socket
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from rlpolicy.env.env_context import EnvContext
from rlpolicy.evaluation._callbacks import MultiCallbacks, as_callbacks
from rlpolicy.evaluation.episode import resolve_policy_mapping_fn
from rlpolicy.evaluation.sampler import (
    BATCH_MODES,
    COUNT_STEPS_BY,
    AsyncEnvRunner,
    EnvRunner,
    RolloutMetrics,
    SamplerSettings,
)
from rlpolicy.policy._callbacks import DefaultCallbacks
from rlpolicy.policy._obs_prep import flatten_single_obs
from rlpolicy.policy.policy import PolicySpec
from rlpolicy.policy.policy_map import PolicyMap
from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.filter import Filter, get_filter
from rlpolicy.utils.typing import (
    AgentID,
    EnvConfigDict,
    ModelGradients,
    ModelWeights,
    PartialTrainerConfigDict,
    PolicyID,
    SampleBatchType,
)

logger = logging.getLogger(__name__)

PolicySpecArg = Union[type, Any, Dict[PolicyID, Any]]

# The RolloutWorker most recently built in this process (RLlib 1.11's global worker).
_global_worker: Optional["RolloutWorker"] = None


@DeveloperAPI
def get_global_worker() -> Optional["RolloutWorker"]:
    """The RolloutWorker of this process (the one built last), or None.

    Code running inside a worker (callbacks, postprocessing, a policy's
    hooks) reaches its worker this way, as in RLlib 1.11.
    """
    return _global_worker


@DeveloperAPI
class RolloutWorker:
    """Collects experience from its environments with its policies, and trains them on request.

    Example:
        >>> worker = RolloutWorker(
        ...     env_creator=lambda ctx: gymnasium.make("CartPole-v1"),
        ...     policy_spec=PGTorchPolicy, policy_config={"framework": "torch"},
        ...     num_envs=2, rollout_fragment_length=50)
        >>> batch = worker.sample()  # 100 env steps (2 envs x 50)
        >>> worker.learn_on_batch(batch)

    ``RolloutWorker(env_creator, policy)`` with a ready Policy instance (the
    pre-RLlib-signature form) still works; such a worker cannot become a Ray
    actor (actors build their policies from classes).
    """

    @classmethod
    def as_remote(
        cls,
        num_cpus: Optional[float] = None,
        num_gpus: Optional[float] = None,
        memory: Optional[int] = None,
        object_store_memory: Optional[int] = None,
        resources: Optional[dict] = None,
    ) -> Any:
        """This class as a Ray actor class with the given resource requests.

        Returns:
            ``ray.remote(...)(RolloutWorker)``; create actors with ``.remote(**kwargs)``.
        """
        import ray

        options = dict(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            memory=memory,
            object_store_memory=object_store_memory,
            resources=resources,
        )
        # Only what was asked for (Ray warns about some options even when None).
        return ray.remote(max_restarts=0, **{k: v for k, v in options.items() if v is not None})(cls)

    def __init__(
        self,
        env_creator: Optional[Callable[..., Any]] = None,
        policy_spec: Optional[PolicySpecArg] = None,
        *,
        policy_mapping_fn: Optional[Callable[..., PolicyID]] = None,
        policies_to_train: Optional[Union[List[PolicyID], Callable[..., bool]]] = None,
        validate_env: Optional[Callable[[Any, EnvContext], None]] = None,
        rollout_fragment_length: int = 100,
        count_steps_by: str = "env_steps",
        batch_mode: str = "truncate_episodes",
        num_envs: int = 1,
        normalize_actions: Optional[bool] = None,
        clip_actions: Optional[bool] = None,
        env_config: Optional[EnvConfigDict] = None,
        policy_config: Optional[PartialTrainerConfigDict] = None,
        worker_index: int = 0,
        num_workers: int = 0,
        callbacks: Any = None,
        seed: Optional[int] = None,
        spaces: Optional[Dict[PolicyID, Tuple[Any, Any]]] = None,
        explore: Optional[bool] = None,
        policy: Optional[PolicySpecArg] = None,
        episode_horizon: Optional[int] = None,
        soft_horizon: bool = False,
        no_done_at_end: bool = False,
        clip_rewards: Optional[Union[bool, float]] = None,
        observation_filter: Any = "NoFilter",
        sample_async: bool = False,
        extra_python_environs: Optional[Dict[str, Any]] = None,
        record_env: Union[bool, str] = False,
        remote_worker_envs: bool = False,
        remote_env_batch_wait_ms: int = 0,
        preprocessor_pref: Optional[str] = "deepmind",
        input_creator: Optional[Callable[[Any], Any]] = None,
    ):
        """Initializes a RolloutWorker.

        Args:
            env_creator: Returns one sub-environment (a gymnasium env or a
                ``MultiAgentEnv``); called with an ``EnvContext`` (the env config
                plus ``worker_index``/``vector_index``) if it takes an argument.
            policy_spec: A Policy class (one policy, ``"default_policy"``), a dict
                policy id -> ``PolicySpec`` (or ``(cls, obs_space, act_space,
                config)`` tuple); a ready Policy instance is accepted in place of a
                class or spec (local use only). Spaces left None come from the env.
            policy_mapping_fn: ``fn(agent_id, episode, worker=..., **kw) -> policy_id``
                (``fn(agent_id)`` and ``fn(agent_id, episode)`` work too, told apart by
                their signatures). Default: ``"default_policy"``, or the only policy there is.
            policies_to_train: Policy ids that ``learn_on_batch`` /
                ``compute_gradients`` / ``apply_gradients`` touch (or a callable
                ``(policy_id, batch) -> bool``); None: all policies.
            validate_env: Called as ``validate_env(env, env_context)`` on each new sub-env.
            rollout_fragment_length: Steps per sub-environment per ``sample()``
                (``truncate_episodes``), or the minimum number of steps of whole
                episodes per ``sample()`` (``complete_episodes``).
            count_steps_by: ``"env_steps"`` or ``"agent_steps"``: what the fragment length counts.
            batch_mode: ``"truncate_episodes"`` (fixed-size fragments, unfinished
                episodes are cut and bootstrapped) or ``"complete_episodes"``
                (whole episodes only).
            num_envs: Sub-environments stepped in lock-step (batched inference).
            normalize_actions: Unsquash Box actions from [-1, 1] to the space's
                bounds before the env sees them; None: each policy's config.
            clip_actions: Clip Box actions to the bounds (if not normalizing);
                None: each policy's config.
            env_config: Passed to ``env_creator`` (inside the EnvContext);
                default ``policy_config["env_config"]``.
            policy_config: The (trainer) config every policy starts from; each
                PolicySpec's ``config`` overrides it for that policy.
            worker_index: 0 for the local worker, ``1..num_workers`` for remote ones.
            num_workers: Number of remote workers in the worker set.
            callbacks: A DefaultCallbacks class or instance; default
                ``policy_config["callbacks"]``.
            seed: Seeds Python's, numpy's and the frameworks' global RNGs before the
                policies are built (not when a ready Policy instance is given), and the
                sub-environments' first resets (``seed + 1000 * worker_index + vector_index``).
            spaces: Policy id -> (observation space, action space), for specs without spaces.
            explore: Passed to ``compute_actions`` (None: each policy's config).
            policy: Deprecated name of ``policy_spec``.
            episode_horizon: End (truncate) every episode after this many env
                steps; None: only the env ends episodes.
            soft_horizon: At the horizon, end the episode for metrics and
                postprocessing (rows not done, values bootstrapped) but do not
                reset the env: the next episode continues from its current state.
            no_done_at_end: Never record an episode end in the batch (``dones``,
                ``terminateds`` and ``truncateds`` stay False): postprocessing
                bootstraps from the last observation.
            clip_rewards: True: train on the sign of each reward; a number c:
                on rewards clipped to ``[-c, c]``; None/False: unchanged.
                Episode returns (metrics) use the unclipped rewards.
            observation_filter: ``"NoFilter"``, ``"MeanStdFilter"``,
                ``"ConcurrentMeanStdFilter"`` or a callable ``shape -> Filter``:
                one filter per policy, applied to every (preprocessed)
                observation; see :meth:`get_filters` / :meth:`sync_filters`.
            sample_async: Sample in a background thread: ``sample()`` returns
                fragments the thread collected ahead (RLlib 1.11's AsyncSampler);
                needs a concurrent ``observation_filter``.
            extra_python_environs: Environment variables to set in this process
                before the envs and policies are built.
            record_env: Must be False (wrap the env in ``gymnasium.wrappers.RecordVideo``).
            remote_worker_envs: Must be False (use remote workers for parallel envs).
            remote_env_batch_wait_ms: Accepted (RLlib 1.11: how long to wait for
                remote sub-envs, which rlpolicy does not have); no effect.
            preprocessor_pref: ``"deepmind"`` (RLlib 1.11's default), ``"rllib"``
                or None. Observations get rlpolicy's own preprocessing either way;
                an Atari env with ``"deepmind"`` (which 1.11 wraps in DeepMind's
                wrappers) is refused: wrap it yourself in ``env_creator``.
            input_creator: ``fn(io_context) -> InputReader`` (RLlib 1.11). Only the
                env sampler is supported: a function returning
                ``io_context.default_sampler_input()`` (the default) is accepted;
                one returning another reader (offline data) is refused.

        Raises:
            ValueError: For a bad ``batch_mode``, ``count_steps_by``, fragment
                length, ``num_envs``, horizon, ``clip_rewards``, policy spec, or
                an unsupported option (the message names it and what to use).
        """
        global _global_worker
        policy_spec = policy_spec if policy_spec is not None else policy
        _check_args(num_envs, rollout_fragment_length, batch_mode, count_steps_by)
        _check_sampling_options(episode_horizon, clip_rewards, record_env, remote_worker_envs)
        _check_preprocessor_pref(preprocessor_pref)
        _global_worker = self
        for key, value in (extra_python_environs or {}).items():
            os.environ[str(key)] = str(value)
        self.observation_filter = observation_filter
        self.policy_config: dict = copy.deepcopy(dict(policy_config or {}))
        self.worker_index, self.num_workers = worker_index, num_workers
        self.num_envs, self.seed = num_envs, seed
        self.rollout_fragment_length, self.batch_mode = rollout_fragment_length, batch_mode
        self.count_steps_by = count_steps_by
        self.global_vars: Dict[str, Any] = {}
        self.env_creator = env_creator
        self.env_context = EnvContext(
            env_config if env_config is not None else self.policy_config.get("env_config", {}),
            worker_index=worker_index,
            num_workers=num_workers,
        )
        if seed is not None and not _is_policy(policy_spec):  # a ready policy was seeded by its maker
            _seed_globals(seed, self.policy_config.get("framework"))
        self.callbacks = self._make_callbacks(callbacks, policy_spec)
        envs = self._make_envs(env_creator, validate_env)
        self.env = envs[0] if envs else None
        if preprocessor_pref == "deepmind" and self.env is not None and _is_atari(self.env):
            raise ValueError(
                "RolloutWorker: preprocessor_pref='deepmind' on an Atari env (RLlib 1.11 wraps it in "
                "DeepMind's wrappers) is not supported; wrap the env (e.g. gymnasium.wrappers."
                "AtariPreprocessing) in env_creator and pass preprocessor_pref='rllib'"
            )
        self.policy_map = self._build_policy_map(policy_spec, spaces)
        for policy in self.policy_map.values():
            _add_state_view_requirements(policy)
        self.preprocessors: Dict[PolicyID, Any] = {
            pid: _one_hot_preprocessor(p) for pid, p in self.policy_map.items()
        }
        self.filters: Dict[PolicyID, Filter] = {
            pid: self._make_filter(p) for pid, p in self.policy_map.items()
        }
        self.policy_mapping_fn = self._default_mapping_fn(policy_mapping_fn)
        self._mapping_call = resolve_policy_mapping_fn(self.policy_mapping_fn)
        multiagent = self.policy_config.get("multiagent") or {}
        self.policies_to_train = (
            policies_to_train if policies_to_train is not None else multiagent.get("policies_to_train")
        )
        if self.policies_to_train is None:
            self.policies_to_train = list(self.policy_map)
        elif not callable(self.policies_to_train):
            self.policies_to_train = list(self.policies_to_train)  # ours to change (add_policy)
        settings = SamplerSettings(
            batch_mode,
            rollout_fragment_length,
            count_steps_by,
            explore,
            normalize_actions,
            clip_actions,
            horizon=episode_horizon,
            soft_horizon=soft_horizon,
            no_done_at_end=no_done_at_end,
            clip_rewards=clip_rewards,
            check_finite=self._wants_finite_check(),
        )
        # As RLlib: distinct env seeds for up to 1000 sub-envs per worker.
        seeds = [None if seed is None else seed + 1000 * worker_index + i for i in range(len(envs))]
        self.sampler = EnvRunner(
            self,
            envs,
            self.policy_map,
            self._map_agent,
            self.callbacks,
            settings,
            seeds,
            process_obs=self._process_obs,
        )
        if sample_async:
            self._check_concurrent_filters()
            self.sampler = AsyncEnvRunner(self.sampler)
        self.input_reader = self._make_input_reader(input_creator)

    def _make_input_reader(self, input_creator: Optional[Callable[[Any], Any]]) -> Any:
        """``input_creator(io_context)`` (RLlib 1.11), accepted only when it gives the sampler."""
        if input_creator is None:
            return self.sampler
        reader = input_creator(_IOContext(self))
        if reader is not self.sampler:
            raise ValueError(
                f"RolloutWorker: input_creator returned a {type(reader).__name__}, not "
                "io_context.default_sampler_input(); offline input is not supported, sample from the env"
            )
        return reader

    # ------------------------------------------------------------------ construction
    def _make_callbacks(self, callbacks: Any, policy_spec: Any) -> Any:
        if callbacks is None:
            callbacks = self.policy_config.get("callbacks")
        if callbacks is None and _is_policy(policy_spec):
            return as_callbacks(policy_spec.callbacks)  # pre-built policy: share its callbacks object
        if callbacks is None:
            callbacks = DefaultCallbacks
        made = callbacks() if isinstance(callbacks, type) or _is_factory(callbacks) else callbacks
        return as_callbacks(made)  # a duck-typed object: the hooks it lacks do nothing

    def _make_envs(
        self,
        env_creator: Optional[Callable[..., Any]],
        validate_env: Optional[Callable[[Any, EnvContext], None]],
    ) -> List[Any]:
        if env_creator is None:
            return []
        takes_context = _takes_one_argument(env_creator)
        envs = []
        for i in range(self.num_envs):
            ctx = self.env_context.copy_with_overrides(vector_index=i)
            env = env_creator(ctx) if takes_context else env_creator()
            if validate_env is not None:
                validate_env(env, ctx)
            self.callbacks.on_sub_environment_created(worker=self, sub_environment=env, env_context=ctx)
            envs.append(env)
        return envs

    def _build_policy_map(self, policy_spec: Any, spaces: Optional[dict]) -> PolicyMap:
        specs = _normalize_specs(policy_spec, self.policy_config)
        policy_map = PolicyMap(
            self.worker_index, self.num_workers, policy_config=self.policy_config, seed=self.seed
        )
        for policy_id, spec in specs.items():
            if _is_policy(spec):
                policy_map[policy_id] = spec
                policy_map.policy_specs[policy_id] = PolicySpec(
                    type(spec), spec.observation_space, spec.action_space, None
                )
                continue
            obs_space, act_space = self._spaces_for(policy_id, spec, spaces)
            merged = _merged_config(
                self.policy_config, spec.config, self.worker_index, self.num_workers, self.seed
            )
            obs_space = worker_observation_space(obs_space, merged)
            policy_map.create_policy(policy_id, spec.policy_class, obs_space, act_space, spec.config, merged)
        return policy_map

    def _make_filter(self, policy: Any) -> Filter:
        """The observation filter of one policy, shaped like the observations it gets:
        a Box's shape; None (no normalization) for Discrete / MultiDiscrete parts."""
        return get_filter(self.observation_filter, _filter_shape(policy.observation_space))

    def _check_concurrent_filters(self) -> None:
        slow = sorted(pid for pid, f in self.filters.items() if not getattr(f, "is_concurrent", False))
        if slow:
            raise ValueError(
                f"RolloutWorker: sample_async=True needs concurrent observation filters; the filter "
                f"of policy id(s) {slow} is not (use observation_filter='ConcurrentMeanStdFilter' "
                "or 'NoFilter')"
            )

    def _wants_finite_check(self) -> bool:
        """``_check_finite_samples`` in the worker's config or any policy's config."""
        if self.policy_config.get("_check_finite_samples"):
            return True
        return any(
            bool((getattr(p, "config", None) or {}).get("_check_finite_samples"))
            for p in self.policy_map.values()
        )

    def _process_obs(self, policy_id: PolicyID, policy: Any, raw_obs: Any) -> Any:
        """Raw env observation -> what ``policy`` gets: preprocessed, then filtered."""
        prep = self.preprocessors.get(policy_id)
        obs = prep.transform(raw_obs) if prep is not None else flatten_single_obs(policy, raw_obs)
        filt = self.filters.get(policy_id)
        return obs if filt is None else filt(obs)

    def _spaces_for(self, policy_id: PolicyID, spec: PolicySpec, spaces: Optional[dict]) -> Tuple[Any, Any]:
        given = (spaces or {}).get(policy_id, (None, None))
        obs_space = spec.observation_space or given[0] or getattr(self.env, "observation_space", None)
        act_space = spec.action_space or given[1] or getattr(self.env, "action_space", None)
        if obs_space is None or act_space is None:
            raise ValueError(
                f"RolloutWorker: policy {policy_id!r} has no observation/action space; "
                "give them in its PolicySpec or create the worker with an env that has them"
            )
        return obs_space, act_space

    def _default_mapping_fn(self, fn: Optional[Callable[..., PolicyID]]) -> Callable[..., PolicyID]:
        if fn is None:
            fn = (self.policy_config.get("multiagent") or {}).get("policy_mapping_fn")
        if fn is not None:
            return fn
        if DEFAULT_POLICY_ID in self.policy_map or len(self.policy_map) != 1:
            return _map_to_default
        only = next(iter(self.policy_map))
        return lambda agent_id, episode, worker=None, **kwargs: only

    def _map_agent(self, agent_id: AgentID, episode: Any, worker: Any = None, **kwargs) -> PolicyID:
        return self._mapping_call(agent_id, episode, worker=worker, **kwargs)

    # ------------------------------------------------------------------ sampling
    def sample(self) -> SampleBatchType:
        """Collects one rollout fragment from every sub-environment.

        Returns:
            The postprocessed SampleBatch (single policy ``"default_policy"``),
            or a MultiAgentBatch of per-policy batches.
        """
        batch = self.sampler.sample()
        self.callbacks.on_sample_end(worker=self, samples=batch)
        return batch

    def sample_with_count(self) -> Tuple[SampleBatchType, int]:
        """``sample()`` and the batch's ``count``."""
        batch = self.sample()
        return batch, batch.count

    @property
    def total_env_steps(self) -> int:
        """Env steps this worker has taken since it was built."""
        return self.sampler.total_env_steps

    @property
    def policy(self) -> Any:
        """The ``"default_policy"`` (or the only policy)."""
        if DEFAULT_POLICY_ID in self.policy_map:
            return self.policy_map[DEFAULT_POLICY_ID]
        return next(iter(self.policy_map.values()))

    def get_metrics(self) -> List[RolloutMetrics]:
        """The ``RolloutMetrics`` of the episodes finished since the last call."""
        return self.sampler.pop_metrics()

    def metrics(self) -> Dict[str, float]:
        """Mean return / length over the last 100 finished episodes, and totals."""
        returns, lengths, episodes = self.sampler.episode_stats()
        return {
            "episode_reward_mean": float(np.mean(returns)) if returns else float("nan"),
            "episode_len_mean": float(np.mean(lengths)) if returns else float("nan"),
            "episodes_total": episodes,
            "timesteps_total": self.total_env_steps,
        }

    def episode_stats(self) -> Dict[str, Any]:
        """Raw episode statistics for aggregating across workers (see ``WorkerSet.metrics``)."""
        returns, lengths, episodes = self.sampler.episode_stats()
        return {
            "returns": returns,
            "lengths": lengths,
            "episodes": episodes,
            "env_steps": self.total_env_steps,
        }

    # ------------------------------------------------------------------ policies
    def get_policy(self, policy_id: PolicyID = DEFAULT_POLICY_ID) -> Optional[Any]:
        """The policy stored under ``policy_id`` (None if there is none)."""
        return self.policy_map.get(policy_id)

    def is_policy_to_train(self, policy_id: PolicyID, batch: Optional[SampleBatchType] = None) -> bool:
        """Whether ``policy_id`` is trained by this worker's learn/gradient methods."""
        if callable(self.policies_to_train):
            return bool(self.policies_to_train(policy_id, batch))
        return policy_id in self.policies_to_train

    def foreach_policy(self, func: Callable[..., Any], **kwargs) -> List[Any]:
        """``[func(policy, policy_id, **kwargs) for every policy]``."""
        return [func(policy, pid, **kwargs) for pid, policy in self.policy_map.items()]

    def foreach_policy_to_train(self, func: Callable[..., Any], **kwargs) -> List[Any]:
        """``foreach_policy`` restricted to the policies to train."""
        return [
            func(policy, pid, **kwargs)
            for pid, policy in self.policy_map.items()
            if self.is_policy_to_train(pid)
        ]

    foreach_trainable_policy = foreach_policy_to_train  # RLlib 1.11's name

    def for_policy(self, func: Callable[..., Any], policy_id: PolicyID = DEFAULT_POLICY_ID, **kwargs) -> Any:
        """``func(policy, **kwargs)`` for one policy."""
        return func(self.policy_map[policy_id], **kwargs)

    def foreach_env(self, func: Callable[[Any], Any]) -> List[Any]:
        """``[func(env) for every sub-environment]``."""
        return [func(env) for env in self.sampler.sub_environments()]

    def foreach_env_with_context(self, func: Callable[[Any, EnvContext], Any]) -> List[Any]:
        """``[func(env, env_context) for every sub-environment]``."""
        return [
            func(env, self.env_context.copy_with_overrides(vector_index=i))
            for i, env in enumerate(self.sampler.sub_environments())
        ]

    def set_policy_mapping_fn(self, policy_mapping_fn: Optional[Callable[..., PolicyID]] = None) -> None:
        """Replaces the mapping function (new episodes use it)."""
        if policy_mapping_fn is not None:
            self.policy_mapping_fn = policy_mapping_fn
            self._mapping_call = resolve_policy_mapping_fn(policy_mapping_fn)

    def set_policies_to_train(
        self, policies_to_train: Optional[Union[List[PolicyID], Callable]] = None
    ) -> None:
        """Replaces the policies to train."""
        if policies_to_train is not None:
            self.policies_to_train = policies_to_train

    def add_policy(
        self,
        *,
        policy_id: PolicyID,
        policy_cls: type,
        observation_space: Any = None,
        action_space: Any = None,
        config: Optional[PartialTrainerConfigDict] = None,
        policy_mapping_fn: Optional[Callable[..., PolicyID]] = None,
        policies_to_train: Optional[List[PolicyID]] = None,
    ) -> Any:
        """Builds and adds a new policy; returns it.

        Raises:
            ValueError: If ``policy_id`` is taken.
        """
        if policy_id in self.policy_map:
            raise ValueError(f"add_policy: policy id {policy_id!r} already exists")
        spec = PolicySpec(policy_cls, observation_space, action_space, config)
        obs_space, act_space = self._spaces_for(policy_id, spec, None)
        merged = _merged_config(self.policy_config, config, self.worker_index, self.num_workers, self.seed)
        obs_space = worker_observation_space(obs_space, merged)
        policy = self.policy_map.create_policy(policy_id, policy_cls, obs_space, act_space, config, merged)
        self.preprocessors[policy_id] = _one_hot_preprocessor(policy)
        self.filters[policy_id] = self._make_filter(policy)
        self.set_policy_mapping_fn(policy_mapping_fn)
        if policies_to_train is not None:
            self.set_policies_to_train(policies_to_train)
        elif isinstance(self.policies_to_train, list):
            self.policies_to_train.append(policy_id)
        return policy

    def remove_policy(
        self,
        *,
        policy_id: PolicyID = DEFAULT_POLICY_ID,
        policy_mapping_fn: Optional[Callable[..., PolicyID]] = None,
        policies_to_train: Optional[List[PolicyID]] = None,
    ) -> None:
        """Removes a policy (and, optionally, sets a new mapping function / training list)."""
        if policy_id not in self.policy_map:
            raise ValueError(
                f"remove_policy: unknown policy id {policy_id!r}; known: {sorted(self.policy_map)}"
            )
        del self.policy_map[policy_id]
        self.filters.pop(policy_id, None)
        self.preprocessors.pop(policy_id, None)
        if isinstance(self.policies_to_train, list) and policy_id in self.policies_to_train:
            self.policies_to_train.remove(policy_id)
        self.set_policy_mapping_fn(policy_mapping_fn)
        self.set_policies_to_train(policies_to_train)

    # ------------------------------------------------------------------ weights and learning
    def get_weights(self, policies: Optional[List[PolicyID]] = None) -> Dict[PolicyID, ModelWeights]:
        """Policy id -> weights, for ``policies`` (default: all)."""
        ids = list(self.policy_map) if policies is None else list(policies)
        return {pid: self.policy_map[pid].get_weights() for pid in ids}

    def set_weights(self, weights: Dict[PolicyID, ModelWeights], global_vars: Optional[dict] = None) -> None:
        """Sets each named policy's weights, then (if given) the global vars.

        Raises:
            KeyError: If ``weights`` names an unknown policy.
        """
        unknown = [pid for pid in weights if pid not in self.policy_map]
        if unknown:
            raise KeyError(
                f"set_weights: unknown policy id(s) {unknown}; known: {sorted(self.policy_map)} "
                "(weights must be keyed by policy id, as get_weights() returns them)"
            )
        for pid, w in weights.items():
            self.policy_map[pid].set_weights(w)
        if global_vars:
            self.set_global_vars(global_vars)

    def set_global_vars(self, global_vars: dict) -> None:
        """Stores ``global_vars`` and hands them to every policy's ``on_global_var_update``."""
        self.global_vars = dict(global_vars)
        self.foreach_policy(lambda p, _pid: p.on_global_var_update(global_vars))

    def get_global_vars(self) -> dict:
        """The global vars last set."""
        return self.global_vars

    def compute_gradients(self, samples: SampleBatchType) -> Tuple[Any, dict]:
        """Gradients of the policies to train on ``samples`` (not applied).

        Returns:
            For a SampleBatch: ``(grads, info)`` of ``"default_policy"``. For a
            MultiAgentBatch: ``({policy_id: grads}, {policy_id: info})``. ``info``
            also holds ``"batch_count"``.
        """
        if isinstance(samples, MultiAgentBatch):
            grads, info = {}, {}
            for pid, batch in samples.policy_batches.items():
                if self.is_policy_to_train(pid, samples):
                    grads[pid], info[pid] = self.policy_map[pid].compute_gradients(batch)
        else:
            grads, info = self.policy_map[DEFAULT_POLICY_ID].compute_gradients(samples)
        info["batch_count"] = samples.count
        return grads, info

    def apply_gradients(self, grads: Union[ModelGradients, Dict[PolicyID, ModelGradients]]) -> None:
        """Applies gradients: a dict policy id -> grads (policies to train only), or the default policy's."""
        if isinstance(grads, dict):
            for pid, g in grads.items():
                if self.is_policy_to_train(pid):
                    self.policy_map[pid].apply_gradients(g)
        else:
            self.policy_map[DEFAULT_POLICY_ID].apply_gradients(grads)

    def learn_on_batch(self, samples: SampleBatchType) -> Dict[PolicyID, dict]:
        """One ``learn_on_batch`` step of each policy to train that has data in ``samples``.

        Returns:
            Policy id -> that policy's learn results.
        """
        if not isinstance(samples, MultiAgentBatch):
            return {DEFAULT_POLICY_ID: self.policy_map[DEFAULT_POLICY_ID].learn_on_batch(samples)}
        info = {}
        for pid, batch in samples.policy_batches.items():
            if not self.is_policy_to_train(pid, samples):
                continue
            batch.decompress_if_needed()
            info[pid] = self.policy_map[pid].learn_on_batch(batch)
        return info

    # ------------------------------------------------------------------ filters
    def get_filters(self, flush_after: bool = False) -> Dict[PolicyID, Filter]:
        """Policy id -> a serializable copy of that policy's observation filter.

        Args:
            flush_after: Reset each filter's buffer after copying it (what
                ``FilterManager.synchronize`` asks for, so changes are merged once).
        """
        out = {pid: f.as_serializable() for pid, f in self.filters.items()}
        if flush_after:
            for f in self.filters.values():
                f.reset_buffer()
        return out

    def sync_filters(self, new_filters: Dict[PolicyID, Filter]) -> None:
        """Takes over the state of ``new_filters`` (e.g. the driver's merged filters).

        Raises:
            KeyError: If a policy of this worker has no filter in ``new_filters``
                (no filter is changed then).
        """
        missing = [pid for pid in self.filters if pid not in new_filters]
        if missing:
            raise KeyError(f"sync_filters: no filter for policy id(s) {missing}; got {sorted(new_filters)}")
        for pid, f in self.filters.items():
            f.sync(new_filters[pid])

    # ------------------------------------------------------------------ misc
    def apply(self, func: Callable[..., Any], *args, **kwargs) -> Any:
        """``func(self, *args, **kwargs)`` (handy on remote workers)."""
        return func(self, *args, **kwargs)

    def get_host(self) -> str:
        """The host name of the process this worker runs in."""
        return socket.gethostname()

    def stop(self) -> None:
        """Closes the sub-environments and any TF sessions of the policies."""
        self.sampler.stop()
        for policy in self.policy_map.values():
            session = policy.get_session() if hasattr(policy, "get_session") else None
            if session is not None:
                session.close()

    def __repr__(self) -> str:
        return (
            f"RolloutWorker(worker_index={self.worker_index}, policies={sorted(self.policy_map)}, "
            f"num_envs={self.num_envs})"
        )


# ---------------------------------------------------------------------- helpers
def _map_to_default(agent_id: AgentID, episode: Any, worker: Any = None, **kwargs) -> PolicyID:
    return DEFAULT_POLICY_ID


def _is_policy(obj: Any) -> bool:
    from rlpolicy.policy.policy import Policy

    return isinstance(obj, Policy)


def _is_factory(obj: Any) -> bool:
    # MultiCallbacks instances are called to create their members (RLlib's config["callbacks"]()).
    return isinstance(obj, MultiCallbacks)


def _takes_one_argument(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` has a required positional parameter (then it gets the EnvContext)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional and p.default is inspect.Parameter.empty for p in params) or any(
        p.kind == inspect.Parameter.VAR_POSITIONAL for p in params
    )


def _check_args(num_envs: int, fragment: int, batch_mode: str, count_steps_by: str) -> None:
    if num_envs < 1:
        raise ValueError(f"RolloutWorker: num_envs must be >= 1, got {num_envs}")
    if _bad_fragment_length(fragment):
        raise ValueError(f"RolloutWorker: rollout_fragment_length must be >= 1, got {fragment}")
    if batch_mode not in BATCH_MODES:
        raise ValueError(f"RolloutWorker: batch_mode={batch_mode!r} is unknown; use one of {BATCH_MODES}")
    if count_steps_by not in COUNT_STEPS_BY:
        raise ValueError(
            f"RolloutWorker: count_steps_by={count_steps_by!r} is unknown; use one of {COUNT_STEPS_BY}"
        )


def _check_sampling_options(
    horizon: Any, clip_rewards: Any, record_env: Any, remote_worker_envs: bool
) -> None:
    if horizon is not None and horizon != float("inf") and _bad_fragment_length(horizon):
        raise ValueError(f"RolloutWorker: episode_horizon must be an int >= 1 or None, got {horizon!r}")
    if clip_rewards not in (None, False, True) and (
        isinstance(clip_rewards, bool)
        or not isinstance(clip_rewards, (int, float, np.number))
        or not clip_rewards > 0
    ):
        raise ValueError(
            f"RolloutWorker: clip_rewards must be None, a bool or a number > 0, got {clip_rewards!r}"
        )
    if record_env:
        raise ValueError(
            "RolloutWorker: record_env is not supported (gym's Monitor is gone); wrap the env in "
            "gymnasium.wrappers.RecordVideo inside env_creator instead"
        )
    if remote_worker_envs:
        raise ValueError(
            "RolloutWorker: remote_worker_envs=True (each sub-env a Ray actor) is not supported; "
            "run envs in parallel processes with remote workers (WorkerSet num_workers > 0)"
        )


def _add_state_view_requirements(policy: Any) -> None:
    """RLlib 1.11: a policy built directly on ``Policy`` (no model, no loss
    initialisation) gets ``state_in_i``/``state_out_i`` view requirements from its
    ``get_initial_state()`` here, so its RNN state values are fed back."""
    if getattr(policy, "_model_init_state_automatically_added", True):
        return
    update = getattr(policy, "_update_model_view_requirements_from_init_state", None)
    if callable(update) and isinstance(getattr(policy, "view_requirements", None), dict):
        update()


def _check_preprocessor_pref(preprocessor_pref: Any) -> None:
    if preprocessor_pref not in ("deepmind", "rllib", None):
        raise ValueError(
            f"RolloutWorker: preprocessor_pref must be 'deepmind', 'rllib' or None, got {preprocessor_pref!r}"
        )


def _is_atari(env: Any) -> bool:
    """RLlib 1.11's test: an ALE env (by its spec's entry point or its class)."""
    spec = getattr(getattr(env, "unwrapped", env), "spec", None)
    entry = str(getattr(spec, "entry_point", "") or "")
    return (
        "ale_py" in entry
        or "AtariEnv" in entry
        or type(getattr(env, "unwrapped", env)).__name__ == "AtariEnv"
    )


class _IOContext:
    """What RLlib 1.11's ``input_creator`` is given: the worker, its config and index,
    and ``default_sampler_input()`` (the worker's sampler)."""

    def __init__(self, worker: "RolloutWorker"):
        self.worker = worker
        self.config = worker.policy_config
        self.worker_index = worker.worker_index
        self.log_dir = ""

    def default_sampler_input(self) -> Any:
        return self.worker.sampler


@DeveloperAPI
def worker_observation_space(space: Any, config: Optional[dict] = None) -> Any:
    """The observation space a RolloutWorker gives the policies it builds (RLlib 1.11):
    ``Discrete`` / ``MultiDiscrete`` become the one-hot ``Box`` (carrying the raw
    space as ``original_space``), unless ``_disable_preprocessor_api`` is set; other
    spaces are unchanged (a policy flattens Dict/Tuple spaces itself). Build a policy
    on this space to use it with a worker's samples outside the worker."""
    import gymnasium as gym

    if (config or {}).get("_disable_preprocessor_api", False) or not isinstance(
        space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)
    ):
        return space
    from rlpolicy.models.preprocessors import OneHotPreprocessor

    return OneHotPreprocessor(space, None).observation_space


def _one_hot_preprocessor(policy: Any) -> Any:
    """The sampler's one-hot encoder for a policy on a one-hot Box, or None."""
    import gymnasium as gym

    space = getattr(policy, "observation_space", None)
    original = getattr(space, "original_space", None)
    if not isinstance(space, gym.spaces.Box) or not isinstance(
        original, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)
    ):
        return None
    from rlpolicy.models.preprocessors import OneHotPreprocessor

    return OneHotPreprocessor(original, None)


def _filter_shape(space: Any) -> Any:
    """RLlib 1.11's filter shape for a space: ``np.array(shape)`` of a Box, None for
    Discrete / MultiDiscrete (not normalized), and the same nesting for Dict/Tuple."""
    import gymnasium as gym

    original = getattr(space, "original_space", None)
    if isinstance(original, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return None  # a one-hot encoding: RLlib 1.11 leaves it as it is
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return None
    if isinstance(space, gym.spaces.Dict):
        return {k: _filter_shape(s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_filter_shape(s) for s in space.spaces)
    return np.array(space.shape)


def _bad_fragment_length(fragment: Any) -> bool:
    """True unless ``fragment`` is an int >= 1."""
    return isinstance(fragment, bool) or not isinstance(fragment, (int, np.integer)) or fragment < 1


def _normalize_specs(policy_spec: Any, policy_config: dict) -> Dict[PolicyID, Any]:
    """policy id -> PolicySpec (or a ready Policy instance)."""
    if policy_spec is None:
        policy_spec = (policy_config.get("multiagent") or {}).get("policies") or None
    if policy_spec is None:
        raise ValueError("RolloutWorker: give policy_spec (a Policy class or a dict of PolicySpecs)")
    if isinstance(policy_spec, type) or _is_policy(policy_spec):
        return {DEFAULT_POLICY_ID: policy_spec if _is_policy(policy_spec) else PolicySpec(policy_spec)}
    if not isinstance(policy_spec, dict):
        raise ValueError(
            f"RolloutWorker: policy_spec must be a Policy class or a dict of PolicySpecs, "
            f"got {type(policy_spec).__name__}"
        )
    out = {}
    for pid, spec in policy_spec.items():
        if _is_policy(spec) or isinstance(spec, PolicySpec):
            out[pid] = spec
        elif isinstance(spec, (tuple, list)) and len(spec) == 4:
            out[pid] = PolicySpec(*spec)
        elif isinstance(spec, type):
            out[pid] = PolicySpec(spec)
        else:
            raise ValueError(
                f"RolloutWorker: policy {pid!r}: expected a PolicySpec, a (cls, obs_space, "
                f"act_space, config) tuple or a Policy class, got {type(spec).__name__}"
            )
        if isinstance(out[pid], PolicySpec) and out[pid].policy_class is None:
            raise ValueError(f"RolloutWorker: policy {pid!r} has no policy_class")
    return out


def _merged_config(
    base: dict, override: Optional[dict], worker_index: int, num_workers: int, seed: Optional[int]
) -> dict:
    from rlpolicy._core.config import merge_configs

    merged = merge_configs(copy.deepcopy(base), copy.deepcopy(dict(override or {})))
    # RLlib 1.11: every policy learns which worker it lives on (device choice reads it).
    merged["worker_index"] = worker_index
    merged["num_workers"] = num_workers
    if seed is not None:
        merged["seed"] = seed
    return merged


def _seed_globals(seed: int, framework: Optional[str]) -> None:
    """Seeds Python's, numpy's and (when in use) torch's and TensorFlow's global RNGs."""
    random.seed(seed)
    np.random.seed(seed)
    if framework == "torch" or "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)
    if framework in ("tf", "tf2", "tfe") or "tensorflow" in sys.modules:
        import tensorflow as tf

        tf.random.set_seed(seed)


__all__ = ["RolloutWorker", "get_global_worker", "worker_observation_space"]
