"""Parameter-space noise (RLlib 1.11's ``ray.rllib.utils.exploration.parameter_noise``).

After Plappert et al. 2018, "Parameter Space Noise for Exploration": at the
start of each exploring episode, Gaussian noise N(0, stddev) is drawn for every
model weight (LayerNorm parameters excluded) and added to the weights; actions
are then chosen by a sub-exploration (epsilon-greedy for Discrete spaces,
Ornstein-Uhlenbeck noise for Box spaces) on the perturbed model. After each
trajectory the distance between the noisy and the noise-free policy on the
trajectory's observations adapts ``stddev`` (x1.01 if the distance is within
the target, /1.01 otherwise).

The policy calls ``before_compute_actions`` before every action computation:
with ``explore=True`` the stored noise is (re-)added to the weights, with
``explore=False`` it is removed, so greedy actions and training always see
the noise-free weights. The sampler must call ``on_episode_start``/``on_episode_end``
and ``postprocess_trajectory`` (as RLlib's sampler does) for new noise and
the stddev adaptation.

Importing this module imports neither torch nor tensorflow.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union, cast

import gymnasium as gym
import numpy as np

from rlpolicy.utils.annotations import override
from rlpolicy.utils.error import UnsupportedSpaceException
from rlpolicy.utils.exploration._factory import create_exploration
from rlpolicy.utils.exploration.exploration import Exploration
from rlpolicy.utils.numpy import SMALL_NUMBER, softmax
from rlpolicy.utils.typing import SamplingPolicy, TensorType

_CATEGORICAL = ("Categorical", "TorchCategorical")
_DETERMINISTIC = ("Deterministic", "TorchDeterministic")


class ParameterNoise(Exploration):
    """Explores by perturbing the model's weights with adaptive Gaussian noise."""

    def __init__(
        self,
        action_space: gym.Space,
        *,
        framework: str,
        policy_config: dict,
        model: Any,
        initial_stddev: float = 1.0,
        random_timesteps: int = 10000,
        sub_exploration: Optional[dict] = None,
        **kwargs,
    ):
        """Creates a ParameterNoise exploration.

        Args:
            action_space: The policy's action space (Discrete or Box).
            framework: "torch", "tf", "tf2" or "tfe".
            policy_config: The policy's config.
            model: The policy's model, whose trainable weights get the noise.
            initial_stddev: Initial noise standard deviation.
            random_timesteps: Timesteps at the start with purely random
                actions (handled by the default sub-exploration).
            sub_exploration: Exploration config of the action selection on the
                noisy model; None picks the default for the action space.
            **kwargs: The remaining Exploration arguments (num_workers, worker_index).

        Raises:
            UnsupportedSpaceException: For an action space other than
                Discrete or Box without an explicit ``sub_exploration``.
            ValueError: Without a model.
        """
        if model is None:
            raise ValueError("ParameterNoise needs the policy's model (got model=None)")
        super().__init__(
            action_space, framework=framework, policy_config=policy_config, model=model, **kwargs
        )
        self.stddev = float(initial_stddev)
        self.stddev_val = self.stddev  # RLlib 1.11 name of the python-side value
        self.model_variables = [
            v for k, v in model.trainable_variables(as_dict=True).items() if "LayerNorm" not in k
        ]
        self.noise: List[np.ndarray] = [np.zeros(_shape(v), np.float32) for v in self.model_variables]
        self.weights_are_currently_noisy = False
        self.episode_started = False
        sub_config = sub_exploration or _default_sub_exploration(action_space, random_timesteps)
        self.sub_exploration = create_exploration(
            sub_config,
            action_space=action_space,
            policy_config=policy_config,
            model=model,
            num_workers=kwargs.get("num_workers", 0),
            worker_index=kwargs.get("worker_index", 0),
            framework=framework,
        )

    @override(Exploration)
    def before_compute_actions(
        self,
        *,
        timestep: Optional[Union[TensorType, int]] = None,
        explore: Optional[Union[TensorType, bool]] = None,
        tf_sess: Optional[Any] = None,
        **kwargs,
    ) -> None:
        explore = self.policy_config["explore"] if explore is None else explore
        if not isinstance(explore, (bool, np.bool_)):
            raise ValueError(
                "ParameterNoise needs a python bool `explore` (got a tensor); in TF "
                "graph mode pass explore=True/False to compute_actions"
            )
        if self.episode_started:
            self._delayed_on_episode_start(bool(explore), tf_sess)
        if explore and not self.weights_are_currently_noisy:
            self._add_stored_noise(tf_sess)
        elif not explore and self.weights_are_currently_noisy:
            self._remove_noise(tf_sess)

    @override(Exploration)
    def get_exploration_action(
        self, *, action_distribution: Any, timestep: Union[TensorType, int], explore: bool = True
    ):
        # The noisy weights already shaped the distribution; the sub-exploration picks.
        return self.sub_exploration.get_exploration_action(
            action_distribution=action_distribution, timestep=timestep, explore=explore
        )

    @override(Exploration)
    def on_episode_start(
        self, policy: Any, *, environment: Any = None, episode: Any = None, tf_sess: Optional[Any] = None
    ) -> None:
        # New noise is drawn lazily, at the next action computation, where the
        # explore flag is known.
        self.episode_started = True

    def _delayed_on_episode_start(self, explore: bool, tf_sess: Optional[Any]) -> None:
        if explore:
            self._sample_new_noise_and_add(tf_sess, override=True)
        else:
            self._sample_new_noise()
        self.episode_started = False

    @override(Exploration)
    def on_episode_end(
        self, policy: Any, *, environment: Any = None, episode: Any = None, tf_sess: Optional[Any] = None
    ) -> None:
        if self.weights_are_currently_noisy:
            self._remove_noise(tf_sess)

    @override(Exploration)
    def postprocess_trajectory(
        self, policy: SamplingPolicy, sample_batch: Any, tf_sess: Optional[Any] = None
    ) -> Any:
        """Adapts ``stddev`` from the distance between the noisy and the noise-free
        policy on ``sample_batch``'s observations; returns the batch unchanged."""
        kind = _dist_kind(policy.dist_class)
        was_noisy = self.weights_are_currently_noisy
        # explore=True puts the noise on the weights, explore=False takes it off:
        # the first pass keeps the current weights, the second toggles them.
        first = self._policy_outputs(policy, sample_batch, was_noisy, kind)
        second = self._policy_outputs(policy, sample_batch, not was_noisy, kind)
        noisy, noise_free = (first, second) if was_noisy else (second, first)
        if kind == "categorical":
            # KL(noise-free || noisy), and its target for epsilon-greedy (Plappert et al.).
            distance = np.nanmean(np.sum(noise_free * np.log(noise_free / (noisy + SMALL_NUMBER)), 1))
            epsilon = float(self.sub_exploration.get_state(sess=tf_sess)["cur_epsilon"])
            delta = -np.log(1 - epsilon + epsilon / cast(gym.spaces.Discrete, self.action_space).n)
        else:
            distance = np.sqrt(np.mean(np.square(noise_free - noisy)))
            scale = float(self.sub_exploration.get_state(sess=tf_sess)["cur_scale"])
            delta = getattr(self.sub_exploration, "ou_sigma", 0.2) * scale
        self.stddev = self.stddev * 1.01 if distance <= delta else self.stddev / 1.01
        self.stddev_val = self.stddev
        return sample_batch

    def _policy_outputs(
        self, policy: SamplingPolicy, sample_batch: Any, explore: bool, kind: str
    ) -> np.ndarray:
        """The policy's action probabilities (categorical) or actions (deterministic)
        on the batch's observations, computed on a copy so the batch stays as it was."""
        from rlpolicy.policy.sample_batch import SampleBatch

        inputs = SampleBatch(
            {
                k: sample_batch[k]
                for k in sample_batch.keys()
                if k == SampleBatch.OBS or k.startswith("state_in_")
            }
        )
        timestep = policy.global_timestep
        _, _, fetches = policy.compute_actions_from_input_dict(input_dict=inputs, explore=explore)
        policy.global_timestep = timestep  # these extra passes are not sampling steps
        dist_inputs = np.asarray(fetches[SampleBatch.ACTION_DIST_INPUTS])
        return softmax(dist_inputs) if kind == "categorical" else dist_inputs

    def _sample_new_noise(self) -> None:
        self.noise = [np.random.normal(0.0, self.stddev, n.shape).astype(np.float32) for n in self.noise]

    def _sample_new_noise_and_add(self, tf_sess: Optional[Any] = None, override: bool = False) -> None:
        if override and self.weights_are_currently_noisy:
            self._remove_noise(tf_sess)
        self._sample_new_noise()
        self._add_stored_noise(tf_sess)

    def _add_stored_noise(self, tf_sess: Optional[Any] = None) -> None:
        self._apply_noise(+1.0, tf_sess)
        self.weights_are_currently_noisy = True

    def _remove_noise(self, tf_sess: Optional[Any] = None) -> None:
        self._apply_noise(-1.0, tf_sess)
        self.weights_are_currently_noisy = False

    def _apply_noise(self, sign: float, tf_sess: Optional[Any]) -> None:
        if self.framework == "tf":
            self._graph_add(sign, tf_sess)
            return
        for var, noise in zip(self.model_variables, self.noise):
            _add_to_variable(var, sign * noise, self.framework)

    def _graph_add(self, sign: float, tf_sess: Optional[Any]) -> None:
        """Graph mode: one ``assign_add`` op per variable, fed through placeholders (built once)."""
        if tf_sess is None:
            raise ValueError(
                "ParameterNoise (framework='tf'): the policy's tf Session is needed "
                "to change the weights; pass tf_sess"
            )
        if getattr(self, "_graph_ops", None) is None:
            from rlpolicy.utils.framework import try_import_tf

            tf1, tf, _ = try_import_tf(error=True)
            with tf_sess.graph.as_default():
                phs = [tf1.placeholder(v.dtype.base_dtype, _shape(v)) for v in self.model_variables]
                op = tf.group(*[v.assign_add(ph) for v, ph in zip(self.model_variables, phs)])
            self._graph_ops = (phs, op)
        phs, op = self._graph_ops
        tf_sess.run(op, feed_dict={ph: sign * n for ph, n in zip(phs, self.noise)})

    @override(Exploration)
    def get_state(self, sess: Optional[Any] = None) -> Dict[str, Any]:
        return {"cur_stddev": self.stddev}

    @override(Exploration)
    def set_state(self, state: Any, sess: Optional[Any] = None) -> None:
        self.stddev = self.stddev_val = float(state["cur_stddev"])


