"""The policy lock shared by the graph-TF policy's public methods.

Torch and eager policies create ``self._lock`` in ``__init__``; the graph
policy's methods may run during construction (the dummy-batch loss init)
before that, so the lock is made on first use. Nothing here imports torch or
tensorflow.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable


def locked(method: Callable) -> Callable:
    """Runs ``method`` holding the policy's re-entrant lock, so no session run sees
    weights half-assigned by another thread."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        lock = self.__dict__.get("_lock") or self.__dict__.setdefault("_lock", threading.RLock())
        with lock:
            return method(self, *args, **kwargs)
    return wrapper
