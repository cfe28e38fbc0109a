"""Subclassing ``Policy`` directly: a numpy-only linear softmax policy.

No deep-learning framework is involved. The subclass implements
``compute_actions``, ``postprocess_trajectory`` (discounted returns),
``learn_on_batch`` (one REINFORCE gradient step, computed by hand) and
``get_weights``/``set_weights``. ``Policy`` supplies the rest:
``compute_single_action``, ``get_state``/``set_state`` and the pickle-free
``export_checkpoint``/``from_checkpoint``.

Run:  python examples/subclass_policy.py [--iters N]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import gymnasium as gym
import numpy as np

from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch, concat_samples


def softmax(logits):
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


class LinearSoftmaxPolicy(Policy):
    """pi(a|s) = softmax(s @ W + b), trained with REINFORCE in numpy."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.rng = np.random.default_rng(self.config["seed"])
        self.W = np.zeros((observation_space.shape[0], action_space.n))
        self.b = np.zeros(action_space.n)

    def compute_actions(
        self,
        obs_batch,
        state_batches=None,
        prev_action_batch=None,
        prev_reward_batch=None,
        info_batch=None,
        episodes=None,
        explore=None,
        timestep=None,
        **kwargs,
    ):
        logits = np.asarray(obs_batch) @ self.W + self.b
        probs = softmax(logits)
        explore = self.config["explore"] if explore is None else explore
        if explore:
            actions = np.array([self.rng.choice(len(p), p=p) for p in probs])
        else:
            actions = probs.argmax(axis=-1)
        # Actions, RNN state outputs (none), extra fetches.
        return actions, [], {SampleBatch.ACTION_DIST_INPUTS: logits}

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        rewards = sample_batch[SampleBatch.REWARDS]
        returns, running = np.zeros(len(rewards)), 0.0
        for t in reversed(range(len(rewards))):
            running = rewards[t] + self.config["gamma"] * running
            returns[t] = running
        sample_batch["advantages"] = returns
        return sample_batch

    def learn_on_batch(self, samples):
        obs, actions = samples[SampleBatch.OBS], samples[SampleBatch.ACTIONS]
        adv = samples["advantages"]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        probs = softmax(obs @ self.W + self.b)
        # d log pi(a|s) / d logits = onehot(a) - pi(.|s)
        dlogits = -probs
        dlogits[np.arange(len(actions)), actions] += 1.0
        weighted = dlogits * adv[:, None] / len(actions)
        self.W += self.config["lr"] * obs.T @ weighted  # gradient ascent
        self.b += self.config["lr"] * weighted.sum(axis=0)
        return {"learner_stats": {"mean_advantage_weight": float(np.abs(weighted).mean())}}

    def get_weights(self):
        return {"W": self.W.copy(), "b": self.b.copy()}

    def set_weights(self, weights):
        self.W, self.b = np.array(weights["W"]), np.array(weights["b"])


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
    parser.add_argument("--iters", type=int, default=5 if quick else 40)
    parser.add_argument("--episodes", type=int, default=10)
    args = parser.parse_args()

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    policy = LinearSoftmaxPolicy(
        env.observation_space, env.action_space, {"lr": 2.0, "gamma": 0.99, "seed": 0}
    )
    for i in range(args.iters):
        batch, returns = run_episodes(policy, env, args.episodes)
        policy.learn_on_batch(batch)
        print(f"iter {i}: steps={len(batch)} mean_return={np.mean(returns):.1f}")

    with tempfile.TemporaryDirectory() as tmp:
        policy.export_checkpoint(tmp)  # JSON + .npz, no pickle
        # The class's own from_checkpoint trusts the class; Policy.from_checkpoint(tmp) would
        # need safe_globals=[LinearSoftmaxPolicy] (a file names no code to import).
        restored = LinearSoftmaxPolicy.from_checkpoint(tmp)
    same = all(np.array_equal(policy.get_weights()[k], restored.get_weights()[k]) for k in ("W", "b"))
    print(f"restored {type(restored).__name__} from checkpoint; weights equal: {same}")


if __name__ == "__main__":
    main()
