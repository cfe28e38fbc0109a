"""Causal multi-head self-attention (RLlib's ``ray.rllib.models.torch.modules.MultiHeadAttention``).

Vaswani et al. 2017, "Attention Is All You Need": one bias-free linear layer
projects [B, T, in_dim] to queries, keys and values (H heads of size d each);
every position attends to itself and all earlier positions with
softmax(q k^T / sqrt(d)); the concatenated heads pass a bias-free output
projection to [B, T, out_dim].
"""

from __future__ import annotations

from typing import Any

from rlpolicy.models.torch.misc import SlimFC
from rlpolicy.models.torch.modules._attention import causal_attention, split_heads
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, nn = try_import_torch()
# A name mypy accepts as a base class (nn is a variable here); object without torch.
_Module: Any = nn.Module if nn is not None else object


@PublicAPI
class MultiHeadAttention(_Module):
    """Causal multi-head self-attention over the time axis of [B, T, in_dim] inputs."""

    def __init__(self, in_dim: int, out_dim: int, num_heads: int, head_dim: int, **kwargs: Any):
        """Initializes a MultiHeadAttention module.

        Args:
            in_dim: Input size per timestep.
            out_dim: Output size per timestep.
            num_heads: Number of attention heads (H).
            head_dim: Size of one head (d).
            **kwargs: Passed on to ``nn.Module``.
        """
        super().__init__(**kwargs)
        self._num_heads = num_heads
        self._head_dim = head_dim
        # [q | k | v], each H * d wide.
        self._qkv_layer = SlimFC(in_size=in_dim, out_size=3 * num_heads * head_dim, use_bias=False)
        self._linear_layer = SlimFC(in_size=num_heads * head_dim, out_size=out_dim, use_bias=False)

    def forward(self, inputs: TensorType) -> TensorType:
        """Returns [B, T, out_dim] for inputs [B, T, in_dim]."""
        h, d = self._num_heads, self._head_dim
        queries, keys, values = torch.chunk(self._qkv_layer(inputs), 3, dim=-1)
        score = torch.einsum("bihd,bjhd->bijh", split_heads(queries, h, d), split_heads(keys, h, d))
        out = causal_attention(score / d**0.5, split_heads(values, h, d), 0)
        return self._linear_layer(out)
