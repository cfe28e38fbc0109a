"""The tensors of a TF graph-mode policy, as two frozen records with their feed builders.

``ActingGraph`` owns the acting tensors (observation / state / sequence-length /
explore / timestep placeholders, the sampled action, its logp and prob, the
state outputs, the distribution inputs and the log-likelihood op);
``LossGraph`` owns the loss graph (loss inputs, losses, gradients and the apply
op). Each builds the feed dicts of its ``session.run`` calls from plain data (an
input dict, a train batch, numpy arrays); neither knows the policy.
``TFPolicy`` keeps RLlib 1.11's attribute names (``_obs_input``,
``_loss_input_dict``, ...) as views onto these records.

tensorflow is imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

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
_FIXED_FLAG_TYPES = (type(None), bool, int, float, np.generic, np.ndarray)


def _same(tensor: Any, tensors: Sequence[Any]) -> bool:
    return any(tensor is t for t in tensors)


def _flat_actions(actions: Any, placeholder: Any) -> Any:
    """Per-component Dict/Tuple actions (as the sampler keeps them) -> one flat
    placeholder's batch; anything else as is."""
    if isinstance(actions, (dict, tuple)) and not isinstance(placeholder, (dict, tuple, list)):
        from rlpolicy.utils.spaces.space_utils import flatten_action_batch

        return flatten_action_batch(actions, placeholder.dtype.as_numpy_dtype)
    return actions


