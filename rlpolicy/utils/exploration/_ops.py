"""Framework plumbing shared by the exploration classes.

The exploration classes in ``rlpolicy.utils.exploration`` each implement one
strategy for torch and for TensorFlow (graph and eager). The small steps they
all need -- a timestep counter that lives in a TF variable, the zero
log-likelihoods returned with non-sampled actions, turning a Python ``explore``
flag into a TF boolean, reading and loading state -- are written once here.

No deep-learning framework is imported at module level.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import tree

from rlpolicy.utils.framework import try_import_tf, try_import_torch

# Same value as ``rlpolicy.utils.torch_utils.FLOAT_MIN`` (RLlib's action-mask
# sentinel): q-values/logits at or below it mark invalid actions.
FLOAT_MIN = -3.4e38

TF_FRAMEWORKS = ("tf", "tf2", "tfe")
EAGER_TF_FRAMEWORKS = ("tf2", "tfe")
SUPPORTED_FRAMEWORKS = ("torch",) + TF_FRAMEWORKS


def is_tf(framework: Optional[str]) -> bool:
    """Whether ``framework`` is TensorFlow (graph or eager)."""
    return framework in TF_FRAMEWORKS


def is_tf_graph(framework: Optional[str]) -> bool:
    """Whether ``framework`` is TF1-style graph mode."""
    return framework == "tf"


def check_framework(
    owner: str, framework: Optional[str], supported: Sequence[str] = SUPPORTED_FRAMEWORKS
) -> None:
    """Raises ValueError naming ``owner`` if ``framework`` is not supported."""
    if framework not in supported:
        raise ValueError(f"{owner}: framework={framework!r} is not supported; use one of {list(supported)}")


def check_box_space(owner: str, action_space: gym.Space) -> None:
    """Raises ValueError naming ``owner`` unless ``action_space`` is a float Box."""
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(
            f"{owner} needs a Box action space, got {action_space}; "
            "use EpsilonGreedy/StochasticSampling for discrete actions"
        )


def check_discrete_space(owner: str, action_space: gym.Space) -> None:
    """Raises ValueError naming ``owner`` unless the space holds discrete actions."""
    leaves = tree.flatten(base_struct_from_space(action_space))
    ok = all(isinstance(s, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) for s in leaves)
    if not ok:
        raise ValueError(f"{owner} needs a Discrete (or nested discrete) action space, got {action_space}")


def base_struct_from_space(space: gym.Space) -> Any:
    """Nests the primitive sub-spaces of a Dict/Tuple space as dicts/tuples."""
    if isinstance(space, gym.spaces.Dict):
        return {k: base_struct_from_space(s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(base_struct_from_space(s) for s in space.spaces)
    return space


# ---------------------------------------------------------------------------
# Timestep / state variables.
# ---------------------------------------------------------------------------
def new_state_var(value: Any, framework: str, name: str, dtype: Any = np.int64) -> Any:
    """A piece of exploration state: a TF variable for tf/tf2, else a Python value.

    Graph mode: the variable is created in the current default graph (the
    policy's ``tf1.Graph``); it is non-trainable and lands in the global
    variables collection, so the policy's ``global_variables_initializer``
    initializes it. Names are uniquified by TF, so several explorations can
    share a graph.
    """
    if not is_tf(framework):
        return value
    tf1, tf, _ = try_import_tf(error=True)
    return tf1.Variable(np.asarray(value, dtype=dtype), name=name, trainable=False, dtype=tf.as_dtype(dtype))


def tf_advance_timestep(var: Any, timestep: Any) -> Any:
    """Stores the current timestep in ``var`` and returns it (int64 tensor).

    ``timestep=None`` means "one more than last time". The returned tensor is
    read from the assignment, so in graph mode every op that uses it depends on
    (and thereby triggers) the state update.
    """
    _, tf, _ = try_import_tf(error=True)
    if timestep is None:
        updated = var.assign_add(np.int64(1), read_value=True)
    else:
        updated = var.assign(tf.cast(timestep, tf.int64), read_value=True)
    return tf.identity(updated)


def torch_next_timestep(last: Any, timestep: Any) -> int:
    """The current timestep on the Python side: ``timestep`` or ``last + 1``."""
    if timestep is None:
        return int(last) + 1
    return int(timestep)


def tf_bool(explore: Any) -> Any:
    """``explore`` (Python bool or tensor) as a TF boolean tensor."""
    _, tf, _ = try_import_tf(error=True)
    if isinstance(explore, (bool, np.bool_)):
        return tf.constant(bool(explore), dtype=tf.bool)
    return tf.cast(explore, tf.bool)


def to_numpy(value: Any) -> Any:
    """Converts tf/torch tensors and variables to numpy; leaves the rest alone."""
    torch, _ = try_import_torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return value.numpy()
    return value


def load_tf_var(
    var: Any, value: Any, framework: str, sess: Any = None, loaders: Optional[GraphLoaders] = None
) -> None:
    """Writes ``value`` into TF variable ``var`` (through ``sess`` in graph mode, with
    the owner's ``loaders``; None: a loader built for this call).

    Raises:
        ValueError: In graph mode when no session is given and none is the default.
    """
    if is_tf_graph(framework):
        tf1, _, _ = try_import_tf(error=True)
        sess = sess or tf1.get_default_session()
        if sess is None:
            raise ValueError(
                "set_state() of a framework='tf' exploration needs the policy's tf Session: "
                "pass sess=policy.get_session()"
            )
        placeholder, assign_op = (loaders or GraphLoaders()).get(var, sess.graph)
        dtype = placeholder.dtype.as_numpy_dtype
        sess.run(assign_op, {placeholder: np.asarray(value, dtype=dtype)})
    else:
        var.assign(np.asarray(value, dtype=var.dtype.as_numpy_dtype))


def scheduled_state(framework: str, last_timestep: Any, schedule: Any, key: str) -> dict:
    """``{key: schedule(last_timestep), "last_timestep": ...}`` without a session.

    Graph mode gives graph tensors (to run through a session), the other
    frameworks numpy / Python values.
    """
    value = schedule(last_timestep)
    if is_tf_graph(framework):
        return {key: value, "last_timestep": last_timestep.read_value()}
    return {key: to_numpy(value), "last_timestep": to_numpy(last_timestep)}


def restore_timestep(
    owner: str,
    framework: str,
    last_timestep: Any,
    state: dict,
    sess: Any = None,
    loaders: Optional[GraphLoaders] = None,
) -> Any:
    """Loads ``state["last_timestep"]``; returns the new value of the timestep attribute.

    Raises:
        KeyError: Naming ``owner`` if the state lacks "last_timestep".
    """
    if "last_timestep" not in state:
        raise KeyError(f"{owner}.set_state: state has no 'last_timestep' key (got keys {sorted(state)})")
    if is_tf(framework):
        load_tf_var(last_timestep, state["last_timestep"], framework, sess, loaders)
        return last_timestep
    return int(state["last_timestep"])


def per_worker_value(
    owner: str, num_workers: Optional[int], worker_index: Optional[int], index_offset: int, check_index: bool
) -> Optional[float]:
    """The Ape-X per-worker constant ``0.4 ** (1 + (i - offset) / (n - 1) * 7)``.

    None when ``num_workers`` is 0 (or None): the regular schedule applies.
    The local worker (index 0) gets 0.0. ``n - 1`` is taken as 1 for one worker.

    Raises:
        ValueError: If ``check_index`` and ``worker_index > num_workers``.
    """
    if not num_workers or num_workers <= 0:
        return None
    worker_index = int(worker_index or 0)
    if check_index and worker_index > num_workers:
        raise ValueError(f"{owner}: worker_index={worker_index} is larger than num_workers={num_workers}")
    if worker_index == 0:
        return 0.0
    denominator = float(num_workers - 1) if num_workers > 1 else 1.0
    return 0.4 ** (1 + (worker_index - index_offset) / denominator * 7)


def per_worker_constant(
    owner: str,
    num_workers: Optional[int],
    worker_index: Optional[int],
    framework: str,
    index_offset: int,
    check_index: bool = False,
) -> Any:
    """A ConstantSchedule at ``per_worker_value(...)``, or None without remote workers."""
    value = per_worker_value(owner, num_workers, worker_index, index_offset, check_index)
    if value is None:
        return None
    from rlpolicy.utils.schedules import ConstantSchedule

    return ConstantSchedule(value, framework=framework)


class GraphLoaders:
    """An exploration's (placeholder, assign op) pairs that write a value into each of
    its graph variables, built once per variable (so restoring state adds no ops to
    the graph after the first time). Copies and pickles start empty."""

    def __init__(self) -> None:
        self.loaders: Dict[str, Any] = {}

    def get(self, var: Any, graph: Any) -> Any:
        loader = self.loaders.get(var.name)
        if loader is None or loader[1].graph is not graph:
            tf1, _, _ = try_import_tf(error=True)
            with graph.as_default():
                placeholder = tf1.placeholder(var.dtype.base_dtype, var.shape)
                loader = (placeholder, tf1.assign(var, placeholder))
            self.loaders[var.name] = loader
        return loader

    def __deepcopy__(self, memo: Dict[int, Any]) -> "GraphLoaders":
        return GraphLoaders()

    def __reduce__(self) -> Tuple[type, Tuple[()]]:
        return (GraphLoaders, ())


# ---------------------------------------------------------------------------
# Log-likelihood placeholders and batch sizes.
# ---------------------------------------------------------------------------
def tf_zero_logps(actions: Any) -> Any:
    """Float32 zeros with one entry per batch row of (possibly nested) ``actions``."""
    _, tf, _ = try_import_tf(error=True)
    leaf = tf.convert_to_tensor(tree.flatten(actions)[0])
    return tf.zeros(tf.shape(leaf)[:1], dtype=tf.float32)


def torch_zero_logps(actions: Any, device: Any = None) -> Any:
    """Float32 zeros with one entry per batch row of (possibly nested) ``actions``."""
    torch, _ = try_import_torch(error=True)
    leaf = tree.flatten(actions)[0]
    if device is None and isinstance(leaf, torch.Tensor):
        device = leaf.device
    return torch.zeros(tuple(leaf.shape[:1]), dtype=torch.float32, device=device)


def inputs_are_batched(action_dist: Any, action_space: gym.Space, model: Any) -> bool:
    """Whether ``action_dist.inputs`` carries a leading batch dimension.

    As RLlib's ``Random`` does it: compare the rank of the inputs with the
    rank the distribution class requires of one model output. Distributions
    that cannot tell are taken to be batched.
    """
    required = getattr(action_dist, "required_model_output_shape", None)
    if required is None:
        return True
    try:
        req = required(action_space, getattr(model, "model_config", None))
    except (NotImplementedError, TypeError):
        return True
    req_rank = len(req) if isinstance(req, (tuple, list)) else 1
    return len(action_dist.inputs.shape) == req_rank + 1


# ---------------------------------------------------------------------------
# Uniform random actions for any (nested) action space.
# ---------------------------------------------------------------------------
def numpy_random_actions(action_space: gym.Space, batch_size: Optional[int]) -> Any:
    """``batch_size`` samples of ``action_space`` (via ``Space.sample()``), stacked per leaf.

    ``batch_size=None`` returns one unbatched sample.
    """
    if batch_size is None:
        return tree.map_structure(np.asarray, _as_struct(action_space.sample()))
    samples = [_as_struct(action_space.sample()) for _ in range(batch_size)]
    return tree.map_structure(lambda *xs: np.stack(xs), *samples)


def _as_struct(sample: Any) -> Any:
    # gymnasium returns OrderedDicts for Dict spaces; use plain dicts like the space struct.
    if isinstance(sample, dict):
        return {k: _as_struct(v) for k, v in sample.items()}
    if isinstance(sample, tuple):
        return tuple(_as_struct(v) for v in sample)
    return sample


def tf_random_actions(action_space: gym.Space, batch_size: Any) -> Any:
    """TF ops drawing ``batch_size`` uniform actions from each leaf of ``action_space``.

    Bounded Box dimensions are uniform in [low, high] (integer Boxes
    inclusive), unbounded ones standard normal, half-bounded ones follow
    gymnasium's shifted exponential; Discrete, MultiDiscrete and MultiBinary are uniform.
    ``batch_size=None`` draws one unbatched action.
    """
    struct = base_struct_from_space(action_space)
    return tree.map_structure(lambda s: _tf_random_leaf(s, batch_size), struct)


def _tf_shape(batch_size: Any, tail: Sequence[int]) -> Any:
    """``[batch_size, *tail]`` as an int32 shape tensor (``tail`` alone if unbatched)."""
    _, tf, _ = try_import_tf(error=True)
    tail = tf.constant(list(tail), dtype=tf.int32)
    if batch_size is None:
        return tail
    return tf.concat([tf.reshape(tf.cast(batch_size, tf.int32), [1]), tail], 0)


def _tf_random_leaf(space: gym.Space, batch_size: Any) -> Any:
    _, tf, _ = try_import_tf(error=True)
    if isinstance(space, gym.spaces.Discrete):
        draw = tf.random.uniform(_tf_shape(batch_size, ()), minval=0, maxval=int(space.n), dtype=tf.int64)
        return tf.cast(draw + int(space.start), space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, dtype=np.float64)
        start = np.asarray(getattr(space, "start", 0), dtype=np.float64)
        unit = tf.random.uniform(_tf_shape(batch_size, nvec.shape), dtype=tf.float64)
        draw = tf.minimum(tf.floor(unit * nvec), nvec - 1.0)
        return tf.cast(draw + start, space.dtype)
    if isinstance(space, gym.spaces.Box):
        return _tf_random_box(space, _tf_shape(batch_size, space.shape))
    if isinstance(space, gym.spaces.MultiBinary):
        bits = tf.random.uniform(_tf_shape(batch_size, space.shape), 0, 2, dtype=tf.int64)
        return tf.cast(bits, space.dtype)
    raise ValueError(
        f"Random exploration cannot sample action space component {space}; "
        "supported: Box, Discrete, MultiDiscrete, MultiBinary and Dict/Tuple of these"
    )


def _tf_random_box(space: gym.spaces.Box, shape: Any) -> Any:
    """Per-dimension draws mirroring ``gymnasium.spaces.Box.sample``."""
    _, tf, _ = try_import_tf(error=True)
    is_int = np.issubdtype(space.dtype, np.integer)
    low = space.low.astype(np.float64)
    high = space.high.astype(np.float64) + (1.0 if is_int else 0.0)
    below, above = space.bounded_below, space.bounded_above
    both = below & above
    uniform = tf.random.uniform(shape, dtype=tf.float64) * np.where(both, high - low, 1.0) + np.where(
        both, low, 0.0
    )
    normal = tf.random.normal(shape, dtype=tf.float64)
    expo = -tf.math.log1p(-tf.random.uniform(shape, dtype=tf.float64))
    from_low = np.where(below, low, 0.0) + expo
    from_high = np.where(above, high, 0.0) - expo
    out = tf.where(both, uniform, tf.where(below, from_low, tf.where(above, from_high, normal)))
    if is_int:
        out = tf.minimum(tf.floor(out), space.high.astype(np.float64))
    return tf.cast(out, space.dtype)
