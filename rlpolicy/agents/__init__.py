"""Trainer-side pieces rlpolicy keeps from RLlib 1.11's ``ray.rllib.agents``: the common
config (``trainer``) and the callbacks. Names are loaded lazily to keep imports light."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "COMMON_CONFIG": "rlpolicy.agents.trainer",
    "with_common_config": "rlpolicy.agents.trainer",
    "DefaultCallbacks": "rlpolicy.agents.callbacks",
    "MultiCallbacks": "rlpolicy.agents.callbacks",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlpolicy.agents' has no attribute {name!r}")


__all__ = list(_LAZY)
