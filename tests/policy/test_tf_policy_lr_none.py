"""Graph TF: ``config["lr"]`` is checked only where the default optimizer is used.

RLlib 1.11's ``TFPolicy.optimizer()`` builds Adam from ``config["lr"]`` without
checking it; a policy that brings its own optimizers (RLlib 2.x SAC-style code
sets ``lr=None``) builds and learns, and only one that uses the default optimizer
fails. Client code here is a 1.x-style ``build_tf_policy`` module.
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_policy_template import build_tf_policy  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()
pytestmark = pytest.mark.tf

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
BATCH = {
    "obs": np.array([[0.5, -0.5, 0.25]] * 4, np.float32),
    "actions": np.array([0, 1, 0, 1]),
    "rewards": np.array([1.0, -1.0, 1.0, -1.0], np.float32),
}


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    return -tf.reduce_mean(dist_class(logits, model).logp(train_batch["actions"]) * train_batch["rewards"])


def make_own_optimizer(policy, obs_space, action_space, config):
    policy.own_optimizer = tf1.train.GradientDescentOptimizer(config["optimization"]["actor_learning_rate"])


def own_gradients(policy, optimizer, loss):
    return policy.own_optimizer.compute_gradients(loss, policy.model.trainable_variables())


def own_apply(policy, optimizer, grads_and_vars):
    return policy.own_optimizer.apply_gradients(grads_and_vars)


OwnOptimizers = build_tf_policy(
    "OwnOptimizers",
    loss_fn=pg_loss,
    before_loss_init=make_own_optimizer,
    compute_gradients_fn=own_gradients,
    apply_gradients_fn=own_apply,
    get_default_config=lambda: {"optimization": {"actor_learning_rate": 3e-4}},
)
DefaultOptimizer = build_tf_policy("DefaultOptimizer", loss_fn=pg_loss)
CONFIG = {
    "framework": "tf",
    "lr": None,
    "model": {"fcnet_hiddens": [4]},
    "optimization": {"actor_learning_rate": 0.1},
}


def test_policy_with_its_own_optimizers_accepts_lr_none():
    policy = OwnOptimizers(OBS, ACT, dict(CONFIG))
    before = policy.get_weights()
    stats = policy.learn_on_batch(SampleBatch(BATCH))
    assert "learner_stats" in stats
    after = policy.get_weights()
    assert any(not np.allclose(before[k], after[k]) for k in before)
    assert all(np.all(np.isfinite(v)) for v in after.values())
    # The unused default optimizer fails only when used, naming the key.
    with pytest.raises(
        ValueError, match=r"default optimizer\(\) cannot be used: config\['lr'\]=None is invalid"
    ):
        policy.optimizer().minimize(tf.constant(0.0))


def test_policy_that_uses_the_default_optimizer_names_lr():
    with pytest.raises(
        ValueError, match=r"DefaultOptimizer: the default optimizer\(\) cannot be used: config\['lr'\]=None"
    ):
        DefaultOptimizer(OBS, ACT, dict(CONFIG))
