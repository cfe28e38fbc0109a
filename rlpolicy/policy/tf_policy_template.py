"""``build_tf_policy``: make a DynamicTFPolicy subclass from loss and hook functions.

Mirrors RLlib 1.11's ``ray.rllib.policy.tf_policy_template``. The built class
is ``type(name, (*mixins, DynamicTFPolicy), namespace)``: its methods are the
module-level functions below, and it carries its recipe, every argument as
given, as a :class:`~rlpolicy._core.tf_hooks.TFPolicyHooks` record in
``cls._hooks``. ``cls.as_eager()`` builds the eager (``"tf2"``) version from
the same arguments with ``build_eager_tf_policy``.

Difference from RLlib 1.11, on purpose: ``postprocess_trajectory`` first runs
the *next class in the MRO* (a mixin's, if one defines it, else Policy's),
where RLlib calls ``Policy.postprocess_trajectory`` directly and so skips a
mixin's; as in ``build_policy_class``, mixins take precedence over the base.
"""

from __future__ import annotations

import functools
import operator
import sys
from typing import Any, Callable, Dict, List, Optional, Type

import gymnasium as gym

from rlpolicy._core.checkpoint import mark_policy_factory, record_derivation, record_factory_call
from rlpolicy._core.hooks import check_factory_args, mro_after_wrappers, updated_kwargs
from rlpolicy._core.tf_hooks import TFPolicyHooks, warn_deprecated_args
from rlpolicy.utils import force_list
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.deprecation import DEPRECATED_VALUE
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY
from rlpolicy.utils.typing import TrainerConfigDict


