"""Observation preprocessors (RLlib's ``ray.rllib.models.preprocessors``).

A preprocessor turns one environment observation into the flat float array
that travels through sample batches: one-hot for Discrete/MultiDiscrete, a
concatenation of the preprocessed parts for Dict/Tuple, unchanged for Box.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy.utils.annotations import DeveloperAPI, PublicAPI, override
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
        self._obs_space = obs_space
        if not options:
            from rlpolicy._core.defaults import MODEL_DEFAULTS
            options = dict(MODEL_DEFAULTS)
        self._options = options
        self.shape = tuple(self._init_shape(obs_space, self._options))
        self._size = int(np.prod(self.shape))
        self._i = 0

    def _init_shape(self, obs_space: gym.Space, options: dict) -> Tuple[int, ...]:
        """Returns the shape of the preprocessed observation."""
        raise NotImplementedError

    @PublicAPI
    def transform(self, observation: TensorType) -> np.ndarray:
        """Returns the preprocessed observation."""
        raise NotImplementedError

    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        """Writes the flat preprocessed observation into ``array[offset:offset+size]``."""
        array[offset:offset + self._size] = np.asarray(self.transform(observation)).ravel()

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
        obs_space = gym.spaces.Box(-1.0, 1.0, self.shape, dtype=np.float32)
        if isinstance(self, (DictFlatteningPreprocessor, OneHotPreprocessor,
                             TupleFlatteningPreprocessor, AtariRamPreprocessor)):
            obs_space.original_space = self._obs_space
        return obs_space


def _validate_observation(observation: Any, space: gym.Space) -> None:
    """Raises a ValueError naming space and observation if it does not fit."""
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        _validate_structure(observation, space)
        return
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        arr = np.asarray(observation)
        if arr.shape != tuple(space.shape):
            raise ValueError(
                f"observation has shape {arr.shape} but the observation space {space} "
                f"expects shape {tuple(space.shape)}")
        observation = arr.astype(space.dtype, copy=False)
    elif isinstance(space, gym.spaces.Discrete):
        arr = np.asarray(observation)
        if arr.shape != ():
            raise ValueError(f"observation has shape {arr.shape} but the observation space "
                             f"{space} expects a scalar integer")
        observation = np.int64(arr)
    if not space.contains(observation):
        raise ValueError(f"observation {observation!r} lies outside the observation space {space}")


def _validate_structure(observation: Any, space: gym.Space) -> None:
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(observation, dict) or set(observation) != set(space.spaces):
            got = sorted(observation) if isinstance(observation, dict) else type(observation)
            raise ValueError(f"observation keys {got} do not match the Dict observation space "
                             f"keys {sorted(space.spaces)}")
        for k, sub in space.spaces.items():
            _validate_observation(observation[k], sub)
    else:
        if not isinstance(observation, (tuple, list)) or len(observation) != len(space.spaces):
            raise ValueError(f"observation {observation!r} does not match the Tuple observation "
                             f"space {space} ({len(space.spaces)} items)")
        for o, sub in zip(observation, space.spaces):
            _validate_observation(o, sub)


@DeveloperAPI
class AtariRamPreprocessor(Preprocessor):
    """Scales 128-byte Atari RAM observations to [-1, 1)."""

    @override(Preprocessor)
    def _init_shape(self, obs_space: gym.Space, options: dict) -> Tuple[int, ...]:
        return (128,)

    @override(Preprocessor)
    def transform(self, observation: TensorType) -> np.ndarray:
        self.check_shape(observation)
        return (np.asarray(observation).astype("float32") - 128) / 128


@DeveloperAPI
class OneHotPreprocessor(Preprocessor):
    """One-hot encodes Discrete (n slots) and MultiDiscrete (sum(nvec) slots) observations.

    Example: Discrete(3) value 1 -> [0, 1, 0]; MultiDiscrete([2, 3]) value
    [1, 2] -> [0, 1, 0, 0, 1].
    """

    @override(Preprocessor)
    def _init_shape(self, obs_space: gym.Space, options: dict) -> Tuple[int, ...]:
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
            starts = np.concatenate([[0], np.cumsum(self._obs_space.nvec)[:-1]])
            arr[starts + np.asarray(observation, dtype=np.int64).ravel()] = 1.0
        return arr


@DeveloperAPI
class NoPreprocessor(Preprocessor):
    """Passes observations through unchanged (Box spaces)."""

    @override(Preprocessor)
    def _init_shape(self, obs_space: gym.Space, options: dict) -> Tuple[int, ...]:
        return tuple(self._obs_space.shape)

    @override(Preprocessor)
    def transform(self, observation: TensorType) -> np.ndarray:
        self.check_shape(observation)
        return observation

    @override(Preprocessor)
    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        array[offset:offset + self._size] = np.asarray(observation).ravel()

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
            raise ValueError(f"observation has {len(items)} items but the observation space "
                             f"{self._obs_space} has {len(self.preprocessors)}")
        for o, p in zip(items, self.preprocessors):
            p.write(o, array, offset)
            offset += p.size


@DeveloperAPI
class TupleFlatteningPreprocessor(_FlatteningPreprocessor):
    """Preprocesses each Tuple item and concatenates the flat results."""

    @override(Preprocessor)
    def _init_shape(self, obs_space: gym.Space, options: dict) -> Tuple[int, ...]:
        return self._build_children(list(obs_space.spaces))

    @override(Preprocessor)
    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        self._write_items(list(observation), array, offset)


@DeveloperAPI
class DictFlatteningPreprocessor(_FlatteningPreprocessor):
    """Preprocesses each Dict value (in the space's key order) and concatenates them."""

    @override(Preprocessor)
    def _init_shape(self, obs_space: gym.Space, options: dict) -> Tuple[int, ...]:
        return self._build_children(list(obs_space.spaces.values()))

    @override(Preprocessor)
    def write(self, observation: TensorType, array: np.ndarray, offset: int) -> None:
        keys = list(self._obs_space.spaces.keys())
        missing = [k for k in keys if k not in observation]
        if missing:
            raise ValueError(f"observation lacks keys {missing} of the Dict observation "
                             f"space (keys {keys})")
        self._write_items([observation[k] for k in keys], array, offset)


@PublicAPI
def get_preprocessor(space: gym.Space) -> type:
    """Returns the preprocessor class for an observation space.

    Discrete/MultiDiscrete -> OneHotPreprocessor, Box(128,) ->
    AtariRamPreprocessor, Tuple -> TupleFlatteningPreprocessor, Dict ->
    DictFlatteningPreprocessor, anything else -> NoPreprocessor.
    """
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return OneHotPreprocessor
    if isinstance(space, gym.spaces.Tuple):
        return TupleFlatteningPreprocessor
    if isinstance(space, gym.spaces.Dict):
        return DictFlatteningPreprocessor
    if getattr(space, "shape", None) == ATARI_RAM_OBS_SHAPE:
        return AtariRamPreprocessor
    return NoPreprocessor
