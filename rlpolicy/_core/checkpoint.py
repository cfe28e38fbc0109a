"""Pickle-free policy checkpoints.

A checkpoint directory holds two files:

* ``rlpolicy_checkpoint.json``: format name and version, the policy class's
  import path, the observation/action spaces (JSON codec below), the JSON-able
  part of the config, and the nested structure of the policy state in which
  every array is replaced by a reference ``{"__ndarray__": "a3"}``;
* ``<prefix>-<sha256[:12]>.npz``: the arrays, loaded with ``allow_pickle=False``.

Writing is atomic: the array file gets a new, content-derived name (it never
overwrites the file a previous checkpoint points to), and the JSON file is
written to a temporary file and ``os.replace``-d into place as the single
commit point. A save that fails at any step leaves the previous checkpoint
readable and unchanged. The JSON records the arrays' SHA-256, so a truncated
or swapped array file is reported instead of silently loaded.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import logging
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np

from rlpolicy._core import checkpoint_checks, checkpoint_io, checkpoint_trust
from rlpolicy._core.checkpoint_io import CheckpointError, CheckpointNotFoundError, Limits
from rlpolicy.utils.spaces.repeated import Repeated

logger = logging.getLogger(__name__)

FORMAT_NAME = "rlpolicy.policy_checkpoint"
FORMAT_VERSION = 1
METADATA_FILE = "rlpolicy_checkpoint.json"
_ARRAY_REF = "__ndarray__"
_SUPPORTED_SPACES = "Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple, Repeated"


_ARRAYS_NAME = re.compile(r"[A-Za-z0-9_.\-]+-[0-9a-f]{12}\.npz")
_READ_RETRIES = 5
__all__ = ["CheckpointError", "CheckpointNotFoundError", "Limits", "read_checkpoint", "write_checkpoint"]


# ---------------------------------------------------------------- spaces <-> JSON
def _bound_to_json(bound: np.ndarray) -> Any:
    # Uniform bounds (the common case) are stored as one number.
    flat = bound.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return flat[0].item()
    return bound.tolist()


def space_to_json(space: gym.Space) -> Dict[str, Any]:
    """Encodes a gymnasium space as a JSON-able dict.

    Raises:
        TypeError: For space types other than Box, Discrete, MultiDiscrete,
            MultiBinary, Dict, Tuple and Repeated.
    """
    s = gym.spaces
    if isinstance(space, s.Box):
        out = {
            "type": "Box",
            "low": _bound_to_json(space.low),
            "high": _bound_to_json(space.high),
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
        }
        if getattr(space, "original_space", None) is not None:  # a preprocessed Dict/Tuple
            out["original_space"] = space_to_json(getattr(space, "original_space"))  # noqa: B009
        return out
    if isinstance(space, s.Discrete):
        return {
            "type": "Discrete",
            "n": int(space.n),
            "start": int(space.start),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, s.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, s.MultiBinary):
        n = space.n if isinstance(space.n, (int, np.integer)) else list(space.n)
        return {"type": "MultiBinary", "n": n if isinstance(n, list) else int(n)}
    if isinstance(space, s.Dict):
        return {"type": "Dict", "spaces": [[k, space_to_json(v)] for k, v in space.spaces.items()]}
    if isinstance(space, s.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(v) for v in space.spaces]}
    if isinstance(space, Repeated):
        return {"type": "Repeated", "child_space": space_to_json(space.child_space), "max_len": space.max_len}
    raise TypeError(
        f"cannot save space {space!r} ({type(space).__name__}) in a checkpoint; "
        f"supported: {_SUPPORTED_SPACES}"
    )


def space_from_json(data: Any) -> gym.Space:
    """Decodes a space written by :func:`space_to_json`.

    Raises:
        CheckpointError: If ``data`` is not a valid encoded space.
    """
    s = gym.spaces
    try:
        kind = data["type"]
        if kind == "Box":
            shape, dtype = tuple(data["shape"]), np.dtype(data["dtype"])
            low = np.broadcast_to(np.asarray(data["low"], dtype=dtype), shape).copy()
            high = np.broadcast_to(np.asarray(data["high"], dtype=dtype), shape).copy()
            box = s.Box(low=low, high=high, shape=shape, dtype=dtype)
            if "original_space" in data:
                setattr(box, "original_space", space_from_json(data["original_space"]))  # noqa: B010
            return box
        if kind == "Discrete":
            dtype = np.dtype(data["dtype"])
            # (gymnasium < 1.0's Discrete is int64 only and takes no dtype argument)
            kwargs = {} if dtype == np.int64 else {"dtype": dtype}
            return s.Discrete(int(data["n"]), start=int(data["start"]), **kwargs)
        if kind == "MultiDiscrete":
            return s.MultiDiscrete(data["nvec"], start=data["start"], dtype=np.dtype(data["dtype"]))
        if kind == "MultiBinary":
            return s.MultiBinary(data["n"])
        if kind == "Dict":
            # A list of pairs keeps the saved key order (a dict would be sorted).
            return s.Dict([(k, space_from_json(v)) for k, v in data["spaces"]])
        if kind == "Tuple":
            return s.Tuple([space_from_json(v) for v in data["spaces"]])
        if kind == "Repeated":
            return Repeated(space_from_json(data["child_space"]), int(data["max_len"]))
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"invalid encoded space {data!r}: {e}") from e
    raise CheckpointError(f"unknown space type {kind!r} in checkpoint; supported: {_SUPPORTED_SPACES}")


# ---------------------------------------------------------------- values <-> JSON + arrays
def import_path(obj: Any) -> Optional[str]:
    """Returns ``"module:qualname"`` if importing that path gives back ``obj``."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    try:
        found = resolve_import_path(f"{module}:{qualname}")
    except (ImportError, AttributeError, CheckpointError):
        return None
    return f"{module}:{qualname}" if found is obj else None


