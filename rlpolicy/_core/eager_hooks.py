"""The hook record that ``build_eager_tf_policy`` stores on the classes it makes.

``build_eager_tf_policy`` takes exactly ``build_tf_policy``'s keyword
arguments (so ``build_tf_policy(...).as_eager()`` can pass its own arguments
on unchanged). The deprecated ones are mapped to their new names once, by
:func:`resolve_deprecated_args`, before the record is made; the record then
holds only the current names, and ``with_updates`` rebuilds a class from
``{**hooks.as_kwargs(), **overrides}``.

Nothing here imports tensorflow.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from rlpolicy.utils.deprecation import DEPRECATED_VALUE, deprecation_warning

Hook = Optional[Callable[..., Any]]


@dataclass(frozen=True)
class EagerPolicyHooks:
    """Everything ``build_eager_tf_policy`` was called with (current names only).

    The attributes mirror the factory's keyword arguments one to one; see
    ``rlpolicy.policy.eager_tf_policy.build_eager_tf_policy`` for their
    meaning. ``mixins`` is a tuple so the record is immutable.
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
    extra_learn_fetches_fn: Hook = None
    extra_action_out_fn: Hook = None
    validate_spaces: Hook = None
    before_init: Hook = None
    before_loss_init: Hook = None
    after_init: Hook = None
    make_model: Hook = None
    action_sampler_fn: Hook = None
    action_distribution_fn: Hook = None
    mixins: Tuple[type, ...] = field(default_factory=tuple)
    get_batch_divisibility_req: Any = None

    def as_kwargs(self) -> Dict[str, Any]:
        """Returns the factory keyword arguments this record was made from."""
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        kwargs["mixins"] = list(self.mixins) if self.mixins else None
        return kwargs


def resolve_deprecated_args(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Maps ``build_tf_policy``'s deprecated arguments to the current ones.

    As RLlib 1.11: ``obs_include_prev_action_reward`` (any value but the
    default) only warns; ``extra_action_fetches_fn`` becomes
    ``extra_action_out_fn`` and ``gradients_fn`` becomes
    ``compute_gradients_fn``, each with a ``DeprecationWarning``.

    Args:
        kwargs: The factory's arguments, deprecated ones included.

    Returns:
        A new dict without the deprecated keys. (If a deprecated argument and
        its replacement are both given, the deprecated one wins, as in RLlib.)
    """
    out = dict(kwargs)
    if out.pop("obs_include_prev_action_reward", DEPRECATED_VALUE) != DEPRECATED_VALUE:
        deprecation_warning(old="obs_include_prev_action_reward", error=False)
    for old, new in (("extra_action_fetches_fn", "extra_action_out_fn"),
                     ("gradients_fn", "compute_gradients_fn")):
        value = out.pop(old, None)
        if value is None:
            continue
        deprecation_warning(old=old, new=new, error=False)
        out[new] = value
    return out


__all__ = ["EagerPolicyHooks", "resolve_deprecated_args"]
