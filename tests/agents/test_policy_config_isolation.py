"""Policy configs are fresh deep copies: built PPO policies share no dict or list with the
algorithm defaults, the caller's config or each other; unknown top-level keys warn."""

import copy
import warnings

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy._core import config as config_mod  # noqa: E402
from rlpolicy._core.config import UnknownConfigKeyWarning  # noqa: E402
from rlpolicy.agents.ppo import DEFAULT_CONFIG as PPO_DEFAULTS  # noqa: E402
from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy  # noqa: E402

BOX4, DISC2 = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)
TINY = {"model": {"fcnet_hiddens": [4]}, "train_batch_size": 8, "sgd_minibatch_size": 4}


def _containers(obj, out=None):
    """ids of every dict/list reachable from obj."""
    out = set() if out is None else out
    if isinstance(obj, (dict, list)):
        out.add(id(obj))
        for v in obj.values() if isinstance(obj, dict) else obj:
            _containers(v, out)
    return out


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(config_mod, "_WARNED_KEYS", set())


def test_policy_config_shares_nothing_with_defaults_caller_or_other_policies():
    defaults_before = copy.deepcopy(PPO_DEFAULTS)
    given = {"train_batch_size": 8, "sgd_minibatch_size": 4}  # no 'model': all from the defaults
    p, q = PPOTorchPolicy(BOX4, DISC2, given), PPOTorchPolicy(BOX4, DISC2, given)
    assert p.config["model"] is not PPO_DEFAULTS["model"]
    assert p.config["model"] is not q.config["model"]
    assert not _containers(p.config) & _containers(PPO_DEFAULTS)
    assert not _containers(p.config) & _containers(q.config)
    assert not _containers(p.config) & _containers(given)
    p.config["model"]["fcnet_hiddens"].append(99)
    p.config["model"]["conv_filters"] = [[1, [1, 1], 1]]
    assert PPO_DEFAULTS == defaults_before and given == {"train_batch_size": 8, "sgd_minibatch_size": 4}
    assert q.config["model"]["fcnet_hiddens"] == [256, 256] and q.config["model"]["conv_filters"] is None


def test_caller_dict_is_never_mutated():
    given = {
        "lr": 1e-3,
        "model": {"fcnet_hiddens": [4], "custom_model_config": {"a": [1]}},
        "exploration_config": {"type": "StochasticSampling"},
        "train_batch_size": 8,
        "sgd_minibatch_size": 4,
    }
    snapshot = copy.deepcopy(given)
    policy = PPOTorchPolicy(BOX4, DISC2, given)
    assert given == snapshot and "framework" not in given
    assert policy.config["framework"] == "torch" and policy.config["lr"] == 1e-3


def test_caller_model_dict_is_merged_into_the_policy_defaults():
    # rlpolicy deep-merges (RLlib 1.11's template replaces the whole 'model' sub-dict).
    policy = PPOTorchPolicy(BOX4, DISC2, TINY)
    assert policy.config["model"]["fcnet_hiddens"] == [4]
    assert policy.config["model"]["vf_share_layers"] is False  # PPO's default, kept
    assert policy.config["lambda"] == PPO_DEFAULTS["lambda"]


def test_vision_nets_of_two_image_sizes_in_one_process():
    # The vision net fills in conv_filters for its image size; with shared defaults the
    # 42x42 filters (last kernel 11x11) leaked into the 10x10 policy and failed to build.
    big = PPOTorchPolicy(
        gym.spaces.Box(0, 1, (42, 42, 3), np.float32), DISC2, {"train_batch_size": 8, "sgd_minibatch_size": 4}
    )
    small = PPOTorchPolicy(
        gym.spaces.Box(0, 1, (10, 10, 3), np.float32), DISC2, {"train_batch_size": 8, "sgd_minibatch_size": 4}
    )
    assert PPO_DEFAULTS["model"]["conv_filters"] is None
    assert big.config["model"]["conv_filters"][-1][1] == [11, 11]
    # RLlib's default filters for 10x10 images: two 5x5 convs with stride 2.
    assert small.config["model"]["conv_filters"] == [[16, [5, 5], 2], [32, [5, 5], 2]]
    actions, _, _ = small.compute_actions(np.zeros((2, 10, 10, 3), np.float32))
    assert actions.shape == (2,)


def test_unknown_top_level_key_warns_with_close_match(fresh_warnings):
    with pytest.warns(
        UnknownConfigKeyWarning,
        match=r"PPOTorchPolicy: unknown config key 'kl_coef'; did you mean 'kl_coeff'\?",
    ):
        policy = PPOTorchPolicy(BOX4, DISC2, {**TINY, "kl_coef": 0.5})
    assert policy.config["kl_coef"] == 0.5  # kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # PPO's own keys, trainer-level keys and '_' keys are known; a repeat is silent.
        PPOTorchPolicy(
            BOX4,
            DISC2,
            {**TINY, "lambda": 0.9, "evaluation_num_workers": 1, "_my_flag": True, "kl_coef": 0.5},
        )
