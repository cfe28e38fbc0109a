"""``ExponentialSchedule``: ``initial_p * decay_rate ** (t / schedule_timesteps)``."""

from __future__ import annotations

from typing import Optional

from rlpolicy.utils.annotations import override
from rlpolicy.utils.schedules.schedule import Schedule, is_torch_tensor
from rlpolicy.utils.typing import TensorType


class ExponentialSchedule(Schedule):
    """Exponential decay: the value is multiplied by ``decay_rate`` every ``schedule_timesteps``."""

    def __init__(
        self,
        schedule_timesteps: int,
        framework: Optional[str] = None,
        initial_p: float = 1.0,
        decay_rate: float = 0.1,
    ):
        """Initializes an ExponentialSchedule.

        Args:
            schedule_timesteps: Timesteps per factor ``decay_rate`` (> 0).
            framework: The framework descriptor string, e.g. ``"tf"``, ``"torch"`` or None.
            initial_p: Value at ``t=0``.
            decay_rate: Decay factor per ``schedule_timesteps``.

        Raises:
            ValueError: If ``schedule_timesteps`` is not > 0.
        """
        super().__init__(framework=framework)
        if not schedule_timesteps > 0:
            raise ValueError(
                f"ExponentialSchedule: schedule_timesteps must be > 0, got {schedule_timesteps!r}"
            )
        self.schedule_timesteps = schedule_timesteps
        self.initial_p = initial_p
        self.decay_rate = decay_rate

    @override(Schedule)
    def _value(self, t: TensorType) -> TensorType:
        if is_torch_tensor(t):
            t = t.float()
        return self.initial_p * self.decay_rate ** (t / self.schedule_timesteps)

    @override(Schedule)
    def _tf_value_op(self, t: TensorType) -> TensorType:
        import tensorflow as tf

        t = tf.cast(t, tf.float32)
        return self.initial_p * self.decay_rate ** (t / self.schedule_timesteps)
