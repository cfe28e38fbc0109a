"""Pickle-free policy checkpoints: Policy.export_checkpoint / from_checkpoint."""

import json
import logging
import os
import zipfile

import gymnasium as gym
import numpy as np
import pytest
from numpy_policies import LinearSoftmaxPolicy, StructuredActionPolicy, bandit_batch, make_linear_policy

from rlpolicy._core import checkpoint as ckpt
from rlpolicy._core.checkpoint import CheckpointError, space_from_json, space_to_json
from rlpolicy.agents.callbacks import DefaultCallbacks
from rlpolicy.policy.policy import Policy, load_policy_from_checkpoint


class MyCallbacks(DefaultCallbacks):
    pass


@pytest.fixture
def trained():
    """A linear policy after a few SGD steps (non-zero weights and optimizer state)."""
    p = make_linear_policy({"lr": 0.5, "seed": 3, "callbacks": MyCallbacks})
    rng = np.random.default_rng(0)
    for _ in range(3):
        p.learn_on_batch(bandit_batch(p, 16, rng))
    p.global_timestep = 123
    return p


def _files(d):
    return sorted(f for f in os.listdir(d) if f != ckpt.checkpoint_io.LOCK_FILE)


def test_round_trip_restores_everything(trained, tmp_path):
    trained.export_checkpoint(str(tmp_path))
    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert type(restored) is LinearSoftmaxPolicy
    before, after = trained.get_state(), restored.get_state()
    np.testing.assert_array_equal(after["weights"]["W"], before["weights"]["W"])
    np.testing.assert_array_equal(after["weights"]["b"], before["weights"]["b"])
    assert np.any(after["weights"]["W"] != 0)
    assert after["global_timestep"] == 123
    opt_b, opt_a = before["_optimizer_variables"][0], after["_optimizer_variables"][0]
    assert set(opt_a["state"]) == {0, 1}  # int keys survive
    np.testing.assert_array_equal(opt_a["state"][0]["momentum_buffer"], opt_b["state"][0]["momentum_buffer"])
    assert opt_a["state"][1]["step"] == 3 and isinstance(opt_a["state"][1]["step"], np.int64)
    assert opt_a["param_groups"] == [
        {"lr": 0.5, "betas": (0.9, 0.999), "params": [0, 1], "nesterov": False, "weight_decay": None}
    ]
    assert after["_exploration_state"] == {"temperature": np.float32(1.0), "seed": 3}
    assert restored.observation_space == trained.observation_space
    assert restored.action_space == trained.action_space
    assert restored.config["lr"] == 0.5 and restored.config["callbacks"] is MyCallbacks
    assert isinstance(restored.callbacks, MyCallbacks)
    obs = np.array([[0.3, -0.2, 0.9]], np.float32)
    np.testing.assert_array_equal(
        restored.compute_actions(obs, explore=False)[2]["action_dist_inputs"],
        trained.compute_actions(obs, explore=False)[2]["action_dist_inputs"],
    )


def test_files_hold_no_pickle(trained, tmp_path):
    trained.export_checkpoint(str(tmp_path), filename_prefix="weights")
    files = _files(tmp_path)
    assert len(files) == 2 and "rlpolicy_checkpoint.json" in files
    npz_name = next(f for f in files if f.endswith(".npz"))
    assert npz_name.startswith("weights-")
    with np.load(tmp_path / npz_name, allow_pickle=False) as npz:  # would raise on pickled objects
        arrays = {k: npz[k] for k in npz.files}
    assert arrays and all(a.dtype != object for a in arrays.values())
    with zipfile.ZipFile(tmp_path / npz_name) as zf:
        assert all(n.endswith(".npy") for n in zf.namelist())
    meta = json.loads((tmp_path / "rlpolicy_checkpoint.json").read_text())
    assert meta["format"] == "rlpolicy.policy_checkpoint" and meta["format_version"] == 1
    assert meta["policy_class"] == "numpy_policies:LinearSoftmaxPolicy"
    assert meta["config"]["callbacks"] == {"__import__": f"{__name__}:MyCallbacks"}


