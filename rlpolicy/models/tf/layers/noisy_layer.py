"""A dense layer with learnable, factorised Gaussian noise (noisy nets).

As RLlib 1.11's ``ray.rllib.models.tf.layers.NoisyLayer``, after Fortunato et
al. 2017, "Noisy Networks for Exploration": the output is

    y = act(x @ (w + sigma_w * eps_w) + b + sigma_b * eps_b)

with factorised noise ``eps_w = f(e_in) f(e_out)^T``, ``eps_b = f(e_out)``,
``f(e) = sign(e) * sqrt(|e|)`` and ``e_in, e_out ~ N(0, 1)`` drawn anew on every
call (eagerly) or every session run (graph mode). One noise draw is shared by
all rows of the batch.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from rlpolicy.models.tf.layers._base import KerasLayer, keras, static_dims, tf
from rlpolicy.models.utils import get_activation_fn
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import TensorType


@PublicAPI
class NoisyLayer(KerasLayer):
    """A dense layer whose weights and biases carry learnable factorised noise.

    Variables (created on the first call, in this order; names prefixed with
    ``prefix``): ``sigma_w`` [in, out] ~ U(-1/sqrt(in), 1/sqrt(in)),
    ``sigma_b`` [out] = sigma0 / sqrt(in), ``fc_w`` [in, out] (Glorot uniform),
    ``fc_b`` [out] = 0. The sigmas are trainable, so the net can learn to
    reduce its own noise.
    """

    def __init__(self, prefix: str, out_size: int, sigma0: float, activation: Optional[Any] = "relu"):
        """Initializes a NoisyLayer.

        Args:
            prefix: Prefix of the variable names.
            out_size: Number of output units.
            sigma0: Sets the initial bias noise scale, sigma0 / sqrt(in_size).
            activation: Activation applied to the output ("relu", "tanh", ...,
                or None / "linear" for none).

        Raises:
            ValueError: If out_size is not a positive int.
        """
        super().__init__()
        if not isinstance(out_size, (int, np.integer)) or out_size < 1:
            raise ValueError(f"NoisyLayer({prefix!r}): out_size must be a positive int, got {out_size!r}")
        self.prefix = prefix
        self.out_size = int(out_size)
        self.sigma0 = sigma0
        self.activation = activation
        self.w: Any = None
        self.b = None
        self.sigma_w = None
        self.sigma_b = None

    def build(self, input_shape: Any) -> None:
        """Creates the four variables for inputs of shape [batch, in_size].

        Raises:
            ValueError: If the input is not 2-D with a known last dimension.
        """
        dims = static_dims(input_shape)
        if dims is None or len(dims) != 2 or dims[1] is None:
            raise ValueError(
                f"NoisyLayer({self.prefix!r}): expects inputs of shape [batch, in_size] with a known in_size, got {dims}"
            )
        in_size = dims[1]
        bound = 1.0 / np.sqrt(float(in_size))
        self.sigma_w = self.add_weight(
            name=f"{self.prefix}_sigma_w",
            shape=[in_size, self.out_size],
            dtype=tf.float32,
            trainable=True,
            initializer=keras.initializers.RandomUniform(minval=-bound, maxval=bound),
        )
        self.sigma_b = self.add_weight(
            name=f"{self.prefix}_sigma_b",
            shape=[self.out_size],
            dtype=tf.float32,
            trainable=True,
            initializer=keras.initializers.Constant(self.sigma0 * bound),
        )
        self.w = self.add_weight(
            name=f"{self.prefix}_fc_w",
            shape=[in_size, self.out_size],
            dtype=tf.float32,
            trainable=True,
            initializer=keras.initializers.GlorotUniform(),
        )
        self.b = self.add_weight(
            name=f"{self.prefix}_fc_b",
            shape=[self.out_size],
            dtype=tf.float32,
            trainable=True,
            initializer=keras.initializers.Zeros(),
        )
        super().build(input_shape)

    def call(self, inputs: TensorType) -> TensorType:
        """Returns act(inputs @ (w + sigma_w * eps_w) + b + sigma_b * eps_b) with fresh noise."""
        in_size = int(self.w.shape[0])
        eps_in = self._f_epsilon(tf.random.normal(shape=[in_size]))
        eps_out = self._f_epsilon(tf.random.normal(shape=[self.out_size]))
        eps_w = eps_in[:, None] * eps_out[None, :]  # factorised: outer product
        out = tf.matmul(inputs, self.w + self.sigma_w * eps_w) + self.b + self.sigma_b * eps_out
        fn = get_activation_fn(self.activation, framework="tf")
        return fn(out) if fn is not None else out

    @staticmethod
    def _f_epsilon(x: TensorType) -> TensorType:
        """f(x) = sign(x) * sqrt(|x|), the noise shaping of factorised noisy nets."""
        return tf.math.sign(x) * tf.math.sqrt(tf.math.abs(x))