def resolve_import_path(path: str) -> Any:
    """Imports ``"module:qualname"`` and returns the named object."""
    if not isinstance(path, str) or path.count(":") != 1:
        raise CheckpointError(f"invalid import path {path!r} in checkpoint; expected 'module:qualname'")
    module, qualname = path.split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class _Encoder:
    """Turns a nest of dicts/lists/tuples/arrays/scalars into JSON + an array table."""

    def __init__(self, allow_imports: bool = False, quiet: bool = False):
        self.arrays: Dict[str, np.ndarray] = {}
        self.allow_imports = allow_imports
        self.quiet = quiet
        self.dropped: List[str] = []

    def _add_array(self, arr: np.ndarray, where: str, **extra: Any) -> Dict[str, Any]:
        if arr.dtype.hasobject:
            raise TypeError(
                f"cannot save {where}: arrays of dtype object need pickle; store numeric arrays instead"
            )
        key = f"a{len(self.arrays)}"
        self.arrays[key] = arr
        return {_ARRAY_REF: key, **extra}

    def encode(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, np.ndarray):
            return self._add_array(value, where)
        if isinstance(value, np.generic):
            return self._add_array(np.asarray(value), where, scalar=True)
        if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
            return self._add_array(value.detach().cpu().numpy(), where)
        if isinstance(value, dict):
            return self._encode_dict(value, where)
        if isinstance(value, (list, tuple)):
            items = [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
            if any(x is _DROP for x in items):
                return _DROP  # a sequence is kept whole or not at all
            return items if isinstance(value, list) else {"__tuple__": items}
        return self._encode_other(value, where)

    def _encode_dict(self, value: dict, where: str) -> Any:
        plain = all(isinstance(k, str) and not k.startswith("__") for k in value)
        if plain:
            out = {}
            for k, v in value.items():
                enc = self.encode(v, f"{where}.{k}")
                if enc is not _DROP:
                    out[k] = enc
            return out
        items = [
            [self.encode(k, f"{where}<key>"), self.encode(v, f"{where}[{k!r}]")] for k, v in value.items()
        ]
        return {"__dict__": [kv for kv in items if all(x is not _DROP for x in kv)]}

    def _encode_other(self, value: Any, where: str) -> Any:
        if self.allow_imports:
            path = import_path(value)
            if path is not None:
                return {"__import__": path}
            if not self.quiet:
                logger.warning(
                    "checkpoint: config value %s=%r cannot be stored without pickle; "
                    "it is left out (the loader falls back to the default)",
                    where,
                    value,
                )
            self.dropped.append(where)
            return _DROP
        raise TypeError(
            f"cannot save {where}={value!r} ({type(value).__name__}) without pickle; "
            "supported: dict, list, tuple, str, int, float, bool, None, numpy arrays, torch tensors"
        )


_DROP = object()


def _decode(value: Any, arrays: Any, where: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if _ARRAY_REF in value:
        key = value[_ARRAY_REF]
        if key not in arrays:
            raise CheckpointError(
                f"checkpoint is corrupt: {where} refers to array {key!r}, "
                "which is missing from the array file"
            )
        arr = arrays[key]
        return arr[()] if value.get("scalar") else arr
    if "__tuple__" in value:
        return tuple(_decode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value["__tuple__"]))
    if "__dict__" in value:
        return {
            _decode(k, arrays, where): _decode(v, arrays, f"{where}[{k!r}]") for k, v in value["__dict__"]
        }
    if "__import__" in value:
        return _resolve_config_object(value["__import__"], where)
    return {k: _decode(v, arrays, f"{where}.{k}") for k, v in value.items()}


def _resolve_config_object(path: str, where: str) -> Any:
    # Only names the loading process trusts resolve (checkpoint_trust); nothing is
    # imported or called because the file names it.
    return checkpoint_trust.resolve(path, f"checkpoint value {where}")


# ---------------------------------------------------------------- write / read
@dataclass
class CheckpointContents:
    """What a checkpoint directory holds, decoded."""

    policy_class: str
    observation_space: gym.Space
    action_space: gym.Space
    config: dict
    state: dict
    dropped_config_keys: List[str]
    class_recipe: Optional[dict] = None
    given_config: Optional[dict] = None


def _fsync_write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
    # Makes the renames durable; not every platform can open a directory.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _npz_bytes(arrays: Dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _previous_arrays_file(export_dir: str) -> Optional[str]:
    try:
        text = checkpoint_io.read_regular_file(export_dir, METADATA_FILE, Limits().max_json_bytes, "metadata")
        name = json.loads(text).get("arrays_file")
    except (CheckpointError, ValueError, AttributeError, RecursionError):
        return None
    return name if isinstance(name, str) else None


def write_checkpoint(
    export_dir: str,
    *,
    policy_class: str,
    observation_space: gym.Space,
    action_space: gym.Space,
    config: dict,
    state: dict,
    filename_prefix: str = "model",
    class_recipe: Optional[dict] = None,
    given_config: Optional[dict] = None,
) -> str:
    """Writes a policy checkpoint atomically into ``export_dir``.

    Args:
        export_dir: Directory to write to (created if missing).
        policy_class: Import path ``"module:qualname"`` of the policy class.
        observation_space: The policy's observation space.
        action_space: The policy's action space.
        config: The policy config; values that cannot be stored without
            pickle (lambdas, local classes) are left out with a warning.
        state: The nested policy state (``Policy.get_state()``).
        filename_prefix: Prefix of the array file's name.
        class_recipe: How to rebuild the policy class (:func:`class_recipe`);
            None: only ``policy_class`` is recorded.
        given_config: The config the policy's constructor was called with,
            recorded when it differs from ``config``; the loader builds the
            policy from it (a constructor may read the partial dict it got).

    Returns:
        The path of the metadata JSON file.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", filename_prefix or ""):
        raise ValueError(
            f"filename_prefix={filename_prefix!r} must be a plain file name (letters, digits, '_', '-', '.')"
        )
    encoder = _Encoder()
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "policy_class": policy_class,
        "observation_space": space_to_json(observation_space),
        "action_space": space_to_json(action_space),
        "state": encoder.encode(state, "state"),
    }
    cfg_encoder = _Encoder(allow_imports=True)
    cfg_encoder.arrays = encoder.arrays
    meta["config"] = cfg_encoder.encode(dict(config), "config")
    meta["dropped_config_keys"] = cfg_encoder.dropped
    if given_config is not None:
        # Its unstorable values are the config's own (already warned about).
        given_encoder = _Encoder(allow_imports=True, quiet=True)
        given_encoder.arrays = encoder.arrays
        meta["given_config"] = given_encoder.encode(dict(given_config), "given_config")
    if class_recipe is not None:
        meta["policy_class_recipe"] = class_recipe
    payload = _npz_bytes(encoder.arrays)
    digest = hashlib.sha256(payload).hexdigest()
    meta["arrays_file"] = f"{filename_prefix}-{digest[:12]}.npz"
    meta["arrays_sha256"] = digest
    text = json.dumps(meta, indent=1).encode("utf-8")
    try:
        os.makedirs(export_dir, exist_ok=True)
        with checkpoint_io.save_lock(export_dir):
            return _commit(export_dir, meta["arrays_file"], payload, text)
    except OSError as e:
        if export_dir in str(e):
            raise
        raise type(e)(
            e.errno, f"saving the policy checkpoint into {export_dir!r} failed: {e.strerror or e}"
        ) from e


def _commit(export_dir: str, arrays_name: str, payload: bytes, meta_text: bytes) -> str:
    # Called under the folder's save lock: no other save runs between reading the
    # previous array file's name and removing it.
    arrays_path = os.path.join(export_dir, arrays_name)
    meta_path = os.path.join(export_dir, METADATA_FILE)
    temps: List[str] = []
    created_arrays = False
    try:
        for final, data in ((arrays_path, payload), (meta_path, meta_text)):
            fd, tmp = tempfile.mkstemp(dir=export_dir, prefix=".tmp-", suffix=".part")
            os.close(fd)
            temps.append(tmp)
            _fsync_write(tmp, data)
            created_arrays = created_arrays or (final == arrays_path and not os.path.exists(final))
            os.replace(tmp, final)  # the metadata replace is the commit point
        _fsync_dir(export_dir)
    except BaseException:
        for tmp in temps:
            if os.path.exists(tmp):
                os.remove(tmp)
        if (
            created_arrays
            and _previous_arrays_file(export_dir) != arrays_name
            and os.path.exists(arrays_path)
        ):
            os.remove(arrays_path)
        raise
    _remove_stale(export_dir, keep=arrays_name)
    return meta_path


def _remove_stale(export_dir: str, keep: str) -> None:
    # Array files (content-named, as this module writes them) that the JSON just
    # committed does not name, and temporary files of interrupted saves.
    for name in os.listdir(export_dir):
        stale = (name != keep and _ARRAYS_NAME.fullmatch(name)) or (
            name.startswith(".tmp-") and name.endswith(".part")
        )
        if stale:
            try:
                os.remove(os.path.join(export_dir, name))
            except OSError:
                pass


def _read_files(checkpoint_dir: str, limits: Limits) -> tuple:
    if not os.path.isdir(checkpoint_dir):
        raise CheckpointNotFoundError(f"policy checkpoint directory {checkpoint_dir!r} does not exist")
    meta_path = os.path.join(checkpoint_dir, METADATA_FILE)
    if not os.path.lexists(meta_path):
        raise CheckpointError(
            f"{checkpoint_dir!r} is not an rlpolicy policy checkpoint: "
            f"{METADATA_FILE} is missing (found {sorted(os.listdir(checkpoint_dir))[:20]})"
        )
    # A save in another process may replace the JSON and remove the array file it
    # named between the two reads: read again while the JSON keeps changing.
    text = checkpoint_io.read_regular_file(checkpoint_dir, METADATA_FILE, limits.max_json_bytes, "metadata")
    for _ in range(_READ_RETRIES):
        meta = _parse_meta(text, meta_path, limits)
        try:
            return meta, _load_arrays(checkpoint_dir, meta, limits)
        except CheckpointError:
            again = checkpoint_io.read_regular_file(
                checkpoint_dir, METADATA_FILE, limits.max_json_bytes, "metadata"
            )
            if again == text:
                raise
            text = again
    raise CheckpointError(f"policy checkpoint {meta_path!r} kept changing while it was read; try again")


def _parse_meta(text: bytes, meta_path: str, limits: Limits) -> dict:
    meta = checkpoint_io.parse_json(text, meta_path, limits.max_depth)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(
            f"{meta_path!r} is not an rlpolicy policy checkpoint (format {found!r}, expected {FORMAT_NAME!r})"
        )
    checkpoint_checks.check_format_version(meta.get("format_version"), meta_path, FORMAT_VERSION)
    return meta


def _load_arrays(checkpoint_dir: str, meta: dict, limits: Limits) -> Dict[str, np.ndarray]:
    name = meta.get("arrays_file")
    if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", "..", METADATA_FILE):
        raise CheckpointError(f"policy checkpoint in {checkpoint_dir!r} is corrupt: bad arrays_file {name!r}")
    path = os.path.join(checkpoint_dir, name)
    if not os.path.lexists(path):
        raise CheckpointError(
            f"policy checkpoint in {checkpoint_dir!r} is incomplete: array file {name!r} is missing and cannot be read"
        )
    payload = checkpoint_io.read_regular_file(
        checkpoint_dir, name, limits.max_arrays_file_bytes, "array file"
    )
    if hashlib.sha256(payload).hexdigest() != meta.get("arrays_sha256"):
        raise CheckpointError(
            f"policy checkpoint array file {path!r} is corrupt: "
            "its SHA-256 does not match the one recorded in the metadata"
        )
    referenced = checkpoint_io.array_refs(
        [meta.get(k) for k in ("config", "given_config", "state")], _ARRAY_REF
    )
    if not all(isinstance(r, str) for r in referenced):
        raise CheckpointError(
            f"policy checkpoint {checkpoint_dir!r} is corrupt: array references must be strings"
        )
    return checkpoint_io.load_npz(payload, path, set(referenced), limits)


def read_checkpoint(
    checkpoint_dir: str,
    *,
    trust: Optional[checkpoint_trust.Trust] = None,
    limits: Optional[Limits] = None,
    allow_non_finite: bool = False,
) -> CheckpointContents:
    """Reads and validates a checkpoint written by :func:`write_checkpoint`.

    Names in it resolve through ``trust`` (default: the active load's, else
    rlpolicy's own and registered names only; see ``checkpoint_trust``).

    Raises:
        CheckpointError: If the directory does not exist (also a
            FileNotFoundError), is not an rlpolicy checkpoint, is from a newer
            format version, is corrupt, names something untrusted, holds
            non-finite or out-of-range values, or exceeds ``limits``.
    """
    checkpoint_dir = os.fspath(checkpoint_dir)
    limits = limits or Limits()
    trust = trust or checkpoint_trust.current() or checkpoint_trust.Trust()
    with checkpoint_trust.loading(trust):
        try:
            return _read_checked(checkpoint_dir, limits, allow_non_finite)
        except CheckpointError:
            raise
        except Exception as e:  # RecursionError, MemoryError, TypeError, ... from crafted data
            raise CheckpointError(
                f"policy checkpoint {checkpoint_dir!r} cannot be read: {type(e).__name__}: {e}"
            ) from e


def _read_checked(checkpoint_dir: str, limits: Limits, allow_non_finite: bool) -> CheckpointContents:
    meta, arrays = _read_files(checkpoint_dir, limits)
    meta_path = os.path.join(checkpoint_dir, METADATA_FILE)
    try:
        contents = CheckpointContents(
            policy_class=meta["policy_class"],
            observation_space=space_from_json(meta["observation_space"]),
            action_space=space_from_json(meta["action_space"]),
            config=_decode(meta["config"], arrays, "config"),
            state=_decode(meta["state"], arrays, "state"),
            dropped_config_keys=list(meta.get("dropped_config_keys", [])),
            class_recipe=meta.get("policy_class_recipe"),
            given_config=(
                _decode(meta["given_config"], arrays, "given_config") if "given_config" in meta else None
            ),
        )
    except KeyError as e:
        raise CheckpointError(f"policy checkpoint in {checkpoint_dir!r} is corrupt: missing entry {e}") from e
    try:
        for where, cfg in (("config", contents.config), ("given_config", contents.given_config)):
            if cfg is not None:
                checkpoint_checks.check_config_values(cfg, where)
                checkpoint_checks.check_model_size(
                    cfg, contents.observation_space, contents.action_space, limits.max_model_weights
                )
        checkpoint_checks.check_state_values(contents.state, allow_non_finite)
    except CheckpointError as e:
        raise CheckpointError(f"policy checkpoint {meta_path!r}: {e}") from None
    return contents


def resolve_policy_class(path: str, base: type) -> type:
    """Resolves the policy class named in a checkpoint (through the trusted set) and checks it."""
    try:
        cls = checkpoint_trust.resolve(path, "checkpoint policy_class")
    except CheckpointError as e:
        raise CheckpointError(
            f"cannot resolve the checkpoint's policy class: {e}; or call "
            "YourPolicyClass.from_checkpoint(dir) on the class instead"
        ) from None
    if not isinstance(cls, type) or not issubclass(cls, base):
        raise CheckpointError(f"checkpoint policy class {path!r} is not a {base.__name__} subclass")
    return cls


# ---------------------------------------------------------------- policy classes
# A class made at run time (``Base.as_eager()``, ``Base.with_updates(...)``,
# ``.with_tracing()``) has no import path of its own. The method that makes
# it records where it came from with ``record_derivation``; the checkpoint
# then stores the recipe "import Base, call .as_eager()" and the loader
# replays it. Only these methods are replayed, and their keyword arguments
# are JSON values, classes or plain Python functions given by import path.
DERIVATION_ATTR = "_rlpolicy_derivation"
_DERIVE_METHODS = ("as_eager", "with_tracing", "with_updates")


def record_derivation(new_cls: type, base: type, method: str, kwargs: Optional[dict] = None) -> type:
    """Records on ``new_cls`` that it is ``base.<method>(**kwargs)``; returns ``new_cls``."""
    if method not in _DERIVE_METHODS:
        raise ValueError(f"record_derivation: method {method!r} is not one of {_DERIVE_METHODS}")
    setattr(new_cls, DERIVATION_ATTR, (base, method, dict(kwargs or {})))
    return new_cls


FACTORY_ATTR = "_rlpolicy_factory_call"
_FACTORY_MARK = "_rlpolicy_policy_factory"


def mark_policy_factory(fn: Any) -> Any:
    """Marks ``fn`` (e.g. ``build_policy_class``) as a policy-class factory that a
    checkpoint recipe may call to rebuild a class; returns ``fn``."""
    setattr(fn, _FACTORY_MARK, True)
    return fn


def record_factory_call(new_cls: type, factory: Any, kwargs: dict) -> type:
    """Records on ``new_cls`` that it is ``factory(**kwargs)``; returns ``new_cls``."""
    setattr(new_cls, FACTORY_ATTR, (factory, dict(kwargs)))
    return new_cls


def _module_global_path(cls: type) -> Optional[str]:
    # ``MyPPO = PPOTorchPolicy.with_updates(name="X")`` at module level: the
    # class is importable as module:MyPPO although its __qualname__ is "X".
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    if module is None:
        return None
    for name, value in list(vars(module).items()):
        if value is cls and name.isidentifier():
            path = f"{module.__name__}:{name}"
            try:
                if resolve_import_path(path) is cls:
                    return path
            except (ImportError, AttributeError, CheckpointError):
                return None
    return None


def _derivation(cls: type) -> Optional[tuple]:
    found = cls.__dict__.get(DERIVATION_ATTR)
    if found is not None:
        return found
    # An eager class' .with_tracing() subclass: "<Base>_traced" over one base.
    if (
        cls.__dict__.get("_force_tracing") is True
        and len(cls.__bases__) == 1
        and cls.__name__ == cls.__bases__[0].__name__ + "_traced"
    ):
        return cls.__bases__[0], "with_tracing", {}
    return None


def class_recipe(cls: type) -> Optional[dict]:
    """How a checkpoint rebuilds ``cls``: ``{"import": "module:name"}`` for a
    class that can be imported, ``{"of": <recipe>, "call": method, "kwargs":
    {...}}`` for one made by ``as_eager``/``with_tracing``/``with_updates`` of
    such a class, ``{"factory": "module:build_policy_class", "kwargs": {...}}``
    for a factory-built class without a name to import (built inside a
    function); None if none applies (a hand-written class defined in a
    function, or arguments that cannot be stored: a lambda, a local class).
    """
    path = import_path(cls) or _module_global_path(cls)
    if path is not None:
        return {"import": path}
    derivation = _derivation(cls)
    if derivation is not None:
        base, method, kwargs = derivation
        base_recipe = class_recipe(base)
        encoded = _encode_kwargs(kwargs, f"{cls.__name__}.{method}")
        if base_recipe is None or encoded is None:
            return None
        return {"of": base_recipe, "call": method, "kwargs": encoded}
    factory_call = cls.__dict__.get(FACTORY_ATTR)
    if factory_call is not None:  # e.g. build_policy_class(...) called inside a function
        factory, kwargs = factory_call
        factory_path = import_path(factory)
        encoded = _encode_kwargs(kwargs, f"{cls.__name__} factory")
        if factory_path is None or encoded is None:
            return None
        return {"factory": factory_path, "kwargs": encoded}
    return None


def _encode_kwargs(kwargs: dict, where: str) -> Optional[dict]:
    # JSON values, classes and functions by import path; None if any is neither.
    encoder = _Encoder(allow_imports=True, quiet=True)
    encoded = {}
    for key, value in kwargs.items():
        item = encoder.encode(value, f"{where}({key})")
        if item is _DROP or encoder.arrays:
            return None
        encoded[key] = item
    return encoded


def _call_factory(recipe: dict, base: type) -> type:
    path, kwargs = recipe["factory"], recipe.get("kwargs", {})
    factory = checkpoint_trust.resolve(path, "checkpoint policy factory")
    if not getattr(factory, _FACTORY_MARK, False) or not isinstance(kwargs, dict):
        raise CheckpointError(
            f"checkpoint names {path!r} as its policy factory, which is not one "
            "(build_policy_class, build_tf_policy)"
        )
    cls = factory(**_decode(kwargs, {}, f"policy factory {path}"))
    if not isinstance(cls, type) or not issubclass(cls, base):
        raise CheckpointError(f"{path}() did not return a {base.__name__} subclass")
    return cls


def rebuild_class(recipe: Any, base: type) -> type:
    """Rebuilds the class a :func:`class_recipe` describes; checks it is a ``base`` subclass.

    Raises:
        CheckpointError: If the recipe is malformed, names something that
            cannot be imported, or asks for a method other than ``as_eager``,
            ``with_tracing`` and ``with_updates``.
    """
    if not isinstance(recipe, dict):
        raise CheckpointError(f"invalid policy class recipe {recipe!r} in checkpoint")
    if "import" in recipe:
        return resolve_policy_class(recipe["import"], base)
    if "factory" in recipe:
        return _call_factory(recipe, base)
    method, kwargs = recipe.get("call"), recipe.get("kwargs", {})
    if method not in _DERIVE_METHODS or not isinstance(kwargs, dict) or "of" not in recipe:
        raise CheckpointError(
            f"invalid policy class recipe {recipe!r} in checkpoint; a derived "
            f"class is 'of' a class and 'call's one of {_DERIVE_METHODS}"
        )
    parent = rebuild_class(recipe["of"], base)
    kwargs = _decode(kwargs, {}, f"policy class {parent.__name__}.{method}")
    maker = getattr(parent, method, None)
    if maker is None:
        raise CheckpointError(
            f"checkpoint policy class {parent.__name__} has no {method}(); "
            "it cannot rebuild the recorded class"
        )
    cls = maker(**kwargs)
    if not isinstance(cls, type) or not issubclass(cls, base):
        raise CheckpointError(f"{parent.__name__}.{method}() did not return a {base.__name__} subclass")
    return cls
