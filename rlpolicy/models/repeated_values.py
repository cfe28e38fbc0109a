"""Batched variable-length lists (RLlib 1.11's ``ray.rllib.models.repeated_values``)."""

from __future__ import annotations

from typing import Any, List, Optional

from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import TensorStructType, TensorType


@PublicAPI
class RepeatedValues:
    """A batch of lists of items of a ``Repeated`` space, padded to ``max_len``.

    Models get one as ``input_dict["obs"]`` (or inside it) when the
    observation space is (or holds) a
    :class:`rlpolicy.utils.spaces.repeated.Repeated`. For
    ``Repeated(Repeated(Box(K), N), M)`` the obs is
    ``RepeatedValues(RepeatedValues(<[B, M, N, K]>))``: the tensor is
    ``obs.values.values``, the outer list lengths ``obs.lengths`` ([B], in
    [0, M]) and the inner ones ``obs.values.lengths`` ([B, M], in [0, N]).

    Attributes:
        values: The padded data: a tensor [B, max_len, ..., size] (or a
            dict / tuple / list of them, or a RepeatedValues, following the
            child space); slots past an item's length hold zeros.
        lengths: Number of valid items per list, [B, ...] (with one extra
            dim per enclosing list). As in RLlib 1.11 this is the slice of
            the flat observation that holds them, so it has the
            observation's (float) dtype.
        max_len: The largest number of items of a list.
    """

    def __init__(self, values: TensorStructType, lengths: TensorType, max_len: int):
        """Wraps padded ``values`` with their ``lengths`` (no copy, no check).

        Args:
            values: The padded data (see the class docstring).
            lengths: The number of valid items per list.
            max_len: The size of the repeat axis of ``values``.
        """
        self.values = values
        self.lengths = lengths
        self.max_len = max_len
        self._unbatched_repr: Optional[List[List[Any]]] = None

    def unbatch_all(self) -> List[List[TensorStructType]]:
        """The batch as Python lists: ``B`` lists holding each list's valid items.

        Needs concrete values (numpy, torch, eager TF); the result is computed
        once and cached.

        Example: values [2, 3, K] with lengths [2, 0] gives
        ``[[values[0, 0], values[0, 1]], []]``.

        Raises:
            ValueError: The batch size is unknown (a TF graph-mode tensor).
        """
        if self._unbatched_repr is None:
            batch = _batch_size(self.values)
            if batch is None:
                raise ValueError(
                    "RepeatedValues.unbatch_all() needs a known batch size; the "
                    "values are symbolic (TF graph mode?): use .values/.lengths"
                )
            slices = self.unbatch_repeat_dim()
            self._unbatched_repr = [
                [_select(slices, i, j) for j in range(_as_int(self.lengths[i]))] for i in range(int(batch))
            ]
        return self._unbatched_repr

    def unbatch_repeat_dim(self) -> List[TensorStructType]:
        """Splits off the repeat axis: ``max_len`` slices [B, ...] (still padded).

        For dict / tuple values the split happens at every leaf, so the result
        keeps the values' structure with a list of ``max_len`` slices at each
        leaf, as RLlib 1.11 returns it.
        """
        return _split_repeat_axis(self.values, self.max_len)

    def __repr__(self) -> str:
        return f"RepeatedValues(value={self.values!r}, lengths={self.lengths!r}, max_len={self.max_len})"

    def __str__(self) -> str:
        return repr(self)


class _RepeatSlices(list):
    """The ``max_len`` slices of one leaf (so a Tuple space's list is not taken for them)."""


def _as_int(length: Any) -> int:
    if hasattr(length, "item"):
        return int(length.item())
    return int(length.numpy()) if hasattr(length, "numpy") else int(length)


def _batch_size(values: Any) -> Optional[int]:
    """The leading dim of the first leaf of ``values`` (None if not known statically)."""
    if isinstance(values, dict):
        return _batch_size(next(iter(values.values())))
    if isinstance(values, (tuple, list)):
        return _batch_size(values[0])
    if isinstance(values, RepeatedValues):
        return _batch_size(values.values)
    dim = values.shape[0]
    dim = getattr(dim, "value", dim)  # a TF1 Dimension
    return None if dim is None else int(dim)


def _split_repeat_axis(values: Any, max_len: int) -> Any:
    if isinstance(values, dict):
        return {k: _split_repeat_axis(v, max_len) for k, v in values.items()}
    if isinstance(values, (tuple, list)):
        return type(values)(_split_repeat_axis(v, max_len) for v in values)
    if isinstance(values, RepeatedValues):
        # An inner list: each slice is again a batch of lists (RLlib 1.11 splits its
        # lengths [B, max_len, ...] alongside).
        return _RepeatSlices(_take(values, i) for i in range(max_len))
    return _RepeatSlices(values[:, i, ...] for i in range(max_len))


def _take(values: Any, i: int) -> Any:
    """``values`` at index ``i`` of axis 1, at every leaf and every inner lengths tensor."""
    if isinstance(values, dict):
        return {k: _take(v, i) for k, v in values.items()}
    if isinstance(values, (tuple, list)):
        return type(values)(_take(v, i) for v in values)
    if isinstance(values, RepeatedValues):
        return RepeatedValues(_take(values.values, i), values.lengths[:, i, ...], values.max_len)
    return values[:, i, ...]


def _select(slices: Any, i: int, j: int) -> Any:
    """Item ``j`` of batch row ``i`` from the output of ``_split_repeat_axis``."""
    if isinstance(slices, _RepeatSlices):
        part = slices[j]
        return part.unbatch_all()[i] if isinstance(part, RepeatedValues) else part[i, ...]
    if isinstance(slices, dict):
        return {k: _select(v, i, j) for k, v in slices.items()}
    return type(slices)(_select(v, i, j) for v in slices)


__all__ = ["RepeatedValues"]
