"""Value checks of a loaded checkpoint: numbers the policy will read, weights, model size.

A checkpoint may be well-formed and still poison a policy: NaN weights give
NaN logits, a NaN ``clip_param`` or optimizer ``lr`` turns the first learn step's
weights into NaN, an int/complex array is cast lossily into float weights, a
config may ask for a model of billions of weights. These checks run before the
policy is built (config, model size) or before its state is set (arrays).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy._core.checkpoint_io import CheckpointError

_MAX_TIMESTEP = 2**62
# Config keys the policy layer reads, with the closed/open range each must lie in.
# (lo, hi, inf_ok): NaN is always refused; +inf only where it means "no limit".
_CONFIG_RANGES: Dict[str, Tuple[float, float, bool]] = {
    "lr": (0.0, math.inf, False),
    "gamma": (0.0, 1.0, False),
    "lambda": (0.0, 1.0, False),
    "clip_param": (0.0, math.inf, False),
    "vf_clip_param": (0.0, math.inf, True),
    "grad_clip": (0.0, math.inf, True),
    "kl_coeff": (0.0, math.inf, False),
    "kl_target": (0.0, math.inf, False),
    "entropy_coeff": (0.0, math.inf, False),
    "vf_loss_coeff": (0.0, math.inf, False),
    "tau": (0.0, 1.0, False),
    "adam_epsilon": (0.0, math.inf, False),
    "initial_alpha": (0.0, math.inf, False),
}
_SCHEDULE_KEYS = ("lr_schedule", "entropy_coeff_schedule")
_OPTIMIZER_RANGES: Dict[str, Tuple[float, float]] = {
    "lr": (0.0, math.inf),
    "eps": (0.0, math.inf),
    "weight_decay": (0.0, math.inf),
    "momentum": (0.0, math.inf),
    "alpha": (0.0, math.inf),
    "dampening": (0.0, math.inf),
}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _check_range(value: Any, lo: float, hi: float, inf_ok: bool, where: str) -> None:
    if not _is_number(value):
        raise CheckpointError(f"{where}={value!r} is not a number")
    try:
        v = float(value)
    except OverflowError:  # an int beyond float range
        v = math.inf
    if math.isnan(v) or (math.isinf(v) and not inf_ok) or not lo <= v <= hi:
        raise CheckpointError(f"{where}={value!r} is out of range: expected a finite number in [{lo}, {hi}]")


def check_format_version(version: Any, path: str, newest: int) -> int:
    """``format_version`` must be an int (not a bool) in 1..newest."""
    if type(version) is not int or not 1 <= version <= newest:
        raise CheckpointError(
            f"policy checkpoint {path!r} has format_version {version!r}; this rlpolicy reads versions 1..{newest}"
        )
    return version


def check_config_values(config: Any, where: str = "config") -> None:
    """Numbers the policy reads from its config: finite and in range (schedules too)."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{where} is a {type(config).__name__}, expected a dict")
    for key, (lo, hi, inf_ok) in _CONFIG_RANGES.items():
        if config.get(key) is not None:
            _check_range(config[key], lo, hi, inf_ok, f"{where}.{key}")
    for key in _SCHEDULE_KEYS:
        schedule = config.get(key)
        if schedule is None:
            continue
        if not isinstance(schedule, list) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in schedule
        ):
            raise CheckpointError(f"{where}.{key}={schedule!r} is not a list of [timestep, value] pairs")
        for i, (t, v) in enumerate(schedule):
            _check_range(t, 0.0, math.inf, False, f"{where}.{key}[{i}][0]")
            _check_range(v, 0.0, math.inf, False, f"{where}.{key}[{i}][1]")


def check_state_values(state: Any, allow_non_finite: bool = False) -> None:
    """``global_timestep`` a non-negative int; arrays numeric and finite; optimizer groups in range."""
    if isinstance(state, dict) and "global_timestep" in state:
        ts = state["global_timestep"]
        if isinstance(ts, np.ndarray) and ts.ndim == 0 and ts.dtype.kind in "iu":
            ts = ts.item()
        if type(ts) is not int or not 0 <= ts <= _MAX_TIMESTEP:
            raise CheckpointError(f"state.global_timestep={ts!r} is not an int in [0, 2**62]")
    for where, value in _leaves(state, "state"):
        if isinstance(value, np.ndarray):
            if value.dtype.kind == "c":
                raise CheckpointError(f"{where} has complex dtype {value.dtype}; weights are real numbers")
            if value.dtype.kind == "f" and not allow_non_finite and not np.isfinite(value).all():
                raise CheckpointError(
                    f"{where} holds NaN or inf values; load with allow_non_finite=True to accept them"
                )
        elif isinstance(value, float) and not allow_non_finite and not math.isfinite(value):
            raise CheckpointError(f"{where}={value!r} is not finite")
        if where.endswith(".param_groups") and isinstance(value, list):
            _check_param_groups(value, where)


