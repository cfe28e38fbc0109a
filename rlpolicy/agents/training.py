"""A minimal single-process training loop for the reference algorithms.

One iteration samples ``train_batch_size`` steps with a ``RolloutWorker``, then
updates the policy: PG with one ``learn_on_batch``; PPO with buffered minibatch
SGD (``load_batch_into_buffer`` + ``num_sgd_iter`` epochs of
``learn_on_loaded_batch`` at shuffled offsets), followed by the adaptive KL
coefficient update, as RLlib 1.11's PPO does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import numpy as np

from rlpolicy.evaluation.postprocessing import Postprocessing
from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.policy.sample_batch import SampleBatch, concat_samples
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY

ALGORITHMS = ("pg", "ppo")


FRAMEWORKS = ("torch", "tf", "tf2", "tfe")


def get_policy_class(algo: str, framework: str = "torch") -> type:
    """The reference policy class of ``algo`` for ``framework``: the torch
    class, the TF graph class (``"tf"``) or its ``as_eager()`` version
    (``"tf2"``/``"tfe"``)."""
    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algo!r}; known: {', '.join(ALGORITHMS)}")
    if framework not in FRAMEWORKS:
        raise ValueError(f"algorithm {algo!r}: framework={framework!r} not available; "
                         f"supported: {', '.join(map(repr, FRAMEWORKS))}")
    if framework == "torch":
        if algo == "pg":
            from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

            return PGTorchPolicy
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

        return PPOTorchPolicy
    if algo == "pg":
        from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy as tf_cls
    else:
        from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy as tf_cls
    return tf_cls if framework == "tf" else tf_cls.as_eager()


@dataclass
class IterationResult:
    iteration: int
    timesteps_total: int
    episode_reward_mean: float
    episodes_total: int
    learner_stats: Dict[str, float]
    time_s: float


class SimpleTrainer:
    """Drives one policy and one sampler (no Ray)."""

    def __init__(self, algo: str, env_creator: Callable[[], Any], config: Dict[str, Any], *,
                 num_envs: int = 8, seed: Optional[int] = None):
        env = env_creator()
        self.algo = algo
        self.policy = get_policy_class(algo, config.get("framework", "torch"))(
            env.observation_space, env.action_space, config)
        self.config = self.policy.config
        fragment = max(1, self.config["rollout_fragment_length"] // num_envs)
        self.worker = RolloutWorker(env_creator, self.policy, num_envs=num_envs,
                                    rollout_fragment_length=fragment, seed=seed)
        self.iteration = 0
        self._start = time.perf_counter()

    def collect(self) -> SampleBatch:
        batches, count = [], 0
        while count < self.config["train_batch_size"]:
            batch = self.worker.sample()
            batches.append(batch)
            count += batch.count
        return concat_samples(batches)

    def train(self) -> IterationResult:
        batch = self.collect()
        self.policy.on_global_var_update({"timestep": self.worker.total_env_steps})
        stats = self._learn_ppo(batch) if self.algo == "ppo" else self._learn_simple(batch)
        self.iteration += 1
        m = self.worker.metrics()
        return IterationResult(self.iteration, m["timesteps_total"], m["episode_reward_mean"],
                               m["episodes_total"], stats, time.perf_counter() - self._start)

    def _learn_simple(self, batch: SampleBatch) -> Dict[str, float]:
        info = self.policy.learn_on_batch(batch)
        return _floats(info.get(LEARNER_STATS_KEY, {}))

    def _learn_ppo(self, batch: SampleBatch) -> Dict[str, float]:
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


def learner_stats_of(result: Dict[str, Any]) -> Dict[str, float]:
    """Learner stats of a learn result: the mean over ``tower_i`` entries (multi-device), else
    the top-level ``learner_stats`` (single device)."""
    towers = [_floats(v.get(LEARNER_STATS_KEY, {})) for k, v in result.items() if k.startswith("tower_")]
    if not towers:
        return _floats(result.get(LEARNER_STATS_KEY, {}))
    return {k: float(np.mean([t[k] for t in towers if k in t])) for k in towers[0]}


def _floats(stats: Dict[str, Any]) -> Dict[str, float]:
    out = {}
    for k, v in stats.items():
        try:
            out[k] = float(np.asarray(v, dtype=np.float64).mean())
        except (TypeError, ValueError):
            continue
    return out
