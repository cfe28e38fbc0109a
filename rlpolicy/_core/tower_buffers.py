"""Framework-neutral bookkeeping for multi-device ("tower") training buffers.

RLlib 1.11's ``load_batch_into_buffer`` / ``learn_on_loaded_batch`` pair works
the same way in torch and TF: the train batch is cut into one slice per
device and kept in one of ``config["num_multi_gpu_tower_stacks"]`` buffers;
each SGD step then takes the ``[offset:offset + size]`` minibatch of every
device's slice. This module holds those rules once; the framework classes
only move the slices onto their devices and run the towers.

With ``config["_deterministic_towers"]`` set, the buffer instead holds a
fixed *chunk plan* (``plan_exact_chunks``): every minibatch is cut into the
same K chunks whatever the number of devices, each device holds K / num_devices
of them, and the framework reduces the chunks' gradients in chunk order,
weighted by their sample counts. The result is then bitwise the same on 1, 2,
4, ... devices (CPU), see docs/devices.md.

Nothing here imports torch or tensorflow.
"""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, NamedTuple, Sequence

import numpy as np

SEQ_LENS = "seq_lens"
NUM_BUFFERS_KEY = "num_multi_gpu_tower_stacks"
NOT_LOADED_MSG = "Must call Policy.load_batch_into_buffer() before Policy.learn_on_loaded_batch()!"


EXACT_KEY = "_deterministic_towers"
# Chunks per minibatch for ``_deterministic_towers=True``: exact across 1, 2 and 4 towers.
DEFAULT_EXACT_CHUNKS = 4


def minibatch_rows(config: Mapping) -> int:
    """Rows of one SGD minibatch over all devices: ``sgd_minibatch_size``, or
    ``train_batch_size`` when that is unset (0/None).

    Raises:
        ValueError: If neither size key is set.
    """
    size = config.get("sgd_minibatch_size") or config.get("train_batch_size")
    if not size:
        raise ValueError(
            "config['sgd_minibatch_size'] and config['train_batch_size'] are both "
            "unset; set one of them to size the per-device minibatch"
        )
    return int(size)


def device_minibatch_size(config: Mapping, num_devices: int) -> int:
    """Rows each device trains on per ``learn_on_loaded_batch`` call.

    RLlib 1.11: ``(sgd_minibatch_size or train_batch_size) // num_devices``; an
    unset (or 0/None) ``sgd_minibatch_size`` means "the whole train batch".

    Raises:
        ValueError: If ``num_devices`` < 1 or neither size key is set.
    """
    _check_num_devices(num_devices)
    return minibatch_rows(config) // num_devices


def exact_chunk_count(config: Mapping, num_devices: int) -> int:
    """K, the fixed chunks per minibatch of ``config["_deterministic_towers"]``; 0 when off.

    ``False``/``None``/``0`` (the default): off. ``True``: 4 chunks. An int K >= 1:
    K chunks. K must be a multiple of ``num_devices``, so that every device runs
    the same number of chunks.

    Raises:
        ValueError: For a value of another type, a negative int, or a K that
            ``num_devices`` does not divide.
    """
    _check_num_devices(num_devices)
    value = config.get(EXACT_KEY, False)
    if value is None or value is False:
        return 0
    if value is True:
        k = DEFAULT_EXACT_CHUNKS
    elif isinstance(value, (int, np.integer)) and value >= 0:
        k = int(value)
        if k == 0:
            return 0
    else:
        raise ValueError(
            f"config['{EXACT_KEY}']={value!r} is invalid; use False, True "
            f"({DEFAULT_EXACT_CHUNKS} chunks) or the number of chunks per "
            "minibatch (an int >= 1)"
        )
    if k % num_devices:
        raise ValueError(
            f"config['{EXACT_KEY}']={value!r} cuts each minibatch into {k} "
            f"chunks, which {num_devices} towers cannot share equally; use a "
            f"multiple of {num_devices}"
        )
    return k


