"""SampleBatch slicing follows Python/numpy semantics (bounds past the end, negative bounds)."""

import numpy as np
import pytest

from rlpolicy.policy.sample_batch import SampleBatch

N = 10
BOUNDS = [None, -100, -11, -10, -3, -1, 0, 1, 4, 7, 9, 10, 11, 100]
SEQ_LENS = [3, 1, 4, 2]  # 10 rows; sequences start at rows 0, 3, 4, 8


def _plain():
    return SampleBatch(
        {
            "obs": np.arange(N, dtype=np.float32) * 10,
            "actions": np.arange(N) % 3,
            "nested": {"x": np.arange(N * 2).reshape(N, 2), "y": (np.arange(N) + 0.5,)},
            "infos": [{"i": i} for i in range(N)],
        }
    )


def _python_bounds(start, stop):
    """Normalised (start, stop) the way a Python list slice reads them (not via slice.indices)."""
    rows = list(range(N))
    a = len(rows[:start]) if start is not None else 0
    b = len(rows[:stop]) if stop is not None else N
    return a, max(a, b)


@pytest.mark.parametrize("start", BOUNDS)
def test_getitem_slice_matches_numpy_on_plain_batch(start):
    for stop in BOUNDS:
        _check_plain_getitem(_plain(), start, stop)


def _check_plain_getitem(b, start, stop):
    s = b[start:stop]
    obs = np.arange(N, dtype=np.float32) * 10
    np.testing.assert_array_equal(s["obs"], obs[start:stop])
    np.testing.assert_array_equal(s["nested"]["x"], np.arange(N * 2).reshape(N, 2)[start:stop])
    np.testing.assert_array_equal(s["nested"]["y"][0], (np.arange(N) + 0.5)[start:stop])
    assert [d["i"] for d in s["infos"]] == list(range(N))[start:stop]
    assert len(s) == len(obs[start:stop]) == s.count, (start, stop)


def test_slice_method_matches_numpy_on_plain_batch():
    b = _plain()
    ints = [x for x in BOUNDS if x is not None]
    for start in ints:
        for stop in ints:
            s = b.slice(start, stop)
            np.testing.assert_array_equal(s["obs"], (np.arange(N, dtype=np.float32) * 10)[start:stop])
            np.testing.assert_array_equal(s["actions"], (np.arange(N) % 3)[start:stop])
            assert len(s) == len(range(N)[start:stop]), (start, stop)


def test_tail_minibatches_like_ported_code():
    """`for i in range(0, len(b), mb): b[i:i + mb]` covers every row once; the last one is short."""
    b = _plain()
    parts = [b[i : i + 4] for i in range(0, len(b), 4)]
    assert [len(p) for p in parts] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([p["obs"] for p in parts]), b["obs"])
    parts = [b.slice(i, i + 3) for i in range(0, len(b), 3)]
    assert [len(p) for p in parts] == [3, 3, 3, 1]
    assert b[7:100]["obs"].tolist() == [70.0, 80.0, 90.0] == b.slice(7, 100)["obs"].tolist()


def _seq_batch():
    return SampleBatch(
        {"obs": np.arange(N) * 10, "state_in_0": np.arange(len(SEQ_LENS)) + 100, "seq_lens": SEQ_LENS}
    )


def _snap(row):
    """Start row and index of the sequence holding `row` (row == N: the end)."""
    starts = list(np.cumsum([0] + SEQ_LENS))
    if row >= N:
        return N, len(SEQ_LENS)
    i = max(j for j in range(len(SEQ_LENS)) if starts[j] <= row)
    return starts[i], i


@pytest.mark.parametrize("start", BOUNDS)
def test_getitem_slice_with_seq_lens_snaps_python_bounds(start):
    batch = _seq_batch()
    for stop in BOUNDS:
        _check_seq_getitem(batch, start, stop)


def _check_seq_getitem(batch, start, stop):
    a, b = _python_bounds(start, stop)
    (r0, s0), (r1, s1) = _snap(a), _snap(b)
    s = batch[start:stop]
    np.testing.assert_array_equal(s["obs"], (np.arange(N) * 10)[r0:r1])
    assert s["seq_lens"].tolist() == SEQ_LENS[s0:s1]
    assert s["state_in_0"].tolist() == [100 + i for i in range(s0, s1)]
    assert len(s) == r1 - r0 == sum(SEQ_LENS[s0:s1]), (start, stop)


@pytest.mark.parametrize(
    "start, stop, rows, lens, states",
    [
        (5, 100, range(5, 10), [3, 2], [102, 103]),  # clamped at the end; seq 2 cut at its front
        (0, 11, range(0, 10), SEQ_LENS, [100, 101, 102, 103]),
        (4, -2, range(4, 8), [4], [102]),  # negative end counts from the end
        (9, 100, range(9, 10), [1], [103]),
        (3, 3, range(0), [], []),
    ],
)
def test_slice_method_with_seq_lens_clamps_end(start, stop, rows, lens, states):
    s = _seq_batch().slice(start, stop)
    np.testing.assert_array_equal(s["obs"], (np.arange(N) * 10)[list(rows)])
    assert s["seq_lens"].tolist() == lens and len(s) == len(rows) == sum(lens)
    assert s["state_in_0"].tolist() == states


def test_slice_method_with_seq_lens_negative_start_still_left_pads():
    s = _seq_batch().slice(-2, 2)  # RLlib 1.11: negative start = zero rows on the left
    assert s["obs"].tolist() == [0, 0, 0, 10] and s["seq_lens"].tolist() == [4]
    only_pad = _seq_batch().slice(-2, 0)
    assert only_pad["obs"].tolist() == [0, 0] and only_pad["seq_lens"].tolist() == [2]
