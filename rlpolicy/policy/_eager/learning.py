"""Gradient helpers of the eager TF policy's learning path.

``EagerTFPolicy`` runs its loss under a ``tf.GradientTape`` and steps its
optimizers (its ``_gradients_and_stats`` / ``_apply_grads_and_vars``); these
helpers take the tape, losses, gradients, variables and optimizers, never the
policy, and run inside or outside ``tf.function`` (no numpy, no variables
created).

Gradient layout (RLlib 1.11): with ``_tf_policy_handles_more_than_one_loss``
(``multi`` below) the gradients are a list (one per optimizer/loss) of lists
(one per model trainable variable); otherwise a single list, and only the
first optimizer steps.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import tree

from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.tf_utils import tf_log_filtered

tf1, tf, _ = try_import_tf()

GradsAndVars = List[Tuple[Any, Any]]


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


def trainable_variables(model: Any) -> List[Any]:
    """``model``'s trainable variables (TFModelV2 method or Keras property)."""
    variables = model.trainable_variables
    return list(variables() if callable(variables) else variables)


def clip_grads(grads_and_vars: GradsAndVars, clip: float) -> GradsAndVars:
    """Clips the gradients of ``grads_and_vars`` jointly by global norm ``clip``."""
    idx = [i for i, (g, _) in enumerate(grads_and_vars) if g is not None]
    clipped, _ = tf.clip_by_global_norm([grads_and_vars[i][0] for i in idx], clip)
    out = list(grads_and_vars)
    for i, g in zip(idx, clipped):
        out[i] = (g, grads_and_vars[i][1])
    return out


def tape_gradients(
    tape: Any, losses: Sequence[Any], variables: List[Any], grad_clip: Optional[float]
) -> List[GradsAndVars]:
    """One ``[(grad, var), ...]`` list per loss from ``tape``, each clipped by
    global norm ``grad_clip`` when that is set (truthy)."""
    out = [list(zip(tape.gradient(loss, variables), variables)) for loss in losses]
    return [clip_grads(gv, grad_clip) for gv in out] if grad_clip else out


def read_variables(stats: Dict[str, Any]) -> Dict[str, Any]:
    """``stats`` with its variables (SAC's ``log_alpha``) read now: the value when
    the stats were computed (before the update), as torch reports it, not a live
    variable that the update changes before the stats are converted."""
    return tree.map_structure(lambda x: x.read_value() if isinstance(x, tf.Variable) else x, stats)


def zip_with_variables(grads: Any, variables: List[Any], multi: bool) -> Any:
    """Pairs gradients (in RLlib's layout) with ``variables``.

    Raises:
        ValueError: If a gradient list's length differs from the number of
            variables.
    """
    lists = grads if multi else [grads]
    paired = []
    for gl in lists:
        gl = list(gl)
        if len(gl) != len(variables):
            raise ValueError(
                f"apply_gradients got {len(gl)} gradients for the model's "
                f"{len(variables)} trainable variables; pass one (or None) per variable"
            )
        paired.append(list(zip(gl, variables)))
    return paired if multi else paired[0]


def step_optimizers(
    optimizers: Sequence[Any], grads_and_vars: Any, multi: bool, steps: Optional["ApplySteps"] = None
) -> None:
    """Applies ``grads_and_vars`` (None gradients skipped): one list per
    optimizer with ``multi``, else one list for the first optimizer. ``steps``
    holds the owner's traced updates (None: each optimizer steps eagerly)."""
    if multi:
        for opt, gv in zip(optimizers, grads_and_vars):
            apply_gradients(opt, [(g, v) for g, v in gv if g is not None], steps)
    else:
        apply_gradients(optimizers[0], [(g, v) for g, v in grads_and_vars if g is not None], steps)


