"""Policies whose action distribution is ``Deterministic`` (``TorchDeterministic``)
construct, act and learn on torch, graph tf and tf2 (traced and untraced).

The distribution comes either from an ``action_distribution_fn`` (as DDPG-style 1.x
client code returns it) or from the model config's ``custom_action_dist``. The model is
a linear head (``fcnet_hiddens: []``), so its actions are ``obs @ W + b`` in numpy from
the policy's own weights; the loss is the squared error to fixed target actions, whose
numpy value must fall while learning. (The loss reads the model output, not
``dist_class``: as in RLlib 1.11, a torch policy with an ``action_distribution_fn`` passes
its loss the catalog's class, a DiagGaussian here.)

A graph policy used to fail at construction: RLlib 1.11's TF ``Deterministic.logp`` is
shaped like the inputs ([B, k]) while the exploration's greedy branch gives [B], and the
``tf.cond`` over both has no static shape to build the ``action_logp`` placeholder from.
"""

import gymnasium as gym
import numpy as np
import pytest
from _linear_head import linear_head

from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.policy.sample_batch import SampleBatch

pytestmark = pytest.mark.tf

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_SPACE = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
VARIANTS = {  # id: (framework, extra config)
    "torch": ("torch", {}),
    "tf": ("tf", {}),
    "tf2": ("tf2", {"eager_tracing": False}),
    "tf2-traced": ("tf2", {"eager_tracing": True}),
}
CALLS = []


def _config(variant, **extra):
    framework, fw_config = VARIANTS[variant]
    config = {
        "framework": framework,
        "model": {"fcnet_hiddens": []},
        "lr": 0.1,
        "seed": 0,
        "exploration_config": {"type": "StochasticSampling"},
    }
    config.update(fw_config)
    config.update(extra)
    return config


def _deterministic_class(framework):
    if framework == "torch":
        from rlpolicy.models.torch.torch_action_dist import TorchDeterministic

        return TorchDeterministic
    from rlpolicy.models.tf.tf_action_dist import Deterministic

    return Deterministic


ModelCatalog.register_custom_action_dist("test_det_torch", _deterministic_class("torch"))
ModelCatalog.register_custom_action_dist("test_det_tf", _deterministic_class("tf"))


def make_model(policy, obs_space, action_space, config):
    return ModelCatalog.get_model_v2(
        obs_space, action_space, 2, config["model"], framework=config["framework"], name="det_head"
    )


def deterministic_distribution_fn(policy, model, input_dict, **kwargs):
    CALLS.append(policy.framework)
    out, state = model(input_dict)
    return out, _deterministic_class(policy.framework), state


def torch_mse_loss(policy, model, dist_class, train_batch):
    import torch

    out, _ = model(train_batch)
    policy.mse = torch.mean((out - train_batch[SampleBatch.ACTIONS]) ** 2)
    return policy.mse


def tf_mse_loss(policy, model, dist_class, train_batch):
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    out, _ = model(train_batch)
    policy.mse = tf.reduce_mean((out - train_batch[SampleBatch.ACTIONS]) ** 2)
    return policy.mse


def mse_stats(policy, train_batch):
    return {"mse": policy.mse}


def make_policy(variant, *, with_fn=True):
    framework, _ = VARIANTS[variant]
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    fn = {"action_distribution_fn": deterministic_distribution_fn} if with_fn else {}
    if framework == "torch":
        from rlpolicy.policy.policy_template import build_policy_class

        cls = build_policy_class(
            "DetTorchPolicy", "torch", loss_fn=torch_mse_loss, stats_fn=mse_stats, make_model=make_model, **fn
        )
    else:
        from rlpolicy.policy.tf_policy_template import build_tf_policy

        cls = build_tf_policy(
            name="DetTFPolicy", loss_fn=tf_mse_loss, stats_fn=mse_stats, make_model=make_model, **fn
        )
        cls = cls.as_eager() if framework == "tf2" else cls
    dist_name = "test_det_torch" if framework == "torch" else "test_det_tf"
    extra = {} if with_fn else {"model": {"fcnet_hiddens": [], "custom_action_dist": dist_name}}
    return cls(OBS_SPACE, ACT_SPACE, _config(variant, **extra))


# ------------------------------------------------------------------ numpy reference
def numpy_actions(policy, obs):
    kernel, bias = linear_head(policy)
    return obs @ kernel + bias


