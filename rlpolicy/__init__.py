"""rlpolicy: RLlib 1.11's policy layer as a standalone library.

Port RLlib 1.x code by replacing the import root ``ray.rllib`` with ``rlpolicy``.
Importing this package needs neither torch nor tensorflow: the main names below are
resolved lazily, on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Policy": "rlpolicy.policy.policy",
    "PolicySpec": "rlpolicy.policy.policy",
    "TorchPolicy": "rlpolicy.policy.torch_policy",
    "build_policy_class": "rlpolicy.policy.policy_template",
    "TFPolicy": "rlpolicy.policy.tf_policy",
    "DynamicTFPolicy": "rlpolicy.policy.dynamic_tf_policy",
    "build_tf_policy": "rlpolicy.policy.tf_policy_template",
    "build_eager_tf_policy": "rlpolicy.policy.eager_tf_policy",
    "SampleBatch": "rlpolicy.policy.sample_batch",
    "MultiAgentBatch": "rlpolicy.policy.sample_batch",
    "concat_samples": "rlpolicy.policy.sample_batch",
    "DEFAULT_POLICY_ID": "rlpolicy.policy.sample_batch",
    "ViewRequirement": "rlpolicy.policy.view_requirement",
    "ModelV2": "rlpolicy.models.modelv2",
    "ModelCatalog": "rlpolicy.models.catalog",
    "MODEL_DEFAULTS": "rlpolicy._core.defaults",
    "COMMON_CONFIG": "rlpolicy._core.defaults",
    "DefaultCallbacks": "rlpolicy.agents.callbacks",
    "add_safe_globals": "rlpolicy._core.checkpoint_trust",
    "safe_globals": "rlpolicy._core.checkpoint_trust",
    "get_safe_globals": "rlpolicy._core.checkpoint_trust",
    "clear_safe_globals": "rlpolicy._core.checkpoint_trust",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlpolicy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
