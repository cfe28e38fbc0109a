"""rlpolicy.agents.trainer: COMMON_CONFIG re-export and with_common_config."""

import copy

import pytest

from rlpolicy._core.defaults import COMMON_CONFIG as CORE_COMMON_CONFIG
from rlpolicy.agents.trainer import COMMON_CONFIG, merge_trainer_configs, with_common_config


def test_common_config_is_the_core_dict():
    assert COMMON_CONFIG is CORE_COMMON_CONFIG
    for key in (
        "framework",
        "model",
        "lr",
        "gamma",
        "num_gpus",
        "_fake_gpus",
        "train_batch_size",
        "sgd_minibatch_size",
        "num_multi_gpu_tower_stacks",
        "explore",
        "exploration_config",
    ):
        assert key in COMMON_CONFIG


def test_with_common_config_deep_merges_and_copies():
    before = copy.deepcopy(COMMON_CONFIG)
    extra = {
        "lambda": 0.95,
        "lr": 5e-5,
        "model": {"vf_share_layers": False},
        "multiagent": {"policies_to_train": ["p0"]},
    }
    cfg = with_common_config(extra)
    assert cfg["lambda"] == 0.95 and cfg["lr"] == 5e-5
    assert cfg["model"]["vf_share_layers"] is False
    assert cfg["model"]["fcnet_hiddens"] == [256, 256]  # untouched sibling keys kept
    assert cfg["multiagent"]["policies_to_train"] == ["p0"]
    assert cfg["multiagent"]["replay_mode"] == "independent"
    assert COMMON_CONFIG == before  # no mutation
    cfg["model"]["fcnet_hiddens"].append(1)
    assert COMMON_CONFIG["model"]["fcnet_hiddens"] == [256, 256]
    assert extra == {
        "lambda": 0.95,
        "lr": 5e-5,
        "model": {"vf_share_layers": False},
        "multiagent": {"policies_to_train": ["p0"]},
    }


def test_exploration_type_change_replaces_whole_dict():
    cfg = with_common_config({"exploration_config": {"type": "EpsilonGreedy", "initial_epsilon": 1.0}})
    assert cfg["exploration_config"] == {"type": "EpsilonGreedy", "initial_epsilon": 1.0}
    merged = merge_trainer_configs(cfg, {"exploration_config": {"final_epsilon": 0.01}})
    assert merged["exploration_config"] == {
        "type": "EpsilonGreedy",
        "initial_epsilon": 1.0,
        "final_epsilon": 0.01,
    }


def test_with_common_config_rejects_non_dict():
    with pytest.raises(ValueError, match="extra_config"):
        with_common_config([("lr", 1)])
