"""SampleBatch: construction, validation, slicing, timeslices, copies, key tracking."""

import pickle

import numpy as np
import pytest

from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch, concat_samples
from rlpolicy.policy.view_requirement import ViewRequirement

SPEC_SEQ_LENS = [4, 7, 4, 10, 3]  # the 28-step example of TorchPolicy.load_batch_into_buffer


@pytest.fixture
def spec_batch():
    """28 rows, 5 sequences; obs = 1..28, state_in_0 one row per sequence."""
    return SampleBatch(
        {
            "obs": np.arange(1, 29, dtype=np.float32),
            "actions": np.arange(28) % 3,
            "state_in_0": np.array([[10.0], [20.0], [30.0], [40.0], [50.0]]),
            "seq_lens": SPEC_SEQ_LENS,
        }
    )


@pytest.fixture
def flat_batch():
    return SampleBatch(
        {
            "a": np.arange(10),
            "b": np.arange(10) * 2.0,
            "nested": {"x": np.arange(10), "y": (np.ones((10, 2)), np.zeros(10))},
        }
    )


# ------------------------------------------------------------------ constants / construction


def test_column_constants():
    expected = {
        "OBS": "obs",
        "CUR_OBS": "obs",
        "NEXT_OBS": "new_obs",
        "ACTIONS": "actions",
        "REWARDS": "rewards",
        "PREV_ACTIONS": "prev_actions",
        "PREV_REWARDS": "prev_rewards",
        "DONES": "dones",
        "TERMINATEDS": "terminateds",
        "TRUNCATEDS": "truncateds",
        "INFOS": "infos",
        "SEQ_LENS": "seq_lens",
        "T": "t",
        "ACTION_DIST_INPUTS": "action_dist_inputs",
        "ACTION_PROB": "action_prob",
        "ACTION_LOGP": "action_logp",
        "EPS_ID": "eps_id",
        "UNROLL_ID": "unroll_id",
        "AGENT_INDEX": "agent_index",
        "VF_PREDS": "vf_preds",
        "ENV_ID": "env_id",
        "OBS_EMBEDS": "obs_embeds",
    }
    for name, value in expected.items():
        assert getattr(SampleBatch, name) == value
    assert DEFAULT_POLICY_ID == "default_policy"


def test_lists_and_numbers_become_arrays_and_count():
    b = SampleBatch({"a": [1, 2, 3], "infos": [{}, {}, {}]}, b=[4.0, 5.0, 6.0])
    assert isinstance(b["a"], np.ndarray) and isinstance(b["b"], np.ndarray)
    assert isinstance(b["infos"], list)
    assert len(b) == b.count == b.agent_steps() == b.env_steps() == 3


def test_empty_batch():
    b = SampleBatch()
    assert len(b) == 0 and b.count == 0
    assert concat_samples([b, SampleBatch()]).count == 0
    assert b.split_by_episode() == []


def test_single_step_batch(flat_batch):
    one = flat_batch[3:4]
    assert len(one) == 1
    assert one["a"].tolist() == [3]
    assert one["nested"]["y"][0].shape == (1, 2)


def test_flags_and_is_training_popped_from_data():
    b = SampleBatch({"a": np.zeros(2), "is_training": True}, _time_major=True)
    assert "is_training" not in dict.keys(b)
    assert b.is_training is True and b["is_training"] is True and b.time_major is True
    b.set_training(False)
    assert b.is_training is False
    b["is_training"] = True
    assert b.is_training is True and "is_training" not in dict.keys(b)


def test_max_seq_len_inferred_from_seq_lens(spec_batch):
    assert spec_batch.max_seq_len == 10
    assert spec_batch.zero_padded is False
    assert spec_batch["seq_lens"].dtype == np.int32


def test_dones_derived_from_terminateds_and_truncateds():
    b = SampleBatch({"terminateds": np.array([0, 0, 1, 0], bool), "truncateds": np.array([0, 1, 0, 0], bool)})
    assert b["dones"].tolist() == [False, True, True, False]
    only_term = SampleBatch({"terminateds": np.array([False, True])})
    assert only_term["dones"].tolist() == [False, True]
    explicit = SampleBatch({"terminateds": np.array([False, True]), "dones": np.array([True, True])})
    assert explicit["dones"].tolist() == [True, True]


