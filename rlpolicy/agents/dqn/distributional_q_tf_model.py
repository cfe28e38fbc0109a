"""DQN's TF Q-model head (RLlib 1.11's ``ray.rllib.agents.dqn.distributional_q_tf_model``).

``DistributionalQTFModel`` is a model interface, like the torch
``DQNTorchModel``: the catalog builds the base network (producing
``num_outputs`` features) as a subclass of it, and this class adds two Keras
heads on those features: ``q_value_head`` (advantages / Q-values, with
``num_atoms`` atoms per action) and, with ``dueling``, ``state_value_head``.
Noisy nets (``use_noisy``), distributional outputs (``num_atoms > 1``) and
LayerNorms for parameter noise (``add_layer_norm``) are options.
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple

import gymnasium as gym

from rlpolicy.models.tf.functional_replay import KerasReplay
from rlpolicy.models.tf.layers.noisy_layer import NoisyLayer
from rlpolicy.models.tf.tf_modelv2 import TFModelV2
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()


@DeveloperAPI
class DistributionalQTFModel(TFModelV2):
    """Adds DQN's Q (and dueling state-value) heads to a base model's output features."""

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        name: str,
        *,
        q_hiddens: Sequence[int] = (256,),
        dueling: bool = False,
        num_atoms: int = 1,
        use_noisy: bool = False,
        v_min: float = -10.0,
        v_max: float = 10.0,
        sigma0: float = 0.5,
        add_layer_norm: bool = False,
    ):
        """Initializes the heads; arguments as ``DQNTorchModel`` (no ``dueling_hiddens``).

        Raises:
            ValueError: For a non-Discrete action space or bad ``num_atoms`` / support.
        """
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"DistributionalQTFModel: action space must be Discrete, got {action_space}")
        if not isinstance(num_atoms, int) or num_atoms < 1:
            raise ValueError(f"DistributionalQTFModel: num_atoms must be an int >= 1, got {num_atoms!r}")
        if num_atoms > 1 and not v_min < v_max:
            raise ValueError(
                f"DistributionalQTFModel: v_min ({v_min}) must be < v_max ({v_max}) for num_atoms > 1"
            )
        self.num_atoms, self.dueling = num_atoms, dueling
        self.v_min, self.v_max = float(v_min), float(v_max)
        self._opts = dict(hiddens=list(q_hiddens), noisy=use_noisy, sigma0=sigma0, layer_norm=add_layer_norm)
        keras = get_keras()
        model_out = keras.layers.Input(shape=(self.num_outputs,), name="model_out")
        n_scores = int(action_space.n) * num_atoms
        scores = self._head(keras, "A", model_out, n_scores, skip_output=not q_hiddens and not use_noisy)
        self.q_value_head = keras.Model(model_out, scores)
        # Eager calls of the heads replay their layers (models/tf/functional_replay.py)
        # where that is exact; noisy or LayerNorm heads go through Keras.
        self._q_head_replay = KerasReplay()
        self._value_head_replay = KerasReplay()
        if dueling:
            self.state_value_head = keras.Model(model_out, self._head(keras, "V", model_out, num_atoms))

    def _head(self, keras: Any, tag: str, x: Any, out_size: int, skip_output: bool = False) -> Any:
        """ReLU hidden layers, optional LayerNorms, and a linear output layer."""
        opts = self._opts
        for i, size in enumerate(opts["hiddens"]):
            if opts["noisy"]:
                x = NoisyLayer(f"{tag}_hidden_{i}", size, opts["sigma0"])(x)
                continue
            x = keras.layers.Dense(size, activation=tf.nn.relu, name=f"{tag}_hidden_{i}")(x)
            if opts["layer_norm"]:
                x = keras.layers.LayerNormalization(name=f"LayerNorm_{tag}_{i}")(x)
        if skip_output:
            return x  # the base model's outputs are the Q-values (RLlib: hiddens=[])
        if opts["noisy"]:
            return NoisyLayer(f"{tag}_output", out_size, opts["sigma0"], activation=None)(x)
        return keras.layers.Dense(out_size, activation=None, name=f"{tag}_output")(x)

    def get_q_value_distributions(self, model_out: TensorType) -> Tuple[TensorType, ...]:
        """As ``DQNTorchModel.get_q_value_distributions``: ``(scores, logits,
        probs_or_logits)`` with one atom, ``(scores, z, support_logits,
        logits, probs_or_logits)`` with several."""
        with self.context():  # graph/eager Keras flavour of this model
            action_scores = self._q_head_replay(self.q_value_head, model_out)
        if self.num_atoms == 1:
            ones = tf.expand_dims(tf.ones_like(action_scores), -1)
            return action_scores, ones, ones
        z = self.v_min + tf.range(self.num_atoms, dtype=tf.float32) * (self.v_max - self.v_min) / float(
            self.num_atoms - 1
        )
        support_logits = tf.reshape(action_scores, (-1, self.action_space.n, self.num_atoms))
        support_probs = tf.nn.softmax(support_logits)
        scores = tf.reduce_sum(z * support_probs, axis=-1)
        return scores, z, support_logits, support_logits, support_probs

    def get_state_value(self, model_out: TensorType) -> TensorType:
        """The value head's output ``[B, num_atoms]`` (needs ``dueling``).

        Raises:
            ValueError: If the model was built without ``dueling``.
        """
        if not self.dueling:
            raise ValueError(
                f"{type(self).__name__}.get_state_value: the model has no value "
                "head; build it with dueling=True"
            )
        with self.context():
            return self._value_head_replay(self.state_value_head, model_out)


__all__ = ["DistributionalQTFModel"]
