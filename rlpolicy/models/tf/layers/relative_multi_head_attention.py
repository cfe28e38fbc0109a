"""Relative multi-head attention with segment memory, as in Transformer-XL / GTrXL
(RLlib's ``ray.rllib.models.tf.layers.RelativeMultiHeadAttention`` and ``PositionalEmbedding``).

Dai et al. 2019, "Transformer-XL": the T inputs of a segment attend causally to
themselves and to ``Tau`` memory timesteps prepended to them (the memory gets no
gradient). Instead of absolute positions, the score of query i and key j is

    (q_i + u) . k_j  +  (q_i + v) . W_R R(dist(i, j)),   divided by sqrt(d),

with ``R`` the sinusoid embedding of the distance ``Tau + i - j``, ``W_R`` a
bias-free projection, and ``u``, ``v`` learned per-head biases.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from rlpolicy.models.tf.layers._base import KerasLayer, causal_attention, keras, split_heads, tf
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import TensorType


@PublicAPI
class PositionalEmbedding(KerasLayer):
    """Sinusoid embeddings of the distances ``seq_length - 1, ..., 1, 0`` (in that order).

    Row k holds ``[sin(p * f), cos(p * f)]`` for distance ``p = seq_length - 1 - k``
    and the frequencies ``f_m = 1 / 10000 ** (2m / out_dim)``, m = 0 .. ceil(out_dim / 2) - 1.
    """

    def __init__(self, out_dim: int, **kwargs: Any):
        """Initializes a PositionalEmbedding.

        Args:
            out_dim: Embedding size (an odd size gives out_dim + 1 columns).
            **kwargs: Passed on to the Keras Layer (e.g. ``name``).
        """
        super().__init__(**kwargs)
        self.inverse_freq = (1.0 / (10000.0 ** (np.arange(0, out_dim, 2.0) / out_dim))).astype(np.float32)

    def call(self, seq_length: TensorType) -> TensorType:
        """Returns the [seq_length, out_dim] embedding of the distances, largest first."""
        offsets = tf.cast(tf.range(seq_length - 1, -1, -1), tf.float32)
        angles = offsets[:, None] * tf.constant(self.inverse_freq)[None, :]
        return tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)


@PublicAPI
class RelativeMultiHeadAttention(KerasLayer):
    """Causal multi-head attention with relative positions over [memory; inputs]."""

    def __init__(
        self,
        out_dim: int,
        num_heads: int,
        head_dim: int,
        input_layernorm: bool = False,
        output_activation: Optional[Any] = None,
        **kwargs: Any,
    ):
        """Initializes a RelativeMultiHeadAttention layer.

        Args:
            out_dim: Output size per timestep (also the positional embedding size).
            num_heads: Number of attention heads (H).
            head_dim: Size of one head (d).
            input_layernorm: Apply a LayerNormalization to [memory; inputs] first
                (True in GTrXL).
            output_activation: Optional activation of the output projection
                (relu in GTrXL).
            **kwargs: Passed on to the Keras Layer (e.g. ``name``).
        """
        super().__init__(**kwargs)
        self._num_heads = num_heads
        self._head_dim = head_dim
        # Fixed sub-layer names: the variable names (and so the weight keys of eager
        # policies) are then the same for every instance in a process.
        self._qkv_layer = keras.layers.Dense(3 * num_heads * head_dim, use_bias=False, name="qkv")
        self._linear_layer = keras.layers.TimeDistributed(
            keras.layers.Dense(out_dim, use_bias=False, activation=output_activation, name="linear"),
            name="linear_per_step",
        )
        # Made here, outside any name scope: the layer's name keeps two layers' u and v
        # apart (eager variable names are not made unique).
        self._uvar = self.add_weight(name=f"{self.name}_u", shape=(num_heads, head_dim))
        self._vvar = self.add_weight(name=f"{self.name}_v", shape=(num_heads, head_dim))
        self._pos_embedding = PositionalEmbedding(out_dim, name="pos_embedding")
        self._pos_proj = keras.layers.Dense(num_heads * head_dim, use_bias=False, name="pos_proj")
        self._input_layernorm = (
            keras.layers.LayerNormalization(axis=-1, name="input_layernorm") if input_layernorm else None
        )

    def call(self, inputs: TensorType, memory: Optional[TensorType] = None) -> TensorType:
        """Returns [B, T, out_dim].

        Args:
            inputs: [B, T, dim], the segment.
            memory: [B, Tau, dim], earlier timesteps the segment may attend to
                (no gradient flows into it). None means no memory (Tau = 0;
                RLlib 1.11 requires a memory tensor).
        """
        h, d = self._num_heads, self._head_dim
        t = tf.shape(inputs)[1]
        if memory is None:
            memory = inputs[:, :0]
        tau = tf.shape(memory)[1]
        full = tf.concat([tf.stop_gradient(memory), inputs], axis=1)
        if self._input_layernorm is not None:
            full = self._input_layernorm(full)
        queries, keys, values = tf.split(self._qkv_layer(full), 3, axis=-1)
        queries = split_heads(queries[:, -t:], h, d)  # only the segment asks
        keys, values = split_heads(keys, h, d), split_heads(values, h, d)
        rel = tf.reshape(self._pos_proj(self._pos_embedding(tau + t)), [tau + t, h, d])
        score = tf.einsum("bihd,bjhd->bijh", queries + self._uvar, keys)
        pos_score = tf.einsum("bihd,jhd->bijh", queries + self._vvar, rel)
        score = (score + self.rel_shift(pos_score)) / d**0.5
        return self._linear_layer(causal_attention(score, values, tau))

    @staticmethod
    def rel_shift(x: TensorType) -> TensorType:
        """Aligns relative-position scores with key positions.

        ``x`` is [B, T, M, H] with column k scored against distance M - 1 - k.
        The result holds, at [b, i, j], the score for the distance
        ``(M - T + i) - j`` of query i to key j, i.e. ``x[b, i, j + T - 1 - i]``,
        wherever that is a valid (causal, j <= M - T + i) pair; the other
        entries are left over values, masked later. Done with Transformer-XL's
        pad-and-reshape trick, without a gather.
        """
        shape = tf.shape(x)
        padded = tf.pad(x, [[0, 0], [0, 0], [1, 0], [0, 0]])  # a zero column in front: [B, T, M + 1, H]
        reread = tf.reshape(padded, [shape[0], shape[2] + 1, shape[1], shape[3]])
        return tf.reshape(reread[:, 1:], shape)
