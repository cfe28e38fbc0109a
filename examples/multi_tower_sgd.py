"""Buffered multi-tower minibatch SGD on two fake GPUs.

With ``num_gpus=2, _fake_gpus=True`` a ``TorchPolicy`` keeps two model
copies ("towers") on the CPU and runs the whole multi-device code path:
``load_batch_into_buffer`` splits the train batch into one slice per tower;
each ``learn_on_loaded_batch(offset)`` takes ``sgd_minibatch_size / 2`` rows
of every slice, computes the tower gradients in parallel threads, averages
them and steps the optimizer once. This is the PPO-style "load once, many
minibatch epochs" loop.

The example then checks the towers' promise: for a loss that is a mean, one
tower step equals a single-device ``learn_on_batch`` on the same rows.

Run:  python examples/multi_tower_sgd.py [--epochs N]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does).
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym
import numpy as np
import torch

from rlpolicy.policy.sample_batch import SampleBatch, concat_samples
from rlpolicy.policy.torch_policy import TorchPolicy

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)
CONFIG = {"lr": 0.01, "train_batch_size": 256, "sgd_minibatch_size": 64, "model": {"fcnet_hiddens": [32]}}


class WeightedNLLPolicy(TorchPolicy):
    """Loss: mean over rows of ``-reward * logp(action)`` (a mean, so towers agree)."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self._initialize_loss_from_dummy_batch()

    def loss(self, model, dist_class, train_batch):
        logits, _ = model(train_batch)
        logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
        loss = -torch.mean(logp * train_batch[SampleBatch.REWARDS])
        model.tower_stats["loss"] = loss
        return loss


def make_policy(**devices):
    torch.manual_seed(0)  # same initial weights for every policy built here
    return WeightedNLLPolicy(OBS_SPACE, ACTION_SPACE, {**CONFIG, **devices})


def make_batch(n, seed=0):
    """A synthetic train batch: the better action is the sign of obs[0]."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    actions = rng.integers(0, 2, n)
    rewards = np.where(actions == (obs[:, 0] > 0), 1.0, 0.0).astype(np.float32)
    return SampleBatch({SampleBatch.OBS: obs, SampleBatch.ACTIONS: actions, SampleBatch.REWARDS: rewards})


def accuracy(policy, batch):
    actions, _, _ = policy.compute_actions(batch[SampleBatch.OBS], explore=False)
    return float(np.mean(actions == (batch[SampleBatch.OBS][:, 0] > 0)))


def train(policy, batch, epochs):
    per_device = policy.load_batch_into_buffer(batch, buffer_index=0)
    print(
        f"towers={len(policy.model_gpu_towers)} devices={[str(d) for d in policy.devices]} "
        f"loaded_per_device={per_device}"
    )
    step = policy.config["sgd_minibatch_size"] // len(policy.devices)
    for epoch in range(epochs):
        losses = []
        for offset in range(0, per_device, step):
            fetches = policy.learn_on_loaded_batch(offset=offset, buffer_index=0)
            losses.append(np.mean([float(t.detach()) for t in policy.get_tower_stats("loss")]))
            assert set(fetches) >= {"tower_0", "tower_1"}
        print(
            f"epoch {epoch}: steps={len(losses)} mean_loss={np.mean(losses):.4f} "
            f"accuracy={accuracy(policy, batch):.3f}"
        )


def check_equivalence():
    """One 2-tower step vs. one single-device step on the same 64 rows."""
    batch = make_batch(CONFIG["train_batch_size"], seed=1)
    towers, single = make_policy(num_gpus=2, _fake_gpus=True), make_policy(num_gpus=0)
    per_device = towers.load_batch_into_buffer(batch.copy())
    towers.learn_on_loaded_batch(offset=0)
    half = CONFIG["sgd_minibatch_size"] // 2
    # Tower i trained on rows [0, half) of slice i, i.e. of batch[i*per_device:].
    same_rows = concat_samples([batch[0:half], batch[per_device : per_device + half]])
    single.learn_on_batch(same_rows)
    diff = max(np.abs(towers.get_weights()[k] - single.get_weights()[k]).max() for k in single.get_weights())
    print(f"max |w_towers - w_single| after one step: {diff:.2e}")
    return diff


def main():
    quick = os.environ.get("RLPOLICY_EXAMPLE_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2 if quick else 10)
    args = parser.parse_args()

    policy = make_policy(num_gpus=2, _fake_gpus=True)
    batch = make_batch(CONFIG["train_batch_size"])
    print(f"initial accuracy={accuracy(policy, batch):.3f}")
    train(policy, batch, args.epochs)
    diff = check_equivalence()
    print("towers match single device:", diff < 1e-5)


if __name__ == "__main__":
    main()
