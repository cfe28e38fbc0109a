"""Reading and writing TF graph-mode variables through one session.

``TFVariables`` plays the part of Ray's ``ray.experimental.tf_utils.TensorFlowVariables``
for ``TFPolicy``: it builds one feed placeholder and one assign op per variable
*once*, at construction, so that any number of ``get_weights`` /
``set_weights`` calls add nothing to the graph. ``initialize_uninitialized``
initializes only the variables of a graph that have no value yet.

tensorflow is imported lazily, on first use.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, List, Sequence, Union

import numpy as np

from rlpolicy._core.checkpoint_checks import check_weight_shapes


def _tf():
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf(error=True)
    return tf1, tf


def variable_key(var: Any) -> str:
    """The key a variable's value is stored under: its op name (e.g. ``"fc_1/kernel"``)."""
    return var.op.name


class TFVariables:
    """Get and set the values of a fixed list of graph variables.

    Args:
        variables: The variables, in the order ``get_weights`` lists them
            (duplicates are dropped).
        sess: The ``tf1.Session`` whose graph holds them.
    """

    def __init__(self, variables: Sequence[Any], sess: Any):
        tf1, tf = _tf()
        self.sess = sess
        self._vars: "OrderedDict[str, Any]" = OrderedDict()
        for v in variables:
            self._vars.setdefault(variable_key(v), v)
        self.placeholders: Dict[str, Any] = {}
        self.assignment_nodes: Dict[str, Any] = {}
        with sess.graph.as_default(), tf1.name_scope("rlpolicy_set_weights"):
            for key, var in self._vars.items():
                ph = tf1.placeholder(
                    var.dtype.base_dtype, var.get_shape(), name=key.replace("/", "_").replace(":", "_")
                )
                self.placeholders[key] = ph
                self.assignment_nodes[key] = var.assign(ph, read_value=False)

    @property
    def variables(self) -> List[Any]:
        """The variables, in order."""
        return list(self._vars.values())

    def keys(self) -> List[str]:
        """The variable keys (op names), in order."""
        return list(self._vars)

    def get_weights(self) -> Dict[str, np.ndarray]:
        """Returns ``{key: value}`` for every variable (one ``session.run``)."""
        if not self._vars:
            return {}
        values = self.sess.run(list(self._vars.values()))
        return dict(zip(self._vars.keys(), values))

    def checked(
        self, new_weights: Union[Dict[str, Any], Sequence[Any]], where: str = "set_weights"
    ) -> Dict[str, Any]:
        """``new_weights`` as ``{key: value}`` for every variable.

        Args:
            new_weights: A dict with the keys ``get_weights`` returns (RLlib 1.11
                silently assigns the matching subset of a partial dict; rlpolicy
                assigns nothing), or a list with one value per variable, in order.
            where: What the error messages name.

        Raises:
            ValueError: If a list has the wrong length, no key of a dict names
                one of the variables, keys are missing or unknown, or a value has
                the wrong shape.
        """
        if isinstance(new_weights, dict):
            if new_weights and not any(k in self._vars for k in new_weights):
                raise ValueError(
                    f"{where}: none of the keys {sorted(new_weights)[:5]} names one of this "
                    f"policy's variables {list(self._vars)[:5]}...; pass the dict get_weights() "
                    "returns"
                )
            weights = new_weights
        else:
            values = list(new_weights)
            if len(values) != len(self._vars):
                raise ValueError(
                    f"{where} got a list of {len(values)} values for "
                    f"{len(self._vars)} variables; pass one value per variable"
                )
            weights = dict(zip(self._vars, values))
        check_weight_shapes(
            {k: tuple(v.get_shape().as_list()) for k, v in self._vars.items()}, weights, where
        )
        return weights

    def set_weights(self, new_weights: Union[Dict[str, Any], Sequence[Any]]) -> None:
        """Assigns ``checked(new_weights)`` (one ``session.run``, no new graph ops);
        nothing is assigned if the check fails."""
        weights = self.checked(new_weights)
        if weights:
            feed = {self.placeholders[k]: v for k, v in weights.items()}
            self.sess.run([self.assignment_nodes[k] for k in weights], feed_dict=feed)


def initialize_uninitialized(sess: Any) -> int:
    """Initializes the variables of ``sess.graph`` that have no value yet.

    Variables already holding values (e.g. weights a caller assigned) keep
    them, unlike ``global_variables_initializer``.

    Returns:
        The number of variables initialized.
    """
    tf1, tf = _tf()
    with sess.graph.as_default():
        candidates = tf1.global_variables() + tf1.local_variables()
        if not candidates:
            return 0
        names = {
            n.decode() if isinstance(n, bytes) else str(n)
            for n in sess.run(tf1.report_uninitialized_variables(candidates))
        }
        todo = [v for v in candidates if v.op.name in names]
        if todo:
            # The initializers run as a list, not as one tf1.variables_initializer group:
            # grouping puts a control dependency on each initializer op, which marks ops
            # this session has already seen (TF warns, and will make that an error).
            sess.run([v.initializer for v in todo])
    return len(todo)
