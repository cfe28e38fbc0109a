"""``build_policy_class``: make a TorchPolicy subclass from loss and hook functions.

Mirrors RLlib 1.11's ``ray.rllib.policy.policy_template``. The built class is
``type(name, (*mixins, TorchPolicy), namespace)``: its methods are the
module-level functions below, and it carries its recipe as a
:class:`~rlpolicy._core.hooks.PolicyHooks` record in ``cls._hooks``.

Difference from RLlib 1.11, on purpose: when a hook is not given, the built
class's method delegates to the *next class in the MRO* (a mixin, if one
defines the method, else TorchPolicy), where RLlib calls TorchPolicy's
method directly and so silently ignores mixins that define e.g.
``optimizer`` or ``extra_grad_info``. This is what RLlib's docstring
promises ("mixins ... have higher precedence than the TorchPolicy class").
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

import gymnasium as gym

from rlpolicy._core.checkpoint import mark_policy_factory, record_derivation, record_factory_call
from rlpolicy._core.hooks import PolicyHooks, check_factory_args, mro_after_wrappers, updated_kwargs
from rlpolicy.utils import NullContextManager
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY
from rlpolicy.utils.typing import TrainerConfigDict

_FRAMEWORKS = ("torch",)


@DeveloperAPI
def build_policy_class(
    name: str,
    framework: str,
    *,
    loss_fn: Optional[Callable],
    get_default_config: Optional[Callable] = None,
    stats_fn: Optional[Callable] = None,
    postprocess_fn: Optional[Callable] = None,
    extra_action_out_fn: Optional[Callable] = None,
    extra_grad_process_fn: Optional[Callable] = None,
    extra_learn_fetches_fn: Optional[Callable] = None,
    optimizer_fn: Optional[Callable] = None,
    validate_spaces: Optional[Callable] = None,
    before_init: Optional[Callable] = None,
    before_loss_init: Optional[Callable] = None,
    after_init: Optional[Callable] = None,
    _after_loss_init: Optional[Callable] = None,
    action_sampler_fn: Optional[Callable] = None,
    action_distribution_fn: Optional[Callable] = None,
    make_model: Optional[Callable] = None,
    make_model_and_action_dist: Optional[Callable] = None,
    compute_gradients_fn: Optional[Callable] = None,
    apply_gradients_fn: Optional[Callable] = None,
    mixins: Optional[List[type]] = None,
    get_batch_divisibility_req: Optional[Callable] = None,
) -> Type:
    """Builds a TorchPolicy subclass named ``name`` from the given functions.

    At construction, the class calls (in this order, each only if given):
    ``get_default_config()`` (``COMMON_CONFIG`` deep-updated with its dict,
    then with the caller's config, is the policy config: a new dict, so
    neither the defaults nor the caller's dict ever change),
    ``validate_spaces(policy, obs_space, action_space, config)``,
    ``before_init(...)`` (same arguments), ``make_model(...)`` or
    ``make_model_and_action_dist(...)`` (else the catalog's default model and
    distribution), ``TorchPolicy.__init__``, ``before_loss_init(...)`` (or the
    deprecated ``after_init``), the dummy-batch loss initialisation (calling
    ``postprocess_fn``, ``loss_fn`` and ``stats_fn``; with
    ``config["in_evaluation"]`` neither loss nor stats run), and
    ``_after_loss_init(...)``; then ``global_timestep`` is reset to 0.

    Args:
        name: Class name, e.g. ``"PPOTorchPolicy"``.
        framework: ``"torch"``. (``"jax"`` needs a JAX policy/model base,
            which rlpolicy does not provide; it raises ValueError.)
        loss_fn: ``(policy, model, dist_class, train_batch) -> loss or [losses]``.
        get_default_config: ``() -> dict`` of defaults for this policy.
        stats_fn: ``(policy, train_batch) -> dict`` of stats; default
            ``TorchPolicy.extra_grad_info``.
        postprocess_fn: ``(policy, batch, other_agent_batches, episode) -> batch``,
            run after the parent's ``postprocess_trajectory``.
        extra_action_out_fn: ``(policy, input_dict, state_batches, model,
            action_dist) -> dict`` of extra per-step outputs.
        extra_grad_process_fn: ``(policy, optimizer, loss) -> dict``, run after
            ``loss.backward()`` (e.g. gradient clipping).
        extra_learn_fetches_fn: ``(policy) -> dict`` of extra learner results
            (an empty ``learner_stats`` dict is added if missing).
        optimizer_fn: ``(policy, config) -> optimizer or [optimizers]``.
        validate_spaces: ``(policy, obs_space, action_space, config) -> None``.
        before_init: As ``validate_spaces``, run before the model is built.
        before_loss_init: As ``validate_spaces``, run before loss init.
        after_init: Deprecated alias of ``before_loss_init``.
        _after_loss_init: As ``validate_spaces``, run after loss init.
        action_sampler_fn: Custom action sampling (see TorchPolicy).
        action_distribution_fn: Custom distribution inputs (see TorchPolicy).
        make_model: ``(policy, obs_space, action_space, config) -> model``.
        make_model_and_action_dist: As ``make_model`` but returns
            ``(model, dist_class)``. At most one of the two may be given.
        compute_gradients_fn: ``(policy, batch) -> (grads, info)``.
        apply_gradients_fn: ``(policy, grads) -> None``.
        mixins: Classes placed before TorchPolicy in the bases (earlier ones
            take precedence).
        get_batch_divisibility_req: ``(policy) -> int`` (default 1).

    Returns:
        The new class. ``cls.with_updates(**overrides)`` builds a sibling
        class with some of these arguments replaced.

    Raises:
        ValueError: For an unsupported ``framework`` or both model factories.
        TypeError: If ``name`` is not a string or a mixin is not a class.
    """
    hooks = PolicyHooks(
        name=name,
        framework=framework,
        loss_fn=loss_fn,
        get_default_config=get_default_config,
        stats_fn=stats_fn,
        postprocess_fn=postprocess_fn,
        extra_action_out_fn=extra_action_out_fn,
        extra_grad_process_fn=extra_grad_process_fn,
        extra_learn_fetches_fn=extra_learn_fetches_fn,
        optimizer_fn=optimizer_fn,
        validate_spaces=validate_spaces,
        before_init=before_init,
        before_loss_init=before_loss_init,
        after_init=after_init,
        _after_loss_init=_after_loss_init,
        action_sampler_fn=action_sampler_fn,
        action_distribution_fn=action_distribution_fn,
        make_model=make_model,
        make_model_and_action_dist=make_model_and_action_dist,
        compute_gradients_fn=compute_gradients_fn,
        apply_gradients_fn=apply_gradients_fn,
        mixins=tuple(mixins or ()),
        get_batch_divisibility_req=get_batch_divisibility_req,
    )
    new = _make_policy_class(hooks, module=sys._getframe(1).f_globals.get("__name__", __name__))
    return record_factory_call(new, build_policy_class, hooks.as_kwargs())  # for checkpoints


mark_policy_factory(build_policy_class)  # checkpoints may call it to rebuild a class


def _check_hooks(hooks: PolicyHooks) -> None:
    check_factory_args("build_policy_class", hooks.name, hooks.mixins)
    where = f"build_policy_class({hooks.name!r})"
    if hooks.framework == "jax":
        raise ValueError(
            f"{where}: framework='jax' needs a JAX policy and JAXModelV2 base, which "
            "rlpolicy does not provide; use framework='torch'"
        )
    if hooks.framework not in _FRAMEWORKS:
        raise ValueError(
            f"{where}: framework={hooks.framework!r} is not supported; supported: "
            f"{list(_FRAMEWORKS)} (use build_tf_policy for 'tf'/'tf2')"
        )
    if hooks.make_model is not None and hooks.make_model_and_action_dist is not None:
        raise ValueError(f"{where}: pass make_model or make_model_and_action_dist, not both")


def _make_policy_class(hooks: PolicyHooks, module: str) -> type:
    _check_hooks(hooks)
    from rlpolicy.policy.torch_policy import TorchPolicy

    namespace: Dict[str, Any] = {
        "__module__": module,
        "__qualname__": hooks.name,
        "__doc__": f"{hooks.name}: built by build_policy_class.",
        "_hooks": hooks,
        "__init__": _policy_init,
        "with_updates": classmethod(_with_updates),
        "_resolve_dispatch": staticmethod(resolve_dispatch),
        **_WRAPPERS,
    }
    return type(hooks.name, (*hooks.mixins, TorchPolicy), namespace)


def _with_updates(cls: type, **overrides: Any) -> type:
    """Builds a new policy class from this one's arguments, with ``overrides`` replaced.

    Raises:
        TypeError: For a keyword that ``build_policy_class`` does not take.
    """
    hooks = PolicyHooks(**updated_kwargs(cls, overrides))
    new = _make_policy_class(hooks, module=sys._getframe(1).f_globals.get("__name__", __name__))
    return record_derivation(new, cls, "with_updates", overrides)  # for checkpoints


# ---------------------------------------------------------------- construction
def _policy_init(
    self, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> None:
    from rlpolicy._core.framework_check import require_framework
    from rlpolicy.policy._obs_prep import prepare_observation_space
    from rlpolicy.policy.policy import complete_policy_config
    from rlpolicy.policy.torch_policy import TorchPolicy

    hooks: PolicyHooks = self._hooks
    require_framework(hooks.framework, hooks.name)
    obs_space = prepare_observation_space(obs_space, config)
    # A new dict: the defaults (get_default_config) deep-updated with (a deep copy of) the caller's dict.
    self.config = config = complete_policy_config(self, config)
    # RLlib 1.11 writes the factory's framework into the config.
    self.framework = self.config["framework"] = hooks.framework
    if hooks.validate_spaces is not None:
        hooks.validate_spaces(self, obs_space, action_space, self.config)
    if hooks.before_init is not None:
        hooks.before_init(self, obs_space, action_space, self.config)
    self.model, dist_class = _build_model(self, hooks, obs_space, action_space, config)
    self.parent_cls = TorchPolicy
    TorchPolicy.__init__(
        self,
        observation_space=obs_space,
        action_space=action_space,
        config=config,
        model=self.model,
        loss=None if self.config["in_evaluation"] else hooks.loss_fn,
        action_distribution_class=dist_class,
        action_sampler_fn=hooks.action_sampler_fn,
        action_distribution_fn=hooks.action_distribution_fn,
        max_seq_len=config["model"]["max_seq_len"],
        get_batch_divisibility_req=hooks.get_batch_divisibility_req,
    )
    self.view_requirements.update(self.model.view_requirements)
    if hooks.before_loss_init_fn is not None:
        hooks.before_loss_init_fn(self, self.observation_space, self.action_space, config)
    self._initialize_loss_from_dummy_batch(
        auto_remove_unneeded_view_reqs=True, stats_fn=None if self.config["in_evaluation"] else hooks.stats_fn
    )
    if hooks._after_loss_init is not None:
        hooks._after_loss_init(self, obs_space, action_space, config)
    # The dummy run may have advanced the timestep.
    self.global_timestep = 0


def _build_model(
    policy: Any, hooks: PolicyHooks, obs_space: gym.Space, action_space: gym.Space, config: dict
) -> Tuple[Any, Optional[type]]:
    from rlpolicy.models.catalog import ModelCatalog
    from rlpolicy.models.torch.torch_modelv2 import TorchModelV2

    if hooks.make_model is not None:
        model = hooks.make_model(policy, obs_space, action_space, config)
        dist_class, _ = ModelCatalog.get_action_dist(
            action_space, policy.config["model"], framework=hooks.framework
        )
    elif hooks.make_model_and_action_dist is not None:
        model, dist_class = hooks.make_model_and_action_dist(policy, obs_space, action_space, config)
    else:
        dist_class, logit_dim = ModelCatalog.get_action_dist(
            action_space, policy.config["model"], framework=hooks.framework
        )
        model = ModelCatalog.get_model_v2(
            obs_space=obs_space,
            action_space=action_space,
            num_outputs=logit_dim,
            model_config=policy.config["model"],
            framework=hooks.framework,
        )
    if not isinstance(model, TorchModelV2):
        raise TypeError(
            f"{hooks.name}: the model factory returned {type(model).__name__}; it must return a TorchModelV2"
        )
    return model, dist_class


# ---------------------------------------------------------------- method dispatch
# The methods a built class routes through a hook: method -> the hook's field in PolicyHooks.
_HOOK_OF = {
    "extra_grad_process": "extra_grad_process_fn",
    "extra_compute_grad_fetches": "extra_learn_fetches_fn",
    "compute_gradients": "compute_gradients_fn",
    "apply_gradients": "apply_gradients_fn",
    "extra_action_out": "extra_action_out_fn",
    "optimizer": "optimizer_fn",
    "extra_grad_info": "stats_fn",
}


def _next_impl(cls: type, method: str, hook: str) -> Tuple[Optional[Callable], Optional[Callable]]:
    """What ``method`` of a built class runs: (hook, None) or (None, next_impl):
    the first built class in the MRO with the hook set wins, else the next
    definition (a mixin's or TorchPolicy's)."""
    wrapped, impl = mro_after_wrappers(cls, method, lambda f: _is_wrapper(f, method))
    for klass in wrapped:
        fn = getattr(klass.__dict__["_hooks"], hook)
        if fn is not None:
            return fn, None
    return None, impl


def _postprocess_chain(cls: type) -> Tuple[Optional[Callable], Tuple[Callable, ...]]:
    """The parent's ``postprocess_trajectory`` and the built classes'
    ``postprocess_fn``s, innermost first (as nested super() calls would run them)."""
    method = "postprocess_trajectory"
    wrapped, parent = mro_after_wrappers(cls, method, lambda f: _is_wrapper(f, method))
    fns = (klass.__dict__["_hooks"].postprocess_fn for klass in reversed(wrapped))
    return parent, tuple(fn for fn in fns if fn is not None)


def resolve_dispatch(cls: type) -> Dict[str, Any]:
    """A built class's hook table, made once when the class is (``cls._dispatch``)."""
    table: Dict[str, Any] = {m: _next_impl(cls, m, h) for m, h in _HOOK_OF.items()}
    table["postprocess_trajectory"] = _postprocess_chain(cls)
    return table


def _no_grad_context(self) -> Any:
    torch = try_import_torch()[0] if self.framework == "torch" else None
    return torch.no_grad() if torch is not None else NullContextManager()


def _to_non_torch(self, data: Any) -> Any:
    if self.framework != "torch":
        return data
    from rlpolicy.utils.torch_utils import convert_to_non_torch_type

    return convert_to_non_torch_type(data)


def _stats_to_non_torch(self, data: Any) -> Any:
    # Copies: a stat that is a live parameter must not change with the next step.
    if self.framework != "torch":
        return data
    from rlpolicy.policy._torch.convert import to_non_torch_snapshot

    return to_non_torch_snapshot(data)


def _postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
    # The parent's postprocessing runs first, then each built class's
    # postprocess_fn from the innermost out (as nested super() calls would).
    parent, fns = type(self)._dispatch["postprocess_trajectory"]

    sample_batch = self.obs_flattener.batch_in_place(sample_batch)  # raw Dict/Tuple obs -> flat
    with _no_grad_context(self):
        sample_batch = parent(self, sample_batch, other_agent_batches, episode)
        for fn in fns:
            sample_batch = fn(self, sample_batch, other_agent_batches, episode)
    return sample_batch


def _extra_grad_process(self, optimizer, loss):
    fn, parent = type(self)._dispatch["extra_grad_process"]
    return fn(self, optimizer, loss) if fn else parent(self, optimizer, loss)


def _extra_compute_grad_fetches(self):
    fn, parent = type(self)._dispatch["extra_compute_grad_fetches"]
    if fn is None:
        return parent(self)
    fetches = _stats_to_non_torch(self, fn(self))
    return dict({LEARNER_STATS_KEY: {}}, **fetches)


def _compute_gradients(self, batch):
    fn, parent = type(self)._dispatch["compute_gradients"]
    return fn(self, batch) if fn else parent(self, batch)


def _apply_gradients(self, gradients):
    fn, parent = type(self)._dispatch["apply_gradients"]
    (fn or parent)(self, gradients)


def _extra_action_out(self, input_dict, state_batches, model, action_dist):
    fn, parent = type(self)._dispatch["extra_action_out"]
    if self.framework == "torch" and not try_import_torch()[0].is_grad_enabled():
        # The acting path already runs without autograd: no context to enter.
        return _to_non_torch(self, (fn or parent)(self, input_dict, state_batches, model, action_dist))
    with _no_grad_context(self):
        stats = (fn or parent)(self, input_dict, state_batches, model, action_dist)
    return _to_non_torch(self, stats)


def _optimizer(self):
    fn, parent = type(self)._dispatch["optimizer"]
    return fn(self, self.config) if fn else parent(self)


def _extra_grad_info(self, train_batch):
    fn, parent = type(self)._dispatch["extra_grad_info"]
    with _no_grad_context(self):
        stats = (fn or parent)(self, train_batch)
    return _stats_to_non_torch(self, stats)


_WRAPPERS: Dict[str, Callable] = {
    "postprocess_trajectory": _postprocess_trajectory,
    "extra_grad_process": _extra_grad_process,
    "extra_compute_grad_fetches": _extra_compute_grad_fetches,
    "compute_gradients": _compute_gradients,
    "apply_gradients": _apply_gradients,
    "extra_action_out": _extra_action_out,
    "optimizer": _optimizer,
    "extra_grad_info": _extra_grad_info,
    "_no_grad_context": _no_grad_context,
    "_convert_to_non_torch_type": _to_non_torch,
}
for _name, _fn in _WRAPPERS.items():
    # __qualname__ stays the module-level name, so pickle finds the function
    # by reference; the marker identifies wrappers even in by-value copies
    # (cloudpickle of a class built inside a function).
    _fn.__name__ = _name
    _fn._policy_template_wrapper = _name  # type: ignore[attr-defined]
del _name, _fn


def _is_wrapper(impl: Any, method: str) -> bool:
    return getattr(impl, "_policy_template_wrapper", None) == method


__all__ = ["build_policy_class"]


# Further names RLlib 1.11 defines or imports in this module (1.x client code imports
# them from here); resolved on first access, see rlpolicy/utils/_lazy.py.
from rlpolicy.utils._lazy import FRAMEWORK_HANDLES, lazy_module_attrs  # noqa: E402

_RLLIB_1_11_NAMES = {
    "ModelCatalog": "rlpolicy.models.catalog:ModelCatalog",
    "ModelV2": "rlpolicy.models.modelv2:ModelV2",
    "TorchDistributionWrapper": "rlpolicy.models.torch.torch_action_dist:TorchDistributionWrapper",
    "TorchModelV2": "rlpolicy.models.torch.torch_modelv2:TorchModelV2",
    "Policy": "rlpolicy.policy.policy:Policy",
    "SampleBatch": "rlpolicy.policy.sample_batch:SampleBatch",
    "TorchPolicy": "rlpolicy.policy.torch_policy:TorchPolicy",
    "add_mixins": "rlpolicy.utils:add_mixins",
    "override": "rlpolicy.utils.annotations:override",
    "try_import_jax": "rlpolicy.utils.framework:try_import_jax",
    "convert_to_numpy": "rlpolicy.utils.numpy:convert_to_numpy",
    "ModelGradients": "rlpolicy.utils.typing:ModelGradients",
    "TensorType": "rlpolicy.utils.typing:TensorType",
    "torch": FRAMEWORK_HANDLES["torch"],
}
__getattr__ = lazy_module_attrs(__name__, _RLLIB_1_11_NAMES)
