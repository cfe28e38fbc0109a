"""Completing, validating and checking the keys of policy config dicts.

``check_config`` is the one entry point policies use: it completes a partial
dict (``complete_config``: ``COMMON_CONFIG``, then the policy's own default
config, then the caller's keys, all deep-copied), warns once per process about
each top-level or ``model`` key nobody knows (``warn_unknown_keys``), and
rejects wrong values of the keys the policy layer reads with a message naming
the key, the value and what is allowed (``validate_config``).

Only keys a policy reads are validated when it is built. ``lr`` is checked
where it is read (the default optimizers, the learning-rate mixins without a
schedule: ``read_checked``); trainer/rollout keys (``rollout_fragment_length``,
``batch_mode``, ...) pass through and are checked by the command line
(``validate_config(..., strict=True)``) and the workers that read them.

Known top-level keys are those of ``COMMON_CONFIG``, the trainer-level keys
of RLlib 1.11 that the policy layer does not read (``TRAINER_ONLY_KEYS``),
the policy's default config (``lambda``, ``kl_coeff``, ... for PPO) and any
key starting with ``_``. Known ``model`` keys are ``MODEL_DEFAULTS``' and the
policy's default model dict's; custom model options belong in
``custom_model_config``.
"""

from __future__ import annotations

import copy
import difflib
import math
import threading
import warnings
from numbers import Real
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from rlpolicy._core.defaults import ALGORITHM_KEYS, COMMON_CONFIG, MODEL_DEFAULTS, TRAINER_ONLY_KEYS

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
    ok = v is None or (
        isinstance(v, (list, tuple))
        and len(v) > 0
        and all(
            isinstance(p, (list, tuple)) and len(p) == 2 and _is_number(p[0]) and _is_number(p[1]) for p in v
        )
    )
    return None if ok else "None or a non-empty list of [timestep, value] pairs"


def _dict(v: Any) -> Optional[str]:
    return None if isinstance(v, dict) else "a dict"


def _exploration_config(v: Any) -> Optional[str]:
    if isinstance(v, dict) and isinstance(v.get("type"), (str, type)):
        return None
    return "a dict with a 'type' (an Exploration class or its name)"


def _callbacks(v: Any) -> Optional[str]:
    # RLlib 1.11 only calls it (``config["callbacks"]()``): any class or factory. Whether
    # the object it returns has the hooks is checked where they are called.
    if v is None or callable(v):
        return None
    return "None or a class (e.g. a DefaultCallbacks subclass) or factory to call for the callbacks object"


def _compile_acting(v: Any) -> Optional[str]:
    # (accepted for old configs; TorchPolicy logs that "jit" is ignored)
    return None if v is None or v is False or v == "jit" else "False, None or 'jit'"


def _deterministic_towers(v: Any) -> Optional[str]:
    # (the tower count must also divide K: checked with the devices, tower_buffers)
    ok = v is None or isinstance(v, bool) or (isinstance(v, int) and v >= 0)
    return None if ok else "False, True or the number of chunks per minibatch (an int >= 1)"


# Keys the policy layer reads, checked when a policy is built.
_TOP_LEVEL_CHECKS: Dict[str, Callable[[Any], Optional[str]]] = {
    "framework": _choice(FRAMEWORKS),
    "num_gpus": _number_ge0,
    "_fake_gpus": _bool,
    "num_gpus_per_worker": _number_ge0,
    "worker_index": _int_ge(0),
    "num_workers": _int_ge(0),
    "lr_schedule": _schedule,
    "entropy_coeff_schedule": _entropy_schedule,
    "gamma": _gamma,
    "train_batch_size": _int_ge(1),
    "sgd_minibatch_size": _optional(_int_ge(1)),
    "num_multi_gpu_tower_stacks": _int_ge(1),
    "_deterministic_towers": _deterministic_towers,
    "grad_clip": _grad_clip,
    "explore": _bool,
    "exploration_config": _exploration_config,
    "in_evaluation": _bool,
    "normalize_actions": _bool,
    "clip_actions": _bool,
    "eager_tracing": _bool,
    "eager_max_retraces": _optional(_int_ge(0)),
    "torch_compile_acting": _compile_acting,
    "_tf_policy_handles_more_than_one_loss": _bool,
    "_check_finite_obs": _bool,
    "_check_finite_samples": _bool,
    "seed": _optional(_int_ge(0)),
    "callbacks": _callbacks,
    "model": _dict,
    "tf_session_args": _dict,
    "local_tf_session_args": _dict,
}

# Keys checked where they are read (``read_checked``), not when a policy is built:
# ``lr`` is read by the default optimizers and the learning-rate mixins only when
# there is no schedule; SAC-style policies keep their rates elsewhere.
_READ_CHECKS: Dict[str, Callable[[Any], Optional[str]]] = {
    "lr": _number_ge0,
}

