"""Tiny TF graph-mode policies shared by the TFPolicy / DynamicTFPolicy / tower tests.

``PGGraphPolicy`` is a DynamicTFPolicy with a policy-gradient loss
``-mean(logp(a) * r)`` (a mean over rows, so towers == single device holds).
With ``fcnet_hiddens=[]`` the logits are linear in the observation, so one
SGD step can be checked against the numpy formula in ``sgd_pg_step``.
"""

import numpy as np

from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.framework import try_import_tf

tf1, tf, _ = try_import_tf()

import gymnasium as gym  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    dist = dist_class(logits, model)
    return -tf.reduce_mean(dist.logp(train_batch[SampleBatch.ACTIONS]) * train_batch[SampleBatch.REWARDS])


def pg_stats(policy, train_batch):
    return {"mean_reward": tf.reduce_mean(train_batch[SampleBatch.REWARDS])}


class PGGraphPolicy(DynamicTFPolicy):
    """PG with the Adam default optimizer (a build_tf_policy-style constructor)."""

    def __init__(self, obs_space, action_space, config, existing_inputs=None, existing_model=None):
        DynamicTFPolicy.__init__(
            self,
            obs_space,
            action_space,
            config,
            pg_loss,
            stats_fn=pg_stats,
            existing_inputs=existing_inputs,
            existing_model=existing_model,
        )


class SGDPGGraphPolicy(PGGraphPolicy):
    """PG with plain gradient descent at config["lr"] (numpy-checkable steps)."""

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(self.config["lr"])


def config(**overrides):
    base = {"model": {"fcnet_hiddens": [8]}, "lr": 0.05, "train_batch_size": 8, "seed": 0}
    base.update(overrides)
    return base


def pg_batch(n, seed=0):
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: rng.integers(0, 2, n),
            SampleBatch.REWARDS: rng.normal(size=n).astype(np.float32),
        }
    )


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def sgd_pg_step(w, b, batch, lr, clip=None):
    """One SGD step of -mean(logp(a) * r) for linear logits obs @ w + b (numpy)."""
    obs, act, rew = batch["obs"], batch["actions"], batch["rewards"]
    logits = obs @ w + b
    probs = np.exp(log_softmax(logits))
    onehot = np.eye(w.shape[1])[act]
    dlogits = -(rew[:, None] / len(obs)) * (onehot - probs)
    gw, gb = obs.T @ dlogits, dlogits.sum(axis=0)
    if clip:
        norm = np.sqrt((gw**2).sum() + (gb**2).sum())
        scale = clip / max(norm, clip)
        gw, gb = gw * scale, gb * scale
    return w - lr * gw, b - lr * gb


def assert_weights_close(a, b, rtol=1e-5, atol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)
