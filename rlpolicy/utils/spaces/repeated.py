"""The variable-length list space (RLlib 1.11's ``ray.rllib.utils.spaces.repeated``)."""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Sequence

import gymnasium as gym
import numpy as np

from rlpolicy.utils.annotations import PublicAPI


@PublicAPI
class Repeated(gym.Space):
    """A list of 0 to ``max_len`` values of one child space.

    Example::

        space = Repeated(Box(-1.0, 1.0, (4,)), max_len=10)
        space.sample()   # a list of 1..10 arrays of shape (4,)

    Policies see such observations flattened by the
    ``RepeatedValuesPreprocessor`` (``[len, item_0, ..., item_{max_len-1}]``,
    zero-padded) and models get them back as
    :class:`rlpolicy.models.repeated_values.RepeatedValues`.

    Differences from RLlib 1.11 (see docs/porting.md): two Repeated spaces with
    equal child spaces and ``max_len`` compare equal (1.11 compared by
    identity), and ``seed`` also seeds the child space.
    """

    def __init__(self, child_space: gym.Space, max_len: int):
        """Creates the space.

        Args:
            child_space: The space of every list item.
            max_len: The largest number of items a list may hold (>= 1).

        Raises:
            TypeError: ``child_space`` is not a gymnasium Space.
            ValueError: ``max_len`` is not a positive integer.
        """
        if not isinstance(child_space, gym.Space):
            raise TypeError(
                f"Repeated: child_space must be a gymnasium Space, got "
                f"{type(child_space).__name__}: {child_space!r}"
            )
        if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
            raise ValueError(f"Repeated: max_len must be a positive int, got {max_len!r}")
        super().__init__()
        self.child_space = child_space
        self.max_len = int(max_len)

    @property
    def is_np_flattenable(self) -> bool:
        """False: lists of varying length have no fixed flat size in gymnasium's sense."""
        return False

    def seed(self, seed: Optional[int] = None) -> List[Any]:
        """Seeds this space's RNG (the list lengths) and the child space's.

        Returns:
            ``[own seed, child seed(s)]``.
        """
        own = super().seed(seed)
        child_seed = None if seed is None else int(self._np_random.integers(2**31 - 1))
        return [own, self.child_space.seed(child_seed)]

    def sample(self, mask: Any = None, probability: Any = None) -> List[Any]:
        """A list of 1 to ``max_len`` (uniformly many) child samples, as RLlib 1.11 draws."""
        if mask is not None or probability is not None:
            raise ValueError("Repeated.sample: masks/probabilities are not supported")
        n = int(self.np_random.integers(1, self.max_len + 1))
        return [self.child_space.sample() for _ in range(n)]

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a list (or array) of at most ``max_len`` child-space values."""
        if not (isinstance(x, list) or (isinstance(x, np.ndarray) and x.ndim > 0)):
            return False
        return len(x) <= self.max_len and all(self.child_space.contains(c) for c in x)

    def to_jsonable(self, sample_n: Iterable[Any]) -> list:
        """Samples as JSON-able lists of the child space's JSON-able items."""
        return [self.child_space.to_jsonable(list(sample)) for sample in sample_n]

    def from_jsonable(self, sample_n: Sequence[Any]) -> List[list]:
        """Inverse of :meth:`to_jsonable`."""
        return [list(self.child_space.from_jsonable(sample)) for sample in sample_n]

    def __repr__(self) -> str:
        return f"Repeated({self.child_space}, {self.max_len})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, Repeated)
            and self.max_len == other.max_len
            and self.child_space == other.child_space
        )

    def __hash__(self) -> int:
        # Child spaces (e.g. Box) are often unhashable: hash what equality needs most.
        return hash(("Repeated", type(self.child_space).__name__, self.max_len))


__all__ = ["Repeated"]
