"""``ConstantSchedule``: the same value at every timestep."""

from __future__ import annotations

from typing import Any, Optional

from rlpolicy.utils.annotations import override
from rlpolicy.utils.schedules.schedule import Schedule
from rlpolicy.utils.typing import TensorType


class ConstantSchedule(Schedule):
    """A schedule that always returns ``value``."""

    def __init__(self, value: Any, framework: Optional[str] = None):
        """Initializes a ConstantSchedule.

        Args:
            value: The constant value.
            framework: The framework descriptor string, e.g. ``"tf"``, ``"torch"`` or None.
        """
        super().__init__(framework=framework)
        self._v = value

    @override(Schedule)
    def _value(self, t: TensorType) -> Any:
        return self._v

    @override(Schedule)
    def _tf_value_op(self, t: TensorType) -> TensorType:
        import tensorflow as tf

        return tf.constant(self._v)
