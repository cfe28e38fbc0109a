"""Completing, validating and reading policy config dicts.

``complete_config`` fills a partial dict from ``COMMON_CONFIG`` (and its
``model`` sub-dict from ``MODEL_DEFAULTS``); ``validate_config`` rejects wrong
values with a message naming the key, the value and what is allowed;
``PolicyConfigView`` is the typed, frozen view internal code reads.

Only keys rlpolicy knows are checked: algorithm-specific keys (``lambda``,
``kl_coeff``, ...) pass through untouched, as in RLlib. The ``model`` dict is
stricter: an unknown model key is an error (custom model options belong in
``custom_model_config``).
"""
from __future__ import annotations

import copy
import difflib
import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from rlpolicy._core.defaults import COMMON_CONFIG, MODEL_DEFAULTS

FRAMEWORKS = ("torch", "tf", "tf2", "tfe", "jax")
BATCH_MODES = ("truncate_episodes", "complete_episodes")


def _bad(key: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"config[{key!r}]={value!r} is invalid; allowed: {allowed}")


def _is_number(v: Any) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(float(v))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# --------------------------------------------------------------- single-value checks
# Each check returns None if the value is fine, else a description of what is allowed.

def _bool(v: Any) -> Optional[str]:
    return None if isinstance(v, bool) else "True or False"


def _number_ge0(v: Any) -> Optional[str]:
    return None if _is_number(v) and v >= 0 else "a finite number >= 0"


def _int_ge(low: int) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        return None if _is_int(v) and v >= low else f"an int >= {low}"
    return check


def _optional(check: Callable[[Any], Optional[str]]) -> Callable[[Any], Optional[str]]:
    def wrapped(v: Any) -> Optional[str]:
        if v is None:
            return None
        problem = check(v)
        return None if problem is None else f"None or {problem}"
    return wrapped


def _choice(options: Tuple[str, ...]) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        return None if v in options else "one of " + ", ".join(repr(o) for o in options)
    return check


def _gamma(v: Any) -> Optional[str]:
    return None if _is_number(v) and 0.0 <= v <= 1.0 else "a number in [0, 1]"


def _grad_clip(v: Any) -> Optional[str]:
    return None if v is None or (_is_number(v) and v > 0) else "None or a number > 0"


def _entropy_schedule(v: Any) -> Optional[str]:
    # RLlib 1.11's EntropyCoeffSchedule also takes a timestep: decay linearly to 0 by then.
    if _is_int(v) and v >= 0:
        return None
    problem = _schedule(v)
    return None if problem is None else f"{problem}, or an int timestep >= 0"


def _schedule(v: Any) -> Optional[str]:
    ok = v is None or (isinstance(v, (list, tuple)) and len(v) > 0 and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and _is_number(p[0]) and _is_number(p[1])
        for p in v))
    return None if ok else "None or a non-empty list of [timestep, value] pairs"


def _dict(v: Any) -> Optional[str]:
    return None if isinstance(v, dict) else "a dict"


def _exploration_config(v: Any) -> Optional[str]:
    if isinstance(v, dict) and isinstance(v.get("type"), (str, type)):
        return None
    return "a dict with a 'type' (an Exploration class or its name)"


def _callbacks(v: Any) -> Optional[str]:
    from rlpolicy.agents.callbacks import DefaultCallbacks

    if v is None or (isinstance(v, type) and issubclass(v, DefaultCallbacks)):
        return None
    # Factories such as MultiCallbacks([...]) instances are called like a class.
    if callable(v) and not isinstance(v, type):
        return None
    return "None, a DefaultCallbacks subclass, or a callable returning a DefaultCallbacks instance"


_TOP_LEVEL_CHECKS: Dict[str, Callable[[Any], Optional[str]]] = {
    "framework": _choice(FRAMEWORKS),
    "num_gpus": _number_ge0,
    "_fake_gpus": _bool,
    "num_gpus_per_worker": _number_ge0,
    "num_cpus_per_worker": _number_ge0,
    "worker_index": _int_ge(0),
    "num_workers": _int_ge(0),
    "num_envs_per_worker": _int_ge(1),
    "lr": _number_ge0,
    "lr_schedule": _schedule,
    "entropy_coeff_schedule": _entropy_schedule,
    "gamma": _gamma,
    "train_batch_size": _int_ge(1),
    "sgd_minibatch_size": _optional(_int_ge(1)),
    "rollout_fragment_length": _int_ge(1),
    "num_sgd_iter": _int_ge(1),
    "num_multi_gpu_tower_stacks": _int_ge(1),
    "batch_mode": _choice(BATCH_MODES),
    "grad_clip": _grad_clip,
    "explore": _bool,
    "exploration_config": _exploration_config,
    "in_evaluation": _bool,
    "normalize_actions": _bool,
    "clip_actions": _bool,
    "eager_tracing": _bool,
    "eager_max_retraces": _optional(_int_ge(0)),
    "_tf_policy_handles_more_than_one_loss": _bool,
    "seed": _optional(_int_ge(0)),
    "callbacks": _callbacks,
    "model": _dict,
    "optimizer": _dict,
    "multiagent": _dict,
    "tf_session_args": _dict,
    "local_tf_session_args": _dict,
}

