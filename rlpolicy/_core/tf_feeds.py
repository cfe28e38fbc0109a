"""Feed dicts of the TF graph-mode policy: batches of numpy data -> placeholders.

``TFPolicy`` builds three kinds of ``session.run`` feeds: acting (an input
dict, or obs/state/prev-action/prev-reward batches), learning (the columns of
a train batch that the loss reads) and the serving signature (the named
input/output tensors of an export). They are written here once, as plain
functions of the policy's placeholders.

No framework is imported at module level.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np
import tree

if TYPE_CHECKING:  # pragma: no cover
    from rlpolicy.policy.tf_policy import TFPolicy

SEQ_LENS = "seq_lens"


def batch_length(obs_batch: Any) -> int:
    """Rows of an observation batch (a list, an array or a nested struct of arrays)."""
    if isinstance(obs_batch, list):
        return len(obs_batch)
    return int(np.shape(tree.flatten(obs_batch)[0])[0])


def _same(tensor: Any, tensors: Sequence[Any]) -> bool:
    return any(tensor is t for t in tensors)


def check_state_batches(state_inputs: Sequence[Any], state_batches: Sequence[Any]) -> None:
    """Raises ValueError naming the state placeholders unless there is one batch per placeholder."""
    if len(state_inputs) != len(state_batches):
        names = [getattr(s, "name", str(s)) for s in state_inputs]
        raise ValueError(f"Must pass in RNN state batches for placeholders {names}, got "
                         f"{len(state_batches)} state batch(es)")


def _state_keys(input_dict: Any) -> List[str]:
    keys, i = [], 0
    while f"state_in_{i}" in input_dict:
        keys.append(f"state_in_{i}")
        i += 1
    return keys


def _raw_items(input_dict: Any) -> List[Tuple[str, Any]]:
    # dict.items skips SampleBatch's access tracking (acting must not count as
    # a loss access) and its get-interceptor.
    return list(dict.items(input_dict))


def placeholders_needed_by(roots: Iterable[Any]) -> Set[Any]:
    """The placeholder ops the tensors/ops in ``roots`` (transitively) depend on."""
    from rlpolicy.utils.framework import try_import_tf

    tf1, _, _ = try_import_tf(error=True)
    stack = [r.op if hasattr(r, "op") and not isinstance(r, tf1.Operation) else r
             for r in roots if r is not None and hasattr(r, "graph")]
    seen: Set[Any] = set()
    found: Set[Any] = set()
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if op.type in ("Placeholder", "PlaceholderWithDefault"):
            found.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return found


def _action_input_keys(policy: "TFPolicy", roots: List[Any]) -> Set[str]:
    """Columns of ``policy._input_dict`` whose placeholders the action fetches need (cached)."""
    key = tuple(id(r) for r in roots)
    cached = policy.__dict__.get("_action_feed_keys")
    if cached is None or cached[0] != key:
        needed = placeholders_needed_by(roots)
        cols = {k for k, v in dict.items(policy._input_dict)
                if any(getattr(leaf, "op", None) in needed for leaf in tree.flatten(v))}
        cached = policy.__dict__["_action_feed_keys"] = (key, cols)
    return cached[1]


def compute_actions_feed(policy: "TFPolicy", input_dict: Any, fetches: List[Any]) -> Dict[Any, Any]:
    """The feed dict of one compute-actions run for ``input_dict``.

    A DynamicTFPolicy (which has ``_input_dict``) gets every column whose
    placeholder the ``fetches`` depend on (other columns of the input dict are
    ignored); a hand-built TFPolicy gets obs, prev actions/rewards
    and the ``state_in_i`` columns. With state inputs but no ``seq_lens``
    column, every row is its own sequence (``seq_lens`` of ones).

    Raises:
        ValueError: If the number of ``state_in_i`` columns does not match the
            policy's state placeholders.
    """
    state_keys = _state_keys(input_dict)
    if state_keys or policy._state_inputs:
        check_state_batches(policy._state_inputs, state_keys)
    feed: Dict[Any, Any] = {}
    placeholders = getattr(policy, "_input_dict", None)
    if placeholders is not None:
        wanted = _action_input_keys(policy, [f for f in tree.flatten(fetches) if f is not None])
        for key, value in _raw_items(input_dict):
            if key in wanted:
                # Up to the placeholders' structure: a Python list fed to one placeholder is
                # one value (its real shape shows in feed errors), not a nest of rows.
                phs = dict.__getitem__(placeholders, key)
                tree.map_structure_up_to(phs, lambda ph, v: feed.__setitem__(ph, v), phs, value)
    else:
        items = dict(_raw_items(input_dict))
        feed[policy._obs_input] = items["obs"]
        for key, ph in (("prev_actions", policy._prev_action_input),
                        ("prev_rewards", policy._prev_reward_input)):
            if key in items and ph is not None:
                feed[ph] = items[key]
        for key, ph in zip(state_keys, policy._state_inputs):
            feed[ph] = items[key]
        if SEQ_LENS in items and policy._seq_lens is not None:
            feed[policy._seq_lens] = items[SEQ_LENS]
    if state_keys and SEQ_LENS not in input_dict:
        feed[policy._seq_lens] = np.ones(len(dict.__getitem__(input_dict, state_keys[0])),
                                         dtype=np.int32)
    return feed


def log_likelihood_feed(policy: "TFPolicy", actions: Any, obs_batch: Any,
                        state_batches: Optional[Sequence[Any]], prev_action_batch: Any,
                        prev_reward_batch: Any) -> Dict[Any, Any]:
    """The feed dict of ``compute_log_likelihoods`` (every row its own sequence).

    Raises:
        ValueError: If the number of state batches does not match the policy's
            state placeholders.
    """
    state_batches = list(state_batches or [])
    check_state_batches(policy._state_inputs, state_batches)
    if isinstance(actions, (dict, tuple)) and len(policy._action_input.shape) == 2:
        # Per-component actions of a Dict/Tuple space -> the flat action placeholder.
        from rlpolicy.utils.spaces.space_utils import flatten_action_batch
        actions = flatten_action_batch(actions, policy._action_input.dtype.as_numpy_dtype)
    feed = {policy._action_input: actions, policy._obs_input: obs_batch}
    feed.update(zip(policy._state_inputs, state_batches))
    if state_batches:
        feed[policy._seq_lens] = np.ones(batch_length(obs_batch), dtype=np.int32)
    if policy._prev_action_input is not None and prev_action_batch is not None:
        feed[policy._prev_action_input] = prev_action_batch
    if policy._prev_reward_input is not None and prev_reward_batch is not None:
        feed[policy._prev_reward_input] = prev_reward_batch
    return feed


def set_loss_inputs(policy: "TFPolicy", loss_inputs: List[Tuple[str, Any]]) -> None:
    """Sets ``_loss_inputs``, ``_loss_input_dict`` (plus ``state_in_i``) and
    ``_loss_input_dict_no_rnn`` (without state inputs and seq_lens)."""
    policy._loss_inputs = list(loss_inputs)
    policy._loss_input_dict = dict(loss_inputs)
    rnn = list(policy._state_inputs) + ([policy._seq_lens] if policy._seq_lens is not None else [])
    policy._loss_input_dict_no_rnn = {k: v for k, v in policy._loss_input_dict.items()
                                      if k != SEQ_LENS and not _same(v, rnn)}
    for i, ph in enumerate(policy._state_inputs):
        policy._loss_input_dict[f"state_in_{i}"] = ph


def loss_feed(policy: "TFPolicy", train_batch: Any) -> Dict[Any, Any]:
    """Maps every loss placeholder to its column of the (padded) ``train_batch``.

    Raises:
        ValueError: If the batch lacks a column the loss reads.
    """
    feed: Dict[Any, Any] = {}
    for key, placeholders in policy._loss_input_dict.items():
        if key not in train_batch:
            raise ValueError(f"the train batch has no column {key!r}, which the loss reads "
                             f"(loss inputs: {sorted(policy._loss_input_dict)}); add it in "
                             "postprocessing")
        value = train_batch[key]
        if isinstance(value, (dict, tuple)) and not isinstance(placeholders, (dict, tuple, list)):
            # Per-component Dict/Tuple actions (as the sampler keeps them) -> the flat placeholder.
            from rlpolicy.utils.spaces.space_utils import flatten_action_batch
            value = flatten_action_batch(value, placeholders.dtype.as_numpy_dtype)
        tree.map_structure(lambda ph, v: feed.__setitem__(ph, v), placeholders, value)
    if policy._state_inputs:
        if SEQ_LENS not in train_batch:
            raise ValueError("the train batch of a recurrent policy needs a 'seq_lens' column")
        feed[policy._seq_lens] = train_batch[SEQ_LENS]
    return feed


def signature_tensors(policy: "TFPolicy") -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The named input and output tensors of the serving signature (RLlib 1.11's names)."""
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf(error=True)
    inputs = dict(policy._extra_input_signature_def())
    inputs["observations"] = policy._obs_input
    if policy._seq_lens is not None:
        inputs[SEQ_LENS] = policy._seq_lens
    if policy._prev_action_input is not None:
        inputs["prev_action"] = policy._prev_action_input
    if policy._prev_reward_input is not None:
        inputs["prev_reward"] = policy._prev_reward_input
    inputs["is_training"] = policy._is_training
    if policy._timestep is not None:
        inputs["timestep"] = policy._timestep
    for state_input in policy._state_inputs:
        inputs[state_input.name] = state_input
    outputs = dict(policy._extra_output_signature_def())
    for i, a in enumerate(tf.nest.flatten(policy._sampled_action)):
        outputs[f"actions_{i}"] = a
    for state_output in policy._state_outputs:
        outputs[state_output.name] = state_output
    return inputs, outputs
