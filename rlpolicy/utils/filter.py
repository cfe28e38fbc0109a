"""Observation filters (RLlib 1.11's ``ray.rllib.utils.filter``).

A filter maps each observation the sampler sees to the one the policy gets,
possibly learning from it on the way. :class:`MeanStdFilter` keeps a running
mean and variance (Welford's online update; two statistics merge with Chan's
parallel formula) and returns ``clip((x - mean) / (std + 1e-6))``.

In distributed sampling every worker filters with its own statistics and
also records what it saw since the last sync in ``buffer``. A driver gathers
those buffers (``apply_changes``), merges them into its own statistics and
sends the result back (``sync``); see
:class:`rlpolicy.utils.filter_manager.FilterManager`.

Shapes: a filter for one array takes its shape (a tuple, or the int array
``np.array(space.shape)`` RLlib's worker passes). For nested observations
the shape is a dict/tuple of such shapes, with ``None`` for parts that are
not normalized (``Discrete`` / ``MultiDiscrete``); ``None`` alone means
nothing is normalized.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, TypeVar, Union

import numpy as np

from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.deprecation import deprecation_warning
from rlpolicy.utils.numpy import SMALL_NUMBER
from rlpolicy.utils.typing import TensorStructType

ShapeSpec = Any  # tuple of ints, int ndarray, None, or a dict/tuple/list of those


@DeveloperAPI
class Filter:
    """Processes input, possibly statefully (base class of all filters)."""

    #: Whether one instance may be called from several threads at once.
    is_concurrent = False

    def __call__(self, x: TensorStructType, update: bool = True) -> TensorStructType:
        """Returns the filtered ``x``; ``update=False`` leaves the state alone."""
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")

    def apply_changes(self, other: Any, *args, **kwargs) -> None:
        """Updates this filter with the changes ``other`` recorded (its buffer)."""
        raise NotImplementedError(f"{type(self).__name__} must implement apply_changes")

    def copy(self) -> "Filter":
        """A new filter with the same state."""
        raise NotImplementedError(f"{type(self).__name__} must implement copy")

    def sync(self, other: Any) -> None:
        """Copies all of ``other``'s state into this filter."""
        raise NotImplementedError(f"{type(self).__name__} must implement sync")

    def reset_buffer(self) -> None:
        """Forgets the changes recorded since the last reset."""
        raise NotImplementedError(f"{type(self).__name__} must implement reset_buffer")

    def as_serializable(self) -> "Filter":
        """A copy that can be pickled and sent to another process."""
        raise NotImplementedError(f"{type(self).__name__} must implement as_serializable")

    def clear_buffer(self) -> None:
        """Deprecated name of :meth:`reset_buffer`."""
        deprecation_warning(old="Filter.clear_buffer()", new="Filter.reset_buffer()", error=False)
        self.reset_buffer()


@DeveloperAPI
class NoFilter(Filter):
    """Passes observations through (as arrays); has no state."""

    is_concurrent = True

    def __call__(self, x: TensorStructType, update: bool = True) -> TensorStructType:
        """``x`` itself if it is an array, dict or tuple; else ``np.asarray(x)``."""
        if isinstance(x, (np.ndarray, dict, tuple)):
            return x
        try:
            return np.asarray(x)
        except Exception as err:
            raise ValueError(
                f"NoFilter: cannot convert observation of type {type(x).__name__} to an array: {err}"
            ) from err

    def apply_changes(self, other: "NoFilter", *args, **kwargs) -> None:
        """Nothing to apply."""

    def copy(self) -> "NoFilter":
        """``self`` (a NoFilter has no state)."""
        return self

    def sync(self, other: "NoFilter") -> None:
        """Nothing to sync."""

    def reset_buffer(self) -> None:
        """No buffer to reset."""

    def as_serializable(self) -> "NoFilter":
        """``self``."""
        return self

    def __repr__(self) -> str:
        return "NoFilter()"


