"""The replay buffers' column store (single-timestep items kept as numpy rows) against a
plain reference of RLlib 1.11's item ring, hand-worked eviction orders, a hand-worked
prioritized draw, and the switch to list storage for items of another layout."""

import collections
import random

import numpy as np
import pytest

from rlpolicy.execution.replay_buffer import (
    BATCH_INDEXES,
    PRIO_WEIGHTS,
    LocalReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
)
from rlpolicy.execution.segment_tree import MinSegmentTree, SumSegmentTree
from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch


def rows(start, n):
    """n timesteps whose obs/rewards encode their global number."""
    ids = np.arange(start, start + n)
    return SampleBatch(
        {
            "obs": np.stack([ids, -ids], 1).astype(np.float32),
            "rewards": ids.astype(np.float32),
            "infos": np.array([{"i": int(i)} for i in ids], dtype=object),
        }
    )


class RefRing:
    """RLlib 1.11's ring of one-timestep items, step by step (the reference)."""

    def __init__(self, capacity):
        self.capacity, self.items, self.next_idx = capacity, [], 0
        self.hits = [0] * capacity
        self.added = self.wrap = 0
        self.started = False
        self.evicted = collections.deque(maxlen=1000)

    def add(self, item_id):
        self.added += 1
        self.wrap += 1
        if self.next_idx >= len(self.items):
            self.items.append(item_id)
        else:
            self.items[self.next_idx] = item_id
        if self.wrap >= self.capacity:
            self.started, self.wrap, self.next_idx = True, 0, 0
        else:
            self.next_idx += 1
        if self.started:
            self.evicted.append(self.hits[self.next_idx])
            self.hits[self.next_idx] = 0


@pytest.mark.parametrize("capacity", [1, 3, 7, 16])
def test_column_store_matches_the_item_ring_reference(capacity):
    rng = np.random.default_rng(capacity)
    buf, ref = ReplayBuffer(capacity), RefRing(capacity)
    local = LocalReplayBuffer(learning_starts=0, capacity=capacity, prioritized_replay_alpha=0.0)
    local.replay_buffers[DEFAULT_POLICY_ID] = buf
    added = 0
    for _ in range(12):
        n = int(rng.integers(1, 2 * capacity + 3))  # also batches longer than the capacity
        local.add_batch(rows(added, n))
        for i in range(added, added + n):
            ref.add(i)
        added += n
        random.seed(added)
        sample = buf.sample(5)
        random.seed(added)
        drawn = [random.randint(0, len(ref.items) - 1) for _ in range(5)]
        for i in drawn:
            ref.hits[i] += 1
        assert sample["rewards"].tolist() == [float(ref.items[i]) for i in drawn]
        assert [d["i"] for d in sample["infos"]] == [ref.items[i] for i in drawn]
        assert [float(b["rewards"][0]) for b in buf._storage] == [float(i) for i in ref.items]
        assert buf._next_idx == ref.next_idx and len(buf) == len(ref.items)
        assert buf._hit_count.tolist() == ref.hits
        stats = buf.stats(debug=True)
        assert stats["added_count"] == ref.added and stats["added_count_wrapped"] == ref.wrap
        assert stats["eviction_started"] == ref.started
        if ref.evicted:
            assert stats["evicted_hit_mean"] == pytest.approx(np.mean(ref.evicted))
    # obs (8 bytes) + rewards (4) + infos (one pointer, 8) per stored row
    assert buf.stats()["est_size_bytes"] == len(ref.items) * 20


def test_eviction_order_by_hand():
    buf = ReplayBuffer(capacity=4)
    buf.add(rows(0, 1), None)
    local = LocalReplayBuffer(learning_starts=0, capacity=4, prioritized_replay_alpha=0.0)
    local.replay_buffers[DEFAULT_POLICY_ID] = buf
    local.add_batch(rows(1, 9))  # items 0..9 into 4 slots: slot i % 4 holds the last i
    assert [float(b["rewards"][0]) for b in buf._storage] == [8.0, 9.0, 6.0, 7.0]
    assert buf._next_idx == 2 and buf.stats()["added_count"] == 10


def test_uniform_sample_draws_rows_with_pythons_randint():
    buf = ReplayBuffer(capacity=10)
    for i in range(6):
        buf.add(rows(i, 1), None)
    random.seed(3)
    out = buf.sample(50)
    random.seed(3)
    expected = [float(random.randint(0, 5)) for _ in range(50)]
    assert out["rewards"].tolist() == expected
    assert out["obs"].dtype == np.float32 and out["obs"].shape == (50, 2)


