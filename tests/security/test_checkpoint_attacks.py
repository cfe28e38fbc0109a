"""Attacks on policy checkpoints, built by hand as an attacker would (issue 28).

Every attack starts from a genuine checkpoint of a small PPO torch policy, damages
it, and loads it through an entry point. Each asserts that the attacker's marker
file was not written, that the error is a CheckpointError saying what is wrong,
and that the checkpoint folder is unchanged afterwards. docs/checkpoints.md has
the threat model; ``ATTACK TABLE`` in the module docstring of
rlpolicy/_core/checkpoint_trust.py lists what each trust level resolves.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import uuid
import zipfile

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy._core import checkpoint as ckpt
from rlpolicy._core.checkpoint import CheckpointError
from rlpolicy.policy.policy import Policy

torch = pytest.importorskip("torch")
from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy  # noqa: E402

META = "rlpolicy_checkpoint.json"
OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
CONFIG = {"framework": "torch", "model": {"fcnet_hiddens": [8]}}
PPO_PATH = "rlpolicy.agents.ppo.ppo_torch_policy:PPOTorchPolicy"


# ------------------------------------------------------------------ helpers
@pytest.fixture(scope="module")
def template(tmp_path_factory):
    d = tmp_path_factory.mktemp("template") / "ckpt"
    torch.manual_seed(0)
    PPOTorchPolicy(OBS, ACT, dict(CONFIG)).export_checkpoint(str(d))
    return d


@pytest.fixture
def ckpt_dir(template, tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(template, d)
    return d


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "MARKER"


def read_meta(d):
    return json.loads((d / META).read_text())


def write_meta(d, meta):
    (d / META).write_text(json.dumps(meta))


def edit_meta(d, fn):
    meta = read_meta(d)
    fn(meta)
    write_meta(d, meta)


def edit_arrays(d, fn, edit=None):
    """Rewrites the array file with ``fn(arrays)`` (a dict) and re-hashes it."""
    meta = read_meta(d)
    with np.load(d / meta["arrays_file"], allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    fn(arrays, meta)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_payload(d, meta, buf.getvalue())
    if edit:
        edit(meta)
    write_meta(d, meta)


def write_payload(d, meta, payload):
    os.remove(d / meta["arrays_file"])
    meta["arrays_file"] = "model-" + hashlib.sha256(payload).hexdigest()[:12] + ".npz"
    meta["arrays_sha256"] = hashlib.sha256(payload).hexdigest()
    (d / meta["arrays_file"]).write_bytes(payload)


def weight_ref(meta, index=0):
    """The array key of the ``index``-th model weight in the state."""
    return list(meta["state"]["weights"].values())[index]["__ndarray__"]


def snapshot(d):
    out = {}
    for name in sorted(os.listdir(d)):
        info = os.lstat(d / name)
        digest = None
        if stat.S_ISREG(info.st_mode):
            digest = hashlib.sha256((d / name).read_bytes()).hexdigest()
        out[name] = (stat.S_IFMT(info.st_mode), info.st_size, digest)
    return out


def assert_refused(d, load, marker, match):
    before = snapshot(d)
    with pytest.raises(CheckpointError, match=match):
        load()
    assert not marker.exists(), "the attack ran code: its marker file was written"
    assert snapshot(d) == before, "loading changed the checkpoint folder"


def make_evil_module(folder, marker):
    """A module that writes ``marker`` when imported, when its class is built or its function called."""
    name = f"evil_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        textwrap.dedent(f"""
        open({str(marker)!r}, "a").write("imported\\n")

        class Evil:
            def __init__(self, *args, **kwargs):
                open({str(marker)!r}, "a").write("instantiated\\n")

        def evil(*args, **kwargs):
            open({str(marker)!r}, "a").write("called\\n")
        """)
    )
    return name


def _policy_load(d):
    return lambda: Policy.from_checkpoint(str(d))


def _subclass_load(d):
    return lambda: PPOTorchPolicy.from_checkpoint(str(d))


def _set_state_load(d):
    def load():
        policy = PPOTorchPolicy(OBS, ACT, dict(CONFIG))
        policy.set_state(ckpt.read_checkpoint(str(d)).state)

    return load


ENTRY_POINTS = {
    "Policy.from_checkpoint": _policy_load,
    "subclass": _subclass_load,
    "set_state": _set_state_load,
}


# ------------------------------------------------------------------ 1 and 2: names in every slot
def _imp(path):
    return {"__import__": path}


def _dotted(path):
    return path.replace(":", ".")


# slot -> (how to put a "module:name" into the metadata, entry points that read the slot)
SLOTS = {
    "config.callbacks": (lambda m, p: m["config"].update(callbacks=_imp(p)), ENTRY_POINTS),
    "given_config.callbacks": (lambda m, p: m["given_config"].update(callbacks=_imp(p)), ENTRY_POINTS),
    "state entry": (lambda m, p: m["state"].update(extra=_imp(p)), ENTRY_POINTS),
    "config.model.fcnet_activation": (
        lambda m, p: m["given_config"]["model"].update(fcnet_activation=_imp(p)),
        ENTRY_POINTS,
    ),
    "config.model.custom_model": (
        lambda m, p: m["given_config"]["model"].update(custom_model=_imp(p)),
        ENTRY_POINTS,
    ),
    "exploration_config type": (
        lambda m, p: m["given_config"].update(exploration_config={"type": _dotted(p)}),
        ("Policy.from_checkpoint", "subclass"),
    ),
    "schedule type": (
        lambda m, p: m["given_config"].update(
            exploration_config={"type": "EpsilonGreedy", "epsilon_schedule": {"type": _dotted(p)}}
        ),
        ("Policy.from_checkpoint", "subclass"),
    ),
    "policy_class": (lambda m, p: m.update(policy_class=p), ("Policy.from_checkpoint",)),
    "recipe import": (lambda m, p: m.update(policy_class_recipe={"import": p}), ("Policy.from_checkpoint",)),
    "recipe factory": (
        lambda m, p: m.update(policy_class_recipe={"factory": p, "kwargs": {}}),
        ("Policy.from_checkpoint",),
    ),
    "recipe kwargs": (
        lambda m, p: m.update(
            policy_class_recipe={
                "of": {"import": PPO_PATH},
                "call": "with_updates",
                "kwargs": {"loss_fn": _imp(p)},
            }
        ),
        ("Policy.from_checkpoint",),
    ),
}
SLOT_CASES = [(slot, entry) for slot, (_, entries) in SLOTS.items() for entry in entries]


@pytest.mark.parametrize("where", ["next to the checkpoint", "working directory"])
@pytest.mark.parametrize("what", ["module", "class", "function"])
@pytest.mark.parametrize("slot, entry", SLOT_CASES)
def test_module_named_in_any_slot_is_not_imported(
    ckpt_dir, tmp_path, marker, monkeypatch, slot, entry, what, where
):
    folder = ckpt_dir if where == "next to the checkpoint" else tmp_path / "cwd"
    folder.mkdir(exist_ok=True)
    name = make_evil_module(folder, marker)
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder) if where == "next to the checkpoint" else "")
    path = {"module": f"{name}:Missing", "class": f"{name}:Evil", "function": f"{name}:evil"}[what]
    edit_meta(ckpt_dir, lambda m: SLOTS[slot][0](m, path))
    try:
        assert_refused(
            ckpt_dir, ENTRY_POINTS[entry](ckpt_dir), marker, f"{name}.*does not trust.*safe_globals"
        )
    finally:
        sys.modules.pop(name, None)


# Stdlib and rlpolicy callables that pass "a class or a Python function": called with no
# arguments (callbacks, activation, recipe) or merely returned as a value.
STDLIB = [
    "tempfile:mkdtemp",
    "pydoc:cli",
    "os:popen",
    "subprocess:getoutput",
    "pickle:_loads",
    "rlpolicy.utils.compression:unpack",
    "rlpolicy.cli.commands:main",
    "this:s",
    "unittest.__main__:main",
]


@pytest.mark.parametrize("path", STDLIB)
@pytest.mark.parametrize(
    "slot", ["config.callbacks", "config.model.fcnet_activation", "recipe factory", "state entry"]
)
def test_stdlib_and_unsafe_own_callables_are_refused(
    ckpt_dir, marker, monkeypatch, capsys, tmp_path, path, slot
):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    modules_before = set(sys.modules)
    edit_meta(ckpt_dir, lambda m: SLOTS[slot][0](m, path))
    assert_refused(
        ckpt_dir, _policy_load(ckpt_dir), marker, "does not trust|only classes and Python functions"
    )
    assert os.listdir(tmp_path / "tmp") == []  # mkdtemp did not run
    assert "Beautiful is better" not in capsys.readouterr().out  # `this` was not imported
    assert {"this", "unittest.__main__", "pydoc"} & (set(sys.modules) - modules_before) == set()


@pytest.mark.parametrize(
    "path, match",
    [
        ("a:b:c", "invalid name"),
        ("", "invalid name"),
        (" os:system", "invalid name"),
        ("os :system", "invalid name"),
        ("\u00e9vil:x", "invalid name"),
        ("os:", "invalid name"),
        ("x" * 5000 + ":y", "invalid name"),
        (123, "invalid name"),
        (["os", "system"], "invalid name"),
        ("rlpolicy.policy.policy:Policy._load_checkpoint", "does not trust"),
        ("rlpolicy.policy.policy:os", "does not trust|only classes"),
        ("rlpolicy.policy.policy:no_such_name", "cannot be found"),
        ("builtins:exec", "does not trust"),
    ],
)
def test_malformed_names_give_checkpoint_errors(ckpt_dir, marker, path, match):
    edit_meta(ckpt_dir, lambda m: m["given_config"].update(callbacks={"__import__": path}))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, match)


# ------------------------------------------------------------------ 3: unbounded reads
def _arrays_path(d):
    return d / read_meta(d)["arrays_file"]


def test_array_file_linked_to_dev_zero(ckpt_dir, marker):
    os.remove(_arrays_path(ckpt_dir))
    os.symlink("/dev/zero", _arrays_path(ckpt_dir))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "symbolic link")


def test_array_file_linked_outside_the_folder(ckpt_dir, tmp_path, marker):
    outside = tmp_path / "outside.npz"
    shutil.copy(_arrays_path(ckpt_dir), outside)
    os.remove(_arrays_path(ckpt_dir))
    os.symlink(outside, _arrays_path(ckpt_dir))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "symbolic link")


def test_metadata_linked_outside_the_folder(ckpt_dir, tmp_path, marker):
    shutil.move(ckpt_dir / META, tmp_path / "meta.json")
    os.symlink(tmp_path / "meta.json", ckpt_dir / META)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "symbolic link")


@pytest.mark.parametrize("which", ["arrays", "metadata"])
def test_fifo_is_refused_without_blocking(ckpt_dir, marker, which):
    path = _arrays_path(ckpt_dir) if which == "arrays" else ckpt_dir / META
    if which == "metadata":
        edit_meta(ckpt_dir, lambda m: None)
    os.remove(path)
    os.mkfifo(path)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "not a regular file")


def test_metadata_linked_to_a_device(ckpt_dir, marker):
    os.remove(ckpt_dir / META)
    os.symlink("/dev/zero", ckpt_dir / META)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "symbolic link")


def _zip_bomb_member(zf, name, nbytes):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)}
    )
    with zf.open(name, "w", force_zip64=True) as f:
        f.write(header.getvalue())
        chunk = bytes(2**20)
        for _ in range(nbytes // len(chunk)):
            f.write(chunk)


def test_zip_bomb_in_unreferenced_member(ckpt_dir, marker):
    meta = read_meta(ckpt_dir)
    buf = io.BytesIO()
    with (
        zipfile.ZipFile(_arrays_path(ckpt_dir)) as src,
        zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf,
    ):
        for info in src.infolist():
            zf.writestr(info.filename, src.read(info))
        _zip_bomb_member(zf, "bomb.npy", 2**28)  # 256 MB of zeros, ~250 KB compressed
    assert len(buf.getvalue()) < 2**20
    write_payload(ckpt_dir, meta, buf.getvalue())
    write_meta(ckpt_dir, meta)
    assert_refused(
        ckpt_dir, _policy_load(ckpt_dir), marker, r"\['bomb'\] that the metadata does not reference"
    )


def test_member_larger_than_its_header_declares(ckpt_dir, marker):
    meta = read_meta(ckpt_dir)
    key = weight_ref(meta)
    buf = io.BytesIO()
    with (
        zipfile.ZipFile(_arrays_path(ckpt_dir)) as src,
        zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf,
    ):
        for info in src.infolist():
            data = src.read(info)
            zf.writestr(info.filename, data + bytes(2**20) if info.filename == f"{key}.npy" else data)
    write_payload(ckpt_dir, meta, buf.getvalue())
    write_meta(ckpt_dir, meta)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "but its header declares")


def test_per_array_limit(ckpt_dir, marker):
    limits = ckpt.Limits(max_array_bytes=16)
    assert_refused(
        ckpt_dir,
        lambda: Policy.from_checkpoint(str(ckpt_dir), limits=limits),
        marker,
        "over the per-array limit",
    )


def test_file_size_limits(ckpt_dir, marker):
    for limits, match in [
        (ckpt.Limits(max_json_bytes=100), "over the limit of 100"),
        (ckpt.Limits(max_arrays_file_bytes=100), "over the limit of 100"),
        (ckpt.Limits(max_arrays=2), "over the limit of 2"),
    ]:
        assert_refused(
            ckpt_dir, lambda lim=limits: Policy.from_checkpoint(str(ckpt_dir), limits=lim), marker, match
        )


def test_duplicate_members(ckpt_dir, marker):
    meta = read_meta(ckpt_dir)
    key = weight_ref(meta)
    buf = io.BytesIO()
    with zipfile.ZipFile(_arrays_path(ckpt_dir)) as src, zipfile.ZipFile(buf, "w") as zf:
        for info in src.infolist():
            zf.writestr(info.filename, src.read(info))
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr(f"{key}.npy", src.read(f"{key}.npy"))
    write_payload(ckpt_dir, meta, buf.getvalue())
    write_meta(ckpt_dir, meta)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "more than once")


def test_non_zip_array_file(ckpt_dir, marker):
    meta = read_meta(ckpt_dir)
    write_payload(ckpt_dir, meta, b"\x80\x04\x95 not a zip")
    write_meta(ckpt_dir, meta)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "not a zip archive")


@pytest.mark.parametrize("depth", [65, 500, 100_000])
def test_deep_nesting(ckpt_dir, marker, depth):
    text = (ckpt_dir / META).read_text()
    deep = "[" * depth + "]" * depth
    (ckpt_dir / META).write_text(text.replace('"callbacks": null', f'"callbacks": {deep}', 1))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "nests")


def test_huge_model_config_is_refused_before_building(ckpt_dir, marker):
    edit_meta(ckpt_dir, lambda m: m["given_config"]["model"].update(fcnet_hiddens=[16000, 16000]))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "weights, over the limit")


@pytest.mark.parametrize("bad", [[-3], [8.5], [True], "8", [10**30]])
def test_bad_model_sizes(ckpt_dir, marker, bad):
    edit_meta(ckpt_dir, lambda m: m["given_config"]["model"].update(fcnet_hiddens=bad))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "fcnet_hiddens|over the limit")


# ------------------------------------------------------------------ 4: validation
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_weights(ckpt_dir, marker, value):
    def poison(arrays, meta):
        arrays[weight_ref(meta)].flat[0] = value

    edit_arrays(ckpt_dir, poison)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "NaN or inf.*allow_non_finite=True")
    policy = Policy.from_checkpoint(str(ckpt_dir), allow_non_finite=True)  # the documented opt-in
    assert not np.isfinite(list(policy.get_weights().values())[0]).all()


@pytest.mark.parametrize("dtype", ["int32", "bool", "complex64", "uint64", "float64", "int8"])
def test_lossy_dtypes(ckpt_dir, marker, dtype):
    def recast(arrays, meta):
        key = weight_ref(meta)
        arrays[key] = arrays[key].astype(dtype)

    edit_arrays(ckpt_dir, recast)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "complex|losslessly")


def test_lossless_cast_is_accepted(ckpt_dir):
    def narrow(arrays, meta):
        key = weight_ref(meta)
        arrays[key] = arrays[key].astype(np.float16)

    edit_arrays(ckpt_dir, narrow)
    Policy.from_checkpoint(str(ckpt_dir))


def test_wrong_weight_shape(ckpt_dir, marker):
    def reshape(arrays, meta):
        key = weight_ref(meta)
        arrays[key] = np.zeros((3, 3), np.float32)

    edit_arrays(ckpt_dir, reshape)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "has shape")


NUMERIC_KEYS = [
    "clip_param",
    "kl_coeff",
    "entropy_coeff",
    "lambda",
    "vf_clip_param",
    "vf_loss_coeff",
    "kl_target",
    "lr",
]


@pytest.mark.parametrize("key", NUMERIC_KEYS + ["gamma"])
@pytest.mark.parametrize("value", ["NaN", "-1", "true", '"0.3"', "1e999"])
def test_config_numbers(ckpt_dir, marker, key, value):
    if value == "1e999" and key == "vf_clip_param":
        pytest.skip("inf means 'no clipping' for vf_clip_param")
    text = json.dumps(read_meta(ckpt_dir))
    meta = json.loads(text)
    for cfg in (meta["config"], meta["given_config"]):
        cfg[key] = "@@"
    (ckpt_dir / META).write_text(json.dumps(meta).replace('"@@"', value))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, f"config.{key}=.*(out of range|not a number)")


@pytest.mark.parametrize(
    "key, value", [("lr", "NaN"), ("lr", "-1"), ("eps", "NaN"), ("weight_decay", "Infinity")]
)
def test_stored_optimizer_hyperparameters(ckpt_dir, marker, key, value):
    meta = read_meta(ckpt_dir)
    meta["state"]["_optimizer_variables"][0]["param_groups"][0][key] = "@@"
    (ckpt_dir / META).write_text(json.dumps(meta).replace('"@@"', value))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, f"param_groups\\[0\\].{key}")


def test_stored_kl_coeff_nan(ckpt_dir, marker):
    meta = read_meta(ckpt_dir)
    meta["state"]["current_kl_coeff"] = "@@"
    (ckpt_dir / META).write_text(json.dumps(meta).replace('"@@"', "NaN"))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "current_kl_coeff")


@pytest.mark.parametrize("value", ["-5", "true", "1" + "0" * 4000, "1.5", '"7"'])
def test_global_timestep(ckpt_dir, marker, value):
    meta = read_meta(ckpt_dir)
    meta["state"]["global_timestep"] = "@@"
    (ckpt_dir / META).write_text(json.dumps(meta).replace('"@@"', value))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "global_timestep|not valid JSON|cannot be read")


@pytest.mark.parametrize("value", [True, 1.0, "1", 2, 0, None])
def test_format_version(ckpt_dir, marker, value):
    edit_meta(ckpt_dir, lambda m: m.update(format_version=value))
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "format_version")


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda m: m.update(arrays_file=["x"]), "bad arrays_file"),
        (lambda m: m.update(arrays_file="../ckpt2/x.npz"), "bad arrays_file"),
        (lambda m: m["state"].update(x={"__ndarray__": 5}), "array references"),
        (lambda m: m["state"].update(x={"__dict__": 5}), "cannot be read"),
        (lambda m: m["state"].update(x={"__tuple__": 5}), "cannot be read"),
        (lambda m: m["state"].update(x={"__dict__": [[{"a": 1}, 2]]}), "cannot be read"),
        (lambda m: m.update(observation_space={"type": "Box", "shape": [-1]}), "invalid encoded space"),
        (
            lambda m: m.update(observation_space={"type": "Discrete", "n": 10**400}),
            "invalid encoded space|cannot",
        ),
        (lambda m: m.update(policy_class_recipe="x"), "invalid policy class recipe"),
        (lambda m: m.update(given_config=[1]), "given_config is a list|cannot be"),
    ],
)
def test_malformed_metadata_gives_checkpoint_errors(ckpt_dir, marker, damage, match):
    edit_meta(ckpt_dir, damage)
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, match)


def test_bad_encoding(ckpt_dir, marker):
    (ckpt_dir / META).write_bytes(b'{"format": "\xff\xfe"}')
    assert_refused(ckpt_dir, _policy_load(ckpt_dir), marker, "not valid JSON")


def test_missing_directory_is_a_checkpoint_error_and_file_not_found(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist") as e:
        Policy.from_checkpoint(str(tmp_path / "nope"))
    assert isinstance(e.value, FileNotFoundError)


# ------------------------------------------------------------------ CLI entry points
@pytest.fixture
def run_dir(tmp_path):
    from rlpolicy.cli import run_outputs

    env = gym.make("CartPole-v1")
    policy = PPOTorchPolicy(env.observation_space, env.action_space, dict(CONFIG))
    d = tmp_path / "run"
    run_outputs.save_checkpoint(
        policy, str(d), run_outputs.RunRecord(algo="ppo", framework="torch", env="CartPole-v1")
    )
    return d


CLI = {
    "evaluate": lambda d: ["evaluate", str(d), "--episodes", "1"],
    "export": lambda d: ["export", str(d), "--format", "torchscript", "--out", str(d.parent / "exported")],
    "train --resume": lambda d: [
        "train",
        "--algo",
        "ppo",
        "--framework",
        "torch",
        "--env",
        "CartPole-v1",
        "--out",
        str(d),
        "--resume",
    ],
}


def _cli_refused(d, argv, marker, capsys, match):
    from rlpolicy.cli import main

    before = snapshot(d)
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2
    assert "Traceback" not in "\n".join(err)
    assert any(__import__("re").search(match, line) for line in err[-1:]), err
    assert not marker.exists()
    assert snapshot(d) == before


@pytest.mark.parametrize("command", list(CLI))
def test_cli_refuses_untrusted_names(run_dir, marker, monkeypatch, capsys, command):
    name = make_evil_module(run_dir, marker)
    monkeypatch.chdir(run_dir)
    monkeypatch.syspath_prepend(str(run_dir))
    edit_meta(run_dir, lambda m: m["given_config"].update(callbacks=_imp(f"{name}:Evil")))
    try:
        _cli_refused(run_dir, CLI[command](run_dir), marker, capsys, "does not trust.*--trust-checkpoint")
    finally:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("command", list(CLI))
def test_cli_corrupt_checkpoint_is_one_line_exit_2(run_dir, marker, capsys, command):
    meta = read_meta(run_dir)
    os.remove(run_dir / meta["arrays_file"])
    os.symlink("/dev/zero", run_dir / meta["arrays_file"])
    _cli_refused(run_dir, CLI[command](run_dir), marker, capsys, "symbolic link")


def test_cli_overwrite_removes_only_files_rlpolicy_wrote(run_dir, capsys):
    from rlpolicy.cli import run_outputs

    (run_dir / "notes.txt").write_text("mine")
    edit_meta(run_dir, lambda m: m.update(arrays_file="notes.txt"))
    record = json.loads((run_dir / run_outputs.RUN_FILE).read_text())
    assert META in record["files"] and any(f.endswith(".npz") for f in record["files"])
    run_outputs.remove_run_outputs(str(run_dir))
    assert sorted(os.listdir(run_dir)) == ["notes.txt"]


def test_cli_trust_flag_loads_a_checkpoint_with_user_callbacks(run_dir, tmp_path):
    mod = tmp_path / "user_mod"
    mod.mkdir()
    (mod / "my_callbacks.py").write_text(
        "from rlpolicy.agents.callbacks import DefaultCallbacks\n\nclass MyCallbacks(DefaultCallbacks):\n    pass\n"
    )
    edit_meta(run_dir, lambda m: m["given_config"].update(callbacks=_imp("my_callbacks:MyCallbacks")))
    env = {**os.environ, "PYTHONPATH": str(mod), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "rlpolicy.cli", "evaluate", str(run_dir), "--episodes", "1"]
    refused = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--trust-checkpoint" in refused.stderr
    trusted = subprocess.run(
        cmd + ["--trust-checkpoint"], env=env, capture_output=True, text=True, timeout=300
    )
    assert trusted.returncode == 0, trusted.stderr
    assert "mean return" in trusted.stdout


# ------------------------------------------------------------------ legitimate paths
USER_MODULE = textwrap.dedent("""
    import torch.nn as nn
    from rlpolicy.agents.callbacks import DefaultCallbacks
    from rlpolicy.models.torch.fcnet import FullyConnectedNetwork

    class MyCallbacks(DefaultCallbacks):
        pass

    class MyModel(FullyConnectedNetwork):
        pass
