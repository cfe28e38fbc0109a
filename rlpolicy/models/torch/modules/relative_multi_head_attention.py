"""Relative multi-head attention with segment memory, as in Transformer-XL / GTrXL
(RLlib's ``ray.rllib.models.torch.modules.relative_multi_head_attention``:
``RelativePositionEmbedding`` and ``RelativeMultiHeadAttention``).

Dai et al. 2019, "Transformer-XL": the T inputs of a segment attend causally to
themselves and to ``Tau`` memory timesteps prepended to them (the memory gets no
gradient). The score of query i and key j is

    (q_i + u) . k_j  +  (q_i + v) . W_R R(dist(i, j)),   divided by sqrt(d),

with ``R`` the sinusoid embedding of the distance ``Tau + i - j``, ``W_R`` a
bias-free projection, and ``u``, ``v`` learned per-head biases. Same maths as
:class:`rlpolicy.models.tf.layers.RelativeMultiHeadAttention`.
"""

from __future__ import annotations

from typing import Any, Optional

from rlpolicy.models.torch.misc import SlimFC
from rlpolicy.models.torch.modules._attention import causal_attention, split_heads
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, nn = try_import_torch()
# A name mypy accepts as a base class (nn is a variable here); object without torch.
_Module: Any = nn.Module if nn is not None else object


@PublicAPI
class RelativePositionEmbedding(_Module):
    """Sinusoid embeddings of the distances ``seq_length - 1, ..., 1, 0`` (in that order).

    Row k holds ``[sin(p * f), cos(p * f)]`` for distance ``p = seq_length - 1 - k``
    and the frequencies ``f_m = 1 / 10000 ** (2m / out_dim)``; the result has
    shape [seq_length, 1, out_dim] (an odd out_dim gives out_dim + 1 columns).
    """

    def __init__(self, out_dim: int, **kwargs: Any):
        """Initializes a RelativePositionEmbedding (buffer ``inverse_freq``)."""
        super().__init__()
        self.out_dim = out_dim
        steps = torch.arange(0, out_dim, 2.0)
        self.register_buffer("inverse_freq", 1.0 / (10000.0 ** (steps / out_dim)))

    def forward(self, seq_length: int) -> TensorType:
        """Returns the [seq_length, 1, out_dim] embedding of the distances, largest first."""
        offsets = torch.arange(seq_length - 1, -1, -1.0, device=self.inverse_freq.device)
        angles = offsets[:, None] * self.inverse_freq[None, :]
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)[:, None, :]


@PublicAPI
class RelativeMultiHeadAttention(_Module):
    """Causal multi-head attention with relative positions over [memory; inputs]."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        num_heads: int,
        head_dim: int,
        input_layernorm: bool = False,
        output_activation: Optional[Any] = None,
        **kwargs: Any,
    ):
        """Initializes a RelativeMultiHeadAttention module.

        Args:
            in_dim: Input size per timestep.
            out_dim: Output size per timestep (the "attention dim").
            num_heads: Number of attention heads (H).
            head_dim: Size of one head (d).
            input_layernorm: Apply a LayerNorm to [memory; inputs] first
                (True in GTrXL).
            output_activation: Optional activation (module class or name) of
                the output projection (ReLU in GTrXL).
            **kwargs: Passed on to ``nn.Module``.
        """
        super().__init__(**kwargs)
        self._num_heads = num_heads
        self._head_dim = head_dim
        self._qkv_layer = SlimFC(in_size=in_dim, out_size=3 * num_heads * head_dim, use_bias=False)
        self._linear_layer = SlimFC(
            in_size=num_heads * head_dim, out_size=out_dim, use_bias=False, activation_fn=output_activation
        )
        self._uvar = nn.Parameter(torch.empty(num_heads, head_dim))
        self._vvar = nn.Parameter(torch.empty(num_heads, head_dim))
        nn.init.xavier_uniform_(self._uvar)
        nn.init.xavier_uniform_(self._vvar)
        # RLlib 1.11 projects an embedding of size out_dim with an in_dim-wide
        # layer (the two are equal in GTrXL); sized from the embedding here.
        self._rel_pos_embedding = RelativePositionEmbedding(out_dim)
        emb_dim = int(self._rel_pos_embedding.inverse_freq.shape[0]) * 2
        self._pos_proj = SlimFC(in_size=emb_dim, out_size=num_heads * head_dim, use_bias=False)
        self._input_layernorm = nn.LayerNorm(in_dim) if input_layernorm else None

    def forward(self, inputs: TensorType, memory: Optional[TensorType] = None) -> TensorType:
        """Returns [B, T, out_dim].

        Args:
            inputs: [B, T, in_dim], the segment.
            memory: [B, Tau, in_dim], earlier timesteps the segment may attend
                to (no gradient flows into it). None means no memory (Tau = 0;
                RLlib 1.11 requires a memory tensor).

        Raises:
            ValueError: If memory and inputs differ in batch size or width.
        """
        h, d = self._num_heads, self._head_dim
        t = inputs.shape[1]
        if memory is None:
            memory = inputs[:, :0]
        if memory.dim() != 3 or memory.shape[0] != inputs.shape[0] or memory.shape[2] != inputs.shape[2]:
            raise ValueError(
                f"RelativeMultiHeadAttention: memory has shape {tuple(memory.shape)} but inputs have {tuple(inputs.shape)}; expected memory [B, Tau, {inputs.shape[2]}] with the inputs' B"
            )
        tau = memory.shape[1]
        full = torch.cat([memory.detach().to(inputs.dtype), inputs], dim=1)
        if self._input_layernorm is not None:
            full = self._input_layernorm(full)
        queries, keys, values = torch.chunk(self._qkv_layer(full), 3, dim=-1)
        queries = split_heads(queries[:, -t:], h, d)  # only the segment asks
        keys, values = split_heads(keys, h, d), split_heads(values, h, d)
        rel = torch.reshape(self._pos_proj(self._rel_pos_embedding(tau + t)), (tau + t, h, d))
        score = torch.einsum("bihd,bjhd->bijh", queries + self._uvar, keys)
        pos_score = torch.einsum("bihd,jhd->bijh", queries + self._vvar, rel)
        score = (score + self.rel_shift(pos_score)) / d**0.5
        return self._linear_layer(causal_attention(score, values, tau))

    @staticmethod
    def rel_shift(x: TensorType) -> TensorType:
        """Aligns relative-position scores with key positions.

        ``x`` is [B, T, M, H] with column k scored against distance M - 1 - k.
        Entry [b, i, j] of the result is ``x[b, i, j + T - 1 - i]`` for every
        causal pair (j <= M - T + i), i.e. the score for the distance of query
        i to key j; other entries are left-over values, masked later.
        Transformer-XL's pad-and-reshape trick.
        """
        b, t, m, h = x.shape
        padded = nn.functional.pad(x, (0, 0, 1, 0))  # a zero column in front: [B, T, M + 1, H]
        reread = torch.reshape(padded, (b, m + 1, t, h))
        return torch.reshape(reread[:, 1:], (b, t, m, h))
