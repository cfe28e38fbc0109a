"""TensorFlow graph-mode policy (RLlib 1.11's ``ray.rllib.policy.tf_policy``).

A ``TFPolicy`` is built from a ``tf1.Session`` and the tensors of its graph
(observation placeholder, sampled-action op, loss, ...). It never needs eager
execution to be disabled: every op it adds is created inside its session's
graph (``with self.graph.as_default():``), so graph-mode, eager TF and torch
policies can live in one process.

The graph's tensors are plain attributes under RLlib 1.11's names
(``_obs_input``, ``_state_inputs``, ``_loss_input_dict``, ``_grads``, ...).
Construction, the feed dicts and the run steps are this class's own methods;
the helpers beside it (``policy._tf``) take data: device planning and op
ordering (``graph``), feed helpers (``feeds``), weight assignment without graph
growth (``variables``), gradient clipping/averaging (``grads``) and export
(``export``).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple, Union

import gymnasium as gym
import numpy as np
import tree

from rlpolicy._core.config import read_checked
from rlpolicy._core.tower_buffers import (
    minibatch_rows,
    plan_exact_chunks,
    split_batch_for_devices,
)
from rlpolicy.models._weight_conversion import adapt_weights, weights_layout
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.policy._framework_policy import FrameworkPolicy, with_lock
from rlpolicy.policy._tf import export as tf_export
from rlpolicy.policy._tf.feeds import (
    FIXED_FLAG_TYPES,
    SEQ_LENS,
    batch_length,
    check_state_batches,
    columns_needed_by,
    flat_actions,
    state_keys,
    with_stats,
)
from rlpolicy.policy._tf.grads import clip_by_global_norm, flatten_grad_groups
from rlpolicy.policy._tf.graph import after_reads, build_after, is_keras_model, plan_tf_devices
from rlpolicy.policy._tf.unusable_optimizer import UnusableOptimizer
from rlpolicy.policy._tf.variables import TFVariables, initialize_uninitialized
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.rnn_sequencing import pad_batch_to_sequences_of_same_size
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils import force_list
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.exploration.exploration import Exploration
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY
from rlpolicy.utils.spaces.space_utils import normalize_action
from rlpolicy.utils.tf_run_builder import TFRunBuilder
from rlpolicy.utils.tf_utils import get_gpu_devices
from rlpolicy.utils.typing import LocalOptimizer, ModelGradients, TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()
logger = logging.getLogger(__name__)


@DeveloperAPI
class TFPolicy(FrameworkPolicy):
    """A policy whose model and loss are a TensorFlow (TF1-style) graph.

    Prefer ``build_tf_policy`` (or ``DynamicTFPolicy``) over building the
    graph by hand; constructing a ``TFPolicy`` directly from placeholders and
    ops works too. Inputs are batched: ``[BATCH_SIZE, ...]``.

    Attributes:
        graph: The policy's ``tf1.Graph`` (``sess.graph``).
        devices: One TF device string per tower: ``"/cpu:0"`` per (fake) CPU
            tower, ``"/gpu:<i>"`` per real GPU.
        model: The ModelV2 (or None).
        dist_class: The action distribution class (or None).
        exploration: The Exploration object (None if ``explore=False``).
        multi_gpu_tower_stacks: With several devices, the tower stack used
            by ``learn_on_loaded_batch`` (one entry per buffer, sharing one
            graph); empty otherwise.
    """

    _is_tower = False  # DynamicTFPolicy's per-device copies set True
    _is_training: Any = None  # made on first use (DynamicTFPolicy's before __init__)
    _action_feed_keys: Optional[Tuple[Tuple[int, ...], Any]] = None

    @DeveloperAPI
    def __init__(
        self,
        observation_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        config: TrainerConfigDict,
        sess: Any,
        obs_input: TensorType,
        sampled_action: TensorType,
        loss: Union[TensorType, List[TensorType]],
        loss_inputs: List[Tuple[str, TensorType]],
        model: Optional[ModelV2] = None,
        sampled_action_logp: Optional[TensorType] = None,
        action_input: Optional[TensorType] = None,
        log_likelihood: Optional[TensorType] = None,
        dist_inputs: Optional[TensorType] = None,
        dist_class: Optional[type] = None,
        state_inputs: Optional[List[TensorType]] = None,
        state_outputs: Optional[List[TensorType]] = None,
        prev_action_input: Optional[TensorType] = None,
        prev_reward_input: Optional[TensorType] = None,
        seq_lens: Optional[TensorType] = None,
        max_seq_len: int = 20,
        batch_divisibility_req: int = 1,
        update_ops: List[TensorType] = None,
        explore: Optional[TensorType] = None,
        timestep: Optional[TensorType] = None,
    ):
        """Initializes a TFPolicy from a session and tensors of its graph.

        Args:
            observation_space: Observation space of the policy.
            action_space: Action space of the policy.
            config: The policy config (completed from the common config).
            sess: The ``tf1.Session``; all tensors below live in ``sess.graph``.
            obs_input: Observation placeholder ``[BATCH_SIZE, obs...]``.
            sampled_action: The sampled-action op ``[BATCH_SIZE, action...]``.
            loss: Scalar loss tensor, or a list of them (one per optimizer
                with ``_tf_policy_handles_more_than_one_loss``); ``[]`` or
                None for a policy that does not learn (yet).
            loss_inputs: ``(column name, placeholder)`` per loss input; the
                column is read from train batches and fed into it.
            model: The ModelV2 (for variables, custom loss, h5 import).
            sampled_action_logp: Log-probability of ``sampled_action``.
            action_input: Action placeholder for log-likelihoods.
            log_likelihood: Log-likelihood op of ``action_input``; built from
                ``dist_class(dist_inputs)`` if None and both are given.
            dist_inputs: The action distribution inputs tensor.
            dist_class: The action distribution class.
            state_inputs: RNN state input placeholders.
            state_outputs: RNN state output tensors.
            prev_action_input: Previous-action placeholder.
            prev_reward_input: Previous-reward placeholder.
            seq_lens: Sequence-length placeholder ``[NUM_SEQUENCES]``;
                required with ``state_inputs``.
            max_seq_len: Maximum sequence length for RNN training.
            batch_divisibility_req: Train batches are padded to a multiple
                of this (non-RNN case).
            update_ops: Ops to run with each gradient step (default: the
                graph's UPDATE_OPS, e.g. batch-norm updates).
            explore: Placeholder for the ``explore`` flag; ``False`` means
                "create no Exploration object".
            timestep: Placeholder for the global sampling timestep.

        Raises:
            ValueError: If ``state_inputs`` are given without ``seq_lens``,
                or the model is not a ModelV2 / Keras model.
        """
        self.framework = "tf"
        super().__init__(observation_space, action_space, config)
        self.framework = "tf"
        self._sess = sess
        self.graph = sess.graph
        with self.graph.as_default():
            self.devices = plan_tf_devices(self.config, get_gpu_devices())
            infos = self.view_requirements.get(SampleBatch.INFOS)
            if infos is not None:
                infos.used_for_training = False
                infos.used_for_compute_actions = False
            self._set_model(model)
            self.exploration = self._create_exploration() if explore is not False else None
            self.dist_class = dist_class
            if state_inputs and seq_lens is None:
                raise ValueError("seq_lens tensor must be given if state inputs are defined")
            # The acting tensors, under RLlib 1.11's names.
            self._obs_input = obs_input
            self._prev_action_input = prev_action_input
            self._prev_reward_input = prev_reward_input
            self._sampled_action = sampled_action
            self._sampled_action_logp = sampled_action_logp
            self._action_input: Any = action_input
            self._dist_inputs = dist_inputs
            self._state_inputs = list(state_inputs or [])
            self._state_outputs = list(state_outputs or [])
            self._seq_lens = seq_lens
            self._get_is_training_placeholder()
            if explore is None:
                explore = tf1.placeholder_with_default(True, (), name="is_exploring")
            self._is_exploring = explore
            if timestep is None:
                timestep = tf1.placeholder_with_default(tf.zeros((), dtype=tf.int64), (), name="timestep")
            self._timestep = timestep
            self._sampled_action_prob = (
                tf.math.exp(sampled_action_logp) if sampled_action_logp is not None else None
            )
            self._max_seq_len = self.max_seq_len = max_seq_len
            self._batch_divisibility_req = self.batch_divisibility_req = batch_divisibility_req
            # Learning state (RLlib 1.11's names); the loss graph comes with the loss.
            self._loss_inputs: List[Tuple[str, Any]] = []
            self._loss_input_dict: Dict[str, Any] = {}
            self._loss_input_dict_no_rnn: Dict[str, Any] = {}
            self._losses: List[Any] = []
            self._loss: Any = None
            self._grads_and_vars: Any = []
            self._grads: Any = []
            self._apply_op: Any = None
            self._optimizers: List[Any] = []
            self._optimizer: Any = None  # RLlib: backward compatibility (the first optimizer)
            self._update_ops = update_ops
            self._stats_fetches: Dict[str, Any] = {}
            self._variables: Optional[TFVariables] = None  # the model's, built on first use
            self._optimizer_variables: Optional[TFVariables] = None  # the optimizers' state
            self._saver = None
            self._init_tower_buffers(len(self.devices), exact_supported=True)
            self.multi_gpu_tower_stacks: List[Any] = []
            losses = force_list(loss)
            if losses:
                self._initialize_loss(losses, loss_inputs)
            if (
                log_likelihood is None
                and dist_inputs is not None
                and dist_class is not None
                and action_input is not None
            ):
                log_likelihood = dist_class(dist_inputs, self.model).logp(action_input)
            self._log_likelihood = log_likelihood

    # ------------------------------------------------------------------ construction steps

    def _set_model(self, model: Any) -> None:
        if model is not None and not isinstance(model, ModelV2) and not is_keras_model(model):
            raise ValueError(
                "Model classes for TFPolicy other than `ModelV2|tf.keras.Model` "
                f"not allowed! You passed in {model}."
            )
        self.model = model
        if self.model is not None:
            self._update_model_view_requirements_from_init_state()

    def _get_is_training_placeholder(self) -> TensorType:
        if self._is_training is None:
            with self.graph.as_default():
                self._is_training = tf1.placeholder_with_default(False, (), name="is_training")
        return self._is_training

    def _initialize_loss(self, losses: List[TensorType], loss_inputs: List[Tuple[str, TensorType]]) -> None:
        """Builds loss inputs, the model's custom loss, optimizers, gradients and (except
        for tower copies) the apply op, variable initialization and optimizer state."""
        with self.graph.as_default():
            self._loss_inputs = list(loss_inputs)
            self._loss_input_dict = dict(loss_inputs)
            # Without the RNN inputs (state inputs, seq_lens); then state_in_i per state input.
            rnn = [*self._state_inputs, self._seq_lens]
            self._loss_input_dict_no_rnn = {
                k: v
                for k, v in self._loss_input_dict.items()
                if k != SEQ_LENS and not any(v is t for t in rnn if t is not None)
            }
            for i, ph in enumerate(self._state_inputs):
                self._loss_input_dict[f"state_in_{i}"] = ph
            if self.model is not None and not is_keras_model(self.model):
                losses = force_list(self.model.custom_loss(losses, self._loss_input_dict))
                self._stats_fetches.update({"model": self.model.metrics()})
            self._losses, self._loss = losses, (losses[0] if losses else None)
            if not self._optimizers:
                optimizers = force_list(self.optimizer())
                self._optimizers = optimizers
                self._optimizer = optimizers[0] if optimizers else None
            self._build_grads()
            if not self._is_tower:
                self._build_main_apply_op()
                initialize_uninitialized(self.get_session())
                self._refresh_optimizer_variables()

    def _build_grads(self) -> None:
        """``_grads_and_vars`` / ``_grads`` from ``self.gradients()``.

        Pairs without a gradient are dropped. Gradients are clipped by
        ``config["grad_clip"]`` (global norm, per loss), except in towers, whose
        stack clips the averaged gradient instead.
        """
        clip = None if self._is_tower else self.config.get("grad_clip")
        multi = self.config["_tf_policy_handles_more_than_one_loss"]
        if multi:
            groups = [
                [(g, v) for g, v in grp if g is not None]
                for grp in self.gradients(self._optimizers, self._losses)
            ]
        else:
            groups = [[(g, v) for g, v in self.gradients(self._optimizer, self._loss) if g is not None]]
        # Every variable read of the losses, stats and gradients before any update (a
        # departure: RLlib 1.11's updates can race those reads; docs/porting.md).
        reads = [*self._losses, *tree.flatten(self._stats_fetches), *(g for grp in groups for g, _ in grp)]
        groups = [clip_by_global_norm(after_reads(grp, reads), clip) for grp in groups]
        grads_and_vars: Any = groups if multi else groups[0]
        grads: Any = [[g for g, _ in grp] for grp in groups] if multi else [g for g, _ in groups[0]]
        self._grads_and_vars, self._grads = grads_and_vars, grads

    def _build_main_apply_op(self) -> None:
        """The single-device apply op, run after the update ops (e.g. batch norm).

        RLlib 1.11 builds it only on a single device; here it is built for every
        device layout, so ``learn_on_batch`` also works with several towers.
        """
        if not self._update_ops:
            self._update_ops = tf1.get_collection(
                tf1.GraphKeys.UPDATE_OPS, scope=tf1.get_variable_scope().name
            )
        multi = self.config["_tf_policy_handles_more_than_one_loss"]
        self._apply_op = build_after(
            self._update_ops,
            lambda: self.build_apply_op(
                optimizer=self._optimizers if multi else self._optimizer, grads_and_vars=self._grads_and_vars
            ),
        )

    def _refresh_optimizer_variables(self) -> None:
        """(Re)collects all optimizers' variables (e.g. Adam slots) for get/set_state."""
        with self.graph.as_default():
            opt_vars = [v for o in self._optimizers if hasattr(o, "variables") for v in o.variables()]
            self._optimizer_variables = TFVariables(opt_vars, self.get_session())

    # ------------------------------------------------------------------ small accessors

    def _tower_inputs(self) -> List[Tuple[str, Any]]:
        """``(name, placeholder template)`` per tower input, in RLlib's order: the loss
        inputs without RNN, then ``state_in_i``, then ``seq_lens``."""
        items = list(self._loss_input_dict_no_rnn.items())
        items += [(f"state_in_{i}", ph) for i, ph in enumerate(self._state_inputs)]
        if self._state_inputs:
            items.append((SEQ_LENS, self._seq_lens))
        return items

    def get_placeholder(self, name: str) -> Any:
        """Returns the action or loss input placeholder of column ``name``.

        Raises:
            ValueError: For a loss input before the loss was initialized.
            KeyError: If no loss input is called ``name``.
        """
        acting = {
            SampleBatch.OBS: self._obs_input,
            SampleBatch.PREV_ACTIONS: self._prev_action_input,
            SampleBatch.PREV_REWARDS: self._prev_reward_input,
        }
        if name in acting:
            return acting[name]
        inputs = self._loss_input_dict
        if not inputs:
            raise ValueError(
                "You need to populate `self._loss_input_dict` before `get_placeholder()` can be called"
            )
        if name not in inputs:
            raise KeyError(f"get_placeholder: no loss input {name!r}; loss inputs are {sorted(inputs)}")
        return inputs[name]

    def get_session(self) -> Any:
        """The policy's ``tf1.Session``."""
        return self._sess

    def loss_initialized(self) -> bool:
        """Whether the loss (and with it gradients and optimizers) was built."""
        return len(self._losses) > 0

    def variables(self) -> List[Any]:
        """All variables of the model (the graph's trainable ones without a model)."""
        if is_keras_model(self.model):
            return list(self.model.variables)
        if self.model is not None:
            return self.model.variables()
        with self.graph.as_default():
            return tf1.trainable_variables()

    # ------------------------------------------------------------------ acting

    # compute_actions / compute_actions_from_input_dict / compute_log_likelihoods:
    # FrameworkPolicy (lock, flattening, checks, explore/timestep), then these steps.

    def _compute_actions_step(
        self,
        input_dict: Any,
        state_batches: List[Any],
        explore: Any,
        timestep: Any,
        episodes: Optional[List[Any]],
    ) -> Tuple[Any, List[Any], Dict[str, Any]]:
        # (A wrong number of state batches is reported by the feed, naming the placeholders.)
        obs_batch = input_dict[SampleBatch.OBS]
        rows = (
            len(input_dict)
            if isinstance(input_dict, SampleBatch) and not isinstance(obs_batch, list)
            else batch_length(obs_batch)
        )
        builder = TFRunBuilder(self.get_session(), "compute_actions")
        to_fetch = self._build_compute_actions(
            builder, input_dict=input_dict, explore=explore, timestep=timestep
        )
        fetched = builder.get(to_fetch)
        self.global_timestep += rows
        return fetched

    def _build_compute_actions(
        self,
        builder: TFRunBuilder,
        *,
        input_dict: Any = None,
        obs_batch: Any = None,
        state_batches: Any = None,
        prev_action_batch: Any = None,
        prev_reward_batch: Any = None,
        episodes: Any = None,
        explore: Optional[bool] = None,
        timestep: Optional[int] = None,
    ) -> Tuple[Any, List[int], int]:
        """Adds the action fetches (sampled actions, state outs, extra fetches) and feeds."""
        explore = explore if explore is not None else self.config["explore"]
        timestep = timestep if timestep is not None else self.global_timestep
        before = getattr(self.exploration, "before_compute_actions", None)
        if before is not None and getattr(before, "__func__", None) is not Exploration.before_compute_actions:
            before(
                timestep=timestep, explore=explore, tf_sess=self.get_session()
            )  # (the base hook does nothing)
        to_fetch = [self._sampled_action] + self._state_outputs + [self.extra_compute_action_fetches()]
        builder.add_feed_dict(self.extra_compute_action_feed_dict())
        builder.add_feed_dict(self._action_feed_dict(input_dict, to_fetch))
        if not isinstance(self._is_exploring, FIXED_FLAG_TYPES):
            builder.add_feed_dict({self._is_exploring: explore})
        if timestep is not None:
            builder.add_feed_dict({self._timestep: timestep})
        fetches = builder.add_fetches(to_fetch)
        return fetches[0], fetches[1:-1], fetches[-1]

    def _action_feed_dict(self, input_dict: Any, fetches: List[Any]) -> Dict[Any, Any]:
        """The acting feed of ``input_dict`` for ``fetches``.

        A DynamicTFPolicy (which has the placeholder input dict ``_input_dict``)
        feeds every column whose placeholder the fetches depend on (found once
        per set of fetches); other columns are ignored. A hand-built TFPolicy
        feeds obs, prev actions/rewards, ``seq_lens`` and the ``state_in_i``
        columns. With state inputs but no ``seq_lens`` column, every row is its
        own sequence (``seq_lens`` of ones).

        Raises:
            ValueError: If the number of ``state_in_i`` columns does not match
                the state placeholders.
        """
        keys = state_keys(input_dict)
        if keys or self._state_inputs:
            check_state_batches(self._state_inputs, keys)
        # dict.items skips SampleBatch's access tracking (acting must not count as a
        # loss access) and its get-interceptor.
        items = dict(dict.items(input_dict))
        feed: Dict[Any, Any] = {}
        placeholders = getattr(self, "_input_dict", None)
        if placeholders is not None:
            roots = [f for f in tree.flatten(fetches) if f is not None]
            ids = tuple(id(r) for r in roots)
            cached = self._action_feed_keys
            if cached is None or cached[0] != ids:
                cached = self._action_feed_keys = (ids, columns_needed_by(placeholders, roots))
            for key, value in items.items():
                if key in cached[1]:
                    # Up to the placeholders' structure: a Python list fed to one placeholder
                    # is one value (its real shape shows in feed errors), not a nest of rows.
                    phs: Any = dict.__getitem__(placeholders, key)
                    tree.map_structure_up_to(phs, lambda ph, v: feed.__setitem__(ph, v), phs, value)
        else:
            feed[self._obs_input] = items["obs"]
            for key, ph in (
                ("prev_actions", self._prev_action_input),
                ("prev_rewards", self._prev_reward_input),
            ):
                if key in items and ph is not None:
                    feed[ph] = items[key]
            for key, ph in zip(keys, self._state_inputs):
                feed[ph] = items[key]
            if SEQ_LENS in items and self._seq_lens is not None:
                feed[self._seq_lens] = items[SEQ_LENS]
        if keys and SEQ_LENS not in items:
            feed[self._seq_lens] = np.ones(len(items[keys[0]]), dtype=np.int32)
        return feed

    def _log_likelihoods_step(
        self,
        actions: Any,
        obs_batch: Any,
        state_batches: Optional[List[Any]],
        prev_action_batch: Any,
        prev_reward_batch: Any,
        actions_normalized: bool,
    ) -> np.ndarray:
        if self._log_likelihood is None:
            raise ValueError("Cannot compute log-prob/likelihood w/o a self._log_likelihood op!")
        if self.exploration is not None:
            self.exploration.before_compute_actions(explore=False, tf_sess=self.get_session())
        builder = TFRunBuilder(self.get_session(), "compute_log_likelihoods")
        if actions_normalized is False and self.config["normalize_actions"]:
            actions = normalize_action(actions, self.action_space_struct)
        state_batches = list(state_batches or [])
        check_state_batches(self._state_inputs, state_batches)
        if len(self._action_input.shape) == 2:
            actions = flat_actions(actions, self._action_input)
        feed = {self._action_input: actions, self._obs_input: obs_batch}
        feed.update(zip(self._state_inputs, state_batches))
        if state_batches:  # every row its own sequence
            feed[self._seq_lens] = np.ones(batch_length(obs_batch), dtype=np.int32)
        if self._prev_action_input is not None and prev_action_batch is not None:
            feed[self._prev_action_input] = prev_action_batch
        if self._prev_reward_input is not None and prev_reward_batch is not None:
            feed[self._prev_reward_input] = prev_reward_batch
        builder.add_feed_dict(feed)
        fetches = builder.add_fetches([self._log_likelihood])
        return builder.get(fetches)[0]

    # ------------------------------------------------------------------ learning

    # learn_on_batch: FrameworkPolicy (lock, _train_batch, learn callback), then this step.

    def _learn_step(self, batch: SampleBatch) -> Dict[str, Any]:
        builder = TFRunBuilder(self.get_session(), "learn_on_batch")
        fetches = self._build_learn_on_batch(builder, batch)
        return builder.get(fetches)

    @with_lock
    @override(Policy)
    def compute_gradients(
        self, postprocessed_batch: SampleBatch
    ) -> Tuple[ModelGradients, Dict[str, TensorType]]:
        self._check_can_learn("compute_gradients")
        postprocessed_batch = self.obs_flattener.input_dict(postprocessed_batch)
        postprocessed_batch.set_training(True)
        builder = TFRunBuilder(self.get_session(), "compute_gradients")
        fetches = self._build_compute_gradients(builder, postprocessed_batch)
        return builder.get(fetches)

    @with_lock
    @override(Policy)
    def apply_gradients(self, gradients: ModelGradients) -> None:
        self._check_can_learn("apply_gradients")
        builder = TFRunBuilder(self.get_session(), "apply_gradients")
        fetches = self._build_apply_gradients(builder, gradients)
        builder.get(fetches)

    def _check_can_learn(self, what: str) -> None:
        if not self.loss_initialized():
            raise ValueError(
                f"{type(self).__name__}.{what}: the policy has no loss; pass `loss` "
                "and `loss_inputs` to TFPolicy.__init__ (or use DynamicTFPolicy)"
            )

    def _build_grad_step(self, builder: TFRunBuilder, batch: SampleBatch, first_fetch: Any) -> List[Any]:
        """Feeds ``batch`` into the loss; fetches ``[first_fetch, grad-and-stats fetches]``."""
        builder.add_feed_dict(self.extra_compute_grad_feed_dict())
        builder.add_feed_dict(self._get_loss_inputs_dict(batch, shuffle=False))
        return builder.add_fetches([first_fetch, self._get_grad_and_stats_fetches()])

    def _build_compute_gradients(
        self, builder: TFRunBuilder, postprocessed_batch: SampleBatch
    ) -> Tuple[int, int]:
        fetches = self._build_grad_step(builder, postprocessed_batch, self._grads)
        return fetches[0], fetches[1]

    def _build_apply_gradients(self, builder: TFRunBuilder, gradients: ModelGradients) -> int:
        """Feeds ``gradients`` into the gradient tensors and fetches the apply op.

        Raises:
            ValueError: If ``gradients`` does not have one value per gradient tensor.
        """
        multi = self.config["_tf_policy_handles_more_than_one_loss"]
        targets = flatten_grad_groups(self._grads, multi)
        values = flatten_grad_groups(gradients, multi)
        if len(values) != len(targets):
            raise ValueError(
                f"apply_gradients got {len(values)} gradients for the "
                f"{len(targets)} gradient tensors of this policy; pass what "
                "compute_gradients returned"
            )
        builder.add_feed_dict({self._is_training: True})
        builder.add_feed_dict(dict(zip(targets, values)))
        return builder.add_fetches([self._apply_op])[0]

    def _build_learn_on_batch(self, builder: TFRunBuilder, postprocessed_batch: SampleBatch) -> int:
        return self._build_grad_step(builder, postprocessed_batch, self._apply_op)[1]

    def _get_grad_and_stats_fetches(self) -> Dict[str, Any]:
        """``extra_compute_grad_fetches()`` with the stats fetches merged into its
        learner stats.

        Raises:
            ValueError: If the extra fetches have no learner-stats entry.
        """
        return with_stats(self.extra_compute_grad_fetches(), self._stats_fetches)

    def _get_loss_inputs_dict(self, train_batch: SampleBatch, shuffle: bool) -> Dict[Any, Any]:
        """Pads ``train_batch`` (RNNs, divisibility) and maps loss placeholders to its columns."""
        if not isinstance(train_batch, SampleBatch):
            train_batch = SampleBatch(train_batch)
        if not train_batch.zero_padded:
            self._pad_for_loss(train_batch, shuffle)
        train_batch.set_training(True)
        feed: Dict[Any, Any] = {}
        for key, placeholders in self._loss_input_dict.items():
            if key not in train_batch:
                raise ValueError(
                    f"the train batch has no column {key!r}, which the loss reads "
                    f"(loss inputs: {sorted(self._loss_input_dict)}); add it in "
                    "postprocessing"
                )
            value = flat_actions(train_batch[key], placeholders)
            tree.map_structure(lambda ph, v: feed.__setitem__(ph, v), placeholders, value)
        if self._state_inputs:
            if SEQ_LENS not in train_batch:
                raise ValueError("the train batch of a recurrent policy needs a 'seq_lens' column")
            feed[self._seq_lens] = train_batch[SEQ_LENS]
        return feed

    # ------------------------------------------------------------------ multi-tower buffers

    @property
    def _single_device(self) -> bool:
        # RLlib 1.11 takes this shortcut for one CPU only; with batches fed per
        # step, a single GPU behaves the same way.
        return len(self.devices) == 1

    # load_batch_into_buffer / learn_on_loaded_batch: FrameworkPolicy, then these steps.

    def _device_slices(self, batch: SampleBatch) -> List[Any]:
        if self._single_device and not self._exact_chunks:
            # RLlib 1.11: one device keeps the batch as is; learn_on_batch pads each slice.
            return [batch]
        if not self.multi_gpu_tower_stacks:
            raise ValueError(
                f"{type(self).__name__} learning on {self.devices} (or with config['_deterministic_towers']) "
                "needs a multi-GPU tower stack; implement copy() (DynamicTFPolicy does) or use num_gpus=0"
            )
        if self._exact_chunks:
            # config["_deterministic_towers"]: the fixed chunk plan, each chunk padded alone.
            slices = plan_exact_chunks(
                batch, minibatch_rows(self.config), self._exact_chunks, len(self.devices)
            )
            return [s.map_batches(self._padded) for s in slices]
        return split_batch_for_devices(batch, len(self.devices), self._pad_for_loss)

    def _learn_on_device_batches(self, batches: List[Any], buffer_index: int) -> Dict[str, Any]:
        if self._exact_chunks:
            return self.multi_gpu_tower_stacks[buffer_index].optimize_exact(self.get_session(), batches)
        if self._single_device:
            return self.learn_on_batch(batches[0])
        return self.multi_gpu_tower_stacks[buffer_index].optimize(self.get_session(), batches)

    def _padded(self, batch: SampleBatch) -> SampleBatch:
        """``batch`` zero-padded in place (``_pad_for_loss``) and returned."""
        self._pad_for_loss(batch)
        return batch

    def _pad_for_loss(self, batch: SampleBatch, shuffle: bool = False) -> None:
        """Zero-pads ``batch`` in place (RNN sequences, batch divisibility)."""
        pad_batch_to_sequences_of_same_size(
            batch,
            max_seq_len=self._max_seq_len,
            shuffle=shuffle,
            batch_divisibility_req=self._batch_divisibility_req,
            feature_keys=list(self._loss_input_dict_no_rnn.keys()),
            view_requirements=self.view_requirements,
        )

    # ------------------------------------------------------------------ weights and state

    @override(Policy)
    def get_exploration_state(self) -> Dict[str, TensorType]:
        if self.exploration is None:
            return {}
        return self.exploration.get_state(sess=self.get_session())

    def _weights_holder(self) -> TFVariables:
        if self._variables is None:  # built once: later calls add no ops to the graph
            self._variables = TFVariables(self.variables(), self.get_session())
        return self._variables

    @with_lock
    @override(Policy)
    def get_weights(self) -> Dict[str, np.ndarray]:
        return self._weights_holder().get_weights()

    @with_lock
    @override(Policy)
    def set_weights(self, weights: Dict[str, np.ndarray]) -> None:
        """Assigns a ``get_weights`` dict (or a list, one value per variable).

        A catalog model's torch ``get_weights()`` or eager TF
        ``get_weights(as_dict=True)`` dict is taken too: it is converted to
        this model's keys and layout first (``rlpolicy.models.convert_weights``).

        Raises:
            ValueError: If a dict misses or adds keys (RLlib 1.11 silently
                assigns the matching subset), or a value has the wrong shape;
                nothing is assigned then.
        """
        holder = self._weights_holder()
        if (
            isinstance(weights, dict)
            and weights
            and set(weights) != set(holder.keys())
            and weights_layout(weights) not in ("tf", "unknown")
        ):
            weights = adapt_weights(weights, holder.get_weights(), "tf")
        holder.set_weights(weights)

    # get_state / set_state: FrameworkPolicy, then these steps.

    def _optimizer_state(self) -> Optional[List[np.ndarray]]:
        holder = self._optimizer_variables
        if holder is None or not holder.variables:
            return None
        return list(holder.get_weights().values())

    def _check_optimizer_state(self, values: Any) -> Optional[List[Any]]:
        if values is None:
            return None
        if self._optimizer_variables is None:
            raise ValueError(
                "state['_optimizer_variables'] is given but this policy has no "
                "optimizer variables (its loss is not initialized)"
            )
        values = list(values)
        self._optimizer_variables.checked(values, "state['_optimizer_variables']")
        return values

    def _set_optimizer_state(self, checked: List[Any]) -> None:
        if self._optimizer_variables is not None:
            self._optimizer_variables.set_weights(checked)

    def _set_exploration_state(self, exploration_state: Any) -> None:
        if self.exploration is not None:
            self.exploration.set_state(state=exploration_state, sess=self.get_session())

    @override(Policy)
    def is_recurrent(self) -> bool:
        return len(self._state_inputs) > 0

    @override(Policy)
    def num_state_tensors(self) -> int:
        return len(self._state_inputs)

    @override(Policy)
    def get_initial_state(self) -> List[TensorType]:
        if self.model is None or not hasattr(self.model, "get_initial_state"):
            return []
        return [np.asarray(s) for s in self.model.get_initial_state()]

    # ------------------------------------------------------------------ saving

    @override(Policy)
    def export_checkpoint(
        self, export_dir: str, filename_prefix: str = "model", policy_state: Optional[Dict[str, Any]] = None
    ) -> None:
        """Saves all graph variables with ``tf1.train.Saver`` to ``export_dir/filename_prefix``.

        Next to the TF checkpoint (``<prefix>.index``, ``<prefix>.data-*``,
        ``<prefix>.meta``, ``checkpoint``) the pickle-free policy checkpoint
        of ``Policy.export_checkpoint`` is written too, so
        ``Policy.from_checkpoint`` can rebuild the policy.
        """
        with self.graph.as_default():
            if self._saver is None:
                self._saver = tf1.train.Saver()
        tf_export.save_checkpoint(self.get_session(), self._saver, export_dir, filename_prefix)
        super().export_checkpoint(export_dir, filename_prefix, policy_state=policy_state)

    @override(Policy)
    def export_model(self, export_dir: str, onnx: Optional[int] = None, pipeline: bool = False) -> None:
        """Exports the action graph for serving: a SavedModel (signature
        "serving_default"), or with ``onnx`` (an opset) ``saved_model.onnx``.

        The ONNX model (via tf2onnx; recurrent policies included) names its
        inputs and outputs like the signature's graph tensors, e.g.
        ``"obs:0"``, ``"state_in_0:0"`` and ``"seq_lens:0"``.

        With ``pipeline=True``, the whole action pipeline instead (raw
        observations to env actions, deterministic and noise-sampled):
        ``pipeline_savedmodel/`` or ``pipeline.onnx`` plus ``pipeline.json``,
        checked against ``compute_actions(explore=False)`` before they are
        written (``rlpolicy.policy._tf.pipeline_export``, docs/export_pipeline.md).

        Raises:
            FileExistsError: If the SavedModel directory is not empty.
            RuntimeError: With ``onnx`` if tf2onnx is not installed.
        """
        if pipeline:
            from rlpolicy.policy._tf import pipeline_export

            tensors = pipeline_export.GraphActingTensors(
                self._obs_input,
                self._dist_inputs,
                list(self._state_inputs or []),
                list(self._state_outputs or []),
                self._seq_lens,
                {self._is_exploring: False, self._is_training: False, self._timestep: 0},
            )
            self._export_action_pipeline(
                pipeline_export.export_graph_pipeline,
                export_dir,
                onnx,
                None,
                None,
                session=self.get_session(),
                tensors=tensors,
            )
            return
        with self.graph.as_default():
            signature_def_map = self._build_signature_def()
        if onnx:
            tf_export.save_onnx(self.get_session(), export_dir, signature_def_map, onnx)
        else:
            tf_export.save_saved_model(self.get_session(), export_dir, signature_def_map)

    @override(Policy)
    def import_model_from_h5(self, import_file: str) -> None:
        if self.model is None:
            raise NotImplementedError("No `self.model` to import into!")
        with self.graph.as_default(), self.get_session().as_default():
            return self.model.import_from_h5(import_file)

    @DeveloperAPI
    def copy(self, existing_inputs: List[Tuple[str, Any]]) -> "TFPolicy":
        """Creates a copy of self reading from ``existing_inputs`` (for multi-GPU towers).

        Not implemented by the base class (DynamicTFPolicy implements it).
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ overridable hooks

    @DeveloperAPI
    def extra_compute_action_feed_dict(self) -> Dict[TensorType, TensorType]:
        """Extra feeds for the compute-actions ``session.run`` (default: none)."""
        return {}

    @DeveloperAPI
    def extra_compute_action_fetches(self) -> Dict[str, TensorType]:
        """Extra values fetched by compute_actions: action prob/logp and dist inputs."""
        extra_fetches = {}
        if self._sampled_action_logp is not None:
            extra_fetches[SampleBatch.ACTION_PROB] = self._sampled_action_prob
            extra_fetches[SampleBatch.ACTION_LOGP] = self._sampled_action_logp
        if self._dist_inputs is not None:
            extra_fetches[SampleBatch.ACTION_DIST_INPUTS] = self._dist_inputs
        return extra_fetches

    @DeveloperAPI
    def extra_compute_grad_feed_dict(self) -> Dict[TensorType, TensorType]:
        """Extra feeds for the gradient ``session.run``: ``is_training=True``."""
        return {self._get_is_training_placeholder(): True}

    @DeveloperAPI
    def extra_compute_grad_fetches(self) -> Dict[str, Any]:
        """Extra values fetched by compute_gradients (default: empty learner stats)."""
        return {LEARNER_STATS_KEY: {}}

    @DeveloperAPI
    def optimizer(self) -> Any:
        """The optimizer: ``tf1.train.AdamOptimizer`` at ``config["lr"]``.

        A bad ``lr`` (e.g. None, where the policy brings its own optimizers) fails
        only when this optimizer is used, as in RLlib 1.11: it is then an
        ``UnusableOptimizer`` that raises the config error on any use."""
        if hasattr(self, "config") and "lr" in self.config:
            try:
                lr = read_checked(self.config, "lr")
            except ValueError as err:
                return UnusableOptimizer(
                    f"{type(self).__name__}: the default optimizer() cannot be used: {err}; "
                    f"set config['lr'] or override optimizer()/optimizer_fn"
                )
            return tf1.train.AdamOptimizer(learning_rate=lr)
        return tf1.train.AdamOptimizer()

    @DeveloperAPI
    def gradients(
        self,
        optimizer: Union[LocalOptimizer, List[LocalOptimizer]],
        loss: Union[TensorType, List[TensorType]],
    ) -> Union[List[ModelGradients], List[List[ModelGradients]]]:
        """``(grad, var)`` pairs of the loss(es): one list, or one per optimizer/loss
        with ``_tf_policy_handles_more_than_one_loss`` (RLlib 1.11 forgets to
        return that list; it is returned here)."""
        optimizers = force_list(optimizer)
        losses = force_list(loss)
        if self.config["_tf_policy_handles_more_than_one_loss"]:
            return [optim.compute_gradients(loss_) for optim, loss_ in zip(optimizers, losses)]
        return optimizers[0].compute_gradients(losses[0])

    @DeveloperAPI
    def build_apply_op(
        self,
        optimizer: Union[LocalOptimizer, List[LocalOptimizer]],
        grads_and_vars: Union[ModelGradients, List[ModelGradients]],
    ) -> Any:
        """The op applying ``grads_and_vars`` with the optimizer(s) (one group per
        optimizer with ``_tf_policy_handles_more_than_one_loss``)."""
        optimizers = force_list(optimizer)
        step = tf1.train.get_or_create_global_step()
        if self.config["_tf_policy_handles_more_than_one_loss"]:
            return tf.group(
                [
                    optim.apply_gradients(grads_and_vars[i], global_step=step)
                    for i, optim in enumerate(optimizers)
                ]
            )
        return optimizers[0].apply_gradients(grads_and_vars, global_step=step)

    # ------------------------------------------------------------------ export signature

    def _build_signature_def(self) -> Dict[str, Any]:
        """The "serving_default" signature: observations (+ RNN/prev inputs) -> actions."""
        inputs = dict(self._extra_input_signature_def())
        inputs["observations"] = self._obs_input
        if self._seq_lens is not None:
            inputs[SEQ_LENS] = self._seq_lens
        if self._prev_action_input is not None:
            inputs["prev_action"] = self._prev_action_input
        if self._prev_reward_input is not None:
            inputs["prev_reward"] = self._prev_reward_input
        inputs["is_training"] = self._is_training
        if self._timestep is not None:
            inputs["timestep"] = self._timestep
        for state_input in self._state_inputs:
            inputs[state_input.name] = state_input
        outputs = dict(self._extra_output_signature_def())
        for i, a in enumerate(tf.nest.flatten(self._sampled_action)):
            outputs[f"actions_{i}"] = a
        for state_output in self._state_outputs:
            outputs[state_output.name] = state_output
        return tf_export.build_signature_def_map(inputs, outputs)

    def _extra_input_signature_def(self) -> Dict[str, Any]:
        return {k.name: k for k in self.extra_compute_action_feed_dict().keys()}

    def _extra_output_signature_def(self) -> Dict[str, Any]:
        return dict(self.extra_compute_action_fetches())


# RLlib 1.11 defines these two TF mixins in this module; rlpolicy keeps them in tf_mixins.
from rlpolicy.policy.tf_mixins import EntropyCoeffSchedule, LearningRateSchedule  # noqa: E402,F401

# Further names RLlib 1.11 defines or imports in this module (1.x client code imports
# them from here); resolved on first access, see rlpolicy/utils/_lazy.py.
from rlpolicy.utils._lazy import lazy_module_attrs  # noqa: E402

_RLLIB_1_11_NAMES: Dict[str, Any] = {
    "Deprecated": "rlpolicy.utils.deprecation:Deprecated",
    "deprecation_warning": "rlpolicy.utils.deprecation:deprecation_warning",
    "get_variable": "rlpolicy.utils.framework:get_variable",
    "PiecewiseSchedule": "rlpolicy.utils.schedules:PiecewiseSchedule",
    "summarize": "rlpolicy.utils.debug:summarize",
}
__getattr__ = lazy_module_attrs(__name__, _RLLIB_1_11_NAMES)
