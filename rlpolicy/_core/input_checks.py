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


def check_state_batches(policy: "Policy", state_batches: Optional[Iterable[Any]], where: str,
                        single: bool = False) -> None:
    """Rejects RNN state inputs that do not fit the model's.

    Args:
        policy: The policy being called.
        state_batches: The state inputs (batched; unbatched with ``single``),
            or their column names (then only their number is checked).
        where: The entry point's name, used in the message.
        single: The states are one row's (``compute_single_action``).

    Raises:
        ValueError: For a recurrent model called without state (naming
            ``policy.get_initial_state()``), a count that differs from the
            model's, or a state whose shape differs from its initial state's
            (naming the index, the expected and the given shape).
    """
    states = list(state_batches or [])
    if _custom_acting(policy):
        return
    given = len(states)
    expected = max(policy.num_state_tensors(), _model_state_views(policy)) if given or \
        is_recurrent(policy) else 0
    if not given and expected:
        # RLlib 1.11 passes no state here too and then fails inside the model
        # ("needs seq_lens", an IndexError); it never fills in the initial state.
        fix = ("state=policy.get_initial_state()" if single else
               "state_batches=[np.stack([s] * batch_size) for s in policy.get_initial_state()]")
        raise ValueError(f"{where}: this policy's model is recurrent and takes {expected} state "
                         f"input(s) (state_in_0..state_in_{expected - 1}), but none were given; "
                         f"pass {fix} for an episode's first step, then the state outputs the "
                         "previous call returned")
    if given and given != expected:
        raise ValueError(f"{where}: got {given} state batch(es), but this policy's model takes "
                         f"{expected} (state_in_0..state_in_{expected - 1})" if expected else
                         f"{where}: got {given} state batch(es), but this policy's model is not "
                         "recurrent and takes 0")
    if given and not isinstance(states[0], str):
        _check_state_shapes(policy, states, where, single)


def is_recurrent(policy: "Policy") -> bool:
    """Whether the policy keeps RNN state (or its model reads ``state_in_i`` views)."""
    try:
        return policy.num_state_tensors() > 0 or _model_state_views(policy) > 0
    except Exception:  # a hand-built policy without a model
        return False


def _check_state_shapes(policy: "Policy", states: List[Any], where: str, single: bool) -> None:
    shapes = policy.__dict__.get("_initial_state_shapes")
    if shapes is None:  # the model's state layout does not change: looked up once
        try:
            shapes = [tuple(np.shape(s)) for s in policy.get_initial_state()]
        except Exception:
            shapes = []
        policy.__dict__["_initial_state_shapes"] = shapes
    if len(shapes) != len(states):  # attention memory: no initial state to compare with
        return
    name = "state" if single else "state_batches"
    for i, (given, want) in enumerate(zip(states, shapes)):
        shape = getattr(given, "shape", None)
        if shape is None:
            try:
                shape = np.shape(given)
            except Exception:
                continue
        shape = tuple(int(d) if d is not None else -1 for d in shape)
        got = shape if single else shape[1:]
        if got != want:
            what = f"{name}[{i}] has shape {shape}" + ("" if single else f" (rows x {got})")
            raise ValueError(f"{where}: {what}, but the model's state {i} has shape {want} "
                             f"(policy.get_initial_state()[{i}].shape"
                             f"{'' if single else ', with a batch axis in front'})")


def _prev_option(policy: "Policy", column: str) -> str:
    model_config = (getattr(policy, "config", None) or {}).get("model") or {}
    kind = "action" if column == "prev_actions" else "reward"
    if model_config.get("use_lstm"):
        return f"model option lstm_use_prev_{kind}=True"
    if model_config.get("use_attention"):
        return f"model option attention_use_n_prev_{kind}s"
    return f"the model's view_requirements[{column!r}]"


def check_prev_inputs(policy: "Policy", present: Iterable[str], where: str) -> None:
    """Rejects a call without the previous action/reward that the model reads.

    Args:
        policy: The policy being called.
        present: The column names given (``"prev_actions"``, ``"prev_rewards"``).
        where: The entry point's name, used in the message.

    Raises:
        ValueError: Naming the missing argument and the model option that
            asks for it.
    """
    if _custom_acting(policy):
        return
    views = getattr(getattr(policy, "model", None), "view_requirements", None) or {}
    present = set(present)
    for column, arg in (("prev_actions", "prev_action"), ("prev_rewards", "prev_reward")):
        if column in views and column not in present:
            raise ValueError(
                f"{where}: the model reads the previous {arg[5:]} ({_prev_option(policy, column)}), "
                f"but no {arg} was given; pass {arg}= (compute_single_action), {arg}_batch= "
                f"(compute_actions) or a {column!r} input-dict column (zeros at an episode's "
                "first step)")


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
    states = [input_dict[k] for k in sorted(keys, key=lambda k: int(k[9:]) if k[9:].isdigit() else -1)]
    check_state_batches(policy, states, where)
    check_prev_inputs(policy, input_dict.keys(), where)


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
