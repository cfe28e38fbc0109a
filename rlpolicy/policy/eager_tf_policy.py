"""Eager TF policies (RLlib 1.11's ``ray.rllib.policy.eager_tf_policy``).

``build_eager_tf_policy`` takes ``build_tf_policy``'s arguments and returns a
:class:`EagerTFPolicy` subclass for ``framework="tf2"`` (or ``"tfe"``) that
runs its model eagerly on tensors. ``build_tf_policy(...).as_eager()`` calls
it with the graph class's own arguments.

The built class is ``type(name + "_eager", (*mixins, EagerTFPolicy), ns)``
with its recipe (``TFPolicyHooks``) in ``cls._hooks``. The steps live in
``rlpolicy._core.eager_{acting,learning,tracing,variables,export}``.

Tracing: with ``config["eager_tracing"]`` (or on a ``cls.with_tracing()``
class) the compute-actions, learn, compute-gradients and apply-gradients
steps run as ``tf.function``s. Inputs reach them as tensors, so traced and
untraced results agree; each function's retraces are counted and a
``RuntimeWarning`` is raised once when they exceed
``config["eager_max_retraces"]`` (RLlib 1.11 raises a RuntimeError instead).

Devices (RLlib 1.11's eager policy has one): the model lives once, on TF's
default device. With ``num_gpus > 1`` (real or ``_fake_gpus``)
``load_batch_into_buffer`` cuts the batch into one slice per "tower" and
``learn_on_loaded_batch`` averages the per-slice gradients (computed one
after another) before one update: equal to the single-device step on the
same rows for losses that are means.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

import gymnasium as gym
import numpy as np
import tree

from rlpolicy._core import eager_acting as acting
from rlpolicy._core import eager_learning as learning
from rlpolicy._core import eager_tracing as tracing
from rlpolicy._core import eager_variables as variables_lib
from rlpolicy._core import input_checks, obs_prep
from rlpolicy._core.config import read_checked
from rlpolicy._core.devices import detect_ray_context, plan_devices
from rlpolicy._core.framework_check import require_framework
from rlpolicy._core.hooks import check_factory_args, updated_kwargs
from rlpolicy._core.loss_init import resolve_loss
from rlpolicy._core.tf_eager_mode import make_methods_eager
from rlpolicy._core.tf_hooks import TFPolicyHooks, resolve_deprecated_args
from rlpolicy._core.tower_buffers import TowerBuffers, device_minibatch_size, split_batch_for_devices
from rlpolicy.policy.policy import Policy, complete_policy_config
from rlpolicy.policy.rnn_sequencing import pad_batch_to_sequences_of_same_size
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils import force_list
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.deprecation import DEPRECATED_VALUE
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.typing import ModelGradients, ModelWeights, TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()

EAGER_FRAMEWORKS = ("tf2", "tfe")


@DeveloperAPI
class EagerTFPolicy(Policy):
    """Base class of every policy class that ``build_eager_tf_policy`` makes.

    Use ``isinstance(policy, EagerTFPolicy)`` to recognise eager TF policies.
    Instances have RLlib's attributes: ``model``, ``dist_class``,
    ``exploration``, ``view_requirements``, ``_optimizers`` (all optimizers),
    ``_optimizer`` (the first), ``_loss``, ``batch_divisibility_req`` and
    ``global_timestep`` (a Python int here, RLlib uses a tf.Variable).
    """

    _hooks: TFPolicyHooks = TFPolicyHooks(name="EagerTFPolicy")
    #: Set on classes made by ``with_tracing()``: trace whatever the config says.
    _force_tracing: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Graph-mode callers (a process after tf1.disable_v2_behavior()) get eager mode.
        super().__init_subclass__(**kwargs)
        if tf is not None:
            make_methods_eager(cls)

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: TrainerConfigDict):
        """Builds the policy; see ``build_eager_tf_policy`` for the order of the hooks."""
        hooks = self._hooks
        require_framework("tf2", type(self).__name__)
        observation_space = obs_prep.prepare_observation_space(observation_space, config)
        Policy.__init__(self, observation_space, action_space, _eager_config(self, config))
        config = self.config
        self._init_runtime_state()
        self._loss = resolve_loss(type(self), hooks.loss_fn)
        req = hooks.get_batch_divisibility_req
        self.batch_divisibility_req = req(self) if callable(req) else (req or 1)
        self._max_seq_len = config["model"]["max_seq_len"]
        for hook in (hooks.validate_spaces, hooks.before_init):
            if hook is not None:
                hook(self, observation_space, action_space, config)
        self.model, self.dist_class = self._build_model_and_dist()
        self._update_model_view_requirements_from_init_state()
        self.view_requirements.update(self.model.view_requirements)
        self.exploration = self._create_exploration()
        self._state_inputs = self.model.get_initial_state()
        self._is_recurrent = len(self._state_inputs) > 0
        if hooks.before_loss_init is not None:
            hooks.before_loss_init(self, observation_space, action_space, config)
        self._optimizers = self._make_optimizers()
        self._optimizer = self._optimizers[0] if self._optimizers else None
        self._initialize_loss_from_dummy_batch(auto_remove_unneeded_view_reqs=True,
                                               stats_fn=hooks.stats_fn)
        self._loss_initialized = True
        if hooks.after_init is not None:
            hooks.after_init(self, observation_space, action_space, config)
        # The dummy runs advanced the timestep (RLlib 1.11 resets it too).
        self.global_timestep = 0

    # ------------------------------------------------------------------ construction steps

    def _init_runtime_state(self) -> None:
        self._lock = threading.RLock()
        self._is_training = False
        self._no_tracing = False
        self._loss_initialized = False
        self._traced: Dict[str, Callable] = {}
        self._trace_counter = tracing.TraceCounter(type(self).__name__,
                                                   self.config.get("eager_max_retraces", 20))
        ray_mode, ray_gpu_ids = detect_ray_context()
        plan = plan_devices(self.config, len(tf.config.list_physical_devices("GPU")),
                            ray_mode=ray_mode, ray_gpu_ids=ray_gpu_ids)
        self.devices = list(plan.devices)
        self._buffers = TowerBuffers(self.config.get("num_multi_gpu_tower_stacks", 1),
                                     len(self.devices))

    def _build_model_and_dist(self) -> Tuple[Any, Optional[type]]:
        """``make_model`` or the catalog's default model; the catalog's dist class."""
        from rlpolicy.models.catalog import ModelCatalog

        hooks, cfg = self._hooks, self.config
        dist_class = logit_dim = None
        if hooks.action_sampler_fn is not None or hooks.action_distribution_fn is not None:
            if hooks.make_model is None:
                raise ValueError(f"{type(self).__name__}: `make_model` is required if "
                                 "`action_sampler_fn` OR `action_distribution_fn` is given")
        else:
            dist_class, logit_dim = ModelCatalog.get_action_dist(
                self.action_space, cfg["model"], framework=self.framework)
        if hooks.make_model is not None:
            model = hooks.make_model(self, self.observation_space, self.action_space, cfg)
        else:
            model = ModelCatalog.get_model_v2(self.observation_space, self.action_space, logit_dim,
                                              cfg["model"], framework=self.framework)
        acting.check_model(type(self).__name__, model)
        return model, dist_class

    def _make_optimizers(self) -> List[Any]:
        """``optimizer_fn(policy, config)`` or ``self.optimizer()``, passed through the
        exploration; slot variables are created right away."""
        hooks = self._hooks
        opts = hooks.optimizer_fn(self, self.config) if hooks.optimizer_fn else self.optimizer()
        opts = force_list(opts)
        if getattr(self, "exploration", None) is not None:
            opts = self.exploration.get_exploration_optimizer(opts)
        var_list = learning.trainable_variables(self)
        for opt in opts:
            variables_lib.build_optimizer(opt, var_list)
        return list(opts)

    @DeveloperAPI
    def optimizer(self) -> Any:
        """The default optimizer: Keras (``tf_keras``) Adam at ``config["lr"]``.

        Used when the factory got no ``optimizer_fn``; a mixin (e.g.
        ``LearningRateSchedule``) may override it.
        """
        return get_keras().optimizers.Adam(read_checked(self.config, "lr"))

    # ------------------------------------------------------------------ tracing

    def _tracing_enabled(self) -> bool:
        return (self._force_tracing or bool(self.config.get("eager_tracing"))) \
            and not self._no_tracing

    def _run(self, name: str, fn: Callable, *args: Any) -> Any:
        """Calls ``fn(*args)``: as a (cached, counted) ``tf.function`` when tracing."""
        if not self._tracing_enabled():
            return fn(*args)
        traced = self._traced.get(name)
        if traced is None:
            traced = self._traced[name] = tracing.make_traced(fn, name, self._trace_counter)
        args = tuple(tracing.batch_to_tensors(a) if isinstance(a, SampleBatch) else a
                     for a in args)
        return traced(*args)

    @property
    def trace_counts(self) -> Dict[str, int]:
        """How often each traced function has been traced so far (not in RLlib)."""
        return dict(self._trace_counter.counts)

    # ------------------------------------------------------------------ acting

    @override(Policy)
    def compute_actions_from_input_dict(
            self, input_dict: Union[SampleBatch, Dict[str, TensorType]], explore: bool = None,
            timestep: Optional[int] = None, episodes: Optional[List[Any]] = None,
            **kwargs) -> Tuple[TensorType, List[TensorType], Dict[str, TensorType]]:
        input_dict = obs_prep.flatten_input_dict(self, input_dict)
        input_checks.check_acting_input_dict(self, input_dict, "compute_actions")
        with self._lock:
            self._is_training = False
            explore = self.config["explore"] if explore is None else explore
            timestep = self.global_timestep if timestep is None else timestep
            input_dict = self._lazy_tensor_dict(input_dict)
            input_dict.set_training(False)
            state_batches = [input_dict[k] for k in input_dict.keys() if k[:9] == "state_in_"]
            self._state_in = state_batches
            self._is_recurrent = state_batches != []
            self.exploration.before_compute_actions(timestep=timestep, explore=explore, tf_sess=None)
            out = self._run("compute_actions", self._compute_actions_helper, input_dict,
                            state_batches, None if self._tracing_enabled() else episodes,
                            tf.constant(bool(explore)), tf.constant(int(timestep), tf.int64))
            out = tracing.to_numpy(out)
            self.global_timestep += int(np.shape(tree.flatten(out[0])[0])[0])
            return out

    @override(Policy)
    def compute_actions(self, obs_batch: Any, state_batches: Optional[List[TensorType]] = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        info_batch: Optional[Dict[str, list]] = None,
                        episodes: Optional[List[Any]] = None, explore: Optional[bool] = None,
                        timestep: Optional[int] = None,
                        **kwargs) -> Tuple[TensorType, List[TensorType], Dict[str, TensorType]]:
        obs_batch = obs_prep.flatten_obs_batch(self, obs_batch)
        input_dict = SampleBatch({SampleBatch.CUR_OBS: acting.as_array(obs_batch)}, _is_training=False)
        for i, s in enumerate(state_batches or []):
            input_dict[f"state_in_{i}"] = acting.as_array(s)
        if prev_action_batch is not None:
            input_dict[SampleBatch.PREV_ACTIONS] = acting.as_array(prev_action_batch)
        if prev_reward_batch is not None:
            input_dict[SampleBatch.PREV_REWARDS] = acting.as_array(prev_reward_batch)
        if info_batch is not None:
            input_dict[SampleBatch.INFOS] = info_batch
        return self.compute_actions_from_input_dict(input_dict, explore=explore,
                                                    timestep=timestep, episodes=episodes, **kwargs)

    def _compute_actions_helper(self, input_dict: Any, state_batches: List[Any], episodes: Any,
                                explore: Any, timestep: Any) -> Tuple[Any, List[Any], Dict[str, Any]]:
        """Forward pass, sampling and exploration (traced with ``eager_tracing``)."""
        return acting.compute_actions_step(self, input_dict, state_batches, episodes, explore,
                                           timestep)

    @override(Policy)
    def compute_log_likelihoods(self, actions: Any, obs_batch: Any,
                                state_batches: Optional[List[TensorType]] = None,
                                prev_action_batch: Any = None, prev_reward_batch: Any = None,
                                actions_normalized: bool = True) -> TensorType:
        obs_batch = obs_prep.flatten_obs_batch(self, obs_batch)
        with self._lock:
            return acting.log_likelihoods(self, actions, obs_batch, state_batches,
                                          prev_action_batch, prev_reward_batch, actions_normalized)

    @override(Policy)
    def postprocess_trajectory(self, sample_batch: SampleBatch,
                               other_agent_batches: Optional[Dict[Any, Tuple[Policy, SampleBatch]]] = None,
                               episode: Optional[Any] = None) -> SampleBatch:
        sample_batch = Policy.postprocess_trajectory(self, obs_prep.flatten_batch_in_place(self, sample_batch))
        if self._hooks.postprocess_fn is not None:
            return self._hooks.postprocess_fn(self, sample_batch, other_agent_batches, episode)
        return sample_batch

    # ------------------------------------------------------------------ learning

    @override(Policy)
    def learn_on_batch(self, postprocessed_batch: SampleBatch) -> Dict[str, TensorType]:
        postprocessed_batch = obs_prep.flatten_input_dict(self, postprocessed_batch)
        input_checks.check_train_batch(self, postprocessed_batch, "learn_on_batch")
        with self._lock:
            learn_stats: Dict[str, Any] = {}
            self._run_learn_callback(postprocessed_batch, learn_stats)
            batch = self._prepare_train_batch(postprocessed_batch)
            stats = tracing.to_numpy(self._run("learn_on_batch", self._learn_on_batch_helper, batch))
            stats["custom_metrics"] = learn_stats
            return stats

    @override(Policy)
    def compute_gradients(self, postprocessed_batch: SampleBatch
                          ) -> Tuple[ModelGradients, Dict[str, TensorType]]:
        with self._lock:
            batch = self._prepare_train_batch(postprocessed_batch)
            grads, stats = self._run("compute_gradients", self._compute_gradients_helper, batch)
            return tracing.to_numpy(grads), tracing.to_numpy(stats)

    @override(Policy)
    def apply_gradients(self, gradients: ModelGradients) -> None:
        """Applies gradients as ``compute_gradients`` returns them (one per
        trainable variable, None allowed; a list of such lists with
        ``_tf_policy_handles_more_than_one_loss``)."""
        with self._lock:
            learning.zip_with_variables(self, gradients)  # validates the count
            grads = tree.map_structure(
                lambda g: None if g is None else tf.convert_to_tensor(g), gradients)
            self._run("apply_gradients", self._apply_gradients_helper, grads)

    def _prepare_train_batch(self, batch: SampleBatch) -> SampleBatch:
        if not isinstance(batch, SampleBatch):
            batch = SampleBatch(batch)
        batch = obs_prep.flatten_input_dict(self, batch)
        pad_batch_to_sequences_of_same_size(
            batch, max_seq_len=self._max_seq_len, shuffle=False,
            batch_divisibility_req=self.batch_divisibility_req,
            view_requirements=self.view_requirements)
        self._is_training = True
        batch = self._lazy_tensor_dict(batch)
        batch.set_training(True)
        return batch

    def _learn_on_batch_helper(self, samples: Any) -> Dict[str, Any]:
        grads_and_vars, _, stats = learning.gradients_and_stats(
            self, acting.as_tensor_batch(samples, training=True))
        learning.apply_grads_and_vars(self, grads_and_vars)
        return stats

    def _compute_gradients_helper(self, samples: Any, clip: bool = True) -> Tuple[Any, Dict[str, Any]]:
        _, grads, stats = learning.gradients_and_stats(
            self, acting.as_tensor_batch(samples, training=True), clip=clip)
        return grads, stats

    def _apply_gradients_helper(self, grads: Any) -> None:
        learning.apply_grads_and_vars(self, learning.zip_with_variables(self, grads))

    # ------------------------------------------------------------------ buffers / towers

    @override(Policy)
    def load_batch_into_buffer(self, batch: SampleBatch, buffer_index: int = 0) -> int:
        self._buffers.check_index(buffer_index)
        if not isinstance(batch, SampleBatch):
            batch = SampleBatch(batch)
        batch = obs_prep.flatten_input_dict(self, batch)
        batch.set_training(True)
        if len(self.devices) == 1:
            self._prepare_train_batch(batch)
            return self._buffers.store(buffer_index, [batch])
        slices = split_batch_for_devices(batch, len(self.devices), self._prepare_train_batch)
        return self._buffers.store(buffer_index, slices)

    @override(Policy)
    def get_num_samples_loaded_into_buffer(self, buffer_index: int = 0) -> int:
        return self._buffers.num_loaded(buffer_index)

    @override(Policy)
    def learn_on_loaded_batch(self, offset: int = 0, buffer_index: int = 0) -> Dict[str, Any]:
        per_device = device_minibatch_size(self.config, len(self.devices))
        batches = self._buffers.minibatches(buffer_index, offset, per_device)
        if len(batches) == 1:
            return self.learn_on_batch(batches[0])
        with self._lock:
            outs = [self._run("compute_gradients", self._compute_gradients_helper,
                              self._prepare_train_batch(b), False) for b in batches]
            grads = learning.clip_grad_lists(self, learning.mean_grads([g for g, _ in outs]))
            self._run("apply_gradients", self._apply_gradients_helper, grads)
            return {f"tower_{i}": tracing.to_numpy(stats) for i, (_, stats) in enumerate(outs)}

    # ------------------------------------------------------------------ weights and state

    def variables(self) -> List[Any]:
        """All savable variables of this policy (those of ``self.model``)."""
        model_vars = self.model.variables
        return list(model_vars() if callable(model_vars) else model_vars)

    def _named_variables(self) -> Dict[str, Any]:
        """``variables()`` by key: the model's keys, then extra variables (e.g. a
        mixin's target model) as ``<attribute>.<key>`` or by their TF name."""
        named = variables_lib.named_variables(self.model)
        known = {id(v) for v in named.values()}
        extra = [v for v in self.variables() if id(v) not in known]
        if extra:
            named.update(variables_lib.extra_variable_names(self, extra, set(named)))
        return named

    @override(Policy)
    def get_weights(self, as_dict: bool = False) -> ModelWeights:
        """The values of ``variables()`` as numpy copies.

        Args:
            as_dict: False (RLlib 1.11's default for eager policies): a list,
                one array per variable in ``variables()`` order. True: a
                ``{key: array}`` dict, keys as ``model.variables(as_dict=True)``
                (independent of Keras' per-process layer names; what
                ``get_state`` and checkpoints store).

        Returns:
            A list, or with ``as_dict`` a dict; ``set_weights`` takes both.
        """
        with self._lock:
            named = self._named_variables()
            if as_dict:
                return {k: np.array(v.numpy(), copy=True) for k, v in named.items()}
            return [np.array(v.numpy(), copy=True) for v in named.values()]

    @override(Policy)
    def set_weights(self, weights: ModelWeights) -> None:
        """Sets the weights from a ``get_weights`` dict (or a list in ``variables()`` order).

        Raises:
            ValueError: Naming missing/unknown keys or a shape mismatch; then
                no variable has been changed.
        """
        with self._lock:  # no forward pass sees half-assigned weights
            for var, value in variables_lib.check_weights(weights, self._named_variables()):
                var.assign(value)

    def _optimizer_variables(self) -> List[Any]:
        return [v for opt in self._optimizers for v in variables_lib.optimizer_variables(opt)]

    @override(Policy)
    def get_state(self) -> Dict[str, Any]:
        """Weights, global timestep, optimizer variables (all optimizers, in order)
        and exploration state, as numpy copies (a snapshot)."""
        with self._lock:
            # Keyed weights (not the list get_weights() gives): robust across processes.
            state = {"weights": self.get_weights(as_dict=True),
                     "global_timestep": int(self.global_timestep)}
            opt_vars = self._optimizer_variables()
            if opt_vars:
                state["_optimizer_variables"] = tracing.to_numpy(opt_vars)
            if getattr(self, "exploration", None) is not None:
                state["_exploration_state"] = tracing.to_numpy(self.exploration.get_state())
            return state

    @override(Policy)
    def set_state(self, state: Dict[str, Any]) -> None:
        """Restores a ``get_state`` snapshot; weights and optimizer variables are
        checked first, so a mismatch (ValueError) changes nothing."""
        with self._lock:
            weights = variables_lib.check_weights(state["weights"], self._named_variables())
            opt_vals = state.get("_optimizer_variables")
            opt_pairs = (variables_lib.check_optimizer_state(opt_vals, self._optimizer_variables())
                         if opt_vals else [])
            for var, value in opt_pairs + weights:
                var.assign(value)
            if getattr(self, "exploration", None) is not None and "_exploration_state" in state:
                self.exploration.set_state(state=state["_exploration_state"])
            self.global_timestep = int(state["global_timestep"])

    @override(Policy)
    def get_exploration_state(self) -> Dict[str, TensorType]:
        return tracing.to_numpy(self.exploration.get_state())

    @override(Policy)
    def is_recurrent(self) -> bool:
        return self._is_recurrent

    @override(Policy)
    def num_state_tensors(self) -> int:
        return len(self._state_inputs)

    @override(Policy)
    def get_initial_state(self) -> List[TensorType]:
        if hasattr(self, "model"):
            return [np.asarray(s) for s in self.model.get_initial_state()]
        return []

    def loss_initialized(self) -> bool:
        """Whether the dummy-batch loss initialisation has run."""
        return self._loss_initialized

    @override(Policy)
    def get_session(self) -> None:
        """Eager policies have no tf Session."""
        return None

    def _get_is_training_placeholder(self) -> TensorType:
        """Whether the policy is in a learning step, as a bool tensor (RLlib 1.11's
        eager counterpart of the graph policy's ``is_training`` placeholder)."""
        return tf.convert_to_tensor(self._is_training)

    def _lazy_tensor_dict(self, postprocessed_batch: Union[SampleBatch, dict]) -> SampleBatch:
        """Makes ``postprocessed_batch`` hand out tf tensors (converted on first read)."""
        if not isinstance(postprocessed_batch, SampleBatch):
            postprocessed_batch = SampleBatch(postprocessed_batch)
        postprocessed_batch.set_get_interceptor(tracing.to_tensor)
        return postprocessed_batch

    # ------------------------------------------------------------------ saving

    @override(Policy)
    def export_model(self, export_dir: str, onnx: Optional[int] = None) -> None:
        """Exports the model: a SavedModel with a ``serving_default`` signature,
        or with ``onnx`` (an opset version) ``model.onnx``; see ``_core.eager_export``."""
        from rlpolicy._core import eager_export

        dummy = getattr(self, "_dummy_batch", None)
        if dummy is None:
            dummy = self._get_dummy_batch_from_view_requirements(1)
        specs = eager_export.serving_specs(self.model, dummy)
        with self._lock:
            if onnx:
                eager_export.export_onnx(self.model, specs, export_dir, onnx)
            else:
                eager_export.export_saved_model(self.model, specs, export_dir)

    @override(Policy)
    def export_checkpoint(self, export_dir: str, filename_prefix: str = "model",
                          policy_state: Optional[Dict[str, Any]] = None) -> None:
        """Writes a ``tf.train.Checkpoint`` (``<prefix>.index``/``.data-*``: model
        variables, optimizers, global timestep) and rlpolicy's pickle-free
        checkpoint (for ``Policy.from_checkpoint``) into ``export_dir``."""
        from rlpolicy._core import eager_export

        super().export_checkpoint(export_dir, filename_prefix, policy_state)
        eager_export.make_tf_checkpoint(self).write(os.path.join(export_dir, filename_prefix))

    @override(Policy)
    def import_model_from_h5(self, import_file: str) -> None:
        return self.model.import_from_h5(import_file)

    # ------------------------------------------------------------------ class helpers

    @classmethod
    def with_tracing(cls) -> type:
        """A subclass (``<name>_traced``, as RLlib names it) that traces with
        ``tf.function`` whatever ``config["eager_tracing"]`` says."""
        if cls._force_tracing:
            return cls
        return type(cls.__name__ + "_traced", (cls,), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__ + "_traced",
            "_force_tracing": True})


