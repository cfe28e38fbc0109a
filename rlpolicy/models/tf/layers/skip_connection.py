"""A residual (skip) connection around any layer (RLlib's ``SkipConnection``)."""

from __future__ import annotations

from typing import Any, Optional

from rlpolicy.models.tf.layers._base import KerasLayer
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import TensorType


@PublicAPI
class SkipConnection(KerasLayer):
    """Wraps ``layer``: returns ``layer(x) + x``, or ``fan_in_layer((x, layer(x)))``.

    With a fan-in layer (e.g. a :class:`GRUGate`) the original input acts as
    the fan-in's first (residual / state) input and the wrapped layer's output
    as its second.
    """

    def __init__(self, layer: Any, fan_in_layer: Optional[Any] = None, **kwargs: Any):
        """Initializes a SkipConnection.

        Args:
            layer: Any layer (callable) processing the inputs.
            fan_in_layer: Optional layer taking ``(inputs, layer(inputs))``;
                without one the two are added.
            **kwargs: Passed on to the Keras Layer (e.g. ``name``).
        """
        super().__init__(**kwargs)
        self._layer = layer
        self._fan_in_layer = fan_in_layer

    def call(self, inputs: TensorType, **kwargs: Any) -> TensorType:
        """Runs the wrapped layer (with ``kwargs``) and joins its output with ``inputs``."""
        outputs = self._layer(inputs, **kwargs)
        if self._fan_in_layer is None:
            return outputs + inputs
        return self._fan_in_layer((inputs, outputs))
