"""``WorkerSet``: one local ``RolloutWorker`` plus N remote ones as Ray actors
(RLlib 1.11's ``ray.rllib.evaluation.worker_set``).

The local worker holds the policies the driver trains; remote workers build
their own copies from the policy classes and config (policies never travel
between processes, only weights do: :meth:`WorkerSet.sync_weights` puts them
into Ray's object store once and hands every remote worker the reference).

Sampling (:meth:`WorkerSet.sample`, or
``rlpolicy.execution.rollout_ops.synchronous_parallel_sample``) asks remote
workers for fragments in parallel. A remote worker that dies is replaced by
a fresh actor (with the local worker's weights and the last global vars),
reported through ``logger.warning`` and ``WorkerSet.recreated_workers``, and
its fragment is sampled again by the new actor: no step is silently lost.

A worker whose call raises (an env error inside the actor) is handled by the
config: ``ignore_worker_failures`` (RLlib 1.11) drops it and goes on with the
others (``WorkerSet.dropped_workers``; a RuntimeError once none is left);
``recreate_failed_workers`` (RLlib 2.x) replaces it like a dead one; neither
raises the worker's error, as 1.11 does. Recreation is bounded: more than
``3 * num_workers`` failures in one round raise a RuntimeError, and a recreated
worker starts with fresh envs and observation filters (its running episodes
are lost). The episodes a worker finished before it died or was dropped stay
in :meth:`WorkerSet.metrics`' ``episodes_total``.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from rlpolicy._core.config import merge_configs
from rlpolicy._core.defaults import COMMON_CONFIG
from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.policy.policy import PolicySpec
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.typing import EnvType, PolicyID, SampleBatchType, TrainerConfigDict

logger = logging.getLogger(__name__)


@DeveloperAPI
class WorkerSet:
    """A local RolloutWorker and ``num_workers`` remote RolloutWorker actors.

    Example:
        >>> ws = WorkerSet(env_creator=lambda ctx: gymnasium.make("CartPole-v1"),
        ...                policy_class=PPOTorchPolicy, trainer_config=config, num_workers=2)
        >>> batch = ws.sample(4000)               # exactly 4000 env steps
        >>> ws.local_worker().learn_on_batch(batch)
        >>> ws.sync_weights(global_vars={"timestep": 4000})
        >>> ws.stop()
    """

    def __init__(
        self,
        *,
        env_creator: Optional[Callable[..., EnvType]] = None,
        validate_env: Optional[Callable[[EnvType, Any], None]] = None,
        policy_class: Optional[type] = None,
        trainer_config: Optional[TrainerConfigDict] = None,
        num_workers: int = 0,
        local_worker: bool = True,
        logdir: Optional[str] = None,
        _setup: bool = True,
    ):
        """Initializes a WorkerSet (and starts Ray if remote workers are asked for).

        Args:
            env_creator: Returns one sub-environment; gets an ``EnvContext``.
            validate_env: Optional check run on every new sub-environment.
            policy_class: The default policy class: used alone, or for
                ``PolicySpec``s in ``trainer_config["multiagent"]["policies"]``
                whose ``policy_class`` is None.
            trainer_config: The config (read: ``rollout_fragment_length``,
                ``batch_mode``, ``num_envs_per_worker``, ``num_cpus_per_worker``,
                ``num_gpus_per_worker``, ``custom_resources_per_worker``,
                ``_fake_gpus``, ``num_cpus_for_driver``, ``seed``,
                ``env_config``, ``callbacks``, ``multiagent``,
                ``create_env_on_driver``, ``normalize_actions``,
                ``clip_actions``, ``horizon``, ``soft_horizon``, ``no_done_at_end``,
                ``clip_rewards``, ``observation_filter``, ``synchronize_filters``,
                ``extra_python_environs_for_driver`` / ``_for_worker``,
                ``sample_async``, ``record_env``, ``remote_worker_envs``); the
                policies get it as their config.
            num_workers: Number of remote workers (0: sample with the local worker).
            local_worker: Whether to build the local worker.
            logdir: Kept for RLlib compatibility (unused).
            _setup: False builds an empty set (no workers, no Ray).

        Raises:
            ValueError: If ``num_workers`` is negative or no policy class is given.
        """
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"WorkerSet: num_workers must be an int >= 0, got {num_workers!r}")
        self._env_creator, self._validate_env = env_creator, validate_env
        self._policy_class = policy_class
        self._user_config: dict = copy.deepcopy(dict(trainer_config or {}))
        self._cfg = merge_configs(copy.deepcopy(COMMON_CONFIG), copy.deepcopy(self._user_config))
        self._logdir = logdir
        self._local: Optional[RolloutWorker] = None
        self._remote: List[Any] = []
        self._global_vars: Dict[str, Any] = {}
        #: Indices (1-based, as ``worker_index``) of remote workers that died and were recreated.
        self.recreated_workers: List[int] = []
        #: Indices of remote workers dropped after an error (``ignore_worker_failures``).
        self.dropped_workers: List[int] = []
        #: Env steps returned by :meth:`sample` (``synchronous_parallel_sample``) so far.
        self.num_env_steps_sampled = 0
        self._next_worker = 0
        self._lost_episodes = 0
        # Per remote worker (by worker_index): episodes finished as of its last successful
        # call; added to _lost_episodes when the worker dies or is dropped.
        self._episodes_seen: Dict[int, int] = {}
        self._worker_index: List[int] = []  # worker_index of each entry of self._remote
        if not _setup:
            return
        self._policy_specs = self._resolve_policy_specs()
        if num_workers > 0:
            _ensure_ray(self._cfg, num_workers)
            _warn_if_unplaceable(self._remote_resources(), num_workers)
            self._remote_cls = RolloutWorker.as_remote(**self._remote_resources())
            self._remote = [self._make_remote_worker(i + 1, num_workers) for i in range(num_workers)]
            self._worker_index = list(range(1, num_workers + 1))
        if local_worker:
            self._local = self._make_local_worker(num_workers)

    # ------------------------------------------------------------------ building
    def _resolve_policy_specs(self) -> Any:
        policies = (self._cfg.get("multiagent") or {}).get("policies") or {}
        if not policies:
            if self._policy_class is None:
                raise ValueError("WorkerSet: give policy_class or trainer_config['multiagent']['policies']")
            return self._policy_class
        if isinstance(policies, (set, list, tuple)):
            policies = {pid: PolicySpec() for pid in policies}
        specs = {}
        for pid, spec in policies.items():
            spec = PolicySpec(*spec) if isinstance(spec, (tuple, list)) else spec
            if isinstance(spec, PolicySpec) and spec.policy_class is None:
                if self._policy_class is None:
                    raise ValueError(
                        f"WorkerSet: policy {pid!r} has no policy_class and no default policy_class was given"
                    )
                spec = spec._replace(policy_class=self._policy_class)
            specs[pid] = spec
        return specs

    def _worker_kwargs(self, worker_index: int, num_workers: int, num_envs: int) -> Dict[str, Any]:
        cfg = self._cfg
        multiagent = cfg.get("multiagent") or {}
        seed = cfg.get("seed")
        return dict(
            env_creator=self._env_creator,
            validate_env=self._validate_env,
            policy_spec=self._policy_specs,
            policy_mapping_fn=multiagent.get("policy_mapping_fn"),
            policies_to_train=multiagent.get("policies_to_train"),
            rollout_fragment_length=_fragment_length(cfg, num_workers),
            count_steps_by=multiagent.get("count_steps_by", "env_steps"),
            batch_mode=cfg["batch_mode"],
            num_envs=num_envs,
            normalize_actions=cfg.get("normalize_actions"),
            clip_actions=cfg.get("clip_actions"),
            env_config=cfg.get("env_config") or {},
            policy_config=self._user_config,
            worker_index=worker_index,
            num_workers=num_workers,
            callbacks=cfg.get("callbacks"),
            seed=None if seed is None else seed + worker_index,
            # RLlib 1.11's sampling options (trainer config key -> RolloutWorker argument).
            episode_horizon=cfg.get("horizon"),
            soft_horizon=cfg.get("soft_horizon", False),
            no_done_at_end=cfg.get("no_done_at_end", False),
            clip_rewards=cfg.get("clip_rewards"),
            observation_filter=cfg.get("observation_filter", "NoFilter"),
            sample_async=cfg.get("sample_async", False),
            record_env=cfg.get("record_env", False),
            remote_worker_envs=cfg.get("remote_worker_envs", False),
            remote_env_batch_wait_ms=cfg.get("remote_env_batch_wait_ms", 0),
            preprocessor_pref=cfg.get("preprocessor_pref", "deepmind"),
            extra_python_environs=cfg.get(
                "extra_python_environs_for_driver"
                if worker_index == 0
                else "extra_python_environs_for_worker"
            ),
        )

    def _make_local_worker(self, num_workers: int) -> RolloutWorker:
        # With remote workers the local one only needs an env for its spaces.
        num_envs = self._cfg["num_envs_per_worker"]
        if num_workers > 0 and not self._cfg.get("create_env_on_driver"):
            num_envs = 1
        return RolloutWorker(**self._worker_kwargs(0, num_workers, num_envs))

    def _remote_resources(self) -> Dict[str, Any]:
        cfg = self._cfg
        return dict(
            num_cpus=cfg["num_cpus_per_worker"],
            # RLlib 1.11: fake GPUs need no real ones from Ray.
            num_gpus=0 if cfg.get("_fake_gpus") else cfg["num_gpus_per_worker"],
            resources=cfg.get("custom_resources_per_worker") or None,
        )

    def _make_remote_worker(self, worker_index: int, num_workers: Optional[int] = None) -> Any:
        num_workers = len(self._remote) if num_workers is None else num_workers
        kwargs = self._worker_kwargs(worker_index, num_workers, self._cfg["num_envs_per_worker"])
        return self._remote_cls.remote(**kwargs)

    # ------------------------------------------------------------------ access
    def local_worker(self) -> Optional[RolloutWorker]:
        """The local worker (None if built with ``local_worker=False``)."""
        return self._local

    def remote_workers(self) -> List[Any]:
        """The remote worker actor handles (a copy of the list)."""
        return list(self._remote)

    def trainable_policies(self) -> List[PolicyID]:
        """The ids of the local worker's policies to train."""
        return list(self._local.policies_to_train) if self._local is not None else []

    # ------------------------------------------------------------------ weights and vars
    def sync_weights(
        self,
        policies: Optional[List[PolicyID]] = None,
        from_worker: Optional[Any] = None,
        global_vars: Optional[dict] = None,
    ) -> None:
        """Copies weights from ``from_worker`` (default: the local worker) to all other workers.

        The weights go into the object store once (``ray.put``); each remote
        worker gets the reference. ``global_vars`` (if given) reach every
        worker's policies through ``on_global_var_update``.

        Args:
            policies: Policy ids to sync (default: all).
            from_worker: The source worker (local, or a remote actor handle).
            global_vars: e.g. ``{"timestep": ...}``; also used for recreated workers.

        Raises:
            ValueError: If there is no source worker.
        """
        source = from_worker if from_worker is not None else self._local
        if source is None:
            raise ValueError("WorkerSet.sync_weights: no local worker; pass from_worker")
        if global_vars is not None:
            self._global_vars = dict(global_vars)
        if isinstance(source, RolloutWorker):
            weights = source.get_weights(policies)
        else:
            import ray

            weights = ray.get(source.get_weights.remote(policies))
        if self._remote:
            import ray

            ref = ray.put(weights)
            for worker in self._remote:
                if worker is not source:
                    worker.set_weights.remote(ref, global_vars)
        if self._local is not None and source is not self._local:
            self._local.set_weights(weights, global_vars)
        elif self._local is not None and global_vars:
            self._local.set_global_vars(global_vars)

    def sync_filters(self, update_remote: Optional[bool] = None) -> None:
        """Merges the remote workers' observation-filter changes into the local
        worker's filters and (``update_remote``, default
        ``trainer_config["synchronize_filters"]``) sends the merged filters back:
        what RLlib 1.11's Trainer does after each round of sampling
        (``FilterManager.synchronize``).

        Raises:
            ValueError: If there is no local worker.
        """
        from rlpolicy.utils.filter_manager import FilterManager

        if self._local is None:
            raise ValueError("WorkerSet.sync_filters: no local worker to merge the filters into")
        if update_remote is None:
            update_remote = bool(self._cfg.get("synchronize_filters", True))
        FilterManager.synchronize(self._local.filters, self._remote, update_remote=update_remote)

    def set_global_vars(self, global_vars: dict) -> None:
        """Hands ``global_vars`` to every worker's ``set_global_vars``."""
        self._global_vars = dict(global_vars)
        if self._local is not None:
            self._local.set_global_vars(global_vars)
        for worker in self._remote:
            worker.set_global_vars.remote(global_vars)

    # ------------------------------------------------------------------ sampling
    def sample(self, num_steps: Optional[int] = None) -> SampleBatchType:
        """Samples in parallel; see ``synchronous_parallel_sample``.

        Args:
            num_steps: None: one fragment from every remote worker (or one
                ``sample()`` of the local worker). Else exactly this many env
                steps for a SampleBatch (whole fragments are concatenated, then
                the result is cut at ``num_steps``; each fragment was
                postprocessed whole, before the cut), and at least this many
                for a MultiAgentBatch (whole fragments).
        """
        from rlpolicy.execution.rollout_ops import synchronous_parallel_sample

        return synchronous_parallel_sample(self, max_env_steps=num_steps)

    def sample_fragments(self, max_steps: Optional[int] = None) -> List[SampleBatchType]:
        """One round of parallel sampling: a fragment from each remote worker needed.

        With ``max_steps`` and fixed-size fragments (``truncate_episodes``,
        counting env steps), only as many workers are asked as needed to reach
        ``max_steps``. A worker that dies is recreated and asked again.

        Returns:
            The fragments, in worker order (the local worker's one if there
            are no remote workers).
        """
        if not self._remote:
            return [self._local.sample()]
        chosen = self._choose_workers(max_steps)
        results = self._call_with_recovery(chosen, "apply", _sample_with_stats)
        batches = []
        for i, (batch, stats) in zip(chosen, results):
            if batch is _DROPPED:
                continue
            self._note_stats(self._worker_index[i], stats)
            batches.append(batch)
        self._forget_dropped()
        return batches

    def _choose_workers(self, max_steps: Optional[int]) -> List[int]:
        n = len(self._remote)
        cfg = self._cfg
        fixed = (
            cfg["batch_mode"] == "truncate_episodes"
            and (cfg.get("multiagent") or {}).get("count_steps_by", "env_steps") == "env_steps"
        )
        if max_steps is not None and fixed:
            per_worker = _fragment_length(cfg, n) * cfg["num_envs_per_worker"]
            n = max(1, min(n, math.ceil(max_steps / per_worker)))
        start = self._next_worker  # rotate, so partial rounds spread over the workers
        self._next_worker = (start + n) % len(self._remote)
        return [(start + k) % len(self._remote) for k in range(n)]

    def _call_with_recovery(self, indices: Sequence[int], method: str, *args: Any) -> List[Any]:
        """Calls ``method`` on the remote workers at ``indices``; a dead worker is
        recreated and called again (bounded). A worker whose call raises is dropped
        (``ignore_worker_failures``; its result is ``(_DROPPED, None)``), recreated
        (``recreate_failed_workers``) or its error re-raised. Results come back in
        ``indices`` order; call :meth:`_forget_dropped` after reading them."""
        import ray
        from ray.exceptions import RayActorError, RayError

        pending = {getattr(self._remote[i], method).remote(*args): i for i in indices}
        results: Dict[int, Any] = {}
        failures, max_failures = 0, 3 * max(1, len(self._remote))
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ready[0])
            try:
                results[i] = ray.get(ready[0])
                continue
            except RayError as err:
                dead = isinstance(err, RayActorError)
                if not dead and not self._cfg.get("recreate_failed_workers"):
                    if not self._cfg.get("ignore_worker_failures"):
                        raise
                    results[i] = (_DROPPED, None)
                    self._drop_worker(i, err)
                    continue
                failures += 1
                if failures > max_failures:
                    raise RuntimeError(
                        f"WorkerSet: remote workers failed {failures} times during one "
                        f"{method}() round; last error: {err}"
                    ) from err
                self._recreate_worker(i, err)
                pending[getattr(self._remote[i], method).remote(*args)] = i
        return [results[i] for i in indices]

    def _note_stats(self, worker_index: int, stats: Dict[str, Any]) -> None:
        self._episodes_seen[worker_index] = stats["episodes"]

    def _keep_lost_stats(self, worker_index: int) -> None:
        """A worker that is gone: its finished episodes stay in ``episodes_total``."""
        self._lost_episodes += self._episodes_seen.pop(worker_index, 0)

    def _drop_worker(self, index: int, err: BaseException) -> None:
        """Marks the worker at ``index`` as dropped (removed by :meth:`_forget_dropped`)."""

        worker_index = self._worker_index[index]
        logger.warning(
            "WorkerSet: remote worker %d failed (%s: %s); dropping it and going on with the "
            "others (ignore_worker_failures=True)",
            worker_index,
            type(err).__name__,
            _first_line(err),
        )
        self._retire_remote(index)
        self.dropped_workers.append(worker_index)
        self._remote[index] = None

    def _retire_remote(self, index: int) -> None:
        """Kills the remote worker at ``index`` (if still alive) and keeps its episode counts."""
        import ray

        try:
            ray.kill(self._remote[index])
        except Exception:  # already gone
            pass
        self._keep_lost_stats(self._worker_index[index])

    def _forget_dropped(self) -> None:
        """Removes dropped workers from the set; raises once none is left."""
        if all(w is not None for w in self._remote):
            return
        keep = [k for k, w in enumerate(self._remote) if w is not None]
        self._remote = [self._remote[k] for k in keep]
        self._worker_index = [self._worker_index[k] for k in keep]
        self._next_worker = 0
        if not self._remote:
            raise RuntimeError(
                f"WorkerSet: every remote worker failed and was dropped (workers "
                f"{self.dropped_workers}); not enough healthy workers remain to continue"
            )

    def _recreate_worker(self, index: int, err: BaseException) -> None:
        import ray
        from ray.exceptions import RayActorError

        worker_index = self._worker_index[index]
        logger.warning(
            "WorkerSet: remote worker %d %s (%s: %s); recreating it and calling it again",
            worker_index,
            "died" if isinstance(err, RayActorError) else "failed",
            type(err).__name__,
            _first_line(err),
        )
        self._retire_remote(index)
        new = self._make_remote_worker(worker_index)
        if self._local is not None:
            new.set_weights.remote(ray.put(self._local.get_weights()), self._global_vars or None)
        elif self._global_vars:
            new.set_global_vars.remote(self._global_vars)
        self._remote[index] = new
        self.recreated_workers.append(worker_index)

    # ------------------------------------------------------------------ foreach
    def foreach_worker(self, func: Callable[[RolloutWorker], Any]) -> List[Any]:
        """``func(worker)`` on the local worker (if any) and every remote one, in that order."""
        out = [func(self._local)] if self._local is not None else []
        if self._remote:
            import ray

            out += ray.get([w.apply.remote(func) for w in self._remote])
        return out

    def foreach_worker_with_index(self, func: Callable[[RolloutWorker, int], Any]) -> List[Any]:
        """``func(worker, index)``; the local worker has index 0, remote ones 1..N."""
        out = [func(self._local, 0)] if self._local is not None else []
        if self._remote:
            import ray

            out += ray.get([w.apply.remote(func, i + 1) for i, w in enumerate(self._remote)])
        return out

    def foreach_policy(self, func: Callable[[Any, PolicyID], Any]) -> List[Any]:
        """``func(policy, policy_id)`` for every policy of every worker (flattened)."""
        return [r for results in self.foreach_worker(lambda w: w.foreach_policy(func)) for r in results]

    def foreach_policy_to_train(self, func: Callable[[Any, PolicyID], Any]) -> List[Any]:
        """``foreach_policy`` restricted to the policies to train."""
        return [
            r for results in self.foreach_worker(lambda w: w.foreach_policy_to_train(func)) for r in results
        ]

    foreach_trainable_policy = foreach_policy_to_train  # RLlib 1.11's name

    def foreach_env(self, func: Callable[[EnvType], Any]) -> List[List[Any]]:
        """Per worker, ``[func(env) for each sub-environment]``."""
        return self.foreach_worker(lambda w: w.foreach_env(func))

    # ------------------------------------------------------------------ metrics and lifetime
    def metrics(self) -> Dict[str, float]:
        """Episode statistics over the sampling workers (the local one if there are
        no remote workers): mean return and length of their last (up to 100)
        episodes each, episodes finished (those of workers that died or were dropped
        included), and env steps returned by :meth:`sample`."""
        import numpy as np

        if self._remote:
            indices = list(range(len(self._remote)))
            results = self._call_with_recovery(indices, "apply", _episode_stats)
            stats = []
            for i, s in zip(indices, results):
                if not (isinstance(s, tuple) and s[0] is _DROPPED):
                    self._note_stats(self._worker_index[i], s)
                    stats.append(s)
            self._forget_dropped()
        else:
            stats = [self._local.episode_stats()]
        returns = [r for s in stats for r in s["returns"]]
        lengths = [n for s in stats for n in s["lengths"]]
        steps = self.num_env_steps_sampled if self._remote else stats[0]["env_steps"]
        return {
            "episode_reward_mean": float(np.mean(returns)) if returns else float("nan"),
            "episode_len_mean": float(np.mean(lengths)) if lengths else float("nan"),
            "episodes_total": self._lost_episodes + sum(s["episodes"] for s in stats),
            "timesteps_total": int(steps),
        }

    def add_workers(self, num_workers: int) -> None:
        """Starts ``num_workers`` more remote workers (indices continue after the existing ones)."""
        if num_workers <= 0:
            return
        _ensure_ray(self._cfg, len(self._remote) + num_workers)
        if not hasattr(self, "_remote_cls"):
            self._remote_cls = RolloutWorker.as_remote(**self._remote_resources())
        first = max(self._worker_index + self.dropped_workers, default=0) + 1
        total = len(self._remote) + num_workers
        self._remote += [self._make_remote_worker(first + k, total) for k in range(num_workers)]
        self._worker_index += [first + k for k in range(num_workers)]

    def stop(self) -> None:
        """Stops the local worker and ends every remote actor (their resources are freed)."""
        if self._local is not None:
            self._local.stop()
        if not self._remote:
            return
        import ray

        try:
            ray.get([w.stop.remote() for w in self._remote], timeout=30)
        except Exception as err:  # a dead worker has nothing left to stop
            logger.debug("WorkerSet.stop: %s", err)
        for worker in self._remote:
            try:
                ray.kill(worker)
            except Exception:
                pass
        self._remote = []
        self._worker_index = []