if tf is not None:
    make_methods_eager(EagerTFPolicy)


# ---------------------------------------------------------------- module-level helpers

def _eager_config(policy: Policy, config: Optional[dict]) -> dict:
    """The completed config (a new dict; the caller's is left alone), with the
    ``get_default_config`` defaults under it and framework ``"tf2"``/``"tfe"``."""
    hooks = policy._hooks
    defaults = hooks.get_default_config() if hooks.get_default_config is not None else None
    full = complete_policy_config(policy, config, defaults)
    if full.get("framework") not in EAGER_FRAMEWORKS:
        # RLlib 1.11: an eager policy runs as framework "tf2" ("tfe" is kept).
        full["framework"] = "tf2"
    return full


# ---------------------------------------------------------------- the factory

@DeveloperAPI
def build_eager_tf_policy(
        name: str, loss_fn: Optional[Callable], get_default_config: Optional[Callable] = None,
        postprocess_fn: Optional[Callable] = None, stats_fn: Optional[Callable] = None,
        optimizer_fn: Optional[Callable] = None, compute_gradients_fn: Optional[Callable] = None,
        apply_gradients_fn: Optional[Callable] = None, grad_stats_fn: Optional[Callable] = None,
        extra_learn_fetches_fn: Optional[Callable] = None,
        extra_action_out_fn: Optional[Callable] = None, validate_spaces: Optional[Callable] = None,
        before_init: Optional[Callable] = None, before_loss_init: Optional[Callable] = None,
        after_init: Optional[Callable] = None, make_model: Optional[Callable] = None,
        action_sampler_fn: Optional[Callable] = None,
        action_distribution_fn: Optional[Callable] = None, mixins: Optional[List[type]] = None,
        get_batch_divisibility_req: Optional[Callable] = None,
        obs_include_prev_action_reward: Any = DEPRECATED_VALUE,
        extra_action_fetches_fn: Optional[Callable] = None,
        gradients_fn: Optional[Callable] = None) -> Type[EagerTFPolicy]:
    """Builds an eager TF policy class (``framework="tf2"``/``"tfe"``).

    Takes the same arguments as ``build_tf_policy`` (see there for each
    hook's signature); the deprecated ``extra_action_fetches_fn`` and
    ``gradients_fn`` are mapped to ``extra_action_out_fn`` and
    ``compute_gradients_fn``, and ``obs_include_prev_action_reward`` is
    ignored, each with a ``DeprecationWarning``.

    At construction the hooks run in RLlib 1.11's eager order:
    ``get_default_config``, ``validate_spaces``, ``before_init``,
    ``make_model`` (else the catalog's model; ``make_model`` is required with
    ``action_sampler_fn``/``action_distribution_fn``), ``before_loss_init``,
    ``optimizer_fn`` (else ``self.optimizer()``, Keras Adam at
    ``config["lr"]``), then the dummy-batch loss initialisation (acting with
    ``action_sampler_fn``/``action_distribution_fn``/the model and
    ``extra_action_out_fn``, then ``postprocess_fn``, ``loss_fn``,
    ``stats_fn``), and ``after_init``. Each learning step runs ``loss_fn``
    (and the model's ``custom_loss``) under a ``tf.GradientTape``, then
    ``compute_gradients_fn`` (else the tape's gradients, clipped by global
    norm when ``config["grad_clip"]`` is set), ``stats_fn``,
    ``extra_learn_fetches_fn``, ``grad_stats_fn`` and ``apply_gradients_fn``
    (else the optimizer's ``apply_gradients``). ``loss_fn``, ``stats_fn`` and
    the gradient hooks may run many times and, with tracing, inside
    ``tf.function``: they must not create variables.

    Returns:
        A subclass of :class:`EagerTFPolicy` named ``name + "_eager"``, with
        ``with_updates(**overrides)`` (a sibling class with some arguments
        replaced) and ``with_tracing()`` (``tf.function`` tracing always on).

    Raises:
        TypeError: If ``name`` is not an identifier or a mixin not a class.
    """
    kwargs = resolve_deprecated_args(dict(locals()))
    hooks = TFPolicyHooks(**{**kwargs, "mixins": tuple(kwargs["mixins"] or ())})
    return _make_eager_class(hooks, module=sys._getframe(1).f_globals.get("__name__", __name__))


