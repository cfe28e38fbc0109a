"""rnn_sequencing: chopping, zero-padding (incl. the spec's two-device example), time dims."""

import numpy as np
import pytest

from rlpolicy.policy.rnn_sequencing import (
    add_time_dimension,
    chop_into_sequences,
    pad_batch_to_sequences_of_same_size,
    timeslice_along_seq_lens_with_overlap,
)
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.view_requirement import ViewRequirement

RNN_REQS = {"state_in_0": ViewRequirement("state_out_0", shift=-1)}  # -> dynamic max
ATTN_REQS = {"state_in_0": ViewRequirement("state_out_0", shift="-10:-1")}  # -> fixed max


def _reference_pad(rows, seq_lens, t):
    """Independent numpy reference: sequence i occupies rows [i*t, i*t+len_i)."""
    out = np.zeros((len(seq_lens) * t,) + np.shape(rows)[1:], dtype=np.asarray(rows).dtype)
    src = 0
    for i, n in enumerate(seq_lens):
        for j in range(n):
            out[i * t + j] = rows[src]
            src += 1
    return out


@pytest.fixture
def spec_batch():
    """The 28-step, 5-sequence batch of TorchPolicy.load_batch_into_buffer (seq_lens 4,7,4,10,3)."""
    return SampleBatch(
        {
            "obs": np.arange(1, 29, dtype=np.float32),
            "state_in_0": np.array([10.0, 20.0, 30.0, 40.0, 50.0]),
            "seq_lens": [4, 7, 4, 10, 3],
        }
    )


# ------------------------------------------------------------------ spec example


def test_spec_example_two_devices_padded_to_max_seq_len_10(spec_batch):
    dev0, dev1 = spec_batch.timeslices(num_slices=2)
    for s in (dev0, dev1):
        pad_batch_to_sequences_of_same_size(s, max_seq_len=10, view_requirements=ATTN_REQS)
    z = [0] * 10
    expected0 = [1, 2, 3, 4] + z[:6] + [5, 6, 7, 8, 9, 10, 11] + z[:3]
    expected1 = [12, 13, 14, 15] + z[:6] + list(range(16, 26)) + [26, 27, 28] + z[:7]
    assert dev0["obs"].tolist() == expected0
    assert dev1["obs"].tolist() == expected1
    assert dev0["seq_lens"].tolist() == [4, 7] and dev1["seq_lens"].tolist() == [4, 10, 3]
    assert dev0["state_in_0"].tolist() == [10, 20] and dev1["state_in_0"].tolist() == [30, 40, 50]
    assert (len(dev0), len(dev1)) == (11, 17)  # count excludes padding
    assert dev0.zero_padded and dev1.zero_padded and dev0.max_seq_len == dev1.max_seq_len == 10
    # [N, T] view of device 1 row by row
    t1 = add_time_dimension(dev1["obs"], max_seq_len=10, framework="np")
    assert t1.shape == (3, 10)
    assert t1[0].tolist() == [12, 13, 14, 15, 0, 0, 0, 0, 0, 0]
    assert t1[2].tolist() == [26, 27, 28, 0, 0, 0, 0, 0, 0, 0]


def test_spec_example_rnn_uses_dynamic_max(spec_batch):
    dev0, dev1 = spec_batch.timeslices(num_slices=2)
    for s in (dev0, dev1):
        pad_batch_to_sequences_of_same_size(s, max_seq_len=10, view_requirements=RNN_REQS)
    # RNN state inputs are single-step: each device pads only to its longest sequence.
    assert dev0.max_seq_len == 7 and dev1.max_seq_len == 10
    assert dev0["obs"].tolist() == [1, 2, 3, 4, 0, 0, 0, 5, 6, 7, 8, 9, 10, 11]
    np.testing.assert_array_equal(dev1["obs"], _reference_pad(np.arange(12, 29), [4, 10, 3], 10))


