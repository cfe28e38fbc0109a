"""Graph-building helpers of the TF graph-mode policy: devices, Keras models, op ordering.

Each function takes plain data (a config, device names, tensors, a model) and
knows nothing of ``TFPolicy``. Those that create ops must be called with the
policy's graph as the default graph. tensorflow is imported lazily.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, List, Mapping, Optional, Set

from rlpolicy._core.devices import detect_ray_context, plan_devices

logger = logging.getLogger(__name__)


def _tf():
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf(error=True)
    return tf1, tf


def keras_model_class() -> Optional[type]:
    """``tf_keras.Model`` (the Keras TF graph mode works with), or None without it."""
    try:
        from rlpolicy.utils.framework import get_keras

        return get_keras().Model
    except Exception:  # tf_keras missing
        return None


def is_keras_model(model: Any) -> bool:
    """Whether ``model`` is a (tf_keras) Keras model rather than a ModelV2."""
    keras = keras_model_class()
    return keras is not None and isinstance(model, keras)


def plan_tf_devices(config: Mapping, visible_gpus: List[str]) -> List[str]:
    """RLlib 1.11's TF device choice: ``"/cpu:0"`` per (fake) CPU tower, ``"/gpu:i"`` per GPU.

    Args:
        config: The policy config (``num_gpus``, ``num_gpus_per_worker``,
            ``_fake_gpus``, ``worker_index``).
        visible_gpus: The GPU devices TensorFlow sees.

    Raises:
        ValueError: If a Ray worker got fewer GPU ids than it needs.
    """
    ray_mode, ray_gpu_ids = detect_ray_context()
    try:
        plan = plan_devices(config, visible_gpus, ray_mode=ray_mode, ray_gpu_ids=ray_gpu_ids)
    except ValueError as e:
        raise ValueError(str(e).replace("TorchPolicy", "TFPolicy")) from None
    worker = config.get("worker_index", 0) or "local"
    if plan.on_gpu:
        logger.info("TFPolicy (worker=%s) running on %s GPU(s).", worker, plan.num_gpus)
        return [f"/gpu:{i}" for i in range(plan.num_towers)]
    logger.info(
        "TFPolicy (worker=%s) running on %s.", worker, f"{plan.num_gpus} fake-GPUs" if plan.fake else "CPU"
    )
    return ["/cpu:0"] * plan.num_towers


def build_after(deps: Optional[List[Any]], build: Callable[[], Any]) -> Any:
    """``build()`` in the default graph, its ops made to run after ``deps`` (ops or
    tensors), as ``with tf1.control_dependencies(deps): build()`` does.

    ``tf1.control_dependencies`` also writes an attribute into each op of ``deps``;
    for ops a session has already run (a model's batch-norm updates, built before
    the dummy-batch run), TF warns that the change has no effect and that it will
    become an error. Here ``build()`` runs under the control dependency on one new
    no-op instead, which is given ``deps`` as control inputs: ``deps`` stay untouched.
    """
    tf1, tf = _tf()
    if not deps:
        return build()
    graph = tf1.get_default_graph()
    dep_ops = []
    for dep in deps:
        element = graph.as_graph_element(dep)
        dep_ops.append(element.op if isinstance(element, tf.Tensor) else element)
    gate = tf.no_op(name="after_update_ops")
    gate._add_control_inputs(dep_ops)
    with tf1.control_dependencies([gate]):
        return build()


def after_reads(grads_and_vars: List[Any], reads: Iterable[Any]) -> List[Any]:
    """``grads_and_vars`` with each gradient re-issued (``tf.identity``) after every
    tensor of ``reads`` has been computed.

    One session run computes the losses, the stats and the gradients and runs the
    apply op. An apply op waits only for its own gradient, and a gradient does not
    always need every variable read of the forward pass (the gradient of
    ``-log_alpha * c`` does not need log_alpha's value; an actor's update does not
    wait for the actor forward that feeds the critic's target), so without this the
    session may update a variable before another loss or stat has read it: the
    fetched losses and the other gradients then depend on thread timing. Gating the
    gradient tensors (rather than the apply op) keeps ``apply_gradients`` working: it
    feeds the gradient tensors, which cuts everything upstream of them, the gate too.

    ``reads``: tensors, variables or ops (others, e.g. Python numbers, are ignored).
    Pairs with a None gradient are kept as they are.
    """
    _, tf = _tf()
    deps = []
    for r in reads:
        if isinstance(r, tf.IndexedSlices):
            r = r.values
        if isinstance(r, (tf.Tensor, tf.Operation, tf.Variable)):
            deps.append(r)
    if not deps:
        return list(grads_and_vars)
    return build_after(deps, lambda: [(g if g is None else tf.identity(g), v) for g, v in grads_and_vars])


def placeholders_needed_by(roots: Iterable[Any]) -> Set[Any]:
    """The placeholder ops the tensors/ops in ``roots`` (transitively) depend on."""
    tf1, _ = _tf()
    stack = [
        r.op if hasattr(r, "op") and not isinstance(r, tf1.Operation) else r
        for r in roots
        if r is not None and hasattr(r, "graph")
    ]
    seen: Set[Any] = set()
    found: Set[Any] = set()
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if op.type in ("Placeholder", "PlaceholderWithDefault"):
            found.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return found
