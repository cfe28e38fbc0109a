"""Deep Q-Networks (DQN, with the Rainbow options), built with ``build_policy_class``
(torch) and ``build_tf_policy`` (tf/tf2). Policy classes are loaded lazily."""

from __future__ import annotations

import importlib
from typing import Any

from rlpolicy.agents.dqn.dqn_config import DEFAULT_CONFIG

_LAZY = {
    "DQNTorchPolicy": "rlpolicy.agents.dqn.dqn_torch_policy",
    "DQNTorchModel": "rlpolicy.agents.dqn.dqn_torch_model",
    "DQNTFPolicy": "rlpolicy.agents.dqn.dqn_tf_policy",
    "DistributionalQTFModel": "rlpolicy.agents.dqn.distributional_q_tf_model",
    "SimpleDQNTrainer": "rlpolicy.agents.dqn.dqn",
    "evaluate_policy": "rlpolicy.agents.dqn.dqn",
    "train_dqn": "rlpolicy.agents.dqn.dqn",
}

__all__ = ["DEFAULT_CONFIG", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlpolicy.agents.dqn' has no attribute {name!r}")
