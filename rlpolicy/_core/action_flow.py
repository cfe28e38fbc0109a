"""Framework-neutral steps of ``Policy.compute_single_action``.

A single (unbatched) observation is turned into a B=1 input dict, handed to
``compute_actions_from_input_dict``, and the batched outputs are cut back to
their first row. Nested (Dict/Tuple) structures are walked with dm-tree, so an
action of a ``Dict`` space comes back as a dict, of a ``Tuple`` space as a
tuple. Nothing here imports torch or tensorflow.
"""

from __future__ import annotations

from numbers import Number
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import tree

from rlpolicy.utils.spaces.space_utils import clip_action, unsquash_action

SEQ_LENS = "seq_lens"
# compute_single_action's opt-in post-processing keywords: (ours, RLlib Trainer's spelling).
_FLAG_SPELLINGS = {
    "unsquash": ("unsquash_actions", "unsquash_action"),
    "clip": ("clip_actions", "clip_action"),
}


class SingleActionOutput(NamedTuple):
    """The unbatched result of one ``compute_single_action`` call."""

    action: Any
    state_out: List[Any]
    info: Dict[str, Any]


def build_single_input_dict(
    obs: Any,
    state: Optional[List[Any]] = None,
    *,
    prev_action: Any = None,
    prev_reward: Any = None,
    info: Optional[dict] = None,
) -> Dict[str, Any]:
    """Collects single (unbatched) inputs under SampleBatch's column names.

    Args:
        obs: One observation (any nesting).
        state: RNN state inputs; item ``i`` is stored as ``state_in_{i}``.
        prev_action: Previous action, stored as ``prev_actions`` if given.
        prev_reward: Previous reward, stored as ``prev_rewards`` if given.
        info: Info dict, stored as ``infos`` if given.

    Returns:
        A plain dict ready for :func:`batch_input_dict`.
    """
    input_dict: Dict[str, Any] = {"obs": obs}
    for i, s in enumerate(state or []):
        input_dict[f"state_in_{i}"] = s
    if prev_action is not None:
        input_dict["prev_actions"] = prev_action
    if prev_reward is not None:
        input_dict["prev_rewards"] = prev_reward
    if info is not None:
        input_dict["infos"] = info
    return input_dict


def _is_torch_tensor(x: Any) -> bool:
    # Checked by module name so that torch is never imported here.
    return type(x).__module__.startswith("torch") and hasattr(x, "unsqueeze")


def _add_batch_dim(path: tuple, leaf: Any) -> Any:
    # `seq_lens` already describes the batch and is left alone. (RLlib 1.11
    # compares the whole path tuple to the string "seq_lens", which never
    # matches; the top-level key is what was meant.)
    if path and path[0] == SEQ_LENS:
        return leaf
    if _is_torch_tensor(leaf):
        return leaf.unsqueeze(0)
    return np.expand_dims(leaf, 0)


def batch_input_dict(input_dict: Dict[str, Any]) -> Dict[str, Any]:
    """Adds a leading batch axis of size 1 to every leaf of ``input_dict``.

    Torch tensors get ``unsqueeze(0)``; everything else ``np.expand_dims``.

    Args:
        input_dict: Single (unbatched) inputs, possibly nested.

    Returns:
        A new plain dict with the same structure and B=1 leaves.
    """
    if all(type(v) is np.ndarray for v in input_dict.values()) and SEQ_LENS not in input_dict:
        # (The common case: flat arrays, e.g. {"obs": array}; a view per column.)
        return {k: v[np.newaxis] for k, v in input_dict.items()}
    arrays = tree.traverse(_numeric_list_to_array, dict(input_dict), top_down=True)
    return tree.map_structure_with_path(_add_batch_dim, arrays)


def _numeric_list_to_array(node: Any) -> Any:
    # A (nested) Python list of numbers is ONE observation, e.g. [0.1, 0.2, 0.3, 0.4] for a
    # Box(4,): make it an array before batching. dm-tree would otherwise read the list as a
    # nest and batch each number alone, giving a (4, 1) batch. Lists holding arrays, dicts
    # or tuples stay nests. (None: let tree.traverse descend.)
    if not isinstance(node, list) or not node:
        return None
    if not all(isinstance(x, (Number, np.generic)) for x in tree.flatten(node)):
        return None
    try:
        return np.asarray(node)
    except ValueError:  # ragged
        return None


