"""A TF graph-mode policy that builds its own placeholders (RLlib 1.11's
``ray.rllib.policy.dynamic_tf_policy``).

``DynamicTFPolicy`` creates a ``tf1.Graph`` and ``tf1.Session`` (unless a
default session on the current graph is active), builds the model,
placeholders from the view requirements, the action graph (model ->
distribution -> exploration), and then, from one dummy-batch run, the loss on
placeholders for every column the postprocessed batch has. With several
devices it adds a ``TFMultiGPUTowerStack``: one copy of the loss per device
(``copy()``), sharing the model's variables. Use ``build_tf_policy`` rather
than subclassing it.

The dummy-batch loss initialisation (``_initialize_loss_from_dummy_batch``)
keeps the framework-neutral rule of ``_core.loss_init`` (which columns acting,
postprocessing and the loss read, and how the view requirements are pruned
from that record); graph mode differs from torch and eager TF in how the
record is taken:

1. *acting*: the columns read while the action graph was **built** (the
   access log of ``_input_dict``); the extra action outputs get columns
   shaped from their static shapes (RLlib 1.11: no
   ``compute_actions_from_input_dict`` call at construction);
2. *postprocessing*: runs on the numpy dummy batch, as in torch; every column
   it adds gets a placeholder;
3. *loss*: is built once, on placeholders for every column of the
   postprocessed batch and those a client added to ``_loss_input_dict``
   (``before_loss_init``); the loss inputs are the columns the loss read plus
   those whose placeholders the loss graph depends on.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Type, Union

import gymnasium as gym
import numpy as np
import tree

from rlpolicy._core.action_dist_fn import resolve_action_distribution_fn
from rlpolicy._core.loss_init import AccessRecord, new_box, prune_view_requirements
from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.policy._obs_prep import prepare_observation_space
from rlpolicy.policy._tf.feeds import columns_needed_by
from rlpolicy.policy._tf.graph import is_keras_model
from rlpolicy.policy._tf.variables import initialize_uninitialized
from rlpolicy.policy.policy import Policy, complete_policy_config
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.tf_mixins import create_pending_variables
from rlpolicy.policy.tf_policy import TFPolicy
from rlpolicy.policy.view_requirement import ViewRequirement
from rlpolicy.utils import force_list
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.deprecation import DEPRECATED_VALUE, deprecation_warning
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.tf_utils import get_placeholder
from rlpolicy.utils.typing import TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()
logger = logging.getLogger(__name__)

# Rows of the dummy batch the loss is initialised on (RLlib 1.11: 32).
DUMMY_BATCH_SIZE = 32


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
        _dummy_batch: The numpy batch (``DUMMY_BATCH_SIZE`` rows) the loss
            initialisation runs through postprocessing.
        _extra_action_fetches: Extra action outputs (e.g. from
            ``build_tf_policy``'s ``extra_action_out_fn``).
    """

    @DeveloperAPI
    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        config: TrainerConfigDict,
        loss_fn: Optional[Callable[..., Union[TensorType, List[TensorType]]]],
        *,
        stats_fn: Optional[Callable[..., Dict[str, TensorType]]] = None,
        grad_stats_fn: Optional[Callable[..., Dict[str, TensorType]]] = None,
        before_loss_init: Optional[Callable[..., None]] = None,
        make_model: Optional[Callable[..., ModelV2]] = None,
        action_sampler_fn: Optional[Callable[..., Tuple[TensorType, TensorType]]] = None,
        action_distribution_fn: Optional[Callable[..., Tuple[TensorType, type, List[TensorType]]]] = None,
        existing_inputs: Optional[Dict[str, TensorType]] = None,
        existing_model: Optional[Union[ModelV2, List[Any]]] = None,
        get_batch_divisibility_req: Optional[Callable[[Policy], int]] = None,
        obs_include_prev_action_reward: Any = DEPRECATED_VALUE,
    ):
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
        self._dynamic_hooks = dict(
            loss_fn=loss_fn,
            stats_fn=stats_fn,
            grad_stats_fn=grad_stats_fn,
            before_loss_init=before_loss_init,
            make_model=make_model,
            action_sampler_fn=action_sampler_fn,
            action_distribution_fn=action_distribution_fn,
            get_batch_divisibility_req=get_batch_divisibility_req,
        )
        self._seq_lens = None
        self._is_tower = existing_inputs is not None
        if not hasattr(self, "_extra_action_fetches"):
            self._extra_action_fetches: Dict[str, TensorType] = {}
        sess = _session_for(config)
        self._sess, self.graph = sess, sess.graph
        with sess.graph.as_default(), sess.as_default():
            # Mixins set up in before_init (RLlib's R2D2) waited for this session.
            create_pending_variables(self)
            dist_class = self._build_model(
                make_model, action_sampler_fn, action_distribution_fn, existing_model
            )
            self._make_state_inputs(existing_inputs)
            self._make_view_requirements()
            explore, timestep = self._make_input_dict(existing_inputs)
            sampled_action, logp, dist_inputs, dist_class = self._build_action_graph(
                dist_class, action_sampler_fn, action_distribution_fn, explore, timestep
            )
            divisibility = (
                get_batch_divisibility_req(self)
                if callable(get_batch_divisibility_req)
                else (get_batch_divisibility_req or 1)
            )
            phs = self._input_dict
            super().__init__(
                observation_space=obs_space,
                action_space=action_space,
                config=config,
                sess=sess,
                obs_input=dict.get(phs, SampleBatch.OBS),
                action_input=dict.get(phs, SampleBatch.ACTIONS),
                sampled_action=sampled_action,
                sampled_action_logp=logp,
                dist_inputs=dist_inputs,
                dist_class=dist_class,
                loss=None,
                loss_inputs=[],
                model=self.model,
                state_inputs=self._state_inputs,
                state_outputs=self._state_out,
                prev_action_input=self._accessed_placeholder(SampleBatch.PREV_ACTIONS),
                prev_reward_input=self._accessed_placeholder(SampleBatch.PREV_REWARDS),
                seq_lens=self._seq_lens,
                max_seq_len=config["model"]["max_seq_len"],
                batch_divisibility_req=divisibility,
                explore=explore,
                timestep=timestep,
            )
            if before_loss_init is not None:
                before_loss_init(self, obs_space, action_space, config)
            if not self._is_tower:
                self._initialize_loss_from_dummy_batch(auto_remove_unneeded_view_reqs=True)
                self._build_tower_stacks()
                self.global_timestep = 0

    # ------------------------------------------------------------------ construction steps

    def _build_model(
        self,
        make_model: Optional[Callable],
        action_sampler_fn: Optional[Callable],
        action_distribution_fn: Optional[Callable],
        existing_model: Any,
    ) -> Optional[Type]:
        """Sets ``self.model``; returns the catalog's distribution class (or None)."""
        dist_class: Optional[Type] = None
        logit_dim: Any = None
        if action_sampler_fn or action_distribution_fn:
            if not make_model:
                raise ValueError(
                    "`make_model` is required if `action_sampler_fn` OR `action_distribution_fn` is given"
                )
        else:
            dist_class, logit_dim = ModelCatalog.get_action_dist(
                self.action_space, self.config["model"], framework="tf"
            )
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
                obs_space=self.observation_space,
                action_space=self.action_space,
                num_outputs=logit_dim,
                model_config=self.config["model"],
                framework="tf",
            )
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
            for k, vr in vrs.items()
            if k.startswith("state_in_")
        ]
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
            assert existing_inputs is not None  # a tower is made from its inputs
            timestep, explore = existing_inputs["timestep"], False
            extra = dict(existing_inputs)
        else:
            extra = {}
            if not self.config.get("_disable_action_flattening"):
                extra[SampleBatch.ACTIONS] = ModelCatalog.get_action_placeholder(self.action_space)
                if SampleBatch.PREV_ACTIONS not in self.view_requirements:
                    extra[SampleBatch.PREV_ACTIONS] = ModelCatalog.get_action_placeholder(
                        self.action_space, "prev_action"
                    )
            timestep = tf1.placeholder_with_default(tf.zeros((), dtype=tf.int64), (), name="timestep")
            explore = tf1.placeholder_with_default(True, (), name="is_exploring")
        self._input_dict = self._placeholders_for(
            self.view_requirements, extra, create_missing=not self._is_tower
        )
        self._dummy_batch = self._get_dummy_batch_from_view_requirements(DUMMY_BATCH_SIZE)
        self._input_dict.set_training(self._get_is_training_placeholder())
        return explore, timestep

    def _placeholders_for(
        self,
        view_requirements: Dict[str, ViewRequirement],
        existing_inputs: Dict[str, Any],
        create_missing: bool = True,
    ) -> SampleBatch:
        """Placeholders (a SampleBatch of them) for every view-requirement column used in training.

        ``state_in_i`` columns map to ``self._state_inputs[i]``; columns in
        ``existing_inputs`` (tower inputs, the action placeholder) are taken
        from there; ``state_out_i`` and ``action_dist_inputs`` get none (RLlib
        1.11). With ``create_missing=False`` (towers) no new placeholders are
        made.
        """
        disable_preprocessor = self.config.get("_disable_preprocessor_api", False)
        input_dict: Dict[str, Any] = {}
        for col, vr in view_requirements.items():
            if col.startswith("state_in_"):
                idx = int(col[len("state_in_") :])
                if idx < len(self._state_inputs):
                    input_dict[col] = self._state_inputs[idx]
            elif col.startswith("state_out_") or col == SampleBatch.ACTION_DIST_INPUTS:
                continue
            elif col in existing_inputs:
                input_dict[col] = existing_inputs[col]
            elif vr.used_for_training and create_missing:
                is_obs = col in (SampleBatch.OBS, SampleBatch.NEXT_OBS)
                flatten = not is_obs or not disable_preprocessor
                # Nested observations arrive preprocessed (one-hot discrete parts).
                space = prepare_observation_space(vr.space, self.config) if is_obs else vr.space
                input_dict[col] = get_placeholder(
                    space=space, name=col, time_axis=not isinstance(vr.shift, int), flatten=flatten
                )
        extra = {SampleBatch.SEQ_LENS: self._seq_lens} if self._seq_lens is not None else {}
        return SampleBatch(input_dict, **extra)

    def _accessed_placeholder(self, key: str) -> Optional[Any]:
        if key in self._input_dict.accessed_keys:
            return dict.__getitem__(self._input_dict, key)
        return None

    def _build_action_graph(
        self,
        dist_class: Optional[Type],
        action_sampler_fn: Optional[Callable],
        action_distribution_fn: Optional[Callable],
        explore: Any,
        timestep: Any,
    ) -> Tuple[Any, Any, Any, Optional[Type]]:
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
                self,
                self.model,
                obs_batch=in_dict[SampleBatch.CUR_OBS],
                state_batches=self._state_inputs,
                seq_lens=self._seq_lens,
                prev_action_batch=in_dict.get(SampleBatch.PREV_ACTIONS),
                prev_reward_batch=in_dict.get(SampleBatch.PREV_REWARDS),
                explore=explore,
                is_training=in_dict.is_training,
            )
            return sampled_action, logp, None, dist_class
        if action_distribution_fn:
            # RLlib's newer keywords or its older signature, whichever the hook has.
            dist_inputs, dist_class, self._state_out = resolve_action_distribution_fn(action_distribution_fn)(
                self,
                self.model,
                in_dict,
                state_batches=self._state_inputs,
                seq_lens=self._seq_lens,
                explore=explore,
                timestep=timestep,
                is_training=in_dict.is_training,
            )
        else:
            out = self.model(in_dict)
            if len(out) == 3:  # a Keras model: (outputs, state_out, extra outputs)
                dist_inputs, self._state_out, extra = out
                self._extra_action_fetches.update(extra)
            else:
                dist_inputs, self._state_out = out
        if dist_class is None:
            raise ValueError(
                "action_distribution_fn returned no action distribution class "
                "(its result must be (dist_inputs, dist_class, state_out))"
            )
        action_dist = dist_class(dist_inputs, self.model)
        sampled_action, logp = self.exploration.get_exploration_action(
            action_distribution=action_dist, timestep=timestep, explore=explore
        )
        return sampled_action, logp, dist_inputs, dist_class

    def _build_tower_stacks(self) -> None:
        """One tower per device when there are several, or always with
        ``config["_deterministic_towers"]`` (sharing one graph for all buffers)."""
        if (len(self.devices) < 2 and not self._exact_chunks) or not self.loss_initialized():
            return
        from rlpolicy.policy._tf.tower_stack import TFMultiGPUTowerStack

        # The towers' graph copies must share the policy's variables.
        with tf1.variable_scope("", reuse=tf1.AUTO_REUSE):
            stack = TFMultiGPUTowerStack(policy=self)
        self.multi_gpu_tower_stacks = [stack] * self._tower_buffers.num_buffers
        self._refresh_optimizer_variables()
        initialize_uninitialized(self.get_session())

    # ------------------------------------------------------------------ loss

    @override(Policy)
    def _initialize_loss_from_dummy_batch(
        self, auto_remove_unneeded_view_reqs: bool = True, stats_fn: Optional[Callable] = None
    ) -> None:
        """Runs the dummy batch through acting's record, postprocessing and the
        loss graph (see the module docstring), then prunes the view requirements."""
        with self.graph.as_default(), self.get_session().as_default():
            if not self._optimizers:
                self._optimizers = force_list(self.optimizer())
                self._optimizer = self._optimizers[0] if self._optimizers else None
            initialize_uninitialized(self.get_session())
            compute_keys = set(self._input_dict.accessed_keys)
            for key, vr in self.view_requirements.items():
                if not key.startswith("state_in_") and key not in compute_keys:
                    vr.used_for_compute_actions = False
            dummy = self._dummy_batch
            self._add_extra_action_columns(dummy, self._extra_action_specs(dummy))
            post, added = self._postprocess_dummy_batch(dummy)
            train_keys, has_loss = self._build_loss_graph()
            record = AccessRecord(
                compute_accessed=compute_keys,
                postprocess_accessed=set(dummy.accessed_keys) | set(getattr(post, "accessed_keys", ())),
                postprocess_added=added,
                postprocess_deleted=set(dummy.deleted_keys),
                train_accessed=train_keys,
            )
            if auto_remove_unneeded_view_reqs:
                self._prune_view_requirements(record, has_loss, train_keys)

    def _extra_action_specs(self, dummy: SampleBatch) -> Dict[str, Tuple[Tuple[int, ...], Any]]:
        """``{key: (per-row shape, numpy dtype)}`` of the extra action fetches.

        As RLlib 1.11: from the fetch tensors' static shapes, without a
        ``compute_actions_from_input_dict`` call (no exploration step,
        timestep or callbacks run at construction; torch and eager do run
        one). Only fetches whose per-row shape is not static are evaluated,
        on the dummy batch, in the policy's session (RLlib 1.11 fails on
        those).
        """
        specs, dynamic = _static_row_specs(self.extra_compute_action_fetches())
        if dynamic:
            probe = SampleBatch(dict(dict.items(dummy)))
            feed = self._action_feed_dict(probe, list(dynamic.values()))
            if getattr(self, "_is_exploring", None) is not None:
                feed[self._is_exploring] = False
            for key, value in self.get_session().run(dynamic, feed_dict=feed).items():
                value = np.asarray(value)
                specs[key] = (tuple(value.shape[1:]), value.dtype)
        return specs

    def _add_extra_action_columns(
        self, dummy: SampleBatch, specs: Dict[str, Tuple[Tuple[int, ...], Any]]
    ) -> None:
        """Extra action outputs (logp, dist inputs, vf preds, ...) become columns,
        placeholders and view requirements (not used for acting)."""
        for key in self.extra_compute_action_fetches():
            shape, dtype = specs[key]
            column = np.zeros((len(dummy),) + tuple(shape), dtype=dtype)
            dict.__setitem__(dummy, key, column)
            if not dict.__contains__(self._input_dict, key):
                # From the column, not the fetch: a fetch without a static row shape
                # (its spec was measured) has no shape to copy.
                dict.__setitem__(self._input_dict, key, get_placeholder(value=column, name=key))
            if key not in self.view_requirements:
                self.view_requirements[key] = ViewRequirement(
                    space=new_box(-1.0, 1.0, tuple(shape), dtype), used_for_compute_actions=False
                )

    def _postprocess_dummy_batch(self, dummy: SampleBatch) -> Tuple[SampleBatch, Set[str]]:
        """Runs exploration + policy postprocessing on ``dummy``; gives new columns placeholders.

        Returns:
            The postprocessed batch and the set of columns it added.
        """
        before = set(dummy.keys())
        if self.exploration is not None:
            self.exploration.postprocess_trajectory(self, dummy, self.get_session())
        post = self.postprocess_trajectory(dummy)
        post = dummy if post is None else post
        added = set(dummy.added_keys) | (set(post.keys()) - before)
        for key in sorted(added):
            if (
                key == SampleBatch.SEQ_LENS
                or key.startswith("state_out_")
                or not dict.__contains__(post, key)
            ):
                continue
            value = dict.__getitem__(post, key)
            arr = np.asarray(value) if not isinstance(value, (dict, tuple)) else None
            if arr is None or arr.dtype == object or arr.ndim == 0:
                continue
            if not dict.__contains__(self._input_dict, key):
                dict.__setitem__(self._input_dict, key, get_placeholder(value=arr, name=key))
            if key not in self.view_requirements:
                self.view_requirements[key] = ViewRequirement(
                    space=new_box(-1.0, 1.0, tuple(arr.shape[1:]), arr.dtype), used_for_compute_actions=False
                )
        return post, added

    def _build_loss_graph(self) -> Tuple[Set[str], bool]:
        """Builds the loss on all placeholders, then gradients etc.
        (``TFPolicy._initialize_loss``) on the columns it reads or depends on
        (plus the model's own columns).

        Returns:
            The columns the loss needs, and whether there is a loss at all.
        """
        # As RLlib 1.11: placeholders a client put into _loss_input_dict (before_loss_init,
        # e.g. MAML's "split") are loss inputs too, fed from the train batch column.
        columns = dict(dict.items(self._input_dict))
        columns.update(getattr(self, "_loss_input_dict", None) or {})
        train_batch = SampleBatch(columns, _is_training=True)
        if self._state_inputs:
            dict.__setitem__(train_batch, SampleBatch.SEQ_LENS, self._seq_lens)
        losses = self._do_loss_init(train_batch)
        train_keys = set(train_batch.accessed_keys)
        if not losses:
            return train_keys, False
        train_keys |= columns_needed_by(train_batch, list(losses) + tree.flatten(self._stats_fetches))
        model_keys = set(getattr(self.model, "view_requirements", {}) or {})
        keep = train_keys | (model_keys & set(train_batch.keys()))
        loss_inputs = [(k, v) for k, v in dict.items(train_batch) if k in keep and k != SampleBatch.SEQ_LENS]
        if self._state_inputs:
            loss_inputs.append((SampleBatch.SEQ_LENS, self._seq_lens))
        TFPolicy._initialize_loss(self, losses, loss_inputs)
        if self._grad_stats_fn:
            self._stats_fetches.update(self._grad_stats_fn(self, train_batch, self._grads))
        return train_keys, True

    def _prune_view_requirements(self, record: AccessRecord, has_loss: bool, train_keys: Set[str]) -> None:
        """The shared pruning rule, then re-adds data columns other columns are views of."""
        protected = set(getattr(self.model, "view_requirements", {}) or {})
        prune_view_requirements(
            self.view_requirements,
            record,
            protected=protected,
            has_loss=has_loss,
            keep_all=self.config.get("output") is not None,
        )
        # RLlib 1.11: a column that is a view of a removed data column keeps it alive.
        for key in list(self.view_requirements):
            vr = self.view_requirements[key]
            if vr.data_col is not None and vr.data_col not in self.view_requirements:
                self.view_requirements[vr.data_col] = ViewRequirement(
                    space=vr.space, used_for_training=vr.data_col in train_keys
                )

    def _do_loss_init(self, train_batch: SampleBatch) -> List[TensorType]:
        """Calls loss_fn (and stats_fn) on ``train_batch``; returns the list of losses."""
        if self._loss_fn is None:
            return []
        losses = force_list(self._loss_fn(self, self.model, self.dist_class, train_batch))
        if self._stats_fn:
            self._stats_fetches.update(self._stats_fn(self, train_batch))
        self._update_ops = [] if is_keras_model(self.model) else list(self.model.update_ops())
        return losses

    @override(TFPolicy)
    def extra_compute_action_fetches(self) -> Dict[str, TensorType]:
        return dict(TFPolicy.extra_compute_action_fetches(self), **getattr(self, "_extra_action_fetches", {}))

    # ------------------------------------------------------------------ towers

    @override(TFPolicy)
    def copy(self, existing_inputs: Union[List[Tuple[str, Any]], List[Any], Dict[str, Any]]) -> "TFPolicy":
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
        input_dict = OrderedDict([("is_exploring", self._is_exploring), ("timestep", self._timestep)] + items)
        with self.graph.as_default(), self.get_session().as_default():
            instance = self._new_tower(input_dict)
            instance._build_tower_loss(items, self._optimizers)
        return instance

    def _build_tower_loss(self, items: List[Tuple[str, Any]], optimizers: List[Any]) -> None:
        """A tower's loss, (unclipped) gradients and stats on its input tensors
        ``items``, with the main policy's ``optimizers`` (so their slots are shared)."""
        self._optimizers = list(optimizers)
        self._optimizer = self._optimizers[0] if self._optimizers else None
        train_batch = SampleBatch(dict(items), _is_training=True)
        losses = self._do_loss_init(train_batch)
        rnn = {f"state_in_{i}" for i in range(len(self._state_inputs))} | {SampleBatch.SEQ_LENS}
        TFPolicy._initialize_loss(self, losses, [(k, v) for k, v in items if k not in rnn])
        if self._grad_stats_fn:
            self._stats_fetches.update(self._grad_stats_fn(self, train_batch, self._grads))

    def _tower_input_items(self, existing_inputs: Any) -> List[Tuple[str, Any]]:
        names = [name for name, _ in self._tower_inputs()]
        if isinstance(existing_inputs, dict):
            items = list(existing_inputs.items())
        elif existing_inputs and all(
            isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in existing_inputs
        ):
            items = list(existing_inputs)
        else:
            if len(existing_inputs) != len(names):
                raise ValueError(
                    f"copy() got {len(existing_inputs)} input tensors for the "
                    f"{len(names)} inputs {names}; pass one tensor per input"
                )
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
        models = [
            self.model,
            ("target_q_model", getattr(self, "target_q_model", None)),
            ("target_model", getattr(self, "target_model", None)),
        ]
        cls: Any = type(self)
        if cls.__init__ is DynamicTFPolicy.__init__:
            hooks: Dict[str, Any] = dict(self._dynamic_hooks)
            return cls(
                self.observation_space,
                self.action_space,
                self.config,
                hooks.pop("loss_fn"),
                existing_inputs=input_dict,
                existing_model=models,
                **hooks,
            )
        # A build_tf_policy class: its __init__ passes its own hooks on.
        return cls(
            self.observation_space,
            self.action_space,
            self.config,
            existing_inputs=input_dict,
            existing_model=models,
        )


