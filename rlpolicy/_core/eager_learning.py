"""Loss, gradient and update steps of eager TF policies.

These functions run inside (or outside) ``tf.function``: they take the policy
and tensors, never convert to numpy, and create no variables. The policy
class (``rlpolicy.policy.eager_tf_policy``) decides whether to trace them.

Gradient layout (RLlib 1.11): with ``_tf_policy_handles_more_than_one_loss``
the gradients are a list (one per optimizer/loss) of lists (one per model
trainable variable); otherwise a single list, and only the first optimizer
steps.

Tensorflow is imported lazily.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import tree

from rlpolicy.utils import force_list
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY

GradsAndVars = List[Tuple[Any, Any]]


def _tf() -> Any:
    from rlpolicy.utils.framework import try_import_tf

    return try_import_tf(error=True)[1]


class TapeOptimizer:
    """Stands in for an optimizer in ``compute_gradients_fn`` (RLlib's ``_OptimizerWrapper``).

    ``compute_gradients(loss, var_list)`` returns ``[(grad, var), ...]`` from
    the ``tf.GradientTape`` that recorded the losses, so the same
    ``compute_gradients_fn`` works in graph mode and eagerly.
    """

    def __init__(self, tape: Any, default_vars: List[Any]):
        self.tape = tape
        self.default_vars = default_vars

    def compute_gradients(self, loss: Any, var_list: Optional[List[Any]] = None) -> GradsAndVars:
        """Gradients of ``loss`` w.r.t. ``var_list`` (default: the model's trainables)."""
        var_list = list(var_list) if var_list is not None else self.default_vars
        return list(zip(self.tape.gradient(loss, var_list), var_list))


def multi_loss(policy: Any) -> bool:
    """Whether the policy runs one optimizer per loss term."""
    return bool(policy.config.get("_tf_policy_handles_more_than_one_loss"))


def trainable_variables(policy: Any) -> List[Any]:
    """The model's trainable variables (TFModelV2 method or Keras property)."""
    variables = policy.model.trainable_variables
    return list(variables() if callable(variables) else variables)


def compute_losses(policy: Any, samples: Any) -> List[Any]:
    """Runs the loss (and the model's ``custom_loss``) on ``samples``.

    Raises:
        ValueError: If the policy has no loss, or (several optimizers) the
            number of losses differs from the number of optimizers.
    """
    if policy._loss is None:
        raise ValueError(f"{type(policy).__name__} has no loss: pass loss_fn to "
                         "build_eager_tf_policy (or build_tf_policy) or override loss()")
    losses = force_list(policy._loss(policy, policy.model, policy.dist_class, samples))
    custom = getattr(policy.model, "custom_loss", None)
    if callable(custom):
        losses = force_list(custom(losses, samples))
    if multi_loss(policy) and len(losses) != len(policy._optimizers):
        raise ValueError(f"loss_fn returned {len(losses)} losses for {len(policy._optimizers)} "
                         "optimizers; return one per optimizer")
    return losses


def clip_grads(grads_and_vars: GradsAndVars, clip: float) -> GradsAndVars:
    """Clips the gradients of ``grads_and_vars`` jointly by global norm ``clip``."""
    tf = _tf()
    idx = [i for i, (g, _) in enumerate(grads_and_vars) if g is not None]
    clipped, _ = tf.clip_by_global_norm([grads_and_vars[i][0] for i in idx], clip)
    out = list(grads_and_vars)
    for i, g in zip(idx, clipped):
        out[i] = (g, grads_and_vars[i][1])
    return out


def gradients_and_stats(policy: Any, samples: Any, clip: bool = True
                        ) -> Tuple[Any, Any, Dict[str, Any]]:
    """Loss, gradients and learner stats for one batch.

    Args:
        policy: The eager policy.
        samples: The (tensor) train batch.
        clip: Clip by ``config["grad_clip"]`` (when set) in the default
            gradient computation; the towers path clips their mean instead.

    Returns:
        ``(grads_and_vars, grads, stats)`` in RLlib's single- or multi-loss layout.
    """
    from rlpolicy._core.eager_tracing import disallow_variable_creation

    tf = _tf()
    hooks = policy._hooks
    variables = trainable_variables(policy)
    # Persistent when gradients are taken more than once (RLlib 1.11 forgets the
    # several-losses case and then fails on the second loss).
    persistent = hooks.compute_gradients_fn is not None or multi_loss(policy)
    with tf.variable_creator_scope(disallow_variable_creation):
        with tf.GradientTape(persistent=persistent) as tape:
            losses = compute_losses(policy, samples)
    if hooks.compute_gradients_fn is not None:
        opt = TapeOptimizer(tape, variables)
        if multi_loss(policy):
            grads_and_vars = hooks.compute_gradients_fn(policy, [opt] * len(losses), losses)
        else:
            grads_and_vars = [hooks.compute_gradients_fn(policy, opt, losses[0])]
    else:
        grads_and_vars = [list(zip(tape.gradient(loss, variables), variables)) for loss in losses]
        grad_clip = policy.config.get("grad_clip")
        if clip and grad_clip:
            grads_and_vars = [clip_grads(gv, grad_clip) for gv in grads_and_vars]
    if multi_loss(policy):
        grads = [[g for g, _ in gv] for gv in grads_and_vars]
    else:
        grads_and_vars = grads_and_vars[0]
        grads = [g for g, _ in grads_and_vars]
    return grads_and_vars, grads, learn_stats(policy, samples, grads)


def learn_stats(policy: Any, samples: Any, grads: Any) -> Dict[str, Any]:
    """``{learner_stats: stats_fn(...)}`` plus extra learn fetches and gradient stats."""
    hooks = policy._hooks
    fetches: Dict[str, Any] = {
        LEARNER_STATS_KEY: _read_variables(dict(hooks.stats_fn(policy, samples)))
        if hooks.stats_fn else {}}
    if hooks.extra_learn_fetches_fn is not None:
        fetches.update(dict(hooks.extra_learn_fetches_fn(policy)))
    if hooks.grad_stats_fn is not None:
        fetches.update(dict(hooks.grad_stats_fn(policy, samples, grads)))
    return fetches


def _read_variables(stats: Dict[str, Any]) -> Dict[str, Any]:
    """Variables among the stats (SAC's ``log_alpha``) read now: the value when
    ``stats_fn`` ran (before the update), as torch reports it, not a live
    variable that the update changes before the stats are converted."""
    tf = _tf()
    return tree.map_structure(
        lambda x: x.read_value() if isinstance(x, tf.Variable) else x, stats)


def zip_with_variables(policy: Any, grads: Any) -> Any:
    """Pairs gradients (in RLlib's layout) with the model's trainable variables.

    Raises:
        ValueError: If a gradient list's length differs from the number of
            trainable variables.
    """
    variables = trainable_variables(policy)
    lists = grads if multi_loss(policy) else [grads]
    paired = []
    for gl in lists:
        gl = list(gl)
        if len(gl) != len(variables):
            raise ValueError(f"apply_gradients got {len(gl)} gradients for the model's "
                             f"{len(variables)} trainable variables; pass one (or None) per variable")
        paired.append(list(zip(gl, variables)))
    return paired if multi_loss(policy) else paired[0]


def apply_grads_and_vars(policy: Any, grads_and_vars: Any) -> None:
    """Steps the optimizer(s) (or runs ``apply_gradients_fn``) on ``grads_and_vars``."""
    hooks = policy._hooks
    if hooks.apply_gradients_fn is not None:
        opt = policy._optimizers if multi_loss(policy) else policy._optimizer
        hooks.apply_gradients_fn(policy, opt, grads_and_vars)
    elif multi_loss(policy):
        for opt, gv in zip(policy._optimizers, grads_and_vars):
            opt.apply_gradients([(g, v) for g, v in gv if g is not None])
    else:
        policy._optimizer.apply_gradients([(g, v) for g, v in grads_and_vars if g is not None])


def mean_grads(tower_grads: List[Any]) -> Any:
    """Averages per-tower gradients leaf by leaf (None where any tower has None)."""
    tf = _tf()

    def mean(*leaves: Any) -> Any:
        if any(g is None for g in leaves):
            return None
        return tf.add_n([tf.convert_to_tensor(g) for g in leaves]) / float(len(leaves))

    return tree.map_structure(mean, *tower_grads, check_types=False)


def clip_grad_lists(policy: Any, grads: Any) -> Any:
    """Clips (by ``config["grad_clip"]``, if set) gradients in RLlib's layout."""
    grad_clip = policy.config.get("grad_clip")
    if not grad_clip:
        return grads
    lists = grads if multi_loss(policy) else [grads]
    out = [[g for g, _ in clip_grads([(g, None) for g in gl], grad_clip)] for gl in lists]
    return out if multi_loss(policy) else out[0]


__all__ = ["TapeOptimizer", "multi_loss", "trainable_variables", "compute_losses",
           "clip_grads", "gradients_and_stats", "learn_stats", "zip_with_variables",
           "apply_grads_and_vars", "mean_grads", "clip_grad_lists"]
