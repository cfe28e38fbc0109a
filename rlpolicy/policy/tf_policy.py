"""TensorFlow graph-mode policy (RLlib 1.11's ``ray.rllib.policy.tf_policy``).

A ``TFPolicy`` is built from a ``tf1.Session`` and the tensors of its graph
(observation placeholder, sampled-action op, loss, ...). It never needs eager
execution to be disabled: every op it adds is created inside its session's
graph (``with self.graph.as_default():``), so graph-mode, eager TF and torch
policies can live in one process.

Shared pieces: the device plan (``_core.devices``), tower buffers
(``_core.tower_buffers``), weight assignment without graph growth
(``_core.tf_variables``), gradient averaging/clipping (``_core.tf_grads``) and
export (``_core.tf_export``). Feeding batches into placeholders lives in
``_core.tf_feeds``, the ``session.run`` steps (acting, gradients, learning)
in ``_core.tf_run`` and the construction steps in ``_core.tf_setup``.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple, Union

import gymnasium as gym
import numpy as np

from rlpolicy._core import input_checks, obs_prep, tf_export, tf_feeds, tf_run, tf_setup
from rlpolicy._core.config import read_checked
from rlpolicy._core.locking import locked
from rlpolicy._core.tf_variables import TFVariables, check_weights_dict
from rlpolicy._core.tower_buffers import device_minibatch_size
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.rnn_sequencing import pad_batch_to_sequences_of_same_size
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils import force_list
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY
from rlpolicy.utils.spaces.space_utils import normalize_action
from rlpolicy.utils.tf_run_builder import TFRunBuilder
from rlpolicy.utils.tf_utils import get_gpu_devices
from rlpolicy.utils.typing import LocalOptimizer, ModelGradients, TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()
logger = logging.getLogger(__name__)



@DeveloperAPI
class TFPolicy(Policy):
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

    @DeveloperAPI
    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: TrainerConfigDict, sess: "tf1.Session", obs_input: TensorType,
                 sampled_action: TensorType, loss: Union[TensorType, List[TensorType]],
                 loss_inputs: List[Tuple[str, TensorType]], model: Optional[ModelV2] = None,
                 sampled_action_logp: Optional[TensorType] = None,
                 action_input: Optional[TensorType] = None,
                 log_likelihood: Optional[TensorType] = None,
                 dist_inputs: Optional[TensorType] = None, dist_class: Optional[type] = None,
                 state_inputs: Optional[List[TensorType]] = None,
                 state_outputs: Optional[List[TensorType]] = None,
                 prev_action_input: Optional[TensorType] = None,
                 prev_reward_input: Optional[TensorType] = None,
                 seq_lens: Optional[TensorType] = None, max_seq_len: int = 20,
                 batch_divisibility_req: int = 1, update_ops: List[TensorType] = None,
                 explore: Optional[TensorType] = None, timestep: Optional[TensorType] = None):
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
            self.devices = self._plan_tf_devices()
            self._disable_infos_view_requirement()
            self._set_model(model)
            self.exploration = self._create_exploration() if explore is not False else None
            tf_setup.set_action_tensors(
                self, obs_input=obs_input, sampled_action=sampled_action,
                sampled_action_logp=sampled_action_logp, action_input=action_input,
                dist_inputs=dist_inputs, dist_class=dist_class, state_inputs=state_inputs,
                state_outputs=state_outputs, prev_action_input=prev_action_input,
                prev_reward_input=prev_reward_input, seq_lens=seq_lens, explore=explore,
                timestep=timestep)
            self._max_seq_len = max_seq_len
            self.max_seq_len = max_seq_len
            self._batch_divisibility_req = batch_divisibility_req
            self.batch_divisibility_req = batch_divisibility_req
            self._init_learning_state(update_ops)
            losses = force_list(loss)
            if losses:
                self._initialize_loss(losses, loss_inputs)
            self._log_likelihood = log_likelihood
            if self._log_likelihood is None and self._dist_inputs is not None \
                    and self.dist_class is not None and self._action_input is not None:
                self._log_likelihood = self.dist_class(
                    self._dist_inputs, self.model).logp(self._action_input)

    # ------------------------------------------------------------------ construction steps

    def _plan_tf_devices(self) -> List[str]:
        """RLlib 1.11's TF device choice: "/cpu:0" per fake or CPU tower, "/gpu:i" per GPU."""
        return tf_setup.plan_tf_devices(self.config, get_gpu_devices())

    def _disable_infos_view_requirement(self) -> None:
        infos = self.view_requirements.get(SampleBatch.INFOS)
        if infos is not None:
            infos.used_for_training = False
            infos.used_for_compute_actions = False

    def _set_model(self, model: Any) -> None:
        if model is not None and not isinstance(model, ModelV2) \
                and not tf_setup.is_keras_model(model):
            raise ValueError("Model classes for TFPolicy other than `ModelV2|tf.keras.Model` "
                             f"not allowed! You passed in {model}.")
        self.model = model
        if self.model is not None:
            self._update_model_view_requirements_from_init_state()

    def _init_learning_state(self, update_ops: Optional[List[TensorType]]) -> None:
        tf_setup.init_learning_state(self, update_ops)

    # ------------------------------------------------------------------ small accessors

    def get_placeholder(self, name: str) -> "tf1.placeholder":
        """Returns the action or loss input placeholder of column ``name``.

        Raises:
            ValueError: For a loss input before the loss was initialized.
            KeyError: If no loss input is called ``name``.
        """
        return tf_setup.placeholder_of(self, name)

    def get_session(self) -> "tf1.Session":
        """The policy's ``tf1.Session``."""
        return self._sess

    def loss_initialized(self) -> bool:
        """Whether the loss (and with it gradients and optimizers) was built."""
        return len(self._losses) > 0

    def variables(self) -> List[Any]:
        """All variables of the model (the graph's trainable ones without a model)."""
        if tf_setup.is_keras_model(self.model):
            return list(self.model.variables)
        if self.model is not None:
            return self.model.variables()
        with self.graph.as_default():
            return tf1.trainable_variables()

    # ------------------------------------------------------------------ acting

    @locked
    @override(Policy)
    def compute_actions(self, obs_batch: Any, state_batches: Optional[List[Any]] = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        info_batch: Optional[Dict[str, list]] = None,
                        episodes: Optional[List[Any]] = None, explore: Optional[bool] = None,
                        timestep: Optional[int] = None,
                        **kwargs) -> Tuple[Any, List[Any], Dict[str, Any]]:
        # (A wrong number of state batches is reported by the feed, naming the placeholders.)
        obs_batch = obs_prep.flatten_obs_batch(self, obs_batch)
        input_checks.check_obs(self, obs_batch, "compute_actions")
        input_checks.check_state_batches(self, state_batches, "compute_actions")
        input_checks.check_prev_inputs(
            self, [c for c, v in (("prev_actions", prev_action_batch), ("prev_rewards", prev_reward_batch))
                   if v is not None], "compute_actions")
        input_dict = {SampleBatch.OBS: obs_batch, "is_training": False}
        for i, s in enumerate(state_batches or []):
            input_dict[f"state_in_{i}"] = s
        if prev_action_batch is not None:
            input_dict[SampleBatch.PREV_ACTIONS] = prev_action_batch
        if prev_reward_batch is not None:
            input_dict[SampleBatch.PREV_REWARDS] = prev_reward_batch
        return tf_run.run_compute_actions(self, "compute_actions", input_dict, explore, timestep,
                                          rows=tf_feeds.batch_length(obs_batch))

    @locked
    @override(Policy)
    def compute_actions_from_input_dict(self, input_dict: Union[SampleBatch, Dict[str, Any]],
                                        explore: Optional[bool] = None,
                                        timestep: Optional[int] = None,
                                        episodes: Optional[List[Any]] = None,
                                        **kwargs) -> Tuple[Any, List[Any], Dict[str, Any]]:
        input_dict = obs_prep.flatten_input_dict(self, input_dict)
        input_checks.check_acting_input_dict(self, input_dict, "compute_actions_from_input_dict")
        input_dict["is_training"] = False
        obs_batch = input_dict[SampleBatch.OBS]
        rows = (len(input_dict) if isinstance(input_dict, SampleBatch)
                and not isinstance(obs_batch, list) else tf_feeds.batch_length(obs_batch))
        return tf_run.run_compute_actions(self, "compute_actions_from_input_dict", input_dict,
                                          explore, timestep, rows=rows)

    @locked
    @override(Policy)
    def compute_log_likelihoods(self, actions: Any, obs_batch: Any,
                                state_batches: Optional[List[Any]] = None,
                                prev_action_batch: Any = None, prev_reward_batch: Any = None,
                                actions_normalized: bool = True) -> np.ndarray:
        if self._log_likelihood is None:
            raise ValueError("Cannot compute log-prob/likelihood w/o a self._log_likelihood op!")
        if self.exploration is not None:
            self.exploration.before_compute_actions(explore=False, tf_sess=self.get_session())
        builder = TFRunBuilder(self.get_session(), "compute_log_likelihoods")
        obs_batch = obs_prep.flatten_obs_batch(self, obs_batch)
        if actions_normalized is False and self.config["normalize_actions"]:
            actions = normalize_action(actions, self.action_space_struct)
        builder.add_feed_dict(tf_feeds.log_likelihood_feed(
            self, actions, obs_batch, state_batches, prev_action_batch, prev_reward_batch))
        fetches = builder.add_fetches([self._log_likelihood])
        return builder.get(fetches)[0]

    # ------------------------------------------------------------------ learning

    @locked
    @override(Policy)
    def learn_on_batch(self, postprocessed_batch: SampleBatch) -> Dict[str, TensorType]:
        self._check_loss_initialized("learn_on_batch")
        postprocessed_batch = obs_prep.flatten_input_dict(self, postprocessed_batch)
        input_checks.check_train_batch(self, postprocessed_batch, "learn_on_batch")
        postprocessed_batch.set_training(True)
        builder = TFRunBuilder(self.get_session(), "learn_on_batch")
        learn_stats: Dict[str, Any] = {}
        self._run_learn_callback(postprocessed_batch, learn_stats)
        fetches = self._build_learn_on_batch(builder, postprocessed_batch)
        stats = builder.get(fetches)
        stats.update({"custom_metrics": learn_stats})
        return stats

    @locked
    @override(Policy)
    def compute_gradients(self, postprocessed_batch: SampleBatch
                          ) -> Tuple[ModelGradients, Dict[str, TensorType]]:
        self._check_loss_initialized("compute_gradients")
        postprocessed_batch = obs_prep.flatten_input_dict(self, postprocessed_batch)
        postprocessed_batch.set_training(True)
        builder = TFRunBuilder(self.get_session(), "compute_gradients")
        fetches = self._build_compute_gradients(builder, postprocessed_batch)
        return builder.get(fetches)

    @locked
    @override(Policy)
    def apply_gradients(self, gradients: ModelGradients) -> None:
        self._check_loss_initialized("apply_gradients")
        builder = TFRunBuilder(self.get_session(), "apply_gradients")
        fetches = self._build_apply_gradients(builder, gradients)
        builder.get(fetches)

    def _check_loss_initialized(self, what: str) -> None:
        if not self.loss_initialized():
            raise ValueError(f"{type(self).__name__}.{what}: the policy has no loss; pass `loss` "
                             "and `loss_inputs` to TFPolicy.__init__ (or use DynamicTFPolicy)")

    # ------------------------------------------------------------------ multi-tower buffers

    @property
    def _single_device(self) -> bool:
        # RLlib 1.11 takes this shortcut for one CPU only; with batches fed per
        # step, a single GPU behaves the same way.
        return len(self.devices) == 1

    @override(Policy)
    def load_batch_into_buffer(self, batch: SampleBatch, buffer_index: int = 0) -> int:
        self._tower_buffers.check_index(buffer_index)
        batch = obs_prep.flatten_input_dict(self, batch)
        batch.set_training(True)
        if self._single_device:
            # RLlib 1.11: one device keeps the batch as is; learn_on_batch pads each slice.
            return self._tower_buffers.store(buffer_index, [batch])
        if not self.multi_gpu_tower_stacks:
            raise ValueError(f"{type(self).__name__} runs on {self.devices} but has no multi-GPU "
                             "tower stack; implement copy() (DynamicTFPolicy does) or use num_gpus=0")
        from rlpolicy._core.tower_buffers import split_batch_for_devices

        slices = split_batch_for_devices(batch, len(self.devices), self._pad_for_loss)
        return self._tower_buffers.store(buffer_index, slices)

    @override(Policy)
    def get_num_samples_loaded_into_buffer(self, buffer_index: int = 0) -> int:
        return self._tower_buffers.num_loaded(buffer_index)

    @locked
    @override(Policy)
    def learn_on_loaded_batch(self, offset: int = 0, buffer_index: int = 0) -> Dict[str, Any]:
        size = device_minibatch_size(self.config, len(self.devices))
        device_batches = self._tower_buffers.minibatches(buffer_index, offset, size)
        if self._single_device:
            return self.learn_on_batch(device_batches[0])
        return self.multi_gpu_tower_stacks[buffer_index].optimize(self.get_session(),
                                                                  device_batches)

    def _pad_for_loss(self, batch: SampleBatch, shuffle: bool = False) -> None:
        """Zero-pads ``batch`` in place (RNN sequences, batch divisibility)."""
        pad_batch_to_sequences_of_same_size(
            batch, max_seq_len=self._max_seq_len, shuffle=shuffle,
            batch_divisibility_req=self._batch_divisibility_req,
            feature_keys=list(self._loss_input_dict_no_rnn.keys()),
            view_requirements=self.view_requirements)

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

    @locked
    @override(Policy)
    def get_weights(self) -> Dict[str, np.ndarray]:
        return self._weights_holder().get_weights()

    @locked
    @override(Policy)
    def set_weights(self, weights: Dict[str, np.ndarray]) -> None:
        """Assigns a ``get_weights`` dict (or a list, one value per variable).

        Raises:
            ValueError: If a dict misses or adds keys (RLlib 1.11 silently
                assigns the matching subset), or a value has the wrong shape;
                nothing is assigned then.
        """
        holder = self._weights_holder()
        check_weights_dict(holder, weights)
        holder.set_weights(weights)

    @locked
    @override(Policy)
    def get_state(self) -> Dict[str, Any]:
        state = super().get_state()
        if self._optimizer_variables is not None and self._optimizer_variables.variables:
            state["_optimizer_variables"] = self._optimizer_variables.get_flat_values()
        if self.exploration is not None:
            state["_exploration_state"] = self.exploration.get_state(self.get_session())
        return state

    @locked
    @override(Policy)
    def set_state(self, state: dict) -> None:
        optimizer_vars = state.get("_optimizer_variables", None)
        if optimizer_vars is not None and self._optimizer_variables is None:
            raise ValueError("state['_optimizer_variables'] is given but this policy has no "
                             "optimizer variables (its loss is not initialized)")
        # Weights first: set_weights checks keys and shapes before assigning,
        # so a state with bad weights changes nothing.
        super().set_state(state)
        if optimizer_vars is not None:
            self._optimizer_variables.set_weights(optimizer_vars)
        if self.exploration is not None and "_exploration_state" in state:
            self.exploration.set_state(state=state["_exploration_state"], sess=self.get_session())

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
    def export_checkpoint(self, export_dir: str, filename_prefix: str = "model",
                          policy_state: Optional[Dict[str, Any]] = None) -> None:
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
    def export_model(self, export_dir: str, onnx: Optional[int] = None) -> None:
        """Exports the action graph for serving: a SavedModel (signature
        "serving_default"), or with ``onnx`` (an opset) ``saved_model.onnx``.

        The ONNX model (via tf2onnx; recurrent policies included) names its
        inputs and outputs like the signature's graph tensors, e.g.
        ``"obs:0"``, ``"state_in_0:0"`` and ``"seq_lens:0"``.

        Raises:
            FileExistsError: If the SavedModel directory is not empty.
            RuntimeError: With ``onnx`` if tf2onnx is not installed.
        """
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
    def copy(self, existing_inputs: List[Tuple[str, "tf1.placeholder"]]) -> "TFPolicy":
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
    def optimizer(self) -> "tf.keras.optimizers.Optimizer":
        """The optimizer: ``tf1.train.AdamOptimizer`` at ``config["lr"]``."""
        if hasattr(self, "config") and "lr" in self.config:
            return tf1.train.AdamOptimizer(learning_rate=read_checked(self.config, "lr"))
        return tf1.train.AdamOptimizer()

    @DeveloperAPI
    def gradients(self, optimizer: Union[LocalOptimizer, List[LocalOptimizer]],
                  loss: Union[TensorType, List[TensorType]]
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
    def build_apply_op(self, optimizer: Union[LocalOptimizer, List[LocalOptimizer]],
                       grads_and_vars: Union[ModelGradients, List[ModelGradients]]
                       ) -> "tf.Operation":
        """The op applying ``grads_and_vars`` with the optimizer(s) (one group per
        optimizer with ``_tf_policy_handles_more_than_one_loss``)."""
        optimizers = force_list(optimizer)
        step = tf1.train.get_or_create_global_step()
        if self.config["_tf_policy_handles_more_than_one_loss"]:
            return tf.group([optim.apply_gradients(grads_and_vars[i], global_step=step)
                             for i, optim in enumerate(optimizers)])
        return optimizers[0].apply_gradients(grads_and_vars, global_step=step)

    # ------------------------------------------------------------------ graph building

    def _get_is_training_placeholder(self) -> TensorType:
        if getattr(self, "_is_training", None) is None:
            with self.graph.as_default():
                self._is_training = tf1.placeholder_with_default(False, (), name="is_training")
        return self._is_training

    def _initialize_loss(self, losses: List[TensorType],
                         loss_inputs: List[Tuple[str, TensorType]]) -> None:
        """Builds loss inputs, optimizers, gradients, the apply op and optimizer state."""
        with self.graph.as_default():
            tf_setup.initialize_loss(self, losses, loss_inputs)

    def _refresh_optimizer_variables(self) -> None:
        """(Re)collects all optimizers' variables (e.g. Adam slots) for get/set_state."""
        with self.graph.as_default():
            opt_vars = [v for o in self._optimizers if hasattr(o, "variables")
                        for v in o.variables()]
            self._optimizer_variables = TFVariables(opt_vars, self.get_session())

    def _build_compute_actions(self, builder: TFRunBuilder, *, input_dict: Any = None,
                               obs_batch: Any = None, state_batches: Any = None,
                               prev_action_batch: Any = None, prev_reward_batch: Any = None,
                               episodes: Any = None, explore: Optional[bool] = None,
                               timestep: Optional[int] = None) -> Tuple[Any, List[int], int]:
        explore = explore if explore is not None else self.config["explore"]
        timestep = timestep if timestep is not None else self.global_timestep
        return tf_run.build_compute_actions(self, builder, input_dict, explore, timestep)

    def _build_compute_gradients(self, builder: TFRunBuilder,
                                 postprocessed_batch: SampleBatch) -> Tuple[int, int]:
        fetches = tf_run.build_grad_step(self, builder, postprocessed_batch, self._grads)
        return fetches[0], fetches[1]

    def _build_apply_gradients(self, builder: TFRunBuilder, gradients: ModelGradients) -> int:
        return tf_run.build_apply_gradients(self, builder, gradients)

    def _build_learn_on_batch(self, builder: TFRunBuilder,
                              postprocessed_batch: SampleBatch) -> int:
        return tf_run.build_grad_step(self, builder, postprocessed_batch, self._apply_op)[1]

    def _get_grad_and_stats_fetches(self) -> Dict[str, Any]:
        return tf_run.grad_and_stats_fetches(self)

    def _get_loss_inputs_dict(self, train_batch: SampleBatch, shuffle: bool) -> Dict[Any, Any]:
        """Pads ``train_batch`` (RNNs, divisibility) and maps loss placeholders to its columns."""
        return tf_run.loss_inputs_feed(self, train_batch, shuffle)

    def _build_signature_def(self) -> Dict[str, Any]:
        """The "serving_default" signature: observations (+ RNN/prev inputs) -> actions."""
        return tf_export.build_signature_def_map(*tf_feeds.signature_tensors(self))

    def _extra_input_signature_def(self) -> Dict[str, Any]:
        return {k.name: k for k in self.extra_compute_action_feed_dict().keys()}

    def _extra_output_signature_def(self) -> Dict[str, Any]:
        return dict(self.extra_compute_action_fetches())


# RLlib 1.11 defines these two TF mixins in this module; rlpolicy keeps them in tf_mixins.
from rlpolicy.policy.tf_mixins import EntropyCoeffSchedule, LearningRateSchedule  # noqa: E402,F401

# Further names RLlib 1.11 defines or imports in this module (1.x client code imports
# them from here); resolved on first access, see rlpolicy/utils/_lazy.py.
from rlpolicy.utils._lazy import lazy_module_attrs  # noqa: E402

_RLLIB_1_11_NAMES = {
    "Deprecated": "rlpolicy.utils.deprecation:Deprecated",
    "deprecation_warning": "rlpolicy.utils.deprecation:deprecation_warning",
    "get_variable": "rlpolicy.utils.framework:get_variable",
    "PiecewiseSchedule": "rlpolicy.utils.schedules:PiecewiseSchedule",
    "summarize": "rlpolicy.utils.debug:summarize",
}
__getattr__ = lazy_module_attrs(__name__, _RLLIB_1_11_NAMES)