@pytest.mark.parametrize(
    "data, match",
    [
        ({"obs": np.zeros(4), "actions": np.zeros(3)}, r"column 'actions' has 3 rows but the batch has 4"),
        (
            {"obs": np.zeros(4), "nested": {"x": np.zeros(4), "y": np.zeros(5)}},
            r"column 'nested/y' has 5 rows but the batch has 4",
        ),
        (
            {"obs": np.zeros(4), "t": (np.zeros(4), np.zeros(2))},
            r"column 't/1' has 2 rows but the batch has 4",
        ),
        ({"obs": np.zeros(4), "infos": [{}] * 3}, r"column 'infos' has 3 rows but the batch has 4"),
    ],
)
def test_ragged_columns_are_kept_but_slicing_refuses(data, match):
    # RLlib 1.11 keeps columns of other lengths (the count is the first column's);
    # slicing would misalign them, so it raises naming the column (porting.md).
    batch = SampleBatch(data)
    assert len(batch) == 4
    with pytest.raises(ValueError, match=match):
        batch[0:2]


def test_constructor_rejects_seq_lens_that_do_not_fit():
    with pytest.raises(ValueError, match=r"seq_lens \[2, 2\] sum to 4 but column 'obs' has 5 rows"):
        SampleBatch({"obs": np.zeros(5), "seq_lens": [2, 2]})


def test_zero_padded_batch_validates_padded_length():
    ok = SampleBatch({"obs": np.zeros(6), "seq_lens": [1, 3]}, _zero_padded=True, _max_seq_len=3)
    assert len(ok) == 4  # count excludes the padding
    short = SampleBatch({"obs": np.zeros(5), "seq_lens": [1, 3]}, _zero_padded=True, _max_seq_len=3)
    with pytest.raises(
        ValueError, match=r"'obs' has 5 rows but the batch has 6 \(from 'seq_lens \(padded\)'\)"
    ):
        short[0:1]


def test_pickle_round_trip(spec_batch):
    spec_batch.set_training(True)
    back = pickle.loads(pickle.dumps(spec_batch))
    assert isinstance(back, SampleBatch) and len(back) == 28 and back.is_training is True
    np.testing.assert_array_equal(back["obs"], np.arange(1, 29))
    assert back["seq_lens"].tolist() == SPEC_SEQ_LENS


# ------------------------------------------------------------------ key tracking, interceptor


def test_key_tracking():
    b = SampleBatch({"a": np.zeros(3), "b": np.ones(3)})
    assert b.accessed_keys == set() and b.added_keys == set()
    _ = b["a"]
    b.get("missing")
    b["c"] = np.zeros(3)
    b["a"] = np.ones(3)  # replacing is not adding
    del b["b"]
    assert b.accessed_keys == {"a"}
    assert b.added_keys == {"c"}
    assert b.deleted_keys == {"b"}
    assert b.get("missing", 7) == 7


def test_get_interceptor_is_lazy_and_cached():
    calls = []

    def to_list(v):
        calls.append(1)
        return np.asarray(v).tolist()

    b = SampleBatch({"a": np.arange(3), "b": np.arange(3)})
    b.set_get_interceptor(to_list)
    assert calls == []
    assert b["a"] == [0, 1, 2] and b["a"] == [0, 1, 2]
    assert len(calls) == 1  # converted once, on first access
    assert dict.__getitem__(b, "a").tolist() == [0, 1, 2]  # raw data untouched
    b["a"] = np.arange(5, 8)  # new raw value replaces the cached one as-is
    assert b["a"].tolist() == [5, 6, 7]
    b.set_get_interceptor(None)
    assert isinstance(b["b"], np.ndarray)


def test_get_interceptor_torch_tensors():
    torch = pytest.importorskip("torch")
    b = SampleBatch({"obs": np.ones((2, 3), np.float32)}, _is_training=True)
    b.set_get_interceptor(torch.as_tensor)
    assert torch.is_tensor(b["obs"]) and torch.is_tensor(b.is_training)
    assert bool(b.is_training) is True