def _default_sub_exploration(action_space: gym.Space, random_timesteps: int) -> dict:
    if isinstance(action_space, gym.spaces.Discrete):
        # Random actions during the random phase, then 1% epsilon (RLlib 1.11).
        return {
            "type": "EpsilonGreedy",
            "epsilon_schedule": {
                "type": "PiecewiseSchedule",
                "endpoints": [(0, 1.0), (random_timesteps + 1, 1.0), (random_timesteps + 2, 0.01)],
                "outside_value": 0.01,
            },
        }
    if isinstance(action_space, gym.spaces.Box):
        return {"type": "OrnsteinUhlenbeckNoise", "random_timesteps": random_timesteps}
    raise UnsupportedSpaceException(
        f"ParameterNoise: no default sub_exploration for action space {action_space}; "
        "supported: Discrete, Box (or pass sub_exploration)"
    )


def _dist_kind(dist_class: Any) -> str:
    names = {c.__name__ for c in getattr(dist_class, "__mro__", ())}
    if names & set(_CATEGORICAL):
        return "categorical"
    if names & set(_DETERMINISTIC):
        return "deterministic"
    raise ValueError(
        f"ParameterNoise: action distribution {getattr(dist_class, '__name__', dist_class)} "
        "is not supported; supported: (Torch)Categorical, (Torch)Deterministic"
    )


def _shape(var: Any) -> tuple:
    return tuple(int(d) for d in var.shape)


def _add_to_variable(var: Any, delta: np.ndarray, framework: str) -> None:
    """``var += delta`` for a torch parameter or an eager tf.Variable."""
    if framework == "torch":
        from rlpolicy.utils.framework import try_import_torch

        torch, _ = try_import_torch(error=True)
        with torch.no_grad():
            var.add_(torch.as_tensor(delta, dtype=var.dtype, device=var.device))
    else:
        var.assign_add(delta.astype(var.dtype.as_numpy_dtype))


__all__ = ["ParameterNoise"]
