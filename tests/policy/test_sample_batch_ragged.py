"""SampleBatch columns of unequal length, as RLlib 1.11 keeps them.

1.x client code builds batches whose columns differ in length (1.11's own dict
property tests, a short ``infos`` column, MAML's per-worker ``split`` column) and
relies on the count: the sum of ``seq_lens``, else the first non-empty column's
length. Operations that would pair rows of different steps raise, naming the column.
"""

import numpy as np
import pytest

from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch, concat_samples


def test_dict_properties_of_a_ragged_batch():
    # As 1.11's dict-property test: "b" has 2 rows, "c" is a scalar.
    base = {"a": np.array([1, 2, 3]), "b": np.array([[0.1, 0.2], [0.3, 0.4]]), "c": True}
    batch = SampleBatch(base)
    assert len(batch) == 3 and batch.count == 3
    assert set(batch.keys()) == {"a", "b", "c"}
    np.testing.assert_array_equal(batch["b"], base["b"])
    batch["d"] = np.array([9, 8])  # a column of yet another length
    del batch["a"]
    assert set(batch.keys()) == {"b", "c", "d"}
    copy = batch.copy()
    np.testing.assert_array_equal(copy["d"], [9, 8])
    assert copy["c"] is True or copy["c"] == True  # noqa: E712 (a numpy bool after copy)


def test_lists_count_as_in_1x():
    batch = SampleBatch({"a": [1, 2, 3], "b": [4, 5]})
    assert len(batch) == 3
    np.testing.assert_array_equal(batch["b"], [4, 5])
    # The first non-empty column counts (1.11 skips empty ones).
    assert len(SampleBatch({"a": np.zeros(0), "b": np.zeros(4)})) == 4
    # seq_lens, when present, give the count.
    assert len(SampleBatch({"obs": np.arange(5), "seq_lens": [2, 3]})) == 5


def test_short_infos_and_per_worker_split_column():
    infos = [{"x": 1}]
    batch = SampleBatch({"obs": np.zeros((4, 2)), "infos": infos, "split": np.array([[0, 2], [2, 4]])})
    assert len(batch) == 4
    assert batch["infos"] == infos
    # MAML-style: code reads the per-worker column itself and slices the others by it.
    parts = [batch["obs"][a:b] for a, b in batch["split"]]
    assert [len(p) for p in parts] == [2, 2]


RAGGED = {"obs": np.arange(4.0), "actions": np.arange(4), "split": np.array([0, 2])}


@pytest.mark.parametrize(
    "operation, name",
    [
        (lambda b: b[1:3], "slicing"),
        (lambda b: b.slice(0, 2), "slice"),
        (lambda b: b.shuffle(), "shuffle"),
        (lambda b: b.timeslices(size=2), "slicing"),
        (lambda b: list(b.rows()), "rows"),
        (lambda b: b.concat(SampleBatch(RAGGED)), "concat_samples"),
        (lambda b: concat_samples([SampleBatch(RAGGED), SampleBatch(RAGGED)]), "concat_samples"),
        (lambda b: b.split_by_episode(key="dones"), "slicing"),
        (lambda b: MultiAgentBatch({"p": b}, 4).timeslices(2), "rows"),
    ],
    ids=[
        "getitem",
        "slice",
        "shuffle",
        "timeslices",
        "rows",
        "concat",
        "concat_samples",
        "split",
        "ma-timeslices",
    ],
)
def test_operations_that_would_misalign_a_ragged_column_raise(operation, name):
    batch = SampleBatch(
        {**RAGGED, "dones": np.array([False, True, False, True]), "eps_id": np.zeros(4), "t": np.arange(4)}
    )
    batch["agent_index"] = np.zeros(4, np.int64)
    before = {k: np.array(v, copy=True) for k, v in batch.items()}
    with pytest.raises(
        ValueError, match=rf"SampleBatch\.{name}: column 'split' has 2 rows but the batch has 4"
    ):
        operation(batch)
    for k, v in before.items():  # nothing changed (shuffle is in place otherwise)
        np.testing.assert_array_equal(batch[k], v)


def test_ragged_nested_leaf_and_padding_are_named():
    batch = SampleBatch(
        {"obs": np.zeros(4), "nested": {"x": np.zeros(4), "y": np.zeros(1)}, "seq_lens": [2, 2]}
    )
    with pytest.raises(ValueError, match=r"right_zero_pad: column 'nested/y' has 1 rows but the batch has 4"):
        batch.right_zero_pad(3)


def test_aligned_batches_still_slice_and_concat():
    batch = SampleBatch({"obs": np.arange(4.0), "actions": np.arange(4), "c": np.float32(1.0)})
    np.testing.assert_array_equal(batch[1:3]["obs"], [1.0, 2.0])
    both = batch.concat(batch)
    assert len(both) == 8
    np.testing.assert_array_equal(both["actions"], [0, 1, 2, 3, 0, 1, 2, 3])
