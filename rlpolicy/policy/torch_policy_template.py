"""``build_torch_policy``: RLlib's deprecated torch policy factory.

RLlib 1.11 keeps it as a thin alias of ``build_policy_class(framework="torch")``
that warns on every call; so does rlpolicy.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Type

from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.policy_template import build_policy_class
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils._lazy import lazy_module_attrs
from rlpolicy.utils.deprecation import Deprecated
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import ModelGradients, TensorType, TrainerConfigDict

torch, _ = try_import_torch()


@Deprecated(new="build_policy_class(framework='torch')", error=False)
def build_torch_policy(
        name: str, *, loss_fn: Optional[Callable], get_default_config: Optional[Callable] = None,
        stats_fn: Optional[Callable] = None, postprocess_fn: Optional[Callable] = None,
        extra_action_out_fn: Optional[Callable] = None, extra_grad_process_fn: Optional[Callable] = None,
        extra_learn_fetches_fn: Optional[Callable] = None, optimizer_fn: Optional[Callable] = None,
        validate_spaces: Optional[Callable] = None, before_init: Optional[Callable] = None,
        before_loss_init: Optional[Callable] = None, after_init: Optional[Callable] = None,
        _after_loss_init: Optional[Callable] = None, action_sampler_fn: Optional[Callable] = None,
        action_distribution_fn: Optional[Callable] = None, make_model: Optional[Callable] = None,
        make_model_and_action_dist: Optional[Callable] = None, compute_gradients_fn: Optional[Callable] = None,
        apply_gradients_fn: Optional[Callable] = None, mixins: Optional[List[type]] = None,
        get_batch_divisibility_req: Optional[Callable] = None) -> Type:
    """Builds a TorchPolicy subclass: ``build_policy_class(name, framework="torch", ...)``.

    Deprecated (warns on each call). The arguments are ``build_policy_class``'s; see
    ``rlpolicy.policy.policy_template.build_policy_class``.
    """
    return build_policy_class(
        name, "torch", loss_fn=loss_fn, get_default_config=get_default_config, stats_fn=stats_fn,
        postprocess_fn=postprocess_fn, extra_action_out_fn=extra_action_out_fn,
        extra_grad_process_fn=extra_grad_process_fn, extra_learn_fetches_fn=extra_learn_fetches_fn,
        optimizer_fn=optimizer_fn, validate_spaces=validate_spaces, before_init=before_init,
        before_loss_init=before_loss_init, after_init=after_init, _after_loss_init=_after_loss_init,
        action_sampler_fn=action_sampler_fn, action_distribution_fn=action_distribution_fn,
        make_model=make_model, make_model_and_action_dist=make_model_and_action_dist,
        compute_gradients_fn=compute_gradients_fn, apply_gradients_fn=apply_gradients_fn,
        mixins=mixins, get_batch_divisibility_req=get_batch_divisibility_req)


# 1.11 imports these here too; resolved on first access (see utils/_lazy.py).
_LAZY = {
    "TorchPolicy": "rlpolicy.policy.torch_policy:TorchPolicy",
    "TorchDistributionWrapper": "rlpolicy.models.torch.torch_action_dist:TorchDistributionWrapper",
}
__getattr__ = lazy_module_attrs(__name__, _LAZY)

__all__ = ["build_torch_policy", "ModelV2", "Policy", "SampleBatch", "ModelGradients", "TensorType",
           "TrainerConfigDict"]