# A dropped worker's place in _call_with_recovery's results (never leaves the driver).
_DROPPED = object()


def _sample_with_stats(worker: RolloutWorker) -> Tuple[SampleBatchType, Dict[str, Any]]:
    """Runs in the actor: a fragment and the worker's episode statistics after it."""
    return worker.sample(), worker.episode_stats()


def _episode_stats(worker: RolloutWorker) -> Dict[str, Any]:
    return worker.episode_stats()


def _first_line(err: BaseException) -> str:
    text = str(err)
    return text.splitlines()[0][:200] if text else ""


def _warn_if_unplaceable(resources: Dict[str, Any], num_workers: int) -> None:
    """Warns when the cluster as a whole lacks what the workers ask for (Ray would
    then wait for them forever, unless an autoscaler adds nodes)."""
    import ray

    total = ray.cluster_resources()
    asked = {
        "CPU": resources.get("num_cpus") or 0,
        "GPU": resources.get("num_gpus") or 0,
        **(resources.get("resources") or {}),
    }
    short = {k: v * num_workers for k, v in asked.items() if v and total.get(k, 0) < v * num_workers}
    if short:
        logger.warning(
            "WorkerSet: %d remote workers ask for %s in all, but the Ray cluster has %s; "
            "workers that do not fit wait until resources free up",
            num_workers,
            short,
            {k: total.get(k, 0) for k in short},
        )


