"""Tiny policy-gradient TorchPolicies and batches shared by the TorchPolicy test files."""

import gymnasium as gym
import numpy as np
import torch

from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.torch_policy import TorchPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)


class PG(TorchPolicy):
    """Vanilla policy gradient with a mean loss; records the rows each tower saw."""

    def loss(self, model, dist_class, train_batch):
        logits, _ = model(train_batch)
        logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
        model.tower_stats["obs_seen"] = train_batch[SampleBatch.OBS]
        model.tower_stats["pg_loss"] = -(logp * train_batch[SampleBatch.REWARDS]).mean()
        return model.tower_stats["pg_loss"]


class SGDPG(PG):
    def optimizer(self):
        return torch.optim.SGD(self.model.parameters(), lr=self.config["lr"])


def pg_batch(n, seed=0):
    r = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 4)).astype(np.float32),
            SampleBatch.ACTIONS: r.integers(0, 3, n),
            SampleBatch.REWARDS: r.normal(size=n).astype(np.float32),
        }
    )


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))
