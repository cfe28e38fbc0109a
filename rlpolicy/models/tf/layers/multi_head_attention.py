"""Causal multi-head self-attention (RLlib's ``ray.rllib.models.tf.layers.MultiHeadAttention``).

Vaswani et al. 2017, "Attention Is All You Need": one bias-free Dense layer
projects the input [B, T, in] to queries, keys and values (H heads of size d
each); every position attends to itself and all earlier positions with
softmax(q k^T / sqrt(d)); the concatenated heads pass a bias-free output
projection to [B, T, out_dim].
"""

from __future__ import annotations

from typing import Any

from rlpolicy.models.tf.layers._base import KerasLayer, causal_attention, keras, split_heads, tf
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import TensorType


@PublicAPI
class MultiHeadAttention(KerasLayer):
    """Causal multi-head self-attention over the time axis of [B, T, in] inputs."""

    def __init__(self, out_dim: int, num_heads: int, head_dim: int, **kwargs: Any):
        """Initializes a MultiHeadAttention layer.

        Args:
            out_dim: Output size per timestep.
            num_heads: Number of attention heads (H).
            head_dim: Size of one head (d).
            **kwargs: Passed on to the Keras Layer (e.g. ``name``).
        """
        super().__init__(**kwargs)
        self._num_heads = num_heads
        self._head_dim = head_dim
        # Queries, keys and values in one projection: [q | k | v], each H * d wide.
        self._qkv_layer = keras.layers.Dense(3 * num_heads * head_dim, use_bias=False)
        self._linear_layer = keras.layers.TimeDistributed(keras.layers.Dense(out_dim, use_bias=False))

    def call(self, inputs: TensorType) -> TensorType:
        """Returns [B, T, out_dim] for inputs [B, T, in]."""
        h, d = self._num_heads, self._head_dim
        queries, keys, values = tf.split(self._qkv_layer(inputs), 3, axis=-1)
        score = tf.einsum("bihd,bjhd->bijh", split_heads(queries, h, d), split_heads(keys, h, d))
        out = causal_attention(score / d**0.5, split_heads(values, h, d), 0)
        return self._linear_layer(out)
