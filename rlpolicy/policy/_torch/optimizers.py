"""Optimizers of a ``TorchPolicy``: the default Adam, parameter groups, state.

Only imported by torch modules; torch is looked up through ``try_import_torch``
so that importing this module never fails.

Optimizer state round trips copy each tensor once: ``optimizer_states`` makes
numpy copies (the snapshot), and ``load_optimizer_states`` copies them into
the optimizer's own state tensors when those already have the saved layout
(the usual case: restoring a state of the same policy class), falling back to
``Optimizer.load_state_dict`` otherwise.
"""

from __future__ import annotations

import copy
from itertools import chain
from typing import Any, Dict, List, Optional, Sequence, Set

import numpy as np

from rlpolicy._fast.torch_optim import fused_adam_devices
from rlpolicy.policy._torch.convert import numpy_copy
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.torch_utils import convert_to_torch_tensor

torch, _ = try_import_torch()


def default_adam(params: Sequence[Any], **kwargs: Any) -> Any:
    """``torch.optim.Adam(params, **kwargs)`` on torch's fused kernel where it can run.

    The fused kernel does one Adam update per parameter in a single op
    (torch >= 2.4 on CPU, CUDA and other devices torch lists as fused-capable)
    instead of about a dozen small ops each; it is the same algorithm, its
    results differ from the per-tensor loop only in float rounding (~1 ulp).
    Where torch refuses it (older torch, an unsupported device or dtype) or the
    ``torch_fused_adam`` fast path is off, the plain per-tensor Adam is built,
    as RLlib 1.11 does.
    """
    params = list(params)
    devices = fused_adam_devices()
    cpu_ok = "cpu" in devices  # (p.is_cpu is much cheaper to ask than p.device.type)
    if params and all(
        isinstance(p, torch.Tensor)
        and ((cpu_ok and p.is_cpu) or p.device.type in devices)
        and p.is_floating_point()
        for p in params
    ):
        try:
            return torch.optim.Adam(params, fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError):  # (torch < 2.4 on CPU, differentiable=...)
            pass
    return torch.optim.Adam(params, **kwargs)


def optimizer_param_groups(model: Any, optimizers: Sequence[Any]) -> List[Set[int]]:
    """Per optimizer, the indices (into ``list(model.parameters())``) it updates.

    Parameters outside the model (e.g. an exploration module's) are left out.
    """
    # Keyed by id(): a tensor hashes by identity anyway, at the cost of a Python call.
    index = {id(p): i for i, p in enumerate(model.parameters())}
    return [
        {index[id(p)] for pg in opt.param_groups for p in pg["params"] if id(p) in index}
        for opt in optimizers
    ]


_SKIP_KEYS = ("params", "param_names")
_IMMUTABLE = frozenset({bool, int, float, complex, str, bytes, type(None)})
_NP_DTYPES = (
    {
        torch.float32: np.dtype(np.float32),
        torch.float64: np.dtype(np.float64),
        torch.int64: np.dtype(np.int64),
        torch.int32: np.dtype(np.int32),
    }
    if torch is not None
    else {}
)


def optimizer_states(optimizers: Sequence[Any]) -> List[Dict[str, Any]]:
    """Numpy copies of each optimizer's ``state_dict()`` (for ``get_state``)."""
    return [numpy_copy(o.state_dict()) for o in optimizers]


def _hooks(o: Any, name: str) -> Any:
    """An optimizer's state-dict hooks of one kind (torch < 2.1 has none)."""
    return getattr(o, name, None)


def check_optimizer_states(optimizers: Sequence[Any], states: Any) -> None:
    """Checks that ``states`` (``optimizer_states`` output) fits ``optimizers``,
    changing nothing: one state dict per optimizer, each with as many param
    groups as that optimizer, each group with as many parameters.

    Raises:
        ValueError: Naming the optimizer (and group) that does not fit.
    """
    where = "state['_optimizer_variables']"
    if not isinstance(states, (list, tuple)):
        raise ValueError(f"{where} must be a list of optimizer state dicts, got {type(states).__name__}")
    if len(states) != len(optimizers):
        raise ValueError(
            f"{where} holds {len(states)} optimizer states but this policy has {len(optimizers)} optimizers"
        )
    for i, (o, s) in enumerate(zip(optimizers, states)):
        groups = s.get("param_groups") if isinstance(s, dict) else None
        if not isinstance(groups, list) or not isinstance(s.get("state"), dict):
            raise ValueError(
                f"{where}[{i}] must be a dict with 'state' (a dict) and "
                f"'param_groups' (a list), got {_describe(s)}"
            )
        if len(groups) != len(o.param_groups):
            raise ValueError(
                f"{where}[{i}] has {len(groups)} param groups, optimizer {i} has {len(o.param_groups)}"
            )
        for k, (g, sg) in enumerate(zip(o.param_groups, groups)):
            n = len(sg.get("params", ())) if isinstance(sg, dict) else None
            if n != len(g["params"]):
                raise ValueError(
                    f"{where}[{i}]['param_groups'][{k}] holds {n} parameters, "
                    f"optimizer {i}'s group {k} has {len(g['params'])}"
                )


def _describe(s: Any) -> str:
    return f"keys {sorted(map(str, s))}" if isinstance(s, dict) else type(s).__name__


