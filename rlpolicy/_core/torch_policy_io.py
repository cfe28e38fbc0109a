"""Optimizer state and model export of a ``TorchPolicy``.

Only imported by torch modules; torch is looked up lazily.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from rlpolicy._core.torch_convert import numpy_copy, to_torch_fast


def optimizer_states(optimizers: Sequence[Any]) -> List[Dict[str, Any]]:
    """Numpy copies of each optimizer's ``state_dict()`` (for ``get_state``)."""
    return [numpy_copy(o.state_dict()) for o in optimizers]


def load_optimizer_states(optimizers: Sequence[Any], states: Sequence[Dict[str, Any]],
                          device: Any) -> None:
    """Loads ``optimizer_states`` output back into ``optimizers``.

    Raises:
        ValueError: If the number of states differs from the number of optimizers.
    """
    if len(states) != len(optimizers):
        raise ValueError(f"state['_optimizer_variables'] holds {len(states)} optimizer states "
                         f"but this policy has {len(optimizers)} optimizers")
    for o, s in zip(optimizers, states):
        # Hyper-parameters stay python scalars; only the state becomes tensors,
        # copies that do not share memory with `states` (the optimizer updates
        # them in place). Optimizer.load_state_dict deep-copies param_groups.
        o.load_state_dict({"param_groups": s["param_groups"],
                           "state": to_torch_fast(s["state"], device, copy=True)})


def export_policy_model(policy: Any, export_dir: str, onnx: Optional[int] = None) -> None:
    """Writes ``policy.model`` as TorchScript ``model.pt`` or, with ``onnx`` (an
    opset version), ``model.onnx`` into ``export_dir`` (see ``torch_export``)."""
    from rlpolicy._core import torch_export

    dummy = getattr(policy, "_dummy_batch", None)
    if dummy is None:
        dummy = policy._get_dummy_batch_from_view_requirements(1)
    inputs, state_ins, seq_lens = torch_export.select_export_inputs(
        policy.model.view_requirements, dummy)
    os.makedirs(export_dir, exist_ok=True)
    with policy._lock:
        if onnx:
            torch_export.export_onnx(policy.model, inputs, state_ins, seq_lens,
                                     os.path.join(export_dir, "model.onnx"), onnx,
                                     device=policy.device)
        else:
            torch_export.export_torchscript(policy.model, inputs, state_ins, seq_lens,
                                            os.path.join(export_dir, "model.pt"),
                                            device=policy.device)
