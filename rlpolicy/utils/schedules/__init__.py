"""Time-dependent value schedules (RLlib 1.11's ``ray.rllib.utils.schedules``)."""

from rlpolicy.utils.schedules.constant_schedule import ConstantSchedule
from rlpolicy.utils.schedules.exponential_schedule import ExponentialSchedule
from rlpolicy.utils.schedules.linear_schedule import LinearSchedule
from rlpolicy.utils.schedules.piecewise_schedule import PiecewiseSchedule
from rlpolicy.utils.schedules.polynomial_schedule import PolynomialSchedule
from rlpolicy.utils.schedules.schedule import Schedule

__all__ = [
    "ConstantSchedule",
    "ExponentialSchedule",
    "LinearSchedule",
    "Schedule",
    "PiecewiseSchedule",
    "PolynomialSchedule",
]