def test_explicit_policy_state_and_subclass_loader(trained, tmp_path):
    state = trained.get_state()
    state["global_timestep"] = 7
    trained.export_checkpoint(str(tmp_path), policy_state=state)
    restored = LinearSoftmaxPolicy.from_checkpoint(
        str(tmp_path), config_overrides={"lr": 0.01}, trusted="imported"
    )
    assert restored.global_timestep == 7 and restored.config["lr"] == 0.01
    assert load_policy_from_checkpoint(str(tmp_path), trusted="imported").global_timestep == 7


def test_resave_replaces_arrays_file(trained, tmp_path):
    trained.export_checkpoint(str(tmp_path))
    first = _files(tmp_path)
    trained.set_weights({"W": trained.W + 1, "b": trained.b})
    trained.export_checkpoint(str(tmp_path))
    second = _files(tmp_path)
    assert len(second) == 2 and first != second  # old array file cleaned up
    np.testing.assert_array_equal(Policy.from_checkpoint(str(tmp_path), trusted="imported").W, trained.W)


@pytest.mark.parametrize("fail_at", ["arrays", "commit", "encode"])
def test_failed_save_leaves_previous_checkpoint_intact(trained, tmp_path, monkeypatch, fail_at):
    trained.export_checkpoint(str(tmp_path))
    files_before = _files(tmp_path)
    w_before = trained.W.copy()
    trained.set_weights({"W": trained.W + 5, "b": trained.b})
    if fail_at == "encode":

        def boom(arrays):
            raise OSError("disk full")

        monkeypatch.setattr(ckpt, "_npz_bytes", boom)
    else:
        real_replace, calls = os.replace, []

        def flaky_replace(src, dst):
            calls.append(dst)
            is_meta = str(dst).endswith("rlpolicy_checkpoint.json")
            if (fail_at == "commit") == is_meta:
                raise OSError("power cut")
            return real_replace(src, dst)

        monkeypatch.setattr(ckpt.os, "replace", flaky_replace)
    with pytest.raises(OSError):
        trained.export_checkpoint(str(tmp_path))
    monkeypatch.undo()
    assert _files(tmp_path) == files_before  # no temp files, no orphan arrays
    np.testing.assert_array_equal(Policy.from_checkpoint(str(tmp_path), trusted="imported").W, w_before)


def test_unsaveable_state_fails_before_touching_disk(trained, tmp_path):
    state = trained.get_state()
    state["weights"]["bad"] = np.array([object()], dtype=object)
    with pytest.raises(TypeError, match=r"state\.weights\.bad.*dtype object"):
        trained.export_checkpoint(str(tmp_path / "c"), policy_state=state)
    assert not (tmp_path / "c").exists()
    state["weights"]["bad"] = {1, 2}
    with pytest.raises(TypeError, match=r"state\.weights\.bad=.*without pickle"):
        trained.export_checkpoint(str(tmp_path / "c"), policy_state=state)


def test_unstorable_config_values_are_dropped_with_warning(tmp_path, caplog):
    p = make_linear_policy({"lr": 0.1, "env_config": {"fn": lambda: 1, "keep": 2}})
    with caplog.at_level(logging.WARNING):
        p.export_checkpoint(str(tmp_path))
    assert "config.env_config.fn" in caplog.text
    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert restored.config["env_config"] == {"keep": 2}
    meta = json.loads((tmp_path / "rlpolicy_checkpoint.json").read_text())
    assert meta["dropped_config_keys"] == ["config.env_config.fn"]


def test_bad_filename_prefix(trained, tmp_path):
    with pytest.raises(ValueError, match="filename_prefix='../x'"):
        trained.export_checkpoint(str(tmp_path), filename_prefix="../x")