@DeveloperAPI
def build_tf_policy(
    name: str,
    *,
    loss_fn: Callable,
    get_default_config: Optional[Callable] = None,
    postprocess_fn: Optional[Callable] = None,
    stats_fn: Optional[Callable] = None,
    optimizer_fn: Optional[Callable] = None,
    compute_gradients_fn: Optional[Callable] = None,
    apply_gradients_fn: Optional[Callable] = None,
    grad_stats_fn: Optional[Callable] = None,
    extra_action_out_fn: Optional[Callable] = None,
    extra_learn_fetches_fn: Optional[Callable] = None,
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
) -> Type:
    """Builds a graph-mode TF policy class (a DynamicTFPolicy subclass) named ``name``.

    Construction runs, in this order (each hook only if given):
    ``get_default_config()`` (``COMMON_CONFIG`` deep-updated with its dict,
    then with the caller's config, is the policy config: a new dict, so
    neither the defaults nor the caller's dict ever change),
    ``validate_spaces(policy, obs_space, action_space, config)``,
    ``before_init(...)`` (same arguments), ``DynamicTFPolicy.__init__``
    (which builds the model via ``make_model``, the action graph, then calls
    ``before_loss_init(...)`` followed by the collection of
    ``extra_action_out_fn(policy)`` fetches (skipped for tower copies), and
    then builds the loss: ``postprocess_fn``, ``loss_fn``, ``stats_fn``,
    ``optimizer_fn``, ``compute_gradients_fn``, ``apply_gradients_fn``,
    ``grad_stats_fn``), ``after_init(...)``; finally ``global_timestep`` is
    reset to 0 (the dummy-batch run may have advanced it).

    In eager mode (``as_eager()``) ``loss_fn``, ``stats_fn``, the gradient
    hooks and ``grad_stats_fn`` run on every call, so they must not create
    variables; create them in ``make_model``.

    Args:
        name: Class name, e.g. ``"PPOTFPolicy"``.
        loss_fn: ``(policy, model, dist_class, train_batch) -> loss or [losses]``.
        get_default_config: ``() -> dict`` of defaults for this policy.
        postprocess_fn: ``(policy, batch, other_agent_batches, episode) -> batch``,
            run after the parent's ``postprocess_trajectory``.
        stats_fn: ``(policy, train_batch) -> dict`` of tensors to fetch as
            learner stats; None: no stats.
        optimizer_fn: ``(policy, config) -> optimizer or [optimizers]``; None:
            the base class' ``optimizer()`` (Adam).
        compute_gradients_fn: ``(policy, optimizer, loss) -> grads_and_vars``;
            None: the optimizer's ``compute_gradients``.
        apply_gradients_fn: ``(policy, optimizer, grads_and_vars) -> op``;
            None: the base class' ``build_apply_op()``.
        grad_stats_fn: ``(policy, train_batch, grads) -> dict`` of fetches.
        extra_action_out_fn: ``(policy) -> dict`` of tensors fetched with the
            actions (e.g. value predictions).
        extra_learn_fetches_fn: ``(policy) -> dict`` fetched when learning (an
            empty ``learner_stats`` dict is added if missing); None: the base
            class' ``extra_compute_grad_fetches()``.
        validate_spaces: ``(policy, obs_space, action_space, config) -> None``.
        before_init: As ``validate_spaces``, run first thing in the constructor.
        before_loss_init: As ``validate_spaces``, run before the loss is built.
        after_init: As ``validate_spaces``, run at the end of the constructor.
        make_model: ``(policy, obs_space, action_space, config) -> ModelV2``;
            None: the catalog's default model.
        action_sampler_fn: Custom action sampling (see DynamicTFPolicy).
        action_distribution_fn: Custom distribution inputs (see DynamicTFPolicy).
        mixins: Classes placed before DynamicTFPolicy in the bases (earlier
            ones take precedence).
        get_batch_divisibility_req: ``(policy) -> int`` (default 1).
        obs_include_prev_action_reward: Deprecated, ignored (warns if set).
        extra_action_fetches_fn: Deprecated name of ``extra_action_out_fn``
            (warns; replaces it).
        gradients_fn: Deprecated name of ``compute_gradients_fn`` (warns;
            replaces it).

    Returns:
        The new class, with ``with_updates(**overrides)`` (a sibling class
        with some arguments replaced) and ``as_eager()`` (the eager version).

    Raises:
        TypeError: If ``name`` is not a class name or a mixin is not a class.
    """
    hooks = TFPolicyHooks(
        name=name,
        loss_fn=loss_fn,
        get_default_config=get_default_config,
        postprocess_fn=postprocess_fn,
        stats_fn=stats_fn,
        optimizer_fn=optimizer_fn,
        compute_gradients_fn=compute_gradients_fn,
        apply_gradients_fn=apply_gradients_fn,
        grad_stats_fn=grad_stats_fn,
        extra_action_out_fn=extra_action_out_fn,
        extra_learn_fetches_fn=extra_learn_fetches_fn,
        validate_spaces=validate_spaces,
        before_init=before_init,
        before_loss_init=before_loss_init,
        after_init=after_init,
        make_model=make_model,
        action_sampler_fn=action_sampler_fn,
        action_distribution_fn=action_distribution_fn,
        mixins=tuple(mixins or ()),
        get_batch_divisibility_req=get_batch_divisibility_req,
        obs_include_prev_action_reward=obs_include_prev_action_reward,
        extra_action_fetches_fn=extra_action_fetches_fn,
        gradients_fn=gradients_fn,
    )
    new = _make_policy_class(hooks, module=sys._getframe(1).f_globals.get("__name__", __name__))
    return record_factory_call(new, build_tf_policy, hooks.as_kwargs())  # for checkpoints


mark_policy_factory(build_tf_policy)  # checkpoints may call it to rebuild a class


def _make_policy_class(hooks: TFPolicyHooks, module: str) -> type:
    check_factory_args("build_tf_policy", hooks.name, hooks.mixins)
    warn_deprecated_args(hooks.as_kwargs())
    from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy

    namespace: Dict[str, Any] = {
        "__module__": module,
        "__qualname__": hooks.name,
        "__doc__": f"{hooks.name}: built by build_tf_policy.",
        "_hooks": hooks,
        "__init__": _policy_init,
        "with_updates": classmethod(_with_updates),
        "as_eager": classmethod(_as_eager),
        "_run_before_loss_init": _run_before_loss_init,
        "_resolve_dispatch": staticmethod(resolve_dispatch),
        **_WRAPPERS,
    }
    return type(hooks.name, (*hooks.mixins, DynamicTFPolicy), namespace)


