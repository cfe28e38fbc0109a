"""The framework-neutral rules behind the torch and TF policy mixins.

``rlpolicy.policy.torch_mixins`` and ``rlpolicy.policy.tf_mixins`` differ only
in where a value lives (a python float, a tf variable); which value it takes
is decided here, once.
"""

from __future__ import annotations

from typing import List, Optional, Union

from rlpolicy.utils.schedules import PiecewiseSchedule

Endpoints = List[List[Union[int, float]]]


def make_lr_schedule(lr_schedule: Optional[Endpoints]) -> Optional[PiecewiseSchedule]:
    """The piecewise learning-rate schedule of ``[[timestep, lr], ...]`` endpoints
    (the last value is kept after the last endpoint); None without endpoints."""
    if lr_schedule is None:
        return None
    return PiecewiseSchedule(
        lr_schedule,  # type: ignore[arg-type]
        outside_value=lr_schedule[-1][-1],
        framework=None,
    )


def make_entropy_coeff_schedule(
    entropy_coeff: float, entropy_coeff_schedule: Optional[Union[int, Endpoints]]
) -> Optional[PiecewiseSchedule]:
    """The entropy-coefficient schedule (RLlib 1.11).

    ``entropy_coeff_schedule`` is ``[[timestep, value], ...]`` endpoints, or
    (older form) a single timestep by which the coefficient has decayed
    linearly from ``entropy_coeff`` to 0. None: no schedule.
    """
    if entropy_coeff_schedule is None:
        return None
    if isinstance(entropy_coeff_schedule, list):
        endpoints = entropy_coeff_schedule
    else:
        endpoints = [[0, entropy_coeff], [entropy_coeff_schedule, 0.0]]
    return PiecewiseSchedule(
        endpoints,  # type: ignore[arg-type]
        outside_value=endpoints[-1][-1],
        framework=None,
    )


def adapted_kl_coeff(kl_coeff: float, sampled_kl: float, kl_target: float) -> float:
    """PPO's KL-coefficient update: 1.5x if the KL exceeds twice the target,
    0.5x if it is below half the target, else unchanged."""
    if sampled_kl > 2.0 * kl_target:
        return kl_coeff * 1.5
    if sampled_kl < 0.5 * kl_target:
        return kl_coeff * 0.5
    return kl_coeff


__all__ = ["adapted_kl_coeff", "make_entropy_coeff_schedule", "make_lr_schedule"]
