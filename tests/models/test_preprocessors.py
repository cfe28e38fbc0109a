"""Observation preprocessors: hand-worked encodings, spaces, round trips and errors."""

from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.models.modelv2 import restore_original_dimensions
from rlpolicy.models.preprocessors import (
    OBS_VALIDATION_INTERVAL,
    AtariRamPreprocessor,
    DictFlatteningPreprocessor,
    NoPreprocessor,
    OneHotPreprocessor,
    TupleFlatteningPreprocessor,
    get_preprocessor,
)

BOX2 = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


@pytest.mark.parametrize(
    "space,cls",
    [
        (gym.spaces.Discrete(3), OneHotPreprocessor),
        (gym.spaces.MultiDiscrete([2, 3]), OneHotPreprocessor),
        (BOX2, NoPreprocessor),
        (gym.spaces.Box(0, 1, (4, 4, 3), np.float32), NoPreprocessor),
        (gym.spaces.Box(0, 255, (128,), np.uint8), AtariRamPreprocessor),
        (gym.spaces.Tuple([BOX2]), TupleFlatteningPreprocessor),
        (gym.spaces.Dict({"x": BOX2}), DictFlatteningPreprocessor),
    ],
)
def test_get_preprocessor_table(space, cls):
    assert get_preprocessor(space) is cls


def test_one_hot_discrete_and_multidiscrete():
    p = OneHotPreprocessor(gym.spaces.Discrete(3))
    assert p.shape == (3,) and p.size == 3
    np.testing.assert_array_equal(p.transform(1), [0, 1, 0])
    m = OneHotPreprocessor(gym.spaces.MultiDiscrete([2, 3]))
    assert m.shape == (5,)
    np.testing.assert_array_equal(m.transform(np.array([1, 2])), [0, 1, 0, 0, 1])
    assert m.transform(np.array([1, 2])).dtype == np.float32


def test_no_preprocessor_is_identity_and_keeps_space():
    p = NoPreprocessor(BOX2)
    x = np.array([0.5, -0.5], np.float32)
    assert p.transform(x) is x and p.observation_space is BOX2 and p.shape == (2,)


def test_atari_ram_scaling():
    p = AtariRamPreprocessor(gym.spaces.Box(0, 255, (128,), np.uint8))
    out = p.transform(np.full(128, 192, np.uint8))
    np.testing.assert_allclose(out, 0.5, rtol=1e-6, atol=1e-6)


def test_dict_flattening_hand_worked():
    space = gym.spaces.Dict(
        {"pos": BOX2, "id": gym.spaces.Discrete(3), "grid": gym.spaces.Box(0, 1, (2, 2), np.float32)}
    )
    p = DictFlatteningPreprocessor(space)
    # gymnasium sorts Dict keys: grid (4), id (3), pos (2).
    assert list(space.spaces) == ["grid", "id", "pos"] and p.shape == (9,)
    obs = {"pos": np.array([0.1, 0.2], np.float32), "id": 2, "grid": np.array([[1, 0], [0, 1]], np.float32)}
    np.testing.assert_allclose(p.transform(obs), [1, 0, 0, 1, 0, 0, 1, 0.1, 0.2], rtol=1e-6, atol=1e-6)
    flat_space = p.observation_space
    assert flat_space.shape == (9,) and flat_space.original_space is space


def test_tuple_flattening_and_write_at_offset():
    space = gym.spaces.Tuple([gym.spaces.Discrete(2), BOX2])
    p = TupleFlatteningPreprocessor(space)
    obs = (1, np.array([0.3, -0.3], np.float32))
    np.testing.assert_allclose(p.transform(obs), [0, 1, 0.3, -0.3], rtol=1e-6, atol=1e-6)
    arr = np.full(7, 9.0, np.float32)
    p.write(obs, arr, 2)
    np.testing.assert_allclose(arr, [9, 9, 0, 1, 0.3, -0.3, 9], rtol=1e-6, atol=1e-6)
    assert p.observation_space.original_space is space


def test_round_trip_through_restore_original_dimensions():
    space = gym.spaces.Dict(
        {"a": gym.spaces.Tuple([gym.spaces.Discrete(3), BOX2]), "b": gym.spaces.MultiDiscrete([2, 2])}
    )
    p = get_preprocessor(space)(space)
    samples = [space.sample() for _ in range(4)]
    flat = np.stack([p.transform(s) for s in samples])
    out = restore_original_dimensions(flat, p.observation_space, "numpy")
    assert isinstance(out, OrderedDict)
    for i, s in enumerate(samples):
        assert out["a"][0][i].argmax() == s["a"][0]
        np.testing.assert_allclose(out["a"][1][i], s["a"][1])
        np.testing.assert_array_equal(out["b"][i], np.eye(2)[s["b"]].ravel())


@pytest.mark.parametrize(
    "space,obs,match",
    [
        (
            BOX2,
            np.zeros(3, np.float32),
            r"observation has shape \(3,\) but the observation space Box.* expects shape \(2,\)",
        ),
        (BOX2, np.array([2.0, 0.0], np.float32), r"lies outside the observation space Box"),
        (gym.spaces.Discrete(3), 5, "lies outside the observation space Discrete"),
        (gym.spaces.Discrete(3), np.array([1, 2]), r"shape \(2,\) but .* expects a scalar"),
        (gym.spaces.MultiDiscrete([2, 3]), np.array([1, 3]), "outside the observation space"),
        (gym.spaces.Dict({"a": BOX2}), {"b": np.zeros(2)}, r"keys \['b'\] do not match .*\['a'\]"),
        (gym.spaces.Tuple([BOX2, BOX2]), (np.zeros(2),), r"\(2 items\)"),
    ],
)
def test_check_shape_errors(space, obs, match):
    p = get_preprocessor(space)(space)
    with pytest.raises(ValueError, match=match):
        p.transform(obs)


def test_check_shape_accepts_lists_and_other_dtypes():
    p = NoPreprocessor(BOX2)
    p.check_shape([0.5, 0.5])
    p.check_shape(np.array([0.5, 0.5], np.float64))


def test_validation_runs_every_interval_only():
    p = NoPreprocessor(BOX2)
    p.transform(np.zeros(2, np.float32))  # call 0: validated
    bad = np.zeros(3, np.float32)
    assert p.transform(bad) is bad  # call 1: not validated
    p._i = OBS_VALIDATION_INTERVAL
    with pytest.raises(ValueError, match="expects shape"):
        p.transform(bad)


def test_dict_write_missing_key():
    space = gym.spaces.Dict({"a": BOX2, "b": BOX2})
    p = DictFlatteningPreprocessor(space)
    with pytest.raises(ValueError, match=r"lacks keys \['b'\]"):
        p.write({"a": np.zeros(2)}, np.zeros(4), 0)
