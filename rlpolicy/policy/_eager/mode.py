"""Eager TF policies in a process whose TF runs graph mode by default.

TF1 code, and RLlib's own ``try_import_tf``, call ``tf1.disable_v2_behavior()``
or ``tf1.disable_eager_execution()`` at start-up. RLlib 1.11's Trainer then
calls ``tf1.enable_eager_execution()`` for ``framework="tf2"``, which TF
refuses once any graph was built. rlpolicy leaves the process's mode alone:
every method of an eager policy class runs inside TF's (thread-local)
eager-mode context when its caller is in graph mode, so ``tf2`` policies work
in such a process and graph-mode (``tf``) policies keep their own graphs.

A method called while a ``tf.function`` is being traced runs as it is (it is
part of the trace); a method called from eager code pays one
``executing_eagerly()`` check.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

_MARK = "_rlpolicy_runs_eagerly"
# Left as they are: ``loss`` (called from the policy's own, wrapped methods) keeps its
# identity, which tells whether a class overrides ``Policy.loss``.
_UNWRAPPED = frozenset({"loss"})


def _tf_context() -> Any:
    """TF's eager context module and ``inside_function`` (imported on first use)."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops

    return context, ops.inside_function


def runs_eagerly(fn: Callable) -> Callable:
    """``fn`` wrapped to run in TF's eager mode when called from graph mode.

    Calls from eager code, and calls made while a ``tf.function`` is traced, go
    straight to ``fn``.
    """
    if getattr(fn, _MARK, False):
        return fn
    context, inside_function = _tf_context()
    executing_eagerly, eager_mode = context.executing_eagerly, context.eager_mode

    @functools.wraps(fn)
    def in_eager_mode(*args: Any, **kwargs: Any) -> Any:
        if executing_eagerly() or inside_function():
            return fn(*args, **kwargs)
        with eager_mode():
            return fn(*args, **kwargs)

    setattr(in_eager_mode, _MARK, True)
    return in_eager_mode


def make_methods_eager(cls: type) -> type:
    """Wraps ``__init__`` and every public plain method ``cls`` has (own or
    inherited, mixins included) with :func:`runs_eagerly`, on ``cls`` itself.

    Static and class methods, properties and ``loss`` are left alone. Returns ``cls``.
    """
    for name in dir(cls):
        if (name.startswith("_") and name != "__init__") or name in _UNWRAPPED:
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, types.FunctionType) and not getattr(attr, _MARK, False):
            setattr(cls, name, runs_eagerly(attr))
    return cls


__all__ = ["runs_eagerly", "make_methods_eager"]
