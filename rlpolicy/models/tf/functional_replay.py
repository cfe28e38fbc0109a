"""Running a functional ``tf_keras`` model's layers without ``Layer.__call__``, eagerly.

Calling a Keras model eagerly costs far more than its maths for small networks:
``Model.__call__`` and every ``Layer.__call__`` inside it convert and check
inputs, enter name scopes, resolve the ``training`` flag, propagate masks and
inspect call signatures, and ``Functional._run_internal_graph`` rebuilds its
argument lists for every node. For a batch of one observation that machinery
takes several times longer than the matrix products.

A :class:`KerasReplay` walks a functional model's graph once and records, per
node, the call that ``Layer.__call__`` would end up making -- the layer's own
``call`` (Dense, Conv2D, LSTM, ...) or the wrapped function of a ``Lambda`` or
TF-op layer -- with the node's arguments as slots. Replaying the plan runs
those calls directly. The layers (and so the very same ``tf.Variable`` objects)
are used, so weights stay shared with the Keras model and a ``GradientTape``
sees the same variable reads.

The replay is used only where it computes exactly what the Keras call does:

* only eagerly (``tf.executing_eagerly()``): in graph mode and inside a
  ``tf.function`` the Keras call runs once at tracing time and costs nothing
  per step, so it is always used there;
* only for models whose every layer is of a class listed in ``_REPLAYERS``
  (exact classes, not subclasses), in float32 without mixed precision, with
  no activity regularizer, no training-dependent behaviour (LSTM dropout 0)
  and no implicit mask consumption; any other model is always called through
  Keras (:func:`replayable` says which and why);
* only for inputs Keras would take as they are: dense tensors or numpy arrays
  of the model inputs' ranks and compatible shapes (a dtype cast is made as
  Keras makes it); anything else (Python lists, ragged or sparse tensors,
  rank-mismatched inputs Keras would squeeze or expand, wrong shapes Keras
  reports) goes to the Keras call.

The tf_keras and TF internals it reads come from ``rlpolicy._fast.tf_internals``
(entry ``keras_replay``: where its guard fails, every call is the Keras call).
``replay_disabled()`` switches the replay off in a block (benchmarks compare
both paths with it; tests use it to get the Keras results).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from rlpolicy._fast.tf_internals import (
    KERAS_REPLAY,
    keras_engine,
    keras_replay_layers,
    raw_ops,
    tape_set_is_empty,
)
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.tf_modes import unpinned_class
from rlpolicy.utils.tf_utils import fast_function

tf1, tf, tfv = try_import_tf()

_state = threading.local()


@contextlib.contextmanager
def replay_disabled() -> Iterator[None]:
    """Within this block (in this thread), every :class:`KerasReplay` calls its Keras model."""
    before = getattr(_state, "disabled", False)
    _state.disabled = True
    try:
        yield
    finally:
        _state.disabled = before


class CannotReplay(ValueError):
    """A Keras model (or one of its layers) that the replay does not reproduce exactly."""


# One recorded node: (call, argument slots, output slots, output count).
# ``call(values)`` gets the values of the argument slots in order and returns
# the node's outputs (a tensor, or a flat sequence of them).
Step = Tuple[Callable[[List[Any]], Any], Tuple[int, ...], Tuple[int, ...]]


class _Plan:
    """The replayable form of one functional Keras model."""

    def __init__(self, model: Any):
        _check_model_class(model)
        self.slots: Dict[str, int] = {}
        self.inputs: List[Tuple[int, Any, Any]] = []  # (slot, TensorShape, dtype)
        for ref in model.inputs:
            self.inputs.append((self._slot(str(id(ref))), ref.shape, ref.dtype))
        self.steps: List[Step] = self._record_steps(model)
        self.outputs: Tuple[int, ...] = tuple(self.slots[str(id(x))] for x in model.outputs)
        nested = model._nested_outputs
        # How Keras packs the outputs: None a list, tuple, "single" one tensor, else nested.
        self.structure: Any
        if isinstance(nested, (list, tuple)) and all(_is_keras_tensor(x) for x in nested):
            self.structure = None if isinstance(nested, list) else tuple
        elif _is_keras_tensor(nested):
            self.structure = "single"
        else:
            self.structure = nested  # packed with tf.nest
        self.n_slots = len(self.slots)
        self._traced: Optional[Callable[[List[Any]], List[Any]]] = None  # made on first use

    def _slot(self, tensor_id: str) -> int:
        return self.slots.setdefault(tensor_id, len(self.slots))

    def _record_steps(self, model: Any) -> List[Step]:
        """The model's nodes in Keras' call order, as replay steps."""
        available = {str(id(x)) for x in model.inputs}
        steps = []
        for depth in sorted(model._nodes_by_depth, reverse=True):
            for node in model._nodes_by_depth[depth]:
                if node.is_input:
                    continue
                if any(t not in available for t in node.flat_input_ids):
                    continue  # as Keras: a node the inputs do not reach is skipped
                call = _node_call(node)
                args = tuple(self.slots[t] for t in node.flat_input_ids)
                outs = tuple(self._slot(t) for t in node.flat_output_ids)
                available.update(node.flat_output_ids)
                steps.append((call, args, outs))
        missing = [x for x in model.outputs if str(id(x)) not in available]
        if missing:
            raise CannotReplay(f"outputs {missing} are not computed from the model inputs")
        return steps

    def run(self, inputs: Any) -> Any:
        """The model's outputs for ``inputs``, or ``_FALL_BACK`` for inputs left to Keras.

        With no gradient tape recording (acting), the recorded steps run as
        one ``tf.function``, traced once per input signature and then called
        as one op. Under a tape they run op by op: a traced function's
        gradient gives zeros, not None, to variables that only feed outputs
        the loss does not read (a value branch), and called under a tape it
        saves nothing over the ops.
        """
        flat = inputs if isinstance(inputs, (list, tuple)) else (inputs,)
        if len(flat) != len(self.inputs):
            return _FALL_BACK
        conformed = []
        for x, (_, shape, dtype) in zip(flat, self.inputs):
            x = _conform(x, shape, dtype)
            if x is None:
                return _FALL_BACK
            conformed.append(x)
        if _tape_set_is_empty():
            if self._traced is None:
                self._traced = fast_function(self._run_steps)
            out = self._traced(conformed)
        else:
            out = self._run_steps(conformed)
        if self.structure is None:
            return out
        if self.structure == "single":
            return out[0]
        if self.structure is tuple:
            return tuple(out)
        return tf.nest.pack_sequence_as(self.structure, out)

    def _run_steps(self, conformed: List[Any]) -> List[Any]:
        """The recorded steps on the conformed inputs: the flat list of model outputs."""
        values: List[Any] = [None] * self.n_slots
        for x, (slot, _, _) in zip(conformed, self.inputs):
            values[slot] = x
        for call, args, outs in self.steps:
            result = call([values[i] for i in args])
            if len(outs) == 1:
                values[outs[0]] = result
            else:
                for slot, value in zip(outs, tf.nest.flatten(result)):
                    values[slot] = value
        return [values[i] for i in self.outputs]


_FALL_BACK = object()


def _conform(x: Any, shape: Any, dtype: Any) -> Optional[Any]:
    """``x`` as Keras would feed it to an input of ``shape``/``dtype``; None: leave it to Keras."""
    if isinstance(x, np.ndarray):
        x = tf.convert_to_tensor(x)
    elif not isinstance(x, tf.Tensor) or isinstance(x, (tf.RaggedTensor, tf.SparseTensor)):
        return None
    x_shape = x.shape
    if x_shape.rank != shape.rank or not shape.is_compatible_with(x_shape):
        return None
    if x.dtype != dtype:
        x = tf.cast(x, dtype)
    return x


class KerasReplay:
    """Calls functional Keras models through a replay of their layers where exact.

    Owned by a model (one per Keras model attribute it calls); call it with
    the Keras model and its inputs in place of ``keras_model(inputs)``. The
    plan is made on the first eager call and remade if a different Keras
    model is passed later.
    """

    def __init__(self) -> None:
        self._model: Any = None
        self._plan: Optional[_Plan] = None
        self.reason: Optional[str] = None  # why the last model cannot be replayed

    def __call__(self, model: Any, inputs: Any) -> Any:
        """``model(inputs)``: replayed when eager and exact, else the Keras call."""
        if KERAS_REPLAY.active and tf.executing_eagerly() and not getattr(_state, "disabled", False):
            if model is not self._model:
                self._prepare(model)
            if self._plan is not None:
                out = self._plan.run(inputs)
                if out is not _FALL_BACK:
                    return out
        return model(inputs)

    def replays(self, model: Any) -> bool:
        """Whether eager calls of ``model`` through this object are replayed."""
        if model is not self._model:
            self._prepare(model)
        return self._plan is not None

    def _prepare(self, model: Any) -> None:
        self._model = model
        try:
            self._plan, self.reason = _Plan(model), None
        except CannotReplay as e:
            self._plan, self.reason = None, str(e)


def replayable(model: Any) -> Tuple[bool, Optional[str]]:
    """``(True, None)`` if ``model`` can be replayed, else ``(False, why)``."""
    try:
        _Plan(model)
    except CannotReplay as e:
        return False, str(e)
    return True, None


# ----------------------------------------------------------------- model and layer checks


def _is_keras_tensor(x: Any) -> bool:
    return hasattr(x, "_keras_history")


def _check_model_class(model: Any) -> None:
    """The model must be a plain functional model: its call is Keras' graph walk."""
    try:
        base_layer, base_layer_v1, functional, training = keras_engine()
    except ImportError as e:  # another tf_keras layout: never replay
        raise CannotReplay(f"tf_keras internals not found ({e})") from e
    cls = type(model)
    if not isinstance(model, functional.Functional):
        raise CannotReplay(f"{cls.__name__} is not a functional Keras model")
    if (
        cls.call is not functional.Functional.call
        or cls._run_internal_graph is not functional.Functional._run_internal_graph
    ):
        raise CannotReplay(f"{cls.__name__} overrides call()")
    if cls.__call__ not in (training.Model.__call__, base_layer.Layer.__call__, base_layer_v1.Layer.__call__):
        raise CannotReplay(f"{cls.__name__} overrides __call__()")
    if getattr(model, "_layout_map", None) is not None:
        raise CannotReplay("the model has a DTensor layout map")
    _check_layer(model, "the model")


