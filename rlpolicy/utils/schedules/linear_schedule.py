"""``LinearSchedule``: linear interpolation from ``initial_p`` to ``final_p``."""

from __future__ import annotations

from rlpolicy.utils.schedules.polynomial_schedule import PolynomialSchedule


class LinearSchedule(PolynomialSchedule):
    """A ``PolynomialSchedule`` with ``power=1.0``.

    Takes the keyword arguments of :class:`PolynomialSchedule` except ``power``.
    """

    def __init__(self, **kwargs):
        """Initializes a LinearSchedule (keyword arguments of PolynomialSchedule)."""
        super().__init__(power=1.0, **kwargs)