def split_batch_for_devices(batch: Any, num_devices: int, pad: Callable[[Any], None]) -> List[Any]:
    """Cuts ``batch`` into one time-slice per device and pads each slice.

    Without ``seq_lens`` the rows beyond an equal share are dropped first, so
    every device gets ``len(batch) // num_devices`` rows. With ``seq_lens`` the
    slices follow ``batch.timeslices(num_slices=...)``, which snaps to sequence
    boundaries. ``pad`` (e.g. zero-padding to ``max_seq_len``) runs on every
    slice in place (RLlib 1.11). The slices are not moved to any device.

    Args:
        batch: A SampleBatch (anything with its ``timeslices`` and slicing).

    Raises:
        TypeError: If ``batch`` cannot be cut into time slices (e.g. a plain dict).
        ValueError: If ``num_devices`` < 1.
    """
    _check_num_devices(num_devices)
    if not callable(getattr(batch, "timeslices", None)):
        raise TypeError(f"split_batch_for_devices needs a SampleBatch, got {type(batch).__name__}")
    n = len(batch)
    if SEQ_LENS not in batch and n % num_devices:
        batch = batch[: n - n % num_devices]
    slices = batch.timeslices(num_slices=num_devices)
    for s in slices:
        pad(s)
    return slices


class TowerBuffers:
    """The per-device batches loaded into each of a policy's buffers.

    Args:
        num_buffers: ``config["num_multi_gpu_tower_stacks"]`` (>= 1).
        num_devices: The number of towers (>= 1).
    """

    def __init__(self, num_buffers: int, num_devices: int):
        if not isinstance(num_buffers, int) or isinstance(num_buffers, bool) or num_buffers < 1:
            raise ValueError(f"config['{NUM_BUFFERS_KEY}']={num_buffers!r} is invalid; use an int >= 1")
        _check_num_devices(num_devices)
        self.num_buffers = num_buffers
        self.num_devices = num_devices
        self._buffers: List[List[Any]] = [[] for _ in range(num_buffers)]

    def check_index(self, buffer_index: int) -> None:
        """Raises IndexError unless ``buffer_index`` names one of the buffers."""
        if (
            isinstance(buffer_index, bool)
            or not isinstance(buffer_index, int)
            or not 0 <= buffer_index < self.num_buffers
        ):
            raise IndexError(
                f"buffer_index={buffer_index!r} is out of range; this policy has "
                f"{self.num_buffers} buffer(s) (config['{NUM_BUFFERS_KEY}'])"
            )

    def store(self, buffer_index: int, per_device_batches: List[Any]) -> int:
        """Replaces buffer ``buffer_index``'s contents with one batch per device.

        Returns:
            The number of rows loaded per device (that of the first device).
        """
        self.check_index(buffer_index)
        if len(per_device_batches) != self.num_devices:
            raise ValueError(
                f"TowerBuffers.store got {len(per_device_batches)} batches for "
                f"{self.num_devices} devices; pass one batch per device"
            )
        self._buffers[buffer_index] = list(per_device_batches)
        return len(per_device_batches[0])

    def num_loaded(self, buffer_index: int) -> int:
        """Rows loaded per device in ``buffer_index`` (0 if nothing was loaded)."""
        self.check_index(buffer_index)
        loaded = self._buffers[buffer_index]
        return len(loaded[0]) if loaded else 0

    def loaded(self, buffer_index: int) -> List[Any]:
        """The per-device batches of ``buffer_index``.

        Raises:
            ValueError: If nothing was loaded into that buffer yet.
        """
        self.check_index(buffer_index)
        loaded = self._buffers[buffer_index]
        if not loaded:
            raise ValueError(NOT_LOADED_MSG)
        return list(loaded)

    def minibatches(self, buffer_index: int, offset: int, device_batch_size: int) -> List[Any]:
        """Each device's minibatch for one SGD step, RLlib 1.11 style.

        When ``device_batch_size`` covers all rows loaded (summed over the
        devices), the loaded batches are used whole and ``offset`` is ignored;
        otherwise every device trains on ``[offset:offset + device_batch_size]``
        of its batch, truncated at the batch's end.

        Raises:
            ValueError: If nothing was loaded, or (when slicing) ``offset`` lies
                outside the rows loaded per device.
        """
        loaded = self.loaded(buffer_index)
        if isinstance(loaded[0], ChunkedSlice):
            return [s.minibatch_chunks(offset, device_batch_size) for s in loaded]
        if device_batch_size >= sum(len(b) for b in loaded):
            return loaded
        return [minibatch_slice(b, offset, device_batch_size) for b in loaded]

    def clear(self, buffer_index: int) -> None:
        """Empties buffer ``buffer_index``."""
        self.check_index(buffer_index)
        self._buffers[buffer_index] = []


