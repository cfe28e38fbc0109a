"""Framework-neutral helpers behind `SampleBatch` (column lengths, slicing, concat, packing).

Nothing here imports torch or tensorflow: a value can only be a torch/tf tensor if that
framework has already been imported by someone, so we look the modules up in `sys.modules`.
"""

from __future__ import annotations

import io
import sys
import zlib
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import tree  # dm-tree

INFOS_KEY = "infos"
SEQ_LENS_KEY = "seq_lens"

# Prefix marking a value produced by `pack` (so `is_packed` never mistakes user bytes).
_PACK_MAGIC = b"RLPZ1:"


def loaded_torch() -> Any:
    """Returns the torch module if it was imported already, else None."""
    return sys.modules.get("torch")


def loaded_tf() -> Any:
    """Returns the tensorflow module if it was imported already, else None."""
    return sys.modules.get("tensorflow")


def is_torch_tensor(value: Any) -> bool:
    torch = loaded_torch()
    return torch is not None and torch.is_tensor(value)


def is_tf_tensor(value: Any) -> bool:
    tf = loaded_tf()
    return tf is not None and hasattr(tf, "is_tensor") and tf.is_tensor(value)


def leaf_length(value: Any) -> Optional[int]:
    """Length of a leaf along axis 0, or None if it has no (known) batch axis."""
    if isinstance(value, np.ndarray):
        return int(value.shape[0]) if value.ndim > 0 else None
    if isinstance(value, list):
        return len(value)
    if is_torch_tensor(value):
        return int(value.shape[0]) if value.dim() > 0 else None
    if is_tf_tensor(value):
        dims = static_dims(value.shape)
        return dims[0] if dims else None
    return None


def static_dims(shape: Any) -> Optional[List[Optional[int]]]:
    """A TF static shape as a list of ints and Nones; None if its rank is unknown.

    The same whether TF's v2 tensorshape behaviour is on (entries are ints or None) or
    off after ``tf.compat.v1.disable_v2_tensorshape()`` (entries are ``Dimension``
    objects, and ``Dimension(None)`` is not None).
    """
    if getattr(shape, "rank", 0) is None:
        return None
    if hasattr(shape, "as_list"):
        return shape.as_list()
    return [None if getattr(d, "value", d) is None else int(getattr(d, "value", d)) for d in shape]


def column_leaves(key: str, value: Any) -> List[Tuple[str, Any]]:
    """Flattens one column into ("col/sub/0"-style path, leaf) pairs; INFOS stays one leaf."""
    if key == INFOS_KEY or not isinstance(value, (dict, tuple)):
        return [(key, value)]
    paths_and_leaves = tree.flatten_with_path(value)
    return [("/".join([key, *map(str, path)]), leaf) for path, leaf in paths_and_leaves]


def map_column(key: str, value: Any, fn: Callable[[Any], Any]) -> Any:
    """Applies `fn` to every leaf of a column (INFOS as a single leaf)."""
    if key == INFOS_KEY or not isinstance(value, (dict, tuple)):
        return fn(value)
    return tree.map_structure(fn, value)


def first_length(key: str, value: Any) -> Optional[int]:
    """The length of the first leaf of a column that has one, else None."""
    for _, leaf in column_leaves(key, value):
        n = leaf_length(leaf)
        if n is not None:
            return n
    return None


def concrete_seq_lens(seq_lens: Any) -> Optional[np.ndarray]:
    """Returns seq_lens as an int numpy array, or None if absent/symbolic."""
    if seq_lens is None:
        return None
    if type(seq_lens) is np.ndarray:  # fast path
        return seq_lens.astype(np.int64, copy=False).reshape(-1)
    if is_torch_tensor(seq_lens):
        return seq_lens.detach().cpu().numpy().astype(np.int64)
    if is_tf_tensor(seq_lens):
        if not hasattr(seq_lens, "numpy"):
            return None  # graph-mode placeholder: value unknown
        return np.asarray(seq_lens.numpy(), dtype=np.int64)
    return np.asarray(seq_lens, dtype=np.int64).reshape(-1)


def slice_leaf(value: Any, start: int, stop: int) -> Any:
    """Slices a leaf along axis 0; leaves without a batch axis are returned as-is."""
    if leaf_length(value) is None:
        return value
    return value[start:stop]


