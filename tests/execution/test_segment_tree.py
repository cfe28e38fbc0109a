"""Segment trees against brute force: range sums/minima and prefix-sum search."""

import operator

import numpy as np
import pytest

from rlpolicy.execution.segment_tree import MinSegmentTree, SegmentTree, SumSegmentTree


def test_random_updates_match_brute_force():
    rng = np.random.default_rng(0)
    cap = 16
    s, m = SumSegmentTree(cap), MinSegmentTree(cap)
    ref_s, ref_m = np.zeros(cap), np.full(cap, np.inf)
    for _ in range(200):
        if rng.random() < 0.3:  # vectorised update of several leaves
            idx = rng.choice(cap, size=4, replace=False)
            val = rng.uniform(0.1, 5.0, 4)
            s[idx] = val
            m[idx] = val
        else:
            idx, val = int(rng.integers(cap)), float(rng.uniform(0.1, 5.0))
            s[idx] = val
            m[idx] = val
        ref_s[idx] = val
        ref_m[idx] = val
        lo, hi = sorted(rng.integers(0, cap + 1, 2))
        assert s.sum(lo, hi) == pytest.approx(ref_s[lo:hi].sum(), rel=1e-12, abs=1e-12)
        expected_min = ref_m[lo:hi].min() if hi > lo else np.inf
        assert m.min(lo, hi) == expected_min
    assert s.sum() == pytest.approx(ref_s.sum(), rel=1e-12)
    assert s.sum(0, -4) == pytest.approx(ref_s[:-4].sum(), rel=1e-12)
    np.testing.assert_array_equal(s[np.arange(cap)], ref_s)


def test_prefixsum_search_matches_cumsum():
    rng = np.random.default_rng(1)
    values = rng.uniform(0.0, 3.0, 13)
    values[[2, 7]] = 0.0  # empty leaves are never returned for interior masses
    tree = SumSegmentTree(16)
    tree[np.arange(13)] = values
    cum = np.cumsum(values)
    masses = rng.uniform(0.0, cum[-1], 500)
    expected = np.searchsorted(cum, masses, side="right")  # first i with cum[i] > mass
    np.testing.assert_array_equal(tree.find_prefixsum_idx(masses), expected)
    assert tree.find_prefixsum_idx(float(masses[0])) == expected[0]
    assert not np.isin(expected, [2, 7]).any()


def test_max_tree_and_state_round_trip():
    tree = SegmentTree(8, max)
    tree[3] = 2.0
    tree[5] = 7.0
    assert tree.reduce() == 7.0 and tree.reduce(0, 4) == 2.0 and tree.reduce(6, 8) == -np.inf
    other = SegmentTree(8, max)
    other.set_state(tree.get_state())
    assert other.reduce(2, 6) == 7.0


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: SumSegmentTree(12), ValueError, r"capacity must be a positive power of 2, got 12"),
        (lambda: SegmentTree(8, operator.mul), ValueError, r"operation must be operator.add, min or max"),
        (lambda: SumSegmentTree(8).__setitem__(8, 1.0), IndexError, r"index out of range \[0, 8\)"),
        (lambda: SumSegmentTree(8).find_prefixsum_idx(0.5), ValueError, r"prefixsum must lie in \[0, 0.0\]"),
        (lambda: SumSegmentTree(4).set_state([0.0] * 4), ValueError, r"state has 4 nodes, this tree has 8"),
    ],
)
def test_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
