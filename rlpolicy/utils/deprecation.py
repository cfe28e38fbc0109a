"""Deprecation helpers (RLlib 1.11 names)."""

from __future__ import annotations

import logging
import warnings
from typing import Optional

logger = logging.getLogger(__name__)

# Default value of a deprecated config key / argument: "not set by the user".
DEPRECATED_VALUE = -1


def deprecation_warning(
    old: str, new: Optional[str] = None, *, help: Optional[str] = None, error: Optional[bool] = None
) -> None:
    """Warns (or raises, if ``error``) that ``old`` is deprecated.

    Raises:
        DeprecationWarning: (as an exception) if ``error`` is truthy.
    """
    msg = f"`{old}` has been deprecated."
    if new:
        msg += f" Use `{new}` instead."
    if help:
        msg += f" {help}"
    if error:
        raise DeprecationWarning(msg + " This will raise an error in the future!")
    # One message, not two: a DeprecationWarning the warnings filters show (code in
    # __main__, pytest, -W default) is the message; else it is logged (RLlib 1.11
    # only logs), so the user sees it either way.
    with warnings.catch_warnings(record=True) as probe:  # would the filters show it?
        warnings.warn(msg, DeprecationWarning, stacklevel=3)
    if probe:
        warnings.warn(msg, DeprecationWarning, stacklevel=3)
    else:
        logger.warning(msg)


class Deprecated:
    """Decorator marking a function/class deprecated (warns, or raises with error=True)."""

    def __init__(
        self,
        old: Optional[str] = None,
        new: Optional[str] = None,
        help: Optional[str] = None,
        error: bool = False,
    ):
        self.old, self.new, self.help, self.error = old, new, help, error

    def __call__(self, obj):
        import functools

        old = self.old or getattr(obj, "__name__", str(obj))
        if isinstance(obj, type):
            init = obj.__init__

            @functools.wraps(init)
            def patched(inner_self, *args, **kwargs):
                deprecation_warning(old, self.new, help=self.help, error=self.error)
                return init(inner_self, *args, **kwargs)

            obj.__init__ = patched
            return obj

        @functools.wraps(obj)
        def wrapper(*args, **kwargs):
            deprecation_warning(old, self.new, help=self.help, error=self.error)
            return obj(*args, **kwargs)

        return wrapper