@DeveloperAPI
class RunningStat:
    """Count, mean and sum of squared deviations of a stream of same-shaped arrays.

    ``var`` is the sample variance ``S / (n - 1)``; with fewer than two
    values it is ``mean ** 2`` (RLlib 1.11's convention).
    """

    def __init__(self, shape: Optional[Any] = None):
        """Initializes empty statistics for arrays of ``shape`` (None or ``()``: scalars)."""
        if shape is None:
            shape = ()
        elif isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        else:
            shape = tuple(int(d) for d in np.asarray(shape).reshape(-1))
        self._n = 0
        self._M = np.zeros(shape)
        self._S = np.zeros(shape)

    def copy(self) -> "RunningStat":
        """An independent copy."""
        other = RunningStat(self._M.shape)
        other._n, other._M, other._S = self._n, np.copy(self._M), np.copy(self._S)
        return other

    def push(self, x: Any) -> None:
        """Adds one value (Welford's update).

        Raises:
            ValueError: If ``x`` does not have the statistics' shape.
        """
        x = np.asarray(x)
        if x.shape != self._M.shape:
            raise ValueError(
                f"RunningStat.push: value of shape {x.shape} does not fit statistics of shape {self._M.shape}"
            )
        self._n += 1
        if self._n == 1:
            self._M[...] = x
            return
        delta = x - self._M
        self._M[...] += delta / self._n
        self._S[...] += delta * delta * (self._n - 1) / self._n

    def update(self, other: "RunningStat") -> None:
        """Merges ``other``'s values into these statistics (Chan et al.'s formula).

        Raises:
            ValueError: If the shapes differ.
        """
        if other._M.shape != self._M.shape:
            raise ValueError(
                f"RunningStat.update: statistics of shape {other._M.shape} cannot be "
                f"merged into statistics of shape {self._M.shape}"
            )
        n1, n2 = self._n, other._n
        n = n1 + n2
        if n == 0:
            return
        delta = other._M - self._M
        self._M = (n1 * self._M + n2 * other._M) / n
        self._S = self._S + other._S + delta * delta * n1 * n2 / n
        self._n = n

    @property
    def n(self) -> int:
        """Number of values seen."""
        return self._n

    @property
    def mean(self) -> np.ndarray:
        """The running mean."""
        return self._M

    @property
    def var(self) -> np.ndarray:
        """The sample variance (``mean ** 2`` while ``n < 2``)."""
        return self._S / (self._n - 1) if self._n > 1 else np.square(self._M)

    @property
    def std(self) -> np.ndarray:
        """The square root of :attr:`var`."""
        return np.sqrt(self.var)

    @property
    def shape(self) -> tuple:
        """Shape of the values."""
        return self._M.shape

    def __repr__(self) -> str:
        return f"(n={self.n}, mean_mean={np.mean(self.mean)}, mean_std={np.mean(self.std)})"


def _is_array_shape(shape: Any) -> bool:
    """Whether ``shape`` describes one array (a tuple of ints or a 1-D int array)."""
    if isinstance(shape, np.ndarray):
        return shape.ndim <= 1 and (shape.size == 0 or np.issubdtype(shape.dtype, np.integer))
    if isinstance(shape, (tuple, list)):
        return all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in shape)
    return isinstance(shape, (int, np.integer)) and not isinstance(shape, bool)


def _map_shape(fn: Callable[..., Any], shape: ShapeSpec, *others: Any, path: str = "") -> Any:
    """Applies ``fn(leaf_shape, *other_leaves, path)`` over a (nested) shape spec."""
    if shape is None or _is_array_shape(shape):
        return fn(shape, *others, path)
    if isinstance(shape, dict):
        for o in others:
            if not isinstance(o, dict) or set(o) != set(shape):
                raise ValueError(
                    f"MeanStdFilter: observation{path or ''} should be a dict with keys "
                    f"{sorted(shape)}, got {_describe(o)}"
                )
        return {k: _map_shape(fn, shape[k], *(o[k] for o in others), path=f"{path}[{k!r}]") for k in shape}
    if isinstance(shape, (tuple, list)):
        for o in others:
            if not isinstance(o, (tuple, list)) or len(o) != len(shape):
                raise ValueError(
                    f"MeanStdFilter: observation{path or ''} should be a tuple of "
                    f"{len(shape)} parts, got {_describe(o)}"
                )
        return tuple(
            _map_shape(fn, s, *(o[i] for o in others), path=f"{path}[{i}]") for i, s in enumerate(shape)
        )
    raise ValueError(
        f"MeanStdFilter: bad shape {shape!r}{' at ' + path if path else ''}; give a tuple "
        "of ints, an int array, None, or a dict/tuple of those"
    )


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"{type(value).__name__} of shape {np.shape(value)}"


