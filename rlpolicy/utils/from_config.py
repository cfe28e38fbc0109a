"""Build objects from config specs (RLlib's ``utils.from_config``).

A spec is a class or callable, an already built object, a dict with an optional
``"type"`` key (the constructor hint) plus constructor kwargs, or a string: a key of
``cls.__type_registry__``, a ``"package.module.Class"`` path, a class name found in
``cls``'s module or package, a JSON/YAML text of a dict spec, or a ``.json`` /
``.yaml`` / ``.yml`` file holding one. The special kwarg ``"_args"`` gives positional
constructor arguments. YAML needs PyYAML (an optional dependency); JSON always works.
"""

from __future__ import annotations

import contextvars
import copy
import importlib
import json
import os
import re
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Tuple, cast

from rlpolicy.utils import force_list, merge_dicts

_FILE_SUFFIX = re.compile(r"\.(yaml|yml|json)$")
_NOT_FOUND = object()

# While a checkpoint loads, its loader (rlpolicy._core.checkpoint_trust.loading) sets
# this to a resolver of "module:attr" names through its trusted set, so a type that
# a file names is never imported because the file says so. None: import as usual.
checkpoint_type_resolver: contextvars.ContextVar[Optional[Callable[[str, str], Any]]] = (
    contextvars.ContextVar("rlpolicy_checkpoint_type_resolver", default=None)
)


def from_config(cls: Any, config: Any = None, **kwargs: Any) -> Any:
    """Creates an object from ``config``, using ``cls`` as the default constructor.

    Args:
        cls: The class to build (its ``__type_registry__``, ``__default_constructor__``
            and module are consulted), or, with ``config`` None, the spec itself.
        config: A dict spec (``"type"`` key + constructor kwargs), a constructor hint
            (class, callable, string; see the module docstring), an instance of
            ``cls`` (returned as is), or None (use ``cls``).
        **kwargs: Constructor kwargs; they override the keys of a dict ``config``.
            ``_args`` (a list) gives positional arguments.

    Returns:
        The new object; ``config`` itself if it already is a ``cls`` instance; None if
        the constructor is an abstract class; ``False`` for a hint of ``False``.

    Raises:
        ValueError: For a string hint that names no registry key, class or file.
        TypeError: For a hint that is neither None, a class, a callable nor a string.
    """
    if config is None and isinstance(cls, (dict, str)):
        cls, config = None, cls
    elif isinstance(cls, type) and isinstance(config, cls):
        return config
    type_, ctor_args, ctor_kwargs = _split_spec(cls, config, kwargs)

    if type_ is None:
        constructor, ctor_kwargs = _default_constructor(cls, ctor_args, ctor_kwargs)
    else:
        constructor = lookup_type(cls, type_)
        if constructor is None:
            if type_ is False:
                return type_
            if callable(type_):
                constructor = type_
            elif isinstance(type_, str):
                built = _from_string(cls, type_, ctor_args, ctor_kwargs)
                if not isinstance(built, _Constructor):
                    return built
                constructor = built.fn
    if not constructor:
        raise TypeError(
            f"from_config: invalid type {type_!r}; give a class, a callable, a string or a dict with a 'type' key"
        )
    try:
        return constructor(*ctor_args, **ctor_kwargs)
    except TypeError as e:
        # As RLlib 1.11: an abstract class yields None (e.g. an abstract base as default).
        if e.args and isinstance(e.args[0], str) and e.args[0].startswith("Can't instantiate abstract class"):
            return None
        raise


def from_file(cls: Any, filename: str, *args: Any, **kwargs: Any) -> Any:
    """Creates an object from a JSON or YAML file holding a dict spec.

    Args:
        cls: As for ``from_config``.
        filename: Path of the file (relative to the working directory, or absolute).
        *args: Positional constructor arguments (the spec's ``_args``).
        **kwargs: Constructor kwargs overriding the file's.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If the file does not hold a dict.
    """
    path = os.path.join(os.getcwd(), filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"from_file: file {filename!r} not found")
    with open(path) as fp:
        if path.endswith((".yaml", ".yml")):
            config = _yaml_module(required_for=filename).safe_load(fp)
        else:
            config = json.load(fp)
    if not isinstance(config, dict):
        raise ValueError(f"from_file: {filename!r} must hold a dict spec, got {type(config).__name__}")
    config["_args"] = list(args)
    return from_config(cls, config=config, **kwargs)


def lookup_type(cls: Any, type_: Any) -> Optional[Callable]:
    """The constructor registered for ``type_`` in ``cls.__type_registry__``, or None.

    String keys also match case-insensitively with non-alphanumerics dropped
    (``"Epsilon-Greedy"`` finds ``"epsilongreedy"``), as in RLlib 1.11.
    """
    registry = getattr(cls, "__type_registry__", None) if cls is not None else None
    if not isinstance(registry, dict):
        return None
    try:
        if type_ in registry:
            return registry[type_]
    except TypeError:  # an unhashable hint is no registry key
        return None
    if isinstance(type_, str):
        return registry.get(re.sub(r"[\W_]", "", type_.lower()))
    return None


