"""The GRU-type gating layer of GTrXL (RLlib's ``ray.rllib.models.tf.layers.GRUGate``).

Parisotto et al. 2019, "Stabilizing Transformers for Reinforcement Learning",
replace a transformer's residual ``x + y`` by a gate. With ``h`` the residual
(skip) input and ``X`` the sub-layer output:

    r  = sigmoid(X W_r + h U_r)
    z  = sigmoid(X W_z + h U_z - b_z)
    h~ = tanh(X W_h + (r * h) U_h)
    out = (1 - z) * h + z * h~

A positive ``init_bias`` (b_z) starts the gate near the identity ``out = h``.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlpolicy.models.tf.layers._base import KerasLayer, static_dims, tf
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import TensorType


@PublicAPI
class GRUGate(KerasLayer):
    """Gates a residual stream ``h`` with a sub-layer output ``X``: call it on ``(h, X)``."""

    def __init__(self, init_bias: float = 0.0, **kwargs: Any):
        """Initializes a GRUGate.

        Args:
            init_bias: Initial value of the update-gate bias b_z (subtracted
                before the sigmoid).
            **kwargs: Passed on to the Keras Layer (e.g. ``name``).
        """
        super().__init__(**kwargs)
        self._init_bias = init_bias

    def build(self, input_shape: Sequence[Any]) -> None:
        """Creates W_r, W_z, W_h, U_r, U_z, U_h ([dim, dim]) and b_z ([dim]).

        Raises:
            ValueError: If the two inputs differ in their last dimension.
        """
        h_dims, x_dims = (static_dims(s) for s in input_shape)
        h_dim = h_dims[-1] if h_dims else None
        if h_dim is None or x_dims is None or x_dims[-1] != h_dim:
            raise ValueError(
                f"GRUGate({self.name!r}): both inputs (h, X) must have the same known size in the last axis, got shapes {h_dims} and {x_dims}"
            )
        dim = int(h_dim)
        for name in ("w_r", "w_z", "w_h", "u_r", "u_z", "u_h"):
            setattr(self, f"_{name}", self.add_weight(name=name, shape=(dim, dim)))
        init_bias = float(self._init_bias)

        def bias_initializer(shape: Any, dtype: Any = None, **_: Any) -> TensorType:
            return tf.fill(shape, tf.cast(init_bias, dtype=dtype or tf.float32))

        self._bias_z = self.add_weight(name="bias_z", shape=(dim,), initializer=bias_initializer)
        super().build(input_shape)

    def call(self, inputs: Sequence[TensorType], **kwargs: Any) -> TensorType:
        """Returns the gated output for ``inputs = (h, X)`` (the residual input first)."""
        h, x = inputs

        def lin(a: TensorType, w: TensorType) -> TensorType:
            return tf.tensordot(a, w, axes=1)  # works for [B, dim] and [B, T, dim]

        r = tf.nn.sigmoid(lin(x, self._w_r) + lin(h, self._u_r))
        z = tf.nn.sigmoid(lin(x, self._w_z) + lin(h, self._u_z) - self._bias_z)
        candidate = tf.nn.tanh(lin(x, self._w_h) + lin(h * r, self._u_h))
        return (1.0 - z) * h + z * candidate