# ------------------------------------------------------------------ copy / concat


def test_copy_deep_and_shallow(flat_batch):
    deep = flat_batch.copy()
    shallow = flat_batch.copy(shallow=True)
    deep["a"][0] = 100
    assert flat_batch["a"][0] == 0
    shallow["a"][0] = 55
    assert flat_batch["a"][0] == 55
    deep["nested"]["x"][1] = -1
    assert flat_batch["nested"]["x"][1] == 1


def test_copy_shares_key_tracking():
    b = SampleBatch({"a": np.zeros(2)})
    c = b.copy()
    _ = c["a"]
    assert "a" in b.accessed_keys


def test_concat_samples_with_seq_lens_and_nested(spec_batch):
    parts = spec_batch.timeslices(num_slices=2)
    whole = concat_samples(parts)
    np.testing.assert_array_equal(whole["obs"], np.arange(1, 29))
    assert whole["seq_lens"].tolist() == SPEC_SEQ_LENS
    np.testing.assert_array_equal(whole["state_in_0"][:, 0], [10, 20, 30, 40, 50])
    b1 = SampleBatch({"o": {"x": np.array([1, 2]), "y": (np.array([3, 4]),)}})
    b2 = SampleBatch({"o": {"x": np.array([5]), "y": (np.array([6]),)}})
    c = b1.concat(b2)
    assert c["o"]["x"].tolist() == [1, 2, 5] and c["o"]["y"][0].tolist() == [3, 4, 6]
    assert SampleBatch.concat_samples([b1, SampleBatch(), b2]).count == 3


def test_concat_samples_with_multi_agent_input():
    sb = SampleBatch({"a": np.array([1, 2])})
    ma = MultiAgentBatch(
        {DEFAULT_POLICY_ID: SampleBatch({"a": np.array([3])}), "p1": SampleBatch({"a": np.array([9, 9])})},
        env_steps=2,
    )
    out = concat_samples([sb, ma])
    assert isinstance(out, MultiAgentBatch)
    assert out.policy_batches[DEFAULT_POLICY_ID]["a"].tolist() == [1, 2, 3]
    assert out.env_steps() == 4 and out.agent_steps() == 5


@pytest.mark.parametrize(
    "samples, match",
    [
        (
            [SampleBatch({"a": np.zeros(2), "b": np.zeros(2)}), SampleBatch({"a": np.zeros(1)})],
            r"column 'b' .*missing from sample 1",
        ),
        ([SampleBatch({"a": np.zeros(2)}, _time_major=True), SampleBatch({"a": np.zeros(1)})], r"time_major"),
        (
            [SampleBatch({"a": np.zeros(2), "seq_lens": [2]}), SampleBatch({"a": np.zeros(1)})],
            r"some samples have seq_lens",
        ),
        ([SampleBatch({"a": np.zeros(2)}), {"a": np.zeros(2)}], r"sample 1 is a dict"),
    ],
)
def test_concat_samples_errors(samples, match):
    with pytest.raises(ValueError, match=match):
        concat_samples(samples)


# ------------------------------------------------------------------ slicing


def test_getitem_slice_without_seq_lens(flat_batch):
    s = flat_batch[2:5]
    assert s["a"].tolist() == [2, 3, 4] and len(s) == 3
    assert s["nested"]["y"][1].shape == (3,)
    assert flat_batch[-3:]["a"].tolist() == [7, 8, 9]
    assert len(flat_batch[4:4]) == 0


def test_getitem_slice_snaps_to_sequence_starts(spec_batch):
    # rows 5..12 lie in sequences 1 (rows 4-10) and 2 (rows 11-14): start snaps to 4, stop to 11
    s = spec_batch[5:12]
    assert s["obs"].tolist() == list(range(5, 12))
    assert s["seq_lens"].tolist() == [7]
    assert s["state_in_0"][:, 0].tolist() == [20.0]
    s2 = spec_batch[11:28]
    assert s2["seq_lens"].tolist() == [4, 10, 3] and len(s2) == 17


