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

from rlpolicy._core.checkpoint_checks import check_weight_shapes
from rlpolicy._fast.torch_state import STATE_DICT, copy_into, state_tensors
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


def tensor_to_numpy(t: Any) -> np.ndarray:
    """``t.detach().cpu().numpy()``, skipping the steps that would change nothing
    (each is a dispatched torch op): a CPU tensor outside autograd is viewed
    directly."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_cpu:
        t = t.cpu()
    return t.numpy()


def action_outputs_to_numpy(actions: Any, state_out: Any, extra: dict) -> tuple:
    """The ``(actions, state_outs, extra_fetches)`` triple of the action path as numpy."""
    Tensor = torch.Tensor
    if isinstance(actions, Tensor) and actions.is_cpu:
        actions = tensor_to_numpy(actions)
    else:
        actions = to_numpy_fast(actions)
    state_out = (
        [tensor_to_numpy(s) if isinstance(s, Tensor) else to_numpy_fast(s) for s in state_out]
        if state_out
        else []
    )
    extra = {
        k: v if type(v) is np.ndarray else (tensor_to_numpy(v) if isinstance(v, Tensor) else to_numpy_fast(v))
        for k, v in extra.items()
    }
    return actions, state_out, extra


def to_non_torch_snapshot(x: Any) -> Any:
    """``convert_to_non_torch_type`` whose arrays never share memory with a tensor.

    For learner stats: a stat that is a live parameter (SAC's ``log_alpha``)
    would otherwise come back as a numpy view that the next optimizer step
    changes in place (RLlib 1.11 aliases like that on CPU and copies on GPU).
    """
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().item() if x.dim() == 0 else tensor_snapshot(x)
    if type(x) is dict:
        return {k: to_non_torch_snapshot(v) for k, v in x.items()}
    if type(x) in (list, tuple):
        return type(x)(to_non_torch_snapshot(v) for v in x)
    if x is None or isinstance(x, (np.ndarray, int, float, str)):
        return x
    return convert_to_non_torch_type(x)


def tensor_snapshot(t: Any) -> np.ndarray:
    """``t.detach().cpu().numpy().copy()`` in as few steps as give the same: a
    numpy array equal to ``t`` that shares no memory with it."""
    if t.requires_grad:
        t = t.detach()
    if t.is_cpu:
        return t.numpy().copy()
    return t.cpu().numpy()  # (the transfer already made new memory)


def numpy_copy(x: Any) -> Any:
    """Like ``convert_to_numpy`` but never shares memory with live tensors, so a
    returned state stays a snapshot while training goes on."""
    if isinstance(x, torch.Tensor):
        return tensor_snapshot(x)
    if x is None or type(x) in _IMMUTABLE_SCALARS:
        return x  # deepcopy would hand back the very same object
    if isinstance(x, dict):
        return {k: copy_leaf(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(numpy_copy(v) for v in x)
    return copy.deepcopy(x)


def copy_leaf(v: Any) -> Any:
    """``numpy_copy(v)``, handling the common leaves (tensors, scalars) itself."""
    if type(v) is torch.Tensor:
        return tensor_snapshot(v)
    if v is None or type(v) in _IMMUTABLE_SCALARS:
        return v
    return numpy_copy(v)


_IMMUTABLE_SCALARS = frozenset({bool, int, float, complex, str, bytes})


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


def load_state_dict_fast(model: Any, state: dict, device: Any = None) -> None:
    """``model.load_state_dict(state)`` (strict) as direct in-place copies where
    ``rlpolicy._fast.torch_state`` may (plain modules; tensor or numpy values),
    else ``model.load_state_dict`` after ``convert_to_torch_tensor(state, device)``."""
    targets = state_tensors(model)
    if targets is not None or (not STATE_DICT.active and isinstance(state, dict)):
        # (one error for missing keys and wrong shapes, whichever path loads)
        tensors = targets if targets is not None else model.state_dict(keep_vars=True)
        check_weight_shapes({k: tuple(t.shape) for k, t in tensors.items()}, state)
    if targets is not None and copy_into(targets, state):
        return
    model.load_state_dict(convert_to_torch_tensor(state, device=device))


def weights_snapshot(model: Any) -> dict:
    """``{name: tensor_snapshot(t)}`` over ``model.state_dict()``: numpy copies."""
    targets = state_tensors(model)
    if targets is None:
        targets = model.state_dict()
    return {
        k: tensor_snapshot(t) if isinstance(t, torch.Tensor) else numpy_copy(t) for k, t in targets.items()
    }
