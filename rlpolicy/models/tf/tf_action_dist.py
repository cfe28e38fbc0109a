"""TensorFlow action distributions (RLlib's ``ray.rllib.models.tf.tf_action_dist``).

Every distribution works inside a ``tf1.Graph`` (ops are built once and run
through a session) and eagerly (values are computed at once). As in RLlib,
the sample op is built in the constructor, so ``sample()`` and
``sampled_action_logp()`` refer to the same draw.

No tensorflow_probability: the Normal density is written out here; Beta and
Dirichlet live in ``tf_beta_dirichlet`` and the base class in
``tf_dist_base`` (both re-exported from this module).

Beyond RLlib 1.11, multi-dimensional action spaces (a float Box with more
than one dimension, MultiBinary, a MultiDiscrete with a multi-dimensional
``nvec``) are served by distributions over the flattened action: samples
come back in the space's shape and ``logp`` flattens its input first.
"""

from __future__ import annotations

import functools
from typing import Any, List, Optional, Tuple, Union, cast

import gymnasium as gym
import numpy as np
import tree

from rlpolicy.models.action_dist import ActionDistribution
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.tf.tf_beta_dirichlet import Beta, Dirichlet
from rlpolicy.models.tf.tf_dist_base import HALF_LOG_2PI as _HALF_LOG_2PI
from rlpolicy.models.tf.tf_dist_base import (
    TFActionDistribution,
    flatten_actions,
    reshape_to_space,
    space_action_shape,
)
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.numpy import MAX_LOG_NN_OUTPUT, MIN_LOG_NN_OUTPUT, SMALL_NUMBER
from rlpolicy.utils.spaces.space_utils import get_base_struct_from_space, shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()

__all__ = [
    "TFActionDistribution",
    "Categorical",
    "get_categorical_class_with_temperature",
    "MultiCategorical",
    "DiagGaussian",
    "SquashedGaussian",
    "Beta",
    "Deterministic",
    "MultiActionDistribution",
    "Dirichlet",
]


@DeveloperAPI
class Categorical(TFActionDistribution):
    """Categorical distribution over ``n`` actions, parameterised by logits [B, n]."""

    def __init__(self, inputs: TensorType, model: Optional[ModelV2] = None, temperature: float = 1.0):
        """Divides the logits by ``temperature`` (> 0) before use.

        Raises:
            ValueError: ``temperature`` is not positive.
        """
        if not temperature > 0.0:
            raise ValueError(f"Categorical: temperature must be > 0.0, got {temperature}")
        if not (temperature == 1.0 and isinstance(inputs, tf.Tensor) and inputs.dtype.is_floating):
            # (x / 1.0 == x exactly for float tensors: that division is skipped, one
            # eager op less per call.)
            inputs = inputs / temperature
        super().__init__(inputs, model)

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        """The argmax action [B] (int64)."""
        return tf.math.argmax(self.inputs, axis=1)

    @override(ActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        """log softmax(logits)[x], one value per row."""
        return -tf.nn.sparse_softmax_cross_entropy_with_logits(
            logits=self.inputs, labels=tf.cast(x, tf.int32)
        )

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        """-sum p log p, computed from max-shifted logits for stability."""
        a0 = self.inputs - tf.reduce_max(self.inputs, axis=1, keepdims=True)
        ea0 = tf.exp(a0)
        z0 = tf.reduce_sum(ea0, axis=1, keepdims=True)
        return tf.reduce_sum(ea0 / z0 * (tf.math.log(z0) - a0), axis=1)

    @override(ActionDistribution)
    def kl(self, other: ActionDistribution) -> TensorType:
        """sum p0 (log p0 - log p1), one value per row."""
        a0 = self.inputs - tf.reduce_max(self.inputs, axis=1, keepdims=True)
        a1 = other.inputs - tf.reduce_max(other.inputs, axis=1, keepdims=True)
        ea0, ea1 = tf.exp(a0), tf.exp(a1)
        z0 = tf.reduce_sum(ea0, axis=1, keepdims=True)
        z1 = tf.reduce_sum(ea1, axis=1, keepdims=True)
        return tf.reduce_sum(ea0 / z0 * (a0 - tf.math.log(z0) - a1 + tf.math.log(z1)), axis=1)

    @override(TFActionDistribution)
    def _build_sample_op(self) -> TensorType:
        return tf.squeeze(tf.random.categorical(self.inputs, 1), axis=1)

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer]:
        return cast(gym.spaces.Discrete, action_space).n


