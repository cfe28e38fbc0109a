"""rlpolicy.utils.annotations: `override` verifies the parent method; API markers are transparent."""

import pytest

from rlpolicy.utils.annotations import (
    DeveloperAPI,
    ExperimentalAPI,
    OverrideToImplementCustomLogic,
    PublicAPI,
    override,
)


class Parent:
    def act(self):
        return "parent"

    @staticmethod
    def helper():
        return 1

    @property
    def size(self):
        return 1


class GrandChildBase(Parent):
    pass


def test_override_returns_the_method_unchanged():
    def act(self):
        return "child"

    assert override(Parent)(act) is act

    class Child(Parent):
        @override(Parent)
        def act(self):
            return "child"

    assert Child().act() == "child"


def test_override_finds_inherited_methods():
    class Child(GrandChildBase):
        @override(GrandChildBase)
        def act(self):  # defined on Parent, inherited by GrandChildBase
            return "child"

    assert Child().act() == "child"


def test_override_accepts_staticmethods_and_properties():
    class Child(Parent):
        @override(Parent)
        @staticmethod
        def helper():
            return 2

        @override(Parent)
        @property
        def size(self):
            return 2

    assert Child.helper() == 2 and Child().size == 2


@pytest.mark.parametrize("name", ["acts", "Act", "unknown_method"])
def test_override_of_a_missing_method_raises_naming_it(name):
    def method(self):
        return None

    method.__name__ = name
    with pytest.raises(NameError, match=rf"'{name}' does not override any method of Parent"):
        override(Parent)(method)


def test_override_typo_fails_when_the_class_body_runs():
    with pytest.raises(NameError, match="'compute_action' does not override"):

        class Child(Parent):  # noqa: F841
            @override(Parent)
            def compute_action(self):
                return None


@pytest.mark.parametrize("marker", [PublicAPI, DeveloperAPI, ExperimentalAPI, OverrideToImplementCustomLogic])
def test_api_markers_return_the_object_itself(marker):
    def f(x):
        return x + 1

    class C:
        pass

    assert marker(f) is f and f(1) == 2
    assert marker(C) is C
    assert marker(len) is len  # builtins cannot be tagged but still pass through
