"""Minimal training loops for the reference algorithms, and a greedy evaluator.

One :class:`SimpleTrainer` iteration samples ``train_batch_size`` steps (with a
local ``RolloutWorker``, or with a ``WorkerSet`` of Ray workers when
``num_workers > 0``), then updates the policy: PG with one ``learn_on_batch``;
PPO with buffered minibatch SGD (``load_batch_into_buffer`` + ``num_sgd_iter``
epochs of ``learn_on_loaded_batch`` at shuffled offsets), followed by the
adaptive KL coefficient update, as RLlib 1.11's PPO does (the registry entry's
``minibatch_sgd``). DQN's loop is ``rlpolicy.agents.dqn.dqn.SimpleDQNTrainer``;
:func:`make_trainer` picks the registered one for an algorithm name.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np
import tree

from rlpolicy.cli.algorithms import ALGORITHMS, FRAMEWORKS, Algorithm, get_algorithm
from rlpolicy.evaluation.postprocessing import Postprocessing
from rlpolicy.policy.sample_batch import SampleBatch, concat_samples
from rlpolicy.utils.metrics.iteration import IterationResult
from rlpolicy.utils.metrics.learner_info import learner_stats_of


def get_policy_class(algo: str, framework: str = "torch") -> type:
    """The reference policy class of ``algo`` for ``framework``: the torch
    class, the TF graph class (``"tf"``) or its ``as_eager()`` version
    (``"tf2"``/``"tfe"``).

    Raises:
        ValueError: For an unknown algorithm or framework.
    """
    return get_algorithm(algo).policy_class(framework)


def algo_default_config(algo: str) -> dict:
    """The algorithm's ``DEFAULT_CONFIG`` (RLlib 1.11's values; not a copy)."""
    return get_algorithm(algo).config()


class _LocalSampler:
    """Samples with one in-process ``RolloutWorker``."""

    def __init__(
        self,
        env_creator: Callable[[], Any],
        policy: Any,
        num_envs: int,
        fragment: int,
        seed: Optional[int],
        batch_mode: str = "truncate_episodes",
    ):
        from rlpolicy.evaluation.rollout_worker import RolloutWorker

        self.worker = RolloutWorker(
            env_creator,
            policy,
            num_envs=num_envs,
            rollout_fragment_length=fragment,
            seed=seed,
            batch_mode=batch_mode,
        )

    def sample(self, num_steps: int) -> SampleBatch:
        batches, count = [], 0
        while count < num_steps:
            batch = self.worker.sample()
            batches.append(batch)
            count += batch.count
        return concat_samples(batches)

    def metrics(self) -> Dict[str, float]:
        return self.worker.metrics()

    def sync_weights(self) -> None:
        """The local worker samples with the learning policy itself: nothing to do."""


class _RaySampler:
    """Samples with a ``WorkerSet``: ``num_workers`` Ray actors, each with its own
    copy of the policy (weights synced after every update) and ``num_envs`` envs."""

    def __init__(
        self,
        env_creator: Callable[[], Any],
        policy_class: type,
        config: Dict[str, Any],
        num_workers: int,
        num_envs: int,
        fragment: int,
        seed: Optional[int],
    ):
        try:
            from rlpolicy.evaluation.worker_set import WorkerSet
        except ImportError as e:
            raise ValueError(
                f"num_workers={num_workers} needs rlpolicy.evaluation.worker_set.WorkerSet, "
                f"which cannot be imported ({e}); use num_workers=0"
            ) from None
        trainer_config = dict(
            config,
            num_workers=num_workers,
            num_envs_per_worker=num_envs,
            rollout_fragment_length=fragment,
            seed=seed,
        )
        self.workers = WorkerSet(
            env_creator=env_creator,
            policy_class=policy_class,
            trainer_config=trainer_config,
            num_workers=num_workers,
        )
        self.worker = self.workers.local_worker()

    def sample(self, num_steps: int) -> SampleBatch:
        return self.workers.sample(num_steps)

    def metrics(self) -> Dict[str, float]:
        return self.workers.metrics()

    def sync_weights(self) -> None:
        self.workers.sync_weights(global_vars={"timestep": self.workers.num_env_steps_sampled})

    def stop(self) -> None:
        self.workers.stop()


class SimpleTrainer:
    """Drives one policy and its sampler: a local worker, or Ray workers.

    Args:
        algo: An algorithm whose loop this is (its name or registry entry; see
            :mod:`rlpolicy.cli.algorithms`): ``"pg"`` or ``"ppo"``.
        env_creator: Returns a gymnasium env.
        config: Partial algorithm config; ``framework`` picks the policy class.
        num_envs: Envs per worker, stepped in lock-step.
        num_workers: Ray rollout workers (0: sample in this process).
        seed: Seed of the environments' first resets.
    """

    def __init__(
        self,
        algo: Union[str, Algorithm],
        env_creator: Callable[[], Any],
        config: Dict[str, Any],
        *,
        num_envs: int = 8,
        num_workers: int = 0,
        seed: Optional[int] = None,
    ):
        spec = algo if isinstance(algo, Algorithm) else get_algorithm(algo)
        if spec.trainer != f"{__name__}:SimpleTrainer":
            raise ValueError(
                f"SimpleTrainer does not train {spec.name!r} (its loop is {spec.trainer}); use make_trainer()"
            )
        self.algo = spec.name
        self._minibatch_sgd = spec.minibatch_sgd
        policy_class = spec.policy_class(config.get("framework", "torch"))
        # Each env contributes rollout_fragment_length / num_envs steps per sample() call
        # ("complete_episodes": a call returns once that many steps of ended episodes are in).
        fragment = max(1, int(config.get("rollout_fragment_length", 200)) // num_envs)
        # config["batch_mode"] is honoured (PG on CartPole needs "complete_episodes": its
        # returns-to-go are not bootstrapped, so a cut fragment's returns are wrong).
        batch_mode = config.get("batch_mode", spec.config()["batch_mode"])
        if num_workers > 0:
            self.sampler: Any = _RaySampler(
                env_creator,
                policy_class,
                dict(config, batch_mode=batch_mode),
                num_workers,
                num_envs,
                fragment,
                seed,
            )
            self.policy = self.sampler.worker.policy
        else:
            env = env_creator()
            self.policy = policy_class(env.observation_space, env.action_space, config)
            env.close()
            self.sampler = _LocalSampler(env_creator, self.policy, num_envs, fragment, seed, batch_mode)
        self.config = self.policy.config
        self.iteration = 0
        self._steps_offset = self._episodes_offset = 0
        self._start = time.perf_counter()

    def resume_counters(self, iteration: int, timesteps: int, episodes: int) -> None:
        """Continues the iteration, env-step and episode counts of an earlier run
        (``rlpolicy train --resume``); the policy's state is restored separately."""
        self.iteration = int(iteration)
        self._steps_offset, self._episodes_offset = int(timesteps), int(episodes)

    @property
    def worker(self) -> Any:
        """The local ``RolloutWorker`` (it holds the learning policy)."""
        return self.sampler.worker

    def collect(self) -> SampleBatch:
        """At least ``train_batch_size`` postprocessed steps."""
        return self.sampler.sample(self.config["train_batch_size"])

    def train(self) -> IterationResult:
        batch = self.collect()
        m = dict(self.sampler.metrics())
        m["timesteps_total"] += self._steps_offset
        m["episodes_total"] += self._episodes_offset
        self.policy.on_global_var_update({"timestep": m["timesteps_total"]})
        stats = self._learn_minibatches(batch) if self._minibatch_sgd else self._learn_simple(batch)
        self.sampler.sync_weights()
        self.iteration += 1
        return IterationResult(
            self.iteration,
            m["timesteps_total"],
            m["episode_reward_mean"],
            m["episodes_total"],
            stats,
            time.perf_counter() - self._start,
        )

    def stop(self) -> None:
        """Releases the Ray workers (if any)."""
        stop = getattr(self.sampler, "stop", None)
        if stop is not None:
            stop()

    def _learn_simple(self, batch: SampleBatch) -> Dict[str, float]:
        info = self.policy.learn_on_batch(batch)
        return learner_stats_of(info)

    def _learn_minibatches(self, batch: SampleBatch) -> Dict[str, float]:
        adv = batch[Postprocessing.ADVANTAGES]
        batch[Postprocessing.ADVANTAGES] = (adv - adv.mean()) / max(1e-4, float(adv.std()))
        if self.config["shuffle_sequences"]:
            batch.shuffle()
        per_device_loaded = self.policy.load_batch_into_buffer(batch, buffer_index=0)
        num_devices = len(self.policy.devices)
        minibatch = self.config.get("sgd_minibatch_size") or self.config["train_batch_size"]
        per_device_mb = max(1, minibatch // num_devices)
        num_minibatches = max(1, per_device_loaded // per_device_mb)
        stats: list = []
        for _ in range(self.config["num_sgd_iter"]):
            for i in np.random.permutation(num_minibatches):
                result = self.policy.learn_on_loaded_batch(int(i) * per_device_mb, buffer_index=0)
                stats.append(learner_stats_of(result))
        mean = {k: float(np.mean([s[k] for s in stats if k in s])) for k in stats[-1]}
        if "kl" in mean and hasattr(self.policy, "update_kl"):
            self.policy.update_kl(mean["kl"])
        return mean


def make_trainer(
    algo: str,
    env_creator: Callable[[], Any],
    config: Dict[str, Any],
    *,
    num_envs: Optional[int] = None,
    num_workers: int = 0,
    seed: Optional[int] = None,
) -> Any:
    """The registered training loop of ``algo`` (:class:`SimpleTrainer` for pg and ppo,
    ``SimpleDQNTrainer`` for dqn).

    Every trainer has ``policy``, ``worker`` (the local RolloutWorker) and
    ``train() -> IterationResult``.

    Raises:
        ValueError: For an unknown algorithm, or ``num_workers > 0`` for a loop that
            samples in one process (DQN).
    """
    return get_algorithm(algo).make_trainer(
        env_creator, config, num_envs=num_envs, num_workers=num_workers, seed=seed
    )


def evaluate_policy(
    policy: Any, env_creator: Callable[[], Any], num_episodes: int = 20, seed: int = 10_000
) -> List[float]:
    """Returns of ``num_episodes`` episodes played with ``explore=False``.

    One env per episode (seeded ``seed + i``), all stepped in lock-step so the
    policy sees one batch per step; every episode counts exactly once. The
    policy's ``global_timestep`` is left unchanged.
    """
    envs = [env_creator() for _ in range(num_episodes)]
    from rlpolicy.evaluation.sampler import env_action_fn
    from rlpolicy.policy._obs_prep import flatten_single_obs

    # Dict/Tuple observations are flattened as the samplers do it (one preprocessor).
    prep = functools.partial(flatten_single_obs, policy)
    obs = [prep(env.reset(seed=seed + i)[0]) for i, env in enumerate(envs)]

    to_env = env_action_fn(policy)  # the samplers' own mapping (normalize_actions / clip_actions)
    returns = np.zeros(num_episodes)
    running = np.ones(num_episodes, dtype=bool)
    timestep = policy.global_timestep
    state = [np.stack([np.asarray(s)] * num_episodes) for s in policy.get_initial_state()]
    try:
        while running.any():
            idx = np.flatnonzero(running)
            actions, state_out, _ = policy.compute_actions(
                np.stack([obs[i] for i in idx]), state_batches=[s[idx] for s in state] or None, explore=False
            )
            for j, i in enumerate(idx):
                action = (
                    actions[j]
                    if isinstance(actions, np.ndarray)
                    else tree.map_structure(lambda a, j=j: a[j], actions)
                )
                next_obs, reward, terminated, truncated, _ = envs[i].step(to_env(action))
                obs[i] = prep(next_obs)
                returns[i] += reward
                running[i] = not (terminated or truncated)
            for s, s_out in zip(state, state_out):
                s[idx] = np.asarray(s_out)
    finally:
        policy.global_timestep = timestep
        for env in envs:
            env.close()
    return returns.tolist()


__all__ = [
    "ALGORITHMS",
    "FRAMEWORKS",
    "IterationResult",
    "SimpleTrainer",
    "algo_default_config",
    "evaluate_policy",
    "get_policy_class",
    "learner_stats_of",
    "make_trainer",
]