# Trainer / rollout keys no policy reads: checked by the command line (``strict``)
# and by the workers that read them, never when a policy is built (RLlib 2.x
# configs carry e.g. ``rollout_fragment_length="auto"``).
_TRAINER_CHECKS: Dict[str, Callable[[Any], Optional[str]]] = {
    "num_cpus_per_worker": _number_ge0,
    "num_envs_per_worker": _int_ge(1),
    "rollout_fragment_length": _int_ge(1),
    "num_sgd_iter": _int_ge(1),
    "batch_mode": _choice(BATCH_MODES),
    "optimizer": _dict,
    "multiagent": _dict,
}
_ALL_CHECKS = {**_TOP_LEVEL_CHECKS, **_READ_CHECKS, **_TRAINER_CHECKS}

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


def _close_model_keys(key: Any) -> List[str]:
    return difflib.get_close_matches(str(key), list(MODEL_DEFAULTS), n=3, cutoff=0.6)


def _check_model(model: Mapping[str, Any], strict: bool = False) -> None:
    for key, value in model.items():
        if key not in MODEL_DEFAULTS:
            if not strict:
                continue  # warned about by warn_unknown_keys (RLlib 2.x adds model keys)
            close = _close_model_keys(key)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(
                f"config['model'] has unknown key {key!r}{hint} (put custom model "
                f"options into 'custom_model_config')"
            )
        check = _MODEL_CHECKS.get(key)
        problem = check(value) if check is not None else None
        if problem is not None:
            raise _bad(f"model.{key}", value, problem)


def check_config_value(key: str, value: Any) -> None:
    """Checks one top-level value the way ``validate_config`` does.

    For code that reads a key straight from a config it did not complete
    (e.g. ``plan_devices``), or a key checked only where it is read
    (``lr``), so that all report a bad value in one wording.

    Args:
        key: A top-level key rlpolicy validates (e.g. ``"num_gpus"``, ``"lr"``).
        value: Its value.

    Raises:
        KeyError: If rlpolicy has no check for ``key``.
        ValueError: Naming the key, the bad value and what is allowed.
    """
    problem = _ALL_CHECKS[key](value)
    if problem is not None:
        raise _bad(key, value, problem)


def read_checked(config: Mapping[str, Any], key: str) -> Any:
    """``config[key]``, checked as ``check_config_value`` does: for keys that are
    validated where they are read (``lr`` by the default optimizers), not when
    the policy is built, since policies that do not read them accept any value
    (SAC keeps its rates under ``optimization`` and may carry ``lr=None``).

    Raises:
        ValueError: Naming the key, the bad value and what is allowed.
    """
    value = config.get(key)
    check_config_value(key, value)
    return value


def validate_config(config: Mapping[str, Any], *, strict: bool = False) -> None:
    """Checks the keys the policy layer reads; raises on the first bad one. Changes nothing.

    Args:
        config: A (complete or partial) policy config.
        strict: The command line's rule: also check the trainer-level keys
            (``rollout_fragment_length``, ``batch_mode``, ...) and ``lr``,
            and reject unknown ``model`` keys. Without it those trainer keys
            pass through, ``lr`` is checked where it is read, and an
            unknown model key only warns (``warn_unknown_keys``).

    Raises:
        ValueError: Naming the key, the bad value and what is allowed (with
            ``strict`` also an unknown model key, with close matches).
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a dict, got {type(config).__name__}")
    for key in _ALL_CHECKS if strict else _TOP_LEVEL_CHECKS:
        if key in config:
            check_config_value(key, config[key])
    if isinstance(config.get("model"), Mapping):
        _check_model(config["model"], strict=strict)


def _check_minibatch(partial: Mapping[str, Any]) -> None:
    sgd, train = partial.get("sgd_minibatch_size"), partial.get("train_batch_size")
    if _is_int(sgd) and _is_int(train) and int(sgd) > int(train):  # type: ignore[arg-type]
        raise ValueError(
            f"config['sgd_minibatch_size']={sgd!r} is invalid; allowed: an int <= train_batch_size ({train})"
        )


def _as_dict(config: Optional[Mapping[str, Any]], what: str) -> Mapping[str, Any]:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise ValueError(f"{what} must be a dict, got {type(config).__name__}")
    return config


def complete_config(
    partial: Optional[Mapping[str, Any]], defaults: Optional[Mapping[str, Any]] = None
) -> dict:
    """Returns a new, complete config: the defaults deep-updated with ``partial``.

    The defaults are ``COMMON_CONFIG`` (its ``model`` from ``MODEL_DEFAULTS``)
    deep-updated with ``defaults`` (a policy's own default config, which may
    be partial). Sub-dicts are merged key by key; an ``exploration_config``
    with a different ``type`` replaces the default one entirely (as RLlib
    does). New top-level keys are kept. Every level of the result is a fresh
    copy: no input is modified, and nothing mutable is shared with them.

    Args:
        partial: The caller's (partial) config, or None.
        defaults: The policy's default config, or None for ``COMMON_CONFIG``.

    Returns:
        The completed config dict.

    Raises:
        ValueError: If ``partial`` or ``defaults`` is not a dict, or
            ``partial`` sets both ``sgd_minibatch_size`` and
            ``train_batch_size`` with the first larger.
    """
    partial = _as_dict(partial, "config")
    defaults = _as_dict(defaults, "the default config")
    _check_minibatch(partial)
    memo: Dict[int, Any] = {}
    full = copy.deepcopy(COMMON_CONFIG, memo)
    full["model"] = copy.deepcopy(MODEL_DEFAULTS, memo)
    if defaults:
        merge_configs(full, copy.deepcopy(dict(defaults)))
    return merge_configs(full, copy.deepcopy(dict(partial)))


# ---------------------------------------------------------------- unknown top-level keys
class UnknownConfigKeyWarning(UserWarning):
    """A top-level config key that neither rlpolicy nor the policy's defaults know."""


