"""ModelV2 base class and the observation (un)flattening helpers, framework-free (numpy)."""

from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.models.modelv2 import ModelV2, flatten, restore_original_dimensions
from rlpolicy.models.preprocessors import get_preprocessor

BOX2 = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
DICT = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2, 2), np.float32), "b": gym.spaces.Discrete(3)})
TUPLE = gym.spaces.Tuple(
    [gym.spaces.Discrete(2), BOX2, gym.spaces.Tuple([gym.spaces.Box(-1, 1, (1,), np.float32)])]
)


def flat_space(space):
    return get_preprocessor(space)(space).observation_space


class NumpyModel(ModelV2):
    """Records what forward() received; returns obs_flat @ ones or a preset result."""

    def __init__(self, obs_space, num_outputs=1, config=None, result=None):
        super().__init__(
            obs_space, gym.spaces.Discrete(2), num_outputs, config or {}, "np", framework="numpy"
        )
        self.seen = None
        self.result = result

    def forward(self, input_dict, state, seq_lens):
        self.seen = (dict(input_dict), state, seq_lens)
        if self.result is not None:
            return self.result
        flat = input_dict["obs_flat"]
        return flat @ np.ones((flat.shape[1], self.num_outputs)), state


# ----------------------------------------------------- restore / unpack
def test_restore_dict_obs_hand_worked():
    # Dict keys are sorted: "a" (2x2 box, 4 values) then "b" (one-hot of 3).
    obs = np.array([[1, 2, 3, 4, 0, 0, 1], [5, 6, 7, 8, 1, 0, 0]], dtype=np.float32)
    out = restore_original_dimensions(obs, flat_space(DICT), "numpy")
    assert isinstance(out, OrderedDict) and list(out) == ["a", "b"]
    np.testing.assert_array_equal(out["a"], [[[1, 2], [3, 4]], [[5, 6], [7, 8]]])
    np.testing.assert_array_equal(out["b"], [[0, 0, 1], [1, 0, 0]])


def test_restore_nested_tuple_with_extra_batch_dims():
    obs = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    out = restore_original_dimensions(obs, flat_space(TUPLE), np)
    assert isinstance(out, list) and len(out) == 3
    np.testing.assert_array_equal(out[0], obs[..., 0:2])
    np.testing.assert_array_equal(out[1], obs[..., 2:4])
    assert isinstance(out[2], list) and out[2][0].shape == (2, 3, 1)
    np.testing.assert_array_equal(out[2][0], obs[..., 4:5])


def test_restore_passes_through_plain_and_unpacked():
    x = np.zeros((3, 2))
    assert restore_original_dimensions(x, BOX2, "numpy") is x
    already = {"a": 1, "b": 2}
    assert restore_original_dimensions(already, flat_space(DICT), "numpy") is already


def test_restore_wrong_flat_size_names_expected_and_received():
    with pytest.raises(ValueError, match=r"\[\.\.\., 7\].*got \(2, 6\)"):
        restore_original_dimensions(np.zeros((2, 6)), flat_space(DICT), "numpy")


def test_flatten_numpy_and_unknown_framework():
    assert flatten(np.zeros((3, 2, 4)), "numpy").shape == (3, 8)
    with pytest.raises(NotImplementedError, match="'mxnet'"):
        flatten(np.zeros((3, 2)), "mxnet")


# ---------------------------------------------------------- __call__
def test_call_adds_obs_flat_restores_structure_and_collects_state():
    m = NumpyModel(flat_space(DICT))
    obs = np.array([[1, 2, 3, 4, 0, 1, 0]], dtype=np.float32)
    out, state = m({"obs": obs, "state_in_0": "h", "state_in_1": "c", "seq_lens": [1]})
    seen, seen_state, seen_lens = m.seen
    np.testing.assert_array_equal(seen["obs_flat"], obs)
    np.testing.assert_array_equal(seen["obs"]["a"], [[[1, 2], [3, 4]]])
    assert seen_state == ["h", "c"] and seen_lens == [1]
    np.testing.assert_allclose(out, [[11.0]], rtol=1e-6, atol=1e-6)
    assert state == ["h", "c"]  # the model returned no new state -> input state
    assert m.last_output() is out


def test_call_flattens_multi_dim_obs_for_obs_flat():
    m = NumpyModel(gym.spaces.Box(0, 1, (2, 3), np.float32))
    m({"obs": np.ones((4, 2, 3), np.float32)})
    assert m.seen[0]["obs_flat"].shape == (4, 6) and m.seen[0]["obs"].shape == (4, 2, 3)


def test_call_without_preprocessor_api_keeps_obs():
    m = NumpyModel(DICT, config={"_disable_preprocessor_api": True}, result=(np.zeros((1, 1)), []))
    obs = {"a": np.zeros((1, 2, 2)), "b": np.array([1])}
    m({"obs": obs})
    assert m.seen[0]["obs"] is obs and m.seen[0]["obs_flat"] is obs


