"""TensorFlow helpers (RLlib 1.11's ``ray.rllib.utils.tf_utils``).

Everything works in eager mode and inside a ``tf1.Graph`` (graph mode);
rlpolicy never disables eager execution globally.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import gymnasium as gym
import numpy as np
import tree  # dm-tree

from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.spaces.space_utils import flatten_space, get_base_struct_from_space, shape_of
from rlpolicy.utils.typing import LocalOptimizer, ModelGradients, SpaceStruct, TensorStructType, TensorType

tf1, tf, tfv = try_import_tf()

_EAGER_TENSOR: Any = None  # the eager tensor class when TF is there
if tf is not None:
    from rlpolicy._fast.tf_internals import eager_tensor_type, flat_call

    _EAGER_TENSOR = eager_tensor_type()


def explained_variance(y: TensorType, pred: TensorType) -> TensorType:
    """``max(-1, 1 - var(y - pred) / var(y))`` with (biased) variances over axis 0.

    Args:
        y: Targets ``[B]``.
        pred: Predictions ``[B]``.

    Returns:
        A scalar tensor.
    """
    _, y_var = tf.nn.moments(y, axes=[0])
    _, diff_var = tf.nn.moments(y - pred, axes=[0])
    return tf.maximum(-1.0, 1 - (diff_var / y_var))


def flatten_inputs_to_1d_tensor(
    inputs: TensorStructType, spaces_struct: Optional[SpaceStruct] = None, time_axis: bool = False
) -> TensorType:
    """Flattens and concatenates a nested input struct into one ``[B, n]`` float32 tensor.

    Discrete/MultiDiscrete components (per ``spaces_struct``) are one-hot
    encoded; all others are reshaped to ``[B, -1]``.

    Args:
        inputs: Nested struct of ``[B, ...]`` (or ``[B, T, ...]``) tensors.
        spaces_struct: Matching struct of spaces, or None.
        time_axis: Whether a time axis follows the batch axis.

    Returns:
        ``[B, n]`` (or ``[B, T, n]``) float32 tensor.
    """
    flat_inputs = tree.flatten(inputs)
    flat_spaces = tree.flatten(spaces_struct) if spaces_struct is not None else [None] * len(flat_inputs)
    B = T = None
    out = []
    for input_, space in zip(flat_inputs, flat_spaces):
        input_ = tf.convert_to_tensor(input_)
        if B is None:
            B = tf.shape(input_)[0]
            T = tf.shape(input_)[1] if time_axis else None
        lead = [B * T] if time_axis else [B]
        if isinstance(space, gym.spaces.Discrete):
            out.append(one_hot(tf.reshape(input_, lead), space))
        elif isinstance(space, gym.spaces.MultiDiscrete):
            out.append(one_hot(tf.reshape(input_, lead + [-1]), space))
        else:
            out.append(tf.cast(tf.reshape(input_, lead + [-1]), tf.float32))
    merged = tf.concat(out, axis=-1)
    if time_axis:
        merged = tf.reshape(merged, [B, T, -1])
    return merged


def get_gpu_devices() -> List[str]:
    """Names of the GPU devices TensorFlow can see (``[]`` on a CPU-only machine)."""
    try:
        devices = tf.config.list_physical_devices()
    except Exception:  # pragma: no cover - very old TF
        devices = tf.config.experimental.list_physical_devices()
    # Device types are "GPU", but also e.g. "XLA_GPU".
    return [d.name for d in devices if "GPU" in d.device_type]


def _action_placeholder(space: gym.Space, name: Optional[str]) -> TensorType:
    """One flat ``[None, n]`` placeholder for a nested (Dict/Tuple) space.

    Same layout as RLlib's ``ModelCatalog.get_action_placeholder``: Discrete
    components take 1 column, every other component its size;
    int64 if all components are discrete, else float32.
    """
    size, all_discrete = 0, True
    for s in flatten_space(space):
        if isinstance(s, gym.spaces.Discrete):
            size += 1
        elif isinstance(s, gym.spaces.MultiDiscrete):
            size += int(np.prod(s.shape))  # len(nvec) for a 1-D nvec
        else:
            all_discrete = False
            size += int(np.prod(shape_of(s)))
    dtype = tf.int64 if all_discrete else tf.float32
    return tf1.placeholder(dtype, shape=(None, size), name=name)


def _placeholder_dtype(dtype: Any) -> Any:
    # float64 data is fed into float32 placeholders (as RLlib does).
    return tf.float32 if np.dtype(dtype) == np.float64 else tf.as_dtype(np.dtype(dtype))


def get_placeholder(
    *,
    space: Optional[gym.Space] = None,
    value: Optional[Any] = None,
    name: Optional[str] = None,
    time_axis: bool = False,
    flatten: bool = True,
) -> Union[TensorType, TensorStructType]:
    """Creates a ``tf1.placeholder`` for a batch of values of ``space`` (or like ``value``).

    Must be called inside a graph (``with graph.as_default():``).

    Args:
        space: Space of one item; the placeholder is ``[None, (None,) *space.shape]``.
            Dict/Tuple spaces give one flat placeholder (``flatten=True``) or a
            struct of placeholders named ``name.<path>``.
        value: Alternatively a batch (``[B, ...]``) whose shape[1:] and dtype are used.
        name: Placeholder name.
        time_axis: Add a ``None`` time axis after the batch axis.
        flatten: See ``space``.

    Returns:
        The placeholder (or struct of placeholders).

    Raises:
        ValueError: If neither ``space`` nor ``value`` is given.
    """
    time = (None,) if time_axis else ()
    if space is not None:
        if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
            if flatten:
                return _action_placeholder(space, name)
            return tree.map_structure_with_path(
                lambda path, component: get_placeholder(
                    space=component, name=f"{name}." + ".".join(str(p) for p in path), time_axis=time_axis
                ),
                get_base_struct_from_space(space),
            )
        return tf1.placeholder(
            shape=(None,) + time + tuple(shape_of(space)), dtype=_placeholder_dtype(space.dtype), name=name
        )
    if value is None:
        raise ValueError(f"get_placeholder(name={name!r}): pass either `space` or `value`")
    shape = value.shape[1:]
    shape = shape if isinstance(shape, tuple) else tuple(shape.as_list())
    dtype = value.dtype if isinstance(value, np.ndarray) else value.dtype.as_numpy_dtype
    return tf1.placeholder(shape=(None,) + time + shape, dtype=_placeholder_dtype(dtype), name=name)


def huber_loss(x: TensorType, delta: float = 1.0) -> TensorType:
    """Elementwise Huber loss: ``0.5 x^2`` for ``|x| < delta``, else ``delta (|x| - delta/2)``."""
    return tf.where(tf.abs(x) < delta, tf.math.square(x) * 0.5, delta * (tf.abs(x) - 0.5 * delta))


def l2_loss(x: TensorType) -> TensorType:
    """Half the sum of squares of ``x`` (``tf.nn.l2_loss``)."""
    return tf.nn.l2_loss(x)


def _placeholder_for(path: tuple, value: Any, dynamic_shape: bool) -> TensorType:
    value = np.asarray(value)
    if dynamic_shape and value.ndim > 0:
        shape = (None,) + value.shape[1:]
    else:
        shape = value.shape
    return tf1.placeholder(dtype=value.dtype, shape=shape, name=".".join(str(p) for p in path) or None)


class _GraphCallable:
    """Runs ``fn`` once symbolically on placeholders, then evaluates it by ``session.run``."""

    def __init__(self, fn: Callable, session: Any, dynamic_shape: bool):
        self._fn, self._session, self._dynamic = fn, session, dynamic_shape
        self._arg_phs: Any = None
        self._kwarg_phs: Any = None
        self._out = None

    def _build(self, args: list, kwargs: dict) -> None:
        with self._session.graph.as_default():
            make = lambda path, v: _placeholder_for(path, v, self._dynamic)  # noqa: E731
            self._arg_phs = tree.map_structure_with_path(make, args)
            self._kwarg_phs = tree.map_structure_with_path(make, kwargs)
            self._out = self._fn(*self._arg_phs, **self._kwarg_phs)

    def __call__(self, *args, **kwargs):
        # RLlib flattens list arguments into positional ones.
        flat_args = []
        for a in args:
            if type(a) is list:
                flat_args.extend(a)
            else:
                flat_args.append(a)
        if self._out is None:
            self._build(flat_args, kwargs)
        feed = dict(zip(tree.flatten(self._arg_phs), tree.flatten(flat_args)))
        feed.update(zip(tree.flatten(self._kwarg_phs), tree.flatten_up_to(self._kwarg_phs, kwargs)))
        return self._session.run(self._out, feed)


def make_tf_callable(session_or_none: Optional[Any], dynamic_shape: bool = False) -> Callable:
    """Decorator: makes a function that builds tf ops callable with numpy inputs.

    In graph mode (a session is given), the first call creates placeholders
    shaped like the (nested) arguments, calls the function once on them to
    build the ops, and every call then feeds the arguments and returns
    ``session.run(outputs)``. In eager mode (``session_or_none=None``) the
    function is returned as is.

    Args:
        session_or_none: The ``tf1.Session`` for graph mode, or None in eager mode.
        dynamic_shape: Give the placeholders a ``None`` batch axis, so later
            calls may use other batch sizes.

    Returns:
        A decorator.

    Raises:
        ValueError: If no session is given while building inside a graph
            (where eager execution is off).
    """
    if session_or_none is None and not tf.executing_eagerly():
        raise ValueError(
            "make_tf_callable: session_or_none=None needs eager execution; "
            "pass the tf1.Session when building in a graph"
        )

    def make_wrapper(fn: Callable) -> Callable:
        if session_or_none is None:
            return fn
        return _GraphCallable(fn, session_or_none, dynamic_shape)

    return make_wrapper


def signature_key(x: Any) -> Optional[Tuple[Any, ...]]:
    """A hashable key for the tf.function input signature of ``x`` (a nest of
    eager tensors and plain Python constants), or None for anything else.

    Two argument nests with the same key have the same structure, the same
    dtypes and shapes, and the same Python values, so they would run the same
    concrete function.
    """
    return _key(x, _EAGER_TENSOR)


def _key(x: Any, eager: Any) -> Optional[Tuple[Any, ...]]:
    if isinstance(x, eager):
        return (x.dtype, tuple(x.shape.as_list()))  # ints whatever the tensorshape mode
    if isinstance(x, dict):
        try:
            keys = sorted(x)
        except TypeError:  # mixed key types
            return None
        items = tuple((k, type(k), _key(x[k], eager)) for k in keys)
        return None if any(v is None for _, _, v in items) else (dict, items)
    if isinstance(x, (list, tuple)):
        elems = tuple(_key(v, eager) for v in x)
        return None if any(v is None for v in elems) else (type(x), elems)
    if x is None or isinstance(x, (bool, int, float, str)):
        return (type(x), x)
    return None  # variables, arrays, other objects: leave them to tf.function


def _direct_call(conc: Any, args: Tuple[Any, ...]) -> Callable:
    """The cheapest way to call concrete function ``conc`` with arguments like ``args``.

    ``conc(*args)`` re-binds and re-checks the arguments against the function
    type on every call. Where the function's flat tensor inputs are the
    tensors of ``tf.nest.flatten(args)`` in that order (checked here on
    ``args``; the same holds for all arguments with the same signature key),
    the flat tensors go straight to the function, as ``tf.function`` itself
    does after its dispatch.
    """
    try:
        expected = conc.function_type.unpack_inputs(conc.function_type.bind(*args))
        flat = [t for t in tf.nest.flatten(args) if isinstance(t, tf.Tensor)]
        call_flat = flat_call(conc)  # (None: rlpolicy._fast's tf_concrete_call entry is off)
    except (AttributeError, TypeError, ValueError):  # another TF version: the public call
        return conc
    if call_flat is None:
        return conc
    if len(flat) != len(expected) or any(a is not b for a, b in zip(flat, expected)):
        return conc
    nest_flatten, tensor = tf.nest.flatten, tf.Tensor

    def direct(*call_args: Any) -> Any:
        return call_flat([t for t in nest_flatten(call_args) if isinstance(t, tensor)], conc.captured_inputs)

    return direct


def fast_function(
    fn: Callable, max_cached: int = 64, after_dispatch: Optional[Callable[[], None]] = None
) -> Callable:
    """``tf.function(fn)`` (no autograph, ``reduce_retracing``) called the cheap way eagerly.

    For each input signature (see :func:`signature_key`) already seen, the
    returned callable calls the concrete function TF chose for it directly:
    ``tf.function``'s own dispatch (building and matching a function type on
    every call) costs more than a small forward pass. Arguments it cannot key
    (variables, arrays, other objects) always take ``tf.function``'s own
    path. At most ``max_cached`` signatures are kept. ``after_dispatch`` runs
    after every call that went through ``tf.function`` (e.g. a retrace check).
    The key holds the arguments only, not TF's device/graph context: call it
    from one such context.

    The traced function is on the result as ``traced_function``.
    """
    traced = tf.function(fn, autograph=False, reduce_retracing=True)
    concrete: Dict[Any, Callable] = {}

    def call(*args: Any) -> Any:
        key = signature_key(args)
        direct = concrete.get(key) if key is not None else None
        if direct is not None:
            return direct(*args)
        # A new signature traces: expected here (reduce_retracing generalises shapes, and
        # TraceCounter bounds retraces). TF's "triggered tf.function retracing" warning
        # keys its count on the code object, so it adds up the first traces of every
        # instance's function (each _Plan's _run_steps, each policy's traced body), and
        # it sees only the calls that trace (the others skip tf.function): noise here.
        # tests/test_fast_paths.py checks that no call after the first ones traces.
        with tf_log_filtered("triggered tf.function retracing"):
            out = traced(*args)
        if after_dispatch is not None:
            after_dispatch()
        if key is not None:
            if len(concrete) >= max_cached:
                concrete.clear()
            concrete[key] = _direct_call(traced.get_concrete_function(*args), args)
        return out

    call.traced_function = traced  # type: ignore[attr-defined]
    return call


class _DropPhrases(logging.Filter):
    def __init__(self, phrases: Tuple[str, ...]):
        super().__init__()
        self.phrases = phrases

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(p in message for p in self.phrases)


@contextlib.contextmanager
def tf_log_filtered(*phrases: str) -> Iterator[None]:
    """Drops the records of TF's Python logger (``"tensorflow"``) that contain any
    of ``phrases`` while the block runs: warnings rlpolicy's own calls trigger and
    a user cannot act on (e.g. a TF1 API deprecation inside the ONNX export)."""
    logger = logging.getLogger("tensorflow")
    drop = _DropPhrases(phrases)
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def minimize_and_clip(
    optimizer: LocalOptimizer, objective: TensorType, var_list: List[Any], clip_val: Optional[float] = 10.0
) -> ModelGradients:
    """Computes gradients of ``objective`` w.r.t. ``var_list``, each clipped to norm ``clip_val``.

    In eager mode the gradients come from ``optimizer.tape`` (set by the
    eager policy); in graph mode from ``optimizer.compute_gradients`` (tf1
    optimizers) or ``tf.gradients``.

    Args:
        optimizer: The optimizer.
        objective: The loss.
        var_list: Variables to differentiate.
        clip_val: Per-gradient norm limit, or None for no clipping.

    Returns:
        ``[(grad, var), ...]`` for the variables that have a gradient.

    Raises:
        ValueError: If ``clip_val`` is not None and not > 0.
    """
    if clip_val is not None and not clip_val > 0.0:
        raise ValueError(f"minimize_and_clip: clip_val must be > 0 or None, got {clip_val!r}")
    if tf.executing_eagerly():
        pairs = [
            (g, v) for g, v in zip(optimizer.tape.gradient(objective, var_list), var_list) if g is not None
        ]
        if clip_val is None or not pairs:
            return pairs
        grads = [g for g, _ in pairs]
        if all(isinstance(g, _EAGER_TENSOR) for g in grads):
            # All of them in one call: eagerly, each clip is three Python-dispatched ops.
            grads = _clip_each_by_norm(grads, float(clip_val))
        else:  # IndexedSlices and the like
            grads = [_eager_clip_by_norm(g, clip_val) for g in grads]
        return [(g, v) for g, (_, v) in zip(grads, pairs)]
    if hasattr(optimizer, "compute_gradients"):
        grads_and_vars = optimizer.compute_gradients(objective, var_list=var_list)
    else:
        grads_and_vars = list(zip(tf.gradients(objective, var_list), var_list))
    return [
        (tf.clip_by_norm(g, clip_val) if clip_val is not None else g, v)
        for (g, v) in grads_and_vars
        if g is not None
    ]


def _eager_clip_by_norm(grad: TensorType, clip_val: float) -> TensorType:
    """``tf.clip_by_norm(grad, clip_val)`` in the same arithmetic with half its ops.

    ``grad * clip / max(norm, clip)``, as clip_by_norm computes it; its guard
    for a zero norm (which keeps second derivatives finite) is not needed for
    gradients that are only applied.
    """
    if not isinstance(grad, tf.Tensor):  # IndexedSlices and the like: TF's own
        return tf.clip_by_norm(grad, clip_val)
    l2norm = tf.sqrt(tf.reduce_sum(grad * grad, keepdims=True))
    return grad * clip_val / tf.maximum(l2norm, clip_val)


def _clip_all(grads: List[TensorType], clip_val: float) -> List[TensorType]:
    return [_eager_clip_by_norm(g, clip_val) for g in grads]


# ``_eager_clip_by_norm`` over a list of dense gradients, as one traced call (made on first use).
_clip_each_by_norm: Callable[[List[TensorType], float], List[TensorType]] = (
    fast_function(_clip_all) if tf is not None else _clip_all
)


def one_hot(x: TensorType, space: gym.Space) -> TensorType:
    """float32 one-hot (Discrete) or concatenated multi-one-hot (MultiDiscrete) encoding.

    Raises:
        ValueError: For any other space.
    """
    if isinstance(space, gym.spaces.Discrete):
        return tf.one_hot(x, int(space.n), dtype=tf.float32)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return tf.concat(
            [tf.one_hot(x[:, i], int(n), dtype=tf.float32) for i, n in enumerate(space.nvec)], axis=-1
        )
    raise ValueError(f"Unsupported space for `one_hot`: {space}; supported: Discrete, MultiDiscrete")


def reduce_mean_ignore_inf(x: TensorType, axis: Optional[int] = None) -> TensorType:
    """Mean over ``axis`` ignoring entries equal to ``tf.float32.min`` (masked logits)."""
    mask = tf.not_equal(x, tf.float32.min)
    x_zeroed = tf.where(mask, x, tf.zeros_like(x))
    return tf.math.reduce_sum(x_zeroed, axis) / tf.math.reduce_sum(tf.cast(mask, tf.float32), axis)


def scope_vars(scope: Union[str, Any], trainable_only: bool = False) -> List[Any]:
    """Variables of the current (graph-mode) default graph under ``scope``.

    Args:
        scope: A scope name or ``tf1.VariableScope``.
        trainable_only: Only trainable variables.

    Returns:
        The list of variables.
    """
    key = tf1.GraphKeys.TRAINABLE_VARIABLES if trainable_only else tf1.GraphKeys.GLOBAL_VARIABLES
    return tf1.get_collection(key, scope=scope if isinstance(scope, str) else scope.name)


def zero_logps_from_actions(actions: TensorStructType) -> TensorType:
    """A ``[B]`` float32 zeros tensor, B taken from the first action component."""
    action_component = tree.flatten(actions)[0]
    logp_ = tf.zeros_like(action_component, dtype=tf.float32)
    # Reduce [B, ...] actions to one log-prob per batch item.
    while len(logp_.shape) > 1:
        logp_ = logp_[:, 0]
    return logp_


__all__ = [
    "explained_variance",
    "flatten_inputs_to_1d_tensor",
    "get_gpu_devices",
    "get_placeholder",
    "huber_loss",
    "l2_loss",
    "make_tf_callable",
    "minimize_and_clip",
    "one_hot",
    "reduce_mean_ignore_inf",
    "scope_vars",
    "zero_logps_from_actions",
]
