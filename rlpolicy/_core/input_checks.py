"""Checks of caller input at the policies' public entry points, on plain data.

They run before anything touches the policy, so a rejected call leaves the
weights, ``global_timestep`` and optimizer state exactly as they were. Each
error names the entry point, the offending column and what was expected.
The policy gathers what a check compares against (its spaces, config, the
model's view requirements, its loss columns) and passes it in: see the
``Policy._check_*`` methods. Nothing here imports torch or tensorflow.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Optional, Sequence

import numpy as np
import tree

OBS = "obs"
SEQ_LENS = "seq_lens"
PREV_COLUMNS = ("prev_actions", "prev_rewards")
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


def check_obs_values(
    obs: Any, where: str, *, observation_space: Any, check_finite: bool = False, column: str = OBS
) -> None:
    """Rejects non-numeric observations, and (with ``check_finite``) NaN/inf ones.

    Args:
        obs: The observation batch (any nesting; lists are looked at as arrays).
        where: The entry point's name, used in the message.
        observation_space: The policy's observation space (for the message).
        check_finite: ``config["_check_finite_obs"]``.
        column: The column name used in the message.

    Raises:
        ValueError: For a non-numeric dtype, or for non-finite values when
            ``check_finite`` (naming the row(s)).
    """
    for leaf in _numpy_leaves(obs):
        if leaf.dtype.kind not in _NUMERIC_KINDS:
            raise ValueError(
                f"{where}: column {column!r} has dtype {leaf.dtype}, but the "
                f"observation space {observation_space} needs numbers"
            )
        if check_finite and leaf.dtype.kind == "f" and not np.all(np.isfinite(leaf)):
            bad = ~np.isfinite(leaf.reshape(len(leaf), -1)) if leaf.ndim else ~np.isfinite(leaf)
            rows = np.nonzero(bad.any(axis=-1))[0].tolist() if leaf.ndim else [0]
            raise ValueError(
                f"{where}: column {column!r} has NaN/inf values in row(s) "
                f"{rows[:10]} (config _check_finite_obs=True)"
            )


def num_state_views(view_requirements: Optional[Mapping[str, Any]]) -> int:
    """How many ``state_in_i`` columns ``view_requirements`` declare (0, 1, ... in a row).

    Attention nets (GTrXL) keep no initial state but read their memory as
    ``state_in_i`` views (RLlib 1.11), so ``get_initial_state()`` alone
    undercounts them.
    """
    views = view_requirements or {}
    count = 0
    while f"state_in_{count}" in views:
        count += 1
    return count


def check_state_inputs(
    states: Sequence[Any],
    where: str,
    *,
    expected: int,
    initial_shapes: Optional[Sequence[tuple]] = None,
    single: bool = False,
) -> None:
    """Rejects RNN state inputs that do not fit the model's.

    Args:
        states: The state inputs (batched; unbatched with ``single``), or
            their column names (then only their number is checked).
        where: The entry point's name, used in the message.
        expected: How many state inputs the model takes.
        initial_shapes: The shapes of the model's initial states (compared
            when there are ``expected`` of them); None skips the comparison.
        single: The states are one row's (``compute_single_action``).

    Raises:
        ValueError: For a recurrent model called without state (naming
            ``policy.get_initial_state()``), a count that differs from the
            model's, or a state whose shape differs from its initial state's
            (naming the index, the expected and the given shape).
    """
    given = len(states)
    if not given and expected:
        # RLlib 1.11 passes no state here too and then fails inside the model
        # ("needs seq_lens", an IndexError); it never fills in the initial state.
        fix = (
            "state=policy.get_initial_state()"
            if single
            else "state_batches=[np.stack([s] * batch_size) for s in policy.get_initial_state()]"
        )
        raise ValueError(
            f"{where}: this policy's model is recurrent and takes {expected} state "
            f"input(s) (state_in_0..state_in_{expected - 1}), but none were given; "
            f"pass {fix} for an episode's first step, then the state outputs the "
            "previous call returned"
        )
    if given and given != expected:
        raise ValueError(
            f"{where}: got {given} state batch(es), but this policy's model takes "
            f"{expected} (state_in_0..state_in_{expected - 1})"
            if expected
            else f"{where}: got {given} state batch(es), but this policy's model is not recurrent and takes 0"
        )
    if given and not isinstance(states[0], str) and initial_shapes is not None:
        _check_state_shapes(list(states), initial_shapes, where, single)


def _check_state_shapes(states: List[Any], shapes: Sequence[tuple], where: str, single: bool) -> None:
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
        if got != tuple(want):
            what = f"{name}[{i}] has shape {shape}" + ("" if single else f" (rows x {got})")
            raise ValueError(
                f"{where}: {what}, but the model's state {i} has shape {tuple(want)} "
                f"(policy.get_initial_state()[{i}].shape"
                f"{'' if single else ', with a batch axis in front'})"
            )


def _prev_option(model_config: Mapping[str, Any], column: str) -> str:
    kind = "action" if column == "prev_actions" else "reward"
    if model_config.get("use_lstm"):
        return f"model option lstm_use_prev_{kind}=True"
    if model_config.get("use_attention"):
        return f"model option attention_use_n_prev_{kind}s"
    return f"the model's view_requirements[{column!r}]"


def check_prev_columns(
    present: Iterable[str],
    where: str,
    *,
    model_views: Optional[Mapping[str, Any]],
    model_config: Optional[Mapping[str, Any]] = None,
) -> None:
    """Rejects a call without the previous action/reward that the model reads.

    Args:
        present: The column names given (``"prev_actions"``, ``"prev_rewards"``).
        where: The entry point's name, used in the message.
        model_views: The model's view requirements (None: no model).
        model_config: ``config["model"]``, to name the option in the message.

    Raises:
        ValueError: Naming the missing argument and the model option that
            asks for it.
    """
    views = model_views or {}
    present = set(present)
    for column, arg in (("prev_actions", "prev_action"), ("prev_rewards", "prev_reward")):
        if column in views and column not in present:
            raise ValueError(
                f"{where}: the model reads the previous {arg[5:]} "
                f"({_prev_option(model_config or {}, column)}), "
                f"but no {arg} was given; pass {arg}= (compute_single_action), {arg}_batch= "
                f"(compute_actions) or a {column!r} input-dict column (zeros at an episode's "
                "first step)"
            )


def state_in_keys(keys: Iterable[Any]) -> List[str]:
    """The ``state_in_<i>`` keys among ``keys``, ordered by ``i``."""
    found = [k for k in keys if isinstance(k, str) and k.startswith("state_in_")]
    return sorted(found, key=lambda k: int(k[9:]) if k[9:].isdigit() else -1)


def check_loss_columns(present: Iterable[Any], needed: Optional[Sequence[str]], where: str) -> None:
    """Rejects a train batch that lacks a column the loss reads.

    Args:
        present: The batch's column names.
        needed: The columns the loss read during loss initialization (None:
            unknown, nothing is checked).
        where: The entry point's name, used in the message.

    Raises:
        ValueError: Naming the missing column(s) and the ones present.
    """
    if not needed:
        return
    present = set(present)
    missing = [c for c in needed if c not in present and _ALIASES.get(c) not in present]
    if missing:
        raise ValueError(
            f"{where}: the train batch lacks column(s) {missing} that the loss "
            f"reads; it has {sorted(str(k) for k in present)}"
        )