def _ensure_ray(cfg: dict, num_workers: int) -> None:
    """Starts a local Ray instance unless Ray is already initialized.

    An initialized Ray (a cluster joined with ``ray.init(address=...)``) is
    used as it is. Without one, ``RAY_ADDRESS`` (if set) is joined; otherwise
    a local instance is started with ``num_cpus`` for the driver plus the workers.
    """
    try:
        import ray
    except ImportError as err:
        raise ImportError("WorkerSet with num_workers > 0 needs Ray: pip install 'rlpolicy[ray]'") from err
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init()
        return
    need = cfg.get("num_cpus_for_driver", 1) + num_workers * cfg["num_cpus_per_worker"]
    ray.init(num_cpus=max(1, int(math.ceil(need))), include_dashboard=False)


__all__ = ["WorkerSet"]


def _fragment_length(cfg: Dict[str, Any], num_workers: int) -> Any:
    """``rollout_fragment_length``, with RLlib 2.x's ``"auto"`` resolved: the steps
    per sub-environment that make one ``train_batch_size`` across all sampling
    workers (the local one when there are none), rounded up."""
    fragment = cfg["rollout_fragment_length"]
    if fragment != "auto":
        return fragment
    batch = cfg.get("train_batch_size")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(
            f"WorkerSet: rollout_fragment_length='auto' needs an int train_batch_size "
            f">= 1, got train_batch_size={batch!r}"
        )
    envs = cfg["num_envs_per_worker"] * max(num_workers, 1)
    return -(-batch // envs)
