"""The hook bundle that ``build_tf_policy`` stores on the classes it makes.

One frozen record holds every keyword argument of the factory exactly as the
caller gave it (deprecated ones included), so a built class carries its
recipe (``cls._hooks``): ``with_updates`` rebuilds from
``{**hooks.as_kwargs(), **overrides}`` and ``as_eager`` hands the same
arguments to ``build_eager_tf_policy``. The effective hooks, after mapping
the deprecated names onto their replacements, are properties.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

Hook = Optional[Callable[..., Any]]

# Same sentinel as rlpolicy.utils.deprecation.DEPRECATED_VALUE ("not set").
_NOT_SET = -1


@dataclass(frozen=True)
class TFPolicyHooks:
    """Everything ``build_tf_policy`` was called with.

    Attributes mirror the factory's keyword arguments one to one (see
    ``rlpolicy.policy.tf_policy_template.build_tf_policy``); ``mixins`` is a
    tuple so the record is immutable.
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

    def as_kwargs(self) -> Dict[str, Any]:
        """Returns the factory keyword arguments this record was made from."""
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        kwargs["mixins"] = list(self.mixins) if self.mixins else None
        return kwargs

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