""")

LOAD_IN_FRESH_PROCESS = textwrap.dedent("""
    import sys
    import rlpolicy
    from rlpolicy.policy.policy import Policy
    from rlpolicy._core.checkpoint import CheckpointError
    import user_mod
    try:
        Policy.from_checkpoint(sys.argv[1])
        print("loaded without trust")
    except CheckpointError as e:
        print("refused:", "does not trust" in str(e))
    rlpolicy.add_safe_globals([user_mod.MyCallbacks, user_mod.MyModel])
    policy = Policy.from_checkpoint(sys.argv[1])
    print(type(policy.callbacks).__name__, type(policy.model).__name__)
    print(Policy.from_checkpoint(sys.argv[1], trusted="imported").global_timestep)
""")


def test_user_classes_load_in_a_fresh_process_with_the_trust_step(tmp_path, monkeypatch):
    (tmp_path / "user_mod.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import user_mod

    try:
        config = {**CONFIG, "callbacks": user_mod.MyCallbacks, "model": {"custom_model": user_mod.MyModel}}
        policy = PPOTorchPolicy(OBS, ACT, config)
        policy.global_timestep = 11
        policy.export_checkpoint(str(tmp_path / "ckpt"))
    finally:
        sys.modules.pop("user_mod", None)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", LOAD_IN_FRESH_PROCESS, str(tmp_path / "ckpt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["refused: True", "MyCallbacks MyModel", "11"]


def test_safe_globals_context_and_registry(ckpt_dir):
    from rlpolicy._core import checkpoint_trust as trust
    from rlpolicy.agents.callbacks import DefaultCallbacks

    class Local(DefaultCallbacks):
        pass

    Local.__qualname__ = "LocalCallbacks"  # a module-level name, as a user class has
    edit_meta(ckpt_dir, lambda m: m["given_config"].update(callbacks=_imp(f"{__name__}:LocalCallbacks")))
    with pytest.raises(CheckpointError, match="does not trust"):
        Policy.from_checkpoint(str(ckpt_dir))
    with trust.safe_globals([Local]):
        assert Local in trust.get_safe_globals()
        assert isinstance(Policy.from_checkpoint(str(ckpt_dir)).callbacks, Local)
    assert Local not in trust.get_safe_globals()
    assert isinstance(Policy.from_checkpoint(str(ckpt_dir), safe_globals=[Local]).callbacks, Local)
    with pytest.raises(TypeError, match="not a class or a Python function"):
        trust.add_safe_globals([len])  # print may be a Python function once Ray ran
    with pytest.raises(ValueError, match="trusted="):
        Policy.from_checkpoint(str(ckpt_dir), trusted="yes")


def test_registered_custom_model_is_trusted(ckpt_dir):
    from rlpolicy.models.catalog import ModelCatalog
    from rlpolicy.models.torch.fcnet import FullyConnectedNetwork

    class RegisteredNet(FullyConnectedNetwork):
        pass

    RegisteredNet.__qualname__ = "RegisteredNet"
    edit_meta(
        ckpt_dir, lambda m: m["given_config"]["model"].update(custom_model=_imp(f"{__name__}:RegisteredNet"))
    )
    with pytest.raises(CheckpointError, match="does not trust"):
        Policy.from_checkpoint(str(ckpt_dir))
    ModelCatalog.register_custom_model(f"registered_{uuid.uuid4().hex[:6]}", RegisteredNet)
    assert type(Policy.from_checkpoint(str(ckpt_dir)).model) is RegisteredNet


# ------------------------------------------------------------------ 7: concurrent saves
WRITER = textwrap.dedent("""
    import sys, numpy as np, gymnasium as gym
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy
    p = PPOTorchPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2),
                       {"framework": "torch", "model": {"fcnet_hiddens": [8]}})
    seed = int(sys.argv[2])
    for i in range(int(sys.argv[3])):
        w = p.get_weights()
        # Half the saves repeat earlier weights, so both writers commit the same content name.
        p.set_weights({k: np.full_like(v, (i % 3 + 1) * 0.1) for k, v in w.items()})
        p.global_timestep = i % 3 + 1
        p.export_checkpoint(sys.argv[1])
    print("done", flush=True)