def first_row(batched: Any, what: str = "action") -> Any:
    """Returns row 0 of a batch of size 1, keeping its (nested) structure.

    Args:
        batched: An array, or a dict/tuple nest of arrays, each [1, ...].
            A top-level list is read as one batch (not as a nest).
        what: Name used in the error message.

    Raises:
        ValueError: If a leaf does not have exactly one row.
    """
    if type(batched) is np.ndarray and batched.ndim > 0 and batched.shape[0] == 1:
        return batched[0]  # (the common case: one array)
    if isinstance(batched, list):
        batched = np.asarray(batched)
    leaves = tree.flatten(batched)
    for leaf in leaves:
        rows = _num_rows(leaf)
        if rows != 1:
            raise ValueError(
                f"compute_single_action: the policy returned a batched {what} with {rows} rows "
                f"(leaf shape {getattr(leaf, 'shape', None)}); expected exactly 1 row for a single input"
            )
    return tree.unflatten_as(batched, [leaf[0] for leaf in leaves])


def _num_rows(leaf: Any) -> Optional[int]:
    shape = getattr(leaf, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) > 0 else None
    try:
        return len(leaf)
    except TypeError:
        return None


def unbatch_single_output(out: Any) -> SingleActionOutput:
    """Unbatches what ``compute_actions_from_input_dict`` returned for B=1.

    Policies that return a bare action instead of the usual
    ``(actions, state_outs, info)`` tuple (RLlib: ES, ARS) get their output
    returned as the action, with no state and an empty info dict.

    Args:
        out: The (batched) output of ``compute_actions_from_input_dict``.

    Returns:
        The single action (structure of the action space), the list of
        single state outputs, and the dict of single extra outputs.
    """
    if not isinstance(out, tuple):
        return SingleActionOutput(out, [], {})
    if len(out) != 3:
        raise ValueError(
            f"compute_actions_from_input_dict returned a tuple of {len(out)} items; "
            "expected (actions, state_outs, info)"
        )
    actions, state_out, info = out
    action = first_row(actions, "action")
    states = [first_row(s, f"state_out_{i}") for i, s in enumerate(state_out or [])]
    extra = {k: first_row(v, f"extra output {k!r}") for k, v in (info or {}).items()}
    return SingleActionOutput(action, states, extra)


def pop_single_action_flags(kwargs: Dict[str, Any]) -> Tuple[bool, bool]:
    """Removes the unsquash/clip keywords from ``kwargs`` and returns them.

    Both spellings are read: ``unsquash_actions``/``unsquash_action`` and
    ``clip_actions``/``clip_action``; missing or None means False.

    Args:
        kwargs: The ``**kwargs`` of ``compute_single_action`` (changed in place).

    Returns:
        ``(unsquash, clip)``.

    Raises:
        ValueError: If both spellings of one flag are given with different values.
    """
    flags = []
    for plural, singular in _FLAG_SPELLINGS.values():
        a, b = kwargs.pop(plural, None), kwargs.pop(singular, None)
        if a is not None and b is not None and bool(a) != bool(b):
            raise ValueError(
                f"compute_single_action: {plural}={a!r} and {singular}={b!r} disagree; pass only one of them"
            )
        flags.append(bool(a if a is not None else b))
    return flags[0], flags[1]


def postprocess_single_action(action: Any, action_space_struct: Any, *, unsquash: bool, clip: bool) -> Any:
    """Unsquashes (from [-1, 1] onto the bounds) or clips the Box parts of one action.

    Unsquashing wins over clipping (it clips too); with neither flag the
    action is returned unchanged.

    Args:
        action: One (unbatched) action, nested like the action space.
        action_space_struct: The policy's ``action_space_struct``.
        unsquash: Map float Box components from [-1, 1] onto their bounds.
        clip: Clip Box components into their bounds.

    Returns:
        The post-processed action.
    """
    if unsquash:
        return unsquash_action(action, action_space_struct)
    if clip:
        return clip_action(action, action_space_struct)
    return action
