"""Models, preprocessors, action distributions and the model catalog.

Public names are loaded lazily so that importing ``rlpolicy.models`` never
imports torch or tensorflow.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ModelV2": "rlpolicy.models.modelv2",
    "ActionDistribution": "rlpolicy.models.action_dist",
    "ModelCatalog": "rlpolicy.models.catalog",
    "MODEL_DEFAULTS": "rlpolicy.models.catalog",
    "Preprocessor": "rlpolicy.models.preprocessors",
    "get_preprocessor": "rlpolicy.models.preprocessors",
}

# numpy-only, so imported eagerly. The implementation module has another (private)
# name: a submodule named ``convert_weights`` would be shadowed by the function.
from rlpolicy.models._weight_conversion import convert_weights  # noqa: E402

__all__ = list(_LAZY) + ["convert_weights"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlpolicy.models' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