def test_padded_slices_slice_again_by_whole_sequences(spec_batch):
    dev1 = spec_batch.timeslices(num_slices=2)[1]
    pad_batch_to_sequences_of_same_size(dev1, max_seq_len=10, view_requirements=ATTN_REQS)
    part = dev1[4:17]  # row 4 lies in sequence 1 (rows 4..13): snaps to its start
    assert part["seq_lens"].tolist() == [10, 3] and len(part) == 13
    assert part["obs"].tolist() == list(range(16, 26)) + [26, 27, 28] + [0] * 7


# ------------------------------------------------------------------ pad_batch_to_sequences_of_same_size


def test_pad_is_noop_when_already_zero_padded():
    b = SampleBatch(
        {"obs": np.arange(4.0), "state_in_0": np.zeros(2), "seq_lens": [1, 1]},
        _zero_padded=True,
        _max_seq_len=2,
    )
    before = b["obs"].copy()
    pad_batch_to_sequences_of_same_size(b, max_seq_len=2, view_requirements=RNN_REQS)
    np.testing.assert_array_equal(b["obs"], before)


def test_pad_simple_batch_is_untouched_but_marked():
    b = SampleBatch({"obs": np.arange(6.0)})
    pad_batch_to_sequences_of_same_size(b, max_seq_len=4)
    assert b["obs"].tolist() == list(range(6)) and "seq_lens" not in b and b.zero_padded


def test_pad_simple_batch_shuffle():
    np.random.seed(3)
    b = SampleBatch({"obs": np.arange(20.0), "x": np.arange(20) * 2})
    pad_batch_to_sequences_of_same_size(b, max_seq_len=4, shuffle=True)
    assert sorted(b["obs"].tolist()) == list(range(20)) and b["obs"].tolist() != list(range(20))
    np.testing.assert_array_equal(b["x"], b["obs"] * 2)


def test_pad_rnn_without_seq_lens_chops_at_episodes_and_max_len():
    # episode 0 has 5 steps (longer than max_seq_len=3 -> chopped), episode 1 has 2 steps
    b = SampleBatch(
        {
            "obs": np.arange(1, 8, dtype=np.float32),
            "eps_id": np.array([0, 0, 0, 0, 0, 1, 1]),
            "state_in_0": np.arange(7) * 10.0,  # per-step states: keep the value at each start
            "infos": [{"i": i} for i in range(7)],
        }
    )
    pad_batch_to_sequences_of_same_size(b, max_seq_len=3, view_requirements=RNN_REQS)
    assert b["seq_lens"].tolist() == [3, 2, 2]
    assert b["obs"].tolist() == [1, 2, 3, 4, 5, 0, 6, 7, 0]
    assert b["eps_id"].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 0]
    assert b["state_in_0"].tolist() == [0, 30, 50]
    assert [d["i"] for d in b["infos"]] == list(range(7))  # infos are not padded
    assert b.max_seq_len == 3 and len(b) == 7


def test_pad_nested_observations():
    obs = {"pos": np.arange(5.0), "img": (np.arange(10).reshape(5, 2), np.array([True] * 5))}
    b = SampleBatch({"obs": obs, "state_in_0": np.zeros((2, 4)), "seq_lens": [2, 3]})
    pad_batch_to_sequences_of_same_size(b, max_seq_len=3, view_requirements=ATTN_REQS)
    assert b["obs"]["pos"].tolist() == [0, 1, 0, 2, 3, 4]
    np.testing.assert_array_equal(b["obs"]["img"][0], _reference_pad(np.arange(10).reshape(5, 2), [2, 3], 3))
    assert b["obs"]["img"][1].tolist() == [True, True, False, True, True, True]
    assert isinstance(b["obs"]["img"], tuple)
    assert b["state_in_0"].shape == (2, 4)  # already one state per sequence


def test_pad_batch_divisibility_req_multi_agent():
    # 7 rows are not divisible by 4: chop into sequences of <= 4 per episode, pad each to 4
    b = SampleBatch(
        {
            "obs": np.arange(1, 8.0),
            "eps_id": np.array([0, 0, 0, 1, 1, 1, 1]),
            "agent_index": np.zeros(7, dtype=np.int64),
        }
    )
    pad_batch_to_sequences_of_same_size(b, max_seq_len=20, batch_divisibility_req=4)
    assert b["seq_lens"].tolist() == [3, 4]
    assert b["obs"].tolist() == [1, 2, 3, 0, 4, 5, 6, 7]
    assert len(b["obs"]) % 4 == 0 and b.max_seq_len == 4


