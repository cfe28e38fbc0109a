"""The TensorFlow / tf_keras internals that ``rlpolicy.utils.tf_modes`` needs.

``GUARD`` names the versions and the internals this was written for;
:func:`why_not` returns None when they are there, else the reason, and then
``tf_modes`` takes its plain path (logged once): eager policies run in the
caller's mode, and Keras layers keep whatever base classes tf_keras gives them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Tuple

GUARD = {
    "tensorflow": "2.15",  # tested from (constraints/min.txt) to 2.21 (constraints/cpu.txt)
    "tf_keras": "2.15",
    "feature": (
        "tensorflow.python.eager.context.eager_mode / ops.inside_function; "
        "tf_keras.src.engine.{base_layer,base_layer_v1,training,training_v1} "
        "(tf_keras swaps a layer class's Layer/Model base between these per construction)"
    ),
}


def _major_minor(version: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


@functools.cache
def why_not() -> Optional[str]:
    """None if the internals below may be used, else why not."""
    try:
        import tensorflow as tf
        import tf_keras
    except ImportError as e:
        return f"cannot import tensorflow/tf_keras ({e})"
    for name, module in (("tensorflow", tf), ("tf_keras", tf_keras)):
        version = getattr(module, "__version__", "0")
        if _major_minor(version) < _major_minor(GUARD[name]):
            return f"{name} {version} is older than {GUARD[name]}"
    try:
        eager_parts()
        keras_flavour_classes()
    except (ImportError, AttributeError) as e:
        return f"internals moved ({type(e).__name__}: {e})"
    return None


def eager_parts() -> Tuple[Callable[[], bool], Callable[[], Any], Callable[[], bool]]:
    """``(executing_eagerly, eager_mode, inside_function)``: TF's thread-local
    eager-mode context manager has no public name."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops

    return context.executing_eagerly, context.eager_mode, ops.inside_function


def keras_flavour_classes() -> Tuple[type, type, type, type]:
    """tf_keras' ``(Layer, Layer_v1, Model, Model_v1)``: the eager (v2) and
    graph (v1) bases it swaps into a layer class's hierarchy."""
    from tf_keras.src.engine import base_layer, base_layer_v1, training, training_v1

    return base_layer.Layer, base_layer_v1.Layer, training.Model, training_v1.Model
