"""Small helpers of the torch action distributions (``torch_action_dist``)."""
from __future__ import annotations

from math import log, pi
from typing import Any

import numpy as np

from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.utils.framework import try_import_torch

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
    prev = torch.is_grad_enabled()
    if not prev:
        return fn(*args)
    torch._C._set_grad_enabled(False)
    try:
        return fn(*args)
    finally:
        torch._C._set_grad_enabled(prev)
