"""API-stability annotations, as RLlib 1.11 exposes them.

``override`` additionally verifies, when the class body is executed, that the
decorated method really exists on the named parent class: a typo in an
overriding method's name is caught at import time, not silently ignored.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from rlpolicy.utils.deprecation import Deprecated  # noqa: F401  (RLlib 1.11 imports it here)

F = TypeVar("F", bound=Callable[..., Any])


def override(cls: type) -> Callable[[F], F]:
    """Marks a method as overriding one of ``cls``.

    Args:
        cls: The superclass that defines the method being overridden.

    Raises:
        NameError: If ``cls`` has no attribute of the decorated method's name.
    """

    def check_override(method: F) -> F:
        name = getattr(method, "__name__", None)
        if name is None and isinstance(method, (staticmethod, classmethod, property)):
            inner = method.fget if isinstance(method, property) else method.__func__
            name = inner.__name__
        if name not in dir(cls):
            raise NameError(
                f"@override({cls.__name__}): {name!r} does not override any method of {cls.__name__}"
            )
        return method

    return check_override


def _mark(obj: Any, stability: str) -> Any:
    try:
        obj._rlpolicy_api = stability
    except (AttributeError, TypeError):  # builtins / slots cannot be tagged
        pass
    return obj


def PublicAPI(obj: F) -> F:
    """Public API: stable across releases, used by end users."""
    return _mark(obj, "public")


def DeveloperAPI(obj: F) -> F:
    """Developer API: for algorithm authors; may change between minor releases."""
    return _mark(obj, "developer")


def ExperimentalAPI(obj: F) -> F:
    """Experimental API: may change or disappear at any time."""
    return _mark(obj, "experimental")


def OverrideToImplementCustomLogic(obj: F) -> F:
    """Marks a method that users are expected to override with their own logic."""
    return _mark(obj, "override_to_implement")


def OverrideToImplementCustomLogic_CallToSuperRecommended(obj: F) -> F:
    """As ``OverrideToImplementCustomLogic``; overriders should call ``super()``."""
    return _mark(obj, "override_call_super")
