"""The base class of the TensorFlow action distributions.

Kept apart from ``tf_action_dist`` (which re-exports it) so that the
distribution modules stay small; it also holds the helpers that map flat
distribution samples onto multi-dimensional action spaces and back.
"""

from __future__ import annotations

from typing import Optional, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy.models.action_dist import ActionDistribution
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.typing import TensorType

tf1, tf, tfv = try_import_tf()

HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)


@DeveloperAPI
class TFActionDistribution(ActionDistribution):
    """Base class of the TF distributions: builds the sample op once, in ``__init__``."""

    @override(ActionDistribution)
    def __init__(self, inputs: TensorType, model: Optional[ModelV2]):
        """Stores the inputs and builds the sample and sampled-logp ops.

        Args:
            inputs: The distribution inputs [B, n].
            model: The model that produced ``inputs``.
        """
        super().__init__(inputs, model)
        self.sample_op = self._build_sample_op()
        self.sampled_action_logp_op = self.logp(self.sample_op)

    def _build_sample_op(self) -> TensorType:
        """Returns the (random) sample op; shared by ``sample`` and ``sampled_action_logp``."""
        raise NotImplementedError

    @override(ActionDistribution)
    def sample(self) -> TensorType:
        """Returns the sample op built at construction."""
        return self.sample_op

    @override(ActionDistribution)
    def sampled_action_logp(self) -> TensorType:
        """Returns the log-probability of ``sample()``."""
        return self.sampled_action_logp_op


def space_action_shape(action_space: Optional[gym.Space]) -> Optional[Tuple[int, ...]]:
    """The shape flat samples are reshaped to for ``action_space`` (None: keep them flat)."""
    from rlpolicy.models.action_dist import multi_dim_action_shape

    return multi_dim_action_shape(action_space)


def reshape_to_space(flat: TensorType, shape: Tuple[int, ...], dtype: Optional[object] = None) -> TensorType:
    """Reshapes flat samples [B, prod(shape)] to [B, *shape], cast to ``dtype`` if given."""
    out = tf.reshape(flat, [-1] + list(shape))
    return out if dtype is None else tf.cast(out, dtype)


def flatten_actions(actions: TensorType, width: int) -> TensorType:
    """Reshapes actions [B, *shape] (or already flat ones) to [B, width]."""
    return tf.reshape(tf.convert_to_tensor(actions), [-1, int(width)])
