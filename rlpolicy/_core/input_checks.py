"""Checks of caller input at the policies' public entry points.

They run before anything touches the policy, so a rejected call leaves the
weights, ``global_timestep`` and optimizer state exactly as they were. Each
error names the entry point, the offending column and what was expected.
Nothing here imports torch or tensorflow.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, List, Optional

import numpy as np
import tree

if TYPE_CHECKING:
    from rlpolicy.policy.policy import Policy

OBS = "obs"
SEQ_LENS = "seq_lens"
_NUMERIC_KINDS = "biuf"
# SampleBatch derives one of these from the other, so either satisfies a loss.
_ALIASES = {"dones": "terminateds", "terminateds": "dones"}


def _numpy_leaves(value: Any) -> List[np.ndarray]:
    # Only numpy leaves are inspected; framework tensors were made by code
    # that already chose their dtype.
    if type(value) is np.ndarray:  # the common case, without tree's traversal
        return [value]
    if isinstance(value, list) and value and not isinstance(value[0], (dict, tuple)):
        try:
            value = np.asarray(value)
        except ValueError:  # ragged lists: the model's own shape check reports them
            return []
    return [x for x in tree.flatten(value) if isinstance(x, np.ndarray)]


def check_obs(policy: "Policy", obs: Any, where: str, column: str = OBS) -> None:
    """Rejects non-numeric observations, and (if configured) NaN/inf ones.

    Args:
        policy: The policy being called.
        obs: The observation batch (any nesting; lists are looked at as arrays).
        where: The entry point's name, used in the message.
        column: The column name used in the message.

    Raises:
        ValueError: For a non-numeric dtype, or for non-finite values when
            ``config["_check_finite_obs"]`` is True (naming the row(s)).
    """
    check_finite = bool(policy.config.get("_check_finite_obs", False))
    for leaf in _numpy_leaves(obs):
        if leaf.dtype.kind not in _NUMERIC_KINDS:
            raise ValueError(f"{where}: column {column!r} has dtype {leaf.dtype}, but the "
                             f"observation space {policy.observation_space} needs numbers")
        if check_finite and leaf.dtype.kind == "f" and not np.all(np.isfinite(leaf)):
            bad = ~np.isfinite(leaf.reshape(len(leaf), -1)) if leaf.ndim else ~np.isfinite(leaf)
            rows = np.nonzero(bad.any(axis=-1))[0].tolist() if leaf.ndim else [0]
            raise ValueError(f"{where}: column {column!r} has NaN/inf values in row(s) "
                             f"{rows[:10]} (config _check_finite_obs=True)")


def check_state_batches(policy: "Policy", state_batches: Optional[Iterable[Any]], where: str) -> None:
    """Rejects a number of RNN state batches that differs from the model's.

    An empty/None ``state_batches`` is left to the model (RLlib accepts it).

    Raises:
        ValueError: Naming the expected and the given count.
    """
    given = len(list(state_batches or []))
    if not given or _custom_acting(policy):
        return
    expected = max(policy.num_state_tensors(), _model_state_views(policy))
    if given != expected:
        raise ValueError(f"{where}: got {given} state batch(es), but this policy's model takes "
                         f"{expected} (state_in_0..state_in_{expected - 1})" if expected else
                         f"{where}: got {given} state batch(es), but this policy's model is not "
                         "recurrent and takes 0")


def _model_state_views(policy: "Policy") -> int:
    """How many ``state_in_i`` columns the model's view requirements declare.

    Attention nets (GTrXL) keep no initial state but read their memory as
    ``state_in_i`` views (RLlib 1.11), so ``get_initial_state()`` alone
    undercounts them.
    """
    views = getattr(getattr(policy, "model", None), "view_requirements", None) or {}
    count = 0
    while f"state_in_{count}" in views:
        count += 1
    return count


def _custom_acting(policy: "Policy") -> bool:
    # A custom action_sampler_fn/action_distribution_fn may take state
    # inputs the model does not declare; then the count is its business.
    hooks = getattr(policy, "_hooks", None)
    return any(getattr(obj, name, None) is not None for obj in (policy, hooks)
               for name in ("action_sampler_fn", "action_distribution_fn"))


def check_acting_input_dict(policy: "Policy", input_dict: Any, where: str) -> None:
    """:func:`check_obs` plus :func:`check_state_batches` for an input dict."""
    if OBS in input_dict:
        check_obs(policy, input_dict[OBS], where)
    keys = [k for k in input_dict.keys() if isinstance(k, str) and k.startswith("state_in_")]
    check_state_batches(policy, keys, where)


def loss_columns(policy: "Policy") -> Optional[List[str]]:
    """The train-batch columns the loss read during loss initialization."""
    cols = getattr(policy, "_loss_columns", None)
    if cols is None and getattr(policy, "_loss_input_dict", None):
        cols = [k for k in policy._loss_input_dict if k != SEQ_LENS]
    return sorted(cols) if cols is not None else None


def check_train_batch(policy: "Policy", batch: Any, where: str) -> None:
    """Rejects a train batch that lacks a loss column or has bad observations.

    Raises:
        ValueError: Naming the missing column(s) and the ones present.
    """
    needed = loss_columns(policy)
    if needed and hasattr(batch, "keys"):
        present = set(batch.keys())
        missing = [c for c in needed if c not in present and _ALIASES.get(c) not in present]
        if missing:
            raise ValueError(f"{where}: the train batch lacks column(s) {missing} that the loss "
                             f"reads; it has {sorted(str(k) for k in present)}")
    if hasattr(batch, "keys") and OBS in batch.keys():
        check_obs(policy, batch[OBS], where)
