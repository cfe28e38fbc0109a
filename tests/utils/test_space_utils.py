"""rlpolicy.utils.spaces.space_utils: structure helpers and action (un)squashing round trips."""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.utils.spaces.space_utils import (
    clip_action,
    flatten_space,
    flatten_to_single_ndarray,
    get_base_struct_from_space,
    get_dummy_batch_for_space,
    normalize_action,
    unbatch,
    unsquash_action,
)

BOX = gym.spaces.Box(low=np.array([-2.0, 0.0], np.float32), high=np.array([2.0, 10.0], np.float32))
DISC = gym.spaces.Discrete(4)
NESTED = gym.spaces.Dict(
    {
        "b": gym.spaces.Tuple((BOX, DISC)),
        "a": gym.spaces.MultiDiscrete([2, 3]),
        "c": gym.spaces.MultiBinary(3),
    }
)


def test_flatten_space_order():
    flat = flatten_space(NESTED)
    # Dict keys sorted: a, b(=box, disc), c.
    assert [type(s).__name__ for s in flat] == ["MultiDiscrete", "Box", "Discrete", "MultiBinary"]
    assert flat[1] is BOX
    assert flatten_space(BOX) == [BOX]


def test_base_struct():
    struct = get_base_struct_from_space(NESTED)
    assert isinstance(struct, dict) and set(struct) == {"a", "b", "c"}
    assert struct["b"] == (BOX, DISC) and isinstance(struct["b"], tuple)
    assert get_base_struct_from_space(DISC) is DISC


def test_dummy_batch_shapes_and_dtypes():
    batch = get_dummy_batch_for_space(NESTED, batch_size=5, fill_value=1)
    assert batch["a"].shape == (5, 2) and batch["a"].dtype == NESTED["a"].dtype
    assert batch["b"][0].shape == (5, 2) and batch["b"][0].dtype == np.float32
    assert batch["b"][1].shape == (5,) and np.all(batch["b"][1] == 1)
    assert batch["c"].shape == (5, 3)
    assert get_dummy_batch_for_space(BOX, batch_size=0).shape == (2,)
    assert get_dummy_batch_for_space(BOX, batch_size=3, time_size=4).shape == (3, 4, 2)
    assert get_dummy_batch_for_space(BOX, batch_size=3, time_size=4, time_major=True).shape == (4, 3, 2)
    nested_t = get_dummy_batch_for_space(NESTED, batch_size=3, time_size=2)
    assert nested_t["b"][1].shape == (3, 2)


def test_dummy_batch_random_in_space():
    rnd = get_dummy_batch_for_space(BOX, batch_size=50, fill_value="random")
    assert rnd.shape == (50, 2) and all(BOX.contains(r) for r in rnd)
    assert len(np.unique(rnd[:, 1])) > 1
    rnd_t = get_dummy_batch_for_space(DISC, batch_size=3, time_size=2, fill_value="random")
    assert rnd_t.shape == (3, 2) and rnd_t.max() < 4


def test_dummy_batch_time_size_needs_batch():
    with pytest.raises(ValueError, match="time_size"):
        get_dummy_batch_for_space(BOX, batch_size=0, time_size=3)


def test_flatten_to_single_ndarray():
    out = flatten_to_single_ndarray({"b": (np.array([[1.0, 2.0]]), 3), "a": np.array([0.5])})
    np.testing.assert_array_equal(out, [0.5, 1.0, 2.0, 3.0])
    x = np.array([[1, 2]])
    assert flatten_to_single_ndarray(x) is x


def test_unbatch_nested():
    struct = {"x": np.array([1, 2, 3]), "y": (np.array([[1.0], [2.0], [3.0]]), np.array([True, False, True]))}
    items = unbatch(struct)
    assert len(items) == 3
    assert items[1]["x"] == 2 and items[1]["y"][0].tolist() == [2.0] and not items[1]["y"][1]
    assert isinstance(items[2]["y"], tuple)
    with pytest.raises(ValueError, match="batch size"):
        unbatch({"x": np.zeros(2), "y": np.zeros(3)})


def test_normalize_unsquash_round_trip():
    rng = np.random.default_rng(0)
    struct = get_base_struct_from_space(NESTED)
    for _ in range(20):
        action = NESTED.sample()
        action = {"a": action["a"], "b": tuple(action["b"]), "c": action["c"]}
        norm = normalize_action(action, struct)
        assert np.all(norm["b"][0] >= -1.0 - 1e-6) and np.all(norm["b"][0] <= 1.0 + 1e-6)
        back = unsquash_action(norm, struct)
        np.testing.assert_allclose(back["b"][0], action["b"][0], rtol=1e-5, atol=1e-5)
        # Non-Box components untouched.
        assert back["b"][1] == action["b"][1]
        np.testing.assert_array_equal(back["a"], action["a"])
    del rng


def test_normalize_hand_worked():
    # low=[-2, 0], high=[2, 10]: midpoint -> 0, low -> -1, high -> 1.
    np.testing.assert_allclose(normalize_action(np.array([0.0, 5.0]), BOX), [0.0, 0.0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        normalize_action(np.array([-2.0, 10.0]), BOX), [-1.0, 1.0], rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(unsquash_action(np.array([0.5, -0.5]), BOX), [1.0, 2.5], rtol=1e-6, atol=1e-6)
    # Out-of-range squashed values are clipped into the space.
    np.testing.assert_allclose(unsquash_action(np.array([3.0, -7.0]), BOX), [2.0, 0.0], rtol=1e-6, atol=1e-6)
    # Accepts the Dict space itself as well as its base struct.
    out = unsquash_action({"a": np.array([1, 1]), "b": (np.array([0.0, 0.0]), 2), "c": np.zeros(3)}, NESTED)
    np.testing.assert_allclose(out["b"][0], [0.0, 5.0], rtol=1e-6, atol=1e-6)


def test_clip_action():
    np.testing.assert_array_equal(clip_action(np.array([-5.0, 11.0]), BOX), [-2.0, 10.0])
    np.testing.assert_array_equal(clip_action(np.array([1.0, 1.0]), BOX), [1.0, 1.0])
    assert clip_action(7, DISC) == 7  # non-Box untouched
    nested = clip_action(
        {"a": np.array([1, 2]), "b": (np.array([9.0, -1.0]), 3), "c": np.zeros(3)},
        get_base_struct_from_space(NESTED),
    )
    np.testing.assert_array_equal(nested["b"][0], [2.0, 0.0])


def test_int_box_not_normalized():
    int_box = gym.spaces.Box(0, 10, (2,), dtype=np.int64)
    a = np.array([3, 7])
    assert normalize_action(a, int_box) is a
    assert unsquash_action(a, int_box) is a


def test_shape_of_returns_the_shape_or_names_a_shapeless_space():
    import gymnasium as gym

    from rlpolicy.utils.spaces.space_utils import shape_of

    assert shape_of(gym.spaces.Box(-1.0, 1.0, (2, 3))) == (2, 3)
    assert shape_of(gym.spaces.Discrete(4)) == ()
    with pytest.raises(ValueError, match=r"Dict space .* has no shape"):
        shape_of(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))