def _check_layer(layer: Any, what: str) -> None:
    """Conditions under which ``Layer.__call__`` adds nothing to ``layer.call``'s result."""
    policy = layer.dtype_policy
    if policy.compute_dtype != policy.variable_dtype:
        raise CannotReplay(f"{what} uses mixed precision ({policy.name})")
    if getattr(layer, "_activity_regularizer", None) is not None:
        raise CannotReplay(f"{what} has an activity regularizer")
    if not layer.built:
        raise CannotReplay(f"{what} is not built")


def _node_call(node: Any) -> Callable[[List[Any]], Any]:
    """The replay call of one node (see ``_REPLAYERS``); raises CannotReplay."""
    layer = node.layer
    what = f"layer {layer.name!r} ({type(layer).__name__})"
    make = _REPLAYERS.get(unpinned_class(layer))  # (the class, not its pinned flavour)
    if make is None:
        raise CannotReplay(f"{what}: no replay for this layer class")
    _check_layer(layer, what)
    _check_node_inputs(node, layer, what)
    return make(layer, node, what)


def _check_node_inputs(node: Any, layer: Any, what: str) -> None:
    """No autocast of inputs and no mask taken implicitly from the inputs."""
    flat = node.keras_inputs
    if layer._autocast:
        for x in flat:
            if x.dtype.is_floating and x.dtype != layer.compute_dtype:
                raise CannotReplay(f"{what}: Keras would cast its {x.dtype.name} input")
    if layer._call_spec.expects_mask_arg and "mask" not in node.call_kwargs:
        if any(getattr(x, "_keras_mask", None) is not None for x in flat):
            raise CannotReplay(f"{what}: takes a mask from its inputs")


