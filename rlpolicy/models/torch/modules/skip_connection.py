"""A residual (skip) connection around any module (RLlib's torch ``SkipConnection``)."""

from __future__ import annotations

from typing import Any, Optional

from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, nn = try_import_torch()
# A name mypy accepts as a base class (nn is a variable here); object without torch.
_Module: Any = nn.Module if nn is not None else object


@PublicAPI
class SkipConnection(_Module):
    """Wraps ``layer``: returns ``layer(x) + x``, or ``fan_in_layer((x, layer(x)))``.

    With a fan-in layer (e.g. a :class:`GRUGate`) the original input is the
    fan-in's first (residual / state) input and the wrapped layer's output its
    second. Keyword arguments of a call (e.g. ``memory=``) go to ``layer``.
    """

    def __init__(self, layer: Any, fan_in_layer: Optional[Any] = None, **kwargs: Any):
        """Initializes a SkipConnection.

        Args:
            layer: Any module processing the inputs.
            fan_in_layer: Optional module taking ``(inputs, layer(inputs))``;
                without one the two are added.
            **kwargs: Passed on to ``nn.Module``.
        """
        super().__init__(**kwargs)
        self._layer = layer
        self._fan_in_layer = fan_in_layer

    def forward(self, inputs: TensorType, **kwargs: Any) -> TensorType:
        """Runs the wrapped layer (with ``kwargs``) and joins its output with ``inputs``."""
        outputs = self._layer(inputs, **kwargs)
        if self._fan_in_layer is None:
            return outputs + inputs
        return self._fan_in_layer((inputs, outputs))
