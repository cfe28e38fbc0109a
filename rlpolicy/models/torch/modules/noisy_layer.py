"""A torch dense layer with learnable, factorised Gaussian noise (noisy nets).

As RLlib 1.11's ``ray.rllib.models.torch.modules.noisy_layer.NoisyLayer`` (and
the TF :class:`rlpolicy.models.tf.layers.NoisyLayer`), after Fortunato et al.
2017: ``y = act(x @ (w + sigma_w * eps_w) + b + sigma_b * eps_b)`` with
``eps_w = f(e_in) f(e_out)^T``, ``eps_b = f(e_out)``, ``f(e) = sign(e) sqrt(|e|)``
and ``e_in, e_out ~ N(0, 1)`` drawn anew on every forward pass (shared by all
rows of the batch).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from rlpolicy.models.utils import get_activation_fn
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, nn = try_import_torch()
# A name mypy accepts as a base class (nn is a variable here); object without torch.
_Module: Any = nn.Module if nn is not None else object


@PublicAPI
class NoisyLayer(_Module):
    """A dense layer whose weights and biases carry learnable factorised noise.

    Parameters (in this order): ``sigma_w`` [in, out] ~ U(-1/sqrt(in), 1/sqrt(in)),
    ``sigma_b`` [out] = sigma0 / sqrt(in), ``w`` [in, out] ~ Glorot uniform,
    ``b`` [out] = 0; drawn with torch's global RNG. (RLlib 1.11 fills ``w``
    with the constant 6 / sqrt(in + out), which makes all output units start
    identical; see docs/porting.md.)
    """

    def __init__(self, in_size: int, out_size: int, sigma0: float, activation: Optional[Any] = "relu"):
        """Initializes a NoisyLayer.

        Args:
            in_size: Number of input features.
            out_size: Number of output units.
            sigma0: Sets the initial bias noise scale, sigma0 / sqrt(in_size).
            activation: Activation of the output ("relu", "tanh", ..., an
                nn.Module class or a function, or None / "linear" for none).

        Raises:
            ValueError: If in_size or out_size is not a positive int.
        """
        super().__init__()
        for what, size in (("in_size", in_size), ("out_size", out_size)):
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"NoisyLayer: {what} must be a positive int, got {size!r}")
        self.in_size, self.out_size, self.sigma0 = in_size, out_size, sigma0
        act = get_activation_fn(activation, framework="torch")
        self.activation = act() if isinstance(act, type) else act  # a module class, a function or None
        bound = 1.0 / math.sqrt(in_size)
        self.sigma_w = nn.Parameter(torch.empty(in_size, out_size).uniform_(-bound, bound))
        self.sigma_b = nn.Parameter(torch.full((out_size,), sigma0 * bound))
        glorot = math.sqrt(6.0 / (in_size + out_size))
        self.w = nn.Parameter(torch.empty(in_size, out_size).uniform_(-glorot, glorot))
        self.b = nn.Parameter(torch.zeros(out_size))

    def forward(self, inputs: TensorType) -> TensorType:
        """Returns act(inputs @ (w + sigma_w * eps_w) + b + sigma_b * eps_b) with fresh noise."""
        device, dtype = inputs.device, self.w.dtype
        eps_in = self._f_epsilon(torch.randn(self.in_size, device=device, dtype=dtype))
        eps_out = self._f_epsilon(torch.randn(self.out_size, device=device, dtype=dtype))
        eps_w = torch.outer(eps_in, eps_out)
        out = inputs @ (self.w + self.sigma_w * eps_w) + self.b + self.sigma_b * eps_out
        return self.activation(out) if self.activation is not None else out

    @staticmethod
    def _f_epsilon(x: TensorType) -> TensorType:
        """f(x) = sign(x) * sqrt(|x|), the noise shaping of factorised noisy nets."""
        return torch.sign(x) * torch.sqrt(torch.abs(x))