def test_getitem_slice_step_must_be_one(spec_batch):
    with pytest.raises(ValueError, match=r"step 1, got step=2"):
        spec_batch[0:4:2]


def test_slice_method_cuts_sequences(spec_batch):
    s = spec_batch.slice(2, 13)  # rows 2..12: 2 of seq0, all of seq1, 2 of seq2
    assert s["obs"].tolist() == list(range(3, 14))
    assert s["seq_lens"].tolist() == [2, 7, 2]
    assert s["state_in_0"][:, 0].tolist() == [10, 20, 30]
    left = spec_batch.slice(-2, 3)  # two zero rows on the left join the first sequence
    assert left["obs"].tolist() == [0, 0, 1, 2, 3]
    assert left["seq_lens"].tolist() == [5]
    tail = spec_batch.slice(20, 40)  # past the end: clamped like a list slice
    assert tail["obs"].tolist() == list(range(21, 29)) and tail["seq_lens"].tolist() == [5, 3]
    assert tail["state_in_0"][:, 0].tolist() == [40, 50]


def test_slice_method_with_state_range(spec_batch):
    s = spec_batch.slice(0, 10, state_start=0, state_end=2)
    assert s["seq_lens"].tolist() == [4, 6]
    assert s["state_in_0"][:, 0].tolist() == [10, 20]


# ------------------------------------------------------------------ timeslices


def test_timeslices_spec_example_two_devices(spec_batch):
    first, second = spec_batch.timeslices(num_slices=2)
    # The cut at row 14 falls inside sequence 2 (rows 11-14) and snaps back to row 11.
    assert (len(first), len(second)) == (11, 17)
    assert first["seq_lens"].tolist() == [4, 7]
    assert second["seq_lens"].tolist() == [4, 10, 3]
    assert first["obs"].tolist() == list(range(1, 12))
    assert second["obs"].tolist() == list(range(12, 29))
    assert first["state_in_0"][:, 0].tolist() == [10, 20]
    assert second["state_in_0"][:, 0].tolist() == [30, 40, 50]


def test_timeslices_without_seq_lens(flat_batch):
    parts = flat_batch.timeslices(num_slices=3)
    assert [p["a"].tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    by_size = flat_batch.timeslices(size=4)  # 4 does not divide 10: last slice is short
    assert [p["a"].tolist() for p in by_size] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    by_size = flat_batch.timeslices(size=3)
    assert [len(p) for p in by_size] == [3, 3, 3, 1]


def test_timeslices_size_with_seq_lens_terminates(spec_batch):
    parts = spec_batch.timeslices(size=3)
    assert sum(len(p) for p in parts) == 28
    np.testing.assert_array_equal(np.concatenate([p["obs"] for p in parts]), np.arange(1, 29))


def test_timeslices_k_is_deprecated_alias(flat_batch):
    with pytest.warns(DeprecationWarning):
        parts = flat_batch.timeslices(k=5)
    assert [len(p) for p in parts] == [5, 5]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_slices": 11}, r"only 10 rows, fewer than the number of slices"),
        ({"num_slices": 0}, r"num_slices must be an int >= 1"),
        ({"size": 0}, r"size must be an int >= 1"),
        ({}, r"needs `size` or `num_slices`"),
    ],
)
def test_timeslices_errors(flat_batch, kwargs, match):
    with pytest.raises(ValueError, match=match):
        flat_batch.timeslices(**kwargs)


# ------------------------------------------------------------------ rows / shuffle / episodes


def test_rows_and_columns():
    b = SampleBatch({"a": [1, 2, 3], "b": [4, 5, 6], "seq_lens": [1, 2]})
    rows = list(b.rows())
    assert [(r["a"], r["b"], r["seq_lens"]) for r in rows] == [(1, 4, 1), (2, 5, 1), (3, 6, 1)]
    a, bb = b.columns(["a", "b"])
    assert a.tolist() == [1, 2, 3] and bb.tolist() == [4, 5, 6]


def test_shuffle_keeps_rows_together(flat_batch):
    np.random.seed(0)
    flat_batch.shuffle()
    a = flat_batch["a"]
    assert sorted(a.tolist()) == list(range(10)) and a.tolist() != list(range(10))
    np.testing.assert_array_equal(flat_batch["b"], a * 2.0)
    np.testing.assert_array_equal(flat_batch["nested"]["x"], a)