def _make_eager_class(hooks: TFPolicyHooks, module: str) -> type:
    check_factory_args("build_eager_tf_policy", hooks.name, hooks.mixins)
    cls_name = hooks.name + "_eager"
    namespace = {"__module__": module, "__qualname__": cls_name, "_hooks": hooks,
                 "__doc__": f"{cls_name}: eager TF policy built by build_eager_tf_policy.",
                 # Mixins come first in the MRO but must not take over __init__.
                 "__init__": _built_class_init, "with_updates": classmethod(_with_updates)}
    return type(cls_name, (*hooks.mixins, EagerTFPolicy), namespace)


def _built_class_init(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                      config: TrainerConfigDict) -> None:
    EagerTFPolicy.__init__(self, observation_space, action_space, config)


def _with_updates(cls: type, **overrides: Any) -> type:
    """Builds a new eager policy class from this one's arguments, with ``overrides`` replaced.

    Raises:
        TypeError: For a keyword that ``build_eager_tf_policy`` does not take.
    """
    hooks = TFPolicyHooks(**resolve_deprecated_args(updated_kwargs(cls, overrides)))
    new = _make_eager_class(hooks, module=sys._getframe(1).f_globals.get("__name__", __name__))
    return new.with_tracing() if cls._force_tracing else new


__all__ = ["build_eager_tf_policy", "EagerTFPolicy"]
