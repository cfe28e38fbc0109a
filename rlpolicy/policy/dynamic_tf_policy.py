"""A TF graph-mode policy that builds its own placeholders (RLlib 1.11's
``ray.rllib.policy.dynamic_tf_policy``).

``DynamicTFPolicy`` creates a ``tf1.Graph`` and ``tf1.Session`` (unless a
default session on the current graph is active), builds the model,
placeholders from the view requirements, the action graph (model ->
distribution -> exploration), and then, from one dummy-batch run, the loss on
placeholders for every column the postprocessed batch has
(``_core.tf_loss_init``). With several devices it adds a
``TFMultiGPUTowerStack``: one copy of the loss per device (``copy()``), sharing
the model's variables. Use ``build_tf_policy`` rather than subclassing it.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

import gymnasium as gym
import tree

from rlpolicy._core import tf_loss_init, tf_setup
from rlpolicy._core.action_dist_fn import resolve_action_distribution_fn
from rlpolicy._core.obs_prep import prepare_observation_space
from rlpolicy._core.tf_variables import initialize_uninitialized
from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.policy.policy import Policy, complete_policy_config
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.tf_mixins import create_pending_variables
from rlpolicy.policy.tf_policy import TFPolicy
from rlpolicy.utils import force_list
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.deprecation import DEPRECATED_VALUE, deprecation_warning
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.tf_utils import get_placeholder
from rlpolicy.utils.typing import TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()
logger = logging.getLogger(__name__)

_HOOK_NAMES = ("loss_fn", "stats_fn", "grad_stats_fn", "before_loss_init", "make_model",
               "action_sampler_fn", "action_distribution_fn", "get_batch_divisibility_req")


@DeveloperAPI
class DynamicTFPolicy(TFPolicy):
    """A TFPolicy that builds its placeholders, action graph and loss itself.

    Attributes (besides TFPolicy's):
        model: The ModelV2 (from ``make_model``, the catalog, or
            ``existing_model``).
        dist_class: The action distribution class (None with an
            ``action_sampler_fn``).
        view_requirements: Pruned by the dummy-batch loss initialisation.
        _is_tower: True for the per-device copies made by ``copy()``.
        _input_dict: SampleBatch of the placeholders (one per training column).
        _extra_action_fetches: Extra action outputs (e.g. from
            ``build_tf_policy``'s ``extra_action_out_fn``).
    """

    @DeveloperAPI
    def __init__(self, obs_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: TrainerConfigDict,
                 loss_fn: Optional[Callable[..., Union[TensorType, List[TensorType]]]],
                 *, stats_fn: Optional[Callable[..., Dict[str, TensorType]]] = None,
                 grad_stats_fn: Optional[Callable[..., Dict[str, TensorType]]] = None,
                 before_loss_init: Optional[Callable[..., None]] = None,
                 make_model: Optional[Callable[..., ModelV2]] = None,
                 action_sampler_fn: Optional[Callable[..., Tuple[TensorType, TensorType]]] = None,
                 action_distribution_fn: Optional[Callable[..., Tuple[TensorType, type,
                                                                      List[TensorType]]]] = None,
                 existing_inputs: Optional[Dict[str, "tf1.placeholder"]] = None,
                 existing_model: Optional[ModelV2] = None,
                 get_batch_divisibility_req: Optional[Callable[[Policy], int]] = None,
                 obs_include_prev_action_reward: Any = DEPRECATED_VALUE):
        """Builds the graph-mode policy.

        Args:
            obs_space: Observation space of the policy.
            action_space: Action space of the policy.
            config: The policy config (partial dicts are completed).
            loss_fn: ``(policy, model, dist_class, train_batch) -> loss`` (or a
                list of losses); ``train_batch`` is a SampleBatch of
                placeholders. None: the policy does not learn.
            stats_fn: ``(policy, train_batch) -> dict of tensors`` fetched as
                learner stats.
            grad_stats_fn: ``(policy, train_batch, grads) -> dict of tensors``
                fetched as learner stats.
            before_loss_init: ``(policy, obs_space, action_space, config)``,
                run after the action graph and before the loss is built.
            make_model: ``(policy, obs_space, action_space, config) ->
                ModelV2``; required with ``action_sampler_fn`` or
                ``action_distribution_fn``.
            action_sampler_fn: ``(policy, model, obs_batch=, state_batches=,
                seq_lens=, prev_action_batch=, prev_reward_batch=, explore=,
                is_training=) -> (sampled_action, logp)``.
            action_distribution_fn: ``(policy, model, input_dict=,
                state_batches=, seq_lens=, explore=, timestep=, is_training=)
                -> (dist_inputs, dist_class, state_out)``.
            existing_inputs: Name -> tensor inputs of a tower copy (set by
                ``copy()``); makes this policy a tower (``_is_tower``).
            existing_model: The model to share (a tower copy), or
                ``[model, (attr_name, other_model), ...]``.
            get_batch_divisibility_req: ``policy -> int`` (or an int).
            obs_include_prev_action_reward: Deprecated; ignored with a warning.

        Raises:
            ValueError: If ``action_sampler_fn``/``action_distribution_fn`` is
                given without ``make_model``.
        """
        if obs_include_prev_action_reward != DEPRECATED_VALUE:
            deprecation_warning(old="obs_include_prev_action_reward", error=False)
        self.observation_space = obs_space = prepare_observation_space(obs_space, config)
        self.action_space = action_space
        self.config = config = complete_policy_config(self, config)
        self.framework = "tf"
        self._loss_fn, self._stats_fn, self._grad_stats_fn = loss_fn, stats_fn, grad_stats_fn
        # The hooks again, for tower copies of a plain DynamicTFPolicy (see copy()).
        self._dynamic_hooks = dict(zip(_HOOK_NAMES, (
            loss_fn, stats_fn, grad_stats_fn, before_loss_init, make_model, action_sampler_fn,
            action_distribution_fn, get_batch_divisibility_req)))
        self._seq_lens = None
        self._is_tower = existing_inputs is not None
        if not hasattr(self, "_extra_action_fetches"):
            self._extra_action_fetches = {}
        sess = _session_for(config)
        self._sess, self.graph = sess, sess.graph
        with sess.graph.as_default(), sess.as_default():
            # Mixins set up in before_init (RLlib's R2D2) waited for this session.
            create_pending_variables(self)
            dist_class = self._build_model(make_model, action_sampler_fn, action_distribution_fn,
                                           existing_model)
            self._make_state_inputs(existing_inputs)
            self._make_view_requirements()
            explore, timestep = self._make_input_dict(existing_inputs)
            sampled_action, logp, dist_inputs, dist_class = self._build_action_graph(
                dist_class, action_sampler_fn, action_distribution_fn, explore, timestep)
            divisibility = get_batch_divisibility_req(self) if callable(get_batch_divisibility_req) \
                else (get_batch_divisibility_req or 1)
            phs = self._input_dict
            super().__init__(
                observation_space=obs_space, action_space=action_space, config=config, sess=sess,
                obs_input=dict.get(phs, SampleBatch.OBS),
                action_input=dict.get(phs, SampleBatch.ACTIONS),
                sampled_action=sampled_action, sampled_action_logp=logp,
                dist_inputs=dist_inputs, dist_class=dist_class, loss=None, loss_inputs=[],
                model=self.model, state_inputs=self._state_inputs, state_outputs=self._state_out,
                prev_action_input=self._accessed_placeholder(SampleBatch.PREV_ACTIONS),
                prev_reward_input=self._accessed_placeholder(SampleBatch.PREV_REWARDS),
                seq_lens=self._seq_lens, max_seq_len=config["model"]["max_seq_len"],
                batch_divisibility_req=divisibility, explore=explore, timestep=timestep)
            if before_loss_init is not None:
                before_loss_init(self, obs_space, action_space, config)
            if not self._is_tower:
                self._initialize_loss_from_dummy_batch(auto_remove_unneeded_view_reqs=True)
                self._build_tower_stacks()
                self.global_timestep = 0

    # ------------------------------------------------------------------ construction steps

    def _build_model(self, make_model: Optional[Callable], action_sampler_fn: Optional[Callable],
                     action_distribution_fn: Optional[Callable],
                     existing_model: Any) -> Optional[Type]:
        """Sets ``self.model``; returns the catalog's distribution class (or None)."""
        dist_class = logit_dim = None
        if action_sampler_fn or action_distribution_fn:
            if not make_model:
                raise ValueError("`make_model` is required if `action_sampler_fn` OR "
                                 "`action_distribution_fn` is given")
        else:
            dist_class, logit_dim = ModelCatalog.get_action_dist(
                self.action_space, self.config["model"], framework="tf")
        if existing_model is not None:
            if isinstance(existing_model, list):
                self.model = existing_model[0]
                for name, other in existing_model[1:]:
                    if other is not None:
                        setattr(self, name, other)
            else:
                self.model = existing_model
        elif make_model:
            self.model = make_model(self, self.observation_space, self.action_space, self.config)
        else:
            self.model = ModelCatalog.get_model_v2(
                obs_space=self.observation_space, action_space=self.action_space,
                num_outputs=logit_dim, model_config=self.config["model"], framework="tf")
        self._update_model_view_requirements_from_init_state()
        return dist_class

    def _make_state_inputs(self, existing_inputs: Optional[Dict[str, Any]]) -> None:
        if existing_inputs is not None:
            self._state_inputs = [v for k, v in existing_inputs.items() if k.startswith("state_in_")]
            if self._state_inputs:
                self._seq_lens = existing_inputs[SampleBatch.SEQ_LENS]
            return
        vrs = getattr(self.model, "view_requirements", {}) or {}
        self._state_inputs = [
            get_placeholder(space=vr.space, time_axis=not isinstance(vr.shift, int), name=k)
            for k, vr in vrs.items() if k.startswith("state_in_")]
        if self._state_inputs:
            self._seq_lens = tf1.placeholder(dtype=tf.int32, shape=[None], name="seq_lens")

    def _make_view_requirements(self) -> None:
        self.view_requirements = self._get_default_view_requirements()
        self.view_requirements.update(getattr(self.model, "view_requirements", {}) or {})
        if SampleBatch.INFOS in self.view_requirements:
            self.view_requirements[SampleBatch.INFOS].used_for_training = False

    def _make_input_dict(self, existing_inputs: Optional[Dict[str, Any]]) -> Tuple[Any, Any]:
        """Creates ``_input_dict`` / ``_dummy_batch``; returns the (explore, timestep) inputs."""
        if self._is_tower:
            timestep, explore = existing_inputs["timestep"], False
            extra = dict(existing_inputs)
        else:
            extra = {}
            if not self.config.get("_disable_action_flattening"):
                extra[SampleBatch.ACTIONS] = ModelCatalog.get_action_placeholder(self.action_space)
                if SampleBatch.PREV_ACTIONS not in self.view_requirements:
                    extra[SampleBatch.PREV_ACTIONS] = ModelCatalog.get_action_placeholder(
                        self.action_space, "prev_action")
            timestep = tf1.placeholder_with_default(tf.zeros((), dtype=tf.int64), (),
                                                    name="timestep")
            explore = tf1.placeholder_with_default(True, (), name="is_exploring")
        self._input_dict = tf_loss_init.build_input_dict(self, self.view_requirements, extra,
                                                         create_missing=not self._is_tower)
        self._dummy_batch = self._get_dummy_batch_from_view_requirements(
            tf_loss_init.DUMMY_BATCH_SIZE)
        self._input_dict.set_training(self._get_is_training_placeholder())
        return explore, timestep

    def _accessed_placeholder(self, key: str) -> Optional[Any]:
        if key in self._input_dict.accessed_keys:
            return dict.__getitem__(self._input_dict, key)
        return None

    def _build_action_graph(self, dist_class: Optional[Type], action_sampler_fn: Optional[Callable],
                            action_distribution_fn: Optional[Callable], explore: Any,
                            timestep: Any) -> Tuple[Any, Any, Any, Optional[Type]]:
        """Model -> distribution -> exploration (nothing for towers).

        Returns:
            ``(sampled_action, sampled_action_logp, dist_inputs, dist_class)``.
        """
        self._state_out = None
        if self._is_tower:
            return None, None, None, dist_class
        self.exploration = self._create_exploration()
        in_dict = self._input_dict
        if action_sampler_fn:
            sampled_action, logp = action_sampler_fn(
                self, self.model, obs_batch=in_dict[SampleBatch.CUR_OBS],
                state_batches=self._state_inputs, seq_lens=self._seq_lens,
                prev_action_batch=in_dict.get(SampleBatch.PREV_ACTIONS),
                prev_reward_batch=in_dict.get(SampleBatch.PREV_REWARDS),
                explore=explore, is_training=in_dict.is_training)
            return sampled_action, logp, None, dist_class
        if action_distribution_fn:
            dist_inputs, dist_class, self._state_out = _call_action_distribution_fn(
                action_distribution_fn, self, in_dict, explore, timestep)
        else:
            out = self.model(in_dict)
            if len(out) == 3:  # a Keras model: (outputs, state_out, extra outputs)
                dist_inputs, self._state_out, extra = out
                self._extra_action_fetches.update(extra)
            else:
                dist_inputs, self._state_out = out
        action_dist = dist_class(dist_inputs, self.model)
        sampled_action, logp = self.exploration.get_exploration_action(
            action_distribution=action_dist, timestep=timestep, explore=explore)
        return sampled_action, logp, dist_inputs, dist_class

    def _build_tower_stacks(self) -> None:
        """One tower per device when there are several (sharing one graph for all buffers)."""
        if len(self.devices) < 2 or not self.loss_initialized():
            return
        from rlpolicy.execution.multi_gpu_impl import TFMultiGPUTowerStack

        # The towers' graph copies must share the policy's variables.
        with tf1.variable_scope("", reuse=tf1.AUTO_REUSE):
            stack = TFMultiGPUTowerStack(policy=self)
        self.multi_gpu_tower_stacks = [stack] * self._tower_buffers.num_buffers
        self._refresh_optimizer_variables()
        initialize_uninitialized(self.get_session())

    # ------------------------------------------------------------------ loss

    @override(Policy)
    def _initialize_loss_from_dummy_batch(self, auto_remove_unneeded_view_reqs: bool = True,
                                          stats_fn: Optional[Callable] = None) -> None:
        with self.graph.as_default(), self.get_session().as_default():
            tf_loss_init.initialize_loss_from_dummy_batch(self, auto_remove_unneeded_view_reqs)

    def _do_loss_init(self, train_batch: SampleBatch) -> List[TensorType]:
        """Calls loss_fn (and stats_fn) on ``train_batch``; returns the list of losses."""
        if self._loss_fn is None:
            return []
        losses = force_list(self._loss_fn(self, self.model, self.dist_class, train_batch))
        if self._stats_fn:
            self._stats_fetches.update(self._stats_fn(self, train_batch))
        self._update_ops = [] if tf_setup.is_keras_model(self.model) \
            else list(self.model.update_ops())
        return losses

    @override(TFPolicy)
    def extra_compute_action_fetches(self) -> Dict[str, TensorType]:
        return dict(TFPolicy.extra_compute_action_fetches(self),
                    **getattr(self, "_extra_action_fetches", {}))

    # ------------------------------------------------------------------ towers

    @override(TFPolicy)
    def copy(self, existing_inputs: Union[List[Tuple[str, Any]], List[Any], Dict[str, Any]]
             ) -> "TFPolicy":
        """A tower copy of this policy reading from ``existing_inputs``.

        The copy shares the model (and so its variables), has no action graph
        or exploration, and builds the loss and (unclipped) gradients on the
        given tensors with this policy's optimizers.

        Args:
            existing_inputs: The tower's input tensors: a dict or list of
                ``(name, tensor)`` pairs, or a plain list in RLlib's order
                (the loss inputs without RNN, then the state inputs, then
                seq_lens).

        Raises:
            ValueError: If the inputs do not match the loss inputs in number
                or shape.
        """
        items = self._tower_input_items(existing_inputs)
        input_dict = OrderedDict([("is_exploring", self._is_exploring),
                                  ("timestep", self._timestep)] + items)
        with self.graph.as_default(), self.get_session().as_default():
            instance = self._new_tower(input_dict)
            instance._optimizers, instance._optimizer = self._optimizers, self._optimizer
            train_batch = SampleBatch(dict(items), _is_training=True)
            losses = instance._do_loss_init(train_batch)
            rnn = {f"state_in_{i}" for i in range(len(self._state_inputs))} | {SampleBatch.SEQ_LENS}
            TFPolicy._initialize_loss(instance, losses, [(k, v) for k, v in items if k not in rnn])
            if instance._grad_stats_fn:
                instance._stats_fetches.update(
                    instance._grad_stats_fn(instance, train_batch, instance._grads))
        return instance

    def _tower_input_items(self, existing_inputs: Any) -> List[Tuple[str, Any]]:
        names = list(self._loss_input_dict_no_rnn.keys())
        names += [f"state_in_{i}" for i in range(len(self._state_inputs))]
        names += [SampleBatch.SEQ_LENS] if self._state_inputs else []
        if isinstance(existing_inputs, dict):
            items = list(existing_inputs.items())
        elif existing_inputs and all(isinstance(x, tuple) and len(x) == 2
                                     and isinstance(x[0], str) for x in existing_inputs):
            items = list(existing_inputs)
        else:
            if len(existing_inputs) != len(names):
                raise ValueError(f"copy() got {len(existing_inputs)} input tensors for the "
                                 f"{len(names)} inputs {names}; pass one tensor per input")
            items = list(zip(names, existing_inputs))
        given = [k for k, _ in items]
        if sorted(given) != sorted(names):
            raise ValueError(f"copy() got inputs {given} but the loss reads {names}")
        own = dict(self._loss_input_dict_no_rnn)
        for key, value in items:
            if key in own:
                _check_same_shapes(key, own[key], value)
        return items

    def _new_tower(self, input_dict: Dict[str, Any]) -> "DynamicTFPolicy":
        models = [self.model, ("target_q_model", getattr(self, "target_q_model", None)),
                  ("target_model", getattr(self, "target_model", None))]
        if type(self).__init__ is DynamicTFPolicy.__init__:
            hooks = dict(self._dynamic_hooks)
            return type(self)(self.observation_space, self.action_space, self.config,
                              hooks.pop("loss_fn"), existing_inputs=input_dict,
                              existing_model=models, **hooks)
        # A build_tf_policy class: its __init__ passes its own hooks on.
        return type(self)(self.observation_space, self.action_space, self.config,
                          existing_inputs=input_dict, existing_model=models)


def _session_for(config: dict) -> "tf1.Session":
    """The active default session if it runs the current (graph-mode) default graph,
    else a new session on a new graph (each policy owns its graph)."""
    sess = tf1.get_default_session()
    if sess is not None and not tf.executing_eagerly() and sess.graph is tf1.get_default_graph():
        return sess
    graph = tf1.Graph()
    if config.get("seed") is not None:
        # As RLlib's rollout worker seeds the default graph (tf1.set_random_seed).
        graph.seed = int(config["seed"])
    args = dict(config.get("tf_session_args") or {})
    return tf1.Session(graph=graph, config=tf1.ConfigProto(**args))


def _call_action_distribution_fn(fn: Callable, policy: DynamicTFPolicy, in_dict: SampleBatch,
                                 explore: Any, timestep: Any) -> Tuple[Any, Any, Any]:
    """Calls ``fn`` with RLlib's newer keywords or its older signature, whichever
    ``fn`` has (``_core.action_dist_fn``), on the placeholders."""
    return resolve_action_distribution_fn(fn)(
        policy, policy.model, in_dict, state_batches=policy._state_inputs,
        seq_lens=policy._seq_lens, explore=explore, timestep=timestep,
        is_training=in_dict.is_training)


def _check_same_shapes(key: str, own: Any, given: Any) -> None:
    own_leaves, given_leaves = tree.flatten(own), tree.flatten(given)
    if len(own_leaves) != len(given_leaves):
        raise ValueError(f"copy(): input {key!r} has {len(given_leaves)} tensors, the policy's "
                         f"has {len(own_leaves)}")
    for o, g in zip(own_leaves, given_leaves):
        if o.shape.as_list() != g.shape.as_list():
            raise ValueError(f"copy(): input {key!r} has shape {g.shape.as_list()}, the "
                             f"policy's placeholder has {o.shape.as_list()}")