# ----------------------------------------------------------------- per-layer replays
#
# Each maker returns ``call(values)`` where ``values`` are the node's Keras
# tensor arguments in ``node.flat_input_ids`` order.


def _packer(node: Any) -> Callable[[List[Any]], Tuple[tuple, dict]]:
    """``values -> (args, kwargs)``: the node's arguments with ``values`` in its tensors' places.

    Mirrors ``Node.map_arguments``: the node's flat arguments (kwargs in call
    order) with its Keras tensors, in ``flat_input_ids`` order, replaced.
    """
    if node._single_positional_tensor_passed:
        return lambda values: ((values[0],), {})
    leaves = list(node._flat_arguments)
    positions = [i for _, i in node._keras_inputs_ids_and_indices]
    structure = (node.call_args, list(node.call_kwargs.values()))
    keys = list(node.call_kwargs)

    def pack(values: List[Any]) -> Tuple[tuple, dict]:
        flat = list(leaves)
        for i, v in zip(positions, values):
            flat[i] = v
        args, kwargs = tf.nest.pack_sequence_as(structure, flat)
        return tuple(args), dict(zip(keys, kwargs))

    return pack


def _single_input(node: Any, what: str) -> None:
    if len(node.call_args) != 1 or node.call_kwargs:
        raise CannotReplay(f"{what}: called with extra arguments {list(node.call_kwargs)}")


