"""Numpy helpers (RLlib 1.11's ``ray.rllib.utils.numpy``).

Reference implementations of small network pieces (dense layer, LSTM),
activations and losses in plain numpy, plus conversion of nested framework
tensors to numpy. Importing this module never imports torch or tensorflow:
a framework is only touched when an object that came from it is seen.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from types import MappingProxyType
from typing import Any, List, Optional, Union

import numpy as np
import tree  # dm-tree

from rlpolicy.utils.deprecation import DEPRECATED_VALUE, deprecation_warning
from rlpolicy.utils.typing import SpaceStruct, TensorStructType, TensorType

SMALL_NUMBER = 1e-6
# Some large int number. May be increased here, if needed.
LARGE_INTEGER = 100000000
# Min and Max outputs (clipped) from an NN-output layer interpreted as the
# log(x) of some x (e.g. a stddev of a normal distribution).
MIN_LOG_NN_OUTPUT = -5
MAX_LOG_NN_OUTPUT = 2


def _torch_if_loaded():
    """Returns the torch module only if the caller already imported it."""
    return sys.modules.get("torch")


def _tf_if_loaded():
    """Returns the tensorflow module only if the caller already imported it."""
    return sys.modules.get("tensorflow")


def _is_torch_tensor(x: Any) -> bool:
    torch = _torch_if_loaded()
    return torch is not None and isinstance(x, torch.Tensor)


def _is_tf_tensor(x: Any) -> bool:
    tf = _tf_if_loaded()
    if tf is None or not hasattr(tf, "Tensor"):
        return False
    return isinstance(x, (tf.Tensor, tf.Variable))


def aligned_array(size: int, dtype, align: int = 64) -> np.ndarray:
    """Returns an uninitialised 1D array whose data starts at an ``align``-byte boundary.

    Args:
        size: Number of elements.
        dtype: Numpy dtype of the elements.
        align: Byte alignment of the first element.

    Returns:
        A 1D array of ``size`` elements of ``dtype``.
    """
    dtype = np.dtype(dtype)
    n_bytes = size * dtype.itemsize
    raw = np.empty(n_bytes + (align - 1), dtype=np.uint8)
    misalign = raw.ctypes.data % align
    offset = 0 if misalign == 0 else align - misalign
    if n_bytes == 0:
        # Keep a reference into `raw` so numpy does not hand back a fresh buffer.
        return raw[offset : offset + 1][0:0].view(dtype)
    out = raw[offset : offset + n_bytes].view(dtype)
    if len(out) != size or out.ctypes.data % align != 0:  # pragma: no cover
        raise RuntimeError(f"aligned_array: could not align {size} x {dtype} to {align} bytes")
    return out


def concat_aligned(items: List[np.ndarray], time_major: Optional[bool] = None) -> Union[np.ndarray, list]:
    """Concatenates arrays along the batch axis into a 64-byte aligned buffer.

    Aligned memory speeds up later copies to the GPU. Non-float/uint8 inputs
    fall back to a plain ``np.concatenate``.

    Args:
        items: The arrays to concatenate.
        time_major: If True, the batch axis is axis 1 (axis 0 is time);
            if False or None, the batch axis is axis 0.

    Returns:
        The concatenated array (``[]`` for no items, the item itself for one).
    """
    if len(items) == 0:
        return []
    if len(items) == 1:
        # Note: RLlib returns the single item itself (no copy).
        return items[0]
    axis = 1 if time_major else 0
    first = items[0]
    if not (isinstance(first, np.ndarray) and first.dtype in (np.float32, np.float64, np.uint8)):
        return np.concatenate(items, axis=axis)
    batch_dim = sum(s.shape[axis] for s in items)
    if time_major:
        new_shape = (first.shape[0], batch_dim) + first.shape[2:]
    else:
        new_shape = (batch_dim,) + first.shape[1:]
    flat = aligned_array(sum(s.size for s in items), first.dtype)
    out = flat.reshape(new_shape)
    np.concatenate(items, out=out, axis=axis)
    return out


def _tensor_to_numpy(item: Any) -> Any:
    if _is_torch_tensor(item):
        if item.dim() == 0:
            return item.detach().cpu().item()
        return item.detach().cpu().numpy()
    if _is_tf_tensor(item) and hasattr(item, "numpy"):
        return item.numpy()
    return item


def convert_to_numpy(x: TensorStructType, reduce_type: bool = True, reduce_floats=DEPRECATED_VALUE) -> Any:
    """Converts a (nested) structure of torch/tf tensors to numpy.

    Scalar torch tensors become python numbers. Eager tf tensors/variables
    become numpy arrays. Everything else is passed through.

    Args:
        x: Any (possibly nested) structure.
        reduce_type: If True, float arrays become float32 and int64 arrays
            int32 (as in RLlib).
        reduce_floats: Deprecated alias of ``reduce_type``.

    Returns:
        The same structure with numpy leaves.
    """
    if reduce_floats != DEPRECATED_VALUE:
        deprecation_warning(old="reduce_floats", new="reduce_type", error=False)
        reduce_type = reduce_floats

    def mapping(item):
        ret = _tensor_to_numpy(item)
        if reduce_type and isinstance(ret, np.ndarray):
            if np.issubdtype(ret.dtype, np.floating):
                ret = ret.astype(np.float32)
            elif ret.dtype == np.int64:
                # RLlib reduces only the default (64-bit) ints; uint8 images stay.
                ret = ret.astype(np.int32)
        return ret

    return tree.map_structure(mapping, x)


def fc(
    x: np.ndarray, weights: np.ndarray, biases: Optional[np.ndarray] = None, framework: Optional[str] = None
) -> np.ndarray:
    """A dense layer ``x @ weights + biases`` in numpy.

    Args:
        x: Input of shape ``[B, in]`` (tensors are converted to numpy).
        weights: ``[in, out]``; torch layers store ``[out, in]``, which is
            detected and transposed when ``framework="torch"``.
        biases: Optional ``[out]``.
        framework: The framework the weights come from.

    Returns:
        ``[B, out]`` output.
    """

    def to_np(data, transpose=False):
        if data is None:
            return None
        data = np.asarray(_tensor_to_numpy(data))
        return np.transpose(data) if transpose else data

    x = to_np(x)
    weights = np.asarray(_tensor_to_numpy(weights))
    # Torch stores the weight matrix transposed ([out, in]).
    transpose = framework == "torch" and x.shape[1] != weights.shape[0] and x.shape[1] == weights.shape[1]
    weights = to_np(weights, transpose=transpose)
    biases = to_np(biases)
    return np.matmul(x, weights) + (0.0 if biases is None else biases)


def flatten_inputs_to_1d_tensor(
    inputs: TensorStructType, spaces_struct: Optional[SpaceStruct] = None, time_axis: bool = False
) -> np.ndarray:
    """Flattens and concatenates a nested input struct into one ``[B, n]`` array.

    Discrete components are one-hot encoded, MultiDiscrete components
    multi-one-hot encoded (when ``spaces_struct`` is given), all others
    flattened. Everything becomes float32.

    Args:
        inputs: Nested structure of ``[B, ...]`` (or ``[B, T, ...]``) arrays.
        spaces_struct: Matching structure of spaces, or None.
        time_axis: Whether the inputs have a time axis after the batch axis.

    Returns:
        ``[B, n]`` (or ``[B, T, n]``) float32 array.
    """
    from gymnasium.spaces import Discrete, MultiDiscrete

    flat_inputs = tree.flatten(inputs)
    flat_spaces = tree.flatten(spaces_struct) if spaces_struct is not None else [None] * len(flat_inputs)
    B: Any = None
    T: Any = None
    out = []
    for input_, space in zip(flat_inputs, flat_spaces):
        input_ = np.asarray(input_)
        if B is None:
            B = input_.shape[0]
            T = input_.shape[1] if time_axis else None
        lead = [B * T] if time_axis else [B]
        if isinstance(space, Discrete):
            out.append(one_hot(np.reshape(input_, lead), depth=space.n).astype(np.float32))
        elif isinstance(space, MultiDiscrete):
            input_ = np.reshape(input_, lead + [-1])
            out.append(
                np.concatenate(
                    [one_hot(input_[:, i], depth=n).astype(np.float32) for i, n in enumerate(space.nvec)],
                    axis=-1,
                )
            )
        else:
            out.append(np.reshape(input_, lead + [-1]).astype(np.float32))
    merged = np.concatenate(out, axis=-1)
    if time_axis:
        merged = np.reshape(merged, [B, T, -1])
    return merged


def make_action_immutable(obj: Any) -> Any:
    """Makes an action read-only: arrays get ``writeable=False``, dicts become mapping proxies.

    Args:
        obj: The action (leaf of an action struct).

    Returns:
        The immutable version of ``obj`` (other types pass through).
    """
    if isinstance(obj, np.ndarray):
        obj.setflags(write=False)
        return obj
    if isinstance(obj, OrderedDict):
        return MappingProxyType(dict(obj))
    if isinstance(obj, dict):
        return MappingProxyType(obj)
    return obj


def huber_loss(x: np.ndarray, delta: float = 1.0) -> np.ndarray:
    """Elementwise Huber loss: ``0.5 x^2`` for ``|x| < delta``, else ``delta (|x| - delta/2)``."""
    x = np.asarray(x)
    return np.where(np.abs(x) < delta, np.power(x, 2.0) * 0.5, delta * (np.abs(x) - 0.5 * delta))


def l2_loss(x: np.ndarray) -> np.ndarray:
    """Half the sum of squares of ``x`` (as ``tf.nn.l2_loss``)."""
    return np.sum(np.square(x)) / 2.0


def lstm(
    x: np.ndarray,
    weights: np.ndarray,
    biases: Optional[np.ndarray] = None,
    initial_internal_states: Optional[np.ndarray] = None,
    time_major: bool = False,
    forget_bias: float = 1.0,
):
    """Runs a Keras/TF-layout LSTM over a sequence in numpy.

    The kernel packs the four gates as ``[input, cell-candidate, forget, output]``
    column blocks of ``units`` each; rows are ``[x_t, h_{t-1}]``.

    Args:
        x: ``[B, T, in]`` (or ``[T, B, in]`` if ``time_major``).
        weights: ``[in + units, 4 * units]`` kernel.
        biases: ``[4 * units]`` bias (zeros if None).
        initial_internal_states: ``(c0, h0)``, each ``[B, units]``; zeros if None.
        time_major: Whether axis 0 of ``x`` is time.
        forget_bias: Constant added to the forget gate pre-activation.

    Returns:
        ``(outputs, (c, h))``: all hidden states (``[B, T, units]`` or
        time-major) and the final cell and hidden states.
    """
    x = np.asarray(x)
    if x.ndim != 3:
        raise ValueError(f"lstm: x must be 3D ([B, T, in] or [T, B, in]), got shape {x.shape}")
    T, B = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
    units = weights.shape[1] // 4
    if initial_internal_states is None:
        c, h = np.zeros((B, units)), np.zeros((B, units))
    else:
        c, h = initial_internal_states[0], initial_internal_states[1]
    if biases is None:
        biases = np.zeros(weights.shape[1])
    outputs = np.zeros((T, B, units) if time_major else (B, T, units))
    for t in range(T):
        x_t = x[t] if time_major else x[:, t]
        z = np.matmul(np.concatenate((x_t, h), axis=1), weights) + biases
        i_gate = sigmoid(z[:, :units])
        candidate = np.tanh(z[:, units : 2 * units])
        f_gate = sigmoid(z[:, 2 * units : 3 * units] + forget_bias)
        o_gate = sigmoid(z[:, 3 * units :])
        c = c * f_gate + i_gate * candidate
        h = o_gate * np.tanh(c)
        if time_major:
            outputs[t] = h
        else:
            outputs[:, t] = h
    return outputs, (c, h)


def one_hot(x: TensorType, depth: int = 0, on_value: float = 1.0, off_value: float = 0.0) -> np.ndarray:
    """One-hot encodes integer (or bool) values along a new last axis.

    Args:
        x: Int/bool scalar or array (torch tensors are converted).
        depth: Number of classes; 0 means ``max(x) + 1``. Bool input always
            uses depth 2.
        on_value: Value at the hot index.
        off_value: Value everywhere else.

    Returns:
        Float array of shape ``x.shape + (depth,)``.

    Raises:
        ValueError: If a value of ``x`` is not smaller than ``depth``.
    """
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        x = np.array(x, dtype=np.int32)
    else:
        x = np.asarray(_tensor_to_numpy(x))
    if x.dtype == np.bool_:
        x = x.astype(np.int64)
        depth = 2
    if depth == 0:
        depth = int(np.max(x)) + 1
    if x.size and (np.max(x) >= depth or np.min(x) < 0):
        raise ValueError(
            f"one_hot: values of x must lie in [0, {depth}) (depth), got max {np.max(x)}, min {np.min(x)}"
        )
    out = np.full(x.shape + (depth,), off_value, dtype=np.float64)
    np.put_along_axis(out, x.astype(np.int64)[..., None], on_value, axis=-1)
    return out


def relu(x: np.ndarray, alpha: float = 0.0) -> np.ndarray:
    """(Leaky) ReLU: ``max(x, alpha * x)``.

    Note: RLlib 1.11 writes the result into ``x`` in place; rlpolicy returns a new array.
    """
    x = np.asarray(x)
    return np.maximum(x, x * alpha)


def sigmoid(x: np.ndarray, derivative: bool = False) -> np.ndarray:
    """Logistic sigmoid; with ``derivative=True``, ``x (1 - x)`` (x being a sigmoid output)."""
    if derivative:
        return x * (1 - x)
    return 1 / (1 + np.exp(-x))


def softmax(x: np.ndarray, axis: int = -1, epsilon: Optional[float] = None) -> np.ndarray:
    """Softmax along ``axis``, floored at ``epsilon`` (default ``SMALL_NUMBER``).

    Args:
        x: Logits.
        axis: Axis to normalise over.
        epsilon: Minimum output value (avoids exact zeros).

    Returns:
        Array of the same shape as ``x``.
    """
    x = np.asarray(x)
    # Shifting by the max does not change the result and avoids overflow.
    x_exp = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return np.maximum(x_exp / np.sum(x_exp, axis, keepdims=True), epsilon or SMALL_NUMBER)


__all__ = [
    "SMALL_NUMBER",
    "LARGE_INTEGER",
    "MIN_LOG_NN_OUTPUT",
    "MAX_LOG_NN_OUTPUT",
    "aligned_array",
    "concat_aligned",
    "convert_to_numpy",
    "fc",
    "flatten_inputs_to_1d_tensor",
    "make_action_immutable",
    "huber_loss",
    "l2_loss",
    "lstm",
    "one_hot",
    "relu",
    "sigmoid",
    "softmax",
]
