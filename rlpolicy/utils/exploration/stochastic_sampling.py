"""Sampling from the action distribution (RLlib's ``...exploration.stochastic_sampling``)."""

from __future__ import annotations

from typing import Any, Optional, Union, cast

import gymnasium as gym
import numpy as np
import tree

from rlpolicy.utils.annotations import override
from rlpolicy.utils.exploration import _ops as ops
from rlpolicy.utils.exploration.exploration import Exploration
from rlpolicy.utils.exploration.random import Random
from rlpolicy.utils.framework import try_import_tf, try_import_torch
from rlpolicy.utils.typing import TensorType

_tf_module: Any = None


def _tf() -> Any:
    """TensorFlow, imported on first use (a torch-only process never imports it)."""
    global _tf_module
    if _tf_module is None:
        _tf_module = try_import_tf()[1]
    return _tf_module


class StochasticSampling(Exploration):
    """Samples actions from the action distribution (the default exploration).

    ``explore=True``: ``action_distribution.sample()`` with its
    log-likelihood, except during the first ``random_timesteps`` timesteps,
    when actions are drawn uniformly from the action space (log-likelihood 0).
    ``explore=False``: ``deterministic_sample()`` with log-likelihood 0.

    The timestep is the one passed to ``get_exploration_action`` or, when
    None, one more than the previous call's; it is kept in
    ``self.last_timestep`` (a TF variable for tf/tf2).
    """

    def __init__(
        self, action_space: gym.Space, *, framework: str, model: Any, random_timesteps: int = 0, **kwargs
    ):
        """Creates a StochasticSampling exploration.

        Args:
            action_space: The policy's action space.
            framework: "torch", "tf", "tf2" or "tfe" ("jax" for the plain sampling path).
            model: The owning Policy's model.
            random_timesteps: Timesteps at the start during which actions are
                uniformly random instead of sampled.
            **kwargs: The remaining Exploration constructor arguments.
        """
        ops.check_framework(type(self).__name__, framework, ops.SUPPORTED_FRAMEWORKS + ("jax",))
        super().__init__(action_space, model=model, framework=framework, **kwargs)
        self.random_timesteps = random_timesteps
        # Acts during the first `random_timesteps` timesteps.
        self.random_exploration: Optional[Random] = None  # (None only for jax, which has no random phase)
        if framework == "jax" and random_timesteps > 0:
            raise ValueError(
                f"StochasticSampling: random_timesteps={random_timesteps} is not supported "
                "for framework='jax'; use random_timesteps=0"
            )
        if framework != "jax":
            self.random_exploration = Random(
                action_space, model=self.model, framework=self.framework, **kwargs
            )
        self.last_timestep = ops.new_state_var(0, framework, "timestep")

    @override(Exploration)
    def get_exploration_action(
        self,
        *,
        action_distribution: Any,
        timestep: Optional[Union[int, TensorType]] = None,
        explore: bool = True,
    ):
        if self.framework in ops.TF_FRAMEWORKS:
            return self._get_tf_exploration_action_op(action_distribution, timestep, explore)
        return self._get_torch_exploration_action(action_distribution, timestep, explore)

    def _get_tf_exploration_action_op(self, action_dist: Any, timestep: Any, explore: Any):
        tf = _tf()
        explore_now = eager_flag(explore)
        if explore_now is not None:
            return self._get_eager_exploration_action(action_dist, timestep, explore_now)
        ts = ops.tf_advance_timestep(self.last_timestep, timestep)
        explore_t = ops.tf_bool(explore)
        in_random_phase = ts < self.random_timesteps

        deterministic = action_dist.deterministic_sample()
        sample = action_dist.sample()
        sample_logp = action_dist.sampled_action_logp()
        zeros = ops.tf_zero_logps(deterministic)

        def random_actions():
            drawn, _ = self.random_exploration.get_tf_exploration_action_op(action_dist, True)
            return tree.map_structure(lambda r, s: tf.cast(r, s.dtype), drawn, sample)

        def explore_actions():
            return tf.cond(in_random_phase, true_fn=random_actions, false_fn=lambda: sample)

        action = tf.cond(explore_t, true_fn=explore_actions, false_fn=lambda: deterministic)
        logp = tf.cond(
            tf.logical_and(explore_t, tf.logical_not(in_random_phase)),
            true_fn=lambda: sample_logp,
            false_fn=lambda: zeros,
        )
        return action, logp

    def _get_eager_exploration_action(self, action_dist: Any, timestep: Any, explore: bool):
        """Eager TF with a known ``explore``: the taken branch of the tf.cond path only
        (same actions and logps; no deterministic sample or zero logps when sampling)."""
        tf = _tf()
        # (timesteps count up from 0: without random_timesteps no read is needed)
        ts = eager_advance_timestep(self.last_timestep, timestep, read=explore and self.random_timesteps > 0)
        if not explore:
            action = action_dist.deterministic_sample()
            return action, eager_zero_logps(action)
        sample = action_dist.sample()
        if ts is None or ts >= self.random_timesteps:
            return sample, action_dist.sampled_action_logp()
        drawn, _ = cast(Random, self.random_exploration).get_tf_exploration_action_op(action_dist, True)
        action = tree.map_structure(lambda r, s: tf.cast(r, s.dtype), drawn, sample)
        return action, eager_zero_logps(action)

    def _get_torch_exploration_action(self, action_dist: Any, timestep: Any, explore: Any):
        # (ops.torch_next_timestep, inline: this runs once per action step)
        self.last_timestep = int(self.last_timestep) + 1 if timestep is None else int(timestep)
        if explore and self.last_timestep < self.random_timesteps:
            return cast(Random, self.random_exploration).get_torch_exploration_action(action_dist, True)
        if explore:
            action = action_dist.sample()
            return action, action_dist.sampled_action_logp()
        action = action_dist.deterministic_sample()
        torch, _ = try_import_torch()
        if self.framework == "torch" and torch is not None:
            return action, ops.torch_zero_logps(action, self.device)
        leaf = tree.flatten(action)[0]
        return action, np.zeros(np.shape(leaf)[:1], dtype=np.float32)