@dataclass(frozen=True, eq=False)
class ActingGraph:
    """The acting tensors of a graph-mode policy (all in one ``tf1.Graph``).

    Attributes:
        obs: Observation placeholder ``[BATCH, obs...]``.
        prev_action: Previous-action placeholder (or None).
        prev_reward: Previous-reward placeholder (or None).
        sampled_action: The sampled-action op (a nest for Dict/Tuple spaces).
        sampled_action_logp: Its log-probability (or None).
        sampled_action_prob: ``exp(sampled_action_logp)`` (or None).
        action_input: Action placeholder for log-likelihoods (or None).
        dist_inputs: The action distribution inputs (or None).
        state_inputs: RNN state input placeholders.
        state_outputs: RNN state output tensors.
        seq_lens: Sequence-length placeholder (required with state inputs).
        is_exploring: The ``explore`` placeholder, or a Python bool.
        timestep: The timestep placeholder.
        is_training: The ``is_training`` placeholder (default False).
        log_likelihood: Log-likelihood op of ``action_input`` (or None).
    """

    obs: Any = None
    prev_action: Any = None
    prev_reward: Any = None
    sampled_action: Any = None
    sampled_action_logp: Any = None
    sampled_action_prob: Any = None
    action_input: Any = None
    dist_inputs: Any = None
    state_inputs: List[Any] = field(default_factory=list)
    state_outputs: List[Any] = field(default_factory=list)
    seq_lens: Any = None
    is_exploring: Any = None
    timestep: Any = None
    is_training: Any = None
    log_likelihood: Any = None

    def feed(
        self,
        input_dict: Any,
        placeholders: Optional[Mapping[str, Any]] = None,
        columns: Optional[Set[str]] = None,
    ) -> Dict[Any, Any]:
        """The feed dict of one compute-actions run for ``input_dict``.

        With ``placeholders`` (a DynamicTFPolicy's placeholder input dict), every
        column in ``columns`` (those the fetches depend on, see
        :func:`columns_needed_by`) is fed into its placeholder(s); other columns
        are ignored. Without, obs, prev actions/rewards, ``seq_lens`` and the
        ``state_in_i`` columns are fed. With state inputs but no ``seq_lens``
        column, every row is its own sequence (``seq_lens`` of ones).

        Raises:
            ValueError: If the number of ``state_in_i`` columns does not match
                the state placeholders.
        """
        keys = state_keys(input_dict)
        if keys or self.state_inputs:
            check_state_batches(self.state_inputs, keys)
        # dict.items skips SampleBatch's access tracking (acting must not count as a
        # loss access) and its get-interceptor.
        items = dict(dict.items(input_dict))
        feed: Dict[Any, Any] = {}
        if placeholders is not None:
            for key, value in items.items():
                if columns is not None and key in columns:
                    # Up to the placeholders' structure: a Python list fed to one placeholder
                    # is one value (its real shape shows in feed errors), not a nest of rows.
                    phs: Any = dict.__getitem__(placeholders, key)  # type: ignore[index]
                    tree.map_structure_up_to(phs, lambda ph, v: feed.__setitem__(ph, v), phs, value)
        else:
            feed[self.obs] = items["obs"]
            for key, ph in (("prev_actions", self.prev_action), ("prev_rewards", self.prev_reward)):
                if key in items and ph is not None:
                    feed[ph] = items[key]
            for key, ph in zip(keys, self.state_inputs):
                feed[ph] = items[key]
            if SEQ_LENS in items and self.seq_lens is not None:
                feed[self.seq_lens] = items[SEQ_LENS]
        if keys and SEQ_LENS not in items:
            feed[self.seq_lens] = np.ones(len(items[keys[0]]), dtype=np.int32)
        return feed

    def flags_feed(self, explore: bool, timestep: Optional[int]) -> Dict[Any, Any]:
        """Feeds the explore flag (unless it is a fixed Python/numpy value) and the
        timestep (if given)."""
        feed: Dict[Any, Any] = {}
        if not isinstance(self.is_exploring, _FIXED_FLAG_TYPES):
            feed[self.is_exploring] = explore
        if timestep is not None:
            feed[self.timestep] = timestep
        return feed

    def log_likelihood_feed(
        self,
        actions: Any,
        obs_batch: Any,
        state_batches: Optional[Sequence[Any]],
        prev_action_batch: Any,
        prev_reward_batch: Any,
    ) -> Dict[Any, Any]:
        """The feed dict of ``compute_log_likelihoods`` (every row its own sequence).

        Raises:
            ValueError: If the number of state batches does not match the state
                placeholders.
        """
        state_batches = list(state_batches or [])
        check_state_batches(self.state_inputs, state_batches)
        if len(self.action_input.shape) == 2:
            actions = _flat_actions(actions, self.action_input)
        feed = {self.action_input: actions, self.obs: obs_batch}
        feed.update(zip(self.state_inputs, state_batches))
        if state_batches:
            feed[self.seq_lens] = np.ones(batch_length(obs_batch), dtype=np.int32)
        if self.prev_action is not None and prev_action_batch is not None:
            feed[self.prev_action] = prev_action_batch
        if self.prev_reward is not None and prev_reward_batch is not None:
            feed[self.prev_reward] = prev_reward_batch
        return feed

    def signature(
        self, extra_inputs: Mapping[str, Any], extra_outputs: Mapping[str, Any]
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """The named input and output tensors of the serving signature (RLlib 1.11's names)."""
        from rlpolicy.utils.framework import try_import_tf

        _, tf, _ = try_import_tf(error=True)
        inputs = dict(extra_inputs)
        inputs["observations"] = self.obs
        if self.seq_lens is not None:
            inputs[SEQ_LENS] = self.seq_lens
        if self.prev_action is not None:
            inputs["prev_action"] = self.prev_action
        if self.prev_reward is not None:
            inputs["prev_reward"] = self.prev_reward
        inputs["is_training"] = self.is_training
        if self.timestep is not None:
            inputs["timestep"] = self.timestep
        for state_input in self.state_inputs:
            inputs[state_input.name] = state_input
        outputs = dict(extra_outputs)
        for i, a in enumerate(tf.nest.flatten(self.sampled_action)):
            outputs[f"actions_{i}"] = a
        for state_output in self.state_outputs:
            outputs[state_output.name] = state_output
        return inputs, outputs


@dataclass(frozen=True, eq=False)
class LossGraph:
    """The loss graph of a graph-mode policy: inputs, losses, gradients, apply op.

    Attributes:
        loss_inputs: ``(column, placeholder)`` pairs as given.
        loss_input_dict: Column -> placeholder(s), plus ``state_in_i``.
        loss_input_dict_no_rnn: The same without state inputs and seq_lens.
        losses: The loss tensors (one per optimizer with
            ``_tf_policy_handles_more_than_one_loss``).
        loss: The first loss (RLlib's ``_loss``), or None.
        grads_and_vars: ``(grad, var)`` pairs (one list per loss with several).
        grads: The gradient tensors (one list per loss with several).
        apply_op: The op applying the gradients (None for tower copies).
        optimizers: The optimizers (one per loss with several).
        optimizer: The first optimizer (RLlib's ``_optimizer``), or None.
        state_inputs: The RNN state placeholders the loss reads.
        seq_lens: The sequence-length placeholder (with state inputs).
    """

    loss_inputs: List[Tuple[str, Any]] = field(default_factory=list)
    loss_input_dict: Dict[str, Any] = field(default_factory=dict)
    loss_input_dict_no_rnn: Dict[str, Any] = field(default_factory=dict)
    losses: List[Any] = field(default_factory=list)
    loss: Any = None
    grads_and_vars: Any = field(default_factory=list)
    grads: Any = field(default_factory=list)
    apply_op: Any = None
    optimizers: List[Any] = field(default_factory=list)
    optimizer: Any = None
    state_inputs: List[Any] = field(default_factory=list)
    seq_lens: Any = None

    @staticmethod
    def input_dicts(
        loss_inputs: Sequence[Tuple[str, Any]], state_inputs: Sequence[Any], seq_lens: Any
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """``(loss_input_dict, loss_input_dict_no_rnn)`` of ``loss_inputs``: the first adds
        ``state_in_i`` per state placeholder, the second drops state inputs and seq_lens."""
        with_rnn = dict(loss_inputs)
        rnn = list(state_inputs) + ([seq_lens] if seq_lens is not None else [])
        no_rnn = {k: v for k, v in with_rnn.items() if k != SEQ_LENS and not _same(v, rnn)}
        for i, ph in enumerate(state_inputs):
            with_rnn[f"state_in_{i}"] = ph
        return with_rnn, no_rnn

    def tower_inputs(self) -> List[Tuple[str, Any]]:
        """``(name, placeholder template)`` per tower input, in RLlib's order: the loss
        inputs without RNN, then ``state_in_i``, then ``seq_lens``."""
        items = list(self.loss_input_dict_no_rnn.items())
        items += [(f"state_in_{i}", ph) for i, ph in enumerate(self.state_inputs)]
        if self.state_inputs:
            items.append((SEQ_LENS, self.seq_lens))
        return items

    def feed(self, train_batch: Any) -> Dict[Any, Any]:
        """Maps every loss placeholder to its column of the (padded) ``train_batch``.

        Raises:
            ValueError: If the batch lacks a column the loss reads.
        """
        feed: Dict[Any, Any] = {}
        for key, placeholders in self.loss_input_dict.items():
            if key not in train_batch:
                raise ValueError(
                    f"the train batch has no column {key!r}, which the loss reads "
                    f"(loss inputs: {sorted(self.loss_input_dict)}); add it in "
                    "postprocessing"
                )
            value = _flat_actions(train_batch[key], placeholders)
            tree.map_structure(lambda ph, v: feed.__setitem__(ph, v), placeholders, value)
        if self.state_inputs:
            if SEQ_LENS not in train_batch:
                raise ValueError("the train batch of a recurrent policy needs a 'seq_lens' column")
            feed[self.seq_lens] = train_batch[SEQ_LENS]
        return feed


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