class _Constructor:
    """A constructor found for a string hint (as opposed to an object built from it)."""

    def __init__(self, fn: Callable):
        self.fn = fn


def _split_spec(cls: Any, config: Any, kwargs: Dict[str, Any]) -> Tuple[Any, List[Any], Dict[str, Any]]:
    """(constructor hint, positional args, kwargs) of a spec; the caller's dicts are not changed."""
    try:
        config = copy.deepcopy(config)
    except Exception:  # not every object deep-copies (locks, modules, ...)
        pass
    if isinstance(config, dict):
        type_ = config.pop("type", None)
        if type_ is None and isinstance(cls, str):
            type_ = cls
        ctor_kwargs = {**config, **kwargs}
    else:
        type_ = config
        ctor_kwargs = dict(kwargs)
        if type_ is None and "type" in ctor_kwargs:
            type_ = ctor_kwargs.pop("type")
    ctor_args = force_list(ctor_kwargs.pop("_args", []))
    return type_, ctor_args, ctor_kwargs


def _default_constructor(
    cls: Any, ctor_args: List[Any], ctor_kwargs: Dict[str, Any]
) -> Tuple[Any, Dict[str, Any]]:
    """``cls.__default_constructor__`` where ``cls`` itself defines it (RLlib 1.11), else ``cls``.

    A ``functools.partial`` default constructor gets the call's kwargs merged under its
    own keywords (its keywords win, as in 1.11).
    """
    own = getattr(cls, "__default_constructor__", None) if cls is not None else None
    if own is None or ctor_args:
        return cls, ctor_kwargs
    base = cls.__bases__[0] if isinstance(cls, type) and cls.__bases__ else None
    inherited = getattr(base, "__default_constructor__", None)
    if inherited is not None and inherited is own:
        return cls, ctor_kwargs
    if isinstance(own, partial):
        return partial(own.func, **merge_dicts(ctor_kwargs, own.keywords)), {}
    return own, ctor_kwargs


def _from_string(cls: Any, type_: str, ctor_args: List[Any], ctor_kwargs: Dict[str, Any]) -> Any:
    """Resolves a string hint: a file, a JSON/YAML dict spec, or a constructor (``_Constructor``)."""
    if _FILE_SUFFIX.search(type_):
        return from_file(cls, type_, *ctor_args, **ctor_kwargs)
    spec = _parse_text_spec(type_)
    if isinstance(spec, dict):
        return from_config(cls, spec, **ctor_kwargs)
    constructor = _import_path(type_) if "." in type_ else _NOT_FOUND
    if constructor is _NOT_FOUND:
        if isinstance(cls, str) or cls is None:
            raise ValueError(
                f"from_config: {type_!r} is not a valid [module].[class] path (e.g. `my.cool.module.MyCoolClass`)"
            )
        constructor = _find_near(cls, type_)
    if constructor is _NOT_FOUND:
        raise ValueError(
            f"from_config: string specifier {type_!r} must be a valid filename, a [module].[class], "
            f"a class within {cls.__module__!r}, or a key into {cls.__name__}.__type_registry__"
        )
    return _Constructor(cast(Callable[..., Any], constructor))


def _parse_text_spec(text: str) -> Any:
    """The dict a JSON (or, with PyYAML, YAML) text holds, else None."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    yaml = _yaml_module()
    if yaml is None:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _import_path(path: str) -> Any:
    module_name, attr = path.rsplit(".", 1)
    resolver = checkpoint_type_resolver.get()
    if resolver is not None:  # a checkpoint load: no import because a file says so
        return resolver(f"{module_name}:{attr}", f"type {path!r}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError):
        return _NOT_FOUND


def _find_near(cls: Any, name: str) -> Any:
    """``name`` looked up in ``cls``'s module, then in that module's package."""
    try:
        module = importlib.import_module(cls.__module__)
    except ImportError:
        return _NOT_FOUND
    value = getattr(module, name, _NOT_FOUND)
    if value is _NOT_FOUND and module.__package__:
        try:
            value = getattr(importlib.import_module(module.__package__), name, _NOT_FOUND)
        except ImportError:
            value = _NOT_FOUND
    return value


def _yaml_module(required_for: Optional[str] = None) -> Any:
    try:
        import yaml
    except ImportError:
        if required_for is not None:
            raise ImportError(
                f"from_config: reading {required_for!r} needs PyYAML (`pip install pyyaml`)"
            ) from None
        return None
    return yaml


__all__ = ["from_config", "from_file", "lookup_type"]
