"""Fast torch <-> numpy conversions for ``TorchPolicy``'s hot paths.

The generic converters in ``rlpolicy.utils`` walk every structure with
dm-tree; the action and learning paths mostly move plain arrays, lists and
dicts, which these helpers handle directly (falling back to the generic
converters for anything else). Only imported by torch modules.
"""

from __future__ import annotations

import copy
from typing import Any, Dict

import numpy as np

from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.numpy import convert_to_numpy
from rlpolicy.utils.torch_utils import convert_to_non_torch_type, convert_to_torch_tensor

torch, _ = try_import_torch()
if torch is not None:
    _set_grad_enabled = torch._C._set_grad_enabled
    _is_grad_enabled = torch.is_grad_enabled
    _Uninitialized = torch.nn.parameter.UninitializedTensorMixin  # lazy (not yet shaped)


class NoGrad:
    """``with NoGrad():`` -- ``torch.no_grad()`` as a plain context manager.

    Same effect as ``torch.no_grad()`` (autograd off inside, the previous mode
    restored on exit) at a fraction of its cost to enter, which matters on the
    per-step action path. Not a decorator; make a new one per ``with``.
    """

    __slots__ = ("_prev",)

    def __enter__(self) -> None:
        self._prev = _is_grad_enabled()
        _set_grad_enabled(False)

    def __exit__(self, *exc: Any) -> None:
        _set_grad_enabled(self._prev)


def parameter_list(model: Any) -> list:
    """``list(model.parameters())``: same parameters, same order (pre-order over
    the modules, each module and each parameter once), walked without torch's
    nested generators."""
    out, seen_params, seen_modules = [], set(), set()
    stack = [model]
    while stack:
        m = stack.pop()
        if m is None or id(m) in seen_modules:
            continue
        seen_modules.add(id(m))
        for p in m._parameters.values():
            if p is not None and id(p) not in seen_params:
                seen_params.add(id(p))
                out.append(p)
        if m._modules:
            stack.extend(reversed(m._modules.values()))
    return out


def set_training(model: Any, mode: bool) -> None:
    """``model.train(mode)`` (``model.eval()`` for False) in one pass over the module tree.

    ``nn.Module.train`` recurses through the children with a Python call and
    an ``nn.Module.__setattr__`` per module; when no module in the tree
    changes how ``train``/``eval``/``__setattr__`` work, setting each module's
    ``training`` flag directly is the same thing. Otherwise ``model.train`` /
    ``model.eval`` run as usual.
    """
    module_cls = torch.nn.Module
    root = type(model)
    if root.eval is not module_cls.eval and not mode:
        model.eval()
        return
    train, setattr_ = module_cls.train, module_cls.__setattr__
    stack, seen = [model], []
    while stack:
        m = stack.pop()
        if m is None:  # (an unset child slot)
            continue
        cls = type(m)
        if cls.train is not train or cls.__setattr__ is not setattr_:
            model.train(mode)
            return
        seen.append(m)
        if m._modules:
            stack.extend(m._modules.values())
    for m in seen:
        m.__dict__["training"] = mode


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
    state_out = [tensor_to_numpy(s) if isinstance(s, Tensor) else to_numpy_fast(s) for s in state_out]
    extra = {
        k: v if type(v) is np.ndarray else (tensor_to_numpy(v) if isinstance(v, Tensor) else to_numpy_fast(v))
        for k, v in extra.items()
    }
    return actions, state_out, extra


def to_non_torch_fast(x: Any) -> Any:
    """``convert_to_non_torch_type`` with a fast path for tensors and plain dicts.

    Tensors become numpy arrays (0-D tensors python numbers); other leaves pass
    through; lists, tuples and other containers go to the generic converter.
    """
    if isinstance(x, torch.Tensor):
        return x.cpu().item() if x.dim() == 0 else tensor_to_numpy(x)
    if type(x) is dict:
        if all(type(v) is torch.Tensor and v.dim() > 0 for v in x.values()):
            return {k: tensor_to_numpy(v) for k, v in x.items()}  # (the usual case)
        return {k: to_non_torch_fast(v) for k, v in x.items()}
    if x is None or isinstance(x, (np.ndarray, int, float, str)):
        return x
    return convert_to_non_torch_type(x)


