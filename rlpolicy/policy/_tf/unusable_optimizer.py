"""The default optimizer of a graph TF policy whose ``config["lr"]`` is not usable.

RLlib 1.11's ``TFPolicy.optimizer()`` builds ``AdamOptimizer(learning_rate=config["lr"])``
without looking at the value: a policy that brings its own optimizers (RLlib
2.x SAC-style code sets ``lr=None``) builds fine, and only a policy that uses that
optimizer fails. Here such an optimizer is this stand-in: it holds no variables,
and any use raises the config error (clearly, instead of TF's error about None).
"""

from __future__ import annotations

from typing import Any, List


class UnusableOptimizer:
    """Stands in for the default optimizer; every use raises ``ValueError(message)``.

    Args:
        message: The error to raise, naming the bad ``lr`` and how to fix it.
    """

    def __init__(self, message: str):
        self._message = message

    def variables(self) -> List[Any]:
        """None: the policy's state holds no variables of this optimizer."""
        return []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ValueError(self._message)


__all__ = ["UnusableOptimizer"]