# ------------------------------------------------------------------ corrupt and foreign files
def _corrupt_arrays(d):
    npz = next(f for f in os.listdir(d) if f.endswith(".npz"))
    data = (d / npz).read_bytes()
    (d / npz).write_bytes(data[: len(data) // 2])


def _write_meta(d, fn):
    meta = json.loads((d / "rlpolicy_checkpoint.json").read_text())
    fn(meta)
    (d / "rlpolicy_checkpoint.json").write_text(json.dumps(meta))


def _object_array_npz(d):
    # A well-formed archive whose array needs pickle, with a matching hash.
    import hashlib
    import io

    buf = io.BytesIO()
    np.savez(buf, a0=np.array([{"x": 1}], dtype=object))
    payload = buf.getvalue()
    (d / "evil.npz").write_bytes(payload)
    _write_meta(
        d, lambda m: m.update(arrays_file="evil.npz", arrays_sha256=hashlib.sha256(payload).hexdigest())
    )


@pytest.mark.parametrize(
    "damage, exc, match",
    [
        (_corrupt_arrays, CheckpointError, "SHA-256 does not match"),
        (
            lambda d: (d / "rlpolicy_checkpoint.json").write_text("{not json"),
            CheckpointError,
            "not valid JSON",
        ),
        (
            lambda d: (d / "rlpolicy_checkpoint.json").write_bytes(b"\x80\x04\x95pickle"),
            CheckpointError,
            "not valid JSON",
        ),
        (
            lambda d: (d / "rlpolicy_checkpoint.json").write_text('{"format": "ray.rllib"}'),
            CheckpointError,
            "not an rlpolicy policy checkpoint",
        ),
        (
            lambda d: (d / "rlpolicy_checkpoint.json").write_text("[1, 2]"),
            CheckpointError,
            "not an rlpolicy policy checkpoint",
        ),
        (
            lambda d: _write_meta(d, lambda m: m.update(format_version=99)),
            CheckpointError,
            "format_version 99",
        ),
        (
            lambda d: os.remove(d / "rlpolicy_checkpoint.json"),
            CheckpointError,
            "rlpolicy_checkpoint.json is missing",
        ),
        (
            lambda d: [os.remove(d / f) for f in os.listdir(d) if f.endswith(".npz")],
            CheckpointError,
            "cannot be read",
        ),
        (
            lambda d: _write_meta(d, lambda m: m.update(arrays_file="../x.npz")),
            CheckpointError,
            "bad arrays_file",
        ),
        (
            lambda d: _write_meta(d, lambda m: m.pop("state")),
            CheckpointError,
            "missing entry 'state'|does not reference",
        ),
        (
            lambda d: _write_meta(d, lambda m: m["action_space"].update(type="Text")),
            CheckpointError,
            "unknown space type 'Text'",
        ),
        (
            lambda d: _write_meta(d, lambda m: m.update(policy_class="no_such_module_xyz:P")),
            CheckpointError,
            "cannot resolve the checkpoint's policy class.*does not trust",
        ),
        (
            lambda d: _write_meta(d, lambda m: m.update(policy_class="collections:OrderedDict")),
            CheckpointError,
            "not a Policy subclass",
        ),
        (
            lambda d: _write_meta(d, lambda m: m.update(state={"__ndarray__": "a999"})),
            CheckpointError,
            "array 'a999'",
        ),
        (_object_array_npz, CheckpointError, "cannot be read without pickle"),
    ],
)
def test_corrupt_or_foreign_checkpoint_gets_clear_error(trained, tmp_path, damage, exc, match):
    trained.export_checkpoint(str(tmp_path))
    damage(tmp_path)
    with pytest.raises(exc, match=match):
        Policy.from_checkpoint(str(tmp_path), trusted="imported")


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Policy.from_checkpoint(str(tmp_path / "nope"))


def test_checkpoint_error_is_a_value_error():
    assert issubclass(CheckpointError, ValueError)


# ------------------------------------------------------------------ space codec
SPACES = {
    "box": gym.spaces.Box(-1.0, 2.0, shape=(2, 3), dtype=np.float32),
    "box-inf": gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float64),
    "box-per-dim": gym.spaces.Box(np.array([0.0, -1.0], np.float32), np.array([1.0, 5.0], np.float32)),
    "box-int": gym.spaces.Box(0, 255, shape=(2, 2), dtype=np.uint8),
    "discrete": gym.spaces.Discrete(5, start=-2),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 4, 2]),
    "multibinary": gym.spaces.MultiBinary(6),
    "multibinary-2d": gym.spaces.MultiBinary([2, 3]),
    "dict": gym.spaces.Dict({"z": gym.spaces.Discrete(2), "a": gym.spaces.Box(0, 1, (1,))}),
    "tuple": gym.spaces.Tuple(
        [gym.spaces.Discrete(3), gym.spaces.Dict({"x": gym.spaces.MultiDiscrete([2, 2])})]
    ),
}


