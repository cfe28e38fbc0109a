"""Framework-neutral bookkeeping for multi-device ("tower") training buffers.

RLlib 1.11's ``load_batch_into_buffer`` / ``learn_on_loaded_batch`` pair works
the same way in torch and TF: the train batch is cut into one slice per
device and kept in one of ``config["num_multi_gpu_tower_stacks"]`` buffers;
each SGD step then takes the ``[offset:offset + size]`` minibatch of every
device's slice. This module holds those rules once; the framework classes
only move the slices onto their devices and run the towers.

Nothing here imports torch or tensorflow.
"""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Sequence

SEQ_LENS = "seq_lens"
NUM_BUFFERS_KEY = "num_multi_gpu_tower_stacks"
NOT_LOADED_MSG = ("Must call Policy.load_batch_into_buffer() before "
                  "Policy.learn_on_loaded_batch()!")


def device_minibatch_size(config: Mapping, num_devices: int) -> int:
    """Rows each device trains on per ``learn_on_loaded_batch`` call.

    RLlib 1.11: ``(sgd_minibatch_size or train_batch_size) // num_devices``; an
    unset (or 0/None) ``sgd_minibatch_size`` means "the whole train batch".

    Raises:
        ValueError: If ``num_devices`` < 1 or neither size key is set.
    """
    _check_num_devices(num_devices)
    size = config.get("sgd_minibatch_size") or config.get("train_batch_size")
    if not size:
        raise ValueError("config['sgd_minibatch_size'] and config['train_batch_size'] are both "
                         "unset; set one of them to size the per-device minibatch")
    return int(size) // num_devices


def split_batch_for_devices(batch: Any, num_devices: int,
                            pad: Callable[[Any], None]) -> List[Any]:
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
        batch = batch[:n - n % num_devices]
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
            raise ValueError(f"config['{NUM_BUFFERS_KEY}']={num_buffers!r} is invalid; "
                             "use an int >= 1")
        _check_num_devices(num_devices)
        self.num_buffers = num_buffers
        self.num_devices = num_devices
        self._buffers: List[List[Any]] = [[] for _ in range(num_buffers)]

    def check_index(self, buffer_index: int) -> None:
        """Raises IndexError unless ``buffer_index`` names one of the buffers."""
        if isinstance(buffer_index, bool) or not isinstance(buffer_index, int) \
                or not 0 <= buffer_index < self.num_buffers:
            raise IndexError(
                f"buffer_index={buffer_index!r} is out of range; this policy has "
                f"{self.num_buffers} buffer(s) (config['{NUM_BUFFERS_KEY}'])")

    def store(self, buffer_index: int, per_device_batches: List[Any]) -> int:
        """Replaces buffer ``buffer_index``'s contents with one batch per device.

        Returns:
            The number of rows loaded per device (that of the first device).
        """
        self.check_index(buffer_index)
        if len(per_device_batches) != self.num_devices:
            raise ValueError(f"TowerBuffers.store got {len(per_device_batches)} batches for "
                             f"{self.num_devices} devices; pass one batch per device")
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
        raise ValueError(f"learn_on_loaded_batch: offset {offset} is outside the {n} samples "
                         "loaded per device")
    return batch[offset:min(offset + size, n)]


def _check_num_devices(num_devices: int) -> None:
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices={num_devices!r} is invalid; need an int >= 1")


__all__: Sequence[str] = ("device_minibatch_size", "split_batch_for_devices", "TowerBuffers",
                          "minibatch_slice", "NOT_LOADED_MSG")
