"""Discrete action spaces that do not start at 0, and 0-d Box actions (torch, tf, tf2).

Expected values: numpy log-softmax / Gaussian formulas on the distribution
inputs the policy reports, and the invariant that a space shifted by
``start`` learns exactly like the 0-based space given the same weights.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box, Discrete, MultiDiscrete

from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.error import UnsupportedSpaceException

ATOL = 1e-5
OBS = Box(-1.0, 1.0, (3,))
FRAMEWORKS = ["torch", "tf", "tf2"]


def _weight_values(policy):
    """The state's weights in order (a dict's values; eager TF states hold a list)."""
    w = policy.get_state()["weights"]
    return list(w.values()) if isinstance(w, dict) else list(w)


def _make(framework, action_space):
    cfg = {"model": {"fcnet_hiddens": [8]}, "train_batch_size": 6, "sgd_minibatch_size": 6, "num_sgd_iter": 1}
    if framework == "torch":
        from rlpolicy.agents.ppo import PPOTorchPolicy

        return PPOTorchPolicy(OBS, action_space, cfg)
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

    if framework == "tf":
        return PPOTFPolicy(OBS, action_space, {**cfg, "framework": "tf"})
    return PPOTFPolicy.as_eager()(OBS, action_space, {**cfg, "framework": "tf2"})


def _copy_weights(src, dst):
    w = src.get_weights()
    dst.set_weights(dict(zip(dst.get_weights(), w.values())) if isinstance(w, dict) else w)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _obs(n, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3)).astype(np.float32)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_discrete_start_actions_and_logp(framework):
    space = Discrete(4, start=-2)
    policy = _make(framework, space)
    obs = _obs(6)
    actions, _, fetch = policy.compute_actions(obs, explore=False)
    logits = np.asarray(fetch["action_dist_inputs"])
    np.testing.assert_array_equal(actions, logits.argmax(-1) - 2)
    sampled, _, fetch = policy.compute_actions(obs, explore=True)
    assert all(space.contains(np.int64(a)) for a in sampled)
    want = _log_softmax(np.asarray(fetch["action_dist_inputs"], np.float64))[np.arange(6), sampled + 2]
    np.testing.assert_allclose(fetch["action_logp"], want, atol=ATOL)
    got = np.asarray(policy.compute_log_likelihoods(sampled, obs))
    np.testing.assert_allclose(got, want, atol=ATOL)
    single, _, _ = policy.compute_single_action(obs[0], explore=False)
    assert int(single) == int(actions[0])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_multidiscrete_and_int_box_offsets(framework):
    md = MultiDiscrete([2, 3], start=[1, -3])
    policy = _make(framework, md)
    obs = _obs(5, seed=1)
    actions, _, fetch = policy.compute_actions(obs, explore=False)
    logits = np.asarray(fetch["action_dist_inputs"])
    np.testing.assert_array_equal(actions[:, 0], logits[:, :2].argmax(-1) + 1)
    np.testing.assert_array_equal(actions[:, 1], logits[:, 2:].argmax(-1) - 3)
    sampled, _, fetch = policy.compute_actions(obs, explore=True)
    assert all(md.contains(np.asarray(a, np.int64)) for a in sampled)
    d = np.asarray(fetch["action_dist_inputs"], np.float64)
    want = (
        _log_softmax(d[:, :2])[np.arange(5), sampled[:, 0] - 1]
        + _log_softmax(d[:, 2:])[np.arange(5), sampled[:, 1] + 3]
    )
    np.testing.assert_allclose(np.asarray(policy.compute_log_likelihoods(sampled, obs)), want, atol=ATOL)
    box = Box(-2, 2, (3,), dtype=np.int64)
    policy = _make(framework, box)
    actions, _, fetch = policy.compute_actions(obs, explore=True)
    assert actions.shape == (5, 3) and all(box.contains(np.asarray(a, np.int64)) for a in actions)
    d = np.asarray(fetch["action_dist_inputs"], np.float64).reshape(5, 3, 5)
    want = _log_softmax(d)[np.arange(5)[:, None], np.arange(3), actions + 2].sum(-1)
    np.testing.assert_allclose(fetch["action_logp"], want, atol=ATOL)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_shifted_space_learns_like_the_zero_based_one(framework):
    shifted, plain = _make(framework, Discrete(3, start=10)), _make(framework, Discrete(3))
    _copy_weights(shifted, plain)
    obs = _obs(6, seed=2)
    actions, _, fetch = plain.compute_actions(obs, explore=True)
    batch = {
        "obs": obs,
        "new_obs": obs,
        "rewards": np.ones(6, np.float32),
        "dones": np.zeros(6, bool),
        "action_logp": fetch["action_logp"],
        "action_dist_inputs": fetch["action_dist_inputs"],
        "vf_preds": fetch["vf_preds"],
        "advantages": np.linspace(-1, 1, 6).astype(np.float32),
        "value_targets": np.ones(6, np.float32),
    }
    s1 = shifted.learn_on_batch(SampleBatch({**batch, "actions": actions + 10}))
    s2 = plain.learn_on_batch(SampleBatch({**batch, "actions": actions}))
    np.testing.assert_allclose(
        s1["learner_stats"]["total_loss"], s2["learner_stats"]["total_loss"], rtol=1e-5, atol=1e-6
    )
    for a, b in zip(_weight_values(shifted), _weight_values(plain)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_zero_dim_box_actions_are_scalars(framework):
    space = Box(-1.0, 3.0, ())
    policy = _make(framework, space)
    obs = _obs(4, seed=3)
    actions, _, fetch = policy.compute_actions(obs, explore=False)
    d = np.asarray(fetch["action_dist_inputs"], np.float64)
    assert actions.shape == (4,) and d.shape == (4, 2)
    np.testing.assert_allclose(actions, d[:, 0], atol=ATOL)  # the mean
    single, _, _ = policy.compute_single_action(obs[0], explore=False)
    assert np.shape(single) == ()
    mean, log_std = d[:, 0], d[:, 1]
    x = np.array([0.5, -0.2, 1.0, 2.0])
    want = -0.5 * ((x - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
    got = np.asarray(policy.compute_log_likelihoods(x.astype(np.float32), obs))
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_dqn_rejects_shifted_discrete_with_advice():
    pytest.importorskip("torch")
    from rlpolicy.agents.dqn import DQNTorchPolicy

    with pytest.raises(UnsupportedSpaceException, match=r"start=3.*use Discrete\(2\) and add 3"):
        DQNTorchPolicy(OBS, Discrete(2, start=3), {})


def test_action_offset_table():
    from rlpolicy.models.dist_offsets import action_offset

    assert action_offset(Discrete(3)) is None
    assert action_offset(Discrete(3, start=-4)) == -4
    np.testing.assert_array_equal(
        action_offset(MultiDiscrete([[2, 2], [3, 3]], start=[[0, 1], [2, 0]])), [[0, 1], [2, 0]]
    )
    assert action_offset(Box(-2, 2, (2,), dtype=np.int32)) == -2
    assert action_offset(Box(0, 5, (2,), dtype=np.int32)) is None
    assert action_offset(gym.spaces.MultiBinary(3)) is None


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_shifted_leaf_inside_dict_action_space(framework):
    space = gym.spaces.Dict({"gear": Discrete(3, start=1), "x": Box(-1.0, 1.0, (2,))})
    policy = _make(framework, space)  # the dummy-batch loss init runs with in-space actions
    obs = _obs(6, seed=4)
    actions, _, fetch = policy.compute_actions(obs, explore=True)
    assert set(actions) == {"gear", "x"} and actions["gear"].min() >= 1 and actions["gear"].max() <= 3
    d = np.asarray(fetch["action_dist_inputs"], np.float64)
    mean, log_std = d[:, 3:5], d[:, 5:7]  # [gear logits (3), x means (2), x log-stds (2)]
    x = actions["x"]
    want = _log_softmax(d[:, :3])[np.arange(6), actions["gear"] - 1] + (
        -0.5 * ((x - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
    ).sum(-1)
    got = np.asarray(policy.compute_log_likelihoods(actions, obs))
    np.testing.assert_allclose(got, want, atol=1e-4)
    stats = policy.learn_on_batch(
        SampleBatch(
            {
                "obs": obs,
                "new_obs": obs,
                "actions": actions,
                "rewards": np.ones(6, np.float32),
                "dones": np.zeros(6, bool),
                "action_logp": fetch["action_logp"],
                "action_dist_inputs": fetch["action_dist_inputs"],
                "vf_preds": fetch["vf_preds"],
                "advantages": np.ones(6, np.float32),
                "value_targets": np.ones(6, np.float32),
            }
        )
    )
    assert np.isfinite(stats["learner_stats"]["total_loss"])