_WARNED_KEYS: Set[str] = set()
# difflib similarity for a "did you mean": 'lrr' -> 'lr' (0.8) and 'gama' -> 'gamma' (0.89)
# qualify; unrelated names that merely share a suffix ('kl_target' / 'multiagent') do not.
_CLOSE_ENOUGH = 0.75
_WARNED_LOCK = threading.Lock()


# Keys that rlpolicy's policy-layer helpers read from any policy's config: the
# mixins (learning-rate / entropy schedules, KL coefficient, target-network
# ``tau``) and GAE postprocessing (``compute_gae_for_sample_batch``).
HELPER_KEYS: frozenset = frozenset(
    {
        "lr_schedule",
        "entropy_coeff",
        "entropy_coeff_schedule",
        "kl_coeff",
        "kl_target",
        "tau",
        "use_gae",
        "use_critic",
        "lambda",
        "vtrace",
    }
)
_BASE_KNOWN: Dict[bool, frozenset] = {}


def _base_known_keys(strict: bool = False) -> frozenset:
    """Every policy's known keys (all but its own defaults'), gathered once:
    ``COMMON_CONFIG``, the validated keys and ``TRAINER_ONLY_KEYS``; unless
    ``strict``, also ``HELPER_KEYS`` and the keys of rlpolicy's algorithms'
    default configs."""
    known = _BASE_KNOWN.get(strict)
    if known is None:
        keys = set(COMMON_CONFIG) | set(_ALL_CHECKS) | TRAINER_ONLY_KEYS
        if not strict:
            keys |= HELPER_KEYS | ALGORITHM_KEYS
        known = _BASE_KNOWN[strict] = frozenset(keys)
    return known


def known_keys(defaults: Optional[Mapping[str, Any]] = None, *, strict: bool = False) -> Set[str]:
    """The top-level keys a policy with these default config keys knows.

    ``COMMON_CONFIG``'s keys, the keys rlpolicy validates, RLlib 1.11's
    trainer-level keys (``TRAINER_ONLY_KEYS``) and the keys of ``defaults``;
    unless ``strict``, also the keys rlpolicy's mixins and postprocessing
    read (``HELPER_KEYS``) and the keys of rlpolicy's algorithms' default
    configs. (Keys starting with ``_`` are always known; they are not listed.)
    """
    return set(_base_known_keys(strict)) | set(defaults or ())


def unknown_keys(
    partial: Optional[Mapping[str, Any]],
    defaults: Optional[Mapping[str, Any]] = None,
    *,
    strict: bool = False,
) -> List[Tuple[str, Optional[str]]]:
    """The unknown top-level keys of ``partial``, each with its closest known key (or None).

    Args:
        partial: The caller's config.
        defaults: The policy's default config (its keys are known).
        strict: Only ``defaults``' keys beyond the common ones count as known
            (the command line's rule: a key the chosen algorithm ignores is
            an error), not the keys of other algorithms and mixins.

    Returns:
        ``[(key, closest_known_key_or_None), ...]`` in the order of ``partial``;
        a model key given at the top level gets ``"model.<key>"``.
    """
    base, own = _base_known_keys(strict), defaults or {}
    out: List[Tuple[str, Optional[str]]] = []
    for key in _as_dict(partial, "config"):
        if isinstance(key, str) and (key.startswith("_") or key in base or key in own):
            continue
        if key in MODEL_DEFAULTS:
            out.append((key, f"model.{key}"))
            continue
        close = difflib.get_close_matches(
            str(key), sorted(known_keys(defaults, strict=strict)), n=1, cutoff=_CLOSE_ENOUGH
        )
        out.append((key, close[0] if close else None))
    return out


