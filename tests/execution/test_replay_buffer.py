"""Replay buffers: ring behaviour, uniform and prioritized sampling (statistically,
fixed seeds), importance weights against the formula, priority updates, and the
LocalReplayBuffer's learning_starts / per-policy replay."""

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
from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch


def step(i):
    return SampleBatch({"obs": np.array([[float(i)]], np.float32), "rewards": np.array([1.0], np.float32)})


def test_ring_buffer_overwrites_oldest_and_samples_uniformly():
    buf = ReplayBuffer(capacity=4)
    for i in range(6):
        buf.add(step(i), weight=None)
    assert len(buf) == 4
    assert sorted(float(b["obs"][0, 0]) for b in buf._storage) == [2.0, 3.0, 4.0, 5.0]
    random.seed(0)
    sample = buf.sample(8000)
    counts = np.bincount(sample["obs"][:, 0].astype(int), minlength=6)[2:]
    np.testing.assert_allclose(counts / 8000, 0.25, atol=0.02)
    assert buf.stats()["added_count"] == 6 and buf.stats()["sampled_count"] == 8000


def test_prioritized_sampling_proportions_follow_priority_power_alpha():
    alpha = 0.7
    priorities = np.array([1.0, 2.0, 4.0, 0.5, 3.0])
    buf = PrioritizedReplayBuffer(capacity=8, alpha=alpha)
    for i, p in enumerate(priorities):
        buf.add(step(i), weight=float(p))
    np.random.seed(0)
    sample = buf.sample(20000, beta=0.5)
    freq = np.bincount(sample[BATCH_INDEXES], minlength=5) / 20000
    expected = priorities**alpha / np.sum(priorities**alpha)
    np.testing.assert_allclose(freq, expected, atol=0.012)
    np.testing.assert_array_equal(sample["obs"][:, 0].astype(int), sample[BATCH_INDEXES])


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_importance_weights_match_formula(beta):
    alpha, priorities = 0.6, np.array([1.0, 2.0, 4.0, 0.5])
    buf = PrioritizedReplayBuffer(capacity=4, alpha=alpha)
    for i, p in enumerate(priorities):
        buf.add(step(i), weight=float(p))
    np.random.seed(1)
    sample = buf.sample(64, beta=beta)
    probs = priorities**alpha / np.sum(priorities**alpha)
    n = len(priorities)
    expected = (n * probs[sample[BATCH_INDEXES]]) ** -beta / (n * probs.min()) ** -beta
    np.testing.assert_allclose(sample[PRIO_WEIGHTS], expected, rtol=1e-5, atol=1e-6)
    assert sample[PRIO_WEIGHTS].max() <= 1.0 + 1e-6


def test_update_priorities_and_max_priority_for_new_items():
    buf = PrioritizedReplayBuffer(capacity=8, alpha=1.0)
    for i in range(3):
        buf.add(step(i), weight=None)  # max priority so far: 1.0
    buf.update_priorities(np.array([0, 2]), np.array([5.0, 0.01]))
    buf.add(step(3), weight=None)  # enters with the max priority seen: 5.0
    np.testing.assert_allclose(buf._it_sum[np.arange(4)], [5.0, 1.0, 0.01, 5.0])
    assert buf._it_min.min() == pytest.approx(0.01)
    assert buf.stats()["max_priority"] == 5.0


@pytest.mark.parametrize(
    "idxes,prios,exc,match",
    [
        ((0, 1), [1.0, 1.0], TypeError, r"idxes must be a list or numpy array, got tuple"),
        ([0, 1], [1.0], ValueError, r"2 indices but 1 priorities"),
        ([0], [0.0], ValueError, r"priorities must be > 0"),
        ([5], [1.0], ValueError, r"indices must lie in \[0, 2\)"),
    ],
)
def test_update_priorities_errors(idxes, prios, exc, match):
    buf = PrioritizedReplayBuffer(capacity=4, alpha=0.6)
    buf.add(step(0), None)
    buf.add(step(1), None)
    with pytest.raises(exc, match=match):
        buf.update_priorities(idxes, prios)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: ReplayBuffer(0), r"capacity must be a positive int, got 0"),
        (lambda: PrioritizedReplayBuffer(4, alpha=0.0), r"alpha must be > 0, got 0.0"),
        (lambda: ReplayBuffer(4).sample(2), r"the buffer is empty"),
        (lambda: PrioritizedReplayBuffer(4).sample(2, beta=-0.1), r"beta must be >= 0, got -0.1"),
        (lambda: LocalReplayBuffer(replay_sequence_length=4), r"replay_sequence_length=4 is not supported"),
    ],
)
def test_buffer_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_local_buffer_waits_for_learning_starts_and_feeds_back_td_errors():
    local = LocalReplayBuffer(
        learning_starts=10,
        capacity=100,
        replay_batch_size=6,
        prioritized_replay_alpha=1.0,
        prioritized_replay_beta=0.4,
        prioritized_replay_eps=0.5,
    )
    batch = SampleBatch(
        {
            "obs": np.arange(8, dtype=np.float32)[:, None],
            "rewards": np.ones(8, np.float32),
            PRIO_WEIGHTS: np.arange(1, 9, dtype=np.float32),
        }
    )
    local.add_batch(batch)
    assert local.replay() is None  # 8 < learning_starts
    local.add_batch(batch)
    replayed = local.replay().policy_batches[DEFAULT_POLICY_ID]
    assert replayed.count == 6 and set(replayed.keys()) >= {PRIO_WEIGHTS, BATCH_INDEXES}
    buffer = local.replay_buffers[DEFAULT_POLICY_ID]
    # The stored "weights" became the initial priorities.
    np.testing.assert_allclose(buffer._it_sum[np.arange(8)], np.arange(1, 9))
    local.update_priorities({DEFAULT_POLICY_ID: (np.array([0, 1]), np.array([-2.0, 0.0]))})
    np.testing.assert_allclose(buffer._it_sum[np.array([0, 1])], [2.5, 0.5])


def test_local_buffer_uniform_when_alpha_is_zero():
    local = LocalReplayBuffer(
        learning_starts=0, capacity=10, replay_batch_size=3, prioritized_replay_alpha=0.0
    )
    local.add_batch(SampleBatch({"obs": np.zeros((4, 1), np.float32)}))
    assert type(local.replay_buffers[DEFAULT_POLICY_ID]) is ReplayBuffer
    out = local.replay().policy_batches[DEFAULT_POLICY_ID]
    assert out.count == 3 and BATCH_INDEXES not in out
