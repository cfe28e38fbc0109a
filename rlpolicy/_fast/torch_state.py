"""Entry ``torch_state_dict``: a model's state-dict tensors read and written directly.

``nn.Module.state_dict`` / ``load_state_dict`` recurse through the module tree
with a Python call, hooks and prefix bookkeeping per module. For modules that
save and load their state the default way (no state-dict hooks, no custom
``_load_from_state_dict``) they come down to ``{name: tensor}`` over each
module's ``_parameters`` and persistent ``_buffers``; :func:`state_tensors`
walks those dicts directly. Measured win (``get_state`` + ``set_state`` of the
shared bench's 2x256 PPO policy): about 2x.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from rlpolicy._fast import register, untested_version

try:
    import torch
except ImportError:  # (no torch: the entry stays off)
    torch = None  # type: ignore[assignment]

TESTED = ((1, 13), (2, 14))  # torch versions [from, below) the fields were checked on


def _guard() -> Optional[str]:
    if torch is None:
        return "torch is not installed"
    untested = untested_version("torch", torch.__version__, TESTED)
    if untested:
        return untested
    probe = torch.nn.Linear(1, 1)
    fields = ("_parameters", "_buffers", "_non_persistent_buffers_set", "_modules", "_state_dict_hooks")
    missing = [f for f in fields if not hasattr(probe, f)]
    return f"nn.Module lacks {missing}" if missing else None


STATE_DICT = register(
    "torch_state_dict",
    "torch 1.13 to 2.13: nn.Module's _parameters/_buffers/_modules dicts and state-dict hook dicts",
    _guard,
)


def state_tensors(model: Any) -> Optional[Dict[str, Any]]:
    """What ``model.state_dict(keep_vars=True)`` holds, read directly; None where
    the plain ``state_dict`` / ``load_state_dict`` must run (the entry off, or a
    module that saves or loads its state its own way)."""
    if not STATE_DICT.active:
        return None
    return _state_tensors(model)


def _state_tensors(model: Any) -> Optional[Dict[str, Any]]:
    # Walks the modules in state_dict's order (pre-order; a module's own parameters,
    # then its persistent buffers, then its children's), shared modules under every
    # name, as named_modules(remove_duplicate=False).
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
    lazy = torch.nn.parameter.UninitializedTensorMixin  # (not yet shaped)
    if any(isinstance(t, lazy) for t in targets.values()):
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


def copy_into(targets: Dict[str, Any], state: dict) -> bool:
    """``load_state_dict(state)`` into the tensors of :func:`state_tensors`, as
    in-place copies (numpy values cast to the targets' dtype and device); the
    caller has checked the keys and shapes. Returns False, having copied nothing,
    for values it does not copy (other types, meta targets): then the plain path
    must run.
    """
    pairs = []
    for key, target in targets.items():
        value = state[key]
        if type(value) is np.ndarray and value.dtype != object:
            value = torch.from_numpy(value) if value.flags.writeable else torch.tensor(value)
        elif not isinstance(value, torch.Tensor):
            return False
        if target.is_meta:
            return False
        pairs.append((target, value))
    with torch.no_grad():
        for target, value in pairs:
            target.copy_(value)
    return True