@pytest.fixture(params=list(SPACES))
def space(request):
    return SPACES[request.param]


def test_space_json_round_trip(space):
    text = json.dumps(space_to_json(space))
    back = space_from_json(json.loads(text))
    assert back == space and type(back) is type(space)
    if isinstance(space, gym.spaces.Dict):
        assert list(back.spaces) == list(space.spaces)  # key order kept


def test_space_round_trip_through_checkpoint(space, tmp_path):
    p = StructuredActionPolicy(gym.spaces.Box(-1, 1, (2,)), space, {})
    p.export_checkpoint(str(tmp_path))
    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert restored.action_space == space
    assert space.contains(restored.compute_single_action(np.zeros(2, np.float32))[0])


def test_unsupported_space():
    with pytest.raises(TypeError, match="Text.*supported: Box, Discrete"):
        space_to_json(gym.spaces.Text(5))


@pytest.mark.parametrize(
    "path, match",
    [
        ("os:system", "builtin_function_or_method; only classes and Python functions"),
        ("builtins:exec", "builtin_function_or_method"),
        ("math:pi", "float"),
        ("no_such_module_xyz:f", "does not trust"),
    ],
)
def test_config_import_paths_restore_only_classes_and_functions(trained, tmp_path, path, match):
    trained.export_checkpoint(str(tmp_path))
    _write_meta(tmp_path, lambda m: m["config"].update(callbacks={"__import__": path}))
    with pytest.raises(CheckpointError, match=match):
        Policy.from_checkpoint(str(tmp_path), trusted="imported")


def test_none_config_values_and_nested_containers_round_trip(tmp_path):
    p = make_linear_policy(
        {
            "env_config": {
                "t": (1, [2.5, None], {"k": np.arange(3)}),
                "nan": float("nan"),
                "inf": float("-inf"),
            }
        }
    )
    p.export_checkpoint(str(tmp_path))
    env_config = Policy.from_checkpoint(str(tmp_path), trusted="imported").config["env_config"]
    t = env_config["t"]
    assert t[0] == 1 and t[1] == [2.5, None] and isinstance(t, tuple)
    np.testing.assert_array_equal(t[2]["k"], [0, 1, 2])
    assert np.isnan(env_config["nan"]) and env_config["inf"] == float("-inf")


def test_loading_never_unpickles(trained, tmp_path, monkeypatch):
    import pickle

    trained.export_checkpoint(str(tmp_path))

    def no_pickle(*args, **kwargs):
        raise AssertionError("pickle used while loading a checkpoint")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, no_pickle)
    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    np.testing.assert_array_equal(restored.W, trained.W)


def test_local_class_needs_the_class_loader(tmp_path):
    class LocalPolicy(StructuredActionPolicy):
        pass

    LocalPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), {}).export_checkpoint(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"call YourPolicyClass.from_checkpoint\(dir\)"):
        Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert type(LocalPolicy.from_checkpoint(str(tmp_path), trusted="imported")) is LocalPolicy