def _new_stats(shape: ShapeSpec) -> Any:
    return _map_shape(lambda s, _p: None if s is None else RunningStat(s), shape)


def _copy_stats(shape: ShapeSpec, stats: Any) -> Any:
    return _map_shape(lambda s, rs, _p: None if s is None else rs.copy(), shape, stats)


_MeanStd = TypeVar("_MeanStd", bound="MeanStdFilter")


@DeveloperAPI
class MeanStdFilter(Filter):
    """Normalizes observations by the running mean and std of all observations seen.

    Example:
        >>> f = MeanStdFilter((2,), clip=None)
        >>> f(np.array([1.0, 10.0])); f(np.array([3.0, 30.0]))
        >>> f.rs.mean          # array([ 2., 20.])
        >>> f.buffer.n         # 2: seen since the last reset_buffer()
    """

    is_concurrent = False

    def __init__(
        self, shape: ShapeSpec, demean: bool = True, destd: bool = True, clip: Optional[float] = 10.0
    ):
        """Initializes a MeanStdFilter.

        Args:
            shape: Shape of the observations (see the module docstring for nested ones).
            demean: Subtract the running mean.
            destd: Divide by the running std (plus 1e-6).
            clip: Clip the result to ``[-clip, clip]``; None or 0: no clipping.
        """
        self.shape = shape
        self.no_preprocessor = not _is_array_shape(shape)  # nested (or None): RLlib's flag name
        if not self.no_preprocessor:
            self.shape = np.array(shape, dtype=np.int64)
        self.demean, self.destd, self.clip = demean, destd, clip
        self.rs = _new_stats(self.shape)
        self.buffer: Any = None
        self.reset_buffer()

    def reset_buffer(self) -> None:
        """Starts a new buffer (the changes recorded since now)."""
        self.buffer = _new_stats(self.shape)

    def apply_changes(self, other: "MeanStdFilter", with_buffer: bool = False, *args, **kwargs) -> None:
        """Merges ``other.buffer`` (what ``other`` saw since its last reset) into ``self.rs``.

        Args:
            other: The filter whose recorded changes to merge.
            with_buffer: Also replace this filter's buffer by a copy of ``other``'s.

        Raises:
            ValueError: If ``other``'s shape does not match (nothing is changed then).
        """
        self._check_compatible(other, "apply_changes")
        _map_shape(
            lambda s, rs, b, _p: None if s is None else rs.update(b), self.shape, self.rs, other.buffer
        )
        if with_buffer:
            self.buffer = _copy_stats(self.shape, other.buffer)

    def copy(self: _MeanStd) -> _MeanStd:
        """An independent filter of the same class with the same state."""
        other = type(self)(self.shape)
        other.sync(self)
        return other

    def as_serializable(self) -> "MeanStdFilter":
        """A copy (plain MeanStdFilters pickle as they are)."""
        return self.copy()

    def sync(self, other: "MeanStdFilter") -> None:
        """Takes over ``other``'s settings, statistics and buffer (copies).

        Raises:
            ValueError: If ``other``'s shape does not match (nothing is changed then).
        """
        self._check_compatible(other, "sync")
        self.demean, self.destd, self.clip = other.demean, other.destd, other.clip
        self.rs = _copy_stats(self.shape, other.rs)
        self.buffer = _copy_stats(self.shape, other.buffer)

    def __call__(self, x: TensorStructType, update: bool = True) -> TensorStructType:
        """Filters one observation, or a batch of them (one more leading axis).

        Args:
            x: The observation(s); nested like ``shape`` for nested filters.
            update: Add ``x`` to the statistics (and the buffer) first.

        Returns:
            ``x`` normalized (same dtype); parts whose shape is None unchanged.

        Raises:
            ValueError: If ``x`` does not fit the filter's shape (nothing is recorded then).
        """
        if not self.no_preprocessor:
            x = np.asarray(x)
            self._check_value(x, self.rs.shape, "")
            return self._filter_leaf(x, self.rs, self.buffer, update)
        _map_shape(
            lambda s, v, _rs, p: s is None or self._check_value(np.asarray(v), _rs.shape, p),
            self.shape,
            x,
            self.rs,
        )
        return _map_shape(
            lambda s, v, rs, b, _p: v if s is None else self._filter_leaf(np.asarray(v), rs, b, update),
            self.shape,
            x,
            self.rs,
            self.buffer,
        )

    def _filter_leaf(self, x: np.ndarray, rs: RunningStat, buffer: RunningStat, update: bool) -> np.ndarray:
        orig_dtype = x.dtype
        if update:
            rows = x if x.ndim == len(rs.shape) + 1 else x[None]
            for row in rows:
                rs.push(row)
                buffer.push(row)
        if self.demean:
            x = x - rs.mean
        if self.destd:
            x = x / (rs.std + SMALL_NUMBER)
        if self.clip:
            x = np.clip(x, -self.clip, self.clip)
        return np.asarray(x).astype(orig_dtype)

    @staticmethod
    def _check_value(x: np.ndarray, shape: tuple, path: str) -> bool:
        if x.shape != shape and x.shape[1:] != shape:
            raise ValueError(
                f"MeanStdFilter: observation{path} has shape {x.shape}; expected {shape} "
                f"(one observation) or (B, {', '.join(map(str, shape))}) (a batch)"
            )
        return True

    def _check_compatible(self, other: Any, what: str) -> None:
        if not isinstance(other, MeanStdFilter):
            raise TypeError(f"MeanStdFilter.{what}: expected a MeanStdFilter, got {type(other).__name__}")
        mine = _map_shape(lambda s, _p: None if s is None else tuple(int(d) for d in s), self.shape)
        try:
            theirs = _map_shape(lambda s, _p: None if s is None else tuple(int(d) for d in s), other.shape)
        except ValueError:
            theirs = other.shape
        if mine != theirs:
            raise ValueError(f"MeanStdFilter.{what}: other filter has shape {theirs}, this one {mine}")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.shape}, {self.demean}, {self.destd}, {self.clip}, "
            f"{self.rs}, {self.buffer})"
        )


