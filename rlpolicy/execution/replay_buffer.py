"""Experience replay (RLlib 1.11's ``ray.rllib.execution.replay_buffer``).

- :class:`ReplayBuffer`: a ring buffer of ``SampleBatch`` items with uniform sampling.
- :class:`PrioritizedReplayBuffer`: proportional prioritized replay (Schaul et
  al. 2016): item ``i`` is drawn with probability ``p_i^alpha / sum_k p_k^alpha``
  and carries the importance weight ``(N P(i))^-beta / max_j (N P(j))^-beta``.
- :class:`LocalReplayBuffer`: one buffer per policy; slices incoming batches
  into single timesteps, waits for ``learning_starts`` timesteps before
  replaying, and takes TD errors back as new priorities.

Capacity counts timesteps, as in RLlib: once ``capacity`` timesteps were
added, the oldest items are overwritten. Single-timestep items whose columns
are numpy arrays of one layout (what ``LocalReplayBuffer`` stores) are kept in
numpy columns, one row per item, so adding a batch and sampling are array
operations; other items (several timesteps, sequences, nested or ragged
columns) are kept as a list of SampleBatches, with the same semantics. Sampling uses the ``random`` module
(uniform) and numpy's global RNG (prioritized), so ``random.seed`` /
``np.random.seed`` make runs repeatable.
"""

from __future__ import annotations

import collections
import logging
import random
from typing import Any, Dict, List, Optional, Union

import numpy as np

from rlpolicy.execution.segment_tree import MinSegmentTree, SumSegmentTree, set_leaves
from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch, concat_samples
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.typing import PolicyID, SampleBatchType

logger = logging.getLogger(__name__)

PRIO_WEIGHTS = "weights"
BATCH_INDEXES = "batch_indexes"


