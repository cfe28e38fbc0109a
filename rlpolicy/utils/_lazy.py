"""Module attributes resolved on first access (PEP 562 ``__getattr__``).

RLlib 1.11 modules import many names at the top (``tf1, tf, tfv = try_import_tf()``,
``ModelCatalog``, the torch mixins, ...), and 1.x client code imports them from there.
rlpolicy offers the same names at the same paths, but resolves them when first used:
importing a policy module then does not import a framework, and a name whose home module
imports this one (``torch_mixins`` imports ``torch_policy``) does not make an import cycle.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Dict, Mapping, Union

# A target is "package.module" (the module itself), "package.module:attr", or a
# zero-argument callable returning the value.
Target = Union[str, Callable[[], Any]]


def resolve(target: Target) -> Any:
    """The value a lazy table entry names."""
    if callable(target):
        return target()
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def lazy_module_attrs(module_name: str, table: Mapping[str, Target]) -> Callable[[str], Any]:
    """Returns a module ``__getattr__`` that resolves the names of ``table``.

    A resolved value is stored in the module's globals, so each name resolves once.

    Args:
        module_name: ``__name__`` of the module that assigns the result to ``__getattr__``.
        table: Attribute name -> target (see ``Target``).
    """

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = resolve(target)
        setattr(sys.modules[module_name], name, value)
        return value

    return __getattr__


def tf_handle(index: int) -> Callable[[], Any]:
    """A target giving ``try_import_tf()[index]`` (0: tf1, 1: tf, 2: tfv)."""

    def get() -> Any:
        from rlpolicy.utils.framework import try_import_tf

        return try_import_tf()[index]

    return get


def torch_handle(index: int) -> Callable[[], Any]:
    """A target giving ``try_import_torch()[index]`` (0: torch, 1: nn)."""

    def get() -> Any:
        from rlpolicy.utils.framework import try_import_torch

        return try_import_torch()[index]

    return get


# The framework handles 1.11 modules define at import time.
FRAMEWORK_HANDLES: Dict[str, Target] = {
    "tf1": tf_handle(0),
    "tf": tf_handle(1),
    "tfv": tf_handle(2),
    "torch": torch_handle(0),
    "nn": torch_handle(1),
}
