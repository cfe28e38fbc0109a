"""The probability-simplex space (RLlib 1.11's ``ray.rllib.utils.spaces.simplex``)."""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np

from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.spaces.space_utils import shape_of


@PublicAPI
class Simplex(gym.Space):
    """Points of ``shape[:-1]`` independent probability simplices of dimension ``shape[-1]``.

    A point has all coordinates in [0, 1], and each vector along the last axis
    sums to 1. ``sample()`` draws from a Dirichlet distribution with the given
    ``concentration`` (all ones, i.e. uniform on the simplex, by default).

    Example::

        space = Simplex((3, 4))   # three independent 4-dimensional simplices
        x = space.sample()        # shape (3, 4), rows sum to 1

    Differences from RLlib 1.11 (see docs/porting.md): a given
    ``concentration`` is kept (1.11 dropped it), sampling uses the space's
    own seeded RNG (``space.seed(n)``), and ``contains`` also rejects negative
    coordinates.
    """

    def __init__(
        self,
        shape: Union[Tuple[int, ...], List[int]],
        concentration: Optional[Sequence[float]] = None,
        dtype: Any = np.float32,
        seed: Optional[int] = None,
    ):
        """Creates a Simplex space.

        Args:
            shape: Tuple or list of positive ints; the last entry is the simplex dimension.
            concentration: Dirichlet concentration, one positive value per
                coordinate of the last axis (default: all ones).
            dtype: The dtype of samples.
            seed: Optional seed of the sampling RNG.

        Raises:
            ValueError: For a bad shape or concentration.
        """
        if (
            not isinstance(shape, (tuple, list))
            or not shape
            or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape)
        ):
            raise ValueError(f"Simplex: shape must be a non-empty tuple/list of positive ints, got {shape!r}")
        shape = tuple(int(d) for d in shape)
        super().__init__(shape, dtype, seed)
        self.dim = shape[-1]
        if concentration is None:
            self.concentration = np.ones(self.dim)
        else:
            conc = np.asarray(concentration, dtype=np.float64)
            if conc.shape != (self.dim,) or np.any(conc <= 0):
                raise ValueError(
                    f"Simplex: concentration must hold {self.dim} positive values "
                    f"(one per coordinate of the last axis), got {concentration!r}"
                )
            self.concentration = conc

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        """A random point: Dirichlet(concentration) draws of shape ``shape``."""
        if mask is not None or probability is not None:
            raise ValueError("Simplex.sample: masks/probabilities are not supported")
        draws = self.np_random.dirichlet(self.concentration, size=shape_of(self)[:-1])
        return draws.astype(self.dtype)

    def contains(self, x: Any) -> bool:
        """Whether ``x`` has this shape, coordinates >= 0 and last-axis sums of 1 (to 1e-5)."""
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        if x.shape != self.shape:
            return False
        return bool(np.all(x >= -1e-8) and np.allclose(np.sum(x, axis=-1), 1.0, rtol=0.0, atol=1e-5))

    def to_jsonable(self, sample_n: Iterable[Any]) -> list:
        """Samples as nested lists."""
        return np.asarray(sample_n).tolist()

    def from_jsonable(self, sample_n: Sequence[Any]) -> List[np.ndarray]:
        """Nested lists back to arrays."""
        return [np.asarray(sample, dtype=self.dtype) for sample in sample_n]

    def __repr__(self) -> str:
        return f"Simplex({self.shape}; {self.concentration.tolist()})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, Simplex)
            and self.shape == other.shape
            and np.allclose(self.concentration, other.concentration)
        )

    def __hash__(self) -> int:
        return hash(("Simplex", self.shape, tuple(self.concentration.tolist())))


__all__ = ["Simplex"]
