"""The ``Schedule`` base class."""

from __future__ import annotations

import sys
from abc import ABCMeta, abstractmethod
from typing import Any, Optional

from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.typing import TensorType

_TF_FRAMEWORKS = ("tf", "tf2", "tfe")


def is_tf_tensor(x: Any) -> bool:
    """True if ``x`` is a tf Tensor/Variable (without importing tensorflow)."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and hasattr(tf, "Tensor") and isinstance(x, (tf.Tensor, tf.Variable))


def is_torch_tensor(x: Any) -> bool:
    """True if ``x`` is a torch Tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


@DeveloperAPI
class Schedule(metaclass=ABCMeta):
    """A value that changes with the (time)step ``t``, e.g. a learning rate or epsilon.

    Call ``value(t)`` (or the schedule itself). With a tf framework
    (``"tf"``, ``"tf2"``, ``"tfe"``) or a tf tensor ``t``, the value is a tf
    op; with a torch tensor ``t``, torch ops; otherwise python/numpy.
    """

    def __init__(self, framework: Optional[str]):
        """Initializes a Schedule.

        Args:
            framework: ``"tf"``, ``"tf2"``, ``"tfe"``, ``"torch"`` or None.
        """
        self.framework = framework

    def value(self, t: TensorType) -> TensorType:
        """The value of the schedule at timestep ``t``.

        Args:
            t: The timestep (python number, numpy value, or framework tensor).

        Returns:
            The scheduled value.
        """
        if self.framework in _TF_FRAMEWORKS or is_tf_tensor(t):
            return self._tf_value_op(t)
        return self._value(t)

    def __call__(self, t: TensorType) -> TensorType:
        """Same as ``self.value(t)``."""
        return self.value(t)

    @DeveloperAPI
    @abstractmethod
    def _value(self, t: TensorType) -> TensorType:
        """The value at ``t`` as a python/numpy number (or torch tensor for torch ``t``)."""
        raise NotImplementedError

    @DeveloperAPI
    def _tf_value_op(self, t: TensorType) -> TensorType:
        """The value at ``t`` as a tf op. Default: a constant of ``_value(t)``."""
        import tensorflow as tf

        return tf.constant(self._value(t))
