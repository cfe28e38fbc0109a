"""The hook bundle that ``build_tf_policy`` stores on the classes it makes.

One frozen record holds every keyword argument of the factory exactly as the
caller gave it (deprecated ones included), so a built class carries its
recipe (``cls._hooks``): ``with_updates`` rebuilds from
``{**hooks.as_kwargs(), **overrides}`` and ``as_eager`` hands the same
arguments to ``build_eager_tf_policy``. The effective hooks, after mapping
the deprecated names onto their replacements, are properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from rlpolicy._core.hooks import FactoryRecord
from rlpolicy.utils.deprecation import DEPRECATED_VALUE as _NOT_SET
from rlpolicy.utils.deprecation import deprecation_warning

Hook = Optional[Callable[..., Any]]

# Deprecated factory arguments and the ones that replace them (RLlib 1.11).
DEPRECATED_ARGS = (
    ("extra_action_fetches_fn", "extra_action_out_fn"),
    ("gradients_fn", "compute_gradients_fn"),
)


@dataclass(frozen=True)
class TFPolicyHooks(FactoryRecord):
    """Everything ``build_tf_policy`` (or ``build_eager_tf_policy``) was called with.

    Attributes mirror the factory's keyword arguments one to one (see
    ``rlpolicy.policy.tf_policy_template.build_tf_policy``); ``mixins`` is a
    tuple so the record is immutable. ``build_tf_policy`` records the
    deprecated arguments as given; ``build_eager_tf_policy`` records them
    already mapped (:func:`resolve_deprecated_args`).
    """

    name: str
    loss_fn: Hook = None
    get_default_config: Hook = None
    postprocess_fn: Hook = None
    stats_fn: Hook = None
    optimizer_fn: Hook = None
    compute_gradients_fn: Hook = None
    apply_gradients_fn: Hook = None
    grad_stats_fn: Hook = None
    extra_action_out_fn: Hook = None
    extra_learn_fetches_fn: Hook = None
    validate_spaces: Hook = None
    before_init: Hook = None
    before_loss_init: Hook = None
    after_init: Hook = None
    make_model: Hook = None
    action_sampler_fn: Hook = None
    action_distribution_fn: Hook = None
    mixins: Tuple[type, ...] = field(default_factory=tuple)
    get_batch_divisibility_req: Hook = None
    obs_include_prev_action_reward: Any = _NOT_SET
    extra_action_fetches_fn: Hook = None
    gradients_fn: Hook = None

    @property
    def action_out_fn(self) -> Hook:
        """The extra-action-fetches hook; the deprecated ``extra_action_fetches_fn`` wins if given."""
        if self.extra_action_fetches_fn is not None:
            return self.extra_action_fetches_fn
        return self.extra_action_out_fn

    @property
    def gradients_hook(self) -> Hook:
        """The gradients hook; the deprecated ``gradients_fn`` wins if given."""
        if self.gradients_fn is not None:
            return self.gradients_fn
        return self.compute_gradients_fn


def warn_deprecated_args(kwargs: Dict[str, Any]) -> None:
    """A ``DeprecationWarning`` for each deprecated factory argument that is set."""
    if kwargs.get("obs_include_prev_action_reward", _NOT_SET) != _NOT_SET:
        deprecation_warning(old="obs_include_prev_action_reward", error=False)
    for old, new in DEPRECATED_ARGS:
        if kwargs.get(old) is not None:
            deprecation_warning(old=old, new=new, error=False)


def resolve_deprecated_args(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Warns about and maps the deprecated factory arguments (RLlib 1.11).

    ``obs_include_prev_action_reward`` is ignored; ``extra_action_fetches_fn``
    becomes ``extra_action_out_fn`` and ``gradients_fn`` becomes
    ``compute_gradients_fn`` (a deprecated argument wins over its
    replacement, as in RLlib).

    Returns:
        A new dict with the deprecated arguments unset.
    """
    warn_deprecated_args(kwargs)
    out = dict(kwargs)
    out["obs_include_prev_action_reward"] = _NOT_SET
    for old, new in DEPRECATED_ARGS:
        value = out.get(old)
        out[old] = None
        if value is not None:
            out[new] = value
    return out