def concat_leaves(values: Sequence[Any], time_major: Optional[bool]) -> Any:
    """Concatenates same-kind leaves along the batch (or, time-major, the second) axis."""
    first = values[0]
    if type(first) is np.ndarray and all(type(v) is np.ndarray for v in values):  # fast path
        if first.ndim == 0:
            return first  # scalars (no batch axis) are not concatenated
        return np.concatenate(values, axis=1 if time_major and first.ndim > 1 else 0)
    if isinstance(first, list):
        out: list = []
        for v in values:
            out.extend(list(v))
        return out
    if is_torch_tensor(first):
        torch = loaded_torch()
        return torch.cat(list(values), dim=1 if time_major and first.dim() > 1 else 0)
    if is_tf_tensor(first):
        tf = loaded_tf()
        return tf.concat(list(values), axis=1 if time_major and first.shape.rank > 1 else 0)
    arrays = [np.asarray(v) for v in values]
    if arrays[0].ndim == 0:
        return arrays[0]  # scalars (no batch axis) are not concatenated
    axis = 1 if time_major and arrays[0].ndim > 1 else 0
    return np.concatenate(arrays, axis=axis)


def leaf_nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if is_torch_tensor(value):
        return int(value.element_size() * value.nelement())
    return sys.getsizeof(value)


def to_torch_leaf(value: Any, device: Any) -> Any:
    """Converts a numpy leaf to a torch tensor on `device` (float64 becomes float32)."""
    torch = loaded_torch()
    if is_torch_tensor(value):
        tensor = value
    elif isinstance(value, np.ndarray):
        if value.dtype == object or value.dtype.kind in "USV":
            return value  # strings/objects cannot become tensors
        tensor = torch.from_numpy(np.ascontiguousarray(value))
    elif isinstance(value, (bool, int, float, np.number, np.bool_)):
        tensor = torch.as_tensor(value)
    else:
        return value
    if tensor.dtype == torch.float64:
        tensor = tensor.float()  # RLlib 1.11: convert_to_torch_tensor casts double to float
    return tensor.to(device)


# ---------------------------------------------------------------------- packing


def pack(value: np.ndarray) -> bytes:
    """Compresses one numpy array (no pickle; object arrays are refused)."""
    array = np.asarray(value)
    if array.dtype == object:
        raise ValueError(
            f"cannot compress an array of dtype object (shape {array.shape}); only numeric/bool/str arrays can be compressed"
        )
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return _PACK_MAGIC + zlib.compress(buf.getvalue())


def is_packed(value: Any) -> bool:
    return isinstance(value, bytes) and value.startswith(_PACK_MAGIC)


def unpack(value: bytes) -> np.ndarray:
    raw = zlib.decompress(value[len(_PACK_MAGIC) :])
    return np.load(io.BytesIO(raw), allow_pickle=False)


