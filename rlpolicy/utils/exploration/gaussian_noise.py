"""Gaussian action noise (RLlib's ``ray.rllib.utils.exploration.gaussian_noise``)."""

from __future__ import annotations

from typing import Any, Optional, Union

import gymnasium as gym

from rlpolicy._core.exploration_factory import create_schedule
from rlpolicy.utils.annotations import override
from rlpolicy.utils.exploration import _ops as ops
from rlpolicy.utils.exploration.exploration import Exploration
from rlpolicy.utils.exploration.random import Random
from rlpolicy.utils.framework import try_import_tf, try_import_torch
from rlpolicy.utils.typing import TensorType


class GaussianNoise(Exploration):
    """Adds scaled white Gaussian noise to deterministic continuous actions (TD3-style).

    ``explore=True``: during the first ``random_timesteps`` timesteps the
    actions are uniformly random; afterwards they are
    ``deterministic_sample() + scale(t) * N(0, stddev**2)``, clipped to the
    Box bounds, where ``scale(t)`` goes linearly from ``initial_scale`` (at
    ``random_timesteps``) to ``final_scale`` over ``scale_timesteps``.
    ``explore=False``: the deterministic action. Log-likelihoods are zero.
    """

    action_space: gym.spaces.Box  # (checked in __init__)

    def __init__(
        self,
        action_space: gym.Space,
        *,
        framework: str,
        model: Any,
        random_timesteps: int = 1000,
        stddev: float = 0.1,
        initial_scale: float = 1.0,
        final_scale: float = 0.02,
        scale_timesteps: int = 10000,
        scale_schedule: Optional[Any] = None,
        **kwargs,
    ):
        """Creates a GaussianNoise exploration.

        Args:
            action_space: The policy's Box action space.
            framework: "torch", "tf", "tf2" or "tfe".
            model: The owning Policy's model.
            random_timesteps: Timesteps at the start with uniformly random actions.
            stddev: Standard deviation of the Gaussian noise (before scaling).
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
        super().__init__(action_space, model=model, framework=framework, **kwargs)
        self._graph_loaders = ops.GraphLoaders()  # graph mode: set_state's assign ops
        self.random_timesteps = random_timesteps
        self.random_exploration = Random(action_space, model=self.model, framework=self.framework, **kwargs)
        self.stddev = stddev
        self.scale_schedule = create_schedule(scale_schedule, framework) or _default_scale_schedule(
            random_timesteps, initial_scale, final_scale, scale_timesteps, framework
        )
        self.last_timestep = ops.new_state_var(0, framework, "timestep")
        if ops.is_tf_graph(framework):
            self._tf_state_op = self.get_state()

    @override(Exploration)
    def get_exploration_action(
        self, *, action_distribution: Any, timestep: Union[int, TensorType], explore: bool = True
    ):
        if ops.is_tf(self.framework):
            return self._get_tf_exploration_action_op(action_distribution, explore, timestep)
        return self._get_torch_exploration_action(action_distribution, explore, timestep)

    def _noise(self, deterministic_actions: Any, scale: Any) -> Any:
        """TF: the noise to add to ``deterministic_actions`` at noise scale ``scale``."""
        _, tf, _ = try_import_tf(error=True)
        normal = tf.random.normal(
            tf.shape(deterministic_actions), stddev=self.stddev, dtype=deterministic_actions.dtype
        )
        return tf.cast(scale, deterministic_actions.dtype) * normal

    def _get_tf_exploration_action_op(self, action_dist: Any, explore: Any, timestep: Any):
        _, tf, _ = try_import_tf(error=True)
        ts = ops.tf_advance_timestep(self.last_timestep, timestep)
        deterministic = action_dist.deterministic_sample()
        noisy = self._clip_tf(deterministic + self._noise(deterministic, self.scale_schedule(ts)))

        def random_actions():
            drawn, _ = self.random_exploration.get_tf_exploration_action_op(action_dist, True)
            return tf.cast(drawn, deterministic.dtype)

        stochastic = lambda: tf.cond(
            ts < self.random_timesteps,  # noqa: E731
            true_fn=random_actions,
            false_fn=lambda: noisy,
        )
        action = tf.cond(ops.tf_bool(explore), true_fn=stochastic, false_fn=lambda: deterministic)
        return action, ops.tf_zero_logps(deterministic)

    def _clip_tf(self, actions: Any) -> Any:
        _, tf, _ = try_import_tf(error=True)
        low = self.action_space.low.astype(actions.dtype.as_numpy_dtype)
        high = self.action_space.high.astype(actions.dtype.as_numpy_dtype)
        return tf.minimum(tf.maximum(actions, low), high)

    def _get_torch_exploration_action(self, action_dist: Any, explore: Any, timestep: Any):
        self.last_timestep = ops.torch_next_timestep(self.last_timestep, timestep)
        if explore and self.last_timestep < self.random_timesteps:
            action, _ = self.random_exploration.get_torch_exploration_action(action_dist, True)
        elif explore:
            torch, _ = try_import_torch(error=True)
            det = action_dist.deterministic_sample()
            scale = float(self.scale_schedule(self.last_timestep))
            noise = scale * torch.normal(0.0, self.stddev, size=tuple(det.shape), device=det.device)
            action = self._clip_torch(det + noise.to(det.dtype))
        else:
            action = action_dist.deterministic_sample()
        return action, ops.torch_zero_logps(action, self.device)

    def _clip_torch(self, actions: Any) -> Any:
        torch, _ = try_import_torch(error=True)
        low = torch.as_tensor(self.action_space.low, dtype=actions.dtype, device=actions.device)
        high = torch.as_tensor(self.action_space.high, dtype=actions.dtype, device=actions.device)
        return torch.min(torch.max(actions, low), high)

    @override(Exploration)
    def get_state(self, sess: Optional[Any] = None):
        if sess is not None and ops.is_tf_graph(self.framework):
            return sess.run(self._tf_state_op)
        return ops.scheduled_state(self.framework, self.last_timestep, self.scale_schedule, "cur_scale")

    @override(Exploration)
    def set_state(self, state: Any, sess: Optional[Any] = None) -> None:
        self.last_timestep = ops.restore_timestep(
            type(self).__name__, self.framework, self.last_timestep, state, sess, self._graph_loaders
        )


def _default_scale_schedule(
    random_timesteps: int, initial_scale: float, final_scale: float, scale_timesteps: int, framework: str
) -> Any:
    """Linear from ``initial_scale`` (end of random phase) to ``final_scale``, then flat."""
    from rlpolicy.utils.schedules import PiecewiseSchedule

    return PiecewiseSchedule(
        endpoints=[(random_timesteps, initial_scale), (random_timesteps + scale_timesteps, final_scale)],
        outside_value=final_scale,
        framework=framework,
    )
