"""TensorFlow Beta and Dirichlet distributions (re-exported by ``tf_action_dist``).

No tensorflow_probability: the densities are written out here and samples
come from ``tf.random.gamma``.
"""

from __future__ import annotations

from math import log
from typing import Union, cast

import gymnasium as gym
import numpy as np

from rlpolicy.models.action_dist import ActionDistribution
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.tf.tf_dist_base import TFActionDistribution
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.numpy import SMALL_NUMBER
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()


@DeveloperAPI
class Beta(TFActionDistribution):
    """Beta distribution on [low, high]; inputs are raw [alpha, beta] halves.

    Raw inputs are clipped and mapped through ``softplus(x) + 1`` so that
    alpha, beta >= 1 (a unimodal density). pdf(x) = x^(a-1) (1-x)^(b-1) / B(a, b)
    on the unit interval, rescaled to [low, high].
    """

    def __init__(self, inputs: TensorType, model: ModelV2, low: float = 0.0, high: float = 1.0):
        inputs = tf.clip_by_value(inputs, log(SMALL_NUMBER), -log(SMALL_NUMBER))
        inputs = tf.math.log(tf.math.exp(inputs) + 1.0) + 1.0
        self.low = low
        self.high = high
        self.alpha, self.beta = tf.split(inputs, 2, axis=-1)
        super().__init__(inputs, model)

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        """The (rescaled) mean alpha / (alpha + beta)."""
        return self._squash(self.alpha / (self.alpha + self.beta))

    @override(TFActionDistribution)
    def _build_sample_op(self) -> TensorType:
        x = tf.random.gamma([], self.alpha)
        y = tf.random.gamma([], self.beta)
        return self._squash(x / (x + y))

    @override(ActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        u = tf.cast(self._unsquash(x), self.inputs.dtype)
        a, b = self.alpha, self.beta
        per_dim = (a - 1.0) * tf.math.log(u) + (b - 1.0) * tf.math.log1p(-u) - _lbeta(a, b)
        return tf.reduce_sum(per_dim, axis=-1)

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        """Entropy of the unit-interval Beta, summed over action dims (not in RLlib's TF Beta)."""
        a, b = self.alpha, self.beta
        dg = tf.math.digamma
        per_dim = _lbeta(a, b) - (a - 1.0) * dg(a) - (b - 1.0) * dg(b) + (a + b - 2.0) * dg(a + b)
        return tf.reduce_sum(per_dim, axis=-1)

    @override(ActionDistribution)
    def kl(self, other: ActionDistribution) -> TensorType:
        """KL(self || other) of the unit-interval Betas, summed (not in RLlib's TF Beta)."""
        a1, b1, a2, b2 = self.alpha, self.beta, cast(Beta, other).alpha, cast(Beta, other).beta
        dg = tf.math.digamma
        per_dim = (
            _lbeta(a2, b2)
            - _lbeta(a1, b1)
            + (a1 - a2) * dg(a1)
            + (b1 - b2) * dg(b1)
            + (a2 - a1 + b2 - b1) * dg(a1 + b1)
        )
        return tf.reduce_sum(per_dim, axis=-1)

    def _squash(self, raw_values: TensorType) -> TensorType:
        return raw_values * (self.high - self.low) + self.low

    def _unsquash(self, values: TensorType) -> TensorType:
        return (values - self.low) / (self.high - self.low)

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return np.prod(shape_of(action_space), dtype=np.int32) * 2


@DeveloperAPI
class Dirichlet(TFActionDistribution):
    """Dirichlet distribution over the simplex (actions in [0, 1] that sum to 1).

    Concentrations are ``exp(inputs) + 1e-7``.
    """

    def __init__(self, inputs: TensorType, model: ModelV2):
        self.epsilon = 1e-7
        concentration = tf.exp(inputs) + self.epsilon
        super().__init__(concentration, model)

    @property
    def concentration(self) -> TensorType:
        return self.inputs

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        """softmax(concentration), as RLlib returns."""
        return tf.nn.softmax(self.inputs)

    @override(ActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        """Log-density of ``x`` floored at epsilon and renormalised onto the simplex."""
        x = tf.maximum(tf.cast(x, self.inputs.dtype), self.epsilon)
        x = x / tf.reduce_sum(x, axis=-1, keepdims=True)
        a = self.inputs
        return tf.reduce_sum((a - 1.0) * tf.math.log(x), axis=-1) - _log_multivariate_beta(a)

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        a = self.inputs
        a0 = tf.reduce_sum(a, axis=-1)
        k = tf.cast(tf.shape(a)[-1], a.dtype)
        dg = tf.math.digamma
        return _log_multivariate_beta(a) + (a0 - k) * dg(a0) - tf.reduce_sum((a - 1.0) * dg(a), axis=-1)

    @override(ActionDistribution)
    def kl(self, other: ActionDistribution) -> TensorType:
        a, b = self.inputs, other.inputs
        a0 = tf.reduce_sum(a, axis=-1, keepdims=True)
        dg = tf.math.digamma
        return (
            _log_multivariate_beta(b)
            - _log_multivariate_beta(a)
            + tf.reduce_sum((a - b) * (dg(a) - dg(a0)), axis=-1)
        )

    @override(TFActionDistribution)
    def _build_sample_op(self) -> TensorType:
        g = tf.random.gamma([], self.inputs)
        # Tiny concentrations can make every gamma draw underflow to 0.
        return g / tf.maximum(tf.reduce_sum(g, axis=-1, keepdims=True), np.finfo(np.float32).tiny)

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return np.prod(shape_of(action_space), dtype=np.int32)


def _lbeta(a: TensorType, b: TensorType) -> TensorType:
    """log B(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b), elementwise."""
    return tf.math.lgamma(a) + tf.math.lgamma(b) - tf.math.lgamma(a + b)


def _log_multivariate_beta(a: TensorType) -> TensorType:
    """log B(a) = sum lgamma(a_i) - lgamma(sum a_i), over the last axis."""
    return tf.reduce_sum(tf.math.lgamma(a), axis=-1) - tf.math.lgamma(tf.reduce_sum(a, axis=-1))