def _replay_call_method(layer: Any, node: Any, what: str) -> Callable[[List[Any]], Any]:
    """Layers whose ``call(inputs)`` is all of their eager computation."""
    _single_input(node, what)
    pack = _packer(node)
    if len(node.flat_input_ids) == 1:
        return lambda values: layer.call(values[0])
    return lambda values: layer.call(*pack(values)[0])


def _replay_dense(layer: Any, node: Any, what: str) -> Callable[[List[Any]], Any]:
    """``Dense``: on a rank-2 tensor of its dtype, the ops ``Dense.call`` runs, minus its wrappers.

    ``Dense.call`` on such an input runs ``MatMul``, ``BiasAdd`` and the
    activation; called here through the generated op functions (the same ops,
    so the same values and gradients) with the variables read as
    ``tf.matmul`` reads them. Any other input, variable type or activation
    goes through ``Dense.call`` itself.
    """
    _single_input(node, what)
    mat_mul, bias_add = raw_ops()[:2]
    raw_activations = _raw_activations()

    def call(values: List[Any]) -> Any:
        x, kernel = values[0], layer.kernel
        if (
            type(kernel) is not _RESOURCE_VARIABLE
            or x.dtype != kernel.dtype
            or x.shape.rank != 2
            or not isinstance(x, tf.Tensor)
        ):
            return layer.call(x)
        y = mat_mul(x, kernel.value())
        if layer.use_bias:
            y = bias_add(y, layer.bias.value())
        activation = layer.activation
        if activation is None:
            return y
        raw = raw_activations.get(activation, _UNKNOWN)
        if raw is _UNKNOWN:
            return activation(y)
        return y if raw is None else raw(y)

    return call


_UNKNOWN = object()


def _raw_activations() -> Dict[Any, Any]:
    """Activation functions -> the one generated op each runs on a dense tensor (None: identity)."""
    _, _, tanh, relu, sigmoid, _ = raw_ops()
    keras = get_keras()
    table: Dict[Any, Any] = {keras.activations.linear: None}
    for fn in (tf.nn.tanh, tf.math.tanh, tf.tanh, keras.activations.tanh):
        table[fn] = tanh
    for fn in (tf.nn.relu,):
        table[fn] = relu
    for fn in (tf.nn.sigmoid, tf.math.sigmoid, tf.sigmoid):
        table[fn] = sigmoid
    return table


def _replay_lambda(layer: Any, node: Any, what: str) -> Callable[[List[Any]], Any]:
    """``Lambda``: its function with its ``arguments`` (what ``Lambda.call`` computes)."""
    _single_input(node, what)
    if layer._fn_expects_mask_arg or layer._fn_expects_training_arg:
        raise CannotReplay(f"{what}: its function takes a mask or training argument")
    pack = _packer(node)
    return lambda values: layer.function(*pack(values)[0], **layer.arguments)


