"""Construction steps of ``TorchPolicy``: default model, device plan, optimizer groups.

Only imported by torch modules; torch itself is looked up through
``try_import_torch`` so that importing this module never fails.
"""
from __future__ import annotations

import logging
from typing import Any, List, Mapping, Optional, Sequence, Set, Tuple, Type

from rlpolicy._core.devices import DevicePlan, detect_ray_context, plan_devices
from rlpolicy.utils.framework import try_import_torch

torch, _ = try_import_torch()

logger = logging.getLogger(__name__)


def default_model_and_dist(observation_space: Any, action_space: Any, config: Mapping,
                           model: Any, dist_class: Optional[Type]) -> Tuple[Any, Type]:
    """Builds the catalog's default torch model and distribution where not given.

    Args:
        observation_space: The policy's observation space.
        action_space: The policy's action space.
        config: The policy config (``config["model"]`` is read).
        model: The caller's model, or None for the catalog's default.
        dist_class: The caller's distribution class, or None for the default.

    Returns:
        ``(model, dist_class)``.
    """
    if model is not None and dist_class is not None:
        return model, dist_class
    from rlpolicy.models.catalog import ModelCatalog

    default_dist, logit_dim = ModelCatalog.get_action_dist(
        action_space, config["model"], framework="torch")
    if model is None:
        model = ModelCatalog.get_model_v2(
            obs_space=observation_space, action_space=action_space, num_outputs=logit_dim,
            model_config=config["model"], framework="torch")
    return model, dist_class or default_dist


def plan_torch_devices(config: Mapping) -> DevicePlan:
    """The device plan for ``config`` given the CUDA devices torch sees (logged)."""
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ray_mode, ray_gpu_ids = detect_ray_context()
    plan = plan_devices(config, visible, ray_mode=ray_mode, ray_gpu_ids=ray_gpu_ids)
    worker = config.get("worker_index", 0) or "local"
    where = f"{plan.num_gpus} fake-GPUs" if plan.fake else (
        f"{plan.num_towers} GPU(s)" if plan.on_gpu else "CPU")
    logger.info("TorchPolicy (worker=%s) running on %s.", worker, where)
    return plan


def optimizer_param_groups(model: Any, optimizers: Sequence[Any]) -> List[Set[int]]:
    """Per optimizer, the indices (into ``list(model.parameters())``) it updates.

    Parameters outside the model (e.g. an exploration module's) are left out.
    """
    from rlpolicy._core.torch_convert import parameter_list

    # Keyed by id(): a tensor hashes by identity anyway, at the cost of a Python call.
    index = {id(p): i for i, p in enumerate(parameter_list(model))}
    return [{index[id(p)] for pg in opt.param_groups for p in pg["params"] if id(p) in index}
            for opt in optimizers]


def default_adam(params: Sequence[Any], **kwargs: Any) -> Any:
    """``torch.optim.Adam(params, **kwargs)`` on torch's fused kernel where it can run.

    The fused kernel does one Adam update per parameter in a single op
    (torch >= 2.4 on CPU, CUDA and other devices torch lists as fused-capable)
    instead of about a dozen small ops each; it is the same algorithm, its
    results differ from the per-tensor loop only in float rounding (~1 ulp).
    Where torch refuses it (older torch, an unsupported device or dtype) the
    plain per-tensor Adam is built, as RLlib 1.11 does.
    """
    params = list(params)
    devices = _fused_devices()
    if params and all(isinstance(p, torch.Tensor) and p.device.type in devices
                      and p.is_floating_point() for p in params):
        try:
            return torch.optim.Adam(params, fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError):  # (torch < 2.4 on CPU, differentiable=...)
            pass
    return torch.optim.Adam(params, **kwargs)


_FUSED_DEVICES: Optional[Tuple[str, ...]] = None


def _fused_devices() -> Tuple[str, ...]:
    """Device types with torch's fused optimizer kernels (torch checks only at
    the first ``step()``, so the choice is made here, before building)."""
    global _FUSED_DEVICES
    if _FUSED_DEVICES is None:
        try:
            from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
            _FUSED_DEVICES = tuple(_get_fused_kernels_supported_devices())
        except ImportError:  # (before torch 2.4: CUDA only)
            _FUSED_DEVICES = ("cuda",)
    return _FUSED_DEVICES