def test_prioritized_draw_by_hand():
    # priorities 1, 2, 3, 4 (alpha 1): cumulative 1, 3, 6, 10; a mass m picks the first
    # item whose cumulative sum exceeds m.
    buf = PrioritizedReplayBuffer(capacity=4, alpha=1.0)
    local = LocalReplayBuffer(
        learning_starts=0, capacity=4, replay_batch_size=6, prioritized_replay_alpha=1.0
    )
    local.replay_buffers[DEFAULT_POLICY_ID] = buf
    batch = rows(0, 4)
    batch[PRIO_WEIGHTS] = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    local.add_batch(batch)
    masses = np.array([0.0, 0.99, 1.0, 2.99, 3.0, 9.99])
    np.testing.assert_array_equal(buf._it_sum.find_prefixsum_idx(masses), [0, 0, 1, 1, 2, 3])
    np.random.seed(5)
    u = np.random.random(6) * 10.0
    np.random.seed(5)
    out = buf.sample(6, beta=1.0)
    expected = np.searchsorted([1.0, 3.0, 6.0, 10.0], u, side="right")
    np.testing.assert_array_equal(out[BATCH_INDEXES], expected)
    np.testing.assert_array_equal(out["rewards"], expected.astype(np.float32))
    # beta 1: weight (N p_i)^-1 / (N p_min)^-1 = p_min / p_i = 1 / priority
    np.testing.assert_allclose(out[PRIO_WEIGHTS], 1.0 / (expected + 1.0), rtol=1e-6)


def test_prioritized_add_batch_uses_max_priority_and_alpha():
    buf = PrioritizedReplayBuffer(capacity=8, alpha=0.5)
    buf.add(rows(0, 1), 9.0)
    buf.update_priorities(np.array([0]), np.array([16.0]))  # max priority 16
    local = LocalReplayBuffer(learning_starts=0, capacity=8, prioritized_replay_alpha=0.5)
    local.replay_buffers[DEFAULT_POLICY_ID] = buf
    local.add_batch(rows(1, 3))  # no weights column: the max priority, 16 ** 0.5
    np.testing.assert_allclose(buf._it_sum[np.arange(4)], [4.0, 4.0, 4.0, 4.0])
    assert buf._it_sum.sum() == pytest.approx(16.0) and buf._it_min.min() == pytest.approx(4.0)


def test_an_item_of_another_layout_switches_to_list_storage():
    buf = ReplayBuffer(capacity=5)
    for i in range(3):
        buf.add(rows(i, 1), None)
    other = SampleBatch({"obs": np.zeros((2, 2), np.float64), "rewards": np.full(2, 7.0, np.float32)})
    buf.add(other, None)  # two timesteps, float64 obs: kept as one item
    assert [b.count for b in buf._storage] == [1, 1, 1, 2]
    assert buf.stats()["added_count"] == 5 and buf._next_idx == 0  # 5 timesteps wrapped
    buf.add(rows(9, 1), None)
    assert [float(b["rewards"][0]) for b in buf._storage] == [9.0, 1.0, 2.0, 7.0]


def test_state_round_trip_in_column_mode():
    buf = PrioritizedReplayBuffer(capacity=4, alpha=0.6)
    for i in range(6):
        buf.add(rows(i, 1), float(i + 1))
    buf.sample(3, beta=0.4)
    state = buf.get_state()
    other = PrioritizedReplayBuffer(capacity=4, alpha=0.6)
    other.set_state(state)
    assert [float(b["rewards"][0]) for b in other._storage] == [4.0, 5.0, 2.0, 3.0]
    assert other._next_idx == buf._next_idx == 2
    assert other.stats() == buf.stats()
    np.testing.assert_array_equal(other._it_sum.value, buf._it_sum.value)
    other.add(rows(6, 1), None)
    assert float(other._storage[2]["rewards"][0]) == 6.0


@pytest.mark.parametrize("make", [SumSegmentTree, MinSegmentTree])
def test_segment_tree_array_updates_match_numpy(make):
    rng = np.random.default_rng(0)
    tree, leaves = make(16), np.full(16, 0.0 if make is SumSegmentTree else np.inf)
    reduce = np.sum if make is SumSegmentTree else np.min
    for _ in range(20):
        idx = rng.integers(0, 16, rng.integers(1, 6))
        val = rng.uniform(0.1, 5.0, idx.size)
        tree[idx] = val
        for i, v in zip(idx, val):  # repeated indices: the last value wins
            leaves[i] = v
        lo, hi = sorted(rng.integers(0, 17, 2))
        if hi > lo:
            assert tree.reduce(lo, hi) == pytest.approx(reduce(leaves[lo:hi]))
        assert tree.reduce() == pytest.approx(reduce(leaves))
