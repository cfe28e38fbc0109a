"""Exporting eager TF policies: SavedModel, ONNX and ``tf.train.Checkpoint``.

* SavedModel: a ``tf.Module`` that tracks the model's variables and carries a
  ``serving_default`` signature. Its inputs are named after the model's
  columns (``obs``, plus ``prev_actions``/``prev_rewards`` when the model
  reads them), ``state_in_<i>`` and ``seq_lens`` for recurrent models; its
  outputs are ``output`` (the model output, i.e. the action-distribution
  inputs) and ``state_out_<i>``. Axis 0 of everything is the batch.
  Load it with ``tf.saved_model.load(dir).signatures["serving_default"]``.
* ONNX (``model.onnx``, via ``tf2onnx``): the same function with the same
  input and output names.
* Checkpoint: ``tf.train.Checkpoint`` files ``<prefix>.index`` and
  ``<prefix>.data-*`` holding the model variables (by ``get_weights(as_dict=True)`` key),
  the optimizers and the global timestep; :func:`make_tf_checkpoint` builds
  the matching object to ``read()`` them into another policy.

Everything here takes the model, specs, optimizers and values, never the
policy. Tensorflow is imported on first use.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, List, Sequence

import numpy as np

from rlpolicy.policy._eager.variables import named_variables
from rlpolicy.policy._tf.export import import_tf2onnx

_NON_INPUT_COLUMNS = ("is_training", "seq_lens", "infos")


def _tf() -> Any:
    from rlpolicy.utils.framework import try_import_tf

    return try_import_tf(error=True)[1]


def _spec(name: str, value: Any) -> Any:
    tf = _tf()
    arr = np.asarray(value)
    dtype = tf.as_dtype(arr.dtype if arr.dtype != np.float64 else np.float32)
    return tf.TensorSpec([None] + list(arr.shape[1:]), dtype, name=name)


def serving_specs(model: Any, dummy_batch: Any) -> Dict[str, Any]:
    """The ``TensorSpec`` of each serving input, in input order.

    Args:
        model: The policy's model (reads its ``view_requirements`` and
            ``get_initial_state()``).
        dummy_batch: A batch with a column for every model input (the
            policy's dummy batch).
    """
    specs: Dict[str, Any] = {}
    vrs = getattr(model, "view_requirements", {}) or {}
    keys = ["obs"] + [
        k
        for k, vr in vrs.items()
        if k != "obs"
        and getattr(vr, "used_for_compute_actions", True)
        and not k.startswith(("state_in_", "state_out_"))
        and k not in _NON_INPUT_COLUMNS
        and k in dummy_batch
    ]
    for key in keys:
        specs[key] = _spec(key, dict.__getitem__(dummy_batch, key))
    init_state = list(model.get_initial_state()) if hasattr(model, "get_initial_state") else []
    states: List[np.ndarray] = [np.asarray(s)[None] for s in init_state] or _memory_view_states(vrs)
    for i, s in enumerate(states):
        specs[f"state_in_{i}"] = _spec(f"state_in_{i}", s)
    if states:
        specs["seq_lens"] = _tf().TensorSpec([None], _tf().int32, name="seq_lens")
    return specs


def _memory_view_states(vrs: Dict[str, Any]) -> List[np.ndarray]:
    """Zero [1, window, ...] states of ``state_in_i`` views over a shift range (attention
    nets: no initial state, the memory is a window of past ``state_out_i``)."""
    states: List[np.ndarray] = []
    while f"state_in_{len(states)}" in vrs:
        vr = vrs[f"state_in_{len(states)}"]
        if getattr(vr, "shift_from", None) is None or getattr(vr.space, "shape", None) is None:
            break
        states.append(np.zeros((1, len(vr.shift_arr)) + tuple(vr.space.shape), vr.space.dtype))
    return states


def _serve(model: Any, specs: Dict[str, Any], inputs: Dict[str, Any]) -> Dict[str, Any]:
    num_states = sum(1 for k in specs if k.startswith("state_in_"))
    columns = {k: v for k, v in inputs.items() if not k.startswith("state_in_") and k != "seq_lens"}
    state = [inputs[f"state_in_{i}"] for i in range(num_states)]
    out, state_out = model(columns, state, inputs.get("seq_lens"))
    result = {"output": out}
    for i, s in enumerate(state_out or []):
        result[f"state_out_{i}"] = s
    return result


def export_saved_model(model: Any, specs: Dict[str, Any], export_dir: str) -> None:
    """Writes a SavedModel with a ``serving_default`` signature to ``export_dir``."""
    tf = _tf()
    module = tf.Module()
    module.model_variables = list(model.variables())
    # One tf.function taking a dict of tensors keyed like ``specs``.
    module.serve = tf.function(
        lambda inputs: _serve(model, specs, inputs), input_signature=[specs], autograph=False
    )
    os.makedirs(export_dir, exist_ok=True)
    tf.saved_model.save(
        module, export_dir, signatures={"serving_default": module.serve.get_concrete_function()}
    )


def export_onnx(model: Any, specs: Dict[str, Any], export_dir: str, opset: int) -> str:
    """Writes ``export_dir/model.onnx`` (via tf2onnx) and returns its path.

    Raises:
        RuntimeError: If ``tf2onnx`` is not installed.
    """
    tf2onnx = import_tf2onnx()
    tf = _tf()
    names: List[str] = list(specs)
    flat_specs = [specs[k] for k in names]

    def flat(*tensors: Any) -> Dict[str, Any]:
        return _serve(model, specs, dict(zip(names, tensors)))

    fn = tf.function(flat, input_signature=flat_specs, autograph=False)
    os.makedirs(export_dir, exist_ok=True)
    path = os.path.join(export_dir, "model.onnx")
    fd, tmp = tempfile.mkstemp(dir=export_dir, prefix=".tmp-", suffix="model.onnx")
    os.close(fd)
    try:
        tf2onnx.convert.from_function(fn, input_signature=flat_specs, opset=int(opset), output_path=tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def make_tf_checkpoint(model: Any, optimizers: Sequence[Any], global_timestep: int) -> Any:
    """A ``tf.train.Checkpoint`` over a policy's model variables (by
    ``get_weights(as_dict=True)`` key), its optimizers (``optimizer_<i>``) and
    its global timestep (an int64 variable).

    ``make_tf_checkpoint(other.model, other._optimizers, 0).read(path)`` reads
    what ``policy.export_checkpoint`` wrote into another policy of the same
    class; :func:`restored_timestep` then gives the timestep that was read.
    """
    tf = _tf()
    kwargs: Dict[str, Any] = {
        "model": named_variables(model),
        "global_timestep": tf.Variable(int(global_timestep), dtype=tf.int64, trainable=False),
    }
    for i, opt in enumerate(optimizers or []):
        kwargs[f"optimizer_{i}"] = opt
    return tf.train.Checkpoint(**kwargs)


def restored_timestep(ckpt: Any) -> int:
    """The global timestep held by ``ckpt`` (from :func:`make_tf_checkpoint`)."""
    return int(ckpt.global_timestep.numpy())


__all__ = [
    "serving_specs",
    "export_saved_model",
    "export_onnx",
    "make_tf_checkpoint",
    "restored_timestep",
]
