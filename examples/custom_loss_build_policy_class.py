"""A custom policy-gradient loss with ``build_policy_class``.

A three-armed bandit (one-step gymnasium episodes) is solved with REINFORCE:
``postprocess_fn`` turns each episode's rewards into advantages, ``loss_fn``
computes ``-mean(logp(a) * (A - mean(A)))`` and ``stats_fn`` reports it.

Run:  python examples/custom_loss_build_policy_class.py [--iters N]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does).
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym
import numpy as np
import torch

from rlpolicy.evaluation.postprocessing import Postprocessing, compute_advantages
from rlpolicy.policy.policy_template import build_policy_class
from rlpolicy.policy.sample_batch import SampleBatch, concat_samples


class ThreeArmedBandit(gym.Env):
    """One step per episode; arm ``i`` pays ``MEANS[i]`` plus Gaussian noise."""

    MEANS = (0.1, 0.5, 0.9)

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(len(self.MEANS))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.ones(1, np.float32), {}

    def step(self, action):
        reward = self.MEANS[int(action)] + 0.1 * self.np_random.standard_normal()
        # gymnasium's 5-tuple: obs, reward, terminated, truncated, info.
        return np.ones(1, np.float32), float(reward), True, False, {}


def add_advantages(policy, sample_batch, other_agent_batches=None, episode=None):
    """postprocess_fn: discounted returns as advantages (no critic)."""
    return compute_advantages(
        sample_batch, last_r=0.0, gamma=policy.config["gamma"], use_gae=False, use_critic=False
    )


def pg_loss(policy, model, dist_class, train_batch):
    """loss_fn: REINFORCE with a batch-mean baseline."""
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    adv = train_batch[Postprocessing.ADVANTAGES]
    loss = -torch.mean(logp * (adv - adv.mean()))
    model.tower_stats["pg_loss"] = loss  # read back by stats_fn
    return loss


def pg_stats(policy, train_batch):
    """stats_fn: the loss of every tower (one here), averaged."""
    return {"pg_loss": torch.stack(policy.get_tower_stats("pg_loss")).mean()}


BanditPGPolicy = build_policy_class(
    "BanditPGPolicy",
    "torch",
    loss_fn=pg_loss,
    postprocess_fn=add_advantages,
    stats_fn=pg_stats,
    get_default_config=lambda: {"gamma": 1.0, "lr": 0.02},
)


def collect(policy, env, num_episodes):
    """Runs ``num_episodes`` episodes and returns the postprocessed train batch."""
    batches = []
    for _ in range(num_episodes):
        obs, _ = env.reset()
        action, _, _ = policy.compute_single_action(obs)
        _, reward, terminated, truncated, _ = env.step(action)
        episode = SampleBatch(
            {
                SampleBatch.OBS: obs[None],
                SampleBatch.ACTIONS: np.array([action]),
                SampleBatch.REWARDS: np.array([reward], np.float32),
                SampleBatch.TERMINATEDS: np.array([terminated]),
                SampleBatch.TRUNCATEDS: np.array([truncated]),
            }
        )  # "dones" is derived
        batches.append(policy.postprocess_trajectory(episode))
    return concat_samples(batches)


def best_arm_prob(policy):
    """Probability of the best arm under the current policy."""
    _, _, extra = policy.compute_single_action(np.ones(1, np.float32), explore=False)
    logits = extra[SampleBatch.ACTION_DIST_INPUTS]
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    return float(probs[int(np.argmax(ThreeArmedBandit.MEANS))])


def main():
    quick = os.environ.get("RLPOLICY_EXAMPLE_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=8 if quick else 30)
    parser.add_argument("--episodes", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    env = ThreeArmedBandit()
    env.reset(seed=0)
    policy = BanditPGPolicy(env.observation_space, env.action_space, {"model": {"fcnet_hiddens": [16]}})
    print(f"initial p(best arm)={best_arm_prob(policy):.3f}")
    for i in range(args.iters):
        batch = collect(policy, env, args.episodes)
        stats = policy.learn_on_batch(batch)["learner_stats"]
        print(
            f"iter {i}: mean_reward={batch[SampleBatch.REWARDS].mean():.3f} "
            f"pg_loss={float(stats['pg_loss']):.4f}"
        )
    print(f"final p(best arm)={best_arm_prob(policy):.3f}")


if __name__ == "__main__":
    main()
