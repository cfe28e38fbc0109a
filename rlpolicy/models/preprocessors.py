"""Observation preprocessors (RLlib's ``ray.rllib.models.preprocessors``).

A preprocessor turns one environment observation into the flat float array
that travels through sample batches: one-hot for Discrete/MultiDiscrete, a
concatenation of the preprocessed parts for Dict/Tuple, ``[length, item_0,
..., item_{max_len-1}]`` (zero-padded) for Repeated, unchanged for Box.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy.utils.annotations import DeveloperAPI, PublicAPI, override
from rlpolicy.utils.spaces.repeated import Repeated
from rlpolicy.utils.typing import TensorType

ATARI_OBS_SHAPE = (210, 160, 3)
ATARI_RAM_OBS_SHAPE = (128,)

# Observations are validated on every OBS_VALIDATION_INTERVAL-th call only.
OBS_VALIDATION_INTERVAL = 100

logger = logging.getLogger(__name__)


@PublicAPI
class Preprocessor:
    """Base class of observation preprocessors.

    Attributes:
        shape: Shape of the preprocessed observation.
    """

    @PublicAPI
    def __init__(self, obs_space: gym.Space, options: Optional[dict] = None):
        """Builds the preprocessor for ``obs_space``.

        Args:
            obs_space: The raw observation space.
            options: The model config dict (defaults to ``MODEL_DEFAULTS``).
        """
        self._obs_space: Any = obs_space  # (subclasses read their space's own fields)
        if not options:
            from rlpolicy._core.defaults import MODEL_DEFAULTS

            options = dict(MODEL_DEFAULTS)
        self._options = options
        self.shape = tuple(self._init_shape(obs_space, self._options))
        self._size = int(np.prod(self.shape))
        self._i = 0

    def _init_shape(self, obs_space: Any, options: dict) -> Tuple[int, ...]:
        """Returns the shape of the preprocessed observation."""
        raise NotImplementedError

    @PublicAPI
    def transform(self, observation: TensorType) -> np.ndarray:
        """Returns the preprocessed observation."""
        raise NotImplementedError

    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        """Writes the flat preprocessed observation into ``array[offset:offset+size]``."""
        array[offset : offset + self._size] = np.asarray(self.transform(observation)).ravel()

    @DeveloperAPI
    def transform_batch(self, observations: Any) -> np.ndarray:
        """Preprocesses a batch of observations into a float32 array [B, size].

        Args:
            observations: The batch in the space's structure with a leading
                batch axis on every leaf (a dict of [B, ...] arrays for a
                Dict space, a tuple of them for a Tuple space, an array
                [B, ...] otherwise).

        Returns:
            Row ``i`` equals ``transform(observation i)``, flattened.

        Raises:
            ValueError: A leaf has the wrong shape, a Dict key is missing,
                or a discrete value lies outside its space; the message
                names the path inside the observation.
        """
        n = batch_size_of(observations, self._obs_space)
        out = np.zeros((n, self._size), np.float32)
        self.write_batch(observations, out, 0, "observation")
        return out

    def write_batch(self, observations: Any, out: np.ndarray, offset: int, path: str) -> None:
        """Writes a batch into ``out[:, offset:offset+size]`` (row by row here;
        the built-in preprocessors override this with vectorised versions)."""
        for i in range(len(out)):
            row = _row_of(observations, i)
            out[i, offset : offset + self._size] = np.asarray(self.transform(row)).ravel()

    @DeveloperAPI
    def check_shape(self, observation: Any) -> None:
        """Validates ``observation`` against the space (every 100th call).

        Raises:
            ValueError: the observation has the wrong shape or lies outside
                the observation space.
        """
        if self._i % OBS_VALIDATION_INTERVAL == 0:
            _validate_observation(observation, self._obs_space)
        self._i += 1

    @property
    @PublicAPI
    def size(self) -> int:
        """Number of elements of the preprocessed observation."""
        return self._size

    @property
    @PublicAPI
    def observation_space(self) -> gym.Space:
        """The space of preprocessed observations (a float Box).

        For preprocessors that flatten a structure, the Box carries the raw
        space as ``original_space`` so models can restore the structure.
        """
        obs_space: Any = gym.spaces.Box(-1.0, 1.0, self.shape, dtype=np.float32)
        if isinstance(
            self,
            (
                DictFlatteningPreprocessor,
                OneHotPreprocessor,
                TupleFlatteningPreprocessor,
                AtariRamPreprocessor,
                RepeatedValuesPreprocessor,
            ),
        ):
            obs_space.original_space = self._obs_space
        return obs_space


def _validate_observation(observation: Any, space: Any) -> None:
    """Raises a ValueError naming space and observation if it does not fit."""
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        _validate_structure(observation, space)
        return
    if isinstance(space, Repeated):
        _validate_list(observation, space)
        return
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        arr = np.asarray(observation)
        if arr.shape != tuple(space.shape):
            raise ValueError(
                f"observation has shape {arr.shape} but the observation space {space} "
                f"expects shape {tuple(space.shape)}"
            )
        observation = arr.astype(space.dtype, copy=False)
    elif isinstance(space, gym.spaces.Discrete):
        arr = np.asarray(observation)
        if arr.shape != ():
            raise ValueError(
                f"observation has shape {arr.shape} but the observation space "
                f"{space} expects a scalar integer"
            )
        observation = np.int64(arr)
    if not space.contains(observation):
        raise ValueError(f"observation {observation!r} lies outside the observation space {space}")


def _validate_structure(observation: Any, space: Any) -> None:
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(observation, dict) or set(observation) != set(space.spaces):
            got = sorted(observation) if isinstance(observation, dict) else type(observation)
            raise ValueError(
                f"observation keys {got} do not match the Dict observation space keys {sorted(space.spaces)}"
            )
        for k, sub in space.spaces.items():
            _validate_observation(observation[k], sub)
    else:
        if not isinstance(observation, (tuple, list)) or len(observation) != len(space.spaces):
            raise ValueError(
                f"observation {observation!r} does not match the Tuple observation "
                f"space {space} ({len(space.spaces)} items)"
            )
        for o, sub in zip(observation, space.spaces):
            _validate_observation(o, sub)


def _validate_list(observation: Any, space: Repeated) -> None:
    if not _is_list_like(observation):
        raise ValueError(f"observation for {space} must be a list of items, got {_describe(observation)}")
    if len(observation) > space.max_len:
        raise ValueError(
            f"observation holds {len(observation)} items, more than max_len="
            f"{space.max_len} of the observation space {space}"
        )
    for item in observation:
        _validate_observation(item, space.child_space)


@DeveloperAPI
class AtariRamPreprocessor(Preprocessor):
    """Scales 128-byte Atari RAM observations to [-1, 1)."""

    @override(Preprocessor)
    def _init_shape(self, obs_space: Any, options: dict) -> Tuple[int, ...]:
        return (128,)

    @override(Preprocessor)
    def transform(self, observation: TensorType) -> np.ndarray:
        self.check_shape(observation)
        return (np.asarray(observation).astype("float32") - 128) / 128

    @override(Preprocessor)
    def write_batch(self, observations: Any, out: np.ndarray, offset: int, path: str) -> None:
        values = _leaf_batch(observations, self._obs_space, len(out), path)
        out[:, offset : offset + 128] = (values.reshape(len(out), -1).astype(np.float32) - 128) / 128


@DeveloperAPI
class OneHotPreprocessor(Preprocessor):
    """One-hot encodes Discrete (n slots) and MultiDiscrete (sum(nvec) slots) observations.

    Example: Discrete(3) value 1 -> [0, 1, 0]; MultiDiscrete([2, 3]) value
    [1, 2] -> [0, 1, 0, 0, 1].
    """

    @override(Preprocessor)
    def _init_shape(self, obs_space: Any, options: dict) -> Tuple[int, ...]:
        if isinstance(obs_space, gym.spaces.Discrete):
            return (int(obs_space.n),)
        return (int(np.sum(obs_space.nvec)),)

    @override(Preprocessor)
    def transform(self, observation: TensorType) -> np.ndarray:
        self.check_shape(observation)
        arr = np.zeros(self.shape, dtype=np.float32)
        if isinstance(self._obs_space, gym.spaces.Discrete):
            arr[int(observation) - int(getattr(self._obs_space, "start", 0))] = 1.0
        else:
            nvec = np.asarray(self._obs_space.nvec).ravel()
            starts = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            arr[starts + np.asarray(observation, dtype=np.int64).ravel() - _starts(self._obs_space)] = 1.0
        return arr

    @override(Preprocessor)
    def write_batch(self, observations: Any, out: np.ndarray, offset: int, path: str) -> None:
        space = self._obs_space
        values = _leaf_batch(observations, space, len(out), path)
        if not np.all(values == np.round(values)):
            raise ValueError(f"{path}: values of {space} must be integers, got {values!r}")
        raw = values.astype(np.int64).reshape(len(out), -1)
        if isinstance(space, gym.spaces.Discrete):
            sizes, values = np.array([int(space.n)]), raw - int(getattr(space, "start", 0))
        else:
            sizes, values = np.asarray(space.nvec, np.int64).ravel(), raw - _starts(space)
        bad = (values < 0) | (values >= sizes)
        if bad.any():
            row = int(np.nonzero(bad.any(axis=1))[0][0])
            raise ValueError(f"{path}: row {row} holds {raw[row].tolist()}, outside {space}")
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        out[np.arange(len(out))[:, None], offset + starts + values] = 1.0


@DeveloperAPI
class NoPreprocessor(Preprocessor):
    """Passes observations through unchanged (Box spaces)."""

    @override(Preprocessor)
    def _init_shape(self, obs_space: Any, options: dict) -> Tuple[int, ...]:
        return tuple(self._obs_space.shape)

    @override(Preprocessor)
    def transform(self, observation: TensorType) -> np.ndarray:
        self.check_shape(observation)
        return observation

    @override(Preprocessor)
    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        array[offset : offset + self._size] = np.asarray(observation).ravel()

    @override(Preprocessor)
    def write_batch(self, observations: Any, out: np.ndarray, offset: int, path: str) -> None:
        values = _leaf_batch(observations, self._obs_space, len(out), path)
        out[:, offset : offset + self._size] = values.reshape(len(out), -1)

    @property
    @override(Preprocessor)
    def observation_space(self) -> gym.Space:
        return self._obs_space


class _FlatteningPreprocessor(Preprocessor):
    """Shared logic of the Tuple and Dict flattening preprocessors."""

    def _build_children(self, spaces: List[gym.Space]) -> Tuple[int, ...]:
        self.preprocessors = [get_preprocessor(s)(s, self._options) for s in spaces]
        return (sum(p.size for p in self.preprocessors),)

    @override(Preprocessor)
    def transform(self, observation: TensorType) -> np.ndarray:
        self.check_shape(observation)
        array = np.zeros(self.shape, dtype=np.float32)
        self.write(observation, array, 0)
        return array

    def _write_items(self, items: List[Any], array: np.ndarray, offset: int) -> None:
        if len(items) != len(self.preprocessors):
            raise ValueError(
                f"observation has {len(items)} items but the observation space "
                f"{self._obs_space} has {len(self.preprocessors)}"
            )
        for o, p in zip(items, self.preprocessors):
            p.write(o, array, offset)
            offset += p.size

    def _write_batch_items(
        self, items: List[Any], names: List[str], out: np.ndarray, offset: int, path: str
    ) -> None:
        for o, name, p in zip(items, names, self.preprocessors):
            p.write_batch(o, out, offset, f"{path}[{name}]")
            offset += p.size


@DeveloperAPI
class TupleFlatteningPreprocessor(_FlatteningPreprocessor):
    """Preprocesses each Tuple item and concatenates the flat results."""

    @override(Preprocessor)
    def _init_shape(self, obs_space: Any, options: dict) -> Tuple[int, ...]:
        return self._build_children(list(obs_space.spaces))

    @override(Preprocessor)
    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        self._write_items(list(observation), array, offset)

    @override(Preprocessor)
    def write_batch(self, observations: Any, out: np.ndarray, offset: int, path: str) -> None:
        n = len(self.preprocessors)
        if not isinstance(observations, (tuple, list)) or len(observations) != n:
            raise ValueError(
                f"{path}: expected a tuple of {n} batched items for {self._obs_space}, "
                f"got {_describe(observations)}"
            )
        self._write_batch_items(list(observations), [str(i) for i in range(n)], out, offset, path)


@DeveloperAPI
class DictFlatteningPreprocessor(_FlatteningPreprocessor):
    """Preprocesses each Dict value (in the space's key order) and concatenates them."""

    @override(Preprocessor)
    def _init_shape(self, obs_space: Any, options: dict) -> Tuple[int, ...]:
        return self._build_children(list(obs_space.spaces.values()))

    @override(Preprocessor)
    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        keys = list(self._obs_space.spaces.keys())
        missing = [k for k in keys if k not in observation]
        if missing:
            raise ValueError(f"observation lacks keys {missing} of the Dict observation space (keys {keys})")
        self._write_items([observation[k] for k in keys], array, offset)

    @override(Preprocessor)
    def write_batch(self, observations: Any, out: np.ndarray, offset: int, path: str) -> None:
        keys = list(self._obs_space.spaces.keys())
        if not isinstance(observations, dict):
            raise ValueError(
                f"{path}: expected a dict with keys {keys} for {self._obs_space}, "
                f"got {_describe(observations)}"
            )
        missing = [k for k in keys if k not in observations]
        extra = [k for k in observations if k not in self._obs_space.spaces]
        if missing or extra:
            raise ValueError(
                f"{path}: keys {sorted(map(str, observations))} do not match the "
                f"Dict observation space keys {keys} (missing {missing}, "
                f"unexpected {extra})"
            )
        self._write_batch_items([observations[k] for k in keys], [repr(k) for k in keys], out, offset, path)


@DeveloperAPI
class RepeatedValuesPreprocessor(Preprocessor):
    """Encodes a list of a ``Repeated`` space as ``[len, item_0, ..., item_{max_len-1}]``.

    Each item is the child preprocessor's flat encoding; slots past the list's
    length stay zero (RLlib 1.11's layout). Example: ``Repeated(Box(2,), 3)``
    and ``[[1, 2], [3, 4]]`` -> ``[2, 1, 2, 3, 4, 0, 0]``.
    """

    @override(Preprocessor)
    def _init_shape(self, obs_space: Any, options: dict) -> Tuple[int, ...]:
        child = obs_space.child_space
        self.child_preprocessor = get_preprocessor(child)(child, self._options)
        return (1 + self.child_preprocessor.size * obs_space.max_len,)

    @override(Preprocessor)
    def transform(self, observation: TensorType) -> np.ndarray:
        self.check_shape(observation)
        array = np.zeros(self.shape, dtype=np.float32)
        self.write(observation, array, 0)
        return array

    @override(Preprocessor)
    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        self._check_list(observation, "observation")
        size = self.child_preprocessor.size
        array[offset] = len(observation)
        for i, item in enumerate(observation):
            self.child_preprocessor.write(item, array, offset + 1 + i * size)

    @override(Preprocessor)
    def write_batch(self, observations: Any, out: np.ndarray, offset: int, path: str) -> None:
        if not _is_list_like(observations):
            raise ValueError(
                f"{path}: expected one list of items per row for {self._obs_space}, "
                f"got {_describe(observations)}"
            )
        if len(observations) != len(out):
            raise ValueError(f"{path}: {len(observations)} lists for a batch of {len(out)} rows")
        rows: List[int] = []
        slots: List[int] = []
        items: List[Any] = []
        for i, row in enumerate(observations):
            self._check_list(row, f"{path} row {i}")
            rows += [i] * len(row)
            slots += range(len(row))
            items += list(row)
        out[:, offset] = [len(row) for row in observations]
        if not items:
            return
        # All rows' items are encoded as one batch of the child space (with its checks).
        size = self.child_preprocessor.size
        encoded = np.zeros((len(items), size), np.float32)
        child_path = f"{path} items"
        self.child_preprocessor.write_batch(
            stack_rows(items, self._obs_space.child_space, child_path), encoded, 0, child_path
        )
        cols = offset + 1 + np.asarray(slots)[:, None] * size + np.arange(size)
        out[np.asarray(rows)[:, None], cols] = encoded

    def _check_list(self, observation: Any, where: str) -> None:
        if not _is_list_like(observation):
            raise ValueError(
                f"{where}: input for {self._obs_space} must be a list of items, got {_describe(observation)}"
            )
        if len(observation) > self._obs_space.max_len:
            raise ValueError(
                f"{where}: {len(observation)} items exceed max_len="
                f"{self._obs_space.max_len} of {self._obs_space}"
            )


@PublicAPI
def get_preprocessor(space: Any) -> type:
    """Returns the preprocessor class for an observation space.

    Discrete/MultiDiscrete -> OneHotPreprocessor, Box(128,) ->
    AtariRamPreprocessor, Tuple -> TupleFlatteningPreprocessor, Dict ->
    DictFlatteningPreprocessor, Repeated -> RepeatedValuesPreprocessor,
    anything else -> NoPreprocessor.
    """
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return OneHotPreprocessor
    if isinstance(space, gym.spaces.Tuple):
        return TupleFlatteningPreprocessor
    if isinstance(space, gym.spaces.Dict):
        return DictFlatteningPreprocessor
    if isinstance(space, Repeated):
        return RepeatedValuesPreprocessor
    if getattr(space, "shape", None) == ATARI_RAM_OBS_SHAPE:
        return AtariRamPreprocessor
    return NoPreprocessor


def _is_list_like(value: Any) -> bool:
    """A list/tuple, or an array with at least one axis (a Repeated observation's forms)."""
    return isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0)


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__} of shape {tuple(shape)}" if shape is not None else type(value).__name__