def _check_param_groups(groups: List[Any], where: str) -> None:
    for i, group in enumerate(groups):
        if not isinstance(group, dict):
            continue
        for key, (lo, hi) in _OPTIMIZER_RANGES.items():
            if group.get(key) is not None:
                _check_range(group[key], lo, hi, False, f"{where}[{i}].{key}")
        betas = group.get("betas")
        if betas is not None:
            for j, b in enumerate(betas if isinstance(betas, (list, tuple)) else [betas]):
                _check_range(b, 0.0, 1.0, False, f"{where}[{i}].betas[{j}]")


def _leaves(value: Any, where: str) -> List[Tuple[str, Any]]:
    # Iterative: the state's depth is bounded by the JSON limit, but no recursion anyway.
    out, stack = [], [(where, value)]
    while stack:
        path, item = stack.pop()
        out.append((path, item))
        if isinstance(item, dict):
            stack.extend((f"{path}.{k}", v) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(item))
    return out


def check_arrays_match(saved: Any, current: Any, where: str = "state.weights") -> None:
    """Saved arrays must have the shape of the policy's and a lossless dtype cast into it."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in saved.keys() & current.keys():
            check_arrays_match(saved[key], current[key], f"{where}.{key}")
        return
    if isinstance(saved, (list, tuple)) and isinstance(current, (list, tuple)) and len(saved) == len(current):
        for i, (s, c) in enumerate(zip(saved, current)):
            check_arrays_match(s, c, f"{where}[{i}]")
        return
    if not isinstance(saved, np.ndarray) or not hasattr(current, "dtype") or not hasattr(current, "shape"):
        return
    want = np.dtype(getattr(current.dtype, "as_numpy_dtype", current.dtype))
    if tuple(saved.shape) != tuple(current.shape):
        raise CheckpointError(f"{where} has shape {saved.shape}, the policy's is {tuple(current.shape)}")
    lossless = saved.dtype == want or (
        saved.dtype.kind == want.kind and np.can_cast(saved.dtype, want, "safe")
    )
    if not lossless:
        raise CheckpointError(
            f"{where} has dtype {saved.dtype}, which does not convert losslessly into the policy's {want}"
        )


def check_weight_shapes(
    shapes: Dict[str, Tuple[int, ...]], weights: Mapping[str, Any], where: str = "set_weights"
) -> None:
    """Raises ValueError unless ``weights`` has exactly the keys of ``shapes`` (the
    model's ``{key: shape}``) with those shapes, naming the missing and unknown keys
    or the first key whose shape differs (``where`` starts the message)."""
    missing = [k for k in shapes if k not in weights]
    unknown = [k for k in weights if k not in shapes]
    if missing or unknown:
        raise ValueError(
            f"{where}: weights do not match the model's variables; missing keys {missing}, "
            f"unknown keys {unknown}; nothing was assigned"
        )
    for key, shape in shapes.items():
        given = tuple(np.shape(weights[key]))
        if given != tuple(shape):
            raise ValueError(
                f"{where}: {key!r} has shape {given}, the model's is {tuple(shape)}; nothing was assigned"
            )


def estimate_model_weights(config: Any, obs_space: gym.Space, action_space: gym.Space) -> Optional[int]:
    """A generous estimate of the weights of the default models a config asks for (None: no estimate)."""
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        return None
    obs_dim = _flat_size(obs_space)
    out_dim = 2 * _flat_size(action_space) + 1
    total = 0
    for key in ("fcnet_hiddens", "post_fcnet_hiddens"):
        sizes = model.get(key) or []
        if not isinstance(sizes, list) or not all(_is_number(s) and int(s) == s and s >= 0 for s in sizes):
            raise CheckpointError(f"config.model.{key}={sizes!r} is not a list of non-negative ints")
        dims = [obj_dim for obj_dim in [obs_dim, *map(int, sizes), out_dim]]
        total += 2 * sum(a * b + b for a, b in zip(dims, dims[1:]))  # policy + value branch
    for key in ("lstm_cell_size", "attention_dim"):
        size = model.get(key)
        if size is not None:
            if not _is_number(size) or int(size) != size or size < 0:
                raise CheckpointError(f"config.model.{key}={size!r} is not a non-negative int")
            total += 8 * int(size) * (int(size) + obs_dim + out_dim)
    return total


def _flat_size(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    shape = getattr(space, "shape", None)
    if shape:
        return int(np.prod(shape))
    subs = getattr(space, "spaces", None)
    if isinstance(subs, dict):
        return sum(_flat_size(s) for s in subs.values())
    if isinstance(subs, (list, tuple)):
        return sum(_flat_size(s) for s in subs)
    return 1


def check_model_size(config: Any, obs_space: gym.Space, action_space: gym.Space, max_weights: int) -> None:
    """Refuses a config whose default model would exceed ``max_weights`` (checked before building)."""
    total = estimate_model_weights(config, obs_space, action_space)
    if total is not None and total > max_weights:
        raise CheckpointError(
            f"config.model asks for about {total} weights, over the limit of {max_weights} "
            "(raise it with limits=Limits(max_model_weights=...))"
        )
