"""Optional, lazy imports of the deep-learning frameworks.

Like RLlib, rlpolicy never requires a framework the user does not use:
``try_import_torch()`` / ``try_import_tf()`` return ``None`` placeholders when
the package is missing (or disabled through ``RLPOLICY_NO_TORCH`` /
``RLPOLICY_NO_TF`` environment variables, which the tests use to emulate a
machine without them).

Unlike RLlib 1.11, ``try_import_tf`` never calls
``tf1.disable_eager_execution()``: torch, TF graph-mode and eager TF policies
must live in one process. Graph-mode code builds its ops inside its own
``tf1.Graph`` (where eager is off by construction). A process that TF1 code
switched with ``tf1.disable_v2_behavior()`` (or ``disable_eager_execution()``)
works too: eager policies then run their methods in TF's eager-mode context
(``rlpolicy.utils.tf_modes``).
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any, Callable, Optional, Tuple, Union

from rlpolicy.utils.deprecation import Deprecated
from rlpolicy.utils.typing import TensorShape, TensorType  # noqa: F401  (1.11 imports them here)


def _disabled(var: str) -> bool:
    return os.environ.get(var, "").lower() not in ("", "0", "false")


@functools.cache
def _import_torch() -> Tuple[Any, Any]:
    if _disabled("RLPOLICY_NO_TORCH"):
        return None, None
    try:
        import torch
        import torch.nn as nn
    except ImportError:
        return None, None
    return torch, nn


def try_import_torch(error: bool = False) -> Tuple[Any, Any]:
    """Tries to import torch.

    Args:
        error: Raise an ImportError if torch is not available.

    Returns:
        ``(torch, torch.nn)``, or ``(None, None)`` if not installed.
    """
    torch, nn = _import_torch()
    if torch is None and error:
        raise ImportError("Could not import PyTorch; install it with `pip install rlpolicy[torch]`")
    if torch is None:
        return None, _NNStub()
    return torch, nn


class _NNStub:
    """Lets `class X(nn.Module)` be written in modules imported without torch."""

    class Module:  # noqa: D401 - placeholder base class
        pass

    def __getattr__(self, name: str) -> Any:
        return _NNStub.Module


@functools.cache
def _import_tf() -> Tuple[Any, Any, Optional[int]]:
    if _disabled("RLPOLICY_NO_TF"):
        return None, None, None
    from rlpolicy.utils.tf_modes import import_tensorflow

    try:
        tf = import_tensorflow()  # tf.keras is tf_keras unless the process chose (see there)
    except ImportError:
        return None, None, None
    tf1 = tf.compat.v1
    version = 2 if hasattr(tf, "__version__") and tf.__version__.startswith("2") else 1
    return tf1, tf, version


def try_import_tf(error: bool = False) -> Tuple[Any, Any, Optional[int]]:
    """Tries to import tensorflow.

    Args:
        error: Raise an ImportError if tensorflow is not available.

    Returns:
        ``(tf.compat.v1, tf, major_version)``, or ``(None, None, None)``.
    """
    tf1, tf, version = _import_tf()
    if tf is None and error:
        raise ImportError("Could not import TensorFlow; install it with `pip install rlpolicy[tf]`")
    return tf1, tf, version


def try_import_tfp(error: bool = False) -> Any:
    """tensorflow_probability is not a dependency of rlpolicy: returns None."""
    if error:
        raise ImportError("rlpolicy does not use tensorflow_probability")
    return None


def try_import_jax(error: bool = False) -> Tuple[Any, Any]:
    """Tries to import jax and flax; returns ``(None, None)`` if missing."""
    try:
        import flax
        import jax
    except ImportError:
        if error:
            raise ImportError("Could not import JAX/flax; install them to use framework='jax'") from None
        return None, None
    return jax, flax


def get_keras() -> ModuleType:
    """The Keras 2 API (``tf_keras``) that works in TF1 graphs and eagerly."""
    try_import_tf(error=True)
    import tf_keras

    return tf_keras


def get_variable(
    value,
    framework: str = "tf",
    trainable: bool = False,
    tf_name: str = "unnamed-variable",
    torch_tensor: bool = False,
    device=None,
    shape=None,
    dtype=None,
):
    """Creates a framework variable initialised to ``value`` (RLlib's helper)."""
    import numpy as np

    if framework in ("tf", "tf2", "tfe"):
        _, tf, _ = try_import_tf(error=True)
        if dtype is None:
            dtype = tf.float32 if isinstance(value, float) else (tf.int32 if isinstance(value, int) else None)
        return tf.compat.v1.get_variable(
            tf_name,
            initializer=value if shape is None else tf.constant_initializer(value),
            dtype=dtype,
            trainable=trainable,
            **({} if shape is None else {"shape": shape}),
        )
    if framework == "torch" and torch_tensor:
        torch, _ = try_import_torch(error=True)
        t = torch.from_numpy(np.asarray(value)) if not isinstance(value, torch.Tensor) else value
        if dtype is not None:
            t = t.to(dtype)
        if device is not None:
            t = t.to(device)
        t.requires_grad = trainable
        return t
    return value


def tf_function(tf_module: Any):
    """Decorator factory: ``@tf_function(tf)`` wraps with ``tf.function`` only in graph-building
    (non-eager) mode, and leaves the function as is when ``tf_module`` is None or eager is on
    (RLlib 1.11)."""

    def decorator(func):
        if tf_module is None or tf_module.executing_eagerly():
            return func
        return tf_module.function(func)

    return decorator


class ModuleStub:
    """Stands in for ``torch.nn.Module`` without torch: subclassable, but instantiating raises."""

    def __init__(self, *args: Any, **kwargs: Any):
        raise ImportError("Could not import `torch`; install it with `pip install rlpolicy[torch]`")


class NNStub:
    """Stands in for ``torch.nn`` without torch (RLlib 1.11's stub): ``Module`` is
    ``ModuleStub`` and ``functional`` is None."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.functional = None
        self.Module = ModuleStub


TF_FRAMEWORKS = ("tf", "tf2", "tfe")
_TORCH_ACTIVATIONS = {
    "relu": "ReLU",
    "tanh": "Tanh",
    "elu": "ELU",
    "swish": "SiLU",
    "silu": "SiLU",
    "softmax": "Softmax",
    "sigmoid": "Sigmoid",
}


def lookup_activation_fn(
    name: Optional[Union[Callable, str]] = None, framework: str = "tf"
) -> Optional[Callable]:
    """The activation for ``name`` (see ``rlpolicy.models.utils.get_activation_fn``, which
    calls this; it lives here so that this module's deprecated alias needs no models import)."""
    if callable(name):
        return name
    lower = name.lower() if isinstance(name, str) else name
    if lower in ("linear", None):
        return None
    if framework == "torch":
        _, nn = try_import_torch()
        fn = getattr(nn, name, None)  # type: ignore[arg-type]
        if isinstance(fn, type):
            return fn
        if lower in _TORCH_ACTIVATIONS:
            return getattr(nn, _TORCH_ACTIVATIONS[lower])
    elif framework in TF_FRAMEWORKS:
        _, tf, _ = try_import_tf()
        fn = getattr(tf.nn, "silu" if lower == "swish" else lower, None)  # type: ignore[arg-type]
        if fn is not None:
            return fn
    else:
        raise ValueError(
            f"get_activation_fn: unsupported framework {framework!r}; use one of torch, tf, tf2, tfe"
        )
    raise ValueError(
        f"unknown activation {name!r} for framework={framework!r}; use relu, tanh, elu, swish, silu or linear"
    )


@Deprecated(
    old="rlpolicy.utils.framework.get_activation_fn",
    new="rlpolicy.models.utils.get_activation_fn",
    error=False,
)
def get_activation_fn(name: Optional[str] = None, framework: str = "tf"):
    """Deprecated home of ``rlpolicy.models.utils.get_activation_fn`` (as in RLlib 1.11)."""
    return lookup_activation_fn(name, framework)
