"""A TensorFlow graph-mode policy from ``build_tf_policy``: REINFORCE with an entropy bonus.

``build_tf_policy`` turns a few functions into a ``DynamicTFPolicy`` subclass:
``postprocess_fn`` adds the advantages (here: normalized discounted returns),
``loss_fn`` builds the loss from placeholders in the policy's own ``tf1.Graph``,
``stats_fn`` names the tensors reported as learner stats, and ``optimizer_fn``
picks the optimizer. Each policy has its own graph and ``tf1.Session``, so eager
TensorFlow (and torch) keep working in the same process. A ``RolloutWorker``
samples CartPole with it; ``learn_on_batch`` runs one session call per step.

Run:  python examples/tf_graph_policy.py [--iters N]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does).
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym
import numpy as np

from rlpolicy.evaluation.postprocessing import Postprocessing, compute_advantages
from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.tf_policy_template import build_tf_policy
from rlpolicy.utils.framework import try_import_tf

tf1, tf, _ = try_import_tf()


def add_returns(policy, sample_batch, other_agent_batches=None, episode=None):
    """postprocess_fn: discounted returns-to-go as the advantages (no critic)."""
    return compute_advantages(
        sample_batch, last_r=0.0, gamma=policy.config["gamma"], use_gae=False, use_critic=False
    )


def reinforce_loss(policy, model, dist_class, train_batch):
    """loss_fn: -mean(log pi(a|s) * normalized advantage) - entropy_coeff * entropy."""
    logits, _ = model(train_batch)
    dist = dist_class(logits, model)
    adv = train_batch[Postprocessing.ADVANTAGES]
    mean, var = tf.nn.moments(adv, axes=[0])
    adv = (adv - mean) / tf.sqrt(var + 1e-8)
    policy.pg_loss = -tf.reduce_mean(dist.logp(train_batch[SampleBatch.ACTIONS]) * adv)
    policy.entropy = tf.reduce_mean(dist.entropy())
    return policy.pg_loss - policy.config["entropy_coeff"] * policy.entropy


def reinforce_stats(policy, train_batch):
    """stats_fn: graph tensors fetched with every learn_on_batch."""
    return {"pg_loss": policy.pg_loss, "entropy": policy.entropy}


def adam(policy, config):
    """optimizer_fn: a TF1 optimizer (graph mode)."""
    return tf1.train.AdamOptimizer(learning_rate=config["lr"])


ReinforceTFPolicy = build_tf_policy(
    name="ReinforceTFPolicy",
    loss_fn=reinforce_loss,
    postprocess_fn=add_returns,
    stats_fn=reinforce_stats,
    optimizer_fn=adam,
    get_default_config=lambda: {"gamma": 0.99, "lr": 0.01, "entropy_coeff": 0.01},
)


def main():
    quick = os.environ.get("RLPOLICY_EXAMPLE_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=6 if quick else 25)
    parser.add_argument("--steps", type=int, default=1000, help="env steps per iteration")
    args = parser.parse_args()

    tf.random.set_seed(0)
    np.random.seed(0)
    env = gym.make("CartPole-v1")
    policy = ReinforceTFPolicy(
        env.observation_space, env.action_space, {"framework": "tf", "model": {"fcnet_hiddens": [32]}}
    )
    print(
        f"policy {type(policy).__name__}: own graph {policy.get_session().graph is policy.graph}, "
        f"eager outside it {tf.executing_eagerly()}"
    )
    worker = RolloutWorker(
        lambda: gym.make("CartPole-v1"), policy, num_envs=4, rollout_fragment_length=args.steps // 4, seed=0
    )
    for i in range(args.iters):
        batch = worker.sample()
        stats = policy.learn_on_batch(batch)["learner_stats"]
        returns = [m.episode_reward for m in worker.get_metrics()] or [float("nan")]
        print(
            f"iter {i}: steps={batch.count} mean_return={np.mean(returns):.1f} "
            f"entropy={float(stats['entropy']):.3f} pg_loss={float(stats['pg_loss']):.4f}"
        )
    print(f"total env steps={worker.total_env_steps}")


if __name__ == "__main__":
    main()