def test_pad_batch_divisibility_req_met_leaves_batch_alone():
    b = SampleBatch({"obs": np.arange(8.0), "agent_index": np.zeros(8, dtype=np.int64)})
    pad_batch_to_sequences_of_same_size(b, max_seq_len=20, batch_divisibility_req=4)
    assert b["obs"].tolist() == list(range(8)) and "seq_lens" not in b


def test_pad_batch_divisibility_req_other_agents():
    # divisible length, but agent_index > 0 also triggers padding per agent
    b = SampleBatch({"obs": np.arange(4.0), "eps_id": np.zeros(4), "agent_index": np.array([0, 0, 1, 1])})
    pad_batch_to_sequences_of_same_size(b, max_seq_len=20, batch_divisibility_req=2)
    assert b["seq_lens"].tolist() == [2, 2] and b["obs"].tolist() == [0, 1, 2, 3]


def test_pad_random_batch_matches_reference():
    rng = np.random.RandomState(0)
    seq_lens = [3, 1, 5, 2, 5]
    rows = rng.randn(16, 3).astype(np.float32)
    b = SampleBatch({"obs": rows, "state_in_0": rng.randn(5, 2), "seq_lens": seq_lens})
    pad_batch_to_sequences_of_same_size(b, max_seq_len=6, view_requirements=ATTN_REQS)
    np.testing.assert_array_equal(b["obs"], _reference_pad(rows, seq_lens, 6))


# ------------------------------------------------------------------ chop_into_sequences


def test_chop_by_episode_and_max_len():
    f, s, lens = chop_into_sequences(
        feature_columns=[np.arange(7)],
        state_columns=[np.arange(7) * 10],
        episode_ids=[0, 0, 0, 0, 0, 1, 1],
        max_seq_len=3,
    )
    assert lens.tolist() == [3, 2, 2] and lens.dtype == np.int32
    assert f[0].tolist() == [0, 1, 2, 3, 4, 0, 5, 6, 0]
    assert s[0].tolist() == [0, 30, 50]


def test_chop_splits_at_unroll_and_agent_boundaries():
    _, _, lens = chop_into_sequences(
        feature_columns=[np.arange(6)],
        state_columns=[],
        max_seq_len=10,
        episode_ids=[5, 5, 5, 5, 5, 5],
        unroll_ids=[0, 0, 1, 1, 1, 1],
        agent_indices=[0, 0, 0, 1, 1, 1],
    )
    assert lens.tolist() == [2, 1, 3]


def test_chop_separates_episode_agent_pairs_that_sum_equal():
    # (eps 1, agent 0) then (eps 0, agent 1): different sequences even though eps+agent match
    _, _, lens = chop_into_sequences(
        feature_columns=[np.arange(2)],
        state_columns=[],
        max_seq_len=10,
        episode_ids=[1, 0],
        agent_indices=[0, 1],
    )
    assert lens.tolist() == [1, 1]


def test_chop_fixed_max_and_extra_padding():
    f, _, _ = chop_into_sequences(
        feature_columns=[np.arange(1, 4)], state_columns=[], max_seq_len=4, seq_lens=[1, 2], dynamic_max=False
    )
    assert f[0].tolist() == [1, 0, 0, 0, 2, 3, 0, 0]
    f, _, _ = chop_into_sequences(
        feature_columns=[np.arange(1, 4)], state_columns=[], max_seq_len=4, seq_lens=[1, 2], _extra_padding=1
    )
    assert f[0].tolist() == [1, 0, 0, 2, 3, 0]


def test_chop_states_already_reduced_and_object_columns():
    f, s, _ = chop_into_sequences(
        feature_columns=[np.array(["a", "b", "c"], dtype=object)],
        state_columns=[np.array([7, 8])],
        max_seq_len=2,
        seq_lens=[1, 2],
        states_already_reduced_to_init=True,
    )
    assert f[0] == ["a", None, "b", "c"]
    assert s[0].tolist() == [7, 8]


