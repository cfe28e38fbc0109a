"""Small helpers of the torch action distributions (``torch_action_dist``)."""

from __future__ import annotations

from math import log, pi
from typing import Any, List, Optional, Tuple

import numpy as np

from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.spaces.space_utils import shape_of

torch, _ = try_import_torch()

LOG_SQRT_2PI = 0.5 * log(2.0 * pi)


def to_tensor(inputs: Any, model: Any) -> Any:
    """Converts numpy inputs to a tensor on the model's device."""
    if isinstance(inputs, torch.Tensor):
        return inputs
    tensor = torch.from_numpy(np.asarray(inputs))
    if isinstance(model, TorchModelV2):
        param = next(iter(model.parameters()), None)
        if param is not None:
            tensor = tensor.to(param.device)
    return tensor


class LazyDist:
    """Non-data descriptor for ``dist``: built by the instance's ``_make_dist``
    on first read and kept in its ``__dict__`` (where an assignment also goes)."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        make = getattr(type(obj), "_make_dist", None)
        if make is None:
            raise AttributeError(f"{type(obj).__name__} has no attribute 'dist'")
        dist = obj.__dict__["dist"] = obj.__dict__["_lazy_dist"] = make(obj)
        return dist


def no_grad_call(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` with autograd recording off (as ``torch.distributions`` samples)."""
    with torch.no_grad():
        return fn(*args)


def reshape_to_space(flat: Any, shape: Optional[Tuple[int, ...]], dtype: Any = None) -> Any:
    """Reshapes flat samples [B, prod(shape)] to [B, *shape] (and casts them to the
    torch counterpart of the numpy ``dtype``, if given); ``shape`` None: unchanged."""
    if shape is None:
        return flat
    out = torch.reshape(flat, (-1,) + tuple(shape))
    if dtype is not None:
        out = out.to(_TORCH_DTYPES.get(np.dtype(dtype).name, torch.int64))
    return out


def flatten_actions(actions: Any, shape: Optional[Tuple[int, ...]]) -> Any:
    """Reshapes actions [B, *shape] (or already flat ones) to [B, prod(shape)];
    numpy input becomes a tensor; ``shape`` None: unchanged."""
    if shape is None:
        return actions
    if isinstance(actions, np.ndarray):
        actions = torch.from_numpy(actions)
    return torch.reshape(actions, (-1, int(np.prod(shape))))


_TORCH_DTYPES = (
    {
        "int8": torch.int8,
        "uint8": torch.uint8,
        "int16": torch.int16,
        "int32": torch.int32,
        "int64": torch.int64,
    }
    if torch is not None
    else {}
)


def check_bounds(low: Any, high: Any, name: str) -> None:
    """Raises ValueError (naming the distribution) unless low < high everywhere."""
    if not np.all(np.less(low, high)):
        raise ValueError(f"{name} needs low < high, got low={low}, high={high}")


def flat_action_widths(action_space: Any) -> List[int]:
    """Columns each flat sub-action takes in a flattened action batch:
    1 for a Discrete, the size of its shape for every other leaf."""
    import gymnasium as gym

    from rlpolicy.utils.spaces.space_utils import flatten_space

    return [
        1 if isinstance(s, gym.spaces.Discrete) else int(np.prod(shape_of(s)))
        for s in flatten_space(action_space)
    ]
