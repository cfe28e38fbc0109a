"""The Keras base class and small shape helpers shared by the TF layers."""

from __future__ import annotations

from typing import Any, List, Optional

from rlpolicy._core import batch_ops
from rlpolicy.utils.framework import get_keras, try_import_tf

tf1, tf, tfv = try_import_tf()

if tf is not None:
    keras: Any = get_keras()
    KerasLayer: Any = keras.layers.Layer
else:  # tensorflow missing: the classes still import, but cannot be used.
    keras = None
    KerasLayer = object


def static_dims(shape: Any) -> Optional[List[Optional[int]]]:
    """The dims of a (Tensor)Shape or tuple as ints/None; None if the rank is unknown."""
    return None if shape is None else batch_ops.static_dims(shape)


def split_heads(x: Any, num_heads: int, head_dim: int) -> Any:
    """[B, T, H * d] -> [B, T, H, d] (head h holds features h*d .. (h+1)*d - 1)."""
    return tf.reshape(x, [tf.shape(x)[0], tf.shape(x)[1], num_heads, head_dim])


def causal_attention(score: Any, values: Any, memory_len: Any) -> Any:
    """Softmax-weights ``values`` by ``score`` under a causal mask; merges the heads.

    Args:
        score: [B, T, M, H] scaled attention logits of the T queries (the last
            T of the M = memory_len + T key positions) against all M keys.
        values: [B, M, H, d].
        memory_len: Number of (memory) key positions before the first query.

    Returns:
        [B, T, H * d]: query i sees the keys 0 .. memory_len + i only.
    """
    t = tf.shape(score)[1]
    mask = tf.sequence_mask(tf.range(memory_len + 1, memory_len + t + 1), maxlen=memory_len + t)
    mask = tf.broadcast_to(mask[None, :, :, None], tf.shape(score))
    masked = tf.where(mask, score, tf.fill(tf.shape(score), tf.constant(-1e30, score.dtype)))
    weights = tf.nn.softmax(masked, axis=2)
    out = tf.einsum("bijh,bjhd->bihd", weights, values)
    shape = tf.shape(out)
    dims = static_dims(out.shape)
    heads, depth = (
        dims[2:4] if dims is not None else (None, None)
    )  # static (H, d) keep the last dim known for Dense
    width = heads * depth if heads is not None and depth is not None else shape[2] * shape[3]
    return tf.reshape(out, [shape[0], shape[1], width])
