"""gymnasium's ``terminateds`` / ``truncateds`` are default view requirements next to
``dones``, so RLlib 2.x-style losses that read them (DQN, SAC: no bootstrap after a real
termination) work on the dummy batch at construction and in learn_on_batch (torch, tf, tf2).
"""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.policy.sample_batch import SampleBatch

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
CONFIG = {"model": {"fcnet_hiddens": [4]}, "seed": 0}
SEEN = []


def torch_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    alive = 1.0 - train_batch[SampleBatch.TERMINATEDS].float()
    SEEN.append((len(train_batch), set(train_batch.keys())))
    policy.masked_loss = -(
        dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
        * train_batch[SampleBatch.REWARDS]
        * alive
    ).mean()
    return policy.masked_loss


def tf_loss(policy, model, dist_class, train_batch):
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    logits, _ = model(train_batch)
    alive = 1.0 - tf.cast(train_batch[SampleBatch.TERMINATEDS], tf.float32)
    SEEN.append((len(train_batch), set(train_batch.keys())))
    policy.masked_loss = -tf.reduce_mean(
        dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
        * train_batch[SampleBatch.REWARDS]
        * alive
    )
    return policy.masked_loss


def stats(policy, train_batch):
    return {"loss": policy.masked_loss}


def make(framework):
    if framework == "torch":
        from rlpolicy.policy.policy_template import build_policy_class

        cls = build_policy_class("TermTorch", "torch", loss_fn=torch_loss, stats_fn=stats)
    else:
        from rlpolicy.policy.tf_policy_template import build_tf_policy

        cls = build_tf_policy("TermTF", loss_fn=tf_loss, stats_fn=stats)
        cls = cls.as_eager() if framework == "tf2" else cls
    return cls(OBS, ACT, dict(CONFIG, framework=framework))


def batch(terminated, n=6):
    r = np.random.default_rng(2)
    term = np.full(n, terminated, bool)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: np.arange(n) % 2,
            SampleBatch.REWARDS: np.ones(n, np.float32),
            SampleBatch.TERMINATEDS: term,
            SampleBatch.TRUNCATEDS: ~term,
        }
    )


@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
def test_loss_reading_terminateds_builds_and_learns(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    SEEN.clear()
    policy = make(framework)
    # The dummy batch had the gymnasium columns next to dones.
    assert SEEN and {"terminateds", "truncateds", "dones"} <= SEEN[0][1]
    vrs = policy.view_requirements
    assert vrs[SampleBatch.TERMINATEDS].used_for_training
    assert SampleBatch.TRUNCATEDS in vrs and SampleBatch.DONES in vrs
    assert not vrs[SampleBatch.TERMINATEDS].used_for_compute_actions
    # All rows terminated: the mask zeroes the loss; none terminated: it does not.
    dead = policy.learn_on_batch(batch(True))["learner_stats"]["loss"]
    alive = policy.learn_on_batch(batch(False))["learner_stats"]["loss"]
    assert float(dead) == 0.0 and abs(float(alive)) > 1e-4