def _with_updates(cls: type, **overrides: Any) -> type:
    """Builds a new TF policy class from this one's arguments, with ``overrides`` replaced.

    Raises:
        TypeError: For a keyword that ``build_tf_policy`` does not take.
    """
    hooks = TFPolicyHooks(**updated_kwargs(cls, overrides))
    new = _make_policy_class(hooks, module=sys._getframe(1).f_globals.get("__name__", __name__))
    return record_derivation(new, cls, "with_updates", overrides)  # for checkpoints


def _as_eager(cls: Any) -> type:
    """Builds the eager (``framework="tf2"``) policy class from this class' arguments."""
    from rlpolicy.policy.eager_tf_policy import build_eager_tf_policy

    # Recorded so a checkpoint of the eager class names "cls.as_eager()".
    return record_derivation(build_eager_tf_policy(**cls._hooks.as_kwargs()), cls, "as_eager")


# ---------------------------------------------------------------- construction
# The methods read the recipe as ``type(self)._hooks``, so no instance
# attribute of that name (a base class's own bookkeeping) can shadow it.
def _policy_init(
    self,
    obs_space: gym.spaces.Space,
    action_space: gym.spaces.Space,
    config: TrainerConfigDict,
    existing_model: Optional[Any] = None,
    existing_inputs: Optional[Dict[str, Any]] = None,
) -> None:
    from rlpolicy._core.framework_check import require_framework
    from rlpolicy.policy._obs_prep import prepare_observation_space
    from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy
    from rlpolicy.policy.policy import complete_policy_config

    hooks: TFPolicyHooks = type(self)._hooks
    require_framework("tf", hooks.name)
    obs_space = prepare_observation_space(obs_space, config)
    # A new dict, COMMON_CONFIG deep-updated with get_default_config(), then with a deep
    # copy of the caller's dict (as build_policy_class; RLlib 1.11: dict(defaults, **config)).
    config = complete_policy_config(self, config)
    if hooks.validate_spaces is not None:
        hooks.validate_spaces(self, obs_space, action_space, config)
    if hooks.before_init is not None:
        hooks.before_init(self, obs_space, action_space, config)
    DynamicTFPolicy.__init__(
        self,
        obs_space=obs_space,
        action_space=action_space,
        config=config,
        loss_fn=hooks.loss_fn,
        stats_fn=hooks.stats_fn,
        grad_stats_fn=hooks.grad_stats_fn,
        before_loss_init=type(self)._run_before_loss_init,
        make_model=hooks.make_model,
        action_sampler_fn=hooks.action_sampler_fn,
        action_distribution_fn=hooks.action_distribution_fn,
        existing_inputs=existing_inputs,
        existing_model=existing_model,
        get_batch_divisibility_req=hooks.get_batch_divisibility_req,
    )
    if hooks.after_init is not None:
        hooks.after_init(self, obs_space, action_space, config)
    # The dummy-batch run through the loss may have advanced the timestep.
    self.global_timestep = 0


def _run_before_loss_init(
    self, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> None:
    """The built class' ``before_loss_init`` step (a method of the class):
    runs the ``before_loss_init`` hook, then collects the extra action fetches
    (none for towers)."""
    hooks: TFPolicyHooks = type(self)._hooks
    if hooks.before_loss_init is not None:
        hooks.before_loss_init(self, obs_space, action_space, config)
    fn = hooks.action_out_fn
    fetches = {} if fn is None or self._is_tower else fn(self)
    if hasattr(self, "_extra_action_fetches"):
        self._extra_action_fetches.update(fetches)
    else:
        self._extra_action_fetches = fetches


# ---------------------------------------------------------------- method dispatch
def resolve_dispatch(cls: type) -> Dict[str, Optional[Callable]]:
    """Per wrapped method, the implementation after the built class(es) in the
    MRO (a mixin's, if one defines it, else DynamicTFPolicy's); made once when
    the class is (``cls._dispatch``)."""
    return {
        m: mro_after_wrappers(cls, m, functools.partial(operator.is_, w))[1] for m, w in _WRAPPERS.items()
    }


def _postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):

    sample_batch = self.obs_flattener.batch_in_place(sample_batch)
    sample_batch = type(self)._dispatch["postprocess_trajectory"](
        self, sample_batch, other_agent_batches, episode
    )
    if type(self)._hooks.postprocess_fn is not None:
        return type(self)._hooks.postprocess_fn(self, sample_batch, other_agent_batches, episode)
    return sample_batch


