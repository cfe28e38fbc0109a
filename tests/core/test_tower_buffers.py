"""rlpolicy._core.tower_buffers: per-device splits and loaded-buffer bookkeeping (no framework)."""

import numpy as np
import pytest

from rlpolicy._core.tower_buffers import (
    NOT_LOADED_MSG,
    TowerBuffers,
    device_minibatch_size,
    minibatch_slice,
    split_batch_for_devices,
)
from rlpolicy.policy._framework_policy import as_sample_batch
from rlpolicy.policy.sample_batch import SampleBatch

# ---------------------------------------------------------------- device_minibatch_size


@pytest.mark.parametrize(
    "config, num_devices, expected",
    [
        ({"sgd_minibatch_size": 128, "train_batch_size": 4000}, 2, 64),
        ({"sgd_minibatch_size": 128, "train_batch_size": 4000}, 3, 42),  # floor
        ({"sgd_minibatch_size": None, "train_batch_size": 12}, 3, 4),  # unset: train batch
        ({"sgd_minibatch_size": 0, "train_batch_size": 12}, 1, 12),
        ({"train_batch_size": 7}, 2, 3),
    ],
)
def test_device_minibatch_size(config, num_devices, expected):
    assert device_minibatch_size(config, num_devices) == expected


@pytest.mark.parametrize(
    "config, num_devices, match",
    [
        ({"train_batch_size": 8}, 0, "num_devices=0 is invalid"),
        ({"train_batch_size": 8}, 1.5, "num_devices=1.5 is invalid"),
        ({"sgd_minibatch_size": None}, 1, "'sgd_minibatch_size'.*'train_batch_size'.*unset"),
    ],
)
def test_device_minibatch_size_errors(config, num_devices, match):
    with pytest.raises(ValueError, match=match):
        device_minibatch_size(config, num_devices)


# ---------------------------------------------------------------- split_batch_for_devices


def _rows(n):
    return {
        SampleBatch.OBS: np.arange(n, dtype=np.float32)[:, None],
        SampleBatch.REWARDS: np.arange(n, dtype=np.float32),
    }


def test_split_drops_excess_rows_and_pads_each_slice():
    padded = []
    data = _rows(9)
    slices = split_batch_for_devices(SampleBatch(data), 2, padded.append)
    assert [s[SampleBatch.REWARDS].tolist() for s in slices] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [id(p) for p in padded] == [id(s) for s in slices]  # pad ran once per slice
    assert all(isinstance(s, SampleBatch) for s in slices)


