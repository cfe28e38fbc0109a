"""Small TF building blocks shared by the default TF models (RLlib's
``ray.rllib.models.tf.misc``), plus the input checks our models run.

Everything here works both inside a ``tf1.Graph`` (graph mode) and eagerly.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from rlpolicy._core.batch_ops import static_dims
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.typing import TensorType

tf1, tf, tfv = try_import_tf()


@DeveloperAPI
def normc_initializer(std: float = 1.0) -> Any:
    """Returns a kernel initializer whose columns have L2 norm ``std``.

    The values are drawn with numpy's global RNG (seed it with
    ``np.random.seed`` for reproducible weights), then each output column
    (axis 0 sums) is rescaled to norm ``std``.

    Args:
        std: The target L2 norm of every column.

    Returns:
        A callable ``(shape, dtype=None, partition_info=None) -> tf.Tensor``
        usable as a Keras ``kernel_initializer``.
    """

    def _initializer(shape, dtype=None, partition_info=None):
        np_dtype = getattr(dtype, "as_numpy_dtype", None) or dtype or np.float32
        values = np.random.randn(*shape).astype(np_dtype)
        values *= std / np.sqrt(np.square(values).sum(axis=0, keepdims=True))
        return tf.constant(values)

    return _initializer


@DeveloperAPI
def conv2d(
    x: TensorType,
    num_filters: int,
    name: str,
    filter_size: Tuple[int, int] = (3, 3),
    stride: Tuple[int, int] = (1, 1),
    pad: str = "SAME",
    dtype: Optional[Any] = None,
    collections: Optional[Any] = None,
) -> TensorType:
    """A 2D convolution with variables ``<name>/W`` and ``<name>/b``.

    The kernel is Glorot-uniform initialised, the bias (shape
    ``[1, 1, 1, num_filters]``) starts at zero.

    Args:
        x: NHWC input tensor with a known channel dimension.
        num_filters: Number of output channels.
        name: Variable scope for ``W`` and ``b``.
        filter_size: Kernel (height, width).
        stride: Stride (height, width).
        pad: "SAME" or "VALID".
        dtype: Variable dtype (default float32).
        collections: Optional variable collections.

    Returns:
        The convolved tensor (bias added, no activation).
    """
    dtype = dtype or tf.float32
    in_channels = int(x.get_shape()[3])
    filter_shape = [filter_size[0], filter_size[1], in_channels, num_filters]
    fan_in = np.prod(filter_shape[:3])
    fan_out = np.prod(filter_shape[:2]) * num_filters
    bound = float(np.sqrt(6.0 / (fan_in + fan_out)))
    with tf1.variable_scope(name):
        w = tf1.get_variable(
            "W", filter_shape, dtype, tf1.random_uniform_initializer(-bound, bound), collections=collections
        )
        b = tf1.get_variable(
            "b", [1, 1, 1, num_filters], initializer=tf1.constant_initializer(0.0), collections=collections
        )
    return tf1.nn.conv2d(x, w, [1, stride[0], stride[1], 1], pad) + b


@DeveloperAPI
def linear(
    x: TensorType,
    size: int,
    name: str,
    initializer: Optional[Any] = None,
    bias_init: float = 0.0,
) -> TensorType:
    """A dense layer ``x @ W + b`` with variables ``<name>/w`` and ``<name>/b``.

    Args:
        x: 2D input tensor with a known last dimension.
        size: Number of output units.
        name: Prefix of the variable names.
        initializer: Kernel initializer (TF's default if None).
        bias_init: Constant initial bias.

    Returns:
        The output tensor of shape ``[B, size]``.
    """
    w = tf1.get_variable(name + "/w", [x.get_shape()[1], size], initializer=initializer)
    b = tf1.get_variable(name + "/b", [size], initializer=tf1.constant_initializer(bias_init))
    return tf.matmul(x, w) + b


@DeveloperAPI
def flatten(x: TensorType) -> TensorType:
    """Reshapes ``[B, d1, d2, ...]`` into ``[B, d1 * d2 * ...]``."""
    return tf.reshape(x, [-1, int(np.prod(x.get_shape().as_list()[1:]))])


def static_shape(x: TensorType) -> Optional[Tuple[Optional[int], ...]]:
    """The statically known shape of ``x`` (None entries for unknown dims).

    Returns None when even the rank is unknown.
    """
    shape = getattr(x, "shape", None)
    if shape is None:
        return None
    dims = static_dims(shape)
    return None if dims is None else tuple(dims)


def check_input_shape(x: TensorType, expected: Sequence[int], model: Any, what: str = "observation") -> None:
    """Raises ValueError if ``x``'s known shape is not ``[B] + expected``.

    Dimensions unknown at graph-build time (None) are not checked, so graph
    placeholders with a free batch dimension pass.

    Args:
        x: The input tensor (batch first).
        expected: The expected shape without the batch dimension.
        model: The model (its class name and ``name`` go into the message).
        what: What ``x`` is, for the message.

    Raises:
        ValueError: naming the expected and the received shape.
    """
    expected = tuple(int(d) for d in expected)
    received = static_shape(x)
    if received is None:
        return
    rank_ok = len(received) == len(expected) + 1
    dims_ok = rank_ok and all(r is None or r == e for r, e in zip(received[1:], expected))
    if not dims_ok:
        got = [("?" if d is None else d) for d in received]
        raise ValueError(
            f"{type(model).__name__}({getattr(model, 'name', '')!r}): {what} has shape {got} but the "
            f"model expects [batch] + {list(expected)} (from its observation space); "
            f"pass a batch of {what}s of shape [B, {', '.join(map(str, expected))}]"
        )


def one_hot_encode(x: TensorType, space: Any) -> TensorType:
    """One-hot encodes a Discrete [B] or MultiDiscrete [B, k] batch of integers.

    MultiDiscrete components are encoded separately and concatenated.

    Args:
        x: Integer (or integer-valued) tensor.
        space: The Discrete or MultiDiscrete space of ``x``.

    Returns:
        A float32 tensor [B, n] (Discrete) or [B, sum(nvec)] (MultiDiscrete).
    """
    x = tf.cast(x, tf.int32)
    if hasattr(space, "nvec"):  # any nvec shape; values counted from gymnasium's `start`
        nvec = np.ravel(space.nvec)
        start = np.ravel(getattr(space, "start", np.zeros_like(nvec))).astype(np.int32)
        x = tf.reshape(x, [-1, len(nvec)]) - start
        parts = [tf.one_hot(x[:, i], int(n), dtype=tf.float32) for i, n in enumerate(nvec)]
        return tf.concat(parts, axis=-1)
    x = tf.reshape(x, [-1]) - int(getattr(space, "start", 0))
    return tf.one_hot(x, int(space.n), dtype=tf.float32)
