"""Torch building blocks of RLlib's models (``ray.rllib.models.torch.modules``).

Names are loaded lazily: importing this package does not import torch.
So far: ``noisy_layer.NoisyLayer``.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "NoisyLayer": "rlpolicy.models.torch.modules.noisy_layer",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlpolicy.models.torch.modules' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