def test_chop_handle_nested_data():
    f, _, _ = chop_into_sequences(
        feature_columns=[{"a": np.arange(3), "b": np.arange(3) + 10}],
        state_columns=[],
        max_seq_len=2,
        seq_lens=[2, 1],
        handle_nested_data=True,
    )
    assert [leaf.tolist() for leaf in f[0]] == [[0, 1, 2, 0], [10, 11, 12, 0]]


def test_chop_shuffle_keeps_sequences_aligned():
    np.random.seed(1)
    f, s, lens = chop_into_sequences(
        feature_columns=[np.arange(1, 10)],
        state_columns=[np.array([100, 200, 300])],
        max_seq_len=3,
        seq_lens=[3, 3, 3],
        shuffle=True,
        states_already_reduced_to_init=True,
    )
    seqs = f[0].reshape(3, 3)
    assert sorted(seqs[:, 0].tolist()) == [1, 4, 7]
    for row, state in zip(seqs, s[0]):  # sequence starting at 1/4/7 keeps state 100/200/300
        assert state == {1: 100, 4: 200, 7: 300}[row[0]]


def test_chop_empty():
    f, s, lens = chop_into_sequences(
        feature_columns=[np.zeros((0, 2))], state_columns=[np.zeros((0, 3))], max_seq_len=4
    )
    assert f[0].shape == (0, 2) and s[0].shape == (0, 3) and lens.tolist() == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"seq_lens": [2, 2]}, r"seq_lens \[2, 2\] sum to 4 but the feature columns have 5 rows"),
        ({"max_seq_len": 0}, r"max_seq_len must be an int >= 1, got 0"),
        ({"seq_lens": [4, 1], "dynamic_max": False, "max_seq_len": 3}, r"longer than max_seq_len=3"),
        ({"episode_ids": [0, 0]}, r"got 2 episode/unroll/agent ids for 5 rows"),
    ],
)
def test_chop_errors(kwargs, match):
    args = {"feature_columns": [np.arange(5)], "state_columns": [], "max_seq_len": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        chop_into_sequences(**args)


# ------------------------------------------------------------------ add_time_dimension


@pytest.fixture(scope="module")
def padded():
    return np.arange(24, dtype=np.float32).reshape(12, 2)  # 3 sequences of T=4


def test_add_time_dimension_torch(padded):
    torch = pytest.importorskip("torch")
    out = add_time_dimension(torch.from_numpy(padded), max_seq_len=4, framework="torch")
    np.testing.assert_array_equal(out.numpy(), padded.reshape(3, 4, 2))
    out = add_time_dimension(padded, seq_lens=torch.tensor([4, 2, 1]), framework="torch")
    np.testing.assert_array_equal(out.numpy(), padded.reshape(3, 4, 2))
    tm = add_time_dimension(torch.from_numpy(padded), max_seq_len=4, framework="torch", time_major=True)
    np.testing.assert_array_equal(tm.numpy(), np.transpose(padded.reshape(3, 4, 2), (1, 0, 2)))


@pytest.mark.tf
@pytest.mark.tf_eager_code
def test_add_time_dimension_tf_eager(padded):
    tf = pytest.importorskip("tensorflow")
    out = add_time_dimension(tf.constant(padded), max_seq_len=4, framework="tf")
    np.testing.assert_array_equal(out.numpy(), padded.reshape(3, 4, 2))
    out = add_time_dimension(padded, seq_lens=tf.constant([4, 2, 1]), framework="tf2")
    np.testing.assert_array_equal(out.numpy(), padded.reshape(3, 4, 2))
    tm = add_time_dimension(padded, max_seq_len=4, framework="tf", time_major=True)
    np.testing.assert_array_equal(tm.numpy(), np.transpose(padded.reshape(3, 4, 2), (1, 0, 2)))

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.int32)])
    def traced(x, lens):
        return add_time_dimension(x, seq_lens=lens, framework="tf")

    np.testing.assert_array_equal(
        traced(padded, np.array([1, 1, 1], np.int32)).numpy(), padded.reshape(3, 4, 2)
    )