@DeveloperAPI
def get_categorical_class_with_temperature(t: float) -> type:
    """Returns a Categorical subclass whose default temperature is ``t``."""
    return type("CategoricalWithTemperature", (Categorical,), {"__init__": _temperature_init(t)})


def _temperature_init(t: float):
    def __init__(self, inputs, model=None, temperature=t):
        Categorical.__init__(self, inputs, model, temperature)

    return __init__


@DeveloperAPI
class MultiCategorical(TFActionDistribution):
    """Independent Categoricals for MultiDiscrete (or integer Box) action spaces."""

    def __init__(
        self,
        inputs: TensorType,
        model: ModelV2,
        input_lens: Union[List[int], np.ndarray, Tuple[int, ...]],
        action_space: Optional[gym.Space] = None,
    ):
        """Splits ``inputs`` into one Categorical per sub-action.

        Args:
            inputs: Concatenated logits [B, sum(input_lens)].
            model: The producing model.
            input_lens: Number of logits of each sub-action.
            action_space: The MultiDiscrete or integer Box space (derived
                from ``input_lens`` if None); an integer Box makes samples
                come back in the Box's shape and dtype.
        """
        ActionDistribution.__init__(self, inputs, model)
        self.cats = [Categorical(part, model) for part in tf.split(inputs, input_lens, axis=1)]
        self.action_space: gym.Space = (
            action_space
            if action_space is not None
            else gym.spaces.MultiDiscrete([int(c.inputs.shape[1]) for c in self.cats])
        )
        self.sample_op = self._build_sample_op()
        self.sampled_action_logp_op = self.logp(self.sample_op)

    def _to_action_space(self, stacked: TensorType) -> TensorType:
        if isinstance(self.action_space, gym.spaces.Box):
            return tf.cast(tf.reshape(stacked, [-1] + list(self.action_space.shape)), self.action_space.dtype)
        shape = space_action_shape(self.action_space)  # MultiBinary, multi-dim nvec
        if shape is not None:
            return reshape_to_space(stacked, shape, self.action_space.dtype)
        return stacked

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        return self._to_action_space(tf.stack([cat.deterministic_sample() for cat in self.cats], axis=1))

    @override(ActionDistribution)
    def logp(self, actions: TensorType) -> TensorType:
        """Sum of the sub-action log-probabilities.

        Args:
            actions: A [B, k] tensor/array (or [B, *space_shape]), or a list of
                k tensors [B].
        """
        if isinstance(actions, np.ndarray):
            actions = tf.convert_to_tensor(actions)
        if isinstance(actions, tf.Tensor):
            if (
                isinstance(self.action_space, gym.spaces.Box)
                or space_action_shape(self.action_space) is not None
            ):
                actions = tf.reshape(actions, [-1, int(np.prod(shape_of(self.action_space)))])
            elif isinstance(self.action_space, gym.spaces.MultiDiscrete):
                actions.set_shape((None, len(self.cats)))
            actions = tf.unstack(tf.cast(actions, tf.int32), axis=1)
        logps = tf.stack([cat.logp(act) for cat, act in zip(self.cats, actions)])
        return tf.reduce_sum(logps, axis=0)

    @override(ActionDistribution)
    def multi_entropy(self) -> TensorType:
        return tf.stack([cat.entropy() for cat in self.cats], axis=1)

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        return tf.reduce_sum(self.multi_entropy(), axis=1)

    @override(ActionDistribution)
    def multi_kl(self, other: ActionDistribution) -> TensorType:
        return tf.stack(
            [cat.kl(oth) for cat, oth in zip(self.cats, cast(MultiCategorical, other).cats)], axis=1
        )

    @override(ActionDistribution)
    def kl(self, other: ActionDistribution) -> TensorType:
        return tf.reduce_sum(self.multi_kl(other), axis=1)

    @override(TFActionDistribution)
    def _build_sample_op(self) -> TensorType:
        return self._to_action_space(tf.stack([cat.sample() for cat in self.cats], axis=1))

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        """sum(nvec) for MultiDiscrete; size * (high - low + 1) for an integer Box;
        2 * size for MultiBinary.

        Raises:
            ValueError: a Box that is not integer-typed or has non-uniform bounds.
        """
        if isinstance(action_space, gym.spaces.MultiBinary):
            return 2 * int(np.prod(action_space.shape))
        if isinstance(action_space, gym.spaces.Box):
            low, high = np.min(action_space.low), np.max(action_space.high)
            uniform = np.all(action_space.low == low) and np.all(action_space.high == high)
            if not action_space.dtype.name.startswith("int") or not uniform:
                raise ValueError(
                    f"MultiCategorical: a Box action space must be integer-typed with the same low/high "
                    f"everywhere, got {action_space}"
                )
            return np.prod(shape_of(action_space), dtype=np.int32) * (high - low + 1)
        return np.sum(cast(gym.spaces.MultiDiscrete, action_space).nvec)


