"""Construction steps of the TF graph-mode ``TFPolicy``: devices, loss, gradients, apply op.

``TFPolicy`` keeps RLlib's (private) method names (``_initialize_loss`` ...)
and delegates their bodies here. Every function that creates graph ops must
be called with the policy's graph as the default graph.

tensorflow is imported lazily (``_core`` never imports it at module level).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Tuple

from rlpolicy._core.devices import detect_ray_context, plan_devices
from rlpolicy._core.tf_grads import clip_by_global_norm

if TYPE_CHECKING:  # pragma: no cover
    from rlpolicy.policy.tf_policy import TFPolicy

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
    logger.info("TFPolicy (worker=%s) running on %s.", worker,
                f"{plan.num_gpus} fake-GPUs" if plan.fake else "CPU")
    return ["/cpu:0"] * plan.num_towers


def initialize_loss(policy: "TFPolicy", losses: List[Any],
                    loss_inputs: List[Tuple[str, Any]]) -> None:
    """Implements ``TFPolicy._initialize_loss``: loss inputs, the model's custom
    loss, optimizers, gradients and (except for towers) the apply op, variable
    initialization and the optimizer-state holder."""
    from rlpolicy._core import tf_feeds
    from rlpolicy._core.tf_variables import initialize_uninitialized
    from rlpolicy.utils import force_list

    tf_feeds.set_loss_inputs(policy, loss_inputs)
    if policy.model is not None and not is_keras_model(policy.model):
        policy._losses = force_list(policy.model.custom_loss(losses, policy._loss_input_dict))
        policy._stats_fetches.update({"model": policy.model.metrics()})
    else:
        policy._losses = losses
    policy._loss = policy._losses[0] if policy._losses else None
    if not policy._optimizers:
        policy._optimizers = force_list(policy.optimizer())
        policy._optimizer = policy._optimizers[0] if policy._optimizers else None
    build_grads(policy)
    if not policy._is_tower:
        build_main_apply_op(policy)
        initialize_uninitialized(policy.get_session())
        policy._refresh_optimizer_variables()


def build_grads(policy: "TFPolicy") -> None:
    """Sets ``_grads_and_vars`` / ``_grads`` from ``policy.gradients()``.

    Pairs without a gradient are dropped. Gradients are clipped by
    ``config["grad_clip"]`` (global norm, per loss), except in towers, whose
    stack clips the averaged gradient instead.
    """
    clip = None if policy._is_tower else policy.config.get("grad_clip")
    if policy.config["_tf_policy_handles_more_than_one_loss"]:
        groups = policy.gradients(policy._optimizers, policy._losses)
        policy._grads_and_vars = [
            clip_by_global_norm([(g, v) for g, v in grp if g is not None], clip) for grp in groups]
        policy._grads = [[g for g, _ in grp] for grp in policy._grads_and_vars]
    else:
        pairs = policy.gradients(policy._optimizer, policy._loss)
        policy._grads_and_vars = clip_by_global_norm([(g, v) for g, v in pairs if g is not None],
                                                     clip)
        policy._grads = [g for g, _ in policy._grads_and_vars]


def build_main_apply_op(policy: "TFPolicy") -> None:
    """The single-device apply op, run after the update ops (e.g. batch norm).

    RLlib 1.11 builds it only on a single device; here it is built for every
    device layout, so ``learn_on_batch`` also works with several towers.
    """
    tf1, _ = _tf()
    if not policy._update_ops:
        policy._update_ops = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS,
                                                scope=tf1.get_variable_scope().name)
    multi = policy.config["_tf_policy_handles_more_than_one_loss"]
    policy._apply_op = build_after(policy._update_ops, lambda: policy.build_apply_op(
        optimizer=policy._optimizers if multi else policy._optimizer,
        grads_and_vars=policy._grads_and_vars))


def build_after(deps: Optional[List[Any]], build: Any) -> Any:
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


def init_learning_state(policy: "TFPolicy", update_ops: Optional[List[Any]]) -> None:
    """Sets the (empty) learning attributes of a TFPolicy, RLlib 1.11's names,
    plus the tower buffers (``num_multi_gpu_tower_stacks`` of them)."""
    from rlpolicy._core.tower_buffers import TowerBuffers

    policy._update_ops = update_ops
    policy._apply_op = None
    policy._stats_fetches = {}
    policy._optimizers = []
    policy._optimizer = None  # RLlib: backward compatibility (the first optimizer).
    policy._grads_and_vars = []
    policy._grads = []
    policy._variables = None  # TFVariables of the model, built on first use
    policy._optimizer_variables = None  # TFVariables of the optimizers' state
    policy._losses = []
    policy._loss = None
    policy._loss_input_dict = {}
    policy._loss_input_dict_no_rnn = {}
    policy._saver = None
    if not hasattr(policy, "_is_tower"):
        policy._is_tower = False
    num_buffers = policy.config.get("num_multi_gpu_tower_stacks", 1)
    policy._tower_buffers = TowerBuffers(num_buffers, len(policy.devices))
    policy.multi_gpu_tower_stacks = []


def set_action_tensors(policy: "TFPolicy", *, obs_input: Any, sampled_action: Any,
                       sampled_action_logp: Any, action_input: Any, dist_inputs: Any,
                       dist_class: Optional[type], state_inputs: Optional[List[Any]],
                       state_outputs: Optional[List[Any]], prev_action_input: Any,
                       prev_reward_input: Any, seq_lens: Any, explore: Any,
                       timestep: Any) -> None:
    """Sets the acting tensors of a TFPolicy (RLlib 1.11's attribute names); builds
    the ``is_exploring`` / ``timestep`` placeholders (with defaults) when not given.

    Raises:
        ValueError: If ``state_inputs`` are given without ``seq_lens``.
    """
    tf1, tf = _tf()
    policy._obs_input = obs_input
    policy._prev_action_input = prev_action_input
    policy._prev_reward_input = prev_reward_input
    policy._sampled_action = sampled_action
    policy._is_training = policy._get_is_training_placeholder()
    policy._is_exploring = explore if explore is not None else \
        tf1.placeholder_with_default(True, (), name="is_exploring")
    policy._sampled_action_logp = sampled_action_logp
    policy._sampled_action_prob = (tf.math.exp(sampled_action_logp)
                                   if sampled_action_logp is not None else None)
    policy._action_input = action_input
    policy._dist_inputs = dist_inputs
    policy.dist_class = dist_class
    policy._state_inputs = list(state_inputs or [])
    policy._state_outputs = list(state_outputs or [])
    policy._seq_lens = seq_lens
    if policy._state_inputs and policy._seq_lens is None:
        raise ValueError("seq_lens tensor must be given if state inputs are defined")
    policy._timestep = timestep if timestep is not None else tf1.placeholder_with_default(
        tf.zeros((), dtype=tf.int64), (), name="timestep")


def placeholder_of(policy: Any, name: str) -> Any:
    """``TFPolicy.get_placeholder``: the acting input or loss input placeholder of ``name``."""
    acting = {"obs": "_obs_input", "prev_actions": "_prev_action_input",
              "prev_rewards": "_prev_reward_input"}
    if name in acting:
        return getattr(policy, acting[name])
    if not policy._loss_input_dict:
        raise ValueError("You need to populate `self._loss_input_dict` before "
                         "`get_placeholder()` can be called")
    if name not in policy._loss_input_dict:
        raise KeyError(f"get_placeholder: no loss input {name!r}; loss inputs are "
                       f"{sorted(policy._loss_input_dict)}")
    return policy._loss_input_dict[name]