def _optimizer(self):
    fn = type(self)._hooks.optimizer_fn
    optimizers = force_list(
        fn(self, self.config) if fn is not None else type(self)._dispatch["optimizer"](self)
    )
    if getattr(self, "exploration", None):
        optimizers = self.exploration.get_exploration_optimizer(optimizers)
    if not optimizers:
        return None
    if self.config["_tf_policy_handles_more_than_one_loss"]:
        return optimizers
    return optimizers[0]


def _gradients(self, optimizer, loss):
    optimizers, losses = force_list(optimizer), force_list(loss)
    fn = type(self)._hooks.gradients_hook
    if fn is None:
        return type(self)._dispatch["gradients"](self, optimizers, losses)
    if self.config["_tf_policy_handles_more_than_one_loss"]:
        return fn(self, optimizers, losses)
    return fn(self, optimizers[0], losses[0])


def _build_apply_op(self, optimizer, grads_and_vars):
    fn = type(self)._hooks.apply_gradients_fn
    if fn is None:
        return type(self)._dispatch["build_apply_op"](self, optimizer, grads_and_vars)
    return fn(self, optimizer, grads_and_vars)


def _extra_compute_grad_fetches(self):
    fn = type(self)._hooks.extra_learn_fetches_fn
    if fn is None:
        return type(self)._dispatch["extra_compute_grad_fetches"](self)
    # Called when a learn step is assembled: any op the hook makes belongs in
    # the policy's graph, not in the (eager) default context.
    with self.get_session().graph.as_default():
        return dict({LEARNER_STATS_KEY: {}}, **fn(self))


_WRAPPERS: Dict[str, Callable] = {
    "postprocess_trajectory": _postprocess_trajectory,
    "optimizer": _optimizer,
    "gradients": _gradients,
    "build_apply_op": _build_apply_op,
    "extra_compute_grad_fetches": _extra_compute_grad_fetches,
}
for _name, _fn in _WRAPPERS.items():
    # __qualname__ stays the module-level name (pickle finds it by
    # reference); the MRO walk knows the wrappers by identity.
    _fn.__name__ = _name
del _name, _fn

__all__ = ["build_tf_policy"]


# Further names RLlib 1.11 defines or imports in this module (1.x client code imports
# them from here); resolved on first access, see rlpolicy/utils/_lazy.py.
from rlpolicy.utils._lazy import FRAMEWORK_HANDLES, lazy_module_attrs  # noqa: E402

_RLLIB_1_11_NAMES = {
    "TFActionDistribution": "rlpolicy.models.tf.tf_action_dist:TFActionDistribution",
    "ModelV2": "rlpolicy.models.modelv2:ModelV2",
    "DynamicTFPolicy": "rlpolicy.policy.dynamic_tf_policy:DynamicTFPolicy",
    "eager_tf_policy": "rlpolicy.policy.eager_tf_policy",
    "Policy": "rlpolicy.policy.policy:Policy",
    "SampleBatch": "rlpolicy.policy.sample_batch:SampleBatch",
    "TFPolicy": "rlpolicy.policy.tf_policy:TFPolicy",
    "add_mixins": "rlpolicy.utils:add_mixins",
    "override": "rlpolicy.utils.annotations:override",
    "deprecation_warning": "rlpolicy.utils.deprecation:deprecation_warning",
    "try_import_tf": "rlpolicy.utils.framework:try_import_tf",
    "AgentID": "rlpolicy.utils.typing:AgentID",
    "ModelGradients": "rlpolicy.utils.typing:ModelGradients",
    "TensorType": "rlpolicy.utils.typing:TensorType",
    "tf1": FRAMEWORK_HANDLES["tf1"],
    "tf": FRAMEWORK_HANDLES["tf"],
    "tfv": FRAMEWORK_HANDLES["tfv"],
}
__getattr__ = lazy_module_attrs(__name__, _RLLIB_1_11_NAMES)
