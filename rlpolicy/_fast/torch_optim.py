"""Entry ``torch_fused_adam``: which device types may run Adam on torch's fused kernel.

``torch.optim.Adam(..., fused=True)`` does a step's update of all parameters in
a few ops instead of about a dozen per parameter; torch checks the device only at
the first ``step()``, so the choice must be made before building, from the list
of fused-capable device types that only a private torch helper gives
(``torch.utils._foreach_utils``). Measured win (docs/fast_paths.md): +18% on a
32-row ``learn_on_batch``, +27% on DQN's 32-row step, none at 4000 rows.
The plain path: no device is fused-capable, so the per-tensor Adam runs.
"""

from __future__ import annotations

from typing import Optional, Tuple

from rlpolicy._fast import register, untested_version

try:
    import torch
except ImportError:  # (no torch: the entry stays off)
    torch = None  # type: ignore[assignment]

TESTED = ((2, 4), (2, 14))  # fused CPU kernels arrived in torch 2.4


def _devices() -> Tuple[str, ...]:
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return tuple(_get_fused_kernels_supported_devices())


def _guard() -> Optional[str]:
    if torch is None:
        return "torch is not installed"
    return untested_version("torch", torch.__version__, TESTED) or (
        None if _devices() else "torch lists no fused-capable device"
    )


FUSED_ADAM = register(
    "torch_fused_adam",
    "torch 2.4 to 2.13: torch.utils._foreach_utils._get_fused_kernels_supported_devices",
    _guard,
)
_DEVICES: Optional[Tuple[str, ...]] = None


def fused_adam_devices() -> Tuple[str, ...]:
    """The device types whose parameters may get ``Adam(fused=True)``; () on the plain path."""
    global _DEVICES
    if not FUSED_ADAM.active:
        return ()
    if _DEVICES is None:
        _DEVICES = _devices()
    return _DEVICES
