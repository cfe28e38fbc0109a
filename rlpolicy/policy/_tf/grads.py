"""Gradient helpers of the TF graph-mode policy and its tower stack.

The only tower logic that is TF-specific: averaging the per-tower
``(gradient, variable)`` lists and clipping by global norm. Device planning,
batch splitting and buffers are framework-neutral (``_core.devices``,
``_core.tower_buffers``).

tensorflow is imported lazily, on first use.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

GradsAndVars = List[Tuple[Any, Any]]


def _tf():
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf(error=True)
    return tf


def clip_by_global_norm(grads_and_vars: GradsAndVars, clip: Optional[float]) -> GradsAndVars:
    """Scales all gradients so that their joint (global) norm is at most ``clip``.

    ``clip`` None or 0 leaves the gradients unchanged.
    """
    if not clip or not grads_and_vars:
        return list(grads_and_vars)
    tf = _tf()
    grads = [g for g, _ in grads_and_vars]
    clipped, _ = tf.clip_by_global_norm(grads, float(clip))
    return [(c, v) for c, (_, v) in zip(clipped, grads_and_vars)]


def average_tower_grads(tower_grads: Sequence[GradsAndVars]) -> GradsAndVars:
    """Averages per-tower ``(grad, var)`` lists variable by variable.

    The towers share their variables, so the pairs are matched by variable.
    A variable that has a gradient in only some towers gets the sum of those
    divided by the number of towers (the missing ones count as zero).
    The order is that of tower 0, followed by variables only later towers have.

    Raises:
        ValueError: If ``tower_grads`` is empty.
    """
    if not tower_grads:
        raise ValueError("average_tower_grads needs the gradients of at least one tower")
    tf = _tf()
    n = len(tower_grads)
    order: List[Any] = []
    by_var: Dict[Any, Tuple[Any, List[Any]]] = {}
    for grads_and_vars in tower_grads:
        for g, v in grads_and_vars:
            if g is None:
                continue
            key = v.ref() if hasattr(v, "ref") else v
            if key not in by_var:
                by_var[key] = (v, [])
                order.append(key)
            by_var[key][1].append(tf.convert_to_tensor(g))
    if n == 1:
        return [(by_var[k][1][0], by_var[k][0]) for k in order]
    out = []
    for key in order:
        var, grads = by_var[key]
        total = grads[0] if len(grads) == 1 else tf.add_n(grads)
        out.append((total / float(n), var))
    return out


def flatten_grad_groups(grads: Any, more_than_one_loss: bool) -> List[Any]:
    """The gradient tensors (or values) as one flat list (per loss group, in order)."""
    if more_than_one_loss:
        return [g for group in grads for g in group]
    return list(grads)