def to_non_torch_snapshot(x: Any) -> Any:
    """``to_non_torch_fast`` whose arrays never share memory with a tensor.

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


def to_torch_fast(x: Any, device: Any, copy: bool = False) -> Any:
    """``convert_to_torch_tensor(x, device)`` with a fast path for plain dicts
    and writable numeric arrays (float64 becomes float32, as there).

    Args:
        x: Any (nested) structure.
        device: Target device (None: CPU).
        copy: Whether the tensors must own their memory (by default a CPU
            tensor may share it with the numpy array it came from).
    """
    if type(x) is dict:
        return {k: to_torch_fast(v, device, copy) for k, v in x.items()}
    if type(x) is np.ndarray and x.dtype != object and x.flags.writeable:
        t = tensor_interceptor(x, torch.device(device) if device is not None else torch.device("cpu"))
    else:
        t = convert_to_torch_tensor(x, device=device)
    if (
        copy
        and isinstance(t, torch.Tensor)
        and isinstance(x, np.ndarray)
        and t.device.type == "cpu"
        and t.data_ptr() == x.__array_interface__["data"][0]
    ):
        t = t.clone()
    return t


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
    """``model.load_state_dict(state)`` (strict) as direct in-place copies.

    Loading a state dict into plain modules (no state-dict hooks, no custom
    ``_load_from_state_dict``) only checks the keys and shapes and then copies
    each tensor into its parameter or buffer; this does just that. ``state``
    may hold tensors or numpy arrays (copied straight into the targets, cast
    to their dtype and device). Anything else (other keys, shapes or value
    types, hooks, custom loaders) goes to ``model.load_state_dict`` (after
    ``to_torch_fast(state, device)``), which also raises its usual errors.
    """
    targets = _plain_state_tensors(model)
    if targets is None:
        model.load_state_dict(_as_tensors(state, device))
        return
    _check_keys_and_shapes(targets, state)  # before any copy: a bad state changes nothing
    pairs = []
    for key, target in targets.items():
        value = state[key]
        if type(value) is np.ndarray and value.dtype != object:
            value = torch.from_numpy(value) if value.flags.writeable else torch.tensor(value)
        elif not isinstance(value, torch.Tensor):
            value = None
        if value is None or target.is_meta:
            model.load_state_dict(_as_tensors(state, device))
            return
        pairs.append((target, value))
    with torch.no_grad():
        for target, value in pairs:
            target.copy_(value)


def _as_tensors(state: dict, device: Any) -> dict:
    if all(isinstance(v, torch.Tensor) for v in state.values()):
        return state
    return to_torch_fast(state, device)


def _check_keys_and_shapes(targets: dict, state: dict) -> None:
    """Raises ValueError naming missing/unexpected keys or the first wrong shape."""
    missing = [k for k in targets if k not in state]
    unexpected = [k for k in state if k not in targets]
    if missing or unexpected:
        raise ValueError(
            f"set_weights: missing keys {missing}, unexpected keys {unexpected}; nothing was loaded"
        )
    for key, target in targets.items():
        value = state[key]
        shape = getattr(value, "shape", None)
        shape = tuple(shape) if shape is not None else np.shape(value)
        if shape != tuple(target.shape):
            raise ValueError(
                f"set_weights: {key!r} has shape {shape}, the model's is "
                f"{tuple(target.shape)}; nothing was loaded"
            )


def _plain_state_tensors(model: Any) -> Any:
    """What ``model.state_dict(keep_vars=True)`` holds, if every module saves and
    loads its state the default way (see ``load_state_dict_fast``), else None.

    Walks the modules in ``state_dict``'s order (pre-order; a module's own
    parameters, then its persistent buffers, then its children's), shared
    modules under every name, as ``named_modules(remove_duplicate=False)``.
    """
    swap = getattr(torch.__future__, "get_swap_module_params_on_conversion", None)  # (torch >= 2.3)
    if swap is not None and swap():
        return None
    targets = {}
    plain_types: Dict[type, bool] = {}
    stack = [("", model)]
    pop, push = stack.pop, stack.extend
    while stack:
        prefix, m = pop()
        cls = type(m)
        plain = plain_types.get(cls)
        if plain is None:
            plain = plain_types[cls] = _default_state_methods(cls)
        if (
            not plain
            or m._load_state_dict_pre_hooks
            or m._load_state_dict_post_hooks
            or m._state_dict_hooks
            or m._state_dict_pre_hooks
        ):
            return None
        for name, t in m._parameters.items():
            if t is not None:
                targets[prefix + name] = t
        if m._buffers:
            skip = m._non_persistent_buffers_set
            for name, t in m._buffers.items():
                if t is not None and name not in skip:
                    targets[prefix + name] = t
        if m._modules:
            push(reversed([(prefix + name + ".", c) for name, c in m._modules.items() if c is not None]))
    if any(isinstance(t, _Uninitialized) for t in targets.values()):
        return None
    return targets


def _default_state_methods(cls: Any) -> bool:
    """Whether ``cls`` saves and loads its state with nn.Module's own methods."""
    module_cls = torch.nn.Module
    return (
        cls._load_from_state_dict is module_cls._load_from_state_dict
        and cls.load_state_dict is module_cls.load_state_dict
        and cls._save_to_state_dict is module_cls._save_to_state_dict
        and cls.state_dict is module_cls.state_dict
    )


def state_dict_fast(model: Any) -> dict:
    """``model.state_dict()``: the same (detached) tensors under the same names."""
    targets = _plain_state_tensors(model)
    if targets is None:
        return model.state_dict()
    return {k: t.detach() for k, t in targets.items()}


def weights_snapshot(model: Any) -> dict:
    """``{name: tensor_snapshot(t)}`` over ``model.state_dict()``: numpy copies."""
    targets = _plain_state_tensors(model)
    if targets is None:
        targets = model.state_dict()
    return {
        k: tensor_snapshot(t) if isinstance(t, torch.Tensor) else numpy_copy(t) for k, t in targets.items()
    }
