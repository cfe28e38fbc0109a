"""Ornstein-Uhlenbeck action noise (RLlib's ``...exploration.ornstein_uhlenbeck_noise``)."""

from __future__ import annotations

from typing import Any, Optional, cast

import gymnasium as gym
import numpy as np

from rlpolicy.utils.annotations import override
from rlpolicy.utils.exploration import _ops as ops
from rlpolicy.utils.exploration.gaussian_noise import GaussianNoise
from rlpolicy.utils.framework import try_import_tf, try_import_torch


class OrnsteinUhlenbeckNoise(GaussianNoise):
    """Adds temporally correlated (Ornstein-Uhlenbeck) noise to continuous actions.

    The noise process ``X`` (one value per action dimension, shared by the
    batch) evolves with every exploring, non-random call as
    ``X <- X - ou_theta * X + ou_sigma * N(0, 1)``; the action is then
    ``deterministic_sample() + scale(t) * ou_base_scale * X * (high - low)``
    clipped to the Box bounds (``high - low`` is 1 for unbounded dimensions).
    Random phase, scale schedule and ``explore=False`` behave as in
    GaussianNoise. The process value is part of the state ("ou_state").
    """

    def __init__(
        self,
        action_space: gym.Space,
        *,
        framework: str,
        ou_theta: float = 0.15,
        ou_sigma: float = 0.2,
        ou_base_scale: float = 0.1,
        random_timesteps: int = 1000,
        initial_scale: float = 1.0,
        final_scale: float = 0.02,
        scale_timesteps: int = 10000,
        scale_schedule: Optional[Any] = None,
        **kwargs,
    ):
        """Creates an OrnsteinUhlenbeckNoise exploration.

        Args:
            action_space: The policy's Box action space.
            framework: "torch", "tf", "tf2" or "tfe".
            ou_theta: Mean-reversion rate of the process.
            ou_sigma: Scale of the Gaussian increments of the process.
            ou_base_scale: Constant factor on the noise (on top of the schedule).
            random_timesteps: Timesteps at the start with uniformly random actions.
            initial_scale: Noise scale when the random phase ends.
            final_scale: Noise scale after ``scale_timesteps`` more timesteps.
            scale_timesteps: Timesteps over which the scale is annealed linearly.
            scale_schedule: A Schedule (or schedule config dict) to use instead
                of the one built from the arguments above.
            **kwargs: The remaining Exploration constructor arguments.

        Raises:
            ValueError: For an unsupported framework or a non-Box action space.
        """
        ops.check_framework(type(self).__name__, framework)
        ops.check_box_space(type(self).__name__, action_space)
        self.ou_theta = ou_theta
        self.ou_sigma = ou_sigma
        self.ou_base_scale = ou_base_scale
        # Created before the parent builds its graph-mode state op, which includes it.
        self.ou_state = _new_ou_state(cast(gym.spaces.Box, action_space), framework)
        super().__init__(
            action_space,
            framework=framework,
            random_timesteps=random_timesteps,
            initial_scale=initial_scale,
            final_scale=final_scale,
            scale_timesteps=scale_timesteps,
            scale_schedule=scale_schedule,
            stddev=1.0,
            **kwargs,
        )  # RLlib 1.11: stddev is fixed to 1.0.
        if self.framework == "torch" and self.device is not None:
            self.ou_state = self.ou_state.to(self.device)
        span = self.action_space.high.astype(np.float64) - self.action_space.low.astype(np.float64)
        self._high_m_low = np.where(np.isinf(span), 1.0, span).astype(np.float32)

    @override(GaussianNoise)
    def _get_tf_exploration_action_op(self, action_dist: Any, explore: Any, timestep: Any):
        tf1, tf, _ = try_import_tf(error=True)
        ts = ops.tf_advance_timestep(self.last_timestep, timestep)
        explore_t = ops.tf_bool(explore)
        deterministic = action_dist.deterministic_sample()
        in_random_phase = ts < self.random_timesteps

        # Advance the process only when its noise is used (exploring, past the random phase).
        advance = tf.logical_and(explore_t, tf.logical_not(in_random_phase))
        x = tf.convert_to_tensor(self.ou_state)
        increment = self.ou_theta * -x + self.ou_sigma * tf.random.normal(tf.shape(x), stddev=self.stddev)
        new_x = tf.identity(self.ou_state.assign(tf.where(advance, x + increment, x), read_value=True))
        scale = tf.cast(self.scale_schedule(ts), tf.float32)
        noise = scale * self.ou_base_scale * tf.reshape(new_x, self.action_space.shape) * self._high_m_low
        noisy = self._clip_tf(deterministic + tf.cast(noise, deterministic.dtype))

        def random_actions():
            drawn, _ = self.random_exploration.get_tf_exploration_action_op(action_dist, True)
            return tf.cast(drawn, deterministic.dtype)

        stochastic = lambda: tf.cond(
            in_random_phase,
            true_fn=random_actions,  # noqa: E731
            false_fn=lambda: noisy,
        )
        action = tf.cond(explore_t, true_fn=stochastic, false_fn=lambda: deterministic)
        logp = ops.tf_zero_logps(deterministic)
        with tf1.control_dependencies([new_x]):
            return tf.identity(action), tf.identity(logp)

    @override(GaussianNoise)
    def _get_torch_exploration_action(self, action_dist: Any, explore: Any, timestep: Any):
        self.last_timestep = ops.torch_next_timestep(self.last_timestep, timestep)
        if explore and self.last_timestep < self.random_timesteps:
            action, _ = self.random_exploration.get_torch_exploration_action(action_dist, True)
        elif explore:
            torch, _ = try_import_torch(error=True)
            det = action_dist.deterministic_sample()
            scale = float(self.scale_schedule(self.last_timestep))
            gaussian = torch.normal(
                0.0, self.stddev, size=tuple(self.ou_state.shape), device=self.ou_state.device
            )
            self.ou_state += self.ou_theta * -self.ou_state + self.ou_sigma * gaussian
            high_m_low = torch.as_tensor(self._high_m_low, device=det.device)
            noise = (
                scale
                * self.ou_base_scale
                * self.ou_state.to(det.device).reshape(self.action_space.shape)
                * high_m_low
            )
            action = self._clip_torch(det + noise.to(det.dtype))
        else:
            action = action_dist.deterministic_sample()
        return action, ops.torch_zero_logps(action, self.device)

    @override(GaussianNoise)
    def get_state(self, sess: Optional[Any] = None):
        if sess is not None and ops.is_tf_graph(self.framework):
            return sess.run(self._tf_state_op)
        state = super().get_state()
        if ops.is_tf_graph(self.framework):
            return dict(state, ou_state=self.ou_state.read_value())
        return dict(state, ou_state=ops.to_numpy(self.ou_state))

    @override(GaussianNoise)
    def set_state(self, state: Any, sess: Optional[Any] = None) -> None:
        if "ou_state" not in state:
            raise KeyError(
                f"{type(self).__name__}.set_state: state has no 'ou_state' key (got keys {sorted(state)})"
            )
        value = np.asarray(state["ou_state"], dtype=np.float32).reshape(-1)
        if value.size != self.action_space.low.size:
            raise ValueError(
                f"{type(self).__name__}.set_state: 'ou_state' has {value.size} values, "
                f"expected {self.action_space.low.size} (one per action dimension)"
            )
        super().set_state(state, sess=sess)
        if ops.is_tf(self.framework):
            ops.load_tf_var(self.ou_state, value, self.framework, sess, self._graph_loaders)
        else:
            torch, _ = try_import_torch(error=True)
            self.ou_state = torch.as_tensor(value, device=self.device).clone()


def _new_ou_state(action_space: gym.spaces.Box, framework: str) -> Any:
    """Zero process value, one entry per action dimension (a TF variable for tf/tf2)."""
    zeros = np.zeros(action_space.low.size, dtype=np.float32)
    if ops.is_tf(framework):
        return ops.new_state_var(zeros, framework, "ou_state", dtype=np.float32)
    torch, _ = try_import_torch(error=True)
    return torch.from_numpy(zeros)