def test_add_time_dimension_errors(padded):
    with pytest.raises(ValueError, match="pass max_seq_len or seq_lens"):
        add_time_dimension(padded, framework="np")
    with pytest.raises(ValueError, match="unknown framework 'jax'"):
        add_time_dimension(padded, max_seq_len=4, framework="jax")


# ------------------------------------------------------------------ timeslice_along_seq_lens_with_overlap


@pytest.fixture
def twelve_steps():
    return SampleBatch(
        {
            "obs": np.arange(12),
            "state_in_0": np.arange(12) * 10.0,
            "state_out_0": np.arange(12) * 10.0 + 5,
            "eps_id": np.zeros(12, np.int64),
            "seq_lens": [5, 5, 2],
        }
    )


def test_overlap_slices_documented_example(twelve_steps):
    slices = timeslice_along_seq_lens_with_overlap(twelve_steps, zero_pad_max_seq_len=10, pre_overlap=3)
    assert [s["obs"].tolist() for s in slices] == [
        [0, 0, 0, 0, 1, 2, 3, 4, 0, 0],
        [2, 3, 4, 5, 6, 7, 8, 9, 0, 0],
        [7, 8, 9, 10, 11, 0, 0, 0, 0, 0],
    ]
    assert [s["seq_lens"].tolist() for s in slices] == [[8], [8], [5]]
    assert all(s["state_in_0"].tolist() == [0.0] and "state_out_0" not in s for s in slices)


def test_overlap_slices_states_from_previous_state_out(twelve_steps):
    slices = timeslice_along_seq_lens_with_overlap(twelve_steps, pre_overlap=3, zero_init_states=False)
    # slice 0 reaches before the batch: zero state; slice 1 starts at row 2: state_out[1]
    assert [s["state_in_0"].tolist() for s in slices] == [[0.0], [15.0], [65.0]]
    assert slices[1]["obs"].tolist() == [2, 3, 4, 5, 6, 7, 8, 9]


def test_overlap_slices_zero_rows_of_an_earlier_episode():
    b = SampleBatch(
        {
            "obs": np.arange(1, 7),
            "eps_id": np.array([0, 0, 0, 1, 1, 1]),
            "state_in_0": np.ones(6),
            "state_out_0": np.ones(6),
        }
    )
    slices = timeslice_along_seq_lens_with_overlap(b, seq_lens=[3, 3], pre_overlap=2, zero_init_states=False)
    assert slices[1]["obs"].tolist() == [0, 0, 4, 5, 6]  # rows 2,3 (episode 0) -> zeros
    assert slices[1]["state_in_0"].tolist() == [0.0]


def test_overlap_slices_without_seq_lens_uses_chunks():
    b = SampleBatch({"obs": np.arange(7)})
    slices = timeslice_along_seq_lens_with_overlap(b, zero_pad_max_seq_len=4, pre_overlap=1)
    assert [s["obs"].tolist() for s in slices] == [[0, 0, 1, 2], [2, 3, 4, 5], [5, 6, 0, 0]]
    with pytest.raises(ValueError, match=r"zero_pad_max_seq_len \(2\) - pre_overlap \(2\) must be >= 1"):
        timeslice_along_seq_lens_with_overlap(b, zero_pad_max_seq_len=2, pre_overlap=2)
    with pytest.raises(ValueError, match="seq_lens is empty"):
        timeslice_along_seq_lens_with_overlap(b, seq_lens=[])


# ------------------------------------------------------------------ audit: edge cases


