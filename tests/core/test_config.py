"""rlpolicy._core.config: completing partial configs, the validation error table, unknown keys."""

import copy
import warnings

import gymnasium as gym
import pytest

from rlpolicy._core import config as config_mod
from rlpolicy._core.config import (
    UnknownConfigKeyWarning,
    check_config,
    check_config_value,
    complete_config,
    unknown_keys,
    validate_config,
    warn_unknown_keys,
)
from rlpolicy._core.defaults import COMMON_CONFIG, MODEL_DEFAULTS
from rlpolicy.agents.callbacks import DefaultCallbacks, MultiCallbacks


class _MyCallbacks(DefaultCallbacks):
    pass


class _MyExploration:
    pass


def test_complete_partial_config():
    before = copy.deepcopy(COMMON_CONFIG)
    partial = {
        "lr": 0.01,
        "model": {"fcnet_hiddens": [16]},
        "lambda": 0.95,
        "multiagent": {"policies_to_train": ["p"]},
    }
    full = complete_config(partial)
    assert full["lr"] == 0.01 and full["lambda"] == 0.95  # algorithm keys pass through
    assert full["gamma"] == COMMON_CONFIG["gamma"] and full["framework"] == COMMON_CONFIG["framework"]
    assert full["model"]["fcnet_hiddens"] == [16]
    assert {k: v for k, v in full["model"].items() if k != "fcnet_hiddens"} == {
        k: v for k, v in MODEL_DEFAULTS.items() if k != "fcnet_hiddens"
    }
    assert full["multiagent"]["policies_to_train"] == ["p"]
    assert full["multiagent"]["replay_mode"] == "independent"
    assert set(COMMON_CONFIG) <= set(full)
    validate_config(full)
    # Neither the defaults nor the caller's dict changed; the result shares nothing mutable.
    assert COMMON_CONFIG == before
    assert partial["model"] == {"fcnet_hiddens": [16]}
    full["model"]["fcnet_hiddens"].append(3)
    assert partial["model"]["fcnet_hiddens"] == [16]
    assert complete_config(None)["model"] == MODEL_DEFAULTS


def test_complete_config_exploration_type_switch():
    full = complete_config({"exploration_config": {"type": "EpsilonGreedy", "final_epsilon": 0.1}})
    assert full["exploration_config"] == {"type": "EpsilonGreedy", "final_epsilon": 0.1}
    same = complete_config({"exploration_config": {"random_timesteps": 5}})
    assert same["exploration_config"] == {"type": "StochasticSampling", "random_timesteps": 5}


def test_complete_config_minibatch_vs_train_batch():
    with pytest.raises(ValueError, match="sgd_minibatch_size"):
        complete_config({"train_batch_size": 32, "sgd_minibatch_size": 64})
    # Not given: stays None (RLlib 1.11 then uses train_batch_size for minibatches).
    assert complete_config({"train_batch_size": 32})["sgd_minibatch_size"] is None


def test_entropy_coeff_schedule_accepts_an_int_timestep():
    validate_config(complete_config({"entropy_coeff_schedule": 1000}))
    with pytest.raises(ValueError, match="entropy_coeff_schedule"):
        validate_config(complete_config({"entropy_coeff_schedule": -3}))


