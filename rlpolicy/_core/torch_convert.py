"""Fast torch <-> numpy conversions for ``TorchPolicy``'s hot paths.

The generic converters in ``rlpolicy.utils`` walk every structure with
dm-tree; the action and learning paths mostly move plain arrays, lists and
dicts, which these helpers handle directly (falling back to the generic
converters for anything else). Only imported by torch modules.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np

from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.numpy import convert_to_numpy
from rlpolicy.utils.torch_utils import convert_to_non_torch_type, convert_to_torch_tensor

torch, _ = try_import_torch()


def to_numpy_fast(x: Any) -> Any:
    """``convert_to_numpy`` for (nested) tensors, lists, tuples and plain dicts.

    CPU tensors come back as numpy views (no copy), as in RLlib.
    """
    if isinstance(x, torch.Tensor):
        x = x.detach()
        return (x if x.device.type == "cpu" else x.cpu()).numpy()
    if type(x) is dict:
        return {k: to_numpy_fast(v) for k, v in x.items()}
    if type(x) in (list, tuple):
        return type(x)(to_numpy_fast(v) for v in x)
    if x is None or isinstance(x, (np.ndarray, int, float, bool)):
        return x
    return convert_to_numpy(x)


def action_outputs_to_numpy(actions: Any, state_out: Any, extra: dict) -> tuple:
    """The ``(actions, state_outs, extra_fetches)`` triple of the action path as numpy."""
    Tensor = torch.Tensor
    if isinstance(actions, Tensor) and actions.device.type == "cpu":
        actions = actions.detach().numpy()
    else:
        actions = to_numpy_fast(actions)
    state_out = [s.detach().cpu().numpy() if isinstance(s, Tensor) else to_numpy_fast(s)
                 for s in state_out]
    extra = {k: v.detach().cpu().numpy() if isinstance(v, Tensor) else to_numpy_fast(v)
             for k, v in extra.items()}
    return actions, state_out, extra


def to_non_torch_fast(x: Any) -> Any:
    """``convert_to_non_torch_type`` with a fast path for tensors and plain dicts.

    Tensors become numpy arrays (0-D tensors python numbers); other leaves pass
    through; lists, tuples and other containers go to the generic converter.
    """
    if isinstance(x, torch.Tensor):
        return x.cpu().item() if x.dim() == 0 else x.detach().cpu().numpy()
    if type(x) is dict:
        return {k: to_non_torch_fast(v) for k, v in x.items()}
    if x is None or isinstance(x, (np.ndarray, int, float, str)):
        return x
    return convert_to_non_torch_type(x)


def numpy_copy(x: Any) -> Any:
    """Like ``convert_to_numpy`` but never shares memory with live tensors, so a
    returned state stays a snapshot while training goes on."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().copy()
    if isinstance(x, dict):
        return {k: numpy_copy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(numpy_copy(v) for v in x)
    return copy.deepcopy(x)


def tensor_interceptor(item: Any, device: Any) -> Any:
    """Get-interceptor of lazy tensor dicts: a column -> torch tensor on ``device``.

    float64 becomes float32 and object arrays stay as they are (as
    ``convert_to_torch_tensor``, which handles everything but the plain
    writable numeric array).
    """
    if type(item) is np.ndarray and item.dtype != object and item.flags.writeable:
        t = torch.from_numpy(item)
        if t.dtype == torch.float64:
            t = t.float()
        return t if device.type == "cpu" else t.to(device)
    if isinstance(item, torch.Tensor):
        return item if item.device == device else item.to(device)
    return convert_to_torch_tensor(item, device=device)