def minibatch_slice(batch: Any, offset: int, size: int) -> Any:
    """``batch[offset:offset + size]``, truncated at the batch's end like a list slice
    (RLlib 1.11); an ``offset`` outside the loaded rows is a ValueError."""
    n = len(batch)
    if not 0 <= offset < n:
        raise ValueError(
            f"learn_on_loaded_batch: offset {offset} is outside the {n} samples loaded per device"
        )
    return batch[offset : min(offset + size, n)]


class ExactChunk(NamedTuple):
    """One fixed chunk of a minibatch in the deterministic mode.

    Attributes:
        position: Its place among the minibatch's K chunks (the reduction order).
        batch: Its rows (a SampleBatch; the framework pads and places it).
        num_samples: The samples its loss averages over: rows, or valid time
            steps (the sum of its ``seq_lens``) for sequences.
        total_samples: ``num_samples`` summed over all K chunks of the
            minibatch; the chunk's gradient is weighted by their ratio.
    """

    position: int
    batch: Any
    num_samples: int
    total_samples: int

    @property
    def weight(self) -> float:
        """``num_samples / total_samples``: this chunk's share of the minibatch's mean loss."""
        return self.num_samples / self.total_samples


class ChunkedSlice:
    """One device's share of a deterministic-mode buffer: its chunks of each minibatch.

    Minibatch ``m`` occupies this device's rows ``[m * rows_per_minibatch,
    (m + 1) * rows_per_minibatch)``, so the usual ``offset`` loop over
    ``range(0, len(slice), rows_per_minibatch)`` visits every minibatch once.

    Args:
        minibatches: Per minibatch, this device's chunks (in chunk order).
        rows_per_minibatch: The per-device minibatch size
            (``device_minibatch_size``), the unit of ``offset``.
    """

    def __init__(self, minibatches: List[List[ExactChunk]], rows_per_minibatch: int):
        self.minibatches = minibatches
        self.rows_per_minibatch = max(1, int(rows_per_minibatch))

    def __len__(self) -> int:
        return len(self.minibatches) * self.rows_per_minibatch

    def map_batches(self, fn: Callable[[Any], Any]) -> "ChunkedSlice":
        """A new slice whose chunk batches are ``fn(chunk.batch)`` (e.g. pad and place)."""
        return ChunkedSlice(
            [[c._replace(batch=fn(c.batch)) for c in mb] for mb in self.minibatches], self.rows_per_minibatch
        )

    def minibatch_chunks(self, offset: int, size: int) -> List[ExactChunk]:
        """This device's chunks of the minibatch starting at per-device row ``offset``.

        Raises:
            ValueError: If ``offset`` lies outside the loaded rows or is not a
                multiple of the per-device minibatch size (chunks are never cut).
        """
        if size != self.rows_per_minibatch:
            raise ValueError(
                f"learn_on_loaded_batch: the per-device minibatch size changed "
                f"from {self.rows_per_minibatch} to {size} rows since loading; "
                "load the batch again"
            )
        if not 0 <= offset < len(self):
            raise ValueError(
                f"learn_on_loaded_batch: offset {offset} is outside the {len(self)} samples loaded per device"
            )
        if offset % size:
            raise ValueError(
                f"learn_on_loaded_batch: with config['{EXACT_KEY}'] the offset "
                f"must be a multiple of the per-device minibatch size {size}, "
                f"got {offset}"
            )
        return list(self.minibatches[offset // size])


def plan_exact_chunks(
    batch: Any, minibatch_size: int, num_chunks: int, num_devices: int
) -> List[ChunkedSlice]:
    """Cuts ``batch`` into minibatches of K fixed chunks and deals them to the devices.

    The plan depends on the batch, ``minibatch_size`` and K only, never on
    ``num_devices``: minibatch ``m`` holds the rows ``[m * minibatch_size,
    (m + 1) * minibatch_size)`` (with ``seq_lens``: the sequences that *end*
    there, so no sequence is cut, and a sequence crossing a boundary goes to the
    later minibatch, as ``batch[a:b]`` snapping back to sequence starts does); its units (rows, or sequences) are split
    into K contiguous, near-equal groups, the chunks. Device ``d`` gets chunks
    ``[d * K / num_devices, (d + 1) * K / num_devices)`` of every minibatch.
    A last, partial minibatch with fewer than K units is dropped.

    Args:
        batch: An unpadded SampleBatch.
        minibatch_size: Rows per minibatch over all devices (``minibatch_rows``).
        num_chunks: K (a multiple of ``num_devices``).
        num_devices: The number of towers.

    Returns:
        One ``ChunkedSlice`` per device (chunk batches unpadded).

    Raises:
        ValueError: If K is not a multiple of ``num_devices``, or a full
            minibatch has fewer than K units (rows or sequences).
        TypeError: If ``batch`` cannot be sliced by rows.
    """
    _check_num_devices(num_devices)
    if num_chunks < 1 or num_chunks % num_devices:
        raise ValueError(
            f"plan_exact_chunks: {num_chunks} chunks cannot be shared equally by {num_devices} devices"
        )
    if not hasattr(batch, "__getitem__") or not hasattr(batch, "__len__"):
        raise TypeError(f"plan_exact_chunks needs a SampleBatch, got {type(batch).__name__}")
    n = len(batch)
    seq_lens = batch[SEQ_LENS] if SEQ_LENS in batch else None
    if seq_lens is None:
        bounds = np.arange(n + 1)
    else:
        lens = np.asarray(seq_lens, dtype=np.int64)
        bounds = np.concatenate([[0], np.cumsum(lens)])
    num_units = len(bounds) - 1
    # A unit's minibatch is that of its last row: a sequence that crosses a minibatch
    # boundary goes to the later one, as slicing the batch (snapping back) does.
    unit_mb = (bounds[1:] - 1) // minibatch_size
    per_device = num_chunks // num_devices
    shares: List[List[List[ExactChunk]]] = [[] for _ in range(num_devices)]
    num_mb = int(unit_mb[-1]) + 1 if num_units else 0
    for m in range(num_mb):
        units = np.flatnonzero(unit_mb == m)
        if len(units) < num_chunks:
            if m == num_mb - 1 and m > 0:
                break  # a short last minibatch is dropped
            kind = "sequences" if seq_lens is not None else "rows"
            raise ValueError(
                f"config['{EXACT_KEY}']: minibatch {m} holds {len(units)} {kind}, fewer "
                f"than its {num_chunks} chunks; raise sgd_minibatch_size or lower the "
                "chunk count"
            )
        groups = np.array_split(units, num_chunks)
        rows = [(int(bounds[g[0]]), int(bounds[g[-1] + 1])) for g in groups]
        counts = [b - a for a, b in rows]
        total = sum(counts)
        chunks = [ExactChunk(c, batch[a:b], counts[c], total) for c, (a, b) in enumerate(rows)]
        for d in range(num_devices):
            shares[d].append(chunks[d * per_device : (d + 1) * per_device])
    size = minibatch_size // num_devices
    return [ChunkedSlice(s, size) for s in shares]


def _check_num_devices(num_devices: int) -> None:
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices={num_devices!r} is invalid; need an int >= 1")


__all__: Sequence[str] = (
    "device_minibatch_size",
    "split_batch_for_devices",
    "TowerBuffers",
    "minibatch_slice",
    "NOT_LOADED_MSG",
    "minibatch_rows",
    "exact_chunk_count",
    "ExactChunk",
    "ChunkedSlice",
    "plan_exact_chunks",
    "EXACT_KEY",
)