# ---------------------------------------------------------------- eager TF steps
# (shared with EpsilonGreedy: an exploration's eager branch taken in Python)


def eager_flag(value: Any) -> Optional[bool]:
    """``value`` as a Python bool when it can be read on the host now, else None.

    While TF executes eagerly a Python/numpy bool or a scalar eager tensor is
    known: an exploration can then take its branch in Python and compute only
    that branch's ops. Inside a ``tf.function`` or a tf1 graph (where a state
    update must stay wired into the returned ops) this is None, and the caller
    builds its ``tf.cond``.
    """
    if not _tf().executing_eagerly():
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if value is None:
        return None
    try:
        return bool(value)  # an eager scalar: one host read
    except (TypeError, ValueError):
        return None


def eager_advance_timestep(var: Any, timestep: Any, read: bool) -> Optional[int]:
    """Eager form of ``_ops.tf_advance_timestep``: one assign op, no read-back.

    Stores ``timestep`` (or one more than last time, when None) in ``var``.
    Returns the new timestep as a Python int when ``read`` (or when it is
    known without reading the variable), else None.
    """
    if timestep is None:
        var.assign_add(_ONE_INT64.get(), read_value=False)
        return int(var.numpy()) if read else None
    if isinstance(timestep, (int, np.integer)):
        var.assign(np.int64(timestep), read_value=False)
        return int(timestep)
    tf = _tf()
    if timestep.dtype != tf.int64:
        timestep = tf.cast(timestep, tf.int64)
    var.assign(timestep, read_value=False)
    return int(timestep) if read else None


class _EagerConstant:
    """An eager int64 scalar 1, made on first use."""

    def __init__(self) -> None:
        self._value: Any = None

    def get(self) -> Any:
        if self._value is None:
            tf = _tf()
            with tf.init_scope():
                self._value = tf.constant(1, dtype=tf.int64)
        return self._value


_ONE_INT64 = _EagerConstant()


def eager_zero_logps(actions: Any) -> Any:
    """Eager form of ``_ops.tf_zero_logps``: the batch size is known, so the
    zeros are one host-made constant (no Shape/StridedSlice/Fill ops)."""
    leaf = tree.flatten(actions)[0]
    return _tf().constant(np.zeros(tuple(leaf.shape)[:1], dtype=np.float32))
