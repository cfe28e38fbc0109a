"""RLlib 1.x policies whose ``action_distribution_fn`` has the older signature
(``fn(policy, model, obs_batch, *, explore, is_training, **kwargs)``: SimpleQ, DDPG/TD3,
SAC tf, CQL) construct, act and learn on torch, tf and tf2, as in RLlib 1.11.

The policy below is written as 1.x client code: a SimpleQ-style Q-learning policy
built with ``build_policy_class`` (torch) and ``build_tf_policy`` (tf, and ``as_eager()``
for tf2), imported from RLlib's 1.11 paths.
"""

import gymnasium as gym
import numpy as np
import pytest
from _linear_head import linear_head

from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.policy.sample_batch import SampleBatch

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_SPACE = gym.spaces.Discrete(2)
CONFIG = {
    "model": {"fcnet_hiddens": []},
    "lr": 0.05,
    "seed": 0,
    "exploration_config": {"type": "EpsilonGreedy"},
}
CALLS = []


# ------------------------------------------------------------------ a 1.x SimpleQ-style module
def build_q_model(policy, obs_space, action_space, config):
    return ModelCatalog.get_model_v2(
        obs_space, action_space, action_space.n, config["model"], framework=config["framework"], name="q_func"
    )


def get_distribution_inputs_and_class(
    policy, q_model, obs_batch, *, explore=True, is_training=True, **kwargs
):
    CALLS.append({"explore": explore, "kwargs": sorted(kwargs)})
    q_vals, _ = q_model({"obs": obs_batch}, [], None)
    if policy.framework == "torch":
        from rlpolicy.models.torch.torch_action_dist import TorchCategorical

        return q_vals, TorchCategorical, []
    from rlpolicy.models.tf.tf_action_dist import Categorical

    return q_vals, Categorical, []


def torch_q_loss(policy, model, dist_class, train_batch):
    import torch

    q, _ = model(train_batch)
    one_hot = torch.nn.functional.one_hot(train_batch[SampleBatch.ACTIONS].long(), 2).float()
    policy.td_loss = torch.mean(((q * one_hot).sum(1) - train_batch[SampleBatch.REWARDS]) ** 2)
    return policy.td_loss


def tf_q_loss(policy, model, dist_class, train_batch):
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()

    q, _ = model(train_batch)
    one_hot = tf.one_hot(tf.cast(train_batch[SampleBatch.ACTIONS], tf.int32), 2)
    policy.td_loss = tf.reduce_mean((tf.reduce_sum(q * one_hot, 1) - train_batch[SampleBatch.REWARDS]) ** 2)
    return policy.td_loss


def q_stats(policy, train_batch):
    return {"td_loss": policy.td_loss}


def sgd_optimizer_torch(policy, config):
    import torch

    return torch.optim.SGD(policy.model.parameters(), lr=config["lr"])


def make_policy_class(framework, action_distribution_fn=get_distribution_inputs_and_class):
    if framework == "torch":
        from rlpolicy.policy.policy_template import build_policy_class

        return build_policy_class(
            "SimpleQTorchPolicy",
            "torch",
            loss_fn=torch_q_loss,
            stats_fn=q_stats,
            make_model=build_q_model,
            action_distribution_fn=action_distribution_fn,
            optimizer_fn=sgd_optimizer_torch,
        )
    from rlpolicy.policy.tf_policy_template import build_tf_policy

    cls = build_tf_policy(
        name="SimpleQTFPolicy",
        loss_fn=tf_q_loss,
        stats_fn=q_stats,
        make_model=build_q_model,
        action_distribution_fn=action_distribution_fn,
    )
    return cls.as_eager() if framework == "tf2" else cls


# ------------------------------------------------------------------ numpy reference
def numpy_q(policy, obs):
    kernel, bias = linear_head(policy)
    return obs @ kernel + bias


def obs_rows(n=6, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3)).astype(np.float32)


def train_batch(n=16):
    obs = obs_rows(n, seed=1)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: np.arange(n) % 2,
            SampleBatch.REWARDS: (obs[:, 0] + 0.5).astype(np.float32),
            SampleBatch.DONES: np.zeros(n, bool),
        }
    )


def numpy_td_loss(policy, batch):
    q = numpy_q(policy, batch[SampleBatch.OBS])
    chosen = q[np.arange(len(q)), batch[SampleBatch.ACTIONS]]
    return float(np.mean((chosen - batch[SampleBatch.REWARDS]) ** 2))


# ------------------------------------------------------------------ tests
FRAMEWORKS = ["torch", "tf", "tf2"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_old_signature_constructs_and_acts(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    CALLS.clear()
    policy = make_policy_class(framework)(OBS_SPACE, ACT_SPACE, dict(CONFIG, framework=framework))
    assert CALLS, "action_distribution_fn was never called"
    obs = obs_rows()
    actions, _, extra = policy.compute_actions(obs, explore=False)
    want = numpy_q(policy, obs)
    np.testing.assert_allclose(extra[SampleBatch.ACTION_DIST_INPUTS], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(actions), want.argmax(1))
    # Called the old way: obs positionally; the **kwargs get the other keywords.
    assert {"seq_lens", "state_batches"} <= set(CALLS[-1]["kwargs"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_old_signature_learns(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    policy = make_policy_class(framework)(OBS_SPACE, ACT_SPACE, dict(CONFIG, framework=framework))
    batch = train_batch()
    before = numpy_td_loss(policy, batch)
    for _ in range(25):
        stats = policy.learn_on_batch(batch.copy())
    after = numpy_td_loss(policy, batch)
    assert after < 0.5 * before, (before, after)
    # The reported loss is the one before the last step: between the two.
    assert after - 1e-5 <= float(stats["learner_stats"]["td_loss"]) <= before + 1e-5


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_old_signature_log_likelihoods(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    policy = make_policy_class(framework)(OBS_SPACE, ACT_SPACE, dict(CONFIG, framework=framework))
    obs, actions = obs_rows(), np.array([0, 1, 1, 0, 1, 0])
    q = numpy_q(policy, obs)
    log_softmax = q - np.log(np.exp(q).sum(1, keepdims=True))
    got = np.asarray(policy.compute_log_likelihoods(actions, obs))
    np.testing.assert_allclose(got, log_softmax[np.arange(6), actions], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("style", ["old", "new"])
def test_type_error_raised_inside_the_function_is_not_retried(framework, style):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    calls = []
    # A message RLlib 1.11's retry would mistake for a signature mismatch.
    message = "compute_q_values() missing 1 required positional argument: 'explore'"

    def old_style(policy, model, obs_batch, *, explore=True, is_training=False, **kwargs):
        calls.append("old")
        raise TypeError(message)

    def new_style(policy, model, input_dict, *, explore=True, is_training=False, **kwargs):
        calls.append("new")
        raise TypeError(message)

    cls = make_policy_class(framework, old_style if style == "old" else new_style)
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'explore'"):
        cls(OBS_SPACE, ACT_SPACE, dict(CONFIG, framework=framework))
    assert calls == [style]