def test_from_batch_sets_is_training():
    m = NumpyModel(BOX2)
    m.from_batch({"obs": np.zeros((2, 2), np.float32), "state_in_0": 7}, is_training=False)
    assert m.seen[0]["is_training"] is False and m.seen[1] == [7]


@pytest.mark.parametrize(
    "obs,match",
    [
        (np.zeros((3, 5), np.float32), r"shape \(3, 5\) but .* expects \[BATCH, \*\(2,\)\]"),
        (np.zeros((2,), np.float32), r"shape \(2,\) but .* expects \[BATCH, \*\(2,\)\]"),
        (np.zeros((3, 2, 2), np.float32), r"shape \(3, 2, 2\)"),
    ],
)
def test_bad_obs_shape_errors(obs, match):
    with pytest.raises(ValueError, match=match):
        NumpyModel(BOX2)({"obs": obs})


@pytest.mark.parametrize(
    "result,match",
    [
        ((np.zeros((3, 4)), []), r"shape \(3, 4\) but expected \[BATCH, num_outputs=2\]"),
        ((np.zeros((3,)), []), r"shape \(3,\) but expected \[BATCH, num_outputs=2\]"),
        (np.zeros((3, 2)), r"must return a tuple \(output, state_list\)"),
        ((np.zeros((3, 2)), ()), "must return the state as a list, got tuple"),
    ],
)
def test_bad_forward_result_errors(result, match):
    m = NumpyModel(BOX2, num_outputs=2, result=result)
    with pytest.raises(ValueError, match=match):
        m({"obs": np.zeros((3, 2), np.float32)})
    assert m.last_output() is None  # nothing recorded on error


def test_defaults():
    m = NumpyModel(BOX2, config={"_time_major": True})
    assert m.get_initial_state() == [] and m.metrics() == {} and m.update_ops() == []
    assert m.custom_loss("loss", {}) == "loss"
    assert m.is_time_major() is True and NumpyModel(BOX2).is_time_major() is False
    assert list(m.view_requirements) == ["obs"]
    assert m.view_requirements["obs"].space is BOX2 and m.view_requirements["obs"].shift == 0
    assert ModelV2(BOX2, BOX2, 1, {}, None, "numpy").name == "default_model"
    with pytest.raises(NotImplementedError, match="import_from_h5"):
        m.import_from_h5("w.h5")
    for fn in (m.value_function, m.variables, m.trainable_variables):
        with pytest.raises(NotImplementedError):
            fn()
    with m.context():
        pass


def test_call_with_sample_batch_tracks_keys_without_obs_flat():
    from rlpolicy.policy.sample_batch import SampleBatch

    batch = SampleBatch({"obs": np.zeros((3, 2), np.float32), "rewards": np.zeros(3)})
    m = NumpyModel(BOX2)
    out, _ = m(batch)
    assert out.shape == (3, 1)
    assert "obs_flat" not in batch and "obs" in batch.accessed_keys
    assert "obs_flat" not in batch.accessed_keys and "obs_flat" not in batch.added_keys


class _ReadsColumns(NumpyModel):
    """Reads "rewards", adds a column and sees the batch type and flags."""

    def forward(self, input_dict, state, seq_lens):
        self.batch_type = type(input_dict)
        self.flags = (input_dict.is_training, input_dict.time_major, len(input_dict))
        input_dict["scratch"] = input_dict["rewards"] * 2
        return super().forward(input_dict, state, seq_lens)


def test_call_with_sample_batch_hands_forward_a_sample_batch_copy():
    from rlpolicy.policy.sample_batch import SampleBatch

    batch = SampleBatch(
        {"obs": np.ones((3, 2), np.float32), "rewards": np.arange(3.0), "unused": np.zeros(3)},
        _is_training=True,
        _time_major=False,
    )
    converted = []
    batch.set_get_interceptor(lambda v: converted.append(id(v)) or np.asarray(v) + 0.0)
    _ = batch["obs"]  # converted once already
    m = _ReadsColumns(BOX2)
    out, _ = m(batch)
    np.testing.assert_allclose(out, [[2.0], [2.0], [2.0]], rtol=1e-6, atol=1e-6)
    assert m.batch_type is SampleBatch and m.flags == (True, False, 3)
    # The caller's batch is unchanged but records what forward() read and added.
    assert sorted(batch) == ["obs", "rewards", "unused"]
    assert batch.accessed_keys == {"obs", "rewards"}
    assert batch.added_keys == {"scratch"}
    # Columns converted before the call are not converted again.
    assert converted.count(id(dict.__getitem__(batch, "obs"))) == 1
    assert converted.count(id(dict.__getitem__(batch, "rewards"))) == 1
