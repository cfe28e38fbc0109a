"""Checks shared by the pipeline-export tests of torch (test_pipeline_export_torch.py)
and TF (test_pipeline_export_tf.py): loading an export through its consumer, the
numpy formulas an artifact's outputs must follow (the env mapping of Box actions, the
noise-driven samplers), a refused export leaving nothing behind, and the CLI's
``export --pipeline``.

Nothing here imports torch or TensorFlow: the framework's own consumer (torch.jit.load,
tf.saved_model.load, ...) is passed in by the test file.
"""

import json
import os

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy._core.pipeline_contract import PipelineContract, PipelineMismatchError

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
BOX_ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
TUPLE_OBS = gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.Box(-2.0, 2.0, (3,), np.float32)))
DICT_ACT = gym.spaces.Dict({"move": BOX_ACT, "pick": gym.spaces.Discrete(3)})
TUPLE_ACT = gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]), BOX_ACT))
IMAGE = gym.spaces.Box(0.0, 1.0, (42, 42, 3), np.float32)
# The action space of the noise-formula tests: a uniform draw for the Categorical, two
# for the MultiCategorical, two normal draws for the Gaussian (5 noise columns).
NOISE_ACT = gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2]), BOX_ACT))


# ------------------------------------------------------------------ loading
def load_pipeline(export_dir, native_runner):
    """(contract, run) for an export: ``run(feeds) -> {output name: array}`` in the
    artifact's consumer, reading nothing but the two files.

    An ONNX artifact runs in onnxruntime (its input and output names checked against
    ``pipeline.json``); any other in ``native_runner(path, in_names, out_names)``, which
    returns the framework's ``run``.
    """
    with open(os.path.join(export_dir, "pipeline.json"), encoding="utf-8") as f:
        meta = json.load(f)
    contract = PipelineContract.from_json(meta)
    path = os.path.join(export_dir, meta["artifact"])
    in_names = [i["name"] for i in meta["inputs"]]
    out_names = [o["name"] for o in meta["outputs"]]
    if meta["format"] != "onnx":
        return contract, native_runner(path, in_names, out_names)
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == in_names
    assert [o.name for o in session.get_outputs()] == out_names

    def run(feeds):
        return dict(zip(out_names, session.run(None, {k: feeds[k] for k in in_names})))

    return contract, run


# ------------------------------------------------------------------ numpy references
def flat_actions(actions):
    """Leaves of a (nested) batched action in tree order (sorted Dict keys)."""
    if isinstance(actions, dict):
        return [leaf for k in sorted(actions) for leaf in flat_actions(actions[k])]
    if isinstance(actions, tuple):
        return [leaf for a in actions for leaf in flat_actions(a)]
    return [np.asarray(actions)]


def flat_spaces(space):
    """Leaf spaces of a (nested) space in the same order as :func:`flat_actions`."""
    if isinstance(space, gym.spaces.Dict):
        return [leaf for k in sorted(space.spaces) for leaf in flat_spaces(space[k])]
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for s in space.spaces for leaf in flat_spaces(s)]
    return [space]


def to_env(action, space, normalize, clip):
    """RLlib 1.11's mapping of a float Box action to the env, by its formula."""
    if not (isinstance(space, gym.spaces.Box) and space.dtype == np.float32):
        return action
    if normalize:
        return np.clip(space.low + (action + 1.0) * (space.high - space.low) / 2.0, space.low, space.high)
    return np.clip(action, space.low, space.high) if clip else action


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def inverse_cdf(probs, u):
    """Index of the first cumulative probability above u (numpy, row by row)."""
    out = np.empty(len(u), np.int64)
    for i, (p, v) in enumerate(zip(probs, u)):
        out[i] = min(int(np.searchsorted(np.cumsum(p), v, side="right")), len(p) - 1)
    return out


# ------------------------------------------------------------------ output checks
def check_step(got, contract, actions, state_out, extra, act_space, normalize, clip, rtol):
    """One step of an artifact (``got``) against the policy's ``compute_actions(explore=False)``
    results: the env-mapped actions (dtype, batch size, bounds), the distribution inputs,
    the state outputs, and the sampled actions' shapes, dtypes and bounds."""
    leaf_spaces = flat_spaces(act_space)
    want = [to_env(a, s, normalize, clip) for a, s in zip(flat_actions(actions), leaf_spaces)]
    names = contract.names("action", outputs=True)
    assert len(names) == len(want)
    n = len(extra["action_dist_inputs"])
    for name, w, s in zip(names, want, leaf_spaces):
        if isinstance(s, gym.spaces.Box) and s.dtype == np.float32:
            assert got[name].dtype == np.float32
            np.testing.assert_allclose(got[name], w, atol=1e-4, rtol=rtol)
            if normalize or clip:
                assert np.all(got[name] >= s.low - 1e-6) and np.all(got[name] <= s.high + 1e-6)
        else:
            assert got[name].dtype == np.int64
            np.testing.assert_array_equal(got[name], w)
        assert got[name].shape[0] == n
    np.testing.assert_allclose(got["action_dist_inputs"], extra["action_dist_inputs"], atol=1e-4, rtol=rtol)
    state_names = contract.names("state", outputs=True)
    assert len(state_out) == len(state_names)
    for name, s in zip(state_names, state_out):
        np.testing.assert_allclose(got[name], s, atol=1e-4, rtol=rtol)
    # Sampled actions: the deterministic ones' shapes and dtypes, inside the space
    # wherever the mapping bounds them (or the space is discrete).
    for det, smp, s in zip(names, contract.names("sampled_action", outputs=True), leaf_spaces):
        assert got[smp].shape == got[det].shape and got[smp].dtype == got[det].dtype
        if not isinstance(s, gym.spaces.Box) or normalize or clip:
            assert all(s.contains(np.asarray(a, s.dtype)) for a in got[smp])