def load_optimizer_states(optimizers: Sequence[Any], states: Sequence[Dict[str, Any]], device: Any) -> None:
    """Loads ``optimizer_states`` output back into ``optimizers``.

    Raises:
        ValueError: If the number of states differs from the number of optimizers
            (``check_optimizer_states`` checks more, before anything changes).
    """
    if len(states) != len(optimizers):
        raise ValueError(
            f"state['_optimizer_variables'] holds {len(states)} optimizer states "
            f"but this policy has {len(optimizers)} optimizers"
        )
    for o, s in zip(optimizers, states):
        if _load_in_place(o, s):
            continue
        # Hyper-parameters stay python scalars; only the state becomes tensors,
        # copies that do not share memory with `states` (the optimizer updates
        # them in place). Optimizer.load_state_dict deep-copies param_groups.
        o.load_state_dict(
            {
                "param_groups": _keep_implementation(o, s["param_groups"]),
                "state": convert_to_torch_tensor(copy.deepcopy(s["state"]), device=device),
            }
        )


# How a stock optimizer runs its update, not what it has learnt.
_IMPLEMENTATION_KEYS = ("foreach", "fused", "capturable", "differentiable")


def _keep_implementation(o: Any, saved_groups: Any) -> Any:
    """``saved_groups`` with the live groups' implementation flags where the
    saved ones do not say (a state written by an older torch or by a policy
    built without ``fused``): ``load_state_dict`` would otherwise reset them to
    the slow defaults."""
    if not (
        _plain_optimizer(o) and isinstance(saved_groups, list) and len(saved_groups) == len(o.param_groups)
    ):
        return saved_groups
    out = []
    for g, sg in zip(o.param_groups, saved_groups):
        if isinstance(sg, dict):
            missing = {k: g[k] for k in _IMPLEMENTATION_KEYS if k in g and k not in sg}
            sg = {**sg, **missing} if missing else sg
        out.append(sg)
    return out


def _plain_optimizer(o: Any) -> bool:
    """Whether ``o`` loads its state the stock ``torch.optim`` way (no hooks)."""
    cls = type(o)
    return (
        isinstance(o, torch.optim.Optimizer)
        and cls.load_state_dict is torch.optim.Optimizer.load_state_dict
        and cls.__module__.startswith("torch.optim.")
        and not _hooks(o, "_optimizer_load_state_dict_pre_hooks")
        and not _hooks(o, "_optimizer_load_state_dict_post_hooks")
    )


def _load_in_place(o: Any, saved: Dict[str, Any]) -> bool:
    """Copies ``saved`` into ``o``'s existing state tensors and param groups.

    Only when that leaves ``o`` exactly as ``o.load_state_dict(saved)`` would
    (same groups and keys, a state entry of the same keys, shapes and tensor
    kinds for every parameter that has one, no capturable groups);
    returns False, having changed nothing, otherwise.
    """
    if not _plain_optimizer(o) or not isinstance(saved, dict):
        return False
    groups, saved_groups = o.param_groups, saved.get("param_groups")
    saved_state = saved.get("state")
    if (
        not isinstance(saved_groups, list)
        or not isinstance(saved_state, dict)
        or len(groups) != len(saved_groups)
    ):
        return False
    for g, sg in zip(groups, saved_groups):
        if (
            not isinstance(sg, dict)
            or len(g["params"]) != len(sg.get("params", ()))
            or g.get("capturable")
            or {k for k in g if k not in _SKIP_KEYS} != {k for k in sg if k not in _SKIP_KEYS}
            or ("param_names" in sg) != ("param_names" in g)
        ):
            return False
    id_map = dict(
        zip(
            chain.from_iterable(sg["params"] for sg in saved_groups),
            chain.from_iterable(g["params"] for g in groups),
        )
    )
    pairs = _state_pairs(o, id_map, saved_state)
    if pairs is None:
        return False
    with torch.no_grad():
        for live, value in pairs:
            if type(live) is np.ndarray:
                np.copyto(live, value)
            else:
                live.copy_(value)
    for g, sg in zip(groups, saved_groups):
        for k, v in sg.items():
            if k != "params":
                g[k] = v if type(v) in _IMMUTABLE else copy.deepcopy(v)  # (as load_state_dict)
    return True


def _state_pairs(o: Any, id_map: Dict[Any, Any], saved_state: Dict[Any, Any]) -> Optional[list]:
    """``(live tensor, saved value as a tensor)`` for every state entry, or None
    if ``saved_state`` does not have exactly the live layout."""
    live_state = o.state
    if len(saved_state) != len(live_state):
        return None
    pairs = []
    for key, entry in saved_state.items():
        param = id_map.get(key)
        live = live_state.get(param) if param is not None else None
        if not live or not isinstance(entry, dict) or entry.keys() != live.keys():
            return None
        for name, value in entry.items():
            target = live[name]
            if not isinstance(target, torch.Tensor):
                return None
            if (
                type(value) is np.ndarray
                and target.device.type == "cpu"
                and not target.requires_grad
                and value.dtype == _NP_DTYPES.get(target.dtype)
                and value.shape == target.shape
            ):
                pairs.append((target.numpy(), value))  # numpy to numpy: the cheapest copy
                continue
            if isinstance(value, np.ndarray) and value.dtype != object:
                value = torch.from_numpy(value) if value.flags.writeable else torch.tensor(value)
            if (
                not isinstance(value, torch.Tensor)
                or value.shape != target.shape
                or value.is_floating_point() != target.is_floating_point()
            ):
                return None
            pairs.append((target, value))
    return pairs