_MODEL_CHECKS: Dict[str, Callable[[Any], Optional[str]]] = {
    "max_seq_len": _int_ge(1),
    "lstm_cell_size": _int_ge(1),
    "use_lstm": _bool,
    "use_attention": _bool,
    "lstm_use_prev_action": _bool,
    "lstm_use_prev_reward": _bool,
    "_time_major": _bool,
    "vf_share_layers": _bool,
    "free_log_std": _bool,
    "no_final_linear": _bool,
    "custom_model_config": _dict,
}


def _int_list(v: Any) -> Optional[str]:
    ok = isinstance(v, (list, tuple)) and all(_is_int(h) and h > 0 for h in v)
    return None if ok else "a list of ints > 0"


_MODEL_CHECKS["fcnet_hiddens"] = _int_list
_MODEL_CHECKS["post_fcnet_hiddens"] = _int_list


def _check_model(model: Mapping[str, Any]) -> None:
    for key, value in model.items():
        if key not in MODEL_DEFAULTS:
            close = difflib.get_close_matches(str(key), list(MODEL_DEFAULTS), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(f"config['model'] has unknown key {key!r}{hint} (put custom model "
                             f"options into 'custom_model_config')")
        check = _MODEL_CHECKS.get(key)
        problem = check(value) if check is not None else None
        if problem is not None:
            raise _bad(f"model.{key}", value, problem)


def validate_config(config: Mapping[str, Any]) -> None:
    """Checks the keys rlpolicy knows; raises on the first bad one. Changes nothing.

    Args:
        config: A (complete or partial) policy config.

    Raises:
        ValueError: Naming the key, the bad value and what is allowed (for the
            ``model`` dict also an unknown key, with close matches).
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a dict, got {type(config).__name__}")
    for key, check in _TOP_LEVEL_CHECKS.items():
        if key in config:
            problem = check(config[key])
            if problem is not None:
                raise _bad(key, config[key], problem)
    if isinstance(config.get("model"), Mapping):
        _check_model(config["model"])


def _check_minibatch(partial: Mapping[str, Any]) -> None:
    sgd, train = partial.get("sgd_minibatch_size"), partial.get("train_batch_size")
    if _is_int(sgd) and _is_int(train) and sgd > train:
        raise ValueError(f"config['sgd_minibatch_size']={sgd!r} is invalid; allowed: an int <= "
                         f"train_batch_size ({train})")


def complete_config(partial: Optional[Mapping[str, Any]]) -> dict:
    """Returns a new, complete config: ``COMMON_CONFIG`` deep-updated with ``partial``.

    Sub-dicts are merged key by key (``model`` starts from ``MODEL_DEFAULTS``);
    an ``exploration_config`` with a different ``type`` replaces the default
    one entirely (as RLlib does). New top-level keys are kept. Neither input
    is modified.

    Args:
        partial: The caller's (partial) config, or None.

    Returns:
        The completed config dict.

    Raises:
        ValueError: If ``partial`` is not a dict, or it sets both
            ``sgd_minibatch_size`` and ``train_batch_size`` with the first larger.
    """
    if partial is None:
        partial = {}
    if not isinstance(partial, Mapping):
        raise ValueError(f"config must be a dict, got {type(partial).__name__}")
    _check_minibatch(partial)
    memo: Dict[int, Any] = {}
    full = _copy_plain(COMMON_CONFIG, memo)
    full["model"] = _copy_plain(MODEL_DEFAULTS, memo)
    return merge_configs(full, _copy_plain(dict(partial), {}))


_ATOMS = frozenset((int, float, complex, str, bool, bytes, type(None), type))


def _copy_plain(value: Any, memo: Dict[int, Any]) -> Any:
    """``copy.deepcopy(value, memo)`` with a fast path for plain containers.

    Exact dicts, lists and tuples are rebuilt here (shared ones stay shared,
    as with deepcopy), immutable atoms are kept; anything else goes through
    ``copy.deepcopy`` with the same memo. Configs are mostly nested plain
    dicts, for which deepcopy's generic machinery is the slow part.
    """
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is not dict and kind is not list and kind is not tuple:
        return copy.deepcopy(value, memo)
    done = memo.get(id(value))
    if done is not None:
        return done
    atoms = _ATOMS
    if kind is dict:
        out: Any = {}
        memo[id(value)] = out
        for k, v in value.items():
            out[k if type(k) in atoms else _copy_plain(k, memo)] = \
                v if type(v) in atoms else _copy_plain(v, memo)
    elif kind is list:
        out = []
        memo[id(value)] = out
        out.extend(v if type(v) in atoms else _copy_plain(v, memo) for v in value)
    else:
        items = [v if type(v) in atoms else _copy_plain(v, memo) for v in value]
        out = value if all(a is b for a, b in zip(items, value)) else tuple(items)
        memo[id(value)] = out
    _keep_alive(value, memo)
    return out


def _keep_alive(value: Any, memo: Dict[int, Any]) -> None:
    # As deepcopy does: hold the originals so their ids stay unique while the memo lives.
    keep = memo.get(id(memo))
    if keep is None:
        memo[id(memo)] = [value]
    else:
        keep.append(value)


def merge_configs(base: dict, new: Mapping[str, Any]) -> dict:
    """Deep-merges ``new`` into ``base`` in place (new keys allowed at every level) and returns it.

    An ``exploration_config`` whose ``type`` differs from the one in ``base``
    replaces it whole: options of one exploration class mean nothing to another
    (RLlib's ``override_all_if_type_changes``).
    """
    for key, value in new.items():
        old = base.get(key)
        if (key == "exploration_config" and isinstance(old, dict) and isinstance(value, dict)
                and "type" in value and value["type"] != old.get("type")):
            base[key] = value
        elif isinstance(old, dict) and isinstance(value, dict):
            merge_configs(old, value)
        else:
            base[key] = value
    return base


@dataclass(frozen=True)
class PolicyConfigView:
    """The config values policy internals read, typed and checked once.

    ``self.config`` stays the caller's dict (as in RLlib); internal code reads
    this view instead. Missing keys take their ``COMMON_CONFIG`` defaults.
    """

    framework: str
    explore: bool
    num_gpus: float
    fake_gpus: bool  # config["_fake_gpus"]
    num_gpus_per_worker: float
    worker_index: int
    max_seq_len: int  # config["model"]["max_seq_len"]
    train_batch_size: int
    sgd_minibatch_size: int  # None in the config: falls back to train_batch_size (RLlib 1.11)
    num_multi_gpu_tower_stacks: int
    grad_clip: Optional[float]
    lr: float
    in_evaluation: bool

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "PolicyConfigView":
        """Reads (and checks) each field's key once.

        Args:
            config: The policy config.

        Raises:
            ValueError: Naming the first key with an invalid value.
        """
        def read(key: str) -> Any:
            value = config.get(key, COMMON_CONFIG[key])
            problem = _TOP_LEVEL_CHECKS[key](value)
            if problem is not None:
                raise _bad(key, value, problem)
            return value

        model = config.get("model") or {}
        max_seq_len = model.get("max_seq_len", MODEL_DEFAULTS["max_seq_len"])
        if _MODEL_CHECKS["max_seq_len"](max_seq_len) is not None:
            raise _bad("model.max_seq_len", max_seq_len, "an int >= 1")
        return cls(
            framework=read("framework"), explore=read("explore"), num_gpus=read("num_gpus"),
            fake_gpus=read("_fake_gpus"), num_gpus_per_worker=read("num_gpus_per_worker"),
            worker_index=read("worker_index"), max_seq_len=max_seq_len,
            train_batch_size=read("train_batch_size"),
            sgd_minibatch_size=read("sgd_minibatch_size") or read("train_batch_size"),
            num_multi_gpu_tower_stacks=read("num_multi_gpu_tower_stacks"),
            grad_clip=read("grad_clip"), lr=read("lr"), in_evaluation=read("in_evaluation"),
        )


__all__ = ["FRAMEWORKS", "PolicyConfigView", "complete_config", "merge_configs", "validate_config"]