def _session_for(config: dict) -> Any:
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


def _static_row_specs(
    fetches: Dict[str, Any],
) -> Tuple[Dict[str, Tuple[Tuple[int, ...], Any]], Dict[str, Any]]:
    """Splits action fetches into ``{key: (per-row shape, numpy dtype)}`` for
    those whose row shape is known (static tensor shapes, or array-likes) and
    ``{key: tensor}`` for the rest."""
    specs: Dict[str, Tuple[Tuple[int, ...], Any]] = {}
    dynamic: Dict[str, Any] = {}
    for key, tensor in fetches.items():
        shape = getattr(tensor, "shape", None)
        if shape is None or not hasattr(tensor, "dtype") or not hasattr(shape, "rank"):
            value = np.asarray(tensor)
            specs[key] = (tuple(value.shape[1:]), value.dtype)
        elif shape.rank is not None and shape[1:].is_fully_defined():
            specs[key] = (tuple(shape.as_list()[1:]), tensor.dtype.as_numpy_dtype)
        else:
            dynamic[key] = tensor
    return specs, dynamic


def _check_same_shapes(key: str, own: Any, given: Any) -> None:
    own_leaves, given_leaves = tree.flatten(own), tree.flatten(given)
    if len(own_leaves) != len(given_leaves):
        raise ValueError(
            f"copy(): input {key!r} has {len(given_leaves)} tensors, the policy's has {len(own_leaves)}"
        )
    for o, g in zip(own_leaves, given_leaves):
        if o.shape.as_list() != g.shape.as_list():
            raise ValueError(
                f"copy(): input {key!r} has shape {g.shape.as_list()}, the "
                f"policy's placeholder has {o.shape.as_list()}"
            )