def test_given_sequence_longer_than_max_seq_len():
    def make():
        return SampleBatch(
            {"obs": np.arange(1, 16, dtype=np.float32), "state_in_0": np.zeros((2, 1)), "seq_lens": [12, 3]}
        )

    rnn = make()
    pad_batch_to_sequences_of_same_size(rnn, max_seq_len=10, view_requirements=RNN_REQS)
    # RNN (dynamic max): the padded length follows the longest given sequence.
    assert rnn.max_seq_len == 12 and rnn["seq_lens"].tolist() == [12, 3]
    np.testing.assert_array_equal(rnn["obs"], _reference_pad(np.arange(1, 16, dtype=np.float32), [12, 3], 12))
    attn = make()
    with pytest.raises(ValueError, match=r"seq_lens \[12, 3\] contain a sequence longer than max_seq_len=10"):
        pad_batch_to_sequences_of_same_size(attn, max_seq_len=10, view_requirements=ATTN_REQS)
    # The failed call changed nothing: the batch can still be padded correctly.
    assert attn.zero_padded is False and attn["obs"].tolist() == list(range(1, 16))
    pad_batch_to_sequences_of_same_size(attn, max_seq_len=12, view_requirements=ATTN_REQS)
    assert attn.zero_padded and len(attn["obs"]) == 24


def test_episode_longer_than_max_seq_len_is_chopped_into_several_sequences():
    b = SampleBatch(
        {
            "obs": np.arange(1, 24, dtype=np.float32),
            "eps_id": np.zeros(23, np.int64),
            "state_in_0": np.arange(23.0),
        }
    )
    pad_batch_to_sequences_of_same_size(b, max_seq_len=10, view_requirements=ATTN_REQS)
    assert b["seq_lens"].tolist() == [10, 10, 3]
    assert b["state_in_0"].tolist() == [0.0, 10.0, 20.0]  # each chunk starts from the state at its start
    np.testing.assert_array_equal(
        b["obs"], _reference_pad(np.arange(1, 24, dtype=np.float32), [10, 10, 3], 10)
    )


def test_pad_single_step_and_empty_batches():
    one = SampleBatch({"obs": np.array([[5.0, 6.0]]), "state_in_0": np.array([[1.0]]), "seq_lens": [1]})
    pad_batch_to_sequences_of_same_size(one, max_seq_len=4, view_requirements=ATTN_REQS)
    assert one["obs"].tolist() == [[5.0, 6.0]] + [[0.0, 0.0]] * 3 and len(one) == 1
    empty = SampleBatch({"obs": np.zeros((0, 2)), "state_in_0": np.zeros((0, 3))})
    pad_batch_to_sequences_of_same_size(empty, max_seq_len=4, view_requirements=ATTN_REQS)
    assert empty["obs"].shape == (0, 2) and empty["seq_lens"].tolist() == [] and empty.zero_padded


def test_batch_divisibility_req_with_nested_obs_and_the_padded_length():
    rng = np.random.RandomState(2)
    eps = np.array([0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2])  # 11 rows: not divisible by 4
    obs = {"a": rng.randn(11, 2).astype(np.float32), "b": (np.arange(11),)}
    b = SampleBatch({"obs": obs, "eps_id": eps, "agent_index": np.zeros(11, np.int64)})
    pad_batch_to_sequences_of_same_size(b, max_seq_len=100, batch_divisibility_req=4)
    # sequences of <= 4 rows per episode: 4+1 | 2 | 4, each padded to 4 rows
    assert b["seq_lens"].tolist() == [4, 1, 2, 4] and b.max_seq_len == 4
    assert len(b["obs"]["a"]) == 16 and len(b["obs"]["a"]) % 4 == 0
    np.testing.assert_array_equal(b["obs"]["a"], _reference_pad(obs["a"], [4, 1, 2, 4], 4))
    assert b["obs"]["b"][0].tolist() == [0, 1, 2, 3, 4, 0, 0, 0, 5, 6, 0, 0, 7, 8, 9, 10]
    assert b["eps_id"].tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 2, 2, 2, 2]


def test_feature_keys_limits_what_is_padded():
    b = SampleBatch(
        {"obs": np.arange(1, 4.0), "other": np.arange(3), "state_in_0": np.zeros((2, 1)), "seq_lens": [1, 2]}
    )
    pad_batch_to_sequences_of_same_size(b, max_seq_len=2, feature_keys=["obs"], view_requirements=ATTN_REQS)
    assert b["obs"].tolist() == [1, 0, 2, 3]
    assert b["other"].tolist() == [0, 1, 2]  # not a feature key: untouched
