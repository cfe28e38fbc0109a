"""TF1 (graph) and TF2 (eager) in one process: all that rlpolicy does about it.

Torch, graph-mode (``"tf"``) and eager (``"tf2"``) policies live in one
process, also one that TF1 code switched to graph mode with
``tf1.disable_v2_behavior()``. Four things make that work; see
``docs/tensorflow.md`` ("TF1 and TF2 in one process"):

1. Keras 2. ``import tensorflow`` runs with ``TF_USE_LEGACY_KERAS=1`` unless the
   process set it first (:func:`import_tensorflow`): Keras 3 cannot build layers
   inside a ``tf1.Graph``. So ``tf.keras`` is ``tf_keras`` for the whole
   process; set ``TF_USE_LEGACY_KERAS=0`` before the first import to keep
   Keras 3 as ``tf.keras`` (rlpolicy itself always uses ``tf_keras``).
2. Start-up banners once: TF's two native libraries print each start-up line
   twice; the import runs with file descriptor 2 captured and written back
   with repeated lines left out (:func:`dedupe_native_stderr`).
3. Eager policies called from graph mode: every public method of an eager
   policy class runs in TF's thread-local eager mode when its caller is in
   graph mode (:func:`make_methods_eager`).
4. Keras layer flavours: tf_keras picks a layer class's base (``Layer`` or its
   TF1-graph variant) by rewriting the class's ``__bases__`` each time an
   instance is made, so building an eager model breaks the graph models of
   the same layer classes (and the other way round). When a ``TFModelV2`` is
   built (:func:`keras_build`), each of its Keras layers gets its own class: a
   subclass of the layer's class whose MRO is fixed to the flavour the model
   was built in (:func:`pin_keras_flavour`). Calls then never touch a class,
   and graph and eager models may be built and called from several threads.

The framework internals this needs are in ``rlpolicy._fast.keras_modes``,
behind its guard; when the guard fails (logged once), 3 and 4 are left out.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import re
import sys
import tempfile
import threading
import types
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

logger = logging.getLogger(__name__)

LEGACY_KERAS_VAR = "TF_USE_LEGACY_KERAS"


# ---------------------------------------------------------------- 1, 2: the import


def import_tensorflow() -> Any:
    """``import tensorflow`` with Keras 2 as ``tf.keras`` (unless the process set
    ``TF_USE_LEGACY_KERAS`` first), quiet C++ logging, and banners written once.

    Raises:
        ImportError: If TensorFlow is not installed.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # Keras 3 cannot build layers inside TF1 graphs: tf.keras becomes the legacy tf_keras.
    os.environ.setdefault(LEGACY_KERAS_VAR, "1")
    with dedupe_native_stderr():  # TF's start-up banners once, not twice
        import tensorflow as tf
    return tf


# absl's prefix: severity+MMDD, time, thread id ("I0000 00:00:1796163782.111613    5240 ").
_ABSL_PREFIX = re.compile(rb"^[IWEF]\d{4} [\d:.]+\s+\d+ ")


def dedupe_lines(data: bytes) -> bytes:
    """``data`` with every line that repeats an earlier one (ignoring absl's
    time/thread prefix) left out."""
    seen, out = set(), []
    for line in data.splitlines(keepends=True):
        key = _ABSL_PREFIX.sub(b"", line).rstrip()
        if key and key in seen:
            continue
        seen.add(key)
        out.append(line)
    return b"".join(out)