def unknown_key_message(key: Any, close: Optional[str], where: str = "config") -> str:
    """One line naming an unknown key and its closest known key."""
    hint = f"; did you mean {close!r}?" if close else ""
    return f"{where}: unknown config key {key!r}{hint}"


def unknown_model_keys(
    partial: Optional[Mapping[str, Any]], defaults: Optional[Mapping[str, Any]] = None
) -> List[Tuple[str, Optional[str]]]:
    """The keys of ``partial["model"]`` that neither ``MODEL_DEFAULTS`` nor the
    policy's default ``model`` dict knows, each with its closest known key."""
    model = _as_dict(partial, "config").get("model")
    if not isinstance(model, Mapping):
        return []
    own = (defaults or {}).get("model")
    own = own if isinstance(own, Mapping) else {}
    out = []
    for key in model:
        if key in MODEL_DEFAULTS or key in own:
            continue
        close = _close_model_keys(key)
        out.append((key, close[0] if close else None))
    return out


def warn_unknown_keys(
    partial: Optional[Mapping[str, Any]],
    defaults: Optional[Mapping[str, Any]] = None,
    *,
    where: str = "config",
) -> None:
    """Warns (``UnknownConfigKeyWarning``) about each unknown top-level key, once per process.

    Unknown keys are kept in the config (a custom policy may read them); the
    warning catches typos such as ``{"lrr": 1e-3}``.

    Args:
        partial: The caller's config.
        defaults: The policy's default config.
        where: Who is asking (e.g. the policy class name), for the message.
    """
    for key, close in unknown_keys(partial, defaults):
        with _WARNED_LOCK:
            if key in _WARNED_KEYS:
                continue
            _WARNED_KEYS.add(key)
        warnings.warn(
            unknown_key_message(key, close, where) + " (the key is kept, but nothing "
            "in rlpolicy or the policy's default config knows it)",
            UnknownConfigKeyWarning,
            stacklevel=2,
        )
    for key, close in unknown_model_keys(partial, defaults):
        with _WARNED_LOCK:
            if f"model.{key}" in _WARNED_KEYS:
                continue
            _WARNED_KEYS.add(f"model.{key}")
        hint = f"; did you mean {close!r}?" if close else ""
        warnings.warn(
            f"{where}: unknown key {key!r} in config['model']{hint} (the key is kept, "
            "but rlpolicy's models do not read it; custom model options belong in "
            "'custom_model_config')",
            UnknownConfigKeyWarning,
            stacklevel=2,
        )


def check_config(
    partial: Optional[Mapping[str, Any]],
    defaults: Optional[Mapping[str, Any]] = None,
    *,
    where: str = "config",
) -> dict:
    """Completes, checks and validates a policy config: the one place policies do it.

    Args:
        partial: The caller's (partial) config, or None. Not modified.
        defaults: The policy's default config (e.g. PPO's), or None.
        where: Who is asking, for the unknown-key warning.

    Returns:
        A new, complete config (see ``complete_config``).

    Raises:
        ValueError: As ``complete_config`` and ``validate_config``.
    """
    full = complete_config(partial, defaults)
    warn_unknown_keys(partial, defaults, where=where)
    validate_config(full)
    return full


def merge_configs(base: dict, new: Mapping[str, Any]) -> dict:
    """Deep-merges ``new`` into ``base`` in place (new keys allowed at every level) and returns it.

    An ``exploration_config`` whose ``type`` differs from the one in ``base``
    replaces it whole: options of one exploration class mean nothing to another
    (RLlib's ``override_all_if_type_changes``).
    """
    for key, value in new.items():
        old = base.get(key)
        if (
            key == "exploration_config"
            and isinstance(old, dict)
            and isinstance(value, dict)
            and "type" in value
            and value["type"] != old.get("type")
        ):
            base[key] = value
        elif isinstance(old, dict) and isinstance(value, dict):
            merge_configs(old, value)
        else:
            base[key] = value
    return base


__all__ = [
    "FRAMEWORKS",
    "UnknownConfigKeyWarning",
    "check_config",
    "check_config_value",
    "complete_config",
    "known_keys",
    "merge_configs",
    "read_checked",
    "unknown_key_message",
    "unknown_keys",
    "unknown_model_keys",
    "validate_config",
    "warn_unknown_keys",
]
