"""Torch building blocks of RLlib's models (``ray.rllib.models.torch.modules``).

Names are loaded lazily: importing this package does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "GRUGate": "rlpolicy.models.torch.modules.gru_gate",
    "MultiHeadAttention": "rlpolicy.models.torch.modules.multi_head_attention",
    "NoisyLayer": "rlpolicy.models.torch.modules.noisy_layer",
    "RelativeMultiHeadAttention": "rlpolicy.models.torch.modules.relative_multi_head_attention",
    "SkipConnection": "rlpolicy.models.torch.modules.skip_connection",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlpolicy.models.torch.modules' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