@DeveloperAPI
class DiagGaussian(TFActionDistribution):
    """Gaussian with diagonal covariance; inputs are [means, log_stds] halves."""

    def __init__(
        self, inputs: TensorType, model: ModelV2, *, action_space: Optional[gym.spaces.Space] = None
    ):
        """Splits ``inputs`` [B, 2k] into ``mean`` and ``log_std`` [B, k].

        Args:
            inputs: Means and log standard deviations, concatenated.
            model: The producing model.
            action_space: Optional; for ``Box(shape=())`` samples are
                squeezed to [B]; for a Box with more than one dimension
                samples are reshaped to [B, *shape] (and ``logp`` flattens
                actions of that shape).
        """
        self.mean, self.log_std = tf.split(inputs, 2, axis=1)
        self.std = tf.exp(self.log_std)
        self.zero_action_dim = action_space is not None and action_space.shape == ()
        self.action_shape = space_action_shape(action_space)
        super().__init__(inputs, model)

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        if self.action_shape is not None:
            return reshape_to_space(self.mean, self.action_shape)
        return self.mean

    @override(ActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        """Sum over action dims of the Normal log-density."""
        x = tf.cast(x, tf.float32)
        if self.action_shape is not None:
            x = flatten_actions(x, int(np.prod(self.action_shape)))
        if x.shape.rank == 1:  # Box(shape=()) actions.
            x = tf.expand_dims(x, axis=1)
        return (
            -0.5 * tf.reduce_sum(tf.math.square((x - self.mean) / self.std), axis=1)
            - _HALF_LOG_2PI * tf.cast(tf.shape(x)[1], tf.float32)
            - tf.reduce_sum(self.log_std, axis=1)
        )

    @override(ActionDistribution)
    def kl(self, other: ActionDistribution) -> TensorType:
        """Closed-form KL between diagonal Gaussians.

        Raises:
            ValueError: ``other`` is not a DiagGaussian.
        """
        if not isinstance(other, DiagGaussian):
            raise ValueError(f"DiagGaussian.kl: other must be a DiagGaussian, got {type(other).__name__}")
        return tf.reduce_sum(
            other.log_std
            - self.log_std
            + (tf.math.square(self.std) + tf.math.square(self.mean - other.mean))
            / (2.0 * tf.math.square(other.std))
            - 0.5,
            axis=1,
        )

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        return tf.reduce_sum(self.log_std + 0.5 * np.log(2.0 * np.pi * np.e), axis=1)

    @override(TFActionDistribution)
    def _build_sample_op(self) -> TensorType:
        sample = self.mean + self.std * tf.random.normal(tf.shape(self.mean))
        if self.action_shape is not None:
            return reshape_to_space(sample, self.action_shape)
        return tf.squeeze(sample, axis=-1) if self.zero_action_dim else sample

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return np.prod(shape_of(action_space), dtype=np.int32) * 2


@DeveloperAPI
class SquashedGaussian(TFActionDistribution):
    """A Gaussian squashed by tanh into [low, high] (SAC-style).

    ``log_std`` is clipped to [MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT].
    """

    def __init__(self, inputs: TensorType, model: ModelV2, low: float = -1.0, high: float = 1.0):
        """Splits ``inputs`` [B, 2k] into mean and (clipped) log_std.

        Args:
            inputs: Means and log standard deviations, concatenated.
            model: The producing model.
            low: Lower action bound (scalar or array).
            high: Upper action bound (scalar or array).

        Raises:
            ValueError: ``low`` is not below ``high`` everywhere.
        """
        if not np.all(np.less(low, high)):
            raise ValueError(f"SquashedGaussian: low must be < high everywhere, got low={low}, high={high}")
        mean, log_std = tf.split(inputs, 2, axis=-1)
        self.mean = mean
        self.log_std = tf.clip_by_value(log_std, MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)
        self.std = tf.exp(self.log_std)
        self.low = low
        self.high = high
        super().__init__(inputs, model)

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        return self._squash(self.mean)

    @override(TFActionDistribution)
    def _build_sample_op(self) -> TensorType:
        return self._squash(self._normal_sample())

    def _normal_sample(self) -> TensorType:
        return self.mean + self.std * tf.random.normal(tf.shape(self.mean))

    def _normal_logp(self, z: TensorType) -> TensorType:
        return -0.5 * tf.math.square((z - self.mean) / self.std) - self.log_std - _HALF_LOG_2PI

    @override(ActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        """Normal log-density of atanh(x) (clipped to [-100, 100]) minus the tanh Jacobian."""
        unsquashed = tf.cast(self._unsquash(x), self.inputs.dtype)
        log_prob_gaussian = tf.reduce_sum(tf.clip_by_value(self._normal_logp(unsquashed), -100, 100), axis=-1)
        tanh_u = tf.math.tanh(unsquashed)
        return log_prob_gaussian - tf.reduce_sum(tf.math.log(1 - tanh_u**2 + SMALL_NUMBER), axis=-1)

    def sample_logp(self) -> Tuple[TensorType, TensorType]:
        """Draws a fresh sample and returns ``(action, logp)``.

        As in RLlib, the Jacobian term uses the squashed action, which is
        exact for the default bounds [-1, 1].
        """
        z = self._normal_sample()
        actions = self._squash(z)
        logp = tf.reduce_sum(
            self._normal_logp(z) - tf.math.log(1 - actions * actions + SMALL_NUMBER), axis=-1
        )
        return actions, logp

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        raise ValueError("SquashedGaussian has no closed-form entropy; use DiagGaussian if you need it")

    @override(ActionDistribution)
    def kl(self, other: ActionDistribution) -> TensorType:
        raise ValueError("SquashedGaussian has no closed-form KL; use DiagGaussian if you need it")

    def _squash(self, raw_values: TensorType) -> TensorType:
        squashed = ((tf.math.tanh(raw_values) + 1.0) / 2.0) * (self.high - self.low) + self.low
        return tf.clip_by_value(squashed, self.low, self.high)

    def _unsquash(self, values: TensorType) -> TensorType:
        normed = (values - self.low) / (self.high - self.low) * 2.0 - 1.0
        return tf.math.atanh(tf.clip_by_value(normed, -1.0 + SMALL_NUMBER, 1.0 - SMALL_NUMBER))

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return np.prod(shape_of(action_space), dtype=np.int32) * 2


@DeveloperAPI
class Deterministic(TFActionDistribution):
    """Returns the inputs as the action (a Gaussian with zero std); needs only the means."""

    def __init__(
        self, inputs: TensorType, model: ModelV2, *, action_space: Optional[gym.spaces.Space] = None
    ):
        """Args: inputs: the actions [B, k]; model; action_space: a Box with more than
        one dimension makes the actions come back as [B, *shape] (optional)."""
        self.action_shape = space_action_shape(action_space)
        super().__init__(inputs, model)

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        if self.action_shape is not None:
            return reshape_to_space(self.inputs, self.action_shape)
        return self.inputs

    @override(TFActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        """One float32 zero per batch row, [B].

        Beyond RLlib 1.11, whose TF class gives zeros shaped like the inputs
        ([B, k]): [B] is what every other distribution, ``TorchDeterministic``
        and the exploration's zero logps give, so exploring and greedy steps
        write ``action_logp`` columns of one shape (and a graph policy's
        ``tf.cond`` over the two keeps a static shape)."""
        return tf.zeros(tf.shape(self.inputs)[:1], dtype=tf.float32)

    @override(TFActionDistribution)
    def _build_sample_op(self) -> TensorType:
        return self.deterministic_sample()

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return np.prod(shape_of(action_space), dtype=np.int32)


@DeveloperAPI
class MultiActionDistribution(TFActionDistribution):
    """One child distribution per component of a Tuple / Dict action space."""

    def __init__(self, inputs, model, *, child_distributions, input_lens, action_space, **kwargs):
        """Splits ``inputs`` by ``input_lens`` and builds the children.

        Args:
            inputs: Concatenated child inputs [B, sum(input_lens)].
            model: The producing model.
            child_distributions: Flat list of child distribution classes
                (in ``tree.flatten`` order of the action space).
            input_lens: Input width of each child.
            action_space: The Tuple / Dict action space.
            **kwargs: Passed to every child constructor.
        """
        ActionDistribution.__init__(self, inputs, model)
        self.action_space_struct = get_base_struct_from_space(action_space)
        self.input_lens = np.array(input_lens, dtype=np.int32)
        split_inputs = tf.split(inputs, self.input_lens, axis=1)
        self.flat_child_distributions = tree.map_structure(
            lambda dist, input_: dist(input_, model, **kwargs), child_distributions, split_inputs
        )

    @override(ActionDistribution)
    def logp(self, x):
        """Sum of the children's log-probabilities.

        Args:
            x: One [B, n] tensor/array with all components concatenated, or
                the (structured or flat) per-component actions.
        """
        if isinstance(x, (tf.Tensor, np.ndarray)):
            split_x = tf.split(x, self._split_indices(), axis=1)
        else:
            split_x = tree.flatten(x)

        def component_logp(val, dist):
            if isinstance(dist, Categorical):
                val = tf.cast(tf.squeeze(val, axis=-1) if len(val.shape) > 1 else val, tf.int32)
            return dist.logp(val)

        flat_logps = tree.map_structure(component_logp, split_x, self.flat_child_distributions)
        return functools.reduce(lambda a, b: a + b, flat_logps)

    def _split_indices(self) -> List[Any]:
        """Width of each child's action in a concatenated action tensor."""
        indices = []
        for dist in self.flat_child_distributions:
            if isinstance(dist, Categorical):
                indices.append(1)
            elif isinstance(dist, MultiCategorical) and dist.action_space is not None:
                indices.append(int(np.prod(shape_of(dist.action_space))))
            elif getattr(dist, "action_shape", None) is not None:  # multi-dim Box leaves
                indices.append(int(np.prod(dist.action_shape)))
            else:
                sample = dist.sample()
                indices.append(1 if len(sample.shape) == 1 else tf.shape(sample)[1])
        return indices

    @override(ActionDistribution)
    def kl(self, other):
        kls = [
            d.kl(o)
            for d, o in zip(
                self.flat_child_distributions, cast(MultiActionDistribution, other).flat_child_distributions
            )
        ]
        return functools.reduce(lambda a, b: a + b, kls)

    @override(ActionDistribution)
    def entropy(self):
        return functools.reduce(lambda a, b: a + b, [d.entropy() for d in self.flat_child_distributions])

    @override(ActionDistribution)
    def sample(self):
        """Child samples in the structure of the action space."""
        children = tree.unflatten_as(self.action_space_struct, self.flat_child_distributions)
        return tree.map_structure(lambda d: d.sample(), children)

    @override(ActionDistribution)
    def deterministic_sample(self):
        children = tree.unflatten_as(self.action_space_struct, self.flat_child_distributions)
        return tree.map_structure(lambda d: d.deterministic_sample(), children)

    @override(TFActionDistribution)
    def sampled_action_logp(self):
        logps = [c.sampled_action_logp() for c in self.flat_child_distributions]
        return functools.reduce(lambda a, b: a + b, logps)

    @override(ActionDistribution)
    def required_model_output_shape(self, action_space, model_config):
        return np.sum(self.input_lens, dtype=np.int32)