# (config overrides, key named in the message)
BAD = [
    ({"framework": "pytorch"}, "framework"),
    ({"framework": None}, "framework"),
    ({"num_gpus": -1}, "num_gpus"),
    ({"num_gpus": "2"}, "num_gpus"),
    ({"num_gpus": True}, "num_gpus"),
    ({"num_gpus": float("nan")}, "num_gpus"),
    ({"_fake_gpus": 1}, "_fake_gpus"),
    ({"num_gpus_per_worker": -0.5}, "num_gpus_per_worker"),
    ({"worker_index": -1}, "worker_index"),
    ({"worker_index": 1.0}, "worker_index"),
    ({"lr": -0.1}, "lr"),
    ({"lr": "0.1"}, "lr"),
    ({"lr_schedule": [[0, 0.1], [100]]}, "lr_schedule"),
    ({"gamma": 1.5}, "gamma"),
    ({"gamma": -0.1}, "gamma"),
    ({"train_batch_size": 0}, "train_batch_size"),
    ({"train_batch_size": 10.0}, "train_batch_size"),
    ({"sgd_minibatch_size": -4}, "sgd_minibatch_size"),
    ({"rollout_fragment_length": 0}, "rollout_fragment_length"),
    ({"num_multi_gpu_tower_stacks": 0}, "num_multi_gpu_tower_stacks"),
    ({"batch_mode": "episodes"}, "batch_mode"),
    ({"grad_clip": 0}, "grad_clip"),
    ({"explore": "yes"}, "explore"),
    ({"exploration_config": {"epsilon": 0.1}}, "exploration_config"),
    ({"exploration_config": "EpsilonGreedy"}, "exploration_config"),
    ({"in_evaluation": None}, "in_evaluation"),
    ({"normalize_actions": 0}, "normalize_actions"),
    ({"seed": "42"}, "seed"),
    ({"callbacks": "MyCallbacks"}, "callbacks"),
    ({"callbacks": 3}, "callbacks"),
    ({"model": [1, 2]}, "model"),
    ({"model": {"max_seq_len": 0}}, "model.max_seq_len"),
    ({"model": {"fcnet_hiddens": [64, -1]}}, "model.fcnet_hiddens"),
    ({"model": {"use_lstm": "true"}}, "model.use_lstm"),
]


# Keys no policy reads when it is built: checked with strict=True (the command line),
# by the workers that read them, and (lr) where the default optimizer reads it.
TRAINER_LEVEL = {"rollout_fragment_length", "batch_mode", "lr"}


@pytest.mark.parametrize("override, key", BAD, ids=[f"{k}-{i}" for i, (_, k) in enumerate(BAD)])
def test_validation_errors_name_key_and_value(override, key):
    config = complete_config({})
    config.update(override)
    if "model" in override and isinstance(override["model"], dict):
        config["model"] = {**MODEL_DEFAULTS, **override["model"]}
    snapshot = copy.deepcopy(config)
    bad_value = list(override.values())[0]
    if isinstance(bad_value, dict) and key.startswith("model."):
        bad_value = bad_value[key.split(".", 1)[1]]
    strict = key in TRAINER_LEVEL
    if strict:
        validate_config(config)  # passes through when a policy is built
    with pytest.raises(ValueError, match=f"config\\['{key}'\\]") as info:
        validate_config(config, strict=strict)
    assert repr(bad_value) in str(info.value)
    assert "allowed" in str(info.value)
    assert repr(config) == repr(snapshot)  # nothing changed (repr: nan != nan)


def test_unknown_model_key_lists_close_matches():
    # The command line's rule (strict): an error with close matches.
    with pytest.raises(ValueError, match=r"unknown key 'fcnet_hidden'.*'fcnet_hiddens'"):
        validate_config({"model": {"fcnet_hidden": [32]}}, strict=True)
    with pytest.raises(ValueError, match="'zzz'"):
        validate_config({"model": {"zzz": 1}}, strict=True)
    # A policy being built: passes validation (warn_unknown_keys warns instead).
    validate_config({"model": {"fcnet_hidden": [32], "zzz": 1}})
    assert config_mod.unknown_model_keys({"model": {"fcnet_hidden": [3], "zzz": 1, "dim": 84}}) == [
        ("fcnet_hidden", "fcnet_hiddens"),
        ("zzz", None),
    ]
    # Keys of the policy's own default model dict are known.
    assert config_mod.unknown_model_keys({"model": {"my_opt": 1}}, {"model": {"my_opt": 0}}) == []


