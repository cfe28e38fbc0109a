"""Learner stats are snapshots: a stat that is a live parameter (SAC's ``log_alpha_value``)
comes back as a copy, so the stats of one step do not change when the next step runs
(RLlib 1.11 returns a numpy view of the CPU parameter on torch; see docs/porting.md).

Client code: 1.x-style policies whose ``stats_fn`` returns the parameter itself.
"""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.policy.sample_batch import SampleBatch

pytestmark = pytest.mark.tf

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
CONFIG = {"model": {"fcnet_hiddens": [4]}, "lr": 0.05, "seed": 0}


def logits_bias(policy):
    """The logits layer's bias: the one (2,)-shaped parameter (trained by the PG loss)."""
    if policy.framework == "torch":
        found = [p for p in policy.model.parameters() if tuple(p.shape) == (2,)]
    else:
        found = [v for v in policy.model.variables() if tuple(v.shape) == (2,)]
    assert len(found) == 1
    return found[0]


def stats_fn(policy, train_batch):
    return {"logits_bias": logits_bias(policy)}  # the live parameter, as SAC returns log_alpha


def torch_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    return -(
        dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS]) * train_batch[SampleBatch.REWARDS]
    ).mean()


def tf_loss(policy, model, dist_class, train_batch):
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    logits, _ = model(train_batch)
    return -tf.reduce_mean(
        dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS]) * train_batch[SampleBatch.REWARDS]
    )


def make(framework):
    if framework == "torch":
        from rlpolicy.policy.policy_template import build_policy_class

        cls = build_policy_class("StatsTorch", "torch", loss_fn=torch_loss, stats_fn=stats_fn)
    else:
        from rlpolicy.policy.tf_policy_template import build_tf_policy

        cls = build_tf_policy("StatsTF", loss_fn=tf_loss, stats_fn=stats_fn)
        cls = cls.as_eager() if framework.startswith("tf2") else cls
    traced = framework == "tf2-traced"
    return cls(OBS, ACT, dict(CONFIG, framework="tf2" if traced else framework, eager_tracing=traced))


def batch(n=8):
    r = np.random.default_rng(0)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: np.arange(n) % 2,
            SampleBatch.REWARDS: np.linspace(-1, 2, n).astype(np.float32),
        }
    )


def current_bias(policy):
    var = logits_bias(policy)
    if policy.framework == "torch":
        return var.detach().cpu().numpy().copy()
    if policy.framework == "tf":
        return policy.get_session().run(var)
    return var.numpy().copy()


@pytest.mark.tf_eager_code
@pytest.mark.parametrize("framework", ["torch", "tf", "tf2", "tf2-traced"])
def test_stats_of_step_one_unchanged_by_step_two(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    policy = make(framework)
    start = current_bias(policy)
    s1 = policy.learn_on_batch(batch())["learner_stats"]["logits_bias"]
    kept = np.array(s1, copy=True)
    after_one = current_bias(policy)
    s2 = policy.learn_on_batch(batch())["learner_stats"]["logits_bias"]
    after_two = current_bias(policy)
    assert not np.allclose(after_one, after_two, atol=1e-7)  # the parameter did move
    np.testing.assert_array_equal(s1, kept)  # ... the step-1 stats did not
    assert isinstance(s1, np.ndarray) and not np.shares_memory(s1, after_two)
    if framework != "tf":  # torch/eager compute stats before the update of their step
        np.testing.assert_allclose(s1, start, rtol=0, atol=1e-7)
        np.testing.assert_allclose(s2, after_one, rtol=0, atol=1e-7)