def test_shuffle_with_seq_lens_is_refused(spec_batch):
    with pytest.raises(ValueError, match=r"shuffle\(\) is not possible for a batch with seq_lens"):
        spec_batch.shuffle()
    assert spec_batch["obs"].tolist() == list(range(1, 29))  # unchanged


def test_split_by_episode():
    b = SampleBatch({"a": np.arange(5), "eps_id": np.array([7, 7, 3, 3, 9])})
    assert [s["a"].tolist() for s in b.split_by_episode()] == [[0, 1], [2, 3], [4]]
    d = SampleBatch(
        {
            "a": np.arange(5),
            "terminateds": np.array([0, 0, 1, 0, 0], bool),
            "truncateds": np.array([1, 0, 0, 0, 0], bool),
        }
    )
    assert [s["a"].tolist() for s in d.split_by_episode()] == [[0], [1, 2], [3, 4]]
    with pytest.raises(KeyError, match="neither 'eps_id' nor"):
        SampleBatch({"a": np.arange(2)}).split_by_episode()


# ------------------------------------------------------------------ padding, devices, bytes


def test_right_zero_pad():
    b = SampleBatch({"a": np.array([1, 2, 3]), "state_in_0": np.array([1.0, 3.0]), "seq_lens": [1, 2]})
    b.right_zero_pad(max_seq_len=4)
    assert b["a"].tolist() == [1, 0, 0, 0, 2, 3, 0, 0]
    assert b["state_in_0"].tolist() == [1.0, 3.0]
    assert b.zero_padded and b.max_seq_len == 4 and len(b) == 3
    # slicing a padded batch takes whole padded sequences
    assert b[1:3]["a"].tolist() == [2, 3, 0, 0]
    with pytest.raises(ValueError, match=r"has none"):
        SampleBatch({"a": np.zeros(2)}).right_zero_pad(4)
    with pytest.raises(ValueError, match=r"longer than max_seq_len"):
        SampleBatch({"a": np.zeros(5), "seq_lens": [5]}).right_zero_pad(4)


def test_to_device_torch():
    torch = pytest.importorskip("torch")
    b = SampleBatch({"obs": np.ones((2, 3)), "act": np.array([1, 2]), "infos": [{}, {}]})
    b.to_device("cpu")
    assert b["obs"].dtype == torch.float32 and b["act"].dtype == torch.int64
    assert isinstance(b["infos"], list)
    with pytest.raises(NotImplementedError, match="only 'torch'"):
        b.to_device("cpu", framework="tf")


def test_size_bytes():
    b = SampleBatch({"a": np.zeros(10, np.float32), "n": {"x": np.zeros((10, 2), np.int64)}})
    assert b.size_bytes() == 40 + 160


def test_compress_round_trip():
    obs = np.random.RandomState(0).rand(6, 4).astype(np.float32)
    for bulk in (False, True):
        b = SampleBatch({"obs": obs.copy(), "new_obs": obs.copy() + 1, "r": np.arange(6)})
        b.compress(bulk=bulk, columns={"obs", "new_obs"})
        assert (
            not isinstance(dict.__getitem__(b, "obs"), np.ndarray)
            or dict.__getitem__(b, "obs").dtype == object
        )
        b.decompress_if_needed(columns={"obs", "new_obs"})
        np.testing.assert_array_equal(b["obs"], obs)
        np.testing.assert_array_equal(b["new_obs"], obs + 1)


def test_repr(spec_batch):
    assert repr(SampleBatch({"a": np.zeros(2)})) == "SampleBatch(2: ['a'])"
    assert repr(spec_batch) == "SampleBatch(28 (seqs=5): ['obs', 'actions', 'state_in_0'])"


def test_as_multi_agent():
    b = SampleBatch({"a": np.zeros(3)})
    ma = b.as_multi_agent()
    assert isinstance(ma, MultiAgentBatch) and ma.policy_batches[DEFAULT_POLICY_ID] is b and ma.count == 3


