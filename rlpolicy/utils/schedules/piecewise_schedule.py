"""``PiecewiseSchedule``: interpolation between ``(t, value)`` endpoints."""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from rlpolicy.utils.annotations import override
from rlpolicy.utils.schedules.schedule import Schedule
from rlpolicy.utils.typing import TensorType


def _linear_interpolation(left: TensorType, right: TensorType, alpha: TensorType) -> TensorType:
    return left + alpha * (right - left)


class PiecewiseSchedule(Schedule):
    """Interpolates between consecutive ``(t, value)`` endpoints.

    Outside ``[endpoints[0][0], endpoints[-1][0])`` the value is ``outside_value``.
    """

    def __init__(
        self,
        endpoints: List[Tuple[int, float]],
        framework: Optional[str] = None,
        interpolation: Callable[[TensorType, TensorType, TensorType], TensorType] = _linear_interpolation,
        outside_value: Optional[float] = None,
    ):
        """Initializes a PiecewiseSchedule.

        Args:
            endpoints: ``[(t, value), ...]`` sorted by ``t``.
            framework: The framework descriptor string, e.g. ``"tf"``, ``"torch"`` or None.
            interpolation: ``fn(left, right, alpha)`` with ``alpha`` in ``[0, 1)``
                the fraction of the way from the left to the right endpoint.
            outside_value: Value for ``t`` outside all pieces; if None, such a
                ``t`` raises a ValueError.

        Raises:
            ValueError: If the endpoints are not sorted by ``t`` or empty.
        """
        super().__init__(framework=framework)
        if not endpoints:
            raise ValueError("PiecewiseSchedule: endpoints must be a non-empty list of (t, value)")
        idxes = [e[0] for e in endpoints]
        if idxes != sorted(idxes):
            raise ValueError(f"PiecewiseSchedule: endpoints must be sorted by t, got t's {idxes}")
        self.interpolation = interpolation
        self.outside_value = outside_value
        self.endpoints = [(int(e[0]), float(e[1])) for e in endpoints]

    def _pieces(self):
        return zip(self.endpoints[:-1], self.endpoints[1:])

    @override(Schedule)
    def _value(self, t: TensorType) -> TensorType:
        for (l_t, left), (r_t, right) in self._pieces():
            if l_t <= t < r_t:
                alpha = float(t - l_t) / (r_t - l_t)
                return self.interpolation(left, right, alpha)
        if self.outside_value is None:
            raise ValueError(
                f"PiecewiseSchedule: t={t} lies outside the endpoints {self.endpoints} "
                f"and no outside_value was given"
            )
        return self.outside_value

    @override(Schedule)
    def _tf_value_op(self, t: TensorType) -> TensorType:
        import tensorflow as tf

        if self.outside_value is None:
            raise ValueError("PiecewiseSchedule: the tf version needs an outside_value")
        t = tf.cast(t, tf.float32)
        result = tf.constant(float(self.outside_value), tf.float32)
        # Walk the pieces backwards so that the first matching piece wins.
        for (l_t, left), (r_t, right) in reversed(list(self._pieces())):
            alpha = (t - float(l_t)) / float(r_t - l_t)
            inside = tf.logical_and(t >= float(l_t), t < float(r_t))
            piece = tf.cast(self.interpolation(left, right, alpha), tf.float32)
            result = tf.where(inside, piece, result)
        return result