@pytest.mark.parametrize(
    "good",
    [{"framework": fw} for fw in ("torch", "tf", "tf2", "tfe", "jax")]
    + [
        {"num_gpus": 0.5, "_fake_gpus": False},
        {"num_gpus": 2, "_fake_gpus": True},
        {"lr": 0.0},
        {"lr_schedule": [[0, 1e-3], [1000, 1e-4]]},
        {"gamma": 1.0},
        {"gamma": 0},
        {"grad_clip": None},
        {"grad_clip": 40.0},
        {"seed": None},
        {"seed": 7},
        {"callbacks": None},
        {"callbacks": _MyCallbacks},
        {"callbacks": MultiCallbacks([_MyCallbacks])},
        {"exploration_config": {"type": _MyExploration}},
        {"model": {"custom_model_config": {"anything": 1}, "fcnet_hiddens": []}},
        {"some_algo_key": object()},
    ],
)
def test_valid_configs_pass(good):
    validate_config({**complete_config({}), **good})


def test_validate_non_dict():
    with pytest.raises(ValueError, match="dict"):
        validate_config([("lr", 1)])
    with pytest.raises(ValueError, match="dict"):
        complete_config("lr=1")


def test_complete_config_copies_like_deepcopy():
    # Shared mutable values stay shared (and become fresh copies), tuples of
    # atoms are kept, objects that are not plain containers are deep-copied.
    shared = [1, 2]
    space = gym.spaces.Discrete(3)
    partial = {
        "lr": 0.5,
        "a": shared,
        "b": {"inner": shared},
        "t": (shared, 4),
        "atoms": (1, "x"),
        "space": space,
        "cls": _MyExploration,
        "nested": [{"k": [None, 1.5]}],
    }
    full = complete_config(partial)
    assert full["a"] == [1, 2] and full["a"] is not shared
    assert full["b"]["inner"] is full["a"] and full["t"][0] is full["a"] and full["t"][1] == 4
    assert full["atoms"] is partial["atoms"]
    assert full["space"] == space and full["space"] is not space
    assert full["cls"] is _MyExploration
    assert full["nested"] == [{"k": [None, 1.5]}] and full["nested"][0] is not partial["nested"][0]
    cyclic = []
    cyclic.append(cyclic)
    copied = complete_config({"c": cyclic})["c"]
    assert copied[0] is copied and copied is not cyclic
    # The defaults are fresh copies every time.
    one, two = complete_config({}), complete_config({})
    assert one == two and one["model"]["fcnet_hiddens"] is not two["model"]["fcnet_hiddens"]
    assert one["model"]["fcnet_hiddens"] is not MODEL_DEFAULTS["fcnet_hiddens"]


# ------------------------------------------------------------------ policy defaults
def test_complete_config_with_policy_defaults():
    # Defaults may be partial; nested dicts merge key by key: COMMON_CONFIG <- defaults <- partial.
    defaults = {"lambda": 1.0, "lr": 5e-5, "model": {"vf_share_layers": False}}
    snapshot = copy.deepcopy(defaults)
    full = complete_config({"lr": 1e-3, "model": {"fcnet_hiddens": [4]}}, defaults)
    assert full["lambda"] == 1.0 and full["lr"] == 1e-3 and full["gamma"] == 0.99
    assert full["model"]["vf_share_layers"] is False and full["model"]["fcnet_hiddens"] == [4]
    assert full["model"]["fcnet_activation"] == "tanh"
    assert defaults == snapshot
    full["model"]["vf_share_layers"] = True
    assert defaults["model"]["vf_share_layers"] is False
    with pytest.raises(ValueError, match="default config must be a dict"):
        complete_config({}, [("lr", 1)])


# ------------------------------------------------------------------ unknown top-level keys
@pytest.fixture
def fresh_warnings(monkeypatch):
    """Forgets which keys this process already warned about."""
    monkeypatch.setattr(config_mod, "_WARNED_KEYS", set())


