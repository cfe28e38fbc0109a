"""Exporting a torch ``ModelV2`` for serving: TorchScript and ONNX.

Only used by ``TorchPolicy.export_model``. The model is wrapped in a small
``nn.Module`` so that tracing goes through ``ModelV2.__call__`` (which adds
"obs_flat" and restores Dict/Tuple observations) instead of ``forward``.

* TorchScript (``model.pt``): RLlib's calling convention,
  ``loaded(input_dict, state_ins, seq_lens) -> (output, state_outs)``.
* ONNX (``model.onnx``): one graph input per column, per state tensor and
  for "seq_lens"; outputs "output" and "state_out_<i>"; axis 0 of every
  input and output is the dynamic "batch_size".

Files are written to a temporary name first and renamed into place, so a
failed export never leaves a truncated file behind.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from rlpolicy.utils.framework import try_import_torch

torch, nn = try_import_torch()

#: Columns never fed to an exported model.
_NON_INPUT_COLUMNS = ("is_training", "seq_lens", "infos")


def select_export_inputs(
    view_requirements: Dict[str, Any], dummy_batch: Any
) -> Tuple[Dict[str, np.ndarray], List[np.ndarray], np.ndarray]:
    """Picks the model inputs from a dummy batch, adding a dummy state for non-RNNs.

    Args:
        view_requirements: The model's view requirements; the columns it uses
            for action computation (other than "state_in_<i>") become inputs.
        dummy_batch: A (dummy) SampleBatch with those columns.

    Returns:
        ``(inputs, state_ins, seq_lens)`` as numpy arrays. For a model without
        state, ``state_ins`` is ``[array([1.0])]`` and ``seq_lens`` is
        ``array([1])``: torch cannot trace a model whose state list is empty.
    """
    inputs: Dict[str, np.ndarray] = {}
    for key, vr in view_requirements.items():
        if key.startswith("state_in_") or key.startswith("state_out_") or key in _NON_INPUT_COLUMNS:
            continue
        if not getattr(vr, "used_for_compute_actions", True) or key not in dummy_batch:
            continue
        inputs[key] = np.asarray(_to_numpy(dummy_batch[key]))
    if "obs" not in inputs:
        inputs = {"obs": np.asarray(_to_numpy(dummy_batch["obs"])), **inputs}
    state_ins = []
    i = 0
    while f"state_in_{i}" in dummy_batch:
        state_ins.append(np.asarray(_to_numpy(dummy_batch[f"state_in_{i}"])))
        i += 1
    if state_ins:
        n = len(state_ins[0])
        seq_lens = np.ones(n, dtype=np.int32)
        inputs = {k: v[:n] for k, v in inputs.items()}
    else:
        state_ins = [np.array([1.0], dtype=np.float32)]
        seq_lens = np.array([1], dtype=np.int32)
    return inputs, state_ins, seq_lens


def _to_numpy(x: Any) -> Any:
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return x


_Module: Any = nn.Module  # (a placeholder class without torch, see try_import_torch)


class TracedModelWrapper(_Module):
    """Calls a ModelV2 through ``__call__`` with RLlib's (input_dict, state, seq_lens)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, input_dict: Dict[str, Any], state_ins: List[Any], seq_lens: Any):
        out, state_outs = self.model(dict(input_dict), list(state_ins), seq_lens)
        return out, list(state_outs)


class FlatModelWrapper(_Module):
    """Calls a ModelV2 with positional tensors: columns, then states, then seq_lens."""

    def __init__(self, model: Any, input_keys: Sequence[str], num_states: int):
        super().__init__()
        self.model = model
        self.input_keys = list(input_keys)
        self.num_states = num_states

    def forward(self, *tensors: Any):
        k = len(self.input_keys)
        input_dict = dict(zip(self.input_keys, tensors[:k]))
        state_ins = list(tensors[k : k + self.num_states])
        out, state_outs = self.model(input_dict, state_ins, tensors[-1])
        return (out, *state_outs)


def onnx_export(
    module: Any, args: Any, path: str, opset: int, input_names: List[str], output_names: List[str]
) -> None:
    """``torch.onnx.export`` with named inputs and outputs, each with a dynamic batch
    axis (axis 0), and ``dynamo=False`` where torch takes it (torch >= 2.5, whose
    default became the dynamo exporter in 2.9; older torch has only the TorchScript one)."""
    import inspect

    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(
        module,
        args,
        path,
        export_params=True,
        opset_version=opset,
        do_constant_folding=True,
        input_names=input_names,
        output_names=output_names,
        **legacy,
        dynamic_axes={name: {0: "batch_size"} for name in input_names + output_names},
    )


def _tensors(arrays: Any, device: Any) -> Any:
    if isinstance(arrays, dict):
        return {k: torch.as_tensor(v, device=device) for k, v in arrays.items()}
    if isinstance(arrays, (list, tuple)):
        return [torch.as_tensor(v, device=device) for v in arrays]
    return torch.as_tensor(arrays, device=device)


def _atomic_target(path: str) -> Tuple[int, str]:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    return tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))


def _write_atomically(path: str, write: Any) -> None:
    fd, tmp = _atomic_target(path)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def export_torchscript(
    model: Any,
    inputs: Dict[str, np.ndarray],
    state_ins: List[np.ndarray],
    seq_lens: np.ndarray,
    path: str,
    device: Any = "cpu",
) -> None:
    """Traces ``model`` with the given example inputs and saves TorchScript to ``path``."""
    example = (_tensors(inputs, device), _tensors(state_ins, device), _tensors(seq_lens, device))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # Python-side shape checks in ModelV2.__call__ trigger TracerWarnings.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", DeprecationWarning)  # torch>=2.9 flags jit.trace
            traced = torch.jit.trace(TracedModelWrapper(model), example, strict=False, check_trace=False)
        _write_atomically(path, traced.save)
    finally:
        model.train(was_training)


def export_onnx(
    model: Any,
    inputs: Dict[str, np.ndarray],
    state_ins: List[np.ndarray],
    seq_lens: np.ndarray,
    path: str,
    opset: int,
    device: Any = "cpu",
) -> None:
    """Exports ``model`` to ONNX at opset ``opset`` with a dynamic batch axis.

    Uses the TorchScript-based exporter (``dynamo=False`` where torch has both), which needs no
    network access or extra packages.
    """
    keys = list(inputs)
    state_names = [f"state_in_{i}" for i in range(len(state_ins))]
    input_names = keys + state_names + ["seq_lens"]
    output_names = ["output"] + [f"state_out_{i}" for i in range(len(state_ins))]
    args = (
        *_tensors([inputs[k] for k in keys], device),
        *_tensors(state_ins, device),
        _tensors(seq_lens, device),
    )
    wrapper = FlatModelWrapper(model, keys, len(state_ins))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message="Exporting a model to ONNX with a batch_size")
            _write_atomically(
                path,
                lambda tmp: onnx_export(wrapper, args, tmp, opset, input_names, output_names),
            )
    finally:
        model.train(was_training)
