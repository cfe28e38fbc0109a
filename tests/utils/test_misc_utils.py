"""rlpolicy.utils: force_list, add_mixins, NullContextManager, deprecation helpers, learner-info keys."""

import collections
import logging

import pytest

from rlpolicy.utils import NullContextManager, add_mixins, force_list, force_tuple
from rlpolicy.utils.deprecation import DEPRECATED_VALUE, deprecation_warning
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, []),
        (5, [5]),
        ("ab", ["ab"]),  # strings are single elements, not sequences of characters
        ([1, 2], [1, 2]),
        ((1, 2), [1, 2]),
        ({"k": 1}, [{"k": 1}]),  # a dict is one element
    ],
)
def test_force_list(value, expected):
    assert force_list(value) == expected
    assert force_list(value, to_tuple=True) == tuple(expected)
    assert force_tuple(value) == tuple(expected)


def test_force_list_set_and_copy():
    assert sorted(force_list({3, 1})) == [1, 3]
    original = [1, 2]
    out = force_list(original)
    assert out == original and out is not original  # a new list, as RLlib's list(...)


def test_force_list_keeps_namedtuple_whole():
    Point = collections.namedtuple("Point", ["x", "y"])
    p = Point(1, 2)
    assert force_list(p) == [p]


class Base:
    def who(self):
        return "base"

    def base_only(self):
        return "b"


class MixA:
    def who(self):
        return "A"

    def a_only(self):
        return "a"


class MixB:
    def who(self):
        return "B"

    def b_only(self):
        return "b"


def test_add_mixins_mixins_take_precedence():
    cls = add_mixins(Base, [MixA, MixB])
    obj = cls()
    assert issubclass(cls, Base) and issubclass(cls, MixA) and issubclass(cls, MixB)
    assert obj.who() == "A"  # the first mixin wins, then the next, then the base
    assert cls.__mro__.index(MixA) < cls.__mro__.index(MixB) < cls.__mro__.index(Base)
    assert (obj.a_only(), obj.b_only(), obj.base_only()) == ("a", "b", "b")


def test_add_mixins_reversed_gives_base_precedence():
    cls = add_mixins(Base, [MixA, MixB], reversed=True)
    assert cls().who() == "base"
    assert cls.__mro__.index(Base) < cls.__mro__.index(MixA)
    assert cls.__mro__.index(Base) < cls.__mro__.index(MixB)


def test_add_mixins_reversed_mro_matches_rllib():
    cls = add_mixins(Base, [MixA, MixB], reversed=True)
    mro = cls.__mro__
    assert mro.index(Base) < mro.index(MixB) < mro.index(MixA)


def test_add_mixins_without_mixins_returns_base():
    assert add_mixins(Base, []) is Base
    assert add_mixins(Base, None) is Base


def test_null_context_manager():
    with NullContextManager() as value:
        assert value is None
    with pytest.raises(KeyError):  # exceptions are not swallowed
        with NullContextManager():
            raise KeyError("x")


def test_deprecated_value_is_rllibs_sentinel():
    assert DEPRECATED_VALUE == -1


def test_deprecation_warning_warns_naming_old_and_new(caplog):
    with caplog.at_level(logging.WARNING):
        with pytest.warns(
            DeprecationWarning, match=r"`old_arg` has been deprecated\. Use `new_arg` instead\."
        ):
            deprecation_warning("old_arg", "new_arg")
    # Shown as a warning, so not logged as well (one message; see test_deprecation_message_once).
    assert "old_arg" not in caplog.text
    with pytest.warns(DeprecationWarning, match=r"`only_old` has been deprecated\.$"):
        deprecation_warning("only_old")


@pytest.mark.parametrize("error", [True, 1])
def test_deprecation_warning_error_raises(error):
    with pytest.raises(DeprecationWarning, match=r"`old_arg` has been deprecated\. Use `new_arg` instead"):
        deprecation_warning("old_arg", "new_arg", error=error)


def test_deprecation_warning_error_false_only_warns():
    with pytest.warns(DeprecationWarning):
        deprecation_warning(old="obs_include_prev_action_reward", error=False)


def test_learner_stats_key():
    assert LEARNER_STATS_KEY == "learner_stats"
