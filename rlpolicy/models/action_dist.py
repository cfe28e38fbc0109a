"""The framework-neutral action distribution base class (RLlib's ``action_dist``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

import gymnasium as gym
import numpy as np

from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.typing import ModelConfigDict, TensorType

if TYPE_CHECKING:
    from rlpolicy.models.modelv2 import ModelV2


@DeveloperAPI
class ActionDistribution:
    """A policy's distribution over actions, parameterised by model outputs.

    Attributes:
        inputs: The distribution inputs (model outputs), [BATCH, n].
        model: The model that produced ``inputs`` (useful for autoregressive
            distributions that run model layers while sampling).
    """

    @DeveloperAPI
    def __init__(self, inputs: TensorType, model: Optional["ModelV2"]):
        """Stores the distribution inputs and the producing model.

        Args:
            inputs: The distribution inputs (model outputs).
            model: The ModelV2 that produced ``inputs``.
        """
        self.inputs = inputs
        self.model = model

    @DeveloperAPI
    def sample(self) -> TensorType:
        """Draws one action per batch row."""
        raise NotImplementedError

    @DeveloperAPI
    def deterministic_sample(self) -> TensorType:
        """Returns the most likely action (argmax, mean, ...) per batch row."""
        raise NotImplementedError

    @DeveloperAPI
    def sampled_action_logp(self) -> TensorType:
        """Returns the log-probability of the last sampled action."""
        raise NotImplementedError

    @DeveloperAPI
    def logp(self, x: TensorType) -> TensorType:
        """Returns the log-likelihood of actions ``x``, one value per batch row."""
        raise NotImplementedError

    @DeveloperAPI
    def kl(self, other: "ActionDistribution") -> TensorType:
        """Returns KL(self || other), one value per batch row."""
        raise NotImplementedError

    @DeveloperAPI
    def entropy(self) -> TensorType:
        """Returns the entropy, one value per batch row."""
        raise NotImplementedError

    def multi_kl(self, other: "ActionDistribution") -> TensorType:
        """Like ``kl`` but may return one column per sub-distribution."""
        return self.kl(other)

    def multi_entropy(self) -> TensorType:
        """Like ``entropy`` but may return one column per sub-distribution."""
        return self.entropy()

    @staticmethod
    @DeveloperAPI
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        """Returns the number of model outputs this distribution needs for ``action_space``.

        Args:
            action_space: The action space the distribution is used for.
            model_config: The model config dict.

        Returns:
            The size (or shape) of the inputs, without the batch dimension.
        """
        raise NotImplementedError


def multi_dim_action_shape(action_space: Any) -> Optional[Tuple[int, ...]]:
    """The shape samples of a flat distribution must be reshaped to, if any.

    rlpolicy (beyond RLlib 1.11) serves a float Box with more than one
    dimension, a MultiBinary, and a MultiDiscrete with a multi-dimensional
    ``nvec`` by a distribution over the flattened action; this returns the
    space's shape for those and None for every other space (whose samples
    keep the layout they always had).

    Args:
        action_space: The (leaf) action space, or None.

    Returns:
        The action shape without the batch dimension, or None.
    """
    if isinstance(action_space, gym.spaces.MultiBinary):
        return tuple(int(n) for n in action_space.shape)
    if isinstance(action_space, gym.spaces.MultiDiscrete) and action_space.nvec.ndim > 1:
        return tuple(int(n) for n in action_space.shape)
    if (
        isinstance(action_space, gym.spaces.Box)
        and len(action_space.shape) != 1
        and not action_space.dtype.name.startswith("int")
    ):
        return tuple(int(n) for n in action_space.shape)
    return None