@DeveloperAPI
class ConcurrentMeanStdFilter(MeanStdFilter):
    """A MeanStdFilter whose methods hold one lock (for samplers running in a thread)."""

    is_concurrent = True

    def __init__(self, *args, **kwargs):
        self._lock = threading.RLock()
        super().__init__(*args, **kwargs)

    def __call__(self, x: TensorStructType, update: bool = True) -> TensorStructType:
        with self._lock:
            return super().__call__(x, update)

    def apply_changes(self, other: MeanStdFilter, with_buffer: bool = False, *args, **kwargs) -> None:
        with self._lock:
            super().apply_changes(other, with_buffer)

    def sync(self, other: MeanStdFilter) -> None:
        with self._lock:
            super().sync(other)

    def reset_buffer(self) -> None:
        with self._lock:
            super().reset_buffer()

    def copy(self) -> "ConcurrentMeanStdFilter":
        """An independent ConcurrentMeanStdFilter with the same state."""
        with self._lock:
            return super().copy()

    def as_serializable(self) -> MeanStdFilter:
        """A plain (lock-free) MeanStdFilter with the same state."""
        with self._lock:
            other = MeanStdFilter(self.shape)
            other.sync(self)
            return other

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()


def get_filter(filter_config: Union[str, Callable[[ShapeSpec], Filter]], shape: ShapeSpec) -> Filter:
    """The filter named by ``filter_config`` (RLlib's ``observation_filter`` setting).

    Args:
        filter_config: ``"NoFilter"``, ``"MeanStdFilter"``,
            ``"ConcurrentMeanStdFilter"`` (both without clipping), or a callable
            ``shape -> Filter``.
        shape: The observation shape (see the module docstring).

    Raises:
        ValueError: For an unknown name.
    """
    if filter_config == "MeanStdFilter":
        return MeanStdFilter(shape, clip=None)
    if filter_config == "ConcurrentMeanStdFilter":
        return ConcurrentMeanStdFilter(shape, clip=None)
    if filter_config == "NoFilter":
        return NoFilter()
    if callable(filter_config):
        return filter_config(shape)
    raise ValueError(
        f"Unknown observation_filter: {filter_config!r}; use 'NoFilter', 'MeanStdFilter', "
        "'ConcurrentMeanStdFilter' or a callable shape -> Filter"
    )


__all__ = ["Filter", "NoFilter", "RunningStat", "MeanStdFilter", "ConcurrentMeanStdFilter", "get_filter"]
