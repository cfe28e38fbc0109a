"""PPOTorchPolicy's loss and learner stats against a numpy re-computation from the
policy's own weights (a tanh MLP with separate policy and value stacks)."""

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY  # noqa: E402

CONFIG = {
    "lr": 1e-3,
    "clip_param": 0.2,
    "vf_clip_param": 0.5,
    "kl_coeff": 0.3,
    "entropy_coeff": 0.01,
    "vf_loss_coeff": 0.5,
    "model": {"fcnet_hiddens": [8], "fcnet_activation": "tanh", "vf_share_layers": False},
}


def _batch(n=16, seed=0):
    r = np.random.default_rng(seed)
    logits = r.normal(size=(n, 3)).astype(np.float32)
    actions = r.integers(0, 3, n)
    logp = _log_softmax(logits)[np.arange(n), actions]
    return SampleBatch(
        {
            "obs": r.uniform(-1, 1, (n, 4)).astype(np.float32),
            "actions": actions,
            "action_dist_inputs": logits,
            "action_logp": logp.astype(np.float32),
            "advantages": r.normal(size=n).astype(np.float32),
            "value_targets": r.normal(size=n).astype(np.float32),
        }
    )


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _dense(w, prefix, x, act=None):
    y = x @ w[prefix + "._model.0.weight"].T.astype(np.float64) + w[prefix + "._model.0.bias"]
    return np.tanh(y) if act else y


def _numpy_stats(w, b, cfg):
    obs = b["obs"].astype(np.float64)
    logits = _dense(w, "_logits", _dense(w, "_hidden_layers.0", obs, True))
    value = _dense(w, "_value_branch", _dense(w, "_value_branch_separate.0", obs, True))[:, 0]
    logp_new, logp_old = _log_softmax(logits), _log_softmax(b["action_dist_inputs"].astype(np.float64))
    n = len(obs)
    ratio = np.exp(logp_new[np.arange(n), b["actions"]] - b["action_logp"])
    adv = b["advantages"]
    surr = np.minimum(adv * ratio, adv * np.clip(ratio, 1 - cfg["clip_param"], 1 + cfg["clip_param"]))
    kl = (np.exp(logp_old) * (logp_old - logp_new)).sum(-1)
    ent = -(np.exp(logp_new) * logp_new).sum(-1)
    vf = np.clip((value - b["value_targets"]) ** 2, 0, cfg["vf_clip_param"])
    total = np.mean(-surr + cfg["kl_coeff"] * kl + cfg["vf_loss_coeff"] * vf - cfg["entropy_coeff"] * ent)
    vt = b["value_targets"]
    ev = max(-1.0, 1 - np.var(vt - value, ddof=1) / np.var(vt, ddof=1))
    return {
        "total_loss": total,
        "policy_loss": np.mean(-surr),
        "vf_loss": np.mean(vf),
        "vf_explained_var": ev,
        "kl": np.mean(kl),
        "entropy": np.mean(ent),
    }


@pytest.mark.parametrize("device_config", [{}, {"num_gpus": 2, "_fake_gpus": True}])
def test_learner_stats_match_numpy(device_config):
    torch.manual_seed(0)
    policy = PPOTorchPolicy(
        gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(3), {**CONFIG, **device_config}
    )
    batch = _batch()
    expected = _numpy_stats(policy.get_weights(), batch, CONFIG)
    if device_config:
        # learn_on_batch splits the batch over the two towers; the stats are tower
        # means, which for the (non-linear) explained variance is the mean of the halves'.
        expected["vf_explained_var"] = np.mean(
            [
                _numpy_stats(policy.get_weights(), half, CONFIG)["vf_explained_var"]
                for half in (batch[:8], batch[8:])
            ]
        )
    stats = policy.learn_on_batch(batch)[LEARNER_STATS_KEY]
    assert [k for k in stats if k != "allreduce_latency"] == [
        "cur_kl_coeff",
        "cur_lr",
        "total_loss",
        "policy_loss",
        "vf_loss",
        "vf_explained_var",
        "kl",
        "entropy",
        "entropy_coeff",
    ]
    assert stats["cur_kl_coeff"] == 0.3 and stats["cur_lr"] == 1e-3 and stats["entropy_coeff"] == 0.01
    for name, value in expected.items():
        assert isinstance(stats[name], float), name
        assert stats[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_kl_term_off_and_critic_off():
    torch.manual_seed(0)
    cfg = {**CONFIG, "kl_coeff": 0.0, "use_critic": False, "use_gae": False}
    policy = PPOTorchPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(3), cfg)
    batch = _batch(seed=1)
    expected = _numpy_stats(policy.get_weights(), batch, {**cfg, "vf_loss_coeff": 0.0})
    stats = policy.learn_on_batch(batch)[LEARNER_STATS_KEY]
    assert stats["kl"] == 0.0 and stats["vf_loss"] == 0.0 and stats["vf_explained_var"] == 0.0
    expected_total = expected["policy_loss"] - 0.01 * expected["entropy"]
    assert stats["total_loss"] == pytest.approx(expected_total, rel=1e-4, abs=1e-6)


def test_stats_fn_reads_tower_stats_of_any_float_type():
    # kl_and_loss_stats reports the tower means; stats that are not float32
    # scalars (here a float64 tensor and a 1-D one) take the general route.
    from rlpolicy.agents.ppo.ppo_torch_policy import kl_and_loss_stats

    torch.manual_seed(0)
    policy = PPOTorchPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(3), CONFIG)
    values = {
        "total_loss": 1.5,
        "mean_policy_loss": -0.25,
        "mean_vf_loss": 0.125,
        "vf_explained_var": 0.5,
        "mean_kl_loss": 0.0625,
        "mean_entropy": 1.0,
    }
    stats = policy.model.tower_stats
    for key, v in values.items():
        stats[key] = torch.tensor(v)
    fast = kl_and_loss_stats(policy, _batch())
    stats["mean_vf_loss"] = torch.tensor(0.125, dtype=torch.float64)
    stats["mean_entropy"] = torch.tensor([0.5, 1.5])
    slow = kl_and_loss_stats(policy, _batch())
    expected = {
        "total_loss": 1.5,
        "policy_loss": -0.25,
        "vf_loss": 0.125,
        "vf_explained_var": 0.5,
        "kl": 0.0625,
        "entropy": 1.0,
    }
    for out in (fast, slow):
        assert {k: out[k] for k in expected} == expected
        assert out["cur_kl_coeff"] == 0.3 and out["entropy_coeff"] == 0.01
    del stats["mean_kl_loss"]
    with pytest.raises(AssertionError, match="mean_kl_loss"):
        kl_and_loss_stats(policy, _batch())