def batch_size_of(observations: Any, space: Any) -> int:
    """The batch size of a batched (possibly nested) observation structure."""
    if isinstance(space, gym.spaces.Dict) and isinstance(observations, dict):
        for k, sub in space.spaces.items():
            if k in observations:
                return batch_size_of(observations[k], sub)
    elif isinstance(space, gym.spaces.Tuple) and isinstance(observations, (tuple, list)):
        if observations:
            return batch_size_of(observations[0], space.spaces[0])
    elif isinstance(space, Repeated) and isinstance(observations, (list, tuple)):
        return len(observations)  # one raw list per row (rows may differ in length)
    shape = np.shape(observations)
    if not shape:
        raise ValueError(
            f"a batch of observations for {space} needs a leading batch axis, got {observations!r}"
        )
    return int(shape[0])


def _leaf_batch(observations: Any, space: Any, n: int, path: str) -> np.ndarray:
    """``observations`` as an array [n, *space.shape]; a ValueError names ``path`` if not."""
    if isinstance(observations, (dict, tuple)):
        raise ValueError(
            f"{path}: expected an array of shape {(n,) + tuple(space.shape)} for "
            f"{space}, got a {type(observations).__name__}"
        )
    values = np.asarray(observations)
    want = (n,) + tuple(space.shape or ())
    if values.shape != want:
        raise ValueError(f"{path}: expected shape {want} for {space} (batch of {n}), got {values.shape}")
    if values.dtype.kind not in "biuf":
        raise ValueError(f"{path}: dtype {values.dtype} is not numeric ({space})")
    return values


