"""Tensor conversion and ``tf.function`` tracing for eager TF policies.

An eager policy runs its helpers (compute actions, compute gradients, apply
gradients, one learn step) either directly or, with ``eager_tracing``, as
``tf.function``s. Inputs always reach a helper as tensors, so the traced and
the untraced path see the same values, and Python values that change from
call to call (timestep, explore flag, batch size) never force a retrace.

Retraces cost time (each one re-runs the whole Python function); RLlib 1.11
bounds them with ``config["eager_max_retraces"]``. :class:`TraceCounter`
counts the traces of each function and warns once per function when its
retraces (traces after the first) exceed the limit.

Everything here takes tensors, functions and counters, never the policy.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any, Callable, Dict, Optional

import numpy as np
import tree

from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.tf_utils import fast_function, signature_key

tf1, tf, _ = try_import_tf()

logger = logging.getLogger(__name__)

#: SampleBatch columns never turned into tensors (python objects).
NON_TENSOR_COLUMNS = ("infos",)


def _is_tensorable(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return x.dtype != object and x.dtype.kind not in "OUSV"
    return isinstance(x, (bool, int, float, np.number, np.bool_, list, tuple))


def _convert_leaf(leaf: Any) -> Any:
    if isinstance(leaf, np.ndarray):
        # tf.constant skips tf.convert_to_tensor's dispatch layers (same result for arrays).
        return tf.constant(leaf) if _is_tensorable(leaf) else leaf  # e.g. object arrays of infos
    if leaf is None or tf.is_tensor(leaf) or isinstance(leaf, tf.Variable):
        return leaf
    repeated = getattr(sys.modules.get("rlpolicy.models.repeated_values"), "RepeatedValues", None)
    if repeated is not None and isinstance(leaf, repeated):
        # A restored Repeated observation (RLlib 1.11's _convert_to_tf converts its values too).
        return repeated(to_tensor(leaf.values), to_tensor(leaf.lengths), leaf.max_len)
    return tf.convert_to_tensor(leaf)


def to_tensor(x: Any) -> Any:
    """Converts the numpy/python leaves of ``x`` to tensors (tensors and None stay)."""
    if isinstance(x, np.ndarray):  # the common case: one column, no structure to walk
        return _convert_leaf(x)
    if isinstance(x, list) and x and not tf.is_tensor(x[0]):
        # A list of rows (numbers/arrays) is one column, not a structure; a list of
        # tensors (e.g. a restored Tuple observation) is a structure.
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):
            arr = None
        if arr is not None and _is_tensorable(arr):
            return tf.convert_to_tensor(arr)
    return tree.map_structure(_convert_leaf, x)


def batch_to_tensors(batch: Any) -> Dict[str, Any]:
    """The tensor-convertible columns of a SampleBatch (or dict) as a plain dict.

    ``infos`` and object/string columns are left out: a ``tf.function`` can
    only take tensors (or nests of them).
    """
    raw = batch._raw() if hasattr(batch, "_raw") else dict(batch)
    out: Dict[str, Any] = {}
    for key, value in raw.items():
        if key in NON_TENSOR_COLUMNS or key == "is_training":
            continue
        if isinstance(value, np.ndarray) and not _is_tensorable(value):
            continue
        out[key] = to_tensor(value)
    return out


def to_numpy(x: Any) -> Any:
    """Copies the tensors/variables in ``x`` to numpy arrays (other leaves stay).

    The copies never share memory with TF buffers, so later in-place updates
    of variables (optimizer steps) cannot change a returned array.
    """

    def convert(leaf: Any) -> Any:
        if isinstance(leaf, (np.ndarray, int, float, bool, str)) or leaf is None:
            return leaf  # (skips tf.is_tensor, which is slow on non-tensors)
        if isinstance(leaf, tf.Variable) or tf.is_tensor(leaf):
            value = leaf.numpy()
            # (an eager tensor's numpy() is already a copy; a variable's may not be)
            if type(value) is np.ndarray and not isinstance(leaf, tf.Variable):
                return value
            return np.array(value, copy=True)
        return leaf

    return tree.map_structure(convert, x)


def disallow_variable_creation(next_creator: Callable, **kwargs: Any) -> Any:
    """A ``tf.variable_creator_scope`` creator that refuses new variables.

    Used around the model and loss calls: with tracing, a variable created
    there would be created again on every retrace (RLlib 1.11 does the same).

    Raises:
        ValueError: Always, naming the variable.
    """
    name = kwargs.get("name", "<unnamed>")
    raise ValueError(
        f"A variable ({name!r}) was about to be created during an eager forward or "
        "loss pass; create all variables in the model's __init__ (or make_model), "
        "not in forward(), loss_fn or stats_fn"
    )


class TraceCounter:
    """Counts traces per function and warns once a function retraces too often.

    Args:
        owner: Name used in the warning (the policy class).
        max_retraces: Retraces (traces after the first) allowed per function
            before the warning; None disables the check.
    """

    def __init__(self, owner: str, max_retraces: Optional[int]):
        self.owner = owner
        self.max_retraces = max_retraces
        self.counts: Dict[str, int] = {}
        self._warned: set = set()

    def record(self, name: str) -> None:
        """Counts one trace of ``name`` (call from inside the traced body)."""
        self.counts[name] = self.counts.get(name, 0) + 1

    def retraces(self, name: str) -> int:
        """How often ``name`` was traced again after its first trace."""
        return max(self.counts.get(name, 0) - 1, 0)

    def check(self, name: str) -> None:
        """Warns (once per function) when ``name``'s retraces exceed the limit."""
        if self.max_retraces is None or name in self._warned:
            return
        if self.retraces(name) > self.max_retraces:
            self._warned.add(name)
            warnings.warn(
                f"{self.owner}: tf.function {name!r} was retraced {self.retraces(name)} times "
                f"(config['eager_max_retraces']={self.max_retraces}). Each retrace re-runs the "
                "Python code and can make eager_tracing slower than eager_tracing=False; keep "
                "batch columns, dtypes and ranks the same from call to call, or set "
                "eager_max_retraces=None to silence this check",
                RuntimeWarning,
                stacklevel=3,
            )


def make_traced(fn: Callable, name: str, counter: TraceCounter, max_cached: int = 64) -> Callable:
    """Wraps ``fn`` in a ``tf.function`` whose traces are counted by ``counter``.

    The returned callable (``rlpolicy.utils.tf_utils.fast_function``) runs the
    ``tf.function`` and then lets ``counter`` check the retrace limit.
    ``reduce_retracing`` makes TF generalise shapes (e.g. batch sizes) after
    the second distinct one. For each input signature already seen it calls
    the concrete function TF chose for it directly, skipping ``tf.function``'s
    dispatch; at most ``max_cached`` signatures are kept.
    """

    def body(*args: Any, **kwargs: Any) -> Any:
        counter.record(name)  # runs only while tracing
        return fn(*args, **kwargs)

    body.__name__ = name
    call = fast_function(body, max_cached=max_cached, after_dispatch=lambda: counter.check(name))
    call.__name__ = name  # type: ignore[attr-defined]
    return call


__all__ = [
    "to_tensor",
    "batch_to_tensors",
    "to_numpy",
    "disallow_variable_creation",
    "TraceCounter",
    "make_traced",
    "signature_key",
    "NON_TENSOR_COLUMNS",
]