def test_get_single_step_input_dict():
    b = SampleBatch(
        {
            "obs": np.array([0, 1, 2]),
            "new_obs": np.array([1, 2, 3]),
            "actions": np.array([5, 6, 7]),
            "rewards": np.array([0.5, 0.6, 0.7]),
        }
    )
    reqs = {
        "obs": ViewRequirement(),
        "prev_actions": ViewRequirement("actions", shift=-1),
        "prev_rewards": ViewRequirement("rewards", shift=-1),
        "rewards": ViewRequirement(used_for_compute_actions=False),
    }
    last = b.get_single_step_input_dict(reqs)
    assert last["obs"].tolist() == [3] and last["prev_actions"].tolist() == [7]
    assert last["prev_rewards"].tolist() == [0.7] and "rewards" not in last
    assert last["seq_lens"].tolist() == [1]
    at1 = b.get_single_step_input_dict({"obs": ViewRequirement()}, index=1)
    assert at1["obs"].tolist() == [1]


def test_get_single_step_input_dict_shift_range_window():
    obs = np.arange(5.0)
    windows = np.stack([[obs[t - 2] if t >= 2 else 0, obs[t - 1] if t >= 1 else 0, obs[t]] for t in range(5)])
    b = SampleBatch({"obs": obs, "new_obs": obs + 1, "prev_n_obs": windows})
    reqs = {"prev_n_obs": ViewRequirement("obs", shift="-2:0")}
    last = b.get_single_step_input_dict(reqs)
    assert last["prev_n_obs"].tolist() == [[3.0, 4.0, 5.0]]  # window moved on by one step


def test_concat_and_copy_of_zero_padded_batches():
    a = SampleBatch({"obs": np.arange(1, 4.0), "seq_lens": [1, 2]}).right_zero_pad(3)
    b = SampleBatch({"obs": np.arange(4, 6.0), "seq_lens": [2]}).right_zero_pad(3)
    c = concat_samples([a, b])
    assert c.zero_padded and c.max_seq_len == 3 and len(c) == 5
    assert c["obs"].tolist() == [1, 0, 0, 2, 3, 0, 4, 5, 0]
    assert c["seq_lens"].tolist() == [1, 2, 2]
    d = c.copy()
    assert d.zero_padded and d.max_seq_len == 3 and d["obs"].tolist() == c["obs"].tolist()
    with pytest.raises(
        ValueError, match=r"zero_padded=False, time_major=None but sample 0 has zero_padded=True"
    ):
        concat_samples([a, SampleBatch({"obs": np.zeros(2)})])


def test_filling_an_empty_batch_sets_count():
    b = SampleBatch()
    b["obs"] = np.zeros((4, 2))
    assert len(b) == 4 and b.added_keys == {"obs"}


def test_import_does_not_pull_in_frameworks():
    import subprocess
    import sys

    code = (
        "import sys; import rlpolicy.policy.sample_batch, rlpolicy.policy.rnn_sequencing, "
        "rlpolicy.policy.view_requirement; print('torch' in sys.modules, 'tensorflow' in sys.modules)"
    )
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False False"


# ------------------------------------------------------------------ audit: edge cases and invariants


def _reference_rows_of_snapped_slice(seq_lens, start, stop):
    """Independent reference for batch[start:stop] with seq_lens: both ends move back to the
    start of the sequence that contains them (stop == batch length stays)."""
    starts = [0]
    for n in seq_lens:
        starts.append(starts[-1] + n)
    total = starts[-1]

    def snap(row):
        if row >= total:
            return total, len(seq_lens)
        i = max(j for j in range(len(seq_lens)) if starts[j] <= row)
        return starts[i], i

    (r0, s0), (r1, s1) = snap(start), snap(stop)
    return list(range(r0, r1)), list(seq_lens[s0:s1])


