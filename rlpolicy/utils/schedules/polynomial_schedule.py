"""``PolynomialSchedule``: polynomial decay from ``initial_p`` to ``final_p``."""

from __future__ import annotations

from typing import Optional

from rlpolicy.utils.annotations import override
from rlpolicy.utils.schedules.schedule import Schedule, is_torch_tensor
from rlpolicy.utils.typing import TensorType


class PolynomialSchedule(Schedule):
    """``final_p + (initial_p - final_p) * (1 - t / schedule_timesteps) ** power``.

    After ``schedule_timesteps`` the value stays at ``final_p``.
    """

    def __init__(
        self,
        schedule_timesteps: int,
        final_p: float,
        framework: Optional[str] = None,
        initial_p: float = 1.0,
        power: float = 2.0,
    ):
        """Initializes a PolynomialSchedule.

        Args:
            schedule_timesteps: Number of timesteps over which to decay (> 0).
            final_p: Value reached at (and kept after) ``schedule_timesteps``.
            framework: The framework descriptor string, e.g. ``"tf"``, ``"torch"`` or None.
            initial_p: Value at ``t=0``.
            power: Exponent of the polynomial.

        Raises:
            ValueError: If ``schedule_timesteps`` is not > 0.
        """
        super().__init__(framework=framework)
        if not schedule_timesteps > 0:
            raise ValueError(
                f"{type(self).__name__}: schedule_timesteps must be > 0, got {schedule_timesteps!r}"
            )
        self.schedule_timesteps = schedule_timesteps
        self.final_p = final_p
        self.initial_p = initial_p
        self.power = power

    def _frac_left(self, t):
        return 1.0 - (t / self.schedule_timesteps)

    @override(Schedule)
    def _value(self, t: TensorType) -> TensorType:
        if is_torch_tensor(t):
            t = t.float().clamp(max=float(self.schedule_timesteps))
        else:
            t = min(t, self.schedule_timesteps)
        return self.final_p + (self.initial_p - self.final_p) * self._frac_left(t) ** self.power

    @override(Schedule)
    def _tf_value_op(self, t: TensorType) -> TensorType:
        import tensorflow as tf

        t = tf.math.minimum(tf.cast(t, tf.float32), float(self.schedule_timesteps))
        return self.final_p + (self.initial_p - self.final_p) * self._frac_left(t) ** self.power
