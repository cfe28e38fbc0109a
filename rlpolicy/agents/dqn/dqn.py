"""DQN's default config (RLlib 1.11 values) and a single-process training loop.

``DEFAULT_CONFIG`` (defined in the leaf module ``dqn_config``) is RLlib 1.11's
SimpleQ config with DQN's additions (Rainbow options: dueling, double Q, noisy
nets, n-step, distributional, prioritized replay).

:class:`SimpleDQNTrainer` follows RLlib 1.11's DQN execution plan with
``num_workers=0``: it alternates (round robin) between sampling
``rollout_fragment_length`` steps per environment into the replay buffer and
one training step on ``train_batch_size`` replayed timesteps (once
``learning_starts`` timesteps were stored), feeding the TD errors back as
priorities and syncing the target network every
``target_network_update_freq`` sampled steps. :func:`train_dqn` runs it until
a greedy evaluation reaches a target return.

Record: ``train_dqn(lambda: gym.make("CartPole-v1"))`` (torch, shipped defaults,
seed 0, evaluations of 20 episodes with ``explore=False`` every 5000 steps)
reached a mean of 500.0 after 35,000 sampled steps, in 239 s wall time on a
shared 2-core CPU (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from rlpolicy.agents.dqn.dqn_config import DEFAULT_CONFIG
from rlpolicy.utils.deprecation import DEPRECATED_VALUE
from rlpolicy.utils.metrics.iteration import IterationResult
from rlpolicy.utils.metrics.learner_info import learner_stats_of


def get_dqn_policy_class(framework: str = "torch") -> type:
    """DQNTorchPolicy, DQNTFPolicy (``"tf"``) or its eager version (``"tf2"``/``"tfe"``).

    Raises:
        ValueError: For another framework.
    """
    if framework == "torch":
        from rlpolicy.agents.dqn.dqn_torch_policy import DQNTorchPolicy

        return DQNTorchPolicy
    if framework in ("tf", "tf2", "tfe"):
        from rlpolicy.agents.dqn.dqn_tf_policy import DQNTFPolicy

        return DQNTFPolicy if framework == "tf" else DQNTFPolicy.as_eager()
    raise ValueError(f"DQN: framework={framework!r} not available; supported: 'torch', 'tf', 'tf2', 'tfe'")


def make_replay_buffer(config: dict) -> Any:
    """The LocalReplayBuffer for ``config`` (uniform if ``prioritized_replay`` is off)."""
    from rlpolicy.execution.replay_buffer import LocalReplayBuffer

    capacity = config["replay_buffer_config"].get("capacity", 50000)
    if config.get("buffer_size") not in (None, DEPRECATED_VALUE):
        capacity = config["buffer_size"]  # the old name, as RLlib 1.11 still honours it
    return LocalReplayBuffer(
        num_shards=1,
        learning_starts=config["learning_starts"],
        capacity=capacity,
        replay_batch_size=config["train_batch_size"],
        prioritized_replay_alpha=config["prioritized_replay_alpha"] if config["prioritized_replay"] else 0.0,
        prioritized_replay_beta=config["prioritized_replay_beta"],
        prioritized_replay_eps=config["prioritized_replay_eps"],
        replay_sequence_length=config["replay_sequence_length"],
    )


def train_steps_per_sample(config: dict, num_envs: int) -> float:
    """Train steps per sampling step (RLlib 1.11's round-robin weight of the replay op)."""
    if not config.get("training_intensity"):
        return 1.0
    native_ratio = config["train_batch_size"] / (config["rollout_fragment_length"] * num_envs)
    return config["training_intensity"] / native_ratio


def _beta_at(config: dict, timestep: int) -> float:
    """Linear annealing from prioritized_replay_beta to final_prioritized_replay_beta."""
    start, end = config["prioritized_replay_beta"], config["final_prioritized_replay_beta"]
    horizon = max(1, config["prioritized_replay_beta_annealing_timesteps"])
    return start + min(1.0, timestep / horizon) * (end - start)


class SimpleDQNTrainer:
    """Trains one DQN policy in this process (no Ray), as RLlib 1.11's DQN plan does.

    Args:
        env_creator: Returns a gymnasium env (Discrete actions).
        config: Partial DQN config (completed from ``DEFAULT_CONFIG``);
            ``framework`` picks the policy class.
        seed: Seed of the environments' first resets.
        num_envs: Environments stepped in lock-step (default ``num_envs_per_worker``).
    """

    def __init__(
        self,
        env_creator: Callable[[], Any],
        config: Optional[dict] = None,
        *,
        seed: Optional[int] = None,
        num_envs: Optional[int] = None,
    ):
        from rlpolicy.evaluation.rollout_worker import RolloutWorker

        config = dict(config or {})
        env = env_creator()
        cls = get_dqn_policy_class(config.get("framework", "torch"))
        self.policy = cls(env.observation_space, env.action_space, config)
        self.config = self.policy.config
        self.num_envs = num_envs or self.config["num_envs_per_worker"]
        self.worker = RolloutWorker(
            env_creator,
            self.policy,
            num_envs=self.num_envs,
            rollout_fragment_length=self.config["rollout_fragment_length"],
            seed=seed,
        )
        self.replay_buffer = make_replay_buffer(self.config)
        self._train_ratio = train_steps_per_sample(self.config, self.num_envs)
        self._train_credit = 0.0
        self.steps_trained = 0
        self.num_target_updates = 0
        self.last_target_update = 0
        self.iteration = 0
        self._last_learn_info: Dict[str, Any] = {}
        self._steps_offset = self._episodes_offset = 0
        self._start = time.perf_counter()

    def resume_counters(self, iteration: int, timesteps: int, episodes: int) -> None:
        """Continues the iteration, sampled-step and episode counts of an earlier run
        (the target network's sync clock restarts there; the replay buffer refills)."""
        self.iteration = int(iteration)
        self._steps_offset, self._episodes_offset = int(timesteps), int(episodes)
        self.last_target_update = self.steps_sampled

    @property
    def learner_stats(self) -> Dict[str, float]:
        """The last learn step's learner stats as floats (empty before the first)."""
        return learner_stats_of(self._last_learn_info)

    @property
    def steps_sampled(self) -> int:
        return self.worker.total_env_steps + self._steps_offset

    def step(self) -> None:
        """One round-robin turn: sample and store, then train on replayed data."""
        from rlpolicy.agents.dqn.dqn_common import PRIO_WEIGHTS

        batch = self.worker.sample()
        if self.config["prioritized_replay"] and not self.config["worker_side_prioritization"]:
            # New transitions enter with the highest priority seen so far (PER);
            # RLlib 1.11 stored them at priority 1.0 (see docs/porting.md).
            del batch[PRIO_WEIGHTS]
        self.replay_buffer.add_batch(batch)
        self._train_credit += self._train_ratio
        while self._train_credit >= 1.0:
            self._train_credit -= 1.0
            if not self._train_on_replay():
                self._train_credit = 0.0  # nothing to replay yet: no credit builds up
                break

    def _train_on_replay(self) -> bool:
        from rlpolicy.execution.replay_buffer import BATCH_INDEXES
        from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID

        self.replay_buffer.prioritized_replay_beta = _beta_at(self.config, self.steps_sampled)
        replayed = self.replay_buffer.replay()
        if replayed is None:
            return False
        batch = replayed.policy_batches[DEFAULT_POLICY_ID]
        info = self.policy.learn_on_batch(batch)
        self.steps_trained += batch.count
        self._last_learn_info = info  # (its stats are converted when read)
        # RLlib's TrainOneStep: broadcast the sampled-steps counter (epsilon, lr schedules).
        self.policy.on_global_var_update({"timestep": self.steps_sampled})
        if BATCH_INDEXES in batch and "td_error" in info:
            td_error = np.asarray(info["td_error"]).reshape(-1)
            # Several towers drop the rows beyond an equal share per tower.
            indexes = np.asarray(batch[BATCH_INDEXES])[: len(td_error)]
            self.replay_buffer.update_priorities({DEFAULT_POLICY_ID: (indexes, td_error)})
        if self.steps_sampled - self.last_target_update >= self.config["target_network_update_freq"]:
            self.policy.update_target()
            self.num_target_updates += 1
            self.last_target_update = self.steps_sampled
        return True

    def train(self) -> Any:
        """Steps until ``timesteps_per_iteration`` more env steps were sampled;
        returns an ``IterationResult`` (as ``SimpleTrainer.train``)."""
        target = self.steps_sampled + self.config["timesteps_per_iteration"]
        while self.steps_sampled < target:
            self.step()
        self.iteration += 1
        m = self.worker.metrics()
        return IterationResult(
            self.iteration,
            self.steps_sampled,
            m["episode_reward_mean"],
            m["episodes_total"] + self._episodes_offset,
            dict(self.learner_stats),
            time.perf_counter() - self._start,
        )


def evaluate_policy(
    policy: Any, env_creator: Callable[[], Any], num_episodes: int = 20, seed: int = 10_000
) -> List[float]:
    """Returns of ``num_episodes`` greedy (``explore=False``) episodes, one env each,
    stepped in lock-step. The policy's ``global_timestep`` is left unchanged."""
    envs = [env_creator() for _ in range(num_episodes)]
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    returns = np.zeros(num_episodes)
    running = np.ones(num_episodes, dtype=bool)
    timestep = policy.global_timestep
    while running.any():
        idx = np.flatnonzero(running)
        actions, _, _ = policy.compute_actions(np.stack([obs[i] for i in idx]), explore=False)
        for i, action in zip(idx, actions):
            obs[i], reward, terminated, truncated, _ = envs[i].step(int(action))
            returns[i] += reward
            running[i] = not (terminated or truncated)
    policy.global_timestep = timestep
    return returns.tolist()


@dataclass
class DQNRunResult:
    """What :func:`train_dqn` did: whether it reached ``stop_reward``, after how
    many sampled steps and seconds, and each evaluation's mean return."""

    solved: bool
    timesteps: int
    wall_time_s: float
    final_eval_mean: float
    evaluations: List[Dict[str, float]] = field(default_factory=list)
    trainer: Optional[SimpleDQNTrainer] = None


def train_dqn(
    env_creator: Callable[[], Any],
    config: Optional[dict] = None,
    *,
    max_timesteps: int = 200_000,
    stop_reward: float = 475.0,
    eval_interval: int = 5000,
    eval_episodes: int = 20,
    seed: int = 0,
    log: Optional[Callable[[str], None]] = None,
) -> DQNRunResult:
    """Trains DQN until a greedy evaluation's mean return reaches ``stop_reward``.

    Every ``eval_interval`` sampled steps the policy plays ``eval_episodes``
    episodes with ``explore=False``; training stops at the first evaluation
    whose mean is ``>= stop_reward``, or after ``max_timesteps``.

    Args:
        env_creator: Returns a gymnasium env.
        config: Partial DQN config (the defaults: ``DEFAULT_CONFIG``).
        max_timesteps: Budget of sampled env steps.
        stop_reward: Target mean evaluation return.
        eval_interval: Sampled steps between evaluations.
        eval_episodes: Episodes per evaluation.
        seed: Seeds python's, numpy's and torch's RNGs and the envs.
        log: Called with a progress line after each evaluation.
    """
    random.seed(seed)
    np.random.seed(seed)
    _seed_frameworks(seed, (config or {}).get("framework", "torch"))
    trainer = SimpleDQNTrainer(env_creator, config, seed=seed)
    start, evaluations, mean = time.perf_counter(), [], float("nan")
    next_eval = eval_interval
    while trainer.steps_sampled < max_timesteps:
        trainer.step()
        if trainer.steps_sampled < next_eval:
            continue
        next_eval += eval_interval
        mean = float(np.mean(evaluate_policy(trainer.policy, env_creator, eval_episodes, seed=10_000 + seed)))
        m = trainer.worker.metrics()
        evaluations.append(
            {
                "timesteps": trainer.steps_sampled,
                "eval_mean": mean,
                "train_mean": m["episode_reward_mean"],
                "time_s": time.perf_counter() - start,
            }
        )
        if log is not None:
            log(
                f"steps={trainer.steps_sampled} eval_mean={mean:.1f} "
                f"train_mean={m['episode_reward_mean']:.1f} t={time.perf_counter() - start:.0f}s"
            )
        if mean >= stop_reward:
            return DQNRunResult(
                True, trainer.steps_sampled, time.perf_counter() - start, mean, evaluations, trainer
            )
    return DQNRunResult(False, trainer.steps_sampled, time.perf_counter() - start, mean, evaluations, trainer)


def _seed_frameworks(seed: int, framework: str) -> None:
    if framework == "torch":
        from rlpolicy.utils.framework import try_import_torch

        torch, _ = try_import_torch()
        if torch is not None:
            torch.manual_seed(seed)
    else:
        from rlpolicy.utils.framework import try_import_tf

        _, tf, _ = try_import_tf()
        if tf is not None:
            tf.random.set_seed(seed)


__all__ = ["DEFAULT_CONFIG", "DQNRunResult", "SimpleDQNTrainer", "evaluate_policy", "train_dqn"]
