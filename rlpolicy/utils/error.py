"""Errors shared across rlpolicy (RLlib 1.11's ``ray.rllib.utils.error``)."""

from __future__ import annotations

from rlpolicy.utils.annotations import PublicAPI


@PublicAPI
class UnsupportedSpaceException(ValueError, NotImplementedError):
    """An observation or action space that a model, distribution or algorithm cannot handle.

    RLlib 1.11 derives it from ``Exception`` only; rlpolicy also derives it from
    ``ValueError`` and ``NotImplementedError`` so that generic handlers catch it.
    """


@PublicAPI
class EnvError(Exception):
    """An environment that fails validation (e.g. returns observations outside its space)."""


@PublicAPI
class NonFiniteSampleError(EnvError, ValueError):
    """An env returned a NaN or infinite observation or reward while sampling
    (raised only with ``config["_check_finite_samples"]``; an rlpolicy addition)."""


__all__ = ["EnvError", "NonFiniteSampleError", "UnsupportedSpaceException"]
