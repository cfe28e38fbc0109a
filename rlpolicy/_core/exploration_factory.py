"""Turns a config's ``"type"`` into a class, and schedule configs into Schedules.

RLlib 1.11 hands such configs to ``from_config``: the dict's ``"type"`` names the
class (a class object, a class name exported by the given module, or a
"module.path.ClassName" string) and every other key becomes a constructor
keyword. ``resolve_type`` / ``instantiate`` do the same with clearer errors;
``rlpolicy/utils/exploration/_factory.py`` builds Explorations with them.

No deep-learning framework is imported at module level.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List, Optional

from rlpolicy._core import checkpoint_trust

_SCHEDULES_MODULE = "rlpolicy.utils.schedules"


def create_schedule(schedule_config: Any, framework: str) -> Any:
    """Returns a Schedule for ``schedule_config``; None stays None.

    Args:
        schedule_config: A Schedule object (returned as is), None, or a dict
            with ``"type"`` (class, class name in ``rlpolicy.utils.schedules``,
            or "module.path.ClassName") plus constructor keywords.
        framework: The framework the schedule computes in.

    Raises:
        ValueError: If the config is neither a Schedule nor a dict with a known type.
    """
    if schedule_config is None:
        return None
    from rlpolicy.utils.schedules import Schedule

    if isinstance(schedule_config, Schedule):
        return schedule_config
    if not isinstance(schedule_config, dict) or "type" not in schedule_config:
        raise ValueError(
            f"schedule config must be a Schedule object or a dict with a 'type' key, got {schedule_config!r}"
        )
    cls = resolve_type(schedule_config["type"], _SCHEDULES_MODULE, Schedule, "schedule 'type'")
    kwargs = {k: v for k, v in schedule_config.items() if k != "type"}
    kwargs.setdefault("framework", framework)
    return instantiate(cls, kwargs)


def resolve_type(type_spec: Any, module_name: str, base: type, what: str) -> type:
    """Turns a class, a class name in ``module_name``, or a dotted path into a class.

    Raises:
        ValueError: Naming ``what``, the bad value and the known class names.
    """
    # (the known names are gathered only for an error message: a module scan)
    cls: Optional[type]
    if isinstance(type_spec, type):
        cls = type_spec
    elif isinstance(type_spec, str):
        cls = _lookup(type_spec, module_name)
        if cls is None:
            raise ValueError(
                f"{what}={type_spec!r} is unknown; use a class, one of "
                f"{known_type_names(module_name, base)}, or a 'module.path.ClassName' string"
            )
    else:
        raise ValueError(
            f"{what} must be a class or a string, got {type_spec!r}; known types: "
            f"{known_type_names(module_name, base)}"
        )
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{what}={type_spec!r} is not a subclass of {base.__name__}")
    return cls


def known_type_names(module_name: str, base: type) -> List[str]:
    """Names of the ``base`` subclasses exported by ``module_name``."""
    module = importlib.import_module(module_name)
    return sorted(
        name for name, obj in vars(module).items() if isinstance(obj, type) and issubclass(obj, base)
    )


def _lookup(name: str, module_name: str) -> Optional[type]:
    module = importlib.import_module(module_name)
    obj = getattr(module, name, None)
    if isinstance(obj, type):
        return obj
    if "." not in name:
        return None
    mod_path, _, attr = name.rpartition(".")
    if checkpoint_trust.current() is not None:  # a checkpoint load: no import because a file says so
        obj = checkpoint_trust.resolve(f"{mod_path}:{attr}", f"type {name!r}")
        return obj if isinstance(obj, type) else None
    try:
        obj = getattr(importlib.import_module(mod_path), attr, None)
    except ImportError:
        return None
    return obj if isinstance(obj, type) else None


def instantiate(cls: type, kwargs: Dict[str, Any]) -> Any:
    try:
        return cls(**kwargs)
    except TypeError as e:
        if "unexpected keyword argument" not in str(e):
            raise
        raise TypeError(f"{cls.__name__} config: {e}") from e