def _replay_tf_op(layer: Any, node: Any, what: str) -> Callable[[List[Any]], Any]:
    """``TFOpLambda``: the wrapped TF function (its ``name`` argument dropped, as Keras does)."""
    pack = _packer(node)

    def call(values: List[Any]) -> Any:
        args, kwargs = pack(values)
        kwargs.pop("name", None)
        return layer.function(*args, **kwargs)

    return call


def _replay_slicing_op(layer: Any, node: Any, what: str) -> Callable[[List[Any]], Any]:
    """``SlicingOpLambda``: as ``TFOpLambda``, with Keras' slice dicts turned back into slices."""
    pack = _packer(node)

    def call(values: List[Any]) -> Any:
        args, kwargs = pack(values)
        kwargs.pop("name", None)
        return layer.function(*[_slices(a) for a in args], **{k: _slices(v) for k, v in kwargs.items()})

    return call


def _slices(arg: Any) -> Any:
    """Keras' ``{"start", "stop", "step"}`` dicts (one level deep) as ``slice`` objects."""
    if isinstance(arg, dict) and set(arg) == {"start", "stop", "step"}:
        return slice(arg["start"], arg["stop"], arg["step"])
    if isinstance(arg, (list, tuple)):
        return [_slices(a) if isinstance(a, dict) else a for a in arg]
    return arg


def _replay_lstm(layer: Any, node: Any, what: str) -> Callable[[List[Any]], Any]:
    """``LSTM`` called as ``RNN.__call__`` calls it eagerly: ``call(x, mask=, initial_state=)``."""
    if layer.dropout or layer.recurrent_dropout:
        raise CannotReplay(f"{what}: dropout makes it depend on the training flag")
    if layer.stateful:
        raise CannotReplay(f"{what}: stateful")
    if getattr(layer, "_num_constants", 0):
        raise CannotReplay(f"{what}: has constants")
    unknown = set(node.call_kwargs) - {"mask", "initial_state"}
    if len(node.call_args) != 1 or unknown:
        raise CannotReplay(f"{what}: called with arguments {sorted(unknown)}")
    pack = _packer(node)

    def call(values: List[Any]) -> Any:
        (inputs,), kwargs = pack(values)
        state = kwargs.get("initial_state")
        if isinstance(inputs, (list, tuple)):
            # RNN.__call__ splits [x, *state] into the input and its initial state.
            if state is not None:
                raise ValueError(f"{what}: initial state given twice")
            inputs, state = inputs[0], list(inputs[1:]) or None
        return layer.call(inputs, mask=kwargs.get("mask"), initial_state=state)

    return call


def _replayers() -> Dict[type, Callable[[Any, Any, str], Callable[[List[Any]], Any]]]:
    """Layer class -> maker of its replay call (exact classes only)."""
    keras = get_keras()
    layers = keras.layers
    table: Dict[type, Callable[[Any, Any, str], Callable[[List[Any]], Any]]] = {}
    table[layers.Dense] = _replay_dense
    for name in (
        "Conv1D",
        "Conv2D",
        "Flatten",
        "Reshape",
        "Activation",
        "Concatenate",
        "Add",
        "Subtract",
        "Multiply",
    ):
        table[getattr(layers, name)] = _replay_call_method
    table[layers.Lambda] = _replay_lambda
    try:
        tf_op_lambda, slicing_op_lambda, lstm = keras_replay_layers()
    except ImportError:  # another tf_keras layout: those layers fall back
        return table
    table[tf_op_lambda] = _replay_tf_op
    table[slicing_op_lambda] = _replay_slicing_op
    table[lstm] = _replay_lstm
    return table


# (the tf_keras internals are read only where rlpolicy._fast's keras_replay entry is on)
_REPLAYERS = _replayers() if tf is not None and KERAS_REPLAY.active else {}
if _REPLAYERS:
    _RESOURCE_VARIABLE = raw_ops()[-1]
    _tape_set_is_empty = tape_set_is_empty()  # no GradientTape is recording
