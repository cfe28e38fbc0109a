"""Epsilon-greedy exploration (RLlib's ``ray.rllib.utils.exploration.epsilon_greedy``)."""

from __future__ import annotations

from typing import Any, Optional, Union

import gymnasium as gym
import tree

from rlpolicy._core.exploration_factory import create_schedule
from rlpolicy.utils.annotations import override
from rlpolicy.utils.exploration import _ops as ops
from rlpolicy.utils.exploration.exploration import Exploration
from rlpolicy.utils.exploration.stochastic_sampling import (
    eager_advance_timestep,
    eager_flag,
    eager_zero_logps,
)
from rlpolicy.utils.framework import try_import_tf, try_import_torch
from rlpolicy.utils.typing import TensorType


class EpsilonGreedy(Exploration):
    """Greedy actions, replaced by uniformly random ones with probability epsilon.

    The greedy action is the argmax of the distribution's inputs (q-values or
    logits). Random actions never pick an action whose input is at or below
    ``FLOAT_MIN`` (the action-masking convention). Epsilon follows
    ``epsilon_schedule`` evaluated at the current timestep; by default it stays
    at ``initial_epsilon`` for ``warmup_timesteps``, then falls linearly to
    ``final_epsilon`` over ``epsilon_timesteps`` and stays there.

    Works for Discrete action spaces (torch also for Dict/Tuple spaces of
    discrete components, through a multi-action distribution). The returned
    log-likelihoods are zero.
    """

    def __init__(
        self,
        action_space: gym.Space,
        *,
        framework: str,
        initial_epsilon: float = 1.0,
        final_epsilon: float = 0.05,
        warmup_timesteps: int = 0,
        epsilon_timesteps: int = int(1e5),
        epsilon_schedule: Optional[Any] = None,
        **kwargs,
    ):
        """Creates an EpsilonGreedy exploration.

        Args:
            action_space: The policy's (discrete) action space.
            framework: "torch", "tf", "tf2" or "tfe".
            initial_epsilon: Epsilon at timestep 0 and during the warm-up.
            final_epsilon: Epsilon once the decay is over.
            warmup_timesteps: Timesteps during which epsilon stays at ``initial_epsilon``.
            epsilon_timesteps: Timesteps after the warm-up over which epsilon
                falls linearly to ``final_epsilon``.
            epsilon_schedule: A Schedule (or schedule config dict) to use
                instead of the one built from the arguments above.
            **kwargs: The remaining Exploration constructor arguments.

        Raises:
            ValueError: For an unsupported framework or action space.
        """
        owner = type(self).__name__
        ops.check_framework(owner, framework)
        if ops.is_tf(framework) and not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(
                f"{owner} with framework={framework!r} needs a Discrete action space, got {action_space}"
            )
        ops.check_discrete_space(owner, action_space)
        super().__init__(action_space=action_space, framework=framework, **kwargs)
        self._graph_loaders = ops.GraphLoaders()  # graph mode: set_state's assign ops
        self.epsilon_schedule = create_schedule(epsilon_schedule, framework) or _default_schedule(
            initial_epsilon, final_epsilon, warmup_timesteps, epsilon_timesteps, framework
        )
        self.last_timestep = ops.new_state_var(0, framework, "timestep")
        if ops.is_tf_graph(framework):
            # Graph mode: the ops that read the state, run through a session.
            self._tf_state_op = self.get_state()

    @override(Exploration)
    def get_exploration_action(
        self,
        *,
        action_distribution: Any,
        timestep: Union[int, TensorType],
        explore: Optional[Union[bool, TensorType]] = True,
    ):
        if ops.is_tf(self.framework):
            return self._get_tf_exploration_action_op(action_distribution, explore, timestep)
        return self._get_torch_exploration_action(action_distribution, explore, timestep)

    def _get_tf_exploration_action_op(self, action_distribution: Any, explore: Any, timestep: Any):
        _, tf, _ = try_import_tf(error=True)
        q_values = action_distribution.inputs
        explore_now = eager_flag(explore)
        if explore_now is False:  # eager, not exploring: the greedy branch only
            eager_advance_timestep(self.last_timestep, timestep, read=False)
            exploit_action = tf.argmax(q_values, axis=1)
            return exploit_action, eager_zero_logps(exploit_action)
        if explore_now:
            ts = eager_advance_timestep(self.last_timestep, timestep, read=True)
        else:
            ts = ops.tf_advance_timestep(self.last_timestep, timestep)
        epsilon = tf.cast(self.epsilon_schedule(ts), tf.float32)
        exploit_action = tf.argmax(q_values, axis=1)

        # Uniform over the valid actions only: masked ones get log-weight float32.min.
        valid = q_values > ops.FLOAT_MIN
        log_weights = tf.where(valid, tf.zeros_like(q_values), tf.ones_like(q_values) * q_values.dtype.min)
        random_actions = tf.squeeze(tf.random.categorical(log_weights, 1), axis=1)
        chose_random = tf.random.uniform(tf.shape(exploit_action), dtype=tf.float32) < epsilon

        if explore_now:
            action = tf.where(chose_random, random_actions, exploit_action)
            return action, eager_zero_logps(action)
        action = tf.cond(
            ops.tf_bool(explore),
            true_fn=lambda: tf.where(chose_random, random_actions, exploit_action),
            false_fn=lambda: exploit_action,
        )
        return action, tf.zeros_like(action, dtype=tf.float32)

    def _get_torch_exploration_action(self, action_distribution: Any, explore: Any, timestep: Any):
        torch, _ = try_import_torch(error=True)
        self.last_timestep = ops.torch_next_timestep(self.last_timestep, timestep)
        exploit_action = action_distribution.deterministic_sample()
        nested = hasattr(action_distribution, "flat_child_distributions")
        first = tree.flatten(exploit_action)[0] if nested else exploit_action
        batch_size, device = int(first.shape[0]), self.device or first.device
        action_logp = torch.zeros(batch_size, dtype=torch.float32, device=device)
        if not explore:
            return exploit_action, action_logp

        epsilon = float(self.epsilon_schedule(self.last_timestep))
        chose_random = torch.rand(batch_size, device=device) < epsilon
        if nested:
            return self._torch_mix_nested(exploit_action, chose_random), action_logp
        from rlpolicy.models.torch.torch_action_dist import draw_one

        weights = (action_distribution.inputs > ops.FLOAT_MIN).to(torch.float32)
        random_actions = draw_one(weights, type(self).__name__).squeeze(1)
        if chose_random.device != exploit_action.device:
            chose_random = chose_random.to(exploit_action.device)
        return torch.where(chose_random, random_actions.to(exploit_action), exploit_action), action_logp

    def _torch_mix_nested(self, exploit_action: Any, chose_random: Any) -> Any:
        """Replaces the rows in ``chose_random`` of a nested action by space samples."""
        torch, _ = try_import_torch(error=True)
        drawn = ops.numpy_random_actions(self.action_space, int(chose_random.shape[0]))

        def mix(exploit, rand):
            rand = torch.as_tensor(rand, dtype=exploit.dtype, device=exploit.device)
            mask = chose_random.to(exploit.device).reshape((-1,) + (1,) * (exploit.dim() - 1))
            return torch.where(mask, rand, exploit)

        struct = ops.base_struct_from_space(self.action_space)
        mixed = [mix(e, r) for e, r in zip(tree.flatten(exploit_action), tree.flatten(drawn))]
        return tree.unflatten_as(struct, mixed)

    @override(Exploration)
    def get_state(self, sess: Optional[Any] = None):
        if sess is not None and ops.is_tf_graph(self.framework):
            return sess.run(self._tf_state_op)
        return ops.scheduled_state(self.framework, self.last_timestep, self.epsilon_schedule, "cur_epsilon")

    @override(Exploration)
    def set_state(self, state: Any, sess: Optional[Any] = None) -> None:
        self.last_timestep = ops.restore_timestep(
            type(self).__name__, self.framework, self.last_timestep, state, sess, self._graph_loaders
        )


def _default_schedule(
    initial_epsilon: float,
    final_epsilon: float,
    warmup_timesteps: int,
    epsilon_timesteps: int,
    framework: str,
) -> Any:
    """Constant through the warm-up, then linear to ``final_epsilon``, then constant."""
    from rlpolicy.utils.schedules import PiecewiseSchedule

    return PiecewiseSchedule(
        endpoints=[
            (0, initial_epsilon),
            (warmup_timesteps, initial_epsilon),
            (warmup_timesteps + epsilon_timesteps, final_epsilon),
        ],
        outside_value=final_epsilon,
        framework=framework,
    )