@pytest.mark.parametrize("n, num_devices", [(12, 1), (12, 2), (12, 3), (7, 3)])
def test_split_equal_shares(n, num_devices):
    slices = split_batch_for_devices(SampleBatch(_rows(n)), num_devices, lambda b: None)
    assert [len(s) for s in slices] == [n // num_devices] * num_devices
    joined = np.concatenate([s[SampleBatch.REWARDS] for s in slices])
    np.testing.assert_array_equal(joined, np.arange(n // num_devices * num_devices))


def test_split_with_sequences_keeps_every_timestep_and_whole_sequences():
    seq_lens = [2, 3, 2, 2]
    n = sum(seq_lens)
    batch = SampleBatch(
        {
            **_rows(n),
            SampleBatch.SEQ_LENS: np.array(seq_lens, np.int32),
            "state_in_0": np.arange(4, dtype=np.float32)[:, None],
        }
    )
    slices = split_batch_for_devices(batch, 2, lambda b: None)
    assert len(slices) == 2
    # Nothing dropped up front; the slices hold whole sequences in order.
    joined = np.concatenate([s[SampleBatch.REWARDS] for s in slices])
    np.testing.assert_array_equal(joined, np.arange(n))
    for s in slices:
        assert int(np.sum(s[SampleBatch.SEQ_LENS])) == len(s)
    assert sum(len(s[SampleBatch.SEQ_LENS]) for s in slices) == len(seq_lens)


def test_split_rejects_bad_device_count():
    with pytest.raises(ValueError, match="num_devices=0 is invalid"):
        split_batch_for_devices(SampleBatch(_rows(4)), 0, lambda b: None)


# ---------------------------------------------------------------- as_sample_batch


def test_as_sample_batch():
    batch = SampleBatch(_rows(3))
    assert as_sample_batch(batch) is batch
    converted = as_sample_batch(_rows(3))
    assert isinstance(converted, SampleBatch) and len(converted) == 3
    with pytest.raises(TypeError, match="expected a SampleBatch or a dict of columns, got list"):
        as_sample_batch([1, 2, 3])


def test_split_needs_a_sample_batch():
    with pytest.raises(TypeError, match="split_batch_for_devices needs a SampleBatch, got dict"):
        split_batch_for_devices(_rows(4), 2, lambda b: None)


# ---------------------------------------------------------------- TowerBuffers


@pytest.mark.parametrize("num_buffers", [0, -1, 1.5, True, None])
def test_tower_buffers_rejects_bad_buffer_count(num_buffers):
    with pytest.raises(ValueError, match=r"config\['num_multi_gpu_tower_stacks'\]=.* is invalid"):
        TowerBuffers(num_buffers, 1)


@pytest.mark.parametrize("index", [-1, 2, 5, True, "0"])
def test_check_index_names_the_config_key(index):
    buffers = TowerBuffers(2, 1)
    with pytest.raises(IndexError, match=r"out of range.*2 buffer\(s\).*num_multi_gpu_tower_stacks"):
        buffers.check_index(index)
    for method in (buffers.num_loaded, buffers.loaded):
        with pytest.raises(IndexError, match="num_multi_gpu_tower_stacks"):
            method(index)


def test_store_loaded_and_counts_per_buffer():
    buffers = TowerBuffers(2, 2)
    assert buffers.num_loaded(0) == buffers.num_loaded(1) == 0
    with pytest.raises(ValueError, match=NOT_LOADED_MSG.replace("(", r"\(").replace(")", r"\)")):
        buffers.loaded(0)
    with pytest.raises(ValueError, match="Must call Policy.load_batch_into_buffer"):
        buffers.minibatches(1, 0, 4)
    assert buffers.store(1, [[0, 1, 2], [10, 11, 12]]) == 3
    assert buffers.num_loaded(1) == 3 and buffers.num_loaded(0) == 0
    assert buffers.loaded(1) == [[0, 1, 2], [10, 11, 12]]
    assert buffers.store(1, [[5], [6]]) == 1  # a new load replaces the old one
    assert buffers.loaded(1) == [[5], [6]]
    with pytest.raises(ValueError, match="got 1 batches for 2 devices"):
        buffers.store(0, [[1]])
    buffers.clear(1)
    assert buffers.num_loaded(1) == 0


@pytest.mark.parametrize(
    "offset, size, expected",
    [
        (0, 2, [[0, 1], [10, 11]]),
        (2, 2, [[2, 3], [12, 13]]),
        (3, 3, [[3], [13]]),  # runs off the end: shorter slices
        (0, 8, [[0, 1, 2, 3], [10, 11, 12, 13]]),  # covers all 8 rows: whole buffers
        (5, 9, [[0, 1, 2, 3], [10, 11, 12, 13]]),  # whole buffers: offset ignored
        (1, 7, [[1, 2, 3], [11, 12, 13]]),  # 7 < 8 rows in all: sliced, truncated
    ],
)
def test_minibatches(offset, size, expected):
    buffers = TowerBuffers(1, 2)
    buffers.store(0, [[0, 1, 2, 3], [10, 11, 12, 13]])
    assert buffers.minibatches(0, offset, size) == expected


@pytest.mark.parametrize("offset", [-1, 4, 10])
def test_minibatches_offset_outside_the_loaded_rows(offset):
    buffers = TowerBuffers(1, 2)
    buffers.store(0, [[0, 1, 2, 3], [10, 11, 12, 13]])
    with pytest.raises(ValueError, match=f"offset {offset} is outside the 4 samples"):
        buffers.minibatches(0, offset, 2)


def test_minibatch_slice_on_a_sample_batch():
    batch = SampleBatch(_rows(5))
    np.testing.assert_array_equal(minibatch_slice(batch, 3, 4)[SampleBatch.REWARDS], [3, 4])


def test_module_imports_no_framework():
    import subprocess
    import sys

    code = (
        "import sys, rlpolicy._core.tower_buffers as m; "
        "bad = {'torch', 'tensorflow'} & set(sys.modules); assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
