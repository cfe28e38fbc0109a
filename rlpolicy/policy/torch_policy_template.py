"""``build_torch_policy``: RLlib's deprecated torch policy factory.

RLlib 1.11 keeps it as a thin alias of ``build_policy_class(framework="torch")``
that warns on every call; so does rlpolicy.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Type

from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.policy_template import build_policy_class
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils._lazy import lazy_module_attrs
from rlpolicy.utils.deprecation import Deprecated
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import ModelGradients, TensorType, TrainerConfigDict

torch, _ = try_import_torch()


def _alias_signature() -> inspect.Signature:
    """``build_policy_class``'s signature without ``framework`` (the alias fixes it)."""
    sig = inspect.signature(build_policy_class)
    return sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "framework"])


_SIGNATURE = _alias_signature()


@Deprecated(new="build_policy_class(framework='torch')", error=False)
def build_torch_policy(name: str, **kwargs: Any) -> Type:
    """Builds a TorchPolicy subclass: ``build_policy_class(name, framework="torch", ...)``.

    Deprecated (warns on each call). The arguments are ``build_policy_class``'s
    (keyword-only, as there); see ``rlpolicy.policy.policy_template.build_policy_class``.

    Raises:
        TypeError: For an argument ``build_policy_class`` does not take, or a missing ``loss_fn``.
    """
    _SIGNATURE.bind(name, **kwargs)  # the alias's own error for a bad or missing argument
    return build_policy_class(name, "torch", **kwargs)


build_torch_policy.__signature__ = _SIGNATURE


# 1.11 imports these here too; resolved on first access (see utils/_lazy.py).
_LAZY: Dict[str, Any] = {
    "TorchPolicy": "rlpolicy.policy.torch_policy:TorchPolicy",
    "TorchDistributionWrapper": "rlpolicy.models.torch.torch_action_dist:TorchDistributionWrapper",
}
__getattr__ = lazy_module_attrs(__name__, _LAZY)

__all__ = [
    "build_torch_policy",
    "ModelV2",
    "Policy",
    "SampleBatch",
    "ModelGradients",
    "TensorType",
    "TrainerConfigDict",
]
