"""Policy layer of rlpolicy (mirrors `ray.rllib.policy`).

The names RLlib 1.11 exports here are resolved lazily, so importing this
package needs neither torch nor tensorflow.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Policy": "rlpolicy.policy.policy",
    "TorchPolicy": "rlpolicy.policy.torch_policy",
    "TFPolicy": "rlpolicy.policy.tf_policy",
    "build_policy_class": "rlpolicy.policy.policy_template",
    "build_tf_policy": "rlpolicy.policy.tf_policy_template",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlpolicy.policy' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