def test_slices_with_seq_lens_match_reference_for_all_bounds():
    seq_lens = [3, 1, 5, 2, 4]
    n = sum(seq_lens)
    b = SampleBatch(
        {"obs": np.arange(n) * 10, "state_in_0": np.arange(len(seq_lens)) + 100, "seq_lens": seq_lens}
    )
    for start in range(n + 1):
        for stop in range(start, n + 1):
            rows, lens = _reference_rows_of_snapped_slice(seq_lens, start, stop)
            s = b[start:stop]
            assert s["obs"].tolist() == [r * 10 for r in rows], (start, stop)
            assert s["seq_lens"].tolist() == lens and len(s) == len(rows) == sum(lens)
            first_seq = [i for i in range(len(seq_lens)) if sum(seq_lens[:i]) == (rows[0] if rows else -1)]
            assert s["state_in_0"].tolist() == (
                [100 + first_seq[0] + k for k in range(len(lens))] if lens else []
            )


@pytest.mark.parametrize("num_slices", [1, 2, 3, 5])
def test_timeslices_num_slices_partition_the_batch(num_slices):
    seq_lens = [2, 6, 1, 3, 4, 4]
    n = sum(seq_lens)
    b = SampleBatch({"obs": np.arange(n), "seq_lens": seq_lens})
    parts = b.timeslices(num_slices=num_slices)
    assert len(parts) == num_slices
    assert np.concatenate([p["obs"] for p in parts]).tolist() == list(range(n))  # nothing lost or doubled
    assert sum((p["seq_lens"].tolist() for p in parts), []) == seq_lens  # no sequence is cut
    plain = SampleBatch({"obs": np.arange(n)}).timeslices(num_slices=num_slices)
    sizes = [len(p) for p in plain]
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1  # without seq_lens: near-equal parts


def test_empty_batch_edges():
    b = SampleBatch({"obs": np.zeros((0, 3)), "actions": np.zeros(0, np.int64)})
    assert len(b) == 0 and len(b[0:0]) == 0 and b[0:0]["obs"].shape == (0, 3)
    assert b.timeslices(size=4) == []
    with pytest.raises(ValueError, match=r"only 0 rows, fewer than the number of slices"):
        b.timeslices(num_slices=2)
    assert len(b.copy()) == 0 and list(b.rows()) == []
    out = concat_samples([b, SampleBatch({"obs": np.ones((2, 3)), "actions": np.array([1, 2])})])
    assert len(out) == 2 and out["actions"].tolist() == [1, 2]
    assert len(concat_samples([])) == 0
    assert len(b[0:1]) == 0 and b[0:1]["obs"].shape == (0, 3)  # clamped like numpy


