"""rlpolicy._core.action_flow: single-action input building, batching, unbatching."""

import numpy as np
import pytest

from rlpolicy._core.action_flow import (
    batch_input_dict,
    build_single_input_dict,
    first_row,
    unbatch_single_output,
)


def test_build_single_input_dict_names_columns_like_samplebatch():
    d = build_single_input_dict(
        np.zeros(2), [np.ones(3), np.full(1, 2.0)], prev_action=1, prev_reward=0.5, info={"k": 1}
    )
    assert sorted(d) == ["infos", "obs", "prev_actions", "prev_rewards", "state_in_0", "state_in_1"]
    np.testing.assert_array_equal(d["state_in_1"], [2.0])
    assert d["prev_actions"] == 1 and d["prev_rewards"] == 0.5 and d["infos"] == {"k": 1}


def test_build_single_input_dict_leaves_out_missing_inputs():
    assert list(build_single_input_dict(np.zeros(2))) == ["obs"]


def test_batch_input_dict_adds_leading_axis_to_every_leaf():
    obs = {"pos": np.zeros((2, 3)), "flags": (np.int64(1), np.ones(4))}
    out = batch_input_dict({"obs": obs, "prev_rewards": 0.5, "seq_lens": np.array([1])})
    assert out["obs"]["pos"].shape == (1, 2, 3)
    assert isinstance(out["obs"]["flags"], tuple)
    assert out["obs"]["flags"][0].shape == (1,) and out["obs"]["flags"][1].shape == (1, 4)
    assert out["prev_rewards"].shape == (1,)
    # seq_lens already describes the batch and must stay untouched.
    np.testing.assert_array_equal(out["seq_lens"], [1])


def test_batch_input_dict_does_not_modify_input():
    d = {"obs": np.zeros(3)}
    batch_input_dict(d)
    assert d["obs"].shape == (3,)


def test_batch_input_dict_of_plain_arrays_gives_b1_views_like_expand_dims():
    # The all-array case (the usual {"obs": array}) takes a shortcut; it must give
    # what np.expand_dims gives: same dtype and values, a leading axis of 1.
    d = {
        "obs": np.arange(6, dtype=np.float32).reshape(2, 3),
        "state_in_0": np.float64(2.0) * np.ones(4),
        "prev_actions": np.array(3),
    }
    out = batch_input_dict(d)
    for k, v in d.items():
        assert out[k].shape == (1, *v.shape) and out[k].dtype == v.dtype
        np.testing.assert_array_equal(out[k], np.expand_dims(v, 0))
    assert out is not d and d["obs"].shape == (2, 3)
    # 0-d and n-d error paths of first_row are unchanged by its array shortcut.
    np.testing.assert_array_equal(first_row(out["obs"]), d["obs"])
    with pytest.raises(ValueError, match="None rows"):
        first_row(np.array(1.0))


def test_batch_input_dict_unsqueezes_torch_tensors():
    torch = pytest.importorskip("torch")
    out = batch_input_dict({"obs": torch.zeros(3)})
    assert isinstance(out["obs"], torch.Tensor) and tuple(out["obs"].shape) == (1, 3)


@pytest.mark.parametrize(
    "batched, expected",
    [
        (np.array([[1.0, 2.0]]), np.array([1.0, 2.0])),
        ([3], np.int64(3)),
        (
            {"a": np.array([1]), "b": (np.array([[2, 3]]), np.array([True]))},
            {"a": 1, "b": (np.array([2, 3]), True)},
        ),
    ],
)
def test_first_row_keeps_structure(batched, expected):
    out = first_row(batched)
    if isinstance(expected, dict):
        assert set(out) == {"a", "b"} and isinstance(out["b"], tuple)
        assert out["a"] == 1
        np.testing.assert_array_equal(out["b"][0], [2, 3])
        assert out["b"][1] == np.True_
    else:
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    "batched, match",
    [
        (np.zeros((2, 3)), "2 rows"),
        ({"a": np.zeros(1), "b": np.zeros((3, 1))}, "3 rows"),
        (np.float32(1.0), "None rows"),
    ],
)
def test_first_row_rejects_batches_that_are_not_single(batched, match):
    with pytest.raises(ValueError, match=match):
        first_row(batched)


def test_unbatch_single_output_unbatches_action_states_and_info():
    out = unbatch_single_output(
        (
            np.array([[0.5, -0.5]]),
            [np.array([[1.0, 2.0]]), np.array([[3.0]])],
            {"vf": np.array([0.25]), "logits": np.array([[1.0, 0.0]])},
        )
    )
    np.testing.assert_array_equal(out.action, [0.5, -0.5])
    assert len(out.state_out) == 2
    np.testing.assert_array_equal(out.state_out[0], [1.0, 2.0])
    np.testing.assert_array_equal(out.state_out[1], [3.0])
    assert out.info["vf"] == 0.25
    np.testing.assert_array_equal(out.info["logits"], [1.0, 0.0])


def test_unbatch_single_output_passes_bare_actions_through():
    # Policies like ES/ARS return only an action (not a tuple).
    action = np.array([1, 2])
    out = unbatch_single_output(action)
    assert out.action is action and out.state_out == [] and out.info == {}


def test_unbatch_single_output_rejects_wrong_tuple_length():
    with pytest.raises(ValueError, match="tuple of 2 items"):
        unbatch_single_output((np.array([1]), []))


def test_batch_input_dict_reads_a_list_of_numbers_as_one_observation():
    out = batch_input_dict(
        {"obs": [0.1, 0.2, 0.3, 0.4], "state_in_0": [[1, 2]], "prev_actions": [np.zeros(2), 1]}
    )
    assert out["obs"].shape == (1, 4) and out["obs"].tolist() == [[0.1, 0.2, 0.3, 0.4]]
    assert out["state_in_0"].shape == (1, 1, 2)
    # A list holding arrays is a nest (e.g. a Tuple observation given as a list): leaves batched alone.
    assert isinstance(out["prev_actions"], list) and out["prev_actions"][0].shape == (1, 2)
    assert out["prev_actions"][1].shape == (1,)