def check_noise_samples(got, zero, logits, noise, box_atol):
    """The sampled actions of a :data:`NOISE_ACT` artifact (``normalize_actions=True``)
    fed ``noise``, by numpy formula: inverse CDFs of the softmax for the categoricals,
    ``mean + exp(log_std) * z`` for the Gaussian (then unsquashed); ``zero``, the
    outputs for all-zero draws, has the mean as its Gaussian sample.

    ``logits`` are the distribution inputs ``[4 | 3, 2 | mean 2, log std 2]``.
    """
    np.testing.assert_array_equal(got["sampled_actions_0"], inverse_cdf(softmax(logits[:, :4]), noise[:, 0]))
    np.testing.assert_array_equal(
        got["sampled_actions_1"],
        np.stack(
            [
                inverse_cdf(softmax(logits[:, 4:7]), noise[:, 1]),
                inverse_cdf(softmax(logits[:, 7:9]), noise[:, 2]),
            ],
            axis=1,
        ),
    )
    assert len(set(got["sampled_actions_0"].tolist())) > 1  # (the draws matter)
    raw = logits[:, 9:11] + np.exp(logits[:, 11:13]) * noise[:, 3:5]
    np.testing.assert_allclose(got["sampled_actions_2"], to_env(raw, BOX_ACT, True, False), atol=box_atol)
    np.testing.assert_allclose(zero["sampled_actions_2"], zero["actions_2"], atol=1e-6)


def check_squashed_samples(sampled, dist_inputs, noise):
    """A SquashedGaussian over Box(-1, 1, (2,)) fed normal ``noise``:
    ``tanh(mean + std * z)`` mapped onto the bounds."""
    mean, log_std = dist_inputs[:, :2], dist_inputs[:, 2:]
    std = np.exp(np.clip(log_std, -5.0, 2.0))  # RLlib 1.11 clips log stds to [-5, 2]
    want = np.clip((np.tanh(mean + std * noise) + 1.0) / 2.0 * 2.0 - 1.0, -1.0, 1.0)
    np.testing.assert_allclose(sampled, want, atol=1e-5)


# ------------------------------------------------------------------ refusals
def check_mismatch_refused_and_not_written(policy, tmp_path):
    """``policy`` (whose compute_actions disagrees with its model) is refused in both
    formats, naming the first differing output; no artifact or temporary file is left,
    and a directory the export made goes again."""
    (tmp_path / "keep.txt").write_text("mine")
    for onnx in (None, 13):
        with pytest.raises(
            PipelineMismatchError,
            match=r"batch size 1, step 0: output 'actions' "
            r"differs from compute_actions\(explore=False\)",
        ):
            policy.export_model(str(tmp_path), onnx=onnx, pipeline=True)
        assert sorted(os.listdir(tmp_path)) == ["keep.txt"]  # no artifact, no temporary file
    with pytest.raises(PipelineMismatchError):
        policy.export_model(str(tmp_path / "new"), pipeline=True)
    assert not (tmp_path / "new").exists()  # a directory made for the export goes again


UNBOUNDED = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


def check_unbounded_normalized_refused(policy, tmp_path):
    """A normalize_actions policy over :data:`UNBOUNDED` is refused naming the bounds."""
    with pytest.raises(
        ValueError,
        match=r"normalize_actions=True unsquashes onto the bounds of "
        r"Box\(-inf, inf, \(2,\), float32\)",
    ):
        policy.export_model(str(tmp_path), pipeline=True)


# ------------------------------------------------------------------ the CLI
def run_cli(argv, capsys):
    """(exit code, stdout, stderr) of ``rlpolicy`` with ``argv``."""
    from rlpolicy.cli import commands

    try:
        code = commands.main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def train_cartpole_pg(run_dir, capsys, steps, framework=None):
    """A PG run on CartPole for ``steps`` timesteps into ``run_dir`` (ended by that budget)."""
    argv = ["train", "--algo", "pg", "--env", "CartPole-v1"]
    if framework:
        argv += ["--framework", framework]
    argv += ["--stop-timesteps", str(steps), "--stop-reward", "1e9", "--eval-episodes", "1"]
    argv += ["--out", str(run_dir), "--progress-bar", "off"]
    argv += ["--config", json.dumps({"train_batch_size": steps, "model": {"fcnet_hiddens": [8]}})]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err  # the step budget ends the run (a normal end)


def check_cli_exports(run_dir, exports, capsys, native_runner):
    """``rlpolicy export RUN --format FMT --pipeline`` for each ``(fmt, artifact,
    consumer)``: it reports the verification, and the artifact gives CartPole actions."""
    for fmt, artifact, consumer in exports:
        code, out, err = run_cli(["export", str(run_dir), "--format", fmt, "--pipeline"], capsys)
        assert code == 0, err
        folder = run_dir / f"export_{fmt}_pipeline"  # (CHECKPOINT is the run folder)
        assert (
            f"exported {fmt} pipeline to {folder / artifact}; verified: loaded back with "
            f"{consumer}, max |actions - compute_actions| = " in out
        )
        contract, run_artifact = load_pipeline(str(folder), native_runner)
        obs = np.array([[0.01, -0.02, 0.03, 0.0], [0.1, 0.5, -0.1, -0.4]], np.float32)
        actions = run_artifact(contract.feeds(obs))["actions"]
        assert actions.dtype == np.int64 and set(actions.tolist()) <= {0, 1}