def test_single_step_batch_edges():
    one = SampleBatch({"obs": np.array([[1.0, 2.0]]), "state_in_0": np.array([[7.0]]), "seq_lens": [1]})
    (only,) = one.timeslices(num_slices=1)
    assert only["obs"].tolist() == [[1.0, 2.0]] and only["seq_lens"].tolist() == [1]
    assert [len(p) for p in one.timeslices(size=5)] == [1]
    one.right_zero_pad(3)
    assert one["obs"].tolist() == [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    assert one["state_in_0"].tolist() == [[7.0]] and len(one) == 1


def test_nested_observations_through_timeslices_and_padding():
    seq_lens = [2, 3, 1]
    obs = {
        "pos": np.arange(6.0),
        "cam": (np.arange(12).reshape(6, 2), np.array([b"a", b"b", b"c", b"d", b"e", b"f"])),
    }
    b = SampleBatch({"obs": obs, "infos": [{"i": i} for i in range(6)], "seq_lens": seq_lens})
    first, second = b.timeslices(num_slices=2)  # cut at row 3 snaps back to row 2
    assert first["obs"]["pos"].tolist() == [0.0, 1.0] and second["seq_lens"].tolist() == [3, 1]
    assert second["obs"]["cam"][0].tolist() == [[4, 5], [6, 7], [8, 9], [10, 11]]
    assert [d["i"] for d in second["infos"]] == [2, 3, 4, 5]
    second.right_zero_pad(4)
    assert second["obs"]["pos"].tolist() == [2.0, 3.0, 4.0, 0.0, 5.0, 0.0, 0.0, 0.0]
    assert second["obs"]["cam"][0].tolist() == [
        [4, 5],
        [6, 7],
        [8, 9],
        [0, 0],
        [10, 11],
        [0, 0],
        [0, 0],
        [0, 0],
    ]
    assert second["obs"]["cam"][1].tolist() == [b"c", b"d", b"e", b"", b"f", b"", b"", b""]
    assert [d and d["i"] for d in second["infos"]] == [2, 3, 4, None, 5, None, None, None]
    assert isinstance(second["obs"]["cam"], tuple) and len(second) == 4


def test_right_zero_pad_object_and_per_row_state_columns():
    b = SampleBatch(
        {
            "o": np.array(["x", 1, None], dtype=object),
            "state_in_0": np.array([1.0, 2.0, 3.0]),
            "seq_lens": [2, 1],
        }
    )
    b.right_zero_pad(2, exclude_states=False)
    assert b["o"].dtype == object and b["o"].tolist() == ["x", 1, None, None]
    assert b["state_in_0"].tolist() == [1.0, 2.0, 3.0, 0.0]  # per-row states are padded when not excluded


def test_slices_keep_flags_but_not_key_tracking():
    b = SampleBatch({"obs": np.arange(4.0), "seq_lens": [2, 2]}, _is_training=True, _time_major=False)
    _ = b["obs"]
    s = b[2:4]
    assert s.is_training is True and s.time_major is False and s.max_seq_len == 2
    assert s.accessed_keys == set() and s.get_interceptor is None
    t = SampleBatch({"obs": np.arange(4.0)}, _is_training=True)[1:3]
    assert t.is_training is True and t.count == 2 and "seq_lens" not in t
    back = pickle.loads(pickle.dumps(s))  # slices pickle like constructed batches
    assert (
        back["obs"].tolist() == [2.0, 3.0] and back["seq_lens"].tolist() == [2] and back.is_training is True
    )


def test_slice_of_torch_batch():
    torch = pytest.importorskip("torch")
    b = SampleBatch({"obs": np.arange(6.0).reshape(3, 2), "seq_lens": [1, 2]}).to_device("cpu")
    s = b[1:3]
    assert torch.is_tensor(s["obs"]) and s["obs"].tolist() == [[2.0, 3.0], [4.0, 5.0]]
    assert len(s) == 2 and s.max_seq_len == 2


def test_slice_converts_list_columns_added_later_like_the_constructor():
    b = SampleBatch({"obs": np.arange(3)})
    b["extra"] = [10, 20, 30]  # __setitem__ stores the list as is
    s = b[1:3]
    assert isinstance(s["extra"], np.ndarray) and s["extra"].tolist() == [20, 30]


def test_fast_shallow_copy_is_a_shallow_copy_sharing_key_tracking():
    from rlpolicy.policy.sample_batch import fast_shallow_copy

    assert fast_shallow_copy({"obs": np.zeros(2)}) is None  # only a plain SampleBatch
    batch = SampleBatch({"obs": np.arange(4.0).reshape(2, 2), "infos": [{}, {}]}, _is_training=True)
    batch["rewards"] = [1.0, 2.0]  # set after construction: stays a list in `batch`
    batch.set_get_interceptor(lambda v: ("seen", v))
    first = batch["obs"]
    out = fast_shallow_copy(batch)
    assert type(out) is SampleBatch and out is not batch and out.keys() == batch.keys()
    assert out["obs"] is first  # the interceptor's value is reused, not recomputed
    assert dict.__getitem__(out, "obs") is dict.__getitem__(batch, "obs")
    np.testing.assert_array_equal(dict.__getitem__(out, "rewards"), [1.0, 2.0])  # a list became an array
    assert type(dict.__getitem__(out, "rewards")) is np.ndarray
    assert dict.__getitem__(out, "infos") == [{}, {}]
    assert (out.count, out.is_training[1], out.zero_padded, out.time_major) == (2, True, False, None)
    assert out.accessed_keys is batch.accessed_keys and out.added_keys is batch.added_keys
    assert out.deleted_keys is batch.deleted_keys
    out["new"] = np.zeros(2)  # a new column: recorded in the shared set, not in the original's columns
    assert "new" in batch.added_keys and "new" not in batch
    assert out.intercepted_values is not batch.intercepted_values and "new" not in batch.intercepted_values
