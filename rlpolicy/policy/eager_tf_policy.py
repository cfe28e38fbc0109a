"""Eager TF policies (RLlib 1.11's ``ray.rllib.policy.eager_tf_policy``).

``build_eager_tf_policy`` takes ``build_tf_policy``'s arguments and returns a
:class:`EagerTFPolicy` subclass for ``framework="tf2"`` (or ``"tfe"``) that
runs its model eagerly on tensors. ``build_tf_policy(...).as_eager()`` calls
it with the graph class's own arguments.

The built class is ``type(name + "_eager", (*mixins, EagerTFPolicy), ns)``
with its recipe (``TFPolicyHooks``) in ``cls._hooks``. Its acting and
learning steps are methods here (with the forward-pass data helpers at the
bottom of this module); the other helpers they call take data and live in
``rlpolicy.policy._eager`` (``learning``, ``tracing``, ``variables``,
``export``); running from a graph-mode caller is ``rlpolicy.utils.tf_modes``'s.

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
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

import gymnasium as gym
import numpy as np
import tree

from rlpolicy._core.config import read_checked
from rlpolicy._core.devices import detect_ray_context, plan_devices
from rlpolicy._core.framework_check import require_framework
from rlpolicy._core.hooks import check_factory_args, updated_kwargs
from rlpolicy._core.loss_init import resolve_loss
from rlpolicy._core.tf_hooks import TFPolicyHooks, resolve_deprecated_args
from rlpolicy._core.tower_buffers import (
    minibatch_rows,
    plan_exact_chunks,
    split_batch_for_devices,
)
from rlpolicy.models._weight_conversion import adapt_weights, weights_layout
from rlpolicy.policy import _obs_prep as obs_prep
from rlpolicy.policy._eager import learning, tracing
from rlpolicy.policy._eager import variables as variables_lib
from rlpolicy.policy._framework_policy import FrameworkPolicy, with_lock
from rlpolicy.policy.policy import Policy, complete_policy_config
from rlpolicy.policy.rnn_sequencing import pad_batch_to_sequences_of_same_size
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils import force_list
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.deprecation import DEPRECATED_VALUE
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY
from rlpolicy.utils.spaces.space_utils import normalize_action
from rlpolicy.utils.tf_modes import make_methods_eager
from rlpolicy.utils.typing import ModelGradients, ModelWeights, TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()
_KERAS_MODEL: Any = None  # tf_keras.Model, on first use

EAGER_FRAMEWORKS = ("tf2", "tfe")


@DeveloperAPI
class EagerTFPolicy(FrameworkPolicy):
    """Base class of every policy class that ``build_eager_tf_policy`` makes.

    Use ``isinstance(policy, EagerTFPolicy)`` to recognise eager TF policies.
    Instances have RLlib's attributes: ``model``, ``dist_class``,
    ``exploration``, ``view_requirements``, ``_optimizers`` (all optimizers),
    ``_optimizer`` (the first), ``_loss``, ``batch_divisibility_req`` and
    ``global_timestep`` (a Python int here, RLlib uses a tf.Variable).

    The public acting, learning, buffer and state methods come from
    ``FrameworkPolicy`` (``policy/_framework_policy.py``); this class adds
    the eager steps they call (``_compute_actions_step``, ``_learn_step``, ...).
    """

    _hooks: TFPolicyHooks = TFPolicyHooks(name="EagerTFPolicy")
    #: Set on classes made by ``with_tracing()``: trace whatever the config says.
    _force_tracing: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Graph-mode callers (a process after tf1.disable_v2_behavior()) get eager mode.
        super().__init_subclass__(**kwargs)
        if tf is not None:
            make_methods_eager(cls)

    def __init__(
        self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
    ):
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
        self._apply_steps = learning.ApplySteps()  # the optimizers' traced updates
        self._initialize_loss_from_dummy_batch(auto_remove_unneeded_view_reqs=True, stats_fn=hooks.stats_fn)
        self._loss_initialized = True
        if hooks.after_init is not None:
            hooks.after_init(self, observation_space, action_space, config)
        # The dummy runs advanced the timestep (RLlib 1.11 resets it too).
        self.global_timestep = 0

    # ------------------------------------------------------------------ construction steps

    def _init_runtime_state(self) -> None:
        self._is_training = False
        self._no_tracing = False
        self._loss_initialized = False
        self._traced: Dict[str, Callable] = {}
        self._trace_counter = tracing.TraceCounter(
            type(self).__name__, self.config.get("eager_max_retraces", 20)
        )
        ray_mode, ray_gpu_ids = detect_ray_context()
        plan = plan_devices(
            self.config,
            len(tf.config.list_physical_devices("GPU")),
            ray_mode=ray_mode,
            ray_gpu_ids=ray_gpu_ids,
        )
        self.devices = list(plan.devices)
        self._init_tower_buffers(len(self.devices), exact_supported=True)

    def _build_model_and_dist(self) -> Tuple[Any, Optional[type]]:
        """``make_model`` or the catalog's default model; the catalog's dist class."""
        from rlpolicy.models.catalog import ModelCatalog

        hooks, cfg = self._hooks, self.config
        dist_class: Optional[type] = None
        if hooks.action_sampler_fn is not None or hooks.action_distribution_fn is not None:
            if hooks.make_model is None:
                raise ValueError(
                    f"{type(self).__name__}: `make_model` is required if "
                    "`action_sampler_fn` OR `action_distribution_fn` is given"
                )
            model = hooks.make_model(self, self.observation_space, self.action_space, cfg)
        else:
            dist_class, logit_dim = ModelCatalog.get_action_dist(
                self.action_space, cfg["model"], framework=self.framework
            )
            if hooks.make_model is not None:
                model = hooks.make_model(self, self.observation_space, self.action_space, cfg)
            else:
                model = ModelCatalog.get_model_v2(
                    self.observation_space,
                    self.action_space,
                    logit_dim,
                    cfg["model"],
                    framework=self.framework,
                )
        _check_model(type(self).__name__, model)
        return model, dist_class

    def _make_optimizers(self) -> List[Any]:
        """``optimizer_fn(policy, config)`` or ``self.optimizer()``, passed through the
        exploration; slot variables are created right away."""
        hooks = self._hooks
        opts = hooks.optimizer_fn(self, self.config) if hooks.optimizer_fn else self.optimizer()
        opts = force_list(opts)
        if getattr(self, "exploration", None) is not None:
            opts = self.exploration.get_exploration_optimizer(opts)
        var_list = learning.trainable_variables(self.model)
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
        return (self._force_tracing or bool(self.config.get("eager_tracing"))) and not self._no_tracing

    def _run(self, name: str, fn: Callable, *args: Any) -> Any:
        """Calls ``fn(*args)``: as a (cached, counted) ``tf.function`` when tracing."""
        if not self._tracing_enabled():
            return fn(*args)
        traced = self._traced.get(name)
        if traced is None:
            traced = self._traced[name] = tracing.make_traced(fn, name, self._trace_counter)
        args = tuple(tracing.batch_to_tensors(a) if isinstance(a, SampleBatch) else a for a in args)
        return traced(*args)

    @property
    def trace_counts(self) -> Dict[str, int]:
        """How often each traced function has been traced so far (not in RLlib)."""
        return dict(self._trace_counter.counts)

    # ------------------------------------------------------------------ acting

    def _compute_actions_step(
        self,
        input_dict: Union[SampleBatch, Dict[str, TensorType]],
        state_batches: List[Any],
        explore: bool,
        timestep: int,
        episodes: Optional[List[Any]],
    ) -> Tuple[TensorType, List[TensorType], Dict[str, TensorType]]:
        """Template step of ``compute_actions_from_input_dict``: runs
        :meth:`_compute_actions_helper` (traced with ``eager_tracing``) on tensors,
        advances ``global_timestep`` by the batch size; returns numpy structures."""
        self._is_training = False
        input_dict = self._lazy_tensor_dict(input_dict)
        input_dict.set_training(False)
        state_batches = [tracing.to_tensor(s) for s in state_batches]
        self._state_in = state_batches
        self._is_recurrent = state_batches != []
        self.exploration.before_compute_actions(timestep=timestep, explore=explore, tf_sess=None)
        out = self._run(
            "compute_actions",
            self._compute_actions_helper,
            input_dict,
            state_batches,
            None if self._tracing_enabled() else episodes,
            self._explore_constant(bool(explore)),
            tf.constant(int(timestep), tf.int64),
        )
        out = tracing.to_numpy(out)
        self.global_timestep += int(np.shape(tree.flatten(out[0])[0])[0])
        return out

    def _explore_constant(self, explore: bool) -> Any:
        """``tf.constant(explore)``, made once per value (an eager constant never changes)."""
        if not tf.executing_eagerly():
            return tf.constant(explore)
        consts = self.__dict__.setdefault("_explore_consts", {})
        const = consts.get(explore)
        if const is None:
            const = consts[explore] = tf.constant(explore)
        return const

    def _compute_actions_helper(
        self, input_dict: Any, state_batches: List[Any], episodes: Any, explore: Any, timestep: Any
    ) -> Tuple[Any, List[Any], Dict[str, Any]]:
        """Forward pass, sampling and exploration on tensors (traced with ``eager_tracing``).

        Returns:
            ``(actions, state_outs, extra_fetches)`` as tensors: the model's (or
            ``action_sampler_fn``'s) outputs, RLlib's ``action_prob``,
            ``action_logp``, ``action_dist_inputs`` and ``extra_action_out_fn``'s.
        """
        hooks = self._hooks
        input_dict = _as_tensor_batch(input_dict, training=False)
        obs = tree.flatten(input_dict[SampleBatch.OBS])[0]
        seq_lens = tf.ones(tf.shape(obs)[0], dtype=tf.int32) if state_batches else None
        extra_fetches: Dict[str, Any] = {}
        with tf.variable_creator_scope(tracing.disallow_variable_creation):
            if hooks.action_sampler_fn is not None:
                outs = hooks.action_sampler_fn(
                    self,
                    self.model,
                    input_dict[SampleBatch.OBS],
                    explore=explore,
                    timestep=timestep,
                    episodes=episodes,
                )
                if len(outs) == 4:
                    actions, logp, dist_inputs, state_out = outs
                else:
                    (actions, logp), dist_inputs, state_out = outs, None, []
            else:
                dist_inputs, state_out, extra_fetches = self._dist_inputs(
                    input_dict, state_batches, seq_lens, explore, timestep
                )
                action_dist = self.dist_class(dist_inputs, self.model)  # type: ignore[misc]
                actions, logp = self.exploration.get_exploration_action(
                    action_distribution=action_dist, timestep=timestep, explore=explore
                )
        extra_fetches.update(_action_extras(logp, dist_inputs))
        if hooks.extra_action_out_fn is not None:
            extra_fetches.update(hooks.extra_action_out_fn(self))
        return actions, list(state_out), extra_fetches

    def _dist_inputs(
        self, input_dict: Any, state_batches: List[Any], seq_lens: Any, explore: Any, timestep: Any
    ) -> Tuple[Any, List[Any], Dict[str, Any]]:
        """Distribution inputs, state outs and extra fetches of one forward pass.

        With an ``action_distribution_fn`` its returned dist class becomes
        ``self.dist_class`` (RLlib 1.11); a Keras model returns extra fetches.
        """
        fn = self._hooks.action_distribution_fn
        if fn is None:
            return model_forward(self.model, input_dict, state_batches, seq_lens)
        # RLlib's newer or older signature, whichever ``fn`` has (``_core.action_dist_fn``).
        dist_inputs, self.dist_class, state_out = self._dist_fn_call(fn)(
            self,
            self.model,
            input_dict,
            state_batches=state_batches,
            seq_lens=seq_lens,
            explore=explore,
            timestep=timestep,
            is_training=False,
        )
        return dist_inputs, state_out, {}

    def _log_likelihoods_step(
        self,
        actions: Any,
        obs_batch: Any,
        state_batches: Optional[List[TensorType]],
        prev_action_batch: Any,
        prev_reward_batch: Any,
        actions_normalized: bool,
    ) -> TensorType:
        """Template step of ``compute_log_likelihoods`` (``obs_batch`` is flat).

        Raises:
            ValueError: With an ``action_sampler_fn`` but no ``action_distribution_fn``.
        """
        hooks = self._hooks
        if hooks.action_sampler_fn is not None and hooks.action_distribution_fn is None:
            raise ValueError(
                "Cannot compute log-prob/likelihood w/o an "
                "`action_distribution_fn` and a provided `action_sampler_fn`!"
            )
        batch = SampleBatch({SampleBatch.OBS: _as_array(obs_batch)}, _is_training=False)
        if prev_action_batch is not None:
            batch[SampleBatch.PREV_ACTIONS] = _as_array(prev_action_batch)
        if prev_reward_batch is not None:
            batch[SampleBatch.PREV_REWARDS] = _as_array(prev_reward_batch)
        batch = self._lazy_tensor_dict(batch)
        states = [tracing.to_tensor(_as_array(s)) for s in (state_batches or [])]
        seq_lens = tf.ones(len(batch), dtype=tf.int32) if states else None
        self.exploration.before_compute_actions(explore=False)
        if hooks.action_distribution_fn is not None:
            dist_inputs, dist_class, _ = self._dist_fn_call(hooks.action_distribution_fn)(
                self,
                self.model,
                batch,
                state_batches=states,
                seq_lens=seq_lens,
                explore=False,
                is_training=False,
            )
        else:
            dist_inputs, _ = self.model(batch, states, seq_lens)
            dist_class = self.dist_class
        if not actions_normalized and self.config["normalize_actions"]:
            actions = normalize_action(actions, self.action_space_struct)
        return dist_class(dist_inputs, self.model).logp(tracing.to_tensor(_as_array(actions)))

    @override(Policy)
    def postprocess_trajectory(
        self,
        sample_batch: SampleBatch,
        other_agent_batches: Optional[Dict[Any, Tuple[Policy, SampleBatch]]] = None,
        episode: Optional[Any] = None,
    ) -> SampleBatch:
        sample_batch = Policy.postprocess_trajectory(self, self.obs_flattener.batch_in_place(sample_batch))
        if self._hooks.postprocess_fn is not None:
            return self._hooks.postprocess_fn(self, sample_batch, other_agent_batches, episode)
        return sample_batch

    # ------------------------------------------------------------------ learning

    def _check_can_learn(self, what: str) -> None:
        """Template step: a policy without a loss refuses to learn (before the
        learn callback runs or a buffer changes)."""
        if self._loss is None:
            raise ValueError(
                f"{type(self).__name__} has no loss: pass loss_fn to "
                "build_eager_tf_policy (or build_tf_policy) or override loss()"
            )

    def _learn_step(self, batch: SampleBatch) -> Dict[str, TensorType]:
        """Template step of ``learn_on_batch``: pads and converts the batch, runs
        :meth:`_learn_on_batch_helper` (traced with ``eager_tracing``); numpy stats."""
        batch = self._prepare_train_batch(batch)
        return tracing.to_numpy(self._run("learn_on_batch", self._learn_on_batch_helper, batch))

    @override(Policy)
    @with_lock
    def compute_gradients(
        self, postprocessed_batch: SampleBatch
    ) -> Tuple[ModelGradients, Dict[str, TensorType]]:
        batch = self._prepare_train_batch(postprocessed_batch)
        grads, stats = self._run("compute_gradients", self._compute_gradients_helper, batch)
        return tracing.to_numpy(grads), tracing.to_numpy(stats)

    @override(Policy)
    @with_lock
    def apply_gradients(self, gradients: ModelGradients) -> None:
        """Applies gradients as ``compute_gradients`` returns them (one per
        trainable variable, None allowed; a list of such lists with
        ``_tf_policy_handles_more_than_one_loss``)."""
        learning.zip_with_variables(
            gradients, learning.trainable_variables(self.model), self._multi_loss()
        )  # validates the count
        grads = tree.map_structure(lambda g: None if g is None else tf.convert_to_tensor(g), gradients)
        self._run("apply_gradients", self._apply_gradients_helper, grads)

    def _prepare_train_batch(self, batch: Union[SampleBatch, Dict[str, Any]]) -> SampleBatch:
        """``batch`` as a flat SampleBatch, prepared by :meth:`_prepare_in_place`."""
        sb = batch if isinstance(batch, SampleBatch) else SampleBatch(batch)
        sb = self.obs_flattener.input_dict(sb)
        self._prepare_in_place(sb)
        return sb

    def _prepare_in_place(self, batch: SampleBatch) -> None:
        """Pads ``batch`` to whole sequences (and the divisibility requirement),
        makes it hand out tensors and marks it (and the policy) as training."""
        pad_batch_to_sequences_of_same_size(
            batch,
            max_seq_len=self._max_seq_len,
            shuffle=False,
            batch_divisibility_req=self.batch_divisibility_req,
            view_requirements=self.view_requirements,
        )
        self._is_training = True
        self._lazy_tensor_dict(batch)
        batch.set_training(True)

    def _learn_on_batch_helper(self, samples: Any) -> Dict[str, Any]:
        """One learn step on a (tensor) batch: gradients, stats, optimizer step."""
        grads_and_vars, _, stats = self._gradients_and_stats(_as_tensor_batch(samples, training=True))
        self._apply_grads_and_vars(grads_and_vars)
        return stats

    def _compute_gradients_helper(self, samples: Any, clip: bool = True) -> Tuple[Any, Dict[str, Any]]:
        _, grads, stats = self._gradients_and_stats(_as_tensor_batch(samples, training=True), clip=clip)
        return grads, stats

    def _apply_gradients_helper(self, grads: Any) -> None:
        self._apply_grads_and_vars(
            learning.zip_with_variables(grads, learning.trainable_variables(self.model), self._multi_loss())
        )

    def _multi_loss(self) -> bool:
        """Whether the policy runs one optimizer per loss term."""
        return bool(self.config.get("_tf_policy_handles_more_than_one_loss"))

    def _compute_losses(self, samples: Any) -> List[Any]:
        """Runs the loss (and the model's ``custom_loss``) on ``samples``.

        Raises:
            ValueError: If the policy has no loss, or (several optimizers) the
                number of losses differs from the number of optimizers.
        """
        if self._loss is None:
            raise ValueError(
                f"{type(self).__name__} has no loss: pass loss_fn to "
                "build_eager_tf_policy (or build_tf_policy) or override loss()"
            )
        losses = force_list(self._loss(self, self.model, self.dist_class, samples))
        custom = getattr(self.model, "custom_loss", None)
        if callable(custom):
            losses = force_list(custom(losses, samples))
        if self._multi_loss() and len(losses) != len(self._optimizers):
            raise ValueError(
                f"loss_fn returned {len(losses)} losses for {len(self._optimizers)} "
                "optimizers; return one per optimizer"
            )
        return losses

    def _gradients_and_stats(self, samples: Any, clip: bool = True) -> Tuple[Any, Any, Dict[str, Any]]:
        """Loss, gradients and learner stats for one (tensor) batch.

        Args:
            samples: The train batch.
            clip: Clip by ``config["grad_clip"]`` (when set) in the default
                gradient computation; the towers path clips their mean instead.

        Returns:
            ``(grads_and_vars, grads, stats)`` in RLlib's single- or multi-loss layout.
        """
        hooks, multi = self._hooks, self._multi_loss()
        variables = learning.trainable_variables(self.model)
        # Persistent when gradients are taken more than once (RLlib 1.11 forgets the
        # several-losses case and then fails on the second loss).
        persistent = hooks.compute_gradients_fn is not None or multi
        with tf.variable_creator_scope(tracing.disallow_variable_creation):
            with tf.GradientTape(persistent=persistent) as tape:
                losses = self._compute_losses(samples)
        if hooks.compute_gradients_fn is not None:
            opt = learning.TapeOptimizer(tape, variables)
            if multi:
                grads_and_vars = hooks.compute_gradients_fn(self, [opt] * len(losses), losses)
            else:
                grads_and_vars = [hooks.compute_gradients_fn(self, opt, losses[0])]
        else:
            grads_and_vars = learning.tape_gradients(
                tape, losses, variables, self.config.get("grad_clip") if clip else None
            )
        if multi:
            grads = [[g for g, _ in gv] for gv in grads_and_vars]
        else:
            grads_and_vars = grads_and_vars[0]
            grads = [g for g, _ in grads_and_vars]
        return grads_and_vars, grads, self._learn_stats(samples, grads)

    def _learn_stats(self, samples: Any, grads: Any) -> Dict[str, Any]:
        """``{learner_stats: stats_fn(...)}`` plus extra learn fetches and gradient stats."""
        hooks = self._hooks
        fetches: Dict[str, Any] = {
            LEARNER_STATS_KEY: learning.read_variables(dict(hooks.stats_fn(self, samples)))
            if hooks.stats_fn
            else {}
        }
        if hooks.extra_learn_fetches_fn is not None:
            fetches.update(dict(hooks.extra_learn_fetches_fn(self)))
        if hooks.grad_stats_fn is not None:
            fetches.update(dict(hooks.grad_stats_fn(self, samples, grads)))
        return fetches

    def _apply_grads_and_vars(self, grads_and_vars: Any) -> None:
        """Steps the optimizer(s) (or runs ``apply_gradients_fn``) on ``grads_and_vars``."""
        fn, multi = self._hooks.apply_gradients_fn, self._multi_loss()
        if fn is not None:
            fn(self, self._optimizers if multi else self._optimizer, grads_and_vars)
        else:
            learning.step_optimizers(self._optimizers, grads_and_vars, multi, self._apply_steps)

    # ------------------------------------------------------------------ buffers / towers

    def _device_slices(self, batch: SampleBatch) -> List[Any]:
        """Template step of ``load_batch_into_buffer``: the padded, tensor-backed
        batch (one device), or one such slice per tower; with
        ``config["_deterministic_towers"]`` the fixed chunk plan, every chunk
        prepared on its own."""
        if self._exact_chunks:
            plan = plan_exact_chunks(
                batch, minibatch_rows(self.config), self._exact_chunks, len(self.devices)
            )
            return [share.map_batches(self._prepare_train_batch) for share in plan]
        if len(self.devices) == 1:
            return [self._prepare_train_batch(batch)]
        return split_batch_for_devices(batch, len(self.devices), self._prepare_in_place)

    def _learn_on_device_batches(self, batches: List[Any], buffer_index: int) -> Dict[str, Any]:
        """Template step of ``learn_on_loaded_batch``: one device runs
        ``learn_on_batch`` on its minibatch (RLlib 1.11's shortcut); several
        towers average their gradients (clipped after the mean) into one update
        and report ``{"tower_<i>": stats}``.

        With ``config["_deterministic_towers"]`` (``batches`` are each tower's
        chunks): every chunk's raw gradients, summed in chunk order, chunk c
        weighted by its sample share, then clipped and applied once;
        ``tower_<i>`` holds the stats of tower i's first chunk."""
        if self._exact_chunks:
            return self._learn_on_exact_chunks(batches)
        if len(batches) == 1:
            return self.learn_on_batch(batches[0])
        outs = [
            self._run(
                "compute_gradients", self._compute_gradients_helper, self._prepare_train_batch(b), False
            )
            for b in batches
        ]
        grads = learning.clip_grad_lists(
            learning.mean_grads([g for g, _ in outs]), self.config.get("grad_clip"), self._multi_loss()
        )
        self._run("apply_gradients", self._apply_gradients_helper, grads)
        return {f"tower_{i}": tracing.to_numpy(stats) for i, (_, stats) in enumerate(outs)}

    def _learn_on_exact_chunks(self, device_chunks: List[Any]) -> Dict[str, Any]:
        """The deterministic step of ``_learn_on_device_batches`` (see there)."""
        done = []
        stats: Dict[str, Any] = {}
        for i, chunks in enumerate(device_chunks):
            for chunk in chunks:
                grads, chunk_stats = self._run(
                    "compute_gradients", self._compute_gradients_helper, chunk.batch, False
                )
                done.append((chunk, grads))
                stats.setdefault(f"tower_{i}", tracing.to_numpy(chunk_stats))
        done.sort(key=lambda pair: pair[0].position)

        def weighted_sum(position_grads: List[Any]) -> Any:
            acc = None
            for (chunk, _), g in zip(done, position_grads):
                if g is None:
                    continue
                g = tf.convert_to_tensor(g)
                term = g * tf.cast(chunk.weight, g.dtype)
                acc = term if acc is None else acc + term
            return acc

        multi = self._multi_loss()
        groups = [g if multi else [g] for _, g in done]
        summed = [
            [weighted_sum([grp[k][j] for grp in groups]) for j in range(len(groups[0][k]))]
            for k in range(len(groups[0]))
        ]
        grads = learning.clip_grad_lists(summed if multi else summed[0], self.config.get("grad_clip"), multi)
        self._run("apply_gradients", self._apply_gradients_helper, grads)
        return stats

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
            named.update(
                variables_lib.extra_variable_names(extra, set(named), getattr(self, "target_model", None))
            )
        return named

    @override(Policy)
    @with_lock
    def get_weights(self, as_dict: bool = False) -> ModelWeights:
        """The values of ``variables()`` as numpy copies.

        Args:
            as_dict: False (RLlib 1.11's default for eager policies, and what
                ``get_state`` and checkpoints store): a list, one array per
                variable in ``variables()`` order. True: a ``{key: array}``
                dict, keys as ``model.variables(as_dict=True)``.

        Returns:
            A list, or with ``as_dict`` a dict; ``set_weights`` takes both.
        """
        named = self._named_variables()
        if as_dict:
            return {k: np.array(v.numpy(), copy=True) for k, v in named.items()}
        # (RLlib 1.11's eager format, a list; ModelWeights is typed as a dict.)
        return [np.array(v.numpy(), copy=True) for v in named.values()]  # type: ignore[return-value]

    @override(Policy)
    @with_lock  # no forward pass sees half-assigned weights
    def set_weights(self, weights: ModelWeights) -> None:
        """Sets the weights from a ``get_weights`` list (by position, RLlib 1.11) or dict.

        A dict whose keys differ from this model's only in Keras' per-process
        layer numbering (another instance's or process's ``dense_3`` for this
        one's ``dense``) is taken by position too.

        A catalog model's TF graph or torch ``get_weights()`` dict is taken too:
        it is mapped onto this model's variables by their TF names (the graph
        keys) and converted to TF's layout (``rlpolicy.models.convert_weights``).

        Raises:
            ValueError: Naming missing/unknown keys or a shape mismatch; then
                no variable has been changed.
        """
        named = self._named_variables()
        if (
            isinstance(weights, dict)
            and weights
            and set(weights) != set(named)
            and weights_layout(weights) not in ("tf2", "unknown")
        ):
            weights = adapt_weights(
                weights,
                {k: v.numpy() for k, v in named.items()},
                "tf2",
                {k: v.name.split(":")[0] for k, v in named.items()},
            )
        for var, value in variables_lib.check_weights(weights, named):
            var.assign(value)

    def _optimizer_variables(self) -> List[Any]:
        return [v for opt in self._optimizers for v in variables_lib.optimizer_variables(opt)]

    def _optimizer_state(self) -> Optional[List[np.ndarray]]:
        """Template step: numpy copies of all optimizers' variables (in order),
        or None when there are none."""
        opt_vars = self._optimizer_variables()
        return tracing.to_numpy(opt_vars) if opt_vars else None

    def _check_optimizer_state(self, values: Any) -> Optional[List[Tuple[Any, np.ndarray]]]:
        """Template step: ``(variable, value)`` pairs for saved optimizer
        variables (None when the state has none).

        Raises:
            ValueError: If their count or a shape does not fit the optimizers.
        """
        if not values:
            return None
        return variables_lib.check_optimizer_state(values, self._optimizer_variables())

    def _set_optimizer_state(self, checked: List[Tuple[Any, np.ndarray]]) -> None:
        """Template step: assigns what ``_check_optimizer_state`` returned."""
        for var, value in checked:
            var.assign(value)

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
    @with_lock
    def export_model(self, export_dir: str, onnx: Optional[int] = None, pipeline: bool = False) -> None:
        """Exports the model: a SavedModel with a ``serving_default`` signature,
        or with ``onnx`` (an opset version) ``model.onnx``; see ``policy._eager.export``.

        With ``pipeline=True``, the whole action pipeline instead (raw
        observations to env actions, deterministic and noise-sampled), checked
        against ``compute_actions(explore=False)`` before it is written
        (``rlpolicy.policy._tf.pipeline_export``, docs/export_pipeline.md)."""
        from rlpolicy.policy._eager import export as eager_export

        if pipeline:
            from rlpolicy.policy._tf.pipeline_export import export_eager_pipeline

            hooks = self._hooks
            self._export_action_pipeline(
                export_eager_pipeline,
                export_dir,
                onnx,
                hooks.action_sampler_fn,
                hooks.action_distribution_fn,
                model_forward=model_forward,
            )
            return
        dummy = getattr(self, "_dummy_batch", None) or self._get_dummy_batch_from_view_requirements(1)
        specs = eager_export.serving_specs(self.model, dummy)
        if onnx:
            eager_export.export_onnx(self.model, specs, export_dir, onnx)
        else:
            eager_export.export_saved_model(self.model, specs, export_dir)

    @override(Policy)
    def export_checkpoint(
        self, export_dir: str, filename_prefix: str = "model", policy_state: Optional[Dict[str, Any]] = None
    ) -> None:
        """Writes a ``tf.train.Checkpoint`` (``<prefix>.index``/``.data-*``: model
        variables, optimizers, global timestep) and rlpolicy's pickle-free
        checkpoint (for ``Policy.from_checkpoint``) into ``export_dir``."""
        from rlpolicy.policy._eager import export as eager_export

        super().export_checkpoint(export_dir, filename_prefix, policy_state)
        ckpt = eager_export.make_tf_checkpoint(self.model, self._optimizers, self.global_timestep)
        ckpt.write(os.path.join(export_dir, filename_prefix))

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
        return type(
            cls.__name__ + "_traced",
            (cls,),
            {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__ + "_traced",
                "_force_tracing": True,
            },
        )


if tf is not None:
    make_methods_eager(EagerTFPolicy)


# ---------------------------------------------------------------- module-level helpers

SEQ_LENS = "seq_lens"


def _is_keras_model(model: Any) -> bool:
    """Whether ``model`` is a Keras (``tf_keras``) model rather than a ModelV2."""
    global _KERAS_MODEL
    if _KERAS_MODEL is None:
        _KERAS_MODEL = get_keras().Model
    return isinstance(model, _KERAS_MODEL)


def _check_model(owner: str, model: Any) -> None:
    """Raises TypeError unless ``model`` is a TFModelV2 or a Keras model."""
    from rlpolicy.models.tf.tf_modelv2 import TFModelV2

    if not isinstance(model, TFModelV2) and not _is_keras_model(model):
        raise TypeError(
            f"{owner}: the model must be a TFModelV2 (or Keras model), got {type(model).__name__}"
        )


def _as_array(x: Any) -> Any:
    """A list of rows as a numpy array (lists of objects stay lists)."""
    if isinstance(x, list):
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):
            return x
        return x if arr.dtype == object else arr
    return x


def _as_tensor_batch(samples: Any, training: bool) -> SampleBatch:
    """A SampleBatch view of ``samples`` (already one, or a traced dict of tensors).

    Inside ``tf.function`` the batch arrives as a plain dict; its ``count`` is
    the static batch size (None once TF generalised it to any size).
    """
    if isinstance(samples, SampleBatch):
        return samples
    first = next(
        (v for k, v in samples.items() if k != SEQ_LENS and not k.startswith(("state_in_", "state_out_"))),
        None,
    )
    count = None if first is None else tree.flatten(first)[0].shape[0]
    flags = {
        "_time_major": None,
        "_max_seq_len": None,
        "_is_training": training,
        "_zero_padded": training and SEQ_LENS in samples,
    }
    return SampleBatch._trusted(dict(samples), count, flags)  # type: ignore[arg-type]


def model_forward(
    model: Any, input_dict: Any, state_batches: List[Any], seq_lens: Any
) -> Tuple[Any, List[Any], Dict[str, Any]]:
    """One forward pass: ``(dist_inputs, state_outs, extra_fetches)``.

    A ModelV2 is called as ``model(input_dict, state, seq_lens)``; a Keras
    model as ``model(input_dict)`` with the states and ``seq_lens`` put into
    ``input_dict`` (it returns its extra fetches as a third output).
    """
    if _is_keras_model(model):
        for i, s in enumerate(state_batches):
            input_dict.setdefault(f"state_in_{i}", s)
        input_dict[SEQ_LENS] = seq_lens
        dist_inputs, state_out, extra = model(input_dict)
        return dist_inputs, list(state_out), dict(extra)
    dist_inputs, state_out = model(input_dict, state_batches, seq_lens)
    return dist_inputs, list(state_out), {}


def _action_extras(logp: Any, dist_inputs: Any) -> Dict[str, Any]:
    """RLlib 1.11's extra action outputs: ``action_prob``/``action_logp`` (when
    ``logp`` is not None) and ``action_dist_inputs`` (when given)."""
    out: Dict[str, Any] = {}
    if logp is not None:
        out["action_prob"] = tf.exp(logp)
        out["action_logp"] = logp
    if dist_inputs is not None:
        out["action_dist_inputs"] = dist_inputs
    return out


def _eager_config(policy: EagerTFPolicy, config: Optional[dict]) -> dict:
    """The completed config (a new dict; the caller's is left alone), with the
    ``get_default_config`` defaults under it and framework ``"tf2"``/``"tfe"``."""
    full = complete_policy_config(policy, config)
    if full.get("framework") not in EAGER_FRAMEWORKS:
        # RLlib 1.11: an eager policy runs as framework "tf2" ("tfe" is kept).
        full["framework"] = "tf2"
    return full


# ---------------------------------------------------------------- the factory


@DeveloperAPI
def build_eager_tf_policy(
    name: str,
    loss_fn: Optional[Callable],
    get_default_config: Optional[Callable] = None,
    postprocess_fn: Optional[Callable] = None,
    stats_fn: Optional[Callable] = None,
    optimizer_fn: Optional[Callable] = None,
    compute_gradients_fn: Optional[Callable] = None,
    apply_gradients_fn: Optional[Callable] = None,
    grad_stats_fn: Optional[Callable] = None,
    extra_learn_fetches_fn: Optional[Callable] = None,
    extra_action_out_fn: Optional[Callable] = None,
    validate_spaces: Optional[Callable] = None,
    before_init: Optional[Callable] = None,
    before_loss_init: Optional[Callable] = None,
    after_init: Optional[Callable] = None,
    make_model: Optional[Callable] = None,
    action_sampler_fn: Optional[Callable] = None,
    action_distribution_fn: Optional[Callable] = None,
    mixins: Optional[List[type]] = None,
    get_batch_divisibility_req: Optional[Callable] = None,
    obs_include_prev_action_reward: Any = DEPRECATED_VALUE,
    extra_action_fetches_fn: Optional[Callable] = None,
    gradients_fn: Optional[Callable] = None,
) -> Type[EagerTFPolicy]:
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


def _make_eager_class(hooks: TFPolicyHooks, module: str) -> Type[EagerTFPolicy]:
    check_factory_args("build_eager_tf_policy", hooks.name, hooks.mixins)
    cls_name = hooks.name + "_eager"
    namespace = {
        "__module__": module,
        "__qualname__": cls_name,
        "_hooks": hooks,
        "__doc__": f"{cls_name}: eager TF policy built by build_eager_tf_policy.",
        # Mixins come first in the MRO but must not take over __init__.
        "__init__": _built_class_init,
        "with_updates": classmethod(_with_updates),
    }
    return type(cls_name, (*hooks.mixins, EagerTFPolicy), namespace)


def _built_class_init(
    self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> None:
    EagerTFPolicy.__init__(self, observation_space, action_space, config)


def _with_updates(cls: Type[EagerTFPolicy], **overrides: Any) -> Type[EagerTFPolicy]:
    """Builds a new eager policy class from this one's arguments, with ``overrides`` replaced.

    Raises:
        TypeError: For a keyword that ``build_eager_tf_policy`` does not take.
    """
    hooks = TFPolicyHooks(**resolve_deprecated_args(updated_kwargs(cls, overrides)))
    new = _make_eager_class(hooks, module=sys._getframe(1).f_globals.get("__name__", __name__))
    return new.with_tracing() if cls._force_tracing else new


__all__ = ["build_eager_tf_policy", "EagerTFPolicy"]