@contextlib.contextmanager
def dedupe_native_stderr() -> Iterator[None]:
    """Runs the block with fd 2 captured; writes the capture back deduplicated.

    Nothing is dropped but repeats: the first copy of every line reaches
    stderr. Without a real fd 2 (an embedded interpreter, ``sys.stderr``
    replaced by an object without a file descriptor) the block just runs.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (AttributeError, OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            data = dedupe_lines(capture.read())
            while data:  # os.write may write less than asked
                data = data[os.write(2, data) :]


# ---------------------------------------------------------------- guard of 3 and 4


@functools.cache
def _internals() -> Any:
    """``rlpolicy._fast.keras_modes``, or None when its guard fails (logged once)."""
    from rlpolicy._fast import keras_modes

    why = keras_modes.why_not()
    if why is not None:
        logger.warning(
            "rlpolicy.utils.tf_modes: plain path (%s): eager policies run in their caller's "
            "TF mode and Keras layer classes are not pinned to a flavour",
            why,
        )
        return None
    return keras_modes


# ---------------------------------------------------------------- 3: eager policies

_MARK = "_rlpolicy_runs_eagerly"
# Left as they are: ``loss`` (called from the policy's own, wrapped methods) keeps its
# identity, which tells whether a class overrides ``Policy.loss``.
_UNWRAPPED = frozenset({"loss"})


def eager_mode() -> Optional[Callable[[], Any]]:
    """TF's thread-local eager-mode context manager factory, or None (guard failed)."""
    internals = _internals()
    return None if internals is None else internals.eager_parts()[1]


def runs_eagerly(fn: Callable) -> Callable:
    """``fn`` wrapped to run in TF's eager mode when called from graph mode.

    Calls from eager code, and calls made while a ``tf.function`` is traced, go
    straight to ``fn``. ``fn`` itself when the guard fails.
    """
    internals = _internals()
    if getattr(fn, _MARK, False) or internals is None:
        return fn
    executing_eagerly, in_eager_mode_ctx, inside_function = internals.eager_parts()

    @functools.wraps(fn)
    def in_eager_mode(*args: Any, **kwargs: Any) -> Any:
        if executing_eagerly() or inside_function():
            return fn(*args, **kwargs)
        with in_eager_mode_ctx():
            return fn(*args, **kwargs)

    setattr(in_eager_mode, _MARK, True)
    return in_eager_mode


def make_methods_eager(cls: type) -> type:
    """Wraps ``__init__`` and every public plain method ``cls`` has (own or
    inherited, mixins included) with :func:`runs_eagerly`, on ``cls`` itself
    (when the class is made: ``EagerTFPolicy.__init_subclass__``).

    Static and class methods, properties and ``loss`` are left alone. Returns ``cls``.
    """
    for name in dir(cls):
        if (name.startswith("_") and name != "__init__") or name in _UNWRAPPED:
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, types.FunctionType) and not getattr(attr, _MARK, False):
            setattr(cls, name, runs_eagerly(attr))
    return cls


# ---------------------------------------------------------------- 4: Keras layer flavours

# Held while a TFModelV2 is built: tf_keras rewrites a layer class's bases per
# construction, so two threads building graph and eager models take turns.
_BUILD_LOCK = threading.RLock()
_BUILD_DEPTH = threading.local()
# (layer class, use_v2) -> its pinned subclass; made once per pair.
_PINNED: Dict[Tuple[type, bool], type] = {}
_PINNED_ATTR = "_rlpolicy_flavour_mro"


class _PinnedFlavour(type):
    """Metaclass of the pinned layer classes: their MRO is the one stored at
    creation, whatever tf_keras later does to their bases' ``__bases__``."""

    def mro(cls) -> List[type]:
        return [cls, *cls.__dict__[_PINNED_ATTR]]


@contextlib.contextmanager
def keras_build(model: Any, use_v2: Callable[[], bool], nested: Tuple[type, ...]) -> Iterator[None]:
    """Builds ``model`` (a TFModelV2) holding the Keras build lock; when the
    outermost build ends, pins its layers (and those of the ``nested`` type
    models in its attributes) to flavour ``use_v2()``."""
    depth = getattr(_BUILD_DEPTH, "n", 0)
    with _BUILD_LOCK:
        _BUILD_DEPTH.n = depth + 1
        try:
            yield
        finally:
            _BUILD_DEPTH.n = depth
        if depth == 0:
            pin_keras_flavour(model.__dict__, use_v2(), nested)


def pin_keras_flavour(struct: Any, use_v2: bool, nested: Tuple[type, ...] = ()) -> None:
    """Gives each Keras layer in ``struct`` (lists, dicts, the attributes of
    objects of the ``nested`` types) a class whose MRO is fixed to the eager
    (``use_v2``) or graph flavour."""
    internals = _internals()
    if internals is None:
        return
    classes = internals.keras_flavour_classes()
    for top in _keras_layers_in(struct, classes[0], nested, set()):
        for layer in top._flatten_layers(include_self=True, recursive=True):
            cls = type(layer)
            if cls.__dict__.get("_rlpolicy_flavour_v2", not use_v2) is use_v2:
                continue  # (already pinned to this flavour)
            object.__setattr__(layer, "__class__", _pinned_class(unpinned_class(layer), use_v2, classes))


