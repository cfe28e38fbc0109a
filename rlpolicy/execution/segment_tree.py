"""Segment trees for prioritized replay (RLlib 1.11's ``ray.rllib.execution.segment_tree``).

A segment tree over ``capacity`` leaves (a power of 2) keeps, in every inner
node, the reduction (sum, min or max) of its two children, so any range
reduction and any single update take O(log capacity). rlpolicy keeps the
nodes in one numpy array (node ``i`` has children ``2i`` and ``2i+1``; the
leaves are ``capacity .. 2*capacity-1``), which lets ``__setitem__`` and
``find_prefixsum_idx`` also work on whole arrays of indices / prefix sums.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, List, Optional, Union

import numpy as np

from rlpolicy.utils.annotations import DeveloperAPI

IndexLike = Union[int, np.integer, np.ndarray, List[int]]

_UFUNCS = {operator.add: np.add, min: np.minimum, max: np.maximum}
_NEUTRAL = {operator.add: 0.0, min: float("inf"), max: float("-inf")}


@DeveloperAPI
class SegmentTree:
    """A binary tree whose inner nodes hold the reduction of their children.

    Args:
        capacity: Number of leaves; a positive power of 2.
        operation: ``operator.add``, ``min`` or ``max``.
        neutral_element: The value of empty leaves (0 for add, +inf for min,
            -inf for max if None).

    Raises:
        ValueError: For a capacity that is not a positive power of 2 or an
            unsupported operation.
    """

    def __init__(
        self, capacity: int, operation: Callable[[Any, Any], Any], neutral_element: Optional[float] = None
    ):
        if not isinstance(capacity, (int, np.integer)) or capacity <= 0 or capacity & (capacity - 1):
            raise ValueError(f"SegmentTree: capacity must be a positive power of 2, got {capacity!r}")
        if operation not in _UFUNCS:
            raise ValueError(f"SegmentTree: operation must be operator.add, min or max, got {operation!r}")
        self.capacity = int(capacity)
        self.operation = operation
        self._ufunc = _UFUNCS[operation]
        self.neutral_element = _NEUTRAL[operation] if neutral_element is None else neutral_element
        self.value = np.full(2 * self.capacity, self.neutral_element, dtype=np.float64)

    def reduce(self, start: int = 0, end: Optional[int] = None) -> float:
        """Reduction of the leaves ``start .. end-1`` (``end`` None: to the end; negative:
        counted from the end). The neutral element for an empty range."""
        end = self.capacity if end is None else (end + self.capacity if end < 0 else end)
        if not 0 <= start <= self.capacity or not 0 <= end <= self.capacity:
            raise IndexError(f"SegmentTree.reduce: range [{start}, {end}) outside [0, {self.capacity}]")
        if start == 0 and end == self.capacity:
            # The walk below would end at the root, combining it with the neutral element.
            return float(self.operation(self.neutral_element, self.value[1]))
        result = self.neutral_element
        lo, hi = start + self.capacity, end + self.capacity
        while lo < hi:
            if lo & 1:
                result = self.operation(result, self.value[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                result = self.operation(result, self.value[hi])
            lo //= 2
            hi //= 2
        return float(result)

    def __setitem__(self, idx: IndexLike, val: Any) -> None:
        """Sets leaf ``idx`` (or the leaves of an index array) and updates their ancestors."""
        if isinstance(idx, (int, np.integer)) and np.ndim(val) == 0:
            self._set_one(int(idx), float(val))
            return
        leaves = self.check_index(idx).reshape(-1) + self.capacity
        set_leaves([self], leaves, [val])

    def _set_one(self, idx: int, val: float) -> None:
        """The scalar update: a plain walk up the tree (no array machinery)."""
        if not 0 <= idx < self.capacity:
            raise IndexError(f"{type(self).__name__}: index out of range [0, {self.capacity}): {idx!r}")
        value, op = self.value, self.operation
        node = idx + self.capacity
        value[node] = val
        node >>= 1
        while node >= 1:
            value[node] = op(value[2 * node], value[2 * node + 1])
            node >>= 1

    def __getitem__(self, idx: IndexLike) -> Any:
        """The value of leaf ``idx`` (an array for an index array)."""
        leaves = self.check_index(idx) + self.capacity
        out = self.value[leaves]
        return float(out) if np.ndim(idx) == 0 else out

    def check_index(self, idx: IndexLike) -> np.ndarray:
        """``idx`` as int64 item indices; TypeError for non-integers, IndexError out of range."""
        arr = np.asarray(idx)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{type(self).__name__}: indices must be ints, got {idx!r}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.capacity):
            raise IndexError(f"{type(self).__name__}: index out of range [0, {self.capacity}): {idx!r}")
        return arr.astype(np.int64)

    def get_state(self) -> List[float]:
        """All node values (for checkpoints)."""
        return self.value.tolist()

    def set_state(self, state: List[float]) -> None:
        """Restores node values from ``get_state``.

        Raises:
            ValueError: If the state belongs to a tree of another capacity.
        """
        arr = np.asarray(state, dtype=np.float64)
        if arr.shape != self.value.shape:
            raise ValueError(
                f"{type(self).__name__}.set_state: state has {arr.size} nodes, "
                f"this tree has {self.value.size}"
            )
        self.value = arr.copy()


def set_leaves(trees: List[SegmentTree], leaves: np.ndarray, values: List[Any]) -> None:
    """Sets the ``leaves`` (node numbers) of each tree to its ``values`` and
    recomputes their ancestors, level by level (trees of one capacity)."""
    if not leaves.size:
        return
    for tree, val in zip(trees, values):
        tree.value[leaves] = val
    depth = trees[0].capacity.bit_length() - 1
    # Row l: the ancestors l+1 levels up (a node listed twice gets the same value twice).
    nodes = leaves[None, :] >> np.arange(1, depth + 1)[:, None]
    left = 2 * nodes
    right = left + 1
    for level in range(depth):
        n, lo, hi = nodes[level], left[level], right[level]
        for tree in trees:
            tree.value[n] = tree._ufunc(tree.value[lo], tree.value[hi])


@DeveloperAPI
class SumSegmentTree(SegmentTree):
    """A segment tree of sums, with prefix-sum search (proportional sampling)."""

    def __init__(self, capacity: int):
        super().__init__(capacity=capacity, operation=operator.add)

    def sum(self, start: int = 0, end: Optional[int] = None) -> float:
        """Sum of the leaves ``start .. end-1``."""
        return self.reduce(start, end)

    def find_prefixsum_idx(self, prefixsum: Union[float, np.ndarray]) -> Union[int, np.ndarray]:
        """The highest index ``i`` with ``sum(0, i) <= prefixsum`` (the leaf whose
        cumulative interval contains ``prefixsum``); vectorised over an array.

        Raises:
            ValueError: If a prefix sum is negative or above the total (+1e-5).
        """
        mass = np.array(prefixsum, dtype=np.float64, ndmin=1)
        total = self.value[1]
        if np.any(mass < 0) or np.any(mass > total + 1e-5):
            raise ValueError(
                f"SumSegmentTree.find_prefixsum_idx: prefixsum must lie in [0, {total}], got {prefixsum!r}"
            )
        idx = np.ones(mass.shape, dtype=np.int64)
        value = self.value
        for _ in range(self.capacity.bit_length() - 1):  # one level down per pass
            left = 2 * idx
            left_val = value[left]
            go_right = left_val <= mass  # then the mass left of it is passed over
            mass -= left_val * go_right
            idx = left + go_right
        out = idx - self.capacity
        return int(out[0]) if np.ndim(prefixsum) == 0 else out


@DeveloperAPI
class MinSegmentTree(SegmentTree):
    """A segment tree of minima."""

    def __init__(self, capacity: int):
        super().__init__(capacity=capacity, operation=min)

    def min(self, start: int = 0, end: Optional[int] = None) -> float:
        """Minimum of the leaves ``start .. end-1``."""
        return self.reduce(start, end)


__all__ = ["MinSegmentTree", "SegmentTree", "SumSegmentTree"]
