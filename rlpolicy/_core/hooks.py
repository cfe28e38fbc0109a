"""The hook bundle that ``build_policy_class`` stores on the classes it makes.

One frozen dataclass holds every argument of the factory, so a built class
carries its recipe (``cls._hooks``) and ``with_updates`` is simply
``build_policy_class(**{**hooks.as_kwargs(), **overrides})``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

Hook = Optional[Callable[..., Any]]


class FactoryRecord:
    """Base of the factories' frozen hook records (this one and ``tf_hooks.TFPolicyHooks``)."""

    mixins: Tuple[type, ...]

    def as_kwargs(self) -> Dict[str, Any]:
        """Returns the factory keyword arguments this record was made from."""
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        kwargs["mixins"] = list(self.mixins) if self.mixins else None
        return kwargs


@dataclass(frozen=True)
class PolicyHooks(FactoryRecord):
    """Everything ``build_policy_class`` was called with.

    Attributes mirror the factory's keyword arguments one to one (see
    ``rlpolicy.policy.policy_template.build_policy_class`` for their meaning);
    ``mixins`` is stored as a tuple so the record is immutable.
    """

    name: str
    framework: str
    loss_fn: Hook = None
    get_default_config: Hook = None
    stats_fn: Hook = None
    postprocess_fn: Hook = None
    extra_action_out_fn: Hook = None
    extra_grad_process_fn: Hook = None
    extra_learn_fetches_fn: Hook = None
    optimizer_fn: Hook = None
    validate_spaces: Hook = None
    before_init: Hook = None
    before_loss_init: Hook = None
    after_init: Hook = None
    _after_loss_init: Hook = None
    action_sampler_fn: Hook = None
    action_distribution_fn: Hook = None
    make_model: Hook = None
    make_model_and_action_dist: Hook = None
    compute_gradients_fn: Hook = None
    apply_gradients_fn: Hook = None
    mixins: Tuple[type, ...] = field(default_factory=tuple)
    get_batch_divisibility_req: Any = None

    @property
    def before_loss_init_fn(self) -> Hook:
        """The pre-loss-init hook; RLlib 1.11 falls back to the deprecated ``after_init``."""
        return self.before_loss_init or self.after_init


# ---------------------------------------------------------------- shared by the factories


def check_factory_args(factory: str, name: Any, mixins: Tuple[Any, ...]) -> None:
    """Checks the arguments every policy factory shares.

    Raises:
        TypeError: If ``name`` is not a class name or a mixin is not a class.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"{factory}: name must be a class name (identifier string), got {name!r}")
    for m in mixins:
        if not isinstance(m, type):
            raise TypeError(f"{factory}({name!r}): mixins must be classes, got {m!r}")


def updated_kwargs(
    cls: type, overrides: Dict[str, Any], extra_allowed: Tuple[str, ...] = ()
) -> Dict[str, Any]:
    """A built class' factory arguments (``cls._hooks``) with ``overrides`` applied.

    The shared core of every factory's ``with_updates``.

    Args:
        cls: A class made by a policy factory.
        overrides: The arguments to replace.
        extra_allowed: Argument names the factory takes besides the recorded
            ones (e.g. deprecated names that are mapped away before recording).

    Raises:
        TypeError: For a keyword the factory does not take.
    """
    kwargs = getattr(cls, "_hooks").as_kwargs()  # noqa: B009  (factories' classes carry it)
    allowed = set(kwargs) | set(extra_allowed)
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise TypeError(
            f"{cls.__name__}.with_updates: unknown argument(s) {unknown}; allowed: {sorted(allowed)}"
        )
    kwargs.update(overrides)
    kwargs["mixins"] = tuple(kwargs.get("mixins") or ())
    return kwargs


def mro_after_wrappers(
    cls: type, method: str, is_wrapper: Callable[[Any], bool]
) -> Tuple[List[type], Optional[Callable]]:
    """Walks ``cls.__mro__`` for a factory-built class's ``method``.

    Returns:
        The classes whose ``method`` is the factory's wrapper (MRO order, up
        to the first other definition), and that first other definition (a
        mixin's or the framework base's; None while cloudpickle still fills
        in a half-built class).
    """
    wrapped: List[type] = []
    for klass in cls.__mro__:
        impl = klass.__dict__.get(method)
        if impl is None:
            continue
        if is_wrapper(impl):
            wrapped.append(klass)
        elif wrapped:
            return wrapped, impl
    return wrapped, None
