"""The GRU-type gating layer of GTrXL (RLlib's ``ray.rllib.models.torch.modules.GRUGate``).

Parisotto et al. 2019, "Stabilizing Transformers for Reinforcement Learning":
the residual ``x + y`` of a transformer block becomes a gate. With ``h`` the
residual (skip) input and ``X`` the sub-layer output:

    r  = sigmoid(X W_r + h U_r)
    z  = sigmoid(X W_z + h U_z - b_z)
    h~ = tanh(X W_h + (r * h) U_h)
    out = (1 - z) * h + z * h~

A positive ``init_bias`` (b_z) starts the gate near the identity ``out = h``.
Same maths and parameter names as :class:`rlpolicy.models.tf.layers.GRUGate`.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, nn = try_import_torch()
# A name mypy accepts as a base class (nn is a variable here); object without torch.
_Module: Any = nn.Module if nn is not None else object


@PublicAPI
class GRUGate(_Module):
    """Gates a residual stream ``h`` with a sub-layer output ``X``: call it on ``(h, X)``.

    Parameters (RLlib 1.11's names): ``_w_r``, ``_w_z``, ``_w_h``, ``_u_r``,
    ``_u_z``, ``_u_h`` ([dim, dim], Xavier uniform) and ``_bias_z`` ([dim],
    filled with ``init_bias``).
    """

    def __init__(self, dim: int, init_bias: float = 0.0, **kwargs: Any):
        """Initializes a GRUGate.

        Args:
            dim: Size of the last axis of both inputs.
            init_bias: Initial value of the update-gate bias b_z (subtracted
                before the sigmoid).
            **kwargs: Passed on to ``nn.Module``.

        Raises:
            ValueError: If dim is not a positive int.
        """
        super().__init__(**kwargs)
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"GRUGate: dim must be a positive int, got {dim!r}")
        self.dim = dim
        for name in ("_w_r", "_w_z", "_w_h", "_u_r", "_u_z", "_u_h"):
            weight = nn.Parameter(torch.empty(dim, dim))
            nn.init.xavier_uniform_(weight)
            setattr(self, name, weight)
        self._bias_z = nn.Parameter(torch.full((dim,), float(init_bias)))

    def forward(self, inputs: Sequence[TensorType], **kwargs: Any) -> TensorType:
        """Returns the gated output for ``inputs = (h, X)`` (the residual input first).

        Raises:
            ValueError: If an input's last axis is not ``dim``.
        """
        h, x = inputs
        for what, t in (("h", h), ("X", x)):
            if t.shape[-1] != self.dim:
                raise ValueError(
                    f"GRUGate: input {what} has shape {tuple(t.shape)}; its last axis must be dim={self.dim}"
                )

        def lin(a: TensorType, w: TensorType) -> TensorType:
            return torch.matmul(a, w)  # [..., dim] @ [dim, dim]

        r = torch.sigmoid(lin(x, self._w_r) + lin(h, self._u_r))
        z = torch.sigmoid(lin(x, self._w_z) + lin(h, self._u_z) - self._bias_z)
        candidate = torch.tanh(lin(x, self._w_h) + lin(h * r, self._u_h))
        return (1.0 - z) * h + z * candidate
