"""Small general helpers (RLlib's ``ray.rllib.utils``)."""

from __future__ import annotations

from typing import Any, List, Optional

from rlpolicy.utils.annotations import (
    DeveloperAPI,
    ExperimentalAPI,
    OverrideToImplementCustomLogic,
    PublicAPI,
    override,
)
from rlpolicy.utils.deprecation import DEPRECATED_VALUE, deprecation_warning
from rlpolicy.utils.framework import try_import_tf, try_import_tfp, try_import_torch


def force_list(elements: Optional[Any] = None, to_tuple: bool = False):
    """Wraps ``elements`` in a list (or tuple) unless it already is one.

    ``None`` becomes an empty list/tuple; tuples, lists and sets are converted.
    """
    ctor = tuple if to_tuple else list
    if elements is None:
        return ctor()
    # RLlib 1.11 tests the exact type: a namedtuple (or list subclass) is one element.
    if type(elements) in (list, tuple, set):
        return ctor(elements)
    return ctor([elements])


force_tuple = lambda elements=None: force_list(elements, to_tuple=True)  # noqa: E731


def add_mixins(base: type, mixins: List[type], reversed: bool = False) -> type:
    """Returns a subclass of ``base`` that also inherits from ``mixins``.

    Earlier mixins take precedence over later ones and over ``base`` (they come
    first in the MRO). With ``reversed=True``, ``base`` takes precedence and, as in
    RLlib 1.11, the mixins follow it in reverse order (later mixins first).
    """
    mixins = list(mixins or [])
    if not mixins:
        return base
    bases = (base, *mixins[::-1]) if reversed else (*mixins, base)
    name = "_".join([m.__name__ for m in mixins] + [base.__name__])
    return type(name, bases, {})


class NullContextManager:
    """A context manager that does nothing (RLlib's ``NullContextManager``)."""

    def __init__(self):
        pass

    def __enter__(self):
        return None

    def __exit__(self, *args):
        return False


def merge_dicts(d1: dict, d2: dict) -> dict:
    """Deep-merges ``d2`` into a deep copy of ``d1`` and returns it."""
    import copy

    merged = copy.deepcopy(d1)
    deep_update(merged, d2, True, [])
    return merged


def deep_update(
    original: dict,
    new_dict: dict,
    new_keys_allowed: bool = False,
    allow_new_subkey_list: Optional[List[str]] = None,
    override_all_if_type_changes: Optional[List[str]] = None,
    override_all_key_list: Optional[List[str]] = None,
) -> dict:
    """Updates ``original`` in place with ``new_dict``, recursing into dicts.

    Raises:
        KeyError: naming the key, for a key not in ``original`` when new keys
            are not allowed.
    """
    allow_new_subkey_list = allow_new_subkey_list or []
    override_all_if_type_changes = override_all_if_type_changes or []
    override_all_key_list = override_all_key_list or []
    for k, value in new_dict.items():
        if k not in original and not new_keys_allowed:
            raise KeyError(f"Unknown config parameter `{k}`")
        if isinstance(original.get(k), dict) and isinstance(value, dict):
            if k in override_all_key_list:
                original[k] = value
            elif (
                k in override_all_if_type_changes
                and "type" in value
                and "type" in original[k]
                and value["type"] != original[k]["type"]
            ):
                original[k] = value
            else:
                deep_update(original[k], value, k in allow_new_subkey_list)
        else:
            original[k] = value
    return original


__all__ = [
    "DeveloperAPI",
    "ExperimentalAPI",
    "OverrideToImplementCustomLogic",
    "PublicAPI",
    "override",
    "DEPRECATED_VALUE",
    "deprecation_warning",
    "try_import_tf",
    "try_import_torch",
    "force_list",
    "force_tuple",
    "add_mixins",
    "NullContextManager",
    "merge_dicts",
    "deep_update",
    "try_import_tfp",
]

# The other names RLlib 1.11's ``ray.rllib.utils`` imports; resolved on first access
# (their modules import this package, and ``test_utils`` imports the frameworks).
from rlpolicy.utils._lazy import lazy_module_attrs  # noqa: E402

_RLLIB_1_11_NAMES = {
    "FilterManager": "rlpolicy.utils.filter_manager:FilterManager",
    "Filter": "rlpolicy.utils.filter:Filter",
    "check_env": "rlpolicy.utils.pre_checks.env:check_env",
    **{
        name: f"rlpolicy.utils.numpy:{name}"
        for name in (
            "sigmoid",
            "softmax",
            "relu",
            "one_hot",
            "fc",
            "lstm",
            "SMALL_NUMBER",
            "LARGE_INTEGER",
            "MIN_LOG_NN_OUTPUT",
            "MAX_LOG_NN_OUTPUT",
        )
    },
    **{
        name: f"rlpolicy.utils.schedules:{name}"
        for name in (
            "LinearSchedule",
            "PiecewiseSchedule",
            "PolynomialSchedule",
            "ExponentialSchedule",
            "ConstantSchedule",
        )
    },
    **{
        name: f"rlpolicy.utils.test_utils:{name}"
        for name in ("check", "check_compute_single_action", "check_train_results", "framework_iterator")
    },
}
__getattr__ = lazy_module_attrs(__name__, _RLLIB_1_11_NAMES)
