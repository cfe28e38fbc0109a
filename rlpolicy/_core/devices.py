"""Which devices a policy builds its model towers on.

``plan_devices`` is a pure function of the config, the visible GPUs and the
Ray context, so every branch of RLlib 1.11's ``TorchPolicy`` device selection
can be unit-tested without a GPU or a Ray cluster. ``detect_ray_context``
reads the Ray context of the current process (without importing Ray when the
process never did).
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

from rlpolicy._core.config import check_config_value

#: Ray contexts understood by ``plan_devices``.
RAY_NONE = None  # Ray not initialized (or a plain driver script).
RAY_DRIVER = "driver"  # ray.init() was called in this (driver) process.
RAY_LOCAL = "local"  # Ray's legacy local mode (ray.init(local_mode=True)).
RAY_WORKER = "worker"  # This process is a Ray worker (e.g. a RolloutWorker actor).
_RAY_MODES = (RAY_NONE, RAY_DRIVER, RAY_LOCAL, RAY_WORKER)


@dataclass(frozen=True)
class DevicePlan:
    """Where the model towers of a policy live.

    Attributes:
        devices: One torch device string per tower, e.g. ``("cpu", "cpu")`` or
            ``("cuda:0", "cuda:1")``. Tower 0 is the policy's main model.
        fake: True if the CPU towers stand in for GPUs (``_fake_gpus``).
        num_gpus: The GPU count that applied (``num_gpus`` for the local
            worker, ``num_gpus_per_worker`` for remote ones, 0 in local mode).
        gpu_ids: The GPU ids the towers use (Ray-assigned inside a Ray worker,
            else the visible CUDA devices); empty for CPU towers.
    """

    devices: Tuple[str, ...]
    fake: bool = False
    num_gpus: float = 0
    gpu_ids: Tuple[Any, ...] = ()

    @property
    def num_towers(self) -> int:
        """Number of model towers (== number of devices)."""
        return len(self.devices)

    @property
    def on_gpu(self) -> bool:
        """True if the towers live on real CUDA devices."""
        return self.devices[0].startswith("cuda")


def _read_gpu_count(config: Mapping, key: str) -> float:
    # Missing or None: no GPUs. Otherwise checked as validate_config does.
    value = config.get(key)
    if value is None:
        return 0
    check_config_value(key, value)
    return value


def _gpu_count_for_worker(config: Mapping, ray_mode: Optional[str]) -> float:
    """RLlib 1.11: local mode forces CPU unless GPUs are faked; the local worker
    (index 0) reads ``num_gpus``, remote workers ``num_gpus_per_worker``."""
    worker_index = config.get("worker_index") or 0
    check_config_value("worker_index", worker_index)
    num_gpus = _read_gpu_count(config, "num_gpus")
    num_gpus_per_worker = _read_gpu_count(config, "num_gpus_per_worker")
    if not config.get("_fake_gpus", False) and ray_mode == RAY_LOCAL:
        return 0
    return num_gpus if worker_index == 0 else num_gpus_per_worker


def plan_devices(
    config: Mapping,
    visible_gpus: Union[int, Sequence[Any]] = 0,
    *,
    ray_mode: Optional[str] = None,
    ray_gpu_ids: Optional[Sequence[Any]] = None,
) -> DevicePlan:
    """Chooses the devices for a policy's model towers, as RLlib 1.11 does.

    CPU towers (``ceil(num_gpus)`` of them, at least one) are used when GPUs
    are faked (``_fake_gpus``), when the applicable GPU count is 0, or when no
    CUDA device is visible. Otherwise one tower per GPU, up to the GPU count;
    inside a Ray worker the GPU ids Ray assigned are used instead of the
    visible ones.

    Args:
        config: The policy config (reads ``num_gpus``, ``num_gpus_per_worker``,
            ``_fake_gpus`` and ``worker_index``).
        visible_gpus: The number (or list of ids) of visible CUDA devices,
            e.g. ``torch.cuda.device_count()``.
        ray_mode: The Ray context (see ``detect_ray_context``): None,
            ``"driver"``, ``"local"`` or ``"worker"``.
        ray_gpu_ids: The GPU ids Ray assigned to this worker
            (``ray.get_gpu_ids()``); read only when ``ray_mode == "worker"``.

    Returns:
        The DevicePlan.

    Raises:
        ValueError: If a GPU count in the config is not a number >= 0, if
            ``ray_mode`` is unknown, or if a Ray worker got fewer GPU ids
            than it needs.
    """
    if ray_mode not in _RAY_MODES:
        raise ValueError(f"ray_mode={ray_mode!r} is unknown; use one of {_RAY_MODES}")
    num_gpus = _gpu_count_for_worker(config, ray_mode)
    fake = bool(config.get("_fake_gpus", False))
    if isinstance(visible_gpus, numbers.Integral):
        gpu_ids = list(range(int(visible_gpus)))
    else:
        gpu_ids = list(visible_gpus)  # type: ignore[arg-type]
    if fake or num_gpus == 0 or not gpu_ids:
        num_towers = int(math.ceil(num_gpus)) or 1
        return DevicePlan(devices=("cpu",) * num_towers, fake=fake, num_gpus=num_gpus)
    if ray_mode == RAY_WORKER:
        gpu_ids = list(ray_gpu_ids or [])
        if len(gpu_ids) < num_gpus:
            raise ValueError(
                f"TorchPolicy was not able to find enough GPU IDs! Found {gpu_ids}, but num_gpus={num_gpus}."
            )
    # One tower per id, as long as its index is below num_gpus (0.5 -> 1 tower).
    used = [gpu_id for i, gpu_id in enumerate(gpu_ids) if i < num_gpus]
    devices = tuple(f"cuda:{i}" for i in range(len(used)))
    return DevicePlan(devices=devices, fake=False, num_gpus=num_gpus, gpu_ids=tuple(used))


def detect_ray_context() -> Tuple[Optional[str], Optional[Sequence[Any]]]:
    """Returns ``(ray_mode, ray_gpu_ids)`` for the current process.

    Ray is never imported here: a process that did not import it can neither
    have initialized Ray nor be a Ray worker. ``ray_gpu_ids`` is only asked
    for inside a Ray worker.
    """
    ray = sys.modules.get("ray")
    if ray is None or not getattr(ray, "is_initialized", lambda: False)():
        return RAY_NONE, None
    worker_mod = getattr(getattr(ray, "_private", None), "worker", None) or getattr(ray, "worker", None)
    mode = getattr(getattr(worker_mod, "global_worker", None), "mode", None)
    local_mode = getattr(worker_mod, "LOCAL_MODE", None)
    if local_mode is not None and mode == local_mode:
        return RAY_LOCAL, None
    if mode is not None and mode == getattr(worker_mod, "WORKER_MODE", 1):
        return RAY_WORKER, list(ray.get_gpu_ids())
    return RAY_DRIVER, None
