"""TensorFlow models and action distributions (RLlib's ``ray.rllib.models.tf``).

Names are loaded lazily: importing this package does not import tensorflow.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "TFModelV2": "rlpolicy.models.tf.tf_modelv2",
    "FullyConnectedNetwork": "rlpolicy.models.tf.fcnet",
    "RecurrentNetwork": "rlpolicy.models.tf.recurrent_net",
    "LSTMWrapper": "rlpolicy.models.tf.recurrent_net",
    "VisionNetwork": "rlpolicy.models.tf.visionnet",
    "ComplexInputNetwork": "rlpolicy.models.tf.complex_input_net",
    "TFActionDistribution": "rlpolicy.models.tf.tf_action_dist",
    "Categorical": "rlpolicy.models.tf.tf_action_dist",
    "MultiCategorical": "rlpolicy.models.tf.tf_action_dist",
    "DiagGaussian": "rlpolicy.models.tf.tf_action_dist",
    "SquashedGaussian": "rlpolicy.models.tf.tf_action_dist",
    "Beta": "rlpolicy.models.tf.tf_action_dist",
    "Deterministic": "rlpolicy.models.tf.tf_action_dist",
    "Dirichlet": "rlpolicy.models.tf.tf_action_dist",
    "MultiActionDistribution": "rlpolicy.models.tf.tf_action_dist",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlpolicy.models.tf' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