def test_unknown_keys_with_close_match():
    assert unknown_keys({"lrr": 1e-3, "lr": 1.0, "zzzzqq": 1}) == [("lrr", "lr"), ("zzzzqq", None)]
    # Known: COMMON_CONFIG, the policy's defaults, RLlib trainer-level keys, '_'-prefixed keys.
    assert unknown_keys({"gamma": 0.9, "_private": 1, "evaluation_num_workers": 2}) == []
    # Keys a custom policy's mixins / GAE postprocessing read, and keys of the shipped
    # algorithms' configs (PPO's clip_param, DQN's n_step), are known without defaults.
    assert (
        unknown_keys(
            {
                "lambda": 0.9,
                "kl_coeff": 0.1,
                "kl_target": 0.01,
                "tau": 0.005,
                "entropy_coeff_schedule": None,
                "clip_param": 0.2,
                "n_step": 3,
            }
        )
        == []
    )
    assert unknown_keys({"kl_coef": 0.1}) == [("kl_coef", "kl_coeff")]
    # strict (the command line's rule): only the given defaults add keys.
    assert unknown_keys({"lambda": 0.9, "gamma": 0.9}, {"lr": 0.1}, strict=True) == [("lambda", None)]
    assert unknown_keys({"lambda": 0.9}, {"lambda": 1.0}, strict=True) == []
    assert unknown_keys({"my_coef": 0.1}, {"my_coeff": 0.2}) == [("my_coef", "my_coeff")]
    # No far-fetched suggestions; a model key at the top level points into 'model'.
    assert unknown_keys({"zz_unrelated_opt": 0.01, "fcnet_hiddens": [8]}) == [
        ("zz_unrelated_opt", None),
        ("fcnet_hiddens", "model.fcnet_hiddens"),
    ]


def test_unknown_key_warns_once_per_key(fresh_warnings):
    with pytest.warns(
        UnknownConfigKeyWarning,
        match=r"MyPolicy: unknown config key 'lrr'; "
        r"did you mean 'lr'\?",
    ) as rec:
        warn_unknown_keys({"lrr": 1e-3, "gamma": 0.5}, where="MyPolicy")
    assert len(rec) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unknown_keys({"lrr": 1e-3})  # already reported in this process: silent
        check_config({"lrr": 1e-3})
    with pytest.warns(UnknownConfigKeyWarning, match="'gama'.*did you mean 'gamma'") as rec:
        check_config({"lrr": 1e-3, "gama": 0.5})
    assert len(rec) == 1


def test_check_config_completes_warns_and_validates(fresh_warnings):
    given = {"lambda": 0.9, "model": {"fcnet_hiddens": [3]}}
    snapshot = copy.deepcopy(given)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = check_config(given, {"lambda": 1.0})
    assert full["lambda"] == 0.9 and full["model"]["fcnet_hiddens"] == [3] and given == snapshot
    assert full["model"] is not given["model"]
    with pytest.raises(ValueError, match=r"config\['gamma'\]=2 is invalid"):
        check_config({"gamma": 2})


def test_check_config_value_wording_matches_validate_config():
    with pytest.raises(
        ValueError,
        match=r"^config\['num_gpus'\]=-1 is invalid; allowed: a finite "
        r"number >= 0$",
    ):
        check_config_value("num_gpus", -1)
    check_config_value("num_multi_gpu_tower_stacks", 2)
    with pytest.raises(
        ValueError,
        match=r"config\['num_multi_gpu_tower_stacks'\]=0 is invalid; "
        r"allowed: an int >= 1",
    ):
        check_config_value("num_multi_gpu_tower_stacks", 0)


def test_algorithm_keys_match_the_algorithms_default_configs():
    # _core lists the algorithms' keys as data (it imports no algorithm); this keeps the
    # list equal to what the algorithms' DEFAULT_CONFIGs add to the base keys.
    from rlpolicy._core.defaults import ALGORITHM_KEYS, TRAINER_ONLY_KEYS
    from rlpolicy.agents.dqn.dqn import DEFAULT_CONFIG as DQN
    from rlpolicy.agents.pg.pg import DEFAULT_CONFIG as PG
    from rlpolicy.agents.ppo.ppo import DEFAULT_CONFIG as PPO

    base = set(COMMON_CONFIG) | set(config_mod._ALL_CHECKS) | TRAINER_ONLY_KEYS | config_mod.HELPER_KEYS
    assert ALGORITHM_KEYS == (set(PG) | set(PPO) | set(DQN)) - base
    assert "clip_param" in config_mod.known_keys() and "n_step" in config_mod.known_keys()
    assert "clip_param" not in config_mod.known_keys(strict=True)