def unpinned_class(obj: Any) -> type:
    """The class tf_keras made ``obj`` with (``type(obj)`` unless it was pinned)."""
    cls = type(obj)
    return cls.__dict__.get("_rlpolicy_pinned_from", cls)


def _pinned_class(cls: type, use_v2: bool, classes: Tuple[type, ...]) -> type:
    with _BUILD_LOCK:
        pinned = _PINNED.get((cls, use_v2))
        if pinned is None:
            namespace = {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
                _PINNED_ATTR: flavour_mro(cls, use_v2, classes),
                "_rlpolicy_flavour_v2": use_v2,
                "_rlpolicy_pinned_from": cls,
            }
            pinned = _PINNED[(cls, use_v2)] = _PinnedFlavour(cls.__name__, (cls,), namespace)
        return pinned


def flavour_mro(cls: type, use_v2: bool, classes: Tuple[type, ...]) -> Tuple[type, ...]:
    """``cls.__mro__`` as it is after tf_keras builds an instance of ``cls`` in
    the eager (``use_v2``) or graph flavour, computed without changing a class.

    tf_keras' ``swap_class`` replaces, in every class of the hierarchy, a base
    ``Layer``/``Layer_v1`` with the flavour's Layer and (for models)
    ``Model``/``Model_v1`` with the flavour's Model; the four classes keep
    their own bases, except ``Model``, whose Layer base is swapped too.
    """
    layer, layer_v1, model, model_v1 = classes
    layer_f, model_f = (layer, model) if use_v2 else (layer_v1, model_v1)
    fixed = (layer, layer_v1, model_v1)
    memo: Dict[type, Tuple[type, ...]] = {}

    def bases(k: type) -> Tuple[type, ...]:
        if k in fixed:
            return k.__bases__
        return tuple(
            layer_f if b in (layer, layer_v1) else model_f if b in (model, model_v1) else b
            for b in k.__bases__
        )

    def linearize(k: type) -> Tuple[type, ...]:
        if k in memo:
            return memo[k]
        if not issubclass(k, layer) or k in (layer, layer_v1):
            memo[k] = k.__mro__  # (the bases of these never change)
            return memo[k]
        direct = bases(k)
        memo[k] = (k, *_c3_merge([list(linearize(b)) for b in direct] + [list(direct)], k))
        return memo[k]

    return linearize(cls)


def _c3_merge(seqs: List[List[type]], owner: type) -> List[type]:
    out: List[type] = []
    while True:
        seqs = [s for s in seqs if s]
        if not seqs:
            return out
        for s in seqs:
            head = s[0]
            if not any(head in t[1:] for t in seqs):
                break
        else:
            raise TypeError(f"no consistent MRO for {owner.__qualname__} in the pinned Keras flavour")
        out.append(head)
        for s in seqs:
            if s[0] is head:
                del s[0]


def _keras_layers_in(struct: Any, layer_cls: type, nested: Tuple[type, ...], seen: set) -> List[Any]:
    """Keras layers/models found in ``struct`` (lists, dicts, attributes of ``nested`` types)."""
    if id(struct) in seen:
        return []
    seen.add(id(struct))
    if isinstance(struct, layer_cls):
        return [struct]
    if isinstance(struct, nested):
        struct = struct.__dict__
    if isinstance(struct, dict):
        struct = list(struct.values())
    if isinstance(struct, (list, tuple)):
        return [layer for item in struct for layer in _keras_layers_in(item, layer_cls, nested, seen)]
    return []


__all__ = [
    "import_tensorflow",
    "dedupe_lines",
    "dedupe_native_stderr",
    "eager_mode",
    "runs_eagerly",
    "make_methods_eager",
    "keras_build",
    "pin_keras_flavour",
    "unpinned_class",
    "flavour_mro",
]
