"""User hooks into sampling and training (RLlib 1.11's ``ray.rllib.agents.callbacks``).

``MultiCallbacks`` and the sampler's adapter for duck-typed callbacks, beside
the rollout worker that builds the callbacks object. ``rlpolicy.agents.callbacks``
re-exports them, and ``MultiCallbacks`` names that module as its own (RLlib's
path in tracebacks, ``repr`` and pickles).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, List, Type

# Defined at the policy layer (every policy makes one by default); public here.
from rlpolicy.policy._callbacks import DefaultCallbacks

_HOOKS = (
    "on_sub_environment_created",
    "on_trainer_init",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_postprocess_trajectory",
    "on_sample_end",
    "on_learn_on_batch",
    "on_train_result",
)


def _make_forwarder(hook: str) -> Callable:
    def forward(self, **kwargs) -> None:
        for callback in self._callback_list:
            getattr(callback, hook)(**kwargs)

    forward.__name__ = hook
    forward.__qualname__ = f"MultiCallbacks.{hook}"
    forward.__doc__ = f"Calls ``{hook}`` on every wrapped callbacks object, in list order."
    # Keep the keyword-only signature of the hook for introspection.
    forward.__signature__ = inspect.signature(getattr(DefaultCallbacks, hook))
    return forward


class MultiCallbacks(DefaultCallbacks):
    """Combines several callbacks classes into one.

    ``MultiCallbacks([A, B])`` is put into the config in place of a class.
    Calling it (as RLlib calls ``config["callbacks"]()``) creates fresh
    ``A()`` and ``B()`` instances and returns itself; each hook is then
    forwarded to all of them, in list order.

    Example:
        >>> config["callbacks"] = MultiCallbacks([MyStatsCallbacks, MyVideoCallbacks])
    """

    def __init__(self, callback_class_list: List[Type[DefaultCallbacks]]):
        """Initializes a MultiCallbacks.

        Args:
            callback_class_list: The callbacks classes (or factories) to combine.

        Raises:
            TypeError: If an entry is not callable.
        """
        super().__init__()
        bad = [c for c in callback_class_list if not callable(c)]
        if bad:
            raise TypeError(
                f"MultiCallbacks: callback_class_list entries must be DefaultCallbacks "
                f"subclasses, got {bad!r}"
            )
        self._callback_class_list = list(callback_class_list)
        self._callback_list: List[DefaultCallbacks] = []

    def __call__(self, *args, **kwargs) -> "MultiCallbacks":
        """Instantiates every wrapped callbacks class and returns ``self``."""
        self._callback_list = [cls() for cls in self._callback_class_list]
        return self


for _hook in _HOOKS:
    setattr(MultiCallbacks, _hook, _make_forwarder(_hook))
del _hook


# Its public home (RLlib's path), which re-exports it.
MultiCallbacks.__module__ = "rlpolicy.agents.callbacks"


class _DuckCallbacks(DefaultCallbacks):
    """A callbacks object that is not a DefaultCallbacks (RLlib 1.11 only calls
    ``config["callbacks"]()``), seen by the sampler: the hooks it has are called,
    the ones it lacks do nothing (DefaultCallbacks'). Other attributes read through."""

    def __init__(self, wrapped: Any):
        super().__init__()
        self.wrapped = wrapped

    def __getattr__(self, name: str) -> Any:  # only for names DefaultCallbacks lacks
        return getattr(self.__dict__["wrapped"], name)


for _hook in _HOOKS:

    def _call_if_present(self, _name=_hook, **kwargs) -> None:
        fn = getattr(self.wrapped, _name, None)
        if fn is not None:
            fn(**kwargs)

    _call_if_present.__name__ = _hook
    _call_if_present.__qualname__ = f"_DuckCallbacks.{_hook}"
    setattr(_DuckCallbacks, _hook, _call_if_present)
del _hook


def as_callbacks(obj: Any) -> DefaultCallbacks:
    """``obj`` when it is a DefaultCallbacks, else an adapter that calls the hooks
    ``obj`` has and skips those it lacks (duck-typed 1.x callbacks classes)."""
    return obj if isinstance(obj, DefaultCallbacks) else _DuckCallbacks(obj)