def _row_of(observations: Any, i: int) -> Any:
    if isinstance(observations, dict):
        return {k: _row_of(v, i) for k, v in observations.items()}
    if isinstance(observations, tuple):
        return tuple(_row_of(v, i) for v in observations)
    return observations[i]


def _starts(space: Any) -> Any:
    """The lowest value of each MultiDiscrete entry, flat (gymnasium's ``start``; 0 if absent)."""
    start = getattr(space, "start", None)
    return 0 if start is None else np.asarray(start, np.int64).ravel()


def stack_rows(rows: list, space: Any, path: str = "observation") -> Any:
    """Stacks single raw observations into the space's structure with batched leaves.

    Repeated (variable-length) observations are not stacked: their batched
    form is the list of the raw lists.

    Raises:
        ValueError: A row lacks a Dict key or has the wrong Tuple length.
    """
    if isinstance(space, gym.spaces.Dict):
        for i, r in enumerate(rows):
            if not isinstance(r, dict) or set(r) != set(space.spaces):
                got = sorted(map(str, r)) if isinstance(r, dict) else type(r).__name__
                raise ValueError(
                    f"{path} {i}: keys {got} do not match the Dict observation "
                    f"space keys {list(space.spaces)}"
                )
        return {k: stack_rows([r[k] for r in rows], sub, f"{path}[{k!r}]") for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        n = len(space.spaces)
        for i, r in enumerate(rows):
            if not isinstance(r, (tuple, list)) or len(r) != n:
                raise ValueError(f"{path} {i}: expected {n} items for {space}, got {r!r}")
        return tuple(
            stack_rows([r[j] for r in rows], sub, f"{path}[{j}]") for j, sub in enumerate(space.spaces)
        )
    if isinstance(space, Repeated):
        return list(rows)
    try:
        return np.stack([np.asarray(r) for r in rows])
    except ValueError as err:
        raise ValueError(
            f"{path}: rows of different shapes for {space}: {[np.shape(r) for r in rows]}"
        ) from err
