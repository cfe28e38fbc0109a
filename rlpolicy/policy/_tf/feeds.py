"""Helpers of ``TFPolicy``'s feed dicts and fetches; they take data, never the policy.

tensorflow is imported lazily.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Sequence, Set

import numpy as np
import tree

from rlpolicy.policy._tf.graph import placeholders_needed_by
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY

SEQ_LENS = "seq_lens"


def batch_length(obs_batch: Any) -> int:
    """Rows of an observation batch (a list, an array or a nested struct of arrays)."""
    if isinstance(obs_batch, list):
        return len(obs_batch)
    return int(np.shape(tree.flatten(obs_batch)[0])[0])


def check_state_batches(state_inputs: Sequence[Any], state_batches: Sequence[Any]) -> None:
    """Raises ValueError naming the state placeholders unless there is one batch per placeholder."""
    if len(state_inputs) != len(state_batches):
        names = [getattr(s, "name", str(s)) for s in state_inputs]
        raise ValueError(
            f"Must pass in RNN state batches for placeholders {names}, got "
            f"{len(state_batches)} state batch(es)"
        )


def state_keys(input_dict: Any) -> List[str]:
    """The ``state_in_0``, ``state_in_1``, ... columns of ``input_dict``, in order."""
    keys, i = [], 0
    while f"state_in_{i}" in input_dict:
        keys.append(f"state_in_{i}")
        i += 1
    return keys


def columns_needed_by(placeholders: Dict[str, Any], roots: Iterable[Any]) -> Set[str]:
    """The columns of a placeholder dict (a SampleBatch of placeholders) that the
    tensors ``roots`` depend on."""
    needed = placeholders_needed_by(roots)
    return {
        k
        for k, v in dict.items(placeholders)  # type: ignore[arg-type]
        if any(getattr(leaf, "op", None) in needed for leaf in tree.flatten(v))
    }


# An ``is_exploring`` of these types is a fixed flag (TFPolicy(explore=True/False)), not fed.
FIXED_FLAG_TYPES = (type(None), bool, int, float, np.generic, np.ndarray)


def flat_actions(actions: Any, placeholder: Any) -> Any:
    """Per-component Dict/Tuple actions (as the sampler keeps them) -> one flat
    placeholder's batch; anything else as is."""
    if isinstance(actions, (dict, tuple)) and not isinstance(placeholder, (dict, tuple, list)):
        from rlpolicy.utils.spaces.space_utils import flatten_action_batch

        return flatten_action_batch(actions, placeholder.dtype.as_numpy_dtype)
    return actions


def with_stats(extra_fetches: Dict[str, Any], stats_fetches: Mapping[str, Any]) -> Dict[str, Any]:
    """``extra_fetches`` (from ``extra_compute_grad_fetches()``) with ``stats_fetches``
    merged into its learner stats (the extra ones win).

    Raises:
        ValueError: If the extra fetches have no learner-stats entry.
    """
    if LEARNER_STATS_KEY not in extra_fetches:
        raise ValueError(
            f"extra_compute_grad_fetches() must return a {LEARNER_STATS_KEY!r} "
            f"entry (a dict of stats), got keys {sorted(extra_fetches)}"
        )
    if stats_fetches:
        extra_fetches[LEARNER_STATS_KEY] = dict(stats_fetches, **extra_fetches[LEARNER_STATS_KEY])
    return extra_fetches
