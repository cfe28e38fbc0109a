"""TF and tf_keras internals: three fast-path entries and the internal names rlpolicy uses.

Entries (see the package docstring for the format):

* ``keras_replay``: ``rlpolicy.models.tf.functional_replay.KerasReplay`` replays a
  functional tf_keras model's layers eagerly without ``Layer.__call__``; it reads
  tf_keras' engine classes, layer classes and node fields, and runs Dense layers
  as the generated ``MatMul``/``BiasAdd`` ops. Plain path: ``model(inputs)``.
  Measured win (tf2 ``compute_actions``, eager_tracing off): 3.7x at batch 1,
  2.6x at 256.
* ``tf_concrete_call``: ``rlpolicy.utils.tf_utils.fast_function`` calls the
  concrete function TF traced for an input signature through its flat-call
  entry point, skipping ``tf.function``'s per-call dispatch. Plain path: the
  ``tf.function`` call. Measured win (tf2 ``compute_actions``): 1.2x to 1.4x.
* ``tf_session_callable``: ``rlpolicy.utils.tf_run_builder`` runs graph-mode
  steps through a session callable made from ``CallableOptions`` (with the fetch
  handler ``session.run`` uses). Plain path: ``session.run``. Measured win
  (tf ``compute_actions``): 2.1x at batch 1, 1.3x at 256.

TF is imported inside the functions (callers import it first, through
``rlpolicy.utils.framework``, which sets up its environment).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from rlpolicy._fast import register, untested_version

TESTED = ((2, 13), (2, 22))  # TF versions [from, below) these internals were checked on


def _tf_version_problem() -> Optional[str]:
    try:
        import tensorflow as tf
    except ImportError:
        return "tensorflow is not installed"
    return untested_version("tensorflow", tf.__version__, TESTED)


def _keras_replay_guard() -> Optional[str]:
    problem = _tf_version_problem()
    if problem is not None:
        return problem
    keras_engine()
    keras_replay_layers()
    raw_ops()
    tape_set_is_empty()
    return None


def _concrete_call_guard() -> Optional[str]:
    problem = _tf_version_problem()
    if problem is not None:
        return problem
    from tensorflow.python.eager.polymorphic_function.concrete_function import ConcreteFunction

    return None if hasattr(ConcreteFunction, "_call_flat") else "ConcreteFunction has no _call_flat"


def _session_callable_guard() -> Optional[str]:
    problem = _tf_version_problem()
    if problem is not None:
        return problem
    from tensorflow.python.client import session as session_lib

    needed = ("_FetchHandler", "BaseSession")
    missing = [n for n in needed if not hasattr(session_lib, n)]
    if missing or not hasattr(session_lib.BaseSession, "_make_callable_from_options"):
        return f"tensorflow.python.client.session lacks {missing or ['_make_callable_from_options']}"
    return None


# ----------------------------------------------------------------- keras_replay


def keras_engine() -> Tuple[Any, Any, Any, Any]:
    """tf_keras' ``(base_layer, base_layer_v1, functional, training)`` modules (ImportError if absent)."""
    from tf_keras.src.engine import base_layer, base_layer_v1, functional, training

    return base_layer, base_layer_v1, functional, training


def keras_replay_layers() -> Tuple[Any, Any, Any]:
    """tf_keras' ``(TFOpLambda, SlicingOpLambda, LSTM)`` classes (ImportError if absent)."""
    from tf_keras.src.layers.core import tf_op_layer
    from tf_keras.src.layers.rnn import lstm

    return tf_op_layer.TFOpLambda, tf_op_layer.SlicingOpLambda, lstm.LSTM


def raw_ops() -> Tuple[Any, ...]:
    """The generated op functions ``(mat_mul, bias_add, tanh, relu, sigmoid)`` and
    the ``ResourceVariable`` class (the variables they read directly)."""
    from tensorflow.python.ops import gen_math_ops, gen_nn_ops
    from tensorflow.python.ops.resource_variable_ops import ResourceVariable

    return (
        gen_math_ops.mat_mul,
        gen_nn_ops.bias_add,
        gen_math_ops.tanh,
        gen_nn_ops.relu,
        gen_math_ops.sigmoid,
        ResourceVariable,
    )


def tape_set_is_empty() -> Callable[[], bool]:
    """A function telling whether no ``GradientTape`` is recording."""
    from tensorflow.python import pywrap_tfe

    return pywrap_tfe.TFE_Py_TapeSetIsEmpty


# ----------------------------------------------------------------- tf_concrete_call


def flat_call(conc: Any) -> Optional[Callable[..., Any]]:
    """``conc``'s flat-call entry point (``fn(flat_tensors, captured_inputs)``), or None."""
    if not CONCRETE_CALL.active:
        return None
    return getattr(conc, "_call_flat", None)


# ----------------------------------------------------------------- tf_session_callable


def make_session_callable(session: Any, fetches: Any, feeds: tuple) -> Any:
    """A ``(callable, fetch handler)`` running ``fetches`` with ``feeds`` given positionally.

    ``session.make_callable`` sends fed runs back through ``session.run``, so the
    callable is built from ``CallableOptions`` directly; the fetch handler (the one
    ``session.run`` uses) rebuilds the nested fetch structure. Returns None where
    ``session.run`` must be used (the entry off, odd feed types, fetched feeds,
    unknown sessions).
    """
    if not SESSION_CALLABLE.active:
        return None
    import tensorflow as tf
    from tensorflow.python.client import session as session_lib

    if type(session).run is not session_lib.BaseSession.run or "run" in session.__dict__:
        return None  # a wrapped or patched run() must see every step
    graph = session.graph
    if not all(
        isinstance(t, tf.Tensor)
        and t.graph is graph
        and graph.is_feedable(t)
        and t.dtype.is_numpy_compatible
        and t.dtype != tf.string
        for t in feeds
    ):
        return None
    try:
        from tensorflow.core.protobuf import config_pb2

        handler = session_lib._FetchHandler(graph, fetches, {})
        if set(t.ref() for t in handler.fetches()) & set(t.ref() for t in feeds):
            return None  # session.run returns fed values of fetched tensors as they are
        opts = config_pb2.CallableOptions()
        opts.feed.extend(t.name for t in feeds)
        opts.fetch.extend(t.name for t in handler.fetches())
        opts.target.extend(op.name for op in handler.targets())
        return session._make_callable_from_options(opts), handler
    except Exception:  # anything the callable path can't handle: session.run reports it
        return None


# ----------------------------------------------------------------- internal names (no fast path)


def eager_tensor_type() -> type:
    """TF's ``EagerTensor`` class (no public name)."""
    from tensorflow.python.framework.ops import EagerTensor

    return EagerTensor


def timeline_module() -> Any:
    """``tensorflow.python.client.timeline`` (Chrome trace files of session runs)."""
    from tensorflow.python.client import timeline

    return timeline


# (registered last: the guards call the functions above)
KERAS_REPLAY = register(
    "keras_replay",
    "tensorflow 2.13 to 2.21 with tf_keras: tf_keras.src engine/layer classes, Node fields, gen ops",
    _keras_replay_guard,
)
CONCRETE_CALL = register(
    "tf_concrete_call", "tensorflow 2.13 to 2.21: ConcreteFunction._call_flat", _concrete_call_guard
)
SESSION_CALLABLE = register(
    "tf_session_callable",
    "tensorflow 2.13 to 2.21: session._FetchHandler, BaseSession._make_callable_from_options",
    _session_callable_guard,
)