def obs_rows(n=8, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3)).astype(np.float32)


def train_batch(n=16):
    obs = obs_rows(n, seed=1)
    targets = np.stack([obs[:, 0] - 0.5 * obs[:, 1] + 0.3, 0.8 * obs[:, 2] - 0.2], axis=1)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: targets.astype(np.float32),
            SampleBatch.REWARDS: np.zeros(n, np.float32),
            SampleBatch.DONES: np.zeros(n, bool),
        }
    )


def numpy_mse(policy, batch):
    return float(np.mean((numpy_actions(policy, batch[SampleBatch.OBS]) - batch[SampleBatch.ACTIONS]) ** 2))


def check_acting(policy, obs):
    want = numpy_actions(policy, obs)
    for explore in (False, True):  # a point mass: sampling gives the same actions
        actions, _, extra = policy.compute_actions(obs, explore=explore)
        np.testing.assert_allclose(np.asarray(actions), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(extra[SampleBatch.ACTION_DIST_INPUTS], want, rtol=1e-5, atol=1e-5)
        # One logp per row, 0 either way (log of a point mass at the sample).
        np.testing.assert_array_equal(extra[SampleBatch.ACTION_LOGP], np.zeros(len(obs), np.float32))
        np.testing.assert_array_equal(extra[SampleBatch.ACTION_PROB], np.ones(len(obs), np.float32))


def check_learning(policy):
    batch = train_batch()
    before = numpy_mse(policy, batch)
    for _ in range(30):
        stats = policy.learn_on_batch(batch.copy())
    after = numpy_mse(policy, batch)
    assert after < 0.3 * before, (before, after)
    # The reported loss is the one before the last step: between the two.
    assert after - 1e-5 <= float(stats["learner_stats"]["mse"]) <= before + 1e-5
    # After learning the actions are far from 0: the comparison is not of near-zeros.
    assert np.abs(numpy_actions(policy, obs_rows())).max() > 0.2


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_action_distribution_fn_deterministic_constructs_acts_and_learns(variant):
    CALLS.clear()
    policy = make_policy(variant)
    assert CALLS, "action_distribution_fn was never called"
    obs = obs_rows()
    check_acting(policy, obs)
    check_learning(policy)
    check_acting(policy, obs)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_custom_action_dist_deterministic_constructs_acts_and_learns(variant):
    policy = make_policy(variant, with_fn=False)
    assert policy.dist_class is _deterministic_class(VARIANTS[variant][0])
    check_learning(policy)
    check_acting(policy, obs_rows())


def test_graph_policy_extra_fetch_without_static_shape():
    """A graph policy's extra action fetch whose static shape is unknown gets its
    column and placeholder from the measured row shape (here [3])."""
    pytest.importorskip("tensorflow")
    from rlpolicy.policy.tf_policy_template import build_tf_policy
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf()

    def extra_out(policy):
        obs = policy._input_dict[SampleBatch.OBS]
        return {"obs_copy": tf1.placeholder_with_default(obs * 2.0, shape=None)}

    def loss(policy, model, dist_class, train_batch):
        out, _ = model(train_batch)
        # Reads the column: its placeholder is fed from the train batch.
        policy.mse = tf.reduce_mean(out**2) + tf.reduce_mean(train_batch["obs_copy"] ** 2)
        return policy.mse

    cls = build_tf_policy(
        name="UnknownShapeFetch",
        loss_fn=loss,
        stats_fn=mse_stats,
        make_model=make_model,
        action_distribution_fn=deterministic_distribution_fn,
        extra_action_out_fn=extra_out,
    )
    policy = cls(OBS_SPACE, ACT_SPACE, _config("tf"))
    assert policy.view_requirements["obs_copy"].space.shape == (3,)
    obs = obs_rows()
    _, _, extra = policy.compute_actions(obs, explore=False)
    np.testing.assert_allclose(extra["obs_copy"], 2.0 * obs, atol=1e-6)
    batch = train_batch()
    batch["obs_copy"] = np.full((len(batch), 3), 0.5, np.float32)
    want = float(np.mean(numpy_actions(policy, batch[SampleBatch.OBS]) ** 2)) + 0.25
    stats = policy.learn_on_batch(batch)
    assert abs(float(stats["learner_stats"]["mse"]) - want) < 1e-5