def object_array(items: Sequence[Any]) -> np.ndarray:
    """A 1-D object array holding `items` as-is (np.array would coerce bytes/arrays)."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def seq_starts(seq_lens: np.ndarray) -> np.ndarray:
    """Row offsets at which each sequence starts, plus the total at the end."""
    return np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int64)


def seq_index_of_row(starts: np.ndarray, row: int) -> int:
    """Index of the sequence holding `row` (== number of sequences for row == total)."""
    return int(np.searchsorted(starts[:-1], row, side="right")) - 1 if row < starts[-1] else len(starts) - 1


def timeslice_bounds(n: int, size: Optional[int], num_slices: Optional[int]) -> List[Tuple[int, int]]:
    """Row ranges of `SampleBatch.timeslices`: `size` rows each, or `num_slices` near-equal parts.

    Raises:
        ValueError: If size / num_slices is not an int >= 1, or n < num_slices.
    """
    if size is None:
        if not isinstance(num_slices, int) or num_slices < 1:
            raise ValueError(
                f"SampleBatch.timeslices(num_slices={num_slices!r}): num_slices must be an int >= 1"
            )
        if n < num_slices:
            raise ValueError(
                f"SampleBatch.timeslices(num_slices={num_slices}): batch has only {n} rows, fewer than the number of slices"
            )
        bounds, start = [], 0
        for i in range(num_slices):
            stop = start + (n - start) // (num_slices - i)
            bounds.append((start, stop))
            start = stop
        return bounds
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"SampleBatch.timeslices(size={size!r}): size must be an int >= 1")
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def iter_state_keys(keys: Iterable[Any], prefix: str = "state_in_") -> List[str]:
    return [k for k in keys if isinstance(k, str) and k.startswith(prefix)]


def slice_with_left_pad(leaf: Any, start: int, end: int) -> Any:
    if leaf_length(leaf) is None:
        return leaf
    if start >= 0:
        return leaf[start:end]
    arr = np.asarray(leaf)
    zeros = np.zeros((-start,) + arr.shape[1:], dtype=arr.dtype)
    return np.concatenate([zeros, arr[:end]])


def sub_seq_lens(
    seq_lens: np.ndarray, start: int, end: int, state_start: Optional[int], state_end: Optional[int]
) -> tuple:
    """seq_lens and sequence index range [s0, s1) for the rows [start, end)."""
    length = end - start
    if state_start is not None:
        if state_end is None:
            raise ValueError("SampleBatch.slice(): pass both state_start and state_end, or neither")
        lens = [int(x) for x in seq_lens[state_start:state_end]]
        while lens and sum(lens[:-1]) >= length:
            lens.pop()
        if lens:
            lens[-1] = length - sum(lens[:-1])
        return lens, state_start, state_start + len(lens)
    if length <= 0:
        return [], 0, 0
    starts = seq_starts(seq_lens)
    s0 = seq_index_of_row(starts, max(start, 0))
    s_last = max(seq_index_of_row(starts, end - 1), s0)  # end <= 0: all rows are left padding
    lens = [int(min(starts[j + 1], end) - max(starts[j], start)) for j in range(s0, s_last + 1)]
    if start < 0:
        lens[0] += -start  # the left zero-padding joins the first sequence
    return lens, s0, s_last + 1


def padded_positions(seq_lens: np.ndarray, max_seq_len: int) -> np.ndarray:
    """Row index in the right-zero-padded layout of each original row, in order.

    Sequence i (of length seq_lens[i]) occupies padded rows [i*max_seq_len, i*max_seq_len + len).
    """
    seq_lens = np.asarray(seq_lens, dtype=np.int64).reshape(-1)
    if len(seq_lens) == 0:
        return np.zeros(0, dtype=np.int64)
    seq_of_row = np.repeat(np.arange(len(seq_lens), dtype=np.int64), seq_lens)
    seq_start = np.repeat(np.cumsum(seq_lens) - seq_lens, seq_lens)
    return seq_of_row * int(max_seq_len) + (np.arange(int(seq_lens.sum()), dtype=np.int64) - seq_start)


def pad_leaf(leaf: Any, dest: np.ndarray, total: int) -> Any:
    """Right-zero-pads one per-row leaf: row j goes to padded row dest[j] of `total` rows.

    Leaves that are not per-row (length != len(dest)) are returned unchanged; lists and
    object arrays are padded with None.
    """
    if leaf_length(leaf) != len(dest):
        return leaf  # not a per-row column
    if isinstance(leaf, list) or (isinstance(leaf, np.ndarray) and leaf.dtype == object):
        out: Any = [None] * total
        for src, d in enumerate(dest.tolist()):
            out[d] = leaf[src]
        return object_array(out) if isinstance(leaf, np.ndarray) else out
    arr = np.asarray(leaf)
    padded = np.zeros((total,) + arr.shape[1:], dtype=arr.dtype)
    padded[dest] = arr
    return padded


def pack_leaf(leaf: Any, bulk: bool) -> Any:
    """Compresses one leaf: as one blob (`bulk`) or row by row (an object array of blobs)."""
    if is_packed(leaf) or (
        isinstance(leaf, np.ndarray) and leaf.dtype == object and len(leaf) and is_packed(leaf[0])
    ):
        return leaf  # already compressed
    if bulk:
        return pack(np.asarray(leaf))
    return object_array([pack(np.asarray(row)) for row in leaf])


def unpack_leaf(leaf: Any) -> Any:
    if is_packed(leaf):
        return unpack(leaf)
    if isinstance(leaf, np.ndarray) and leaf.dtype == object and len(leaf) and is_packed(leaf[0]):
        return np.stack([unpack(x) for x in leaf])
    return leaf
