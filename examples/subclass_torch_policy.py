"""Subclassing ``TorchPolicy`` (the "new style"): override ``loss()``.

``TorchPolicy`` builds the catalog's default model and action distribution
from the spaces and ``config["model"]``, and runs action computation,
exploration, gradient steps and state handling. The subclass adds only the
algorithm: discounted returns in ``postprocess_trajectory``, a REINFORCE
``loss`` and ``extra_grad_info`` stats. As in RLlib 1.11, the constructor
ends with ``_initialize_loss_from_dummy_batch()``, which runs the loss once
on dummy data and prunes the view requirements to the columns it reads.

Run:  python examples/subclass_torch_policy.py [--iters N]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does).
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym
import numpy as np
import torch

from rlpolicy.evaluation.postprocessing import Postprocessing, compute_advantages
from rlpolicy.policy.sample_batch import SampleBatch, concat_samples
from rlpolicy.policy.torch_policy import TorchPolicy


class ReinforceTorchPolicy(TorchPolicy):
    """REINFORCE with normalized returns, written as a TorchPolicy subclass."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(
            observation_space,
            action_space,
            config,
            max_seq_len=config.get("model", {}).get("max_seq_len", 20),
        )
        self._initialize_loss_from_dummy_batch()

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        return compute_advantages(
            sample_batch, last_r=0.0, gamma=self.config["gamma"], use_gae=False, use_critic=False
        )

    def loss(self, model, dist_class, train_batch):
        logits, _ = model(train_batch)
        logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
        adv = train_batch[Postprocessing.ADVANTAGES]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(adv) > 1 else adv
        loss = -torch.mean(logp * adv)
        model.tower_stats["policy_loss"] = loss
        model.tower_stats["entropy"] = dist_class(logits, model).entropy().mean()
        return loss

    def extra_grad_info(self, train_batch):
        return {k: torch.stack(self.get_tower_stats(k)).mean().item() for k in ("policy_loss", "entropy")}


def run_episodes(policy, env, num_episodes):
    """Plays ``num_episodes`` episodes; returns (postprocessed batch, episode returns)."""
    batches, returns = [], []
    for _ in range(num_episodes):
        obs, _ = env.reset()
        rows = {k: [] for k in ("obs", "actions", "rewards", "terminateds", "truncateds")}
        terminated = truncated = False
        while not (terminated or truncated):
            action, _, _ = policy.compute_single_action(obs)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(rows, (obs, action, reward, terminated, truncated)):
                rows[key].append(value)
            obs = next_obs
        episode = SampleBatch({k: np.array(v) for k, v in rows.items()})
        batches.append(policy.postprocess_trajectory(episode))
        returns.append(float(np.sum(rows["rewards"])))
    return concat_samples(batches), returns


def main():
    quick = os.environ.get("RLPOLICY_EXAMPLE_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=3 if quick else 30)
    parser.add_argument("--episodes", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    policy = ReinforceTorchPolicy(
        env.observation_space, env.action_space, {"lr": 0.01, "gamma": 0.99, "model": {"fcnet_hiddens": [32]}}
    )
    print(f"view requirements after loss init: {sorted(policy.view_requirements)}")
    env_steps = 0
    for i in range(args.iters):
        batch, returns = run_episodes(policy, env, args.episodes)
        env_steps += len(batch)
        stats = policy.learn_on_batch(batch)["learner_stats"]
        print(
            f"iter {i}: mean_return={np.mean(returns):.1f} "
            f"policy_loss={stats['policy_loss']:.4f} entropy={stats['entropy']:.4f}"
        )
    print(f"total env steps={env_steps}")


if __name__ == "__main__":
    main()
