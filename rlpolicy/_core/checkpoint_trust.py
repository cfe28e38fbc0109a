"""What a checkpoint may name: the trusted set that its names resolve through.

A checkpoint is data. It may *name* classes and functions (``"module:qualname"``),
but loading never imports a module or calls a function because the file says
so. A name resolves only to something the loading process already trusts, in
this order:

1. objects the caller passes (``from_checkpoint(..., safe_globals=[...])``) and
   the class whose ``from_checkpoint`` is called;
2. objects registered with :func:`add_safe_globals` (modelled on
   ``torch.serialization.add_safe_globals``) or inside :func:`safe_globals`;
3. objects registered in this process by name: ``ModelCatalog`` custom models,
   action distributions and preprocessors, and gymnasium envs registered with a
   class or function entry point;
4. rlpolicy's own public classes and functions (its own modules, found from the
   package's files, never from a string in the checkpoint), except the modules
   that run commands or unpickle (the CLI, ``utils.compression``);
5. with ``trusted="imported"``: classes and Python functions of modules already
   in ``sys.modules`` (nothing is imported);
6. with ``trusted=True``: whatever the file names is imported (the behaviour of
   earlier rlpolicy versions; only for files you wrote yourself).

Anything else is refused with a CheckpointError naming the slot and how to trust it.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Union

from rlpolicy._core.checkpoint_io import CheckpointError
from rlpolicy.utils.from_config import checkpoint_type_resolver

TrustMode = Union[bool, str]
_MODES = (False, "imported", True)
_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)
_MAX_PATH_LEN = 300
# rlpolicy modules whose functions must never be reached from a file: the CLI
# (runs commands, reads sys.argv), pickle-based compression, the checkpoint
# loader itself (it resolves names).
_UNTRUSTED_OWN_PREFIXES = (
    "rlpolicy.cli",
    "rlpolicy.utils.compression",
    "rlpolicy._core.checkpoint",
)

_USER_GLOBALS: Dict[str, Any] = {}
_REGISTRY_SOURCES: List[Callable[[], Iterable[Any]]] = []
_ACTIVE: contextvars.ContextVar[Optional["Trust"]] = contextvars.ContextVar(
    "rlpolicy_checkpoint_trust", default=None
)


class UntrustedNameError(CheckpointError):
    """A checkpoint names something this process does not trust."""


@dataclass(frozen=True)
class Trust:
    """What one load trusts beyond the process-wide sets: caller objects and an opt-in."""

    extra: Dict[str, Any] = field(default_factory=dict)
    mode: TrustMode = False

    def describe(self) -> str:
        return {False: "default", "imported": "trusted='imported'", True: "trusted=True"}[self.mode]


def object_path(obj: Any) -> Optional[str]:
    """``"module:qualname"`` of a class or function, or None if it has none."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def object_paths(obj: Any) -> List[str]:
    """Every name a checkpoint may record for ``obj``: ``module:qualname`` and the
    module globals bound to it (``MyPPO = PPOTorchPolicy.with_updates(name="X")``)."""
    paths = [p for p in [object_path(obj)] if p is not None]
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if module is not None:
        paths += [
            f"{module.__name__}:{k}" for k, v in list(vars(module).items()) if v is obj and k.isidentifier()
        ]
    return paths


def _names_of(obj: Any, where: str) -> List[str]:
    if not isinstance(obj, (type, types.FunctionType)):
        raise TypeError(f"{where}: {obj!r} is not a class or a Python function")
    paths = object_paths(obj)
    if not paths:
        raise TypeError(f"{where}: {obj!r} has no 'module:qualname' name (a lambda or a local class)")
    return paths


def add_safe_globals(objs: Iterable[Any]) -> None:
    """Trusts these classes/functions for every later checkpoint load in this process.

    Raises:
        TypeError: If an entry is not a class or a named Python function.
    """
    found = {path: obj for obj in objs for path in _names_of(obj, "add_safe_globals")}
    _USER_GLOBALS.update(found)


def get_safe_globals() -> List[Any]:
    """The objects added with :func:`add_safe_globals` (and active :func:`safe_globals`)."""
    return list({id(v): v for v in _USER_GLOBALS.values()}.values())


def clear_safe_globals() -> None:
    """Forgets every object added with :func:`add_safe_globals`."""
    _USER_GLOBALS.clear()


@contextlib.contextmanager
def safe_globals(objs: Iterable[Any]) -> Iterator[None]:
    """Trusts these classes/functions inside the ``with`` block only."""
    saved = dict(_USER_GLOBALS)
    add_safe_globals(objs)
    try:
        yield
    finally:
        _USER_GLOBALS.clear()
        _USER_GLOBALS.update(saved)


def add_registry_source(source: Callable[[], Iterable[Any]]) -> None:
    """Lets a registry outside ``_core`` (ModelCatalog) add what it holds to the trusted set."""
    _REGISTRY_SOURCES.append(source)


def make_trust(
    safe_globals: Optional[Iterable[Any]] = None, trusted: TrustMode = False, *extra: Any
) -> Trust:
    """The Trust of one load: ``safe_globals`` and ``extra`` (e.g. the class) plus the opt-in.

    Raises:
        ValueError: If ``trusted`` is not False, "imported" or True.
        TypeError: If a ``safe_globals`` entry is not a named class or function.
    """
    if not any(trusted is m if isinstance(m, bool) else trusted == m for m in _MODES):
        raise ValueError(f"trusted={trusted!r}; use False (default), 'imported' or True")
    objs = {path: obj for obj in (safe_globals or ()) for path in _names_of(obj, "safe_globals")}
    for obj in extra:
        for path in object_paths(obj):
            objs.setdefault(path, obj)
    return Trust(extra=objs, mode=trusted)


