"""Helpers shared by the torch attention modules (heads, causal softmax)."""

from __future__ import annotations

from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, nn = try_import_torch()


def split_heads(x: TensorType, num_heads: int, head_dim: int) -> TensorType:
    """[B, T, H * d] -> [B, T, H, d] (head h holds features h*d .. (h+1)*d - 1)."""
    return torch.reshape(x, (x.shape[0], x.shape[1], num_heads, head_dim))


def causal_attention(score: TensorType, values: TensorType, memory_len: int) -> TensorType:
    """Softmax-weights ``values`` by ``score`` under a causal mask; merges the heads.

    Args:
        score: [B, T, M, H] scaled attention logits of the T queries (the last
            T of the M = memory_len + T key positions) against all M keys.
        values: [B, M, H, d].
        memory_len: Number of (memory) key positions before the first query.

    Returns:
        [B, T, H * d]: query i sees the keys 0 .. memory_len + i only.
    """
    t, m = score.shape[1], score.shape[2]
    query_pos = torch.arange(t, device=score.device)[:, None] + memory_len
    key_pos = torch.arange(m, device=score.device)[None, :]
    visible = (key_pos <= query_pos)[None, :, :, None]  # [1, T, M, 1]
    masked = torch.where(visible, score, torch.full_like(score, -1e30))
    weights = nn.functional.softmax(masked, dim=2)
    out = torch.einsum("bijh,bjhd->bihd", weights, values)
    return torch.reshape(out, (out.shape[0], out.shape[1], out.shape[2] * out.shape[3]))
