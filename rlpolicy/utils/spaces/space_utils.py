"""Helpers for (nested) gymnasium spaces (RLlib 1.11's ``ray.rllib.utils.spaces.space_utils``).

Nested spaces (``Dict``, ``Tuple``) are handled through their "base struct":
the same nesting as python dicts/tuples with the primitive spaces as leaves,
so ``dm-tree`` can walk a space and a matching value in lockstep.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple, Union

import gymnasium as gym
import numpy as np
import tree  # dm-tree

from rlpolicy.utils.typing import SpaceStruct, TensorStructType

_NESTED = (gym.spaces.Dict, gym.spaces.Tuple)


def shape_of(space: gym.Space) -> Tuple[int, ...]:
    """``space.shape`` as a tuple: gymnasium types it Optional (Dict and Tuple spaces have none).

    Raises:
        ValueError: If ``space`` has no shape.
    """
    shape = space.shape
    if shape is None:
        raise ValueError(
            f"{type(space).__name__} space {space} has no shape; expected a Box, Discrete or other array space"
        )
    return shape


def flatten_space(space: gym.Space) -> List[gym.Space]:
    """Lists the primitive spaces inside a (nested) space, depth first.

    Dict keys are visited in sorted order (as ``dm-tree`` flattens dicts).

    Args:
        space: The space to flatten.

    Returns:
        The primitive (non-Dict/Tuple) sub-spaces, in flattening order.
    """
    out: List[gym.Space] = []

    def visit(s: gym.Space) -> None:
        if isinstance(s, gym.spaces.Tuple):
            for sub in s:
                visit(sub)
        elif isinstance(s, gym.spaces.Dict):
            for key in sorted(s.spaces):
                visit(s.spaces[key])
        else:
            out.append(s)

    visit(space)
    return out


def get_base_struct_from_space(space: gym.Space) -> SpaceStruct:
    """Turns Dict/Tuple spaces into python dicts/tuples of their primitive spaces.

    Args:
        space: The (possibly nested) space.

    Returns:
        A dict/tuple struct with primitive spaces as leaves, or ``space``
        itself if it is primitive.
    """
    if isinstance(space, gym.spaces.Tuple):
        return tuple(get_base_struct_from_space(s) for s in space)
    if isinstance(space, gym.spaces.Dict):
        return {k: get_base_struct_from_space(s) for k, s in space.spaces.items()}
    return space


def _as_struct(space_or_struct: Any) -> Any:
    if isinstance(space_or_struct, _NESTED):
        return get_base_struct_from_space(space_or_struct)
    return space_or_struct


def _dummy_leaf(
    space: gym.Space,
    batch_size: int,
    fill_value: Union[float, int, str],
    time_size: Optional[int],
    time_major: bool,
) -> np.ndarray:
    if time_size is not None and (batch_size <= 0 or time_size <= 0):
        raise ValueError(
            f"get_dummy_batch_for_space: with time_size={time_size}, batch_size "
            f"({batch_size}) and time_size must both be > 0"
        )
    if time_size is not None:
        lead = [time_size, batch_size] if time_major else [batch_size, time_size]
    else:
        lead = [batch_size] if batch_size > 0 else []
    if fill_value == "random":
        n = int(np.prod(lead)) if lead else 1
        samples = np.array([space.sample() for _ in range(n)], dtype=space.dtype)
        return samples.reshape(lead + list(shape_of(space)))
    out = np.full(lead + list(shape_of(space)), fill_value=fill_value, dtype=space.dtype)
    start = getattr(space, "start", None)
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) and np.any(start):
        # Discrete values count from `start`: keep the dummies inside the space.
        out = out + np.asarray(start, dtype=space.dtype)
    return out


def get_dummy_batch_for_space(
    space: gym.Space,
    batch_size: int = 32,
    fill_value: Union[float, int, str] = 0.0,
    time_size: Optional[int] = None,
    time_major: bool = False,
) -> TensorStructType:
    """Builds a batch of dummy values matching a (nested) space.

    Args:
        space: The space the values should belong to.
        batch_size: Batch size; 0 (or less) means no batch axis.
        fill_value: Value to fill with, or ``"random"`` for ``space.sample()``s.
        time_size: If given, a time axis of this size is added.
        time_major: If True (and ``time_size`` given), shape is ``[T, B, ...]``
            instead of ``[B, T, ...]``.

    Returns:
        A numpy array (or struct of arrays for Dict/Tuple spaces) of dtype
        ``space.dtype``.

    Note:
        RLlib 1.11 drops ``time_size``/``time_major`` when recursing into
        nested spaces; rlpolicy passes them on to every component.
    """
    if isinstance(space, _NESTED):
        return tree.map_structure(
            lambda s: get_dummy_batch_for_space(s, batch_size, fill_value, time_size, time_major),
            get_base_struct_from_space(space),
        )
    return _dummy_leaf(space, batch_size, fill_value, time_size, time_major)


def flatten_to_single_ndarray(input_: TensorStructType) -> np.ndarray:
    """Concatenates all leaves of a (nested) value into one flat 1D array.

    Non-container inputs are returned unchanged.

    Args:
        input_: A (nested) list/tuple/dict of arrays/numbers, or a single value.

    Returns:
        A 1D array (or ``input_`` itself if it is not a container).
    """
    if isinstance(input_, (list, tuple, dict)):
        parts = [np.reshape(leaf, [-1]) for leaf in tree.flatten(input_)]
        return np.concatenate(parts, axis=0).flatten()
    return input_


def unbatch(batches_struct: TensorStructType) -> List[TensorStructType]:
    """Splits a struct of batched arrays into a list of per-item structs.

    Args:
        batches_struct: A (nested) struct whose leaves all have the same
            batch size ``B`` on axis 0.

    Returns:
        A list of ``B`` structs with the same nesting, each holding one item.

    Raises:
        ValueError: If the leaves have different batch sizes.
    """
    flat = tree.flatten(batches_struct)
    if not flat:
        return []
    sizes = {len(leaf) for leaf in flat}
    if len(sizes) != 1:
        raise ValueError(f"unbatch: all components need the same batch size, got sizes {sorted(sizes)}")
    return [tree.unflatten_as(batches_struct, [leaf[i] for leaf in flat]) for i in range(len(flat[0]))]


def _is_float_box(s: Any) -> bool:
    return isinstance(s, gym.spaces.Box) and s.dtype in (np.float32, np.float64)


def clip_action(action: TensorStructType, action_space: SpaceStruct) -> TensorStructType:
    """Clips every Box component of an action into its space's bounds.

    Args:
        action: A (nested) action.
        action_space: The matching space (or its base struct).

    Returns:
        The clipped action (non-Box components unchanged).
    """

    def clip(a, s):
        return np.clip(a, s.low, s.high) if isinstance(s, gym.spaces.Box) else a

    return tree.map_structure(clip, action, _as_struct(action_space))


def unsquash_action(action: TensorStructType, action_space_struct: SpaceStruct) -> TensorStructType:
    """Maps float Box components from ``[-1, 1]`` onto the space's bounds (then clips).

    Inverse of :func:`normalize_action` for values inside the bounds.

    Args:
        action: A (nested) action with Box components roughly in ``[-1, 1]``.
        action_space_struct: The matching space (or its base struct).

    Returns:
        The unsquashed action (other components unchanged).
    """

    def unsquash(a, s):
        if _is_float_box(s):
            a = s.low + (a + 1.0) * (s.high - s.low) / 2.0
            # Squashed values slightly outside [-1, 1] must not leave the space.
            a = np.clip(a, s.low, s.high)
        return a

    return tree.map_structure(unsquash, action, _as_struct(action_space_struct))


def normalize_action(action: TensorStructType, action_space_struct: SpaceStruct) -> TensorStructType:
    """Maps float Box components from the space's bounds onto ``[-1, 1]``.

    Args:
        action: A (nested) action inside the space.
        action_space_struct: The matching space (or its base struct).

    Returns:
        The normalized action (other components unchanged).
    """

    def normalize(a, s):
        if _is_float_box(s):
            a = ((a - s.low) * 2.0) / (s.high - s.low) - 1.0
        return a

    return tree.map_structure(normalize, action, _as_struct(action_space_struct))


def flatten_action_batch(actions: TensorStructType, dtype: Any = None) -> np.ndarray:
    """Concatenates a (nested) batch of actions into one flat [B, n] array.

    Every leaf [B, *shape] takes ``prod(shape)`` columns (a Discrete leaf
    [B] one), in ``dm-tree`` flattening order (sorted Dict keys), which is
    the layout of the flattened action column of a train batch
    (``_disable_action_flattening=False``) and of
    ``ModelCatalog.get_action_shape`` for Dict/Tuple spaces.

    Args:
        actions: A struct of batched arrays (all with the same batch size),
            or a single batched array.
        dtype: Optional dtype of the result (default: numpy's common type).

    Returns:
        The [B, n] array.
    """
    leaves = [np.asarray(leaf) for leaf in tree.flatten(actions)]
    flat = np.concatenate([np.reshape(leaf, (len(leaf), -1)) for leaf in leaves], axis=1)
    return flat if dtype is None else flat.astype(dtype)


__all__ = [
    "flatten_space",
    "get_base_struct_from_space",
    "get_dummy_batch_for_space",
    "flatten_to_single_ndarray",
    "unbatch",
    "clip_action",
    "unsquash_action",
    "normalize_action",
    "flatten_action_batch",
]