@contextlib.contextmanager
def loading(trust: Trust) -> Iterator[Trust]:
    """Makes ``trust`` the one that names met while loading (config types too) resolve through."""
    token = _ACTIVE.set(trust)
    resolver_token = checkpoint_type_resolver.set(lambda path, slot: resolve(path, slot, trust))
    try:
        yield trust
    finally:
        checkpoint_type_resolver.reset(resolver_token)
        _ACTIVE.reset(token)


def current() -> Optional[Trust]:
    """The Trust of the load in progress, or None outside a checkpoint load."""
    return _ACTIVE.get()


@dataclass(frozen=True)
class _OwnModules:
    names: FrozenSet[str]


_OWN: List[_OwnModules] = []


def own_module_names() -> FrozenSet[str]:
    """rlpolicy's module names, from the package's files (nothing is imported)."""
    if not _OWN:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        names = set()
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py"))]
            rel = os.path.relpath(folder, os.path.dirname(root)).replace(os.sep, ".")
            names.add(rel)
            names.update(f"{rel}.{f[:-3]}" for f in files if f.endswith(".py") and f != "__init__.py")
        _OWN.append(_OwnModules(frozenset(names)))
    return _OWN[0].names


def _registered() -> Dict[str, Any]:
    found: Dict[str, Any] = {}
    for source in _REGISTRY_SOURCES:
        for obj in source():
            path = object_path(obj)
            if path is not None:
                found.setdefault(path, obj)
    try:
        import gymnasium as gym

        for spec in list(gym.envs.registry.values()):
            path = object_path(spec.entry_point) if not isinstance(spec.entry_point, str) else None
            if path is not None:
                found.setdefault(path, spec.entry_point)
    except Exception:  # noqa: BLE001 - a broken registry trusts nothing more
        pass
    return found


def _walk(obj: Any, parts: List[str]) -> Any:
    for part in parts:
        if not isinstance(obj, (type, types.ModuleType)):
            raise AttributeError(f"{part!r} is looked up on a {type(obj).__name__}")
        obj = getattr(obj, part)
    return obj


def _is_own(module: str) -> bool:
    if module.startswith(_UNTRUSTED_OWN_PREFIXES):
        return False
    return module in own_module_names()


def _resolve_own(module: str, qualname: str) -> Any:
    parts = qualname.split(".")
    if any(p.startswith("_") for p in parts):
        return None
    # The module name comes from rlpolicy's own files (checked above), not from the file.
    obj = _walk(importlib.import_module(module), parts)
    home = getattr(obj, "__module__", None) or ""
    if not home.startswith("rlpolicy") or home.startswith(_UNTRUSTED_OWN_PREFIXES):
        return None  # a name rlpolicy imports from elsewhere (os, pickle, ...) is not rlpolicy's
    return obj


def resolve(path: Any, slot: str, trust: Optional[Trust] = None) -> Any:
    """Resolves a ``"module:qualname"`` named by a checkpoint through the trusted set.

    Args:
        path: The name as the file holds it.
        slot: Where the name was found (``"config.callbacks"``), for messages.
        trust: The load's Trust; default: the active one, else the strict default.

    Raises:
        UntrustedNameError: If the name is malformed, unknown, not trusted, or not a
            class or Python function.
    """
    trust = trust or current() or Trust()
    if not isinstance(path, str) or len(path) > _MAX_PATH_LEN or not _PATH.fullmatch(path):
        shown = path if not isinstance(path, str) else path[:80]
        raise UntrustedNameError(f"{slot}: invalid name {shown!r}; expected 'module:qualname' in ASCII")
    try:
        obj = _lookup(path, trust)
    except (ImportError, AttributeError) as e:
        raise UntrustedNameError(f"{slot} names {path!r}, which cannot be found here: {e}") from e
    if obj is None:
        raise UntrustedNameError(
            f"{slot} names {path!r}, which this process does not trust ({trust.describe()} loading); "
            "pass it to from_checkpoint(..., safe_globals=[obj]), register it with "
            "rlpolicy.add_safe_globals([obj]) (or ModelCatalog.register_custom_model), or, only for "
            "a file you wrote, load with trusted=True (CLI: --trust-checkpoint)"
        )
    if not isinstance(obj, (type, types.FunctionType)):
        raise UntrustedNameError(
            f"{slot} names {path!r}, a {type(obj).__name__}; only classes and Python functions are restored"
        )
    return obj


def _lookup(path: str, trust: Trust) -> Any:
    for table in (trust.extra, _USER_GLOBALS):
        if path in table:
            return table[path]
    registered = _registered()
    if path in registered:
        return registered[path]
    module, qualname = path.split(":")
    if _is_own(module):
        found = _resolve_own(module, qualname)
        if found is not None:
            return found
    if trust.mode == "imported" and module in sys.modules:
        return _walk(sys.modules[module], qualname.split("."))
    if trust.mode is True:
        return _walk(importlib.import_module(module), qualname.split("."))
    return None
