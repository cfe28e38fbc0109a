"""The one lock idiom of the policies: ``@with_lock``.

Every public method of a policy that reads or writes its model, optimizer or
counters runs holding ``self._lock``, a re-entrant lock, so no forward pass or
session run sees weights half-assigned by another thread. The lock is made on
first use (a graph policy's methods may run during construction, before any
``__init__`` line could have made it); a class may also create it itself.
Nothing here imports torch or tensorflow.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def policy_lock(obj: Any) -> Any:
    """``obj._lock``, created as a ``threading.RLock`` if ``obj`` has none yet.

    ``dict.setdefault`` is atomic, so two threads racing on the first call
    still end up sharing one lock.
    """
    lock = obj.__dict__.get("_lock")
    if lock is None:
        lock = obj.__dict__.setdefault("_lock", threading.RLock())
    return lock


def with_lock(method: F) -> F:
    """Runs ``method`` holding the instance's re-entrant lock (see :func:`policy_lock`)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with policy_lock(self):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