""")


def test_two_writers_and_a_reader(template, tmp_path):
    d = tmp_path / "shared"
    shutil.copytree(template, d)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(d), str(s), "60"], env=env, stderr=subprocess.PIPE
        )
        for s in (1, 2)
    ]
    loads = 0
    try:
        while any(w.poll() is None for w in writers):
            policy = Policy.from_checkpoint(str(d))  # must never fail while the writers run
            weights = np.concatenate([w.ravel() for w in policy.get_weights().values()])
            if policy.global_timestep:  # (0: the template, before the first save)
                np.testing.assert_allclose(weights, 0.1 * policy.global_timestep, atol=1e-6)
            loads += 1
    finally:
        for w in writers:
            w.wait(timeout=300)
    assert all(w.returncode == 0 for w in writers), [w.stderr.read() for w in writers]
    Policy.from_checkpoint(str(d))
    npz = [n for n in os.listdir(d) if n.endswith(".npz")]
    assert npz == [read_meta(d)["arrays_file"]]  # no orphans
    assert not [n for n in os.listdir(d) if n.startswith(".tmp-")]
    assert loads > 0


def test_a_save_waits_for_the_one_in_progress(ckpt_dir, monkeypatch):
    # Issue 28's deterministic repro: writer B pauses between its JSON replace and its
    # clean-up; writer A saves (unchanged weights) meanwhile. With the lock A waits.
    policy = PPOTorchPolicy(OBS, ACT, dict(CONFIG))
    paused, release = threading.Event(), threading.Event()
    real = ckpt._fsync_dir

    def pause_once(path):
        real(path)
        if threading.current_thread().name == "B":
            paused.set()
            release.wait(30)

    monkeypatch.setattr(ckpt, "_fsync_dir", pause_once)
    b = threading.Thread(target=policy.export_checkpoint, args=(str(ckpt_dir),), name="B")
    a = threading.Thread(target=policy.export_checkpoint, args=(str(ckpt_dir),), name="A")
    b.start()
    assert paused.wait(30)
    a.start()
    a.join(0.5)
    assert a.is_alive(), "A saved while B was inside its commit"
    release.set()
    b.join(30)
    a.join(30)
    Policy.from_checkpoint(str(ckpt_dir))
    assert [n for n in os.listdir(ckpt_dir) if n.endswith(".npz")] == [read_meta(ckpt_dir)["arrays_file"]]


def test_disk_full_save_names_the_path_and_keeps_the_previous(ckpt_dir, monkeypatch):
    before = snapshot(ckpt_dir)
    policy = PPOTorchPolicy(OBS, ACT, dict(CONFIG))

    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "_fsync_write", full)
    with pytest.raises(OSError, match=f"{ckpt_dir}.*No space left") as e:
        policy.export_checkpoint(str(ckpt_dir))
    assert e.value.errno == 28
    monkeypatch.undo()
    assert snapshot(ckpt_dir) == before
    Policy.from_checkpoint(str(ckpt_dir))


def test_load_of_a_fine_checkpoint_still_matches(template):
    restored = Policy.from_checkpoint(str(template))
    fresh = copy.deepcopy(restored.get_weights())
    assert type(restored) is PPOTorchPolicy and fresh