class ApplySteps:
    """A policy's traced optimizer updates: per optimizer and list of variables it
    steps, the ``tf.function`` running the update. Copies and pickles start empty
    (a copy traces its own steps for its own optimizers)."""

    def __init__(self) -> None:
        self.steps: Dict[Tuple[int, ...], Tuple[Any, Callable]] = {}

    def get(self, optimizer: Any, variables: List[Any]) -> Callable:
        key = (id(optimizer),) + tuple(id(v) for v in variables)
        found = self.steps.get(key)
        if found is None or found[0]() is not optimizer:  # (an id reused by a new optimizer)
            found = self.steps[key] = (
                weakref.ref(optimizer),
                _traced_apply(weakref.ref(optimizer), variables),
            )
        return found[1]

    def __deepcopy__(self, memo: Dict[int, Any]) -> "ApplySteps":
        return ApplySteps()

    def __reduce__(self) -> Tuple[type, Tuple[()]]:
        return (ApplySteps, ())


def apply_gradients(optimizer: Any, grads_and_vars: GradsAndVars, steps: Optional[ApplySteps] = None) -> None:
    """``optimizer.apply_gradients(grads_and_vars)``; eagerly, for tf_keras' own
    optimizer classes, as one cached ``tf.function`` per variable list.

    An eager Keras optimizer runs its per-variable update as a dozen Python-level
    ops per variable (Adam: 24 ms for a 2x256 MLP with a Q-head, against 2 ms
    traced). The update is the optimizer's own code either way and reads its
    hyperparameters from its variables, so the traced step computes the same;
    it is traced once per optimizer and variable list (kept in ``steps``,
    the owner's ApplySteps; without one the step runs eagerly). Subclasses of those
    optimizers (user code), other optimizers and non-dense gradients
    (``IndexedSlices``) are stepped eagerly as they are.
    """
    if not (
        steps is not None
        and tf.executing_eagerly()
        and _builtin_keras_optimizer(optimizer)
        and all(isinstance(g, tf.Tensor) for g, _ in grads_and_vars)
    ):
        optimizer.apply_gradients(grads_and_vars)
        return
    known = len(steps.steps)
    step = steps.get(optimizer, [v for _, v in grads_and_vars])
    grads = [g for g, _ in grads_and_vars]
    if len(steps.steps) != known:
        # The first call traces (twice: the optimizer makes its slot variables). TF's
        # "triggered tf.function retracing" warning counts the traces of every
        # optimizer's step together (its key is the code object), so a process that
        # builds a few policies would see it without any step tracing twice.
        with tf_log_filtered("triggered tf.function retracing"):
            step(grads)
        return
    step(grads)


def _traced_apply(optimizer_ref: Any, variables: List[Any]) -> Callable:
    """A ``tf.function(grads)`` stepping the referenced optimizer on ``variables``."""

    def apply(grads: List[Any]) -> None:
        optimizer_ref().apply_gradients(zip(grads, variables))

    return tf.function(apply, autograph=False)


def _builtin_keras_optimizer(optimizer: Any) -> bool:
    """Whether ``optimizer``'s class is one of tf_keras' (or Keras') own."""
    module = type(optimizer).__module__
    return module.startswith(("tf_keras.src.optimizers.", "keras.src.optimizers.", "keras.optimizers."))


def mean_grads(tower_grads: List[Any]) -> Any:
    """Averages per-tower gradients leaf by leaf (None where any tower has None)."""

    def mean(*leaves: Any) -> Any:
        if any(g is None for g in leaves):
            return None
        return tf.add_n([tf.convert_to_tensor(g) for g in leaves]) / float(len(leaves))

    return tree.map_structure(mean, *tower_grads, check_types=False)


def clip_grad_lists(grads: Any, grad_clip: Optional[float], multi: bool) -> Any:
    """Clips gradients in RLlib's layout by global norm ``grad_clip`` (per
    list), or returns them as they are when ``grad_clip`` is not set."""
    if not grad_clip:
        return grads
    lists = grads if multi else [grads]
    out = [[g for g, _ in clip_grads([(g, None) for g in gl], grad_clip)] for gl in lists]
    return out if multi else out[0]


__all__ = [
    "TapeOptimizer",
    "trainable_variables",
    "clip_grads",
    "tape_gradients",
    "read_variables",
    "zip_with_variables",
    "step_optimizers",
    "mean_grads",
    "clip_grad_lists",
]
