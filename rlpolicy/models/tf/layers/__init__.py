"""Keras (``tf_keras``) building blocks of RLlib's attention and noisy-net models
(``ray.rllib.models.tf.layers``).

Names are loaded lazily: importing this package does not import tensorflow.
All layers work eagerly and inside a ``tf1.Graph`` (graph mode); see
:mod:`rlpolicy.models.tf.tf_modelv2` for why graph and eager Keras objects of
the same class should not be mixed in one call.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "GRUGate": "rlpolicy.models.tf.layers.gru_gate",
    "MultiHeadAttention": "rlpolicy.models.tf.layers.multi_head_attention",
    "NoisyLayer": "rlpolicy.models.tf.layers.noisy_layer",
    "PositionalEmbedding": "rlpolicy.models.tf.layers.relative_multi_head_attention",
    "RelativeMultiHeadAttention": "rlpolicy.models.tf.layers.relative_multi_head_attention",
    "SkipConnection": "rlpolicy.models.tf.layers.skip_connection",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlpolicy.models.tf.layers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
