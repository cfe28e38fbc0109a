"""ViewRequirement: defaults and shift parsing."""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.policy.view_requirement import ViewRequirement


def test_defaults():
    vr = ViewRequirement()
    assert vr.data_col is None and vr.shift == 0 and vr.index is None
    assert vr.batch_repeat_value == 1
    assert vr.used_for_compute_actions is True and vr.used_for_training is True
    assert isinstance(vr.space, gym.spaces.Box) and vr.space.shape == ()
    assert vr.space.low == -np.inf and vr.space.high == np.inf
    assert vr.shift_from is None and vr.shift_to is None
    assert vr.shift_arr.tolist() == [0]


@pytest.mark.parametrize(
    "shift, arr, frm, to",
    [
        (-1, [-1], None, None),
        ([-3, -2, -1, 0], [-3, -2, -1, 0], None, None),
        ("-50:-1", list(range(-50, 0)), -50, -1),
        ("0:3", [0, 1, 2, 3], 0, 3),
        ("-4:0:2", [-4, -2, 0], -4, 0),
    ],
)
def test_shift_parsing(shift, arr, frm, to):
    vr = ViewRequirement("obs", shift=shift)
    assert vr.shift_arr.tolist() == arr
    assert (vr.shift_from, vr.shift_to) == (frm, to)


def test_list_shift_kept_as_array():
    vr = ViewRequirement(shift=[-1, 0])
    assert isinstance(vr.shift, np.ndarray) and vr.shift.tolist() == [-1, 0]


def test_custom_fields():
    space = gym.spaces.Discrete(3)
    vr = ViewRequirement(
        "actions",
        space=space,
        shift=-1,
        index=2,
        batch_repeat_value=20,
        used_for_compute_actions=False,
        used_for_training=False,
    )
    assert vr.data_col == "actions" and vr.space is space and vr.index == 2
    assert vr.batch_repeat_value == 20
    assert not vr.used_for_compute_actions and not vr.used_for_training


@pytest.mark.parametrize(
    "shift, match",
    [
        ("-5", r"shift='-5': a range string must look like 'from:to'"),
        ("a:b", r"shift='a:b': a range string"),
        ("1:2:3:4", r"a range string"),
        ("0:4:0", r"step must not be 0"),
        (1.5, r"shift=1.5: expected an int, a list of ints or a 'from:to' string"),
        ([1, "x"], r"expected an int, a list of ints"),
    ],
)
def test_bad_shift(shift, match):
    with pytest.raises(ValueError, match=match):
        ViewRequirement(shift=shift)


def test_repr():
    r = repr(ViewRequirement("state_out_0", shift="-3:-1", batch_repeat_value=5))
    assert r.startswith("ViewRequirement(data_col='state_out_0', space=Box(")
    assert "shift='-3:-1'" in r and "batch_repeat_value=5" in r and "used_for_training=True" in r


def test_default_space_is_a_fresh_box_each_time():
    a, b = ViewRequirement(), ViewRequirement()
    assert a.space == gym.spaces.Box(-np.inf, np.inf, shape=(), dtype=np.float32)
    assert a.space.dtype == np.float32 and type(a.space) is gym.spaces.Box
    assert a.space is not b.space and a.space.low is not b.space.low
    a.space.low[...] = 0.0  # mutating one requirement's space leaves the others alone
    assert b.space.low == -np.inf and ViewRequirement().space.low == -np.inf
    a.space.seed(3)
    assert b.space.contains(b.space.sample())


@pytest.mark.parametrize("shift", [-1, 0, 3, np.int64(-2), np.int32(1)])
def test_int_shifts_of_every_integer_type_parse_alike(shift):
    # Python ints take a direct path; numpy integers the general one: same result.
    vr = ViewRequirement("obs", shift=shift)
    assert vr.shift == int(shift) and not isinstance(vr.shift, np.ndarray)
    assert vr.shift_arr.dtype == np.int64 and vr.shift_arr.tolist() == [int(shift)]
    assert (vr.shift_from, vr.shift_to, vr.shift_step) == (None, None, None)


@pytest.mark.parametrize("shift", [True, False, np.bool_(True)])
def test_bool_shift_is_rejected(shift):
    with pytest.raises(ValueError, match="expected an int, a list of ints"):
        ViewRequirement(shift=shift)
