"""Variables of eager TF policies: naming, weight checks, optimizer state.

As in RLlib 1.11, an eager policy's ``get_weights()`` and ``get_state()["weights"]``
are a list in variable order, assigned by position. ``get_weights(as_dict=True)``
is a dict keyed like ``TFModelV2.variables(as_dict=True)`` (attribute path plus
variable name, e.g. ``"base_model.fc_1.kernel:0"``); such a dict (also the
weights of older rlpolicy checkpoints) whose keys differ from this model's only
in Keras' per-process layer numbering (``dense_3`` / ``dense``) is taken by
position. ``set_weights`` checks the count and every shape before it assigns
anything: a failed call leaves the policy unchanged.

Everything here takes models, variables, optimizers and arrays, never the
policy; nothing imports tensorflow.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from rlpolicy._core.checkpoint_checks import check_weight_shapes
from rlpolicy.utils._variable_keys import unique_keys


def named_variables(model: Any) -> Dict[str, Any]:
    """``{key: variable}`` of ``model`` (a TFModelV2, or a Keras model), in order.

    Variables of the same name get distinct keys (see :func:`unique_keys`).
    """
    variables = model.variables
    if callable(variables):
        try:
            found = variables(as_dict=True)
        except TypeError:  # a ModelV2 whose variables() takes no as_dict
            found = None
        if isinstance(found, dict):
            return dict(found)
        variables = variables()
    return unique_keys((v.name, v) for v in variables)


def extra_variable_names(extra: List[Any], taken: set, target_model: Optional[Any] = None) -> Dict[str, Any]:
    """Keys for the variables ``extra`` of a policy that lie outside its model.

    Args:
        extra: The variables, in order.
        taken: Keys already used (the model's).
        target_model: A mixin's target model (or None): its variables are keyed
            ``target_model.<key>``.

    Returns:
        ``{key: variable}``: the target model's key or else the TF name, suffixed
        ``_<n>`` where a key is already taken.
    """
    owners: Dict[int, str] = {}
    target = target_model
    if target is not None and hasattr(target, "variables"):
        owners = {id(v): f"target_model.{k}" for k, v in named_variables(target).items()}
    out: Dict[str, Any] = {}
    for v in extra:
        key = owners.get(id(v), v.name)
        base, i = key, 1
        while key in taken or key in out:
            key, i = f"{base}_{i}", i + 1
        out[key] = v
    return out


_KERAS_NUMBER = re.compile(r"_\d+(?=[./:]|$)")


def keras_name_stem(key: str) -> str:
    """``key`` without the ``_<n>`` suffixes Keras adds to make layer names unique
    per process (``"base_model.dense_3.kernel:0"`` -> ``"base_model.dense.kernel:0"``)."""
    return _KERAS_NUMBER.sub("", key)


def check_weights(
    weights: Union[Mapping[str, Any], Sequence[Any]], variables: Dict[str, Any]
) -> List[Tuple[Any, np.ndarray]]:
    """Validates ``weights`` against ``variables``; returns (variable, value) pairs.

    Args:
        weights: A dict as ``get_weights(as_dict=True)`` returns it, or a list with one
            array per variable in ``variables`` order (RLlib 1.11's format).
        variables: The policy's ``{key: variable}``.

    Raises:
        ValueError: Naming missing or unknown keys, a wrong count, or the
            first key whose shape does not match.
    """
    if isinstance(weights, Mapping):
        if weights.keys() != variables.keys() and [keras_name_stem(k) for k in weights] == [
            keras_name_stem(k) for k in variables
        ]:
            # The same model keyed in another process or instance: Keras numbered
            # its unnamed layers differently (dense_3 here, dense there); by position.
            weights = dict(zip(variables, weights.values()))
    else:
        weights = list(weights)
        if len(weights) != len(variables):
            raise ValueError(
                f"set_weights got {len(weights)} arrays for the model's "
                f"{len(variables)} variables; pass one per variable or a dict"
            )
        weights = dict(zip(variables, weights))
    check_weight_shapes({k: tuple(v.shape.as_list()) for k, v in variables.items()}, weights)
    return [
        (v, np.asarray(weights[k]).astype(v.dtype.as_numpy_dtype, copy=False)) for k, v in variables.items()
    ]


def optimizer_variables(optimizer: Any) -> List[Any]:
    """The variables (step counter, slots) of a Keras or tf1.train optimizer."""
    variables = getattr(optimizer, "variables", None)
    if variables is None:
        return []
    return list(variables() if callable(variables) else variables)


def build_optimizer(optimizer: Any, var_list: List[Any]) -> None:
    """Creates ``optimizer``'s slot variables for ``var_list`` now, not on its first step.

    Then the policy state holds the optimizer variables from the start (so a
    fresh policy can ``set_state`` a trained one's), and a traced learn step
    never creates variables. Optimizers without such an API (tf1.train ones)
    are left alone; they create their slots on their first step.
    """
    if not var_list:
        return
    if callable(getattr(optimizer, "build", None)) and hasattr(optimizer, "add_variable_from_reference"):
        if not getattr(optimizer, "_built", False):
            optimizer.build(var_list)  # tf_keras (Keras 2.11+) optimizer
    elif callable(getattr(optimizer, "_create_all_weights", None)):
        optimizer._create_all_weights(var_list)  # legacy OptimizerV2


def check_optimizer_state(values: Sequence[Any], variables: List[Any]) -> List[Tuple[Any, np.ndarray]]:
    """Validates saved optimizer variables against ``variables`` (same order).

    Raises:
        ValueError: If the count or a shape differs.
    """
    values = list(values)
    if len(values) != len(variables):
        raise ValueError(
            f"state['_optimizer_variables'] holds {len(values)} arrays but this "
            f"policy's optimizers have {len(variables)} variables"
        )
    pairs = []
    for i, (var, value) in enumerate(zip(variables, values)):
        arr = np.asarray(value)
        if tuple(arr.shape) != tuple(var.shape.as_list()):
            raise ValueError(
                f"state['_optimizer_variables'][{i}] ({var.name}) has shape "
                f"{tuple(arr.shape)}, expected {tuple(var.shape.as_list())}"
            )
        pairs.append((var, arr.astype(var.dtype.as_numpy_dtype, copy=False)))
    return pairs


__all__ = [
    "named_variables",
    "extra_variable_names",
    "check_weights",
    "optimizer_variables",
    "build_optimizer",
    "check_optimizer_state",
]
