"""Exports a policy's model for serving and checks the file by loading it back.

Formats: ``torchscript`` (torch policies; loaded with ``torch.jit.load``),
``onnx`` (every framework; run with ``onnxruntime``) and ``savedmodel``
(TensorFlow policies; loaded with ``tf.saved_model.load``). The loaded
artifact is run on real observations and its output compared with the
policy's own model output on the same observations.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, Tuple

import numpy as np

EXPORT_FORMATS = ("torchscript", "onnx", "savedmodel")
_MARKER = "rlpolicy_export.json"
ONNX_OPSET = 13


@dataclass
class ExportReport:
    """Where an export went and how it was verified."""

    format: str
    path: str  # the exported file (or the SavedModel directory)
    loader: str  # what loaded it back
    num_observations: int
    max_abs_diff: float  # |loaded output - policy model output|, max over all entries


def formats_for(framework: str) -> Tuple[str, ...]:
    """The export formats a policy of ``framework`` supports."""
    return ("torchscript", "onnx") if framework == "torch" else ("savedmodel", "onnx")


def required_modules(framework: str, fmt: str) -> Tuple[str, ...]:
    """The packages (beyond the framework) exporting ``fmt`` and verifying it needs;
    they come with ``pip install 'rlpolicy[onnx]'``."""
    if fmt != "onnx":
        return ()
    return ("onnx", "onnxruntime") if framework == "torch" else ("tf2onnx", "onnxruntime")


def sample_observations(
    env_creator: Callable[[], Any], num: int = 16, seed: int = 0, policy: Any = None
) -> np.ndarray:
    """``num`` observations from short random-action walks (real states, unlike
    samples of CartPole's unbounded observation space); with ``policy``, as the
    policy (and its export) takes them: Dict/Tuple observations flattened."""
    from rlpolicy.policy._obs_prep import flatten_single_obs

    env = env_creator()
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for i in range(num):
        out.append(np.asarray(obs if policy is None else flatten_single_obs(policy, obs), dtype=np.float32))
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset(seed=seed + i + 1)
    env.close()
    return np.stack(out)


def _check_format(fmt: str, framework: str) -> None:
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")
    if fmt not in formats_for(framework):
        raise ValueError(
            f"format {fmt!r} needs a {'torch' if fmt == 'torchscript' else 'TensorFlow'} "
            f"policy, but this checkpoint's framework is {framework!r}; "
            f"choose one of: {', '.join(formats_for(framework))}"
        )


def _prepare_target(out_dir: str) -> str:
    """A fresh temporary directory beside ``out_dir`` (which must be ours or empty)."""
    out_dir = os.path.abspath(out_dir)
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not os.path.isfile(os.path.join(out_dir, _MARKER)):
        raise ValueError(
            f"export directory {out_dir!r} is not empty and was not written by "
            "rlpolicy export; remove it or choose another --out"
        )
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp-export-")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it owner-only
    return tmp


def export_and_verify(policy: Any, framework: str, fmt: str, out_dir: str, obs: np.ndarray) -> ExportReport:
    """Exports ``policy``'s model as ``fmt`` into ``out_dir`` and verifies it.

    The export is written to a temporary directory, loaded back by its real
    consumer and compared with the policy; only then does it replace
    ``out_dir`` (a previous export there is replaced).

    Raises:
        ValueError: For a format the framework cannot export, or an
            ``out_dir`` holding files of something else.
        RuntimeError: If the loaded export's output differs from the policy's.
    """
    _check_format(fmt, framework)
    tmp = _prepare_target(out_dir)
    try:
        rel, loader, got = _export_and_load(policy, framework, fmt, tmp, obs)
        want = reference_output(policy, framework, obs)
        if got.shape != want.shape:
            raise RuntimeError(
                f"the {fmt} export does not reproduce the policy: output shape "
                f"{got.shape}, the policy's {want.shape}"
            )
        diff = float(np.max(np.abs(np.asarray(got, np.float64) - want))) if want.size else 0.0
        if not diff <= 1e-4 * max(1.0, float(np.max(np.abs(want)))):
            raise RuntimeError(
                f"the {fmt} export does not reproduce the policy: "
                f"max |difference| {diff:.3g} on {len(obs)} observations"
            )
        with open(os.path.join(tmp, _MARKER), "w", encoding="utf-8") as f:
            json.dump({"format": fmt, "framework": framework, "file": rel}, f)
        _replace_dir(tmp, out_dir)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
    return ExportReport(fmt, os.path.join(os.path.abspath(out_dir), rel), loader, len(obs), diff)


def export_pipeline_and_verify(policy: Any, framework: str, fmt: str, out_dir: str) -> ExportReport:
    """Exports ``policy``'s whole action pipeline as ``fmt`` into ``out_dir``
    (``export_model(..., pipeline=True)``, which loads the artifact in its
    consumer and checks it against ``compute_actions(explore=False)``; see
    docs/export_pipeline.md); a previous export there is replaced.

    Raises:
        ValueError: For a format the framework cannot export, a policy whose
            ``export_model`` has no pipeline export, or an ``out_dir`` holding
            files of something else.
        RuntimeError: If the pipeline does not reproduce the policy.
    """
    import inspect

    _check_format(fmt, framework)
    if "pipeline" not in inspect.signature(policy.export_model).parameters:
        raise ValueError(f"{type(policy).__name__} ({framework}) has no pipeline export")
    tmp = _prepare_target(out_dir)
    try:
        if fmt == "onnx":
            policy.export_model(tmp, onnx=ONNX_OPSET, pipeline=True)
        else:
            policy.export_model(tmp, pipeline=True)
        with open(os.path.join(tmp, "pipeline.json"), encoding="utf-8") as f:
            meta = json.load(f)
        with open(os.path.join(tmp, _MARKER), "w", encoding="utf-8") as f:
            json.dump({"format": fmt, "framework": framework, "file": meta["artifact"], "pipeline": True}, f)
        _replace_dir(tmp, out_dir)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
    verified = meta["verified"]
    return ExportReport(
        f"{fmt} pipeline",
        os.path.join(os.path.abspath(out_dir), meta["artifact"]),
        verified["consumer"],
        sum(verified["batch_sizes"]) * verified["steps"],
        float(verified["max_abs_diff"]),
    )


def _export_and_load(
    policy: Any, framework: str, fmt: str, tmp: str, obs: np.ndarray
) -> Tuple[str, str, np.ndarray]:
    """Exports into ``tmp``; returns (file relative to tmp, loader name, loaded model's output)."""
    if fmt == "savedmodel":
        # TF graph policies refuse to write into an existing directory.
        policy.export_model(os.path.join(tmp, "saved_model"))
        return "saved_model", "tf.saved_model.load", _run_saved_model(os.path.join(tmp, "saved_model"), obs)
    if fmt == "onnx":
        policy.export_model(tmp, onnx=ONNX_OPSET)
        rel = "model.onnx" if os.path.isfile(os.path.join(tmp, "model.onnx")) else "saved_model.onnx"
        output = _tf_graph_output_name(policy, framework)
        return rel, "onnxruntime.InferenceSession", _run_onnx(os.path.join(tmp, rel), obs, output)
    policy.export_model(tmp)
    return "model.pt", "torch.jit.load", _run_torchscript(os.path.join(tmp, "model.pt"), obs)


def _replace_dir(src: str, dst: str) -> None:
    dst = os.path.abspath(dst)
    if os.path.isdir(dst):
        shutil.rmtree(dst)  # a previous export (checked by _prepare_target) or an empty dir
    os.replace(src, dst)


def reference_output(policy: Any, framework: str, obs: np.ndarray) -> np.ndarray:
    """What the exported model should output for ``obs``: the policy model's
    output (TF graph policies export their action-distribution inputs)."""
    if framework == "torch":
        import torch

        model = policy.model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out, _ = model({"obs": torch.as_tensor(obs, device=policy.device)}, [], None)
        finally:
            model.train(was_training)
        return out.cpu().numpy().astype(np.float64)
    if framework == "tf":
        _, _, extra = policy.compute_actions(obs, explore=False)
        return np.asarray(extra["action_dist_inputs"], np.float64)
    import tensorflow as tf

    out, _ = policy.model({"obs": tf.constant(obs)}, [], None)
    return out.numpy().astype(np.float64)


def _tf_graph_output_name(policy: Any, framework: str) -> str:
    if framework == "tf":
        return policy._dist_inputs.name
    return "output"


def _run_torchscript(path: str, obs: np.ndarray) -> np.ndarray:
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch>=2.9 flags jit.load
        model = torch.jit.load(path)
    with torch.no_grad():
        # Stateless models were traced with a dummy state [1.0] and seq_lens [1].
        out, _ = model({"obs": torch.from_numpy(obs)}, [torch.ones(1)], torch.ones(1, dtype=torch.int32))
    return out.numpy()


def _onnx_feed(inputs: Any, obs: np.ndarray) -> Dict[str, np.ndarray]:
    dtypes = {
        "tensor(float)": np.float32,
        "tensor(int32)": np.int32,
        "tensor(int64)": np.int64,
        "tensor(bool)": np.bool_,
        "tensor(double)": np.float64,
    }
    feed = {}
    for inp in inputs:
        name, dtype = inp.name, dtypes.get(inp.type, np.float32)
        if name.split(":")[0] in ("obs", "observations"):
            feed[name] = obs.astype(dtype)
        elif name.startswith(("state_in_", "seq_lens")):
            feed[name] = np.ones(1, dtype)  # a stateless model's dummy state
        else:  # is_training, timestep, prev_actions, prev_rewards ...
            shape = [len(obs) if not isinstance(d, int) else d for d in inp.shape]
            feed[name] = np.zeros(shape, dtype)
    return feed


def _run_onnx(path: str, obs: np.ndarray, output_name: str) -> np.ndarray:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # tf2onnx graphs warn about an is_exploring initializer
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    if output_name not in names:
        raise RuntimeError(f"ONNX model {path!r} has no output {output_name!r}; outputs: {names}")
    (out,) = sess.run([output_name], _onnx_feed(sess.get_inputs(), obs))
    return np.asarray(out)


def _run_saved_model(path: str, obs: np.ndarray) -> np.ndarray:
    import tensorflow as tf

    fn = tf.saved_model.load(path).signatures["serving_default"]
    _, specs = fn.structured_input_signature
    feeds = {}
    for name, spec in specs.items():
        if name in ("obs", "observations"):
            feeds[name] = tf.constant(obs, spec.dtype)
        else:  # is_training, timestep, prev_* ...
            shape = [len(obs) if d is None else d for d in spec.shape.as_list()]
            feeds[name] = tf.zeros(shape, spec.dtype)
    out = fn(**feeds)
    key = "output" if "output" in out else "action_dist_inputs"
    return out[key].numpy()
