"""Uniformly random actions (RLlib's ``ray.rllib.utils.exploration.random``)."""

from __future__ import annotations

from typing import Any, Optional, Union

import gymnasium as gym
import tree

from rlpolicy.utils.annotations import override
from rlpolicy.utils.exploration import _ops as ops
from rlpolicy.utils.exploration.exploration import Exploration
from rlpolicy.utils.framework import try_import_tf, try_import_torch
from rlpolicy.utils.typing import TensorType


class Random(Exploration):
    """Acts uniformly at random when exploring, deterministically otherwise.

    With ``explore=True`` the actions are drawn from ``self.action_space``
    (any nesting of Box, Discrete and MultiDiscrete), one per batch row of the
    distribution's inputs; with ``explore=False`` they are the distribution's
    ``deterministic_sample()``. The returned log-likelihoods are always zero.
    """

    def __init__(self, action_space: gym.Space, *, model: Any, framework: str, **kwargs):
        """Creates a Random exploration.

        Args:
            action_space: The space to draw actions from.
            model: The owning Policy's model.
            framework: "torch", "tf", "tf2" or "tfe".
            **kwargs: The remaining Exploration constructor arguments.
        """
        ops.check_framework(type(self).__name__, framework)
        super().__init__(action_space=action_space, model=model, framework=framework, **kwargs)
        self.action_space_struct = ops.base_struct_from_space(self.action_space)

    @override(Exploration)
    def get_exploration_action(
        self, *, action_distribution: Any, timestep: Union[int, TensorType], explore: bool = True
    ):
        if ops.is_tf(self.framework):
            return self.get_tf_exploration_action_op(action_distribution, explore)
        return self.get_torch_exploration_action(action_distribution, explore)

    def get_tf_exploration_action_op(self, action_dist: Any, explore: Optional[Union[bool, TensorType]]):
        """TF: random actions (explore) or the deterministic sample, with zero logps."""
        _, tf, _ = try_import_tf(error=True)
        batched = ops.inputs_are_batched(action_dist, self.action_space, self.model)
        batch_size = tf.shape(action_dist.inputs)[0] if batched else None

        deterministic = action_dist.deterministic_sample()

        def random_actions():
            # Same dtypes as the distribution's actions, so both branches match.
            drawn = ops.tf_random_actions(self.action_space, batch_size)
            try:
                return tree.map_structure(lambda r, d: tf.cast(r, d.dtype), drawn, deterministic)
            except (TypeError, ValueError):
                return drawn

        action = tf.cond(ops.tf_bool(explore), true_fn=random_actions, false_fn=lambda: deterministic)
        return action, ops.tf_zero_logps(action)

    def get_torch_exploration_action(self, action_dist: Any, explore: bool):
        """Torch: random actions (explore) or the deterministic sample, with zero logps."""
        torch, _ = try_import_torch(error=True)
        if explore:
            batched = ops.inputs_are_batched(action_dist, self.action_space, self.model)
            batch_size = int(action_dist.inputs.shape[0]) if batched else None
            sampled = ops.numpy_random_actions(self.action_space, batch_size)
            inputs = action_dist.inputs
            device = self.device or (inputs.device if isinstance(inputs, torch.Tensor) else None)
            action = tree.map_structure(lambda a: torch.from_numpy(a).to(device), sampled)
        else:
            action = action_dist.deterministic_sample()
        return action, ops.torch_zero_logps(action, self.device)