@DeveloperAPI
class ReplayBuffer:
    """A ring buffer of SampleBatch items, sampled uniformly with replacement.

    Args:
        capacity: Timesteps to keep; when they are reached, writing wraps
            around and overwrites the oldest items.

    Raises:
        ValueError: If capacity is not a positive int.
    """

    def __init__(self, capacity: int = 10000):
        if not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"{type(self).__name__}: capacity must be a positive int, got {capacity!r}")
        self.capacity = int(capacity)
        # Column mode: ``_cols`` holds one row per item; list mode: ``_items``.
        self._cols: Optional[Dict[str, np.ndarray]] = None
        self._num_rows = 0
        self._time_major: Optional[bool] = None
        self._items: List[SampleBatch] = []
        self._next_idx = 0
        self._hit_count = np.zeros(self.capacity, dtype=np.int64)
        self._eviction_started = False
        self._num_timesteps_added = 0
        self._num_timesteps_added_wrap = 0
        self._num_timesteps_sampled = 0
        self._evicted_hit_counts: collections.deque = collections.deque(maxlen=1000)
        self._est_size_bytes = 0

    def __len__(self) -> int:
        """Number of items stored."""
        return self._num_rows if self._cols is not None else len(self._items)

    @property
    def _storage(self) -> List[SampleBatch]:
        """The stored items, oldest slot first (one-row SampleBatches in column mode)."""
        if self._cols is None:
            return self._items
        return [self._row_item(i) for i in range(self._num_rows)]

    def _row_item(self, i: int) -> SampleBatch:
        return SampleBatch(
            {k: c[i : i + 1].copy() for k, c in self._cols.items()}, _time_major=self._time_major
        )

    @DeveloperAPI
    def add(self, item: SampleBatch, weight: Optional[float]) -> None:
        """Stores ``item`` (``weight`` is ignored here; prioritized buffers use it).

        Raises:
            ValueError: For an empty item.
        """
        if item.count <= 0:
            raise ValueError(f"{type(self).__name__}.add: the item is empty (count={item.count})")
        cols = self._row_columns(item) if item.count == 1 else None
        if cols is not None:
            self._write_rows(
                cols, 1, None if weight is None else np.array([weight], np.float64), item.time_major
            )
        else:
            self._add_item(item, weight)

    def _add_timesteps(self, batch: SampleBatch, weights: Optional[np.ndarray]) -> None:
        """Stores every timestep of ``batch`` as one item, as ``add`` on each of
        ``batch.timeslices(1)`` would (``weights``: one priority per row, or None)."""
        n = batch.count
        cols = self._row_columns(batch) if n > 0 else None
        if cols is None:
            for i, step in enumerate(batch.timeslices(1)):
                self.add(step, weight=None if weights is None else float(weights[i]))
            return
        for lo in range(0, n, self.capacity):  # a chunk never writes a slot twice
            hi = min(n, lo + self.capacity)
            chunk = cols if hi - lo == n else {k: v[lo:hi] for k, v in cols.items()}
            self._write_rows(chunk, hi - lo, None if weights is None else weights[lo:hi], batch.time_major)

    def _row_columns(self, batch: SampleBatch) -> Optional[Dict[str, np.ndarray]]:
        """``batch``'s columns if they can go into the column store (numpy arrays with
        one row per timestep, no sequences, the store's layout), else None."""
        if self._items or batch.zero_padded or dict.__contains__(batch, SampleBatch.SEQ_LENS):
            return None
        n, raw = batch.count, dict(dict.items(batch))
        for v in raw.values():
            if type(v) is not np.ndarray or v.ndim == 0 or v.shape[0] != n:
                return None
        if self._cols is None:
            return raw
        same = batch.time_major == self._time_major and raw.keys() == self._cols.keys()
        for k, v in raw.items() if same else ():
            col = self._cols[k]
            same = same and v.dtype == col.dtype and v.shape[1:] == col.shape[1:]
        return raw if same else None

    def _to_list_mode(self) -> None:
        """Leaves column mode for good (an item of another layout arrived)."""
        self._items, self._cols = self._storage, None

    def _write_rows(
        self, cols: Dict[str, np.ndarray], n: int, weights: Optional[np.ndarray], time_major: Optional[bool]
    ) -> np.ndarray:
        """Writes ``n <= capacity`` one-row items into the column store; returns their slots.

        The counters move as ``n`` calls of ``add`` with one-row items move them
        (then ``_next_idx`` always equals ``_num_timesteps_added_wrap``)."""
        start, cap = self._next_idx, self.capacity
        self._reserve(cols, min(cap, self._num_rows + n), time_major)
        slots = (start + np.arange(n)) % cap
        for k, v in cols.items():
            self._cols[k][slots] = v
        appended = min(cap, self._num_rows + n) - self._num_rows
        if appended:
            self._est_size_bytes += appended * sum(v.nbytes // n for v in cols.values())
            self._num_rows += appended
        self._num_timesteps_added += n
        after = start + 1 + np.arange(n)  # _next_idx (unwrapped) after each add
        evicting = after >= cap if not self._eviction_started else np.ones(n, bool)
        self._eviction_started = self._eviction_started or start + n >= cap
        self._next_idx = self._num_timesteps_added_wrap = (start + n) % cap
        if evicting.any():
            nxt = after[evicting] % cap  # the slot each add will overwrite next
            self._evicted_hit_counts.extend(self._hit_count[nxt].tolist())
            self._hit_count[nxt] = 0
        return slots

    def _reserve(self, cols: Dict[str, np.ndarray], rows: int, time_major: Optional[bool]) -> None:
        """Grows the columns (doubling, up to capacity) to hold ``rows`` rows."""
        if self._cols is None:
            size = min(self.capacity, max(rows, 1024))
            self._cols = {k: np.empty((size,) + v.shape[1:], v.dtype) for k, v in cols.items()}
            self._time_major = time_major
            return
        size = len(next(iter(self._cols.values())))
        if rows <= size:
            return
        size = min(self.capacity, max(rows, 2 * size))
        for k, col in self._cols.items():
            grown = np.empty((size,) + col.shape[1:], col.dtype)
            grown[: self._num_rows] = col[: self._num_rows]
            self._cols[k] = grown

    def _add_item(self, item: SampleBatch, weight: Optional[float]) -> None:
        """List mode: RLlib 1.11's ring of items, where timesteps decide the wrap-around."""
        if self._cols is not None:
            self._to_list_mode()
        self._num_timesteps_added += item.count
        self._num_timesteps_added_wrap += item.count
        if self._next_idx >= len(self._items):
            self._items.append(item)
            self._est_size_bytes += item.size_bytes()
        else:
            self._items[self._next_idx] = item
        if self._num_timesteps_added_wrap >= self.capacity:
            self._eviction_started = True
            self._num_timesteps_added_wrap = 0
            self._next_idx = 0
        else:
            self._next_idx += 1
        if self._eviction_started:
            self._evicted_hit_counts.append(int(self._hit_count[self._next_idx]))
            self._hit_count[self._next_idx] = 0

    def _encode_sample(self, idxes: np.ndarray) -> SampleBatch:
        if self._cols is not None:
            data = {k: c[idxes] for k, c in self._cols.items()}
            out = SampleBatch(data, _time_major=self._time_major)
        else:
            out = concat_samples([self._items[i] for i in idxes])
        out.decompress_if_needed()
        return out

    @DeveloperAPI
    def sample(self, num_items: int, beta: float = 0.0) -> SampleBatch:
        """``num_items`` items drawn uniformly (with replacement), concatenated.

        Raises:
            ValueError: If the buffer is empty.
        """
        if not len(self):
            raise ValueError(f"{type(self).__name__}.sample: the buffer is empty; add items first")
        randint, top = random.randint, len(self) - 1
        idxes = np.array([randint(0, top) for _ in range(num_items)], dtype=np.int64)
        return self._finish_sample(idxes)

    def _finish_sample(self, idxes: np.ndarray) -> SampleBatch:
        np.add.at(self._hit_count, idxes, 1)
        batch = self._encode_sample(idxes)
        self._num_timesteps_sampled += batch.count
        return batch

    @DeveloperAPI
    def stats(self, debug: bool = False) -> Dict[str, Any]:
        """Counters: items added/sampled, estimated size, eviction hit stats (debug)."""
        data = {
            "added_count": self._num_timesteps_added,
            "added_count_wrapped": self._num_timesteps_added_wrap,
            "eviction_started": self._eviction_started,
            "sampled_count": self._num_timesteps_sampled,
            "est_size_bytes": self._est_size_bytes,
            "num_entries": len(self),
        }
        if debug and self._evicted_hit_counts:
            data["evicted_hit_mean"] = float(np.mean(self._evicted_hit_counts))
        return data

    @DeveloperAPI
    def get_state(self) -> Dict[str, Any]:
        """The stored items and counters (for checkpoints)."""
        state = {"_storage": list(self._storage), "_next_idx": self._next_idx}
        state.update(self.stats(debug=False))
        return state

    @DeveloperAPI
    def set_state(self, state: Dict[str, Any]) -> None:
        """Restores a ``get_state`` result."""
        self._cols, self._num_rows, self._items = None, 0, []
        hits, evicted = self._hit_count.copy(), collections.deque(self._evicted_hit_counts, maxlen=1000)
        self._next_idx, self._eviction_started = 0, False
        for item in state["_storage"]:  # into the column store if every item fits it
            cols = self._row_columns(item) if item.count == 1 else None
            if cols is None:
                self._cols, self._num_rows, self._items = None, 0, list(state["_storage"])
                break
            ReplayBuffer._write_rows(self, cols, 1, None, item.time_major)
        self._hit_count, self._evicted_hit_counts = hits, evicted
        self._next_idx = state["_next_idx"]
        self._num_timesteps_added = state["added_count"]
        self._num_timesteps_added_wrap = state["added_count_wrapped"]
        self._eviction_started = state["eviction_started"]
        self._num_timesteps_sampled = state["sampled_count"]
        self._est_size_bytes = state["est_size_bytes"]


@DeveloperAPI
class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay.

    Args:
        capacity: Timesteps to keep (see :class:`ReplayBuffer`).
        alpha: Priority exponent (> 0); 0 would be uniform sampling.

    Raises:
        ValueError: If alpha is not > 0.
    """

    def __init__(self, capacity: int = 10000, alpha: float = 1.0):
        super().__init__(capacity)
        if not alpha > 0:
            raise ValueError(
                f"PrioritizedReplayBuffer: alpha must be > 0, got {alpha!r} "
                "(use ReplayBuffer for uniform sampling)"
            )
        self._alpha = alpha
        tree_capacity = 1
        while tree_capacity < self.capacity:
            tree_capacity *= 2
        self._it_sum = SumSegmentTree(tree_capacity)
        self._it_min = MinSegmentTree(tree_capacity)
        self._max_priority = 1.0
        self._prio_changes: collections.deque = collections.deque(maxlen=1000)

    def _write_rows(
        self, cols: Dict[str, np.ndarray], n: int, weights: Optional[np.ndarray], time_major: Optional[bool]
    ) -> np.ndarray:
        """Also sets the items' priorities: ``weights`` (None: the highest priority seen so far)."""
        slots = super()._write_rows(cols, n, weights, time_major)
        priorities = np.full(n, self._max_priority) if weights is None else weights.astype(np.float64)
        self._set_priorities(slots, priorities**self._alpha)
        return slots

    def _add_item(self, item: SampleBatch, weight: Optional[float]) -> None:
        """Stores ``item`` with priority ``weight`` (None: the highest priority seen so far)."""
        idx = self._next_idx
        super()._add_item(item, weight)
        priority = self._max_priority if weight is None else float(weight)
        self._it_sum[idx] = priority**self._alpha
        self._it_min[idx] = priority**self._alpha

    def _set_priorities(self, idxes: np.ndarray, values: np.ndarray) -> None:
        """Sets both trees' leaves ``idxes`` to ``values`` in one walk up the trees."""
        leaves = self._it_sum.check_index(idxes) + self._it_sum.capacity
        set_leaves([self._it_sum, self._it_min], leaves, [values, values])

    def _sample_proportional(self, num_items: int) -> np.ndarray:
        total = self._it_sum.sum(0, len(self))
        mass = np.random.random(num_items) * total
        idxes = self._it_sum.find_prefixsum_idx(mass)
        # Float round-off can step past the last stored item into empty leaves.
        return np.minimum(idxes, len(self) - 1)

    @DeveloperAPI
    def sample(self, num_items: int, beta: float) -> SampleBatch:
        """``num_items`` items drawn in proportion to ``priority^alpha``, with
        ``weights`` (importance weights, normalised by the largest possible one)
        and ``batch_indexes`` (for ``update_priorities``) columns.

        Raises:
            ValueError: If the buffer is empty or ``beta < 0``.
        """
        if beta < 0.0:
            raise ValueError(f"PrioritizedReplayBuffer.sample: beta must be >= 0, got {beta!r}")
        if not len(self):
            raise ValueError("PrioritizedReplayBuffer.sample: the buffer is empty; add items first")
        idxes = self._sample_proportional(num_items).astype(np.int64)
        n, total = len(self), self._it_sum.sum()
        p_min = self._it_min.min() / total
        max_weight = (p_min * n) ** (-beta)
        p_sample = self._it_sum[idxes] / total
        item_weights = (p_sample * n) ** (-beta) / max_weight
        batch = self._finish_sample(idxes)
        if self._cols is None:  # list mode: items of several rows
            sizes = [self._item_rows(int(i)) for i in idxes]
            item_weights, idxes = np.repeat(item_weights, sizes), np.repeat(idxes, sizes)
        batch[PRIO_WEIGHTS] = item_weights.astype(np.float32)
        batch[BATCH_INDEXES] = idxes.astype(np.int64)
        return batch

    def _item_rows(self, idx: int) -> int:
        item = self._items[idx]
        # Zero-padded sequences take max_seq_len rows per sequence.
        return item.max_seq_len if item.zero_padded and item.max_seq_len else item.count

    @DeveloperAPI
    def update_priorities(
        self, idxes: Union[List[int], np.ndarray], priorities: Union[List[float], np.ndarray]
    ) -> None:
        """Sets the priorities of the items ``idxes`` (e.g. to ``|td_error| + eps``).

        Raises:
            TypeError: If ``idxes`` is not a list or numpy array.
            ValueError: For mismatched lengths, non-positive priorities or
                indices outside the stored items.
        """
        if not isinstance(idxes, (list, np.ndarray)):
            raise TypeError(
                f"update_priorities: idxes must be a list or numpy array, got {type(idxes).__name__}"
            )
        idxes = np.asarray(idxes, dtype=np.int64)
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if idxes.shape != priorities.shape:
            raise ValueError(f"update_priorities: {idxes.size} indices but {priorities.size} priorities")
        if priorities.size and not np.all(priorities > 0):
            raise ValueError(f"update_priorities: priorities must be > 0, got min {priorities.min()}")
        if idxes.size and (idxes.min() < 0 or idxes.max() >= len(self)):
            raise ValueError(
                f"update_priorities: indices must lie in [0, {len(self)}), got [{idxes.min()}, {idxes.max()}]"
            )
        new = priorities**self._alpha
        self._prio_changes.extend((new - self._it_sum[idxes]).tolist())
        # Repeated indices: the last priority wins (as with one-by-one updates).
        self._set_priorities(idxes, new)
        if priorities.size:
            self._max_priority = max(self._max_priority, float(priorities.max()))

    @DeveloperAPI
    def stats(self, debug: bool = False) -> Dict[str, Any]:
        data = {"max_priority": self._max_priority}
        data.update(super().stats(debug))
        if debug and self._prio_changes:
            data["reprio_mean"] = float(np.mean(self._prio_changes))
        return data

    @DeveloperAPI
    def get_state(self) -> Dict[str, Any]:
        state = super().get_state()
        state.update(
            {
                "sum_segment_tree": self._it_sum.get_state(),
                "min_segment_tree": self._it_min.get_state(),
                "max_priority": self._max_priority,
            }
        )
        return state

    @DeveloperAPI
    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        self._it_sum.set_state(state["sum_segment_tree"])
        self._it_min.set_state(state["min_segment_tree"])
        self._max_priority = state["max_priority"]


@DeveloperAPI
class LocalReplayBuffer:
    """Per-policy replay buffers for a single-process trainer.

    ``add_batch`` slices each policy's batch into single timesteps and stores
    them (with the mean of the timestep's ``weights`` column as its priority
    if that column is present, else the highest priority so far). ``replay``
    returns None until ``learning_starts`` timesteps were added, then a
    ``MultiAgentBatch`` of ``replay_batch_size`` timesteps per policy.

    Args:
        num_shards: Number of buffer shards this one is part of (capacity is
            divided by it).
        learning_starts: Timesteps to add before ``replay`` returns data.
        capacity: Timesteps kept per policy (over all shards).
        replay_batch_size: Timesteps per replayed policy batch.
        prioritized_replay_alpha: Priority exponent; 0 means uniform replay.
        prioritized_replay_beta: Importance-weight exponent used by ``replay``.
        prioritized_replay_eps: Added to ``|td_error|`` in ``update_priorities``.
        replay_sequence_length: Only 1 (single timesteps) is supported.

    Raises:
        ValueError: For ``replay_sequence_length != 1``.
    """

    def __init__(
        self,
        num_shards: int = 1,
        learning_starts: int = 1000,
        capacity: int = 10000,
        replay_batch_size: int = 1,
        prioritized_replay_alpha: float = 0.6,
        prioritized_replay_beta: float = 0.4,
        prioritized_replay_eps: float = 1e-6,
        replay_sequence_length: int = 1,
    ):
        if replay_sequence_length != 1:
            raise ValueError(
                f"LocalReplayBuffer: replay_sequence_length={replay_sequence_length} "
                "is not supported; only 1 (single-timestep replay)"
            )
        self.replay_starts = learning_starts // num_shards
        self.capacity = capacity // num_shards
        self.replay_batch_size = replay_batch_size
        self.prioritized_replay_alpha = prioritized_replay_alpha
        self.prioritized_replay_beta = prioritized_replay_beta
        self.prioritized_replay_eps = prioritized_replay_eps
        self.replay_buffers: Dict[PolicyID, ReplayBuffer] = collections.defaultdict(self._new_buffer)
        self.num_added = 0

    def _new_buffer(self) -> ReplayBuffer:
        if self.prioritized_replay_alpha == 0.0:
            return ReplayBuffer(self.capacity)
        return PrioritizedReplayBuffer(self.capacity, alpha=self.prioritized_replay_alpha)

    def add_batch(self, batch: SampleBatchType) -> None:
        """Stores every timestep of ``batch`` (a SampleBatch goes to the default policy)."""
        if isinstance(batch, SampleBatch):
            batch = MultiAgentBatch({DEFAULT_POLICY_ID: batch}, batch.count)
        for policy_id, policy_batch in batch.policy_batches.items():
            has_weights = PRIO_WEIGHTS in policy_batch
            weights = np.asarray(policy_batch[PRIO_WEIGHTS]).reshape(-1) if has_weights else None
            self.replay_buffers[policy_id]._add_timesteps(
                policy_batch, weights.astype(np.float64) if has_weights else None
            )
        self.num_added += batch.count

    def replay(self, policy_id: Optional[PolicyID] = None) -> Optional[MultiAgentBatch]:
        """A replayed batch per policy (or only ``policy_id``'s); None before ``learning_starts``."""
        if self.num_added < self.replay_starts:
            return None
        ids = [policy_id] if policy_id is not None else list(self.replay_buffers)
        samples = {
            pid: self.replay_buffers[pid].sample(self.replay_batch_size, beta=self.prioritized_replay_beta)
            for pid in ids
        }
        return MultiAgentBatch(samples, self.replay_batch_size)

    def update_priorities(self, prio_dict: Dict[PolicyID, tuple]) -> None:
        """``prio_dict[policy_id] = (batch_indexes, td_errors)``: sets each
        item's priority to ``|td_error| + prioritized_replay_eps``."""
        for policy_id, (batch_indexes, td_errors) in prio_dict.items():
            buffer = self.replay_buffers[policy_id]
            if not isinstance(buffer, PrioritizedReplayBuffer):
                continue
            new_priorities = np.abs(np.asarray(td_errors, dtype=np.float64)) + self.prioritized_replay_eps
            buffer.update_priorities(np.asarray(batch_indexes), new_priorities)

    def stats(self, debug: bool = False) -> Dict[str, Any]:
        """Per-policy buffer stats."""
        return {f"policy_{pid}": buf.stats(debug) for pid, buf in self.replay_buffers.items()}

    def get_state(self) -> Dict[str, Any]:
        return {
            "num_added": self.num_added,
            "buffers": {pid: buf.get_state() for pid, buf in self.replay_buffers.items()},
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        self.num_added = state["num_added"]
        for pid, buf_state in state["buffers"].items():
            self.replay_buffers[pid].set_state(buf_state)


__all__ = ["BATCH_INDEXES", "LocalReplayBuffer", "PRIO_WEIGHTS", "PrioritizedReplayBuffer", "ReplayBuffer"]
