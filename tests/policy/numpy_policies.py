"""Small numpy-only Policy subclasses used by the Policy tests.

They show how a researcher subclasses ``rlpolicy.policy.policy.Policy``
directly, without any deep-learning framework.
"""

from __future__ import annotations

from typing import Dict, List

import gymnasium as gym
import numpy as np
import tree

from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class LinearSoftmaxPolicy(Policy):
    """pi(a|s) = softmax(s @ W + b); REINFORCE with momentum SGD, all in numpy.

    ``postprocess_trajectory`` writes discounted returns into ``advantages``;
    the loss reads only ``obs``, ``actions`` and ``advantages``.
    """

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.seed = self.config.get("seed") or 0
        self.temperature = 1.0
        self.rng = np.random.default_rng(self.seed)
        dim, n = observation_space.shape[0], action_space.n
        self.W = np.zeros((dim, n), np.float32)
        self.b = np.zeros(n, np.float32)
        self.velocity = {"W": np.zeros_like(self.W), "b": np.zeros_like(self.b)}
        self.opt_steps = 0
        self.loss_calls: List[SampleBatch] = []
        self._initialize_loss_from_dummy_batch()

    # acting
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
        obs = np.asarray(obs_batch, np.float32)
        logits = obs @ self.W + self.b
        probs = softmax(logits)
        explore = self.config["explore"] if explore is None else explore
        if explore:
            actions = np.array([self.rng.choice(len(p), p=p) for p in probs], np.int64)
        else:
            actions = probs.argmax(-1).astype(np.int64)
        return (
            actions,
            [],
            {
                SampleBatch.ACTION_PROB: probs[np.arange(len(actions)), actions],
                SampleBatch.ACTION_DIST_INPUTS: logits,
            },
        )

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        rewards = np.asarray(sample_batch[SampleBatch.REWARDS], np.float32)
        sample_batch[SampleBatch.DONES]  # read, as episode-aware postprocessing would
        sample_batch[SampleBatch.ACTION_PROB]  # read for diagnostics only
        gamma = self.config["gamma"]
        returns = np.zeros_like(rewards)
        running = 0.0
        for t in range(len(rewards) - 1, -1, -1):
            running = rewards[t] + gamma * running
            returns[t] = running
        sample_batch["advantages"] = returns
        return sample_batch

    # learning
    def loss(self, model, dist_class, train_batch):
        self.loss_calls.append(train_batch)
        obs = np.asarray(train_batch[SampleBatch.OBS], np.float32)
        actions = np.asarray(train_batch[SampleBatch.ACTIONS]).astype(np.int64)
        adv = np.asarray(train_batch["advantages"], np.float32)
        probs = softmax(obs @ self.W + self.b)
        logp = np.log(probs[np.arange(len(actions)), actions] + 1e-12)
        return float(-(adv * logp).mean())

    def compute_gradients(self, postprocessed_batch):
        obs = np.asarray(postprocessed_batch[SampleBatch.OBS], np.float32)
        actions = np.asarray(postprocessed_batch[SampleBatch.ACTIONS]).astype(np.int64)
        adv = np.asarray(postprocessed_batch["advantages"], np.float32)
        probs = softmax(obs @ self.W + self.b)
        onehot = np.eye(self.action_space.n, dtype=np.float32)[actions]
        g_logits = (probs - onehot) * adv[:, None] / len(actions)  # d(-mean(adv*logp))/dlogits
        grads = [obs.T @ g_logits, g_logits.sum(0)]
        return grads, {"loss": self.loss(None, None, postprocessed_batch)}

    def apply_gradients(self, gradients):
        lr, mom = self.config["lr"], 0.9
        for name, g in zip(("W", "b"), gradients):
            self.velocity[name] = mom * self.velocity[name] + g
            setattr(self, name, getattr(self, name) - lr * self.velocity[name])
        self.opt_steps += 1

    # state
    def get_weights(self) -> Dict[str, np.ndarray]:
        return {"W": self.W.copy(), "b": self.b.copy()}

    def set_weights(self, weights) -> None:
        self.W = np.array(weights["W"], np.float32)
        self.b = np.array(weights["b"], np.float32)

    def get_state(self):
        state = super().get_state()
        # Laid out like a torch optimizer state_dict (int keys, tuples, scalars).
        state["_optimizer_variables"] = [
            {
                "state": {
                    0: {"momentum_buffer": self.velocity["W"].copy(), "step": np.int64(self.opt_steps)},
                    1: {"momentum_buffer": self.velocity["b"].copy(), "step": np.int64(self.opt_steps)},
                },
                "param_groups": [
                    {
                        "lr": self.config["lr"],
                        "betas": (0.9, 0.999),
                        "params": [0, 1],
                        "nesterov": False,
                        "weight_decay": None,
                    }
                ],
            }
        ]
        state["_exploration_state"] = {"temperature": np.float32(self.temperature), "seed": self.seed}
        return state

    def set_state(self, state) -> None:
        opt = state["_optimizer_variables"][0]["state"]
        self.velocity = {"W": np.array(opt[0]["momentum_buffer"]), "b": np.array(opt[1]["momentum_buffer"])}
        self.opt_steps = int(opt[0]["step"])
        self.temperature = float(state["_exploration_state"]["temperature"])
        super().set_state(state)


class StructuredActionPolicy(Policy):
    """Returns batches of random actions of any (nested) action space.

    Records the batched inputs it was called with, and echoes an RNN state
    (state_out = state_in + 1) and an extra output per row.
    """

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.calls: List[dict] = []
        self.action_space.seed(0)

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
        self.calls.append(
            dict(
                obs=obs_batch,
                state=state_batches,
                prev_action=prev_action_batch,
                prev_reward=prev_reward_batch,
                info=info_batch,
                episodes=episodes,
                explore=explore,
                timestep=timestep,
            )
        )
        batch_size = len(tree.flatten(obs_batch)[0])
        samples = [self.action_space.sample() for _ in range(batch_size)]
        actions = tree.map_structure(lambda *xs: np.stack(xs), *samples)
        state_out = [np.asarray(s) + 1 for s in (state_batches or [])]
        return actions, state_out, {"row_id": np.arange(batch_size, dtype=np.int64)}

    def get_weights(self):
        return {}

    def set_weights(self, weights):
        pass


def bandit_batch(policy: LinearSoftmaxPolicy, n: int, rng: np.random.Generator) -> SampleBatch:
    """n one-step episodes of a 2-armed bandit: arm 1 pays 1, arm 0 pays 0."""
    obs = np.ones((n, policy.observation_space.shape[0]), np.float32)
    actions, _, _ = policy.compute_actions(obs, explore=True)
    rewards = (actions == 1).astype(np.float32)
    batch = SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: rewards,
            SampleBatch.DONES: np.ones(n, bool),
        }
    )
    # One-step episodes: the return is the reward; centre it as a baseline.
    batch["advantages"] = rewards - rewards.mean()
    return batch


def make_linear_policy(config=None, obs_dim: int = 3, n_actions: int = 2) -> LinearSoftmaxPolicy:
    obs_space = gym.spaces.Box(-1.0, 1.0, shape=(obs_dim,), dtype=np.float32)
    return LinearSoftmaxPolicy(obs_space, gym.spaces.Discrete(n_actions), dict(config or {}))
