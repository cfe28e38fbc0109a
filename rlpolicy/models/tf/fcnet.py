"""The default fully connected TF model (RLlib's ``ray.rllib.models.tf.fcnet``).

Keras layer names (and so variable names and order) follow RLlib 1.11, so
weights saved from an RLlib policy load unchanged:

* hidden layers ``fc_1 .. fc_n`` (``fcnet_hiddens`` + ``post_fcnet_hiddens``),
* the logits layer ``fc_out`` (absent when ``num_outputs`` is falsy),
* with ``vf_share_layers`` falsy a separate value trunk ``fc_value_1 .. fc_value_n``,
* the value head ``value_out``,
* with ``free_log_std`` a free variable ``log_std`` (created first).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy.models.tf.functional_replay import KerasReplay
from rlpolicy.models.tf.misc import check_input_shape, normc_initializer
from rlpolicy.models.tf.tf_modelv2 import TFModelV2
from rlpolicy.models.utils import get_activation_fn
from rlpolicy.utils.annotations import PublicAPI, override
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()


@PublicAPI
class FullyConnectedNetwork(TFModelV2):
    """A multi-layer perceptron with a policy (logits) head and a value head.

    Config keys read: ``fcnet_hiddens``, ``fcnet_activation``,
    ``post_fcnet_hiddens``, ``post_fcnet_activation`` (used when
    ``fcnet_hiddens`` is empty), ``no_final_linear``, ``vf_share_layers``,
    ``free_log_std``.
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int],
        model_config: ModelConfigDict,
        name: str,
    ):
        """Builds the Keras model ``self.base_model``: obs_flat -> [logits, value].

        Args:
            obs_space: The (flat) observation space; its flattened size is the
                input width.
            action_space: The action space.
            num_outputs: Width of the logits output; None or 0 builds no logits
                layer (``self.num_outputs`` then becomes the last hidden size).
            model_config: The model config dict.
            name: The model's name.

        Raises:
            ValueError: ``free_log_std`` is set and ``num_outputs`` is odd or unset.
        """
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        keras = get_keras()
        hiddens = list(model_config.get("fcnet_hiddens", [])) + list(
            model_config.get("post_fcnet_hiddens", [])
        )
        act_name = model_config.get("fcnet_activation")
        if not model_config.get("fcnet_hiddens", []):
            act_name = model_config.get("post_fcnet_activation")
        activation = get_activation_fn(act_name, framework="tf")
        no_final_linear = model_config.get("no_final_linear")
        vf_share_layers = model_config.get("vf_share_layers")
        free_log_std = model_config.get("free_log_std")
        self._obs_size = int(np.prod(shape_of(obs_space)))

        if free_log_std:
            if not num_outputs or num_outputs % 2 != 0:
                raise ValueError(
                    f"FullyConnectedNetwork({name!r}): free_log_std=True needs an even num_outputs "
                    f"(means + log-stds), got num_outputs={num_outputs}"
                )
            num_outputs = num_outputs // 2
            # Created before the Keras model: it comes first in `variables()`.
            self.log_std_var = tf.Variable([0.0] * num_outputs, dtype=tf.float32, name="log_std")

        inputs = keras.layers.Input(shape=(self._obs_size,), name="observations")
        last_layer, logits_out = self._build_policy_trunk(
            keras, inputs, hiddens, activation, num_outputs, no_final_linear
        )
        if free_log_std and logits_out is not None:
            logits_out = self._append_free_log_std(keras, inputs, logits_out)

        value_out = _value_head(
            keras,
            inputs if not vf_share_layers else last_layer,
            hiddens,
            activation,
            separate=not vf_share_layers,
        )
        self.base_model = keras.Model(
            inputs, [logits_out if logits_out is not None else last_layer, value_out]
        )
        self._value_out: Optional[TensorType] = None
        # Eager calls of base_model skip Keras' per-layer call machinery (exactly).
        self._base_replay = KerasReplay()

    def _build_policy_trunk(self, keras, inputs, hiddens, activation, num_outputs, no_final_linear):
        """Hidden layers ``fc_i`` and the ``fc_out`` layer; returns (last hidden, logits)."""
        last_layer, logits_out = inputs, None
        i = 1
        for size in hiddens[:-1]:
            last_layer = _dense(keras, size, f"fc_{i}", activation, 1.0)(last_layer)
            i += 1
        if no_final_linear and num_outputs:
            # The last hidden layer itself is the (activated) output layer.
            logits_out = _dense(keras, num_outputs, "fc_out", activation, 1.0)(last_layer)
            return last_layer, logits_out
        if hiddens:
            last_layer = _dense(keras, hiddens[-1], f"fc_{i}", activation, 1.0)(last_layer)
        if num_outputs:
            logits_out = _dense(keras, num_outputs, "fc_out", None, 0.01)(last_layer)
        else:
            # No logits layer: our output is the last hidden layer.
            self.num_outputs = ([self._obs_size] + hiddens[-1:])[-1]
        return last_layer, logits_out

    def _append_free_log_std(self, keras, inputs, logits_out):
        """Concatenates the (batch-tiled) free log-std variable to the means."""
        log_std_var = self.log_std_var

        def tiled_log_std(x):
            return tf.tile(tf.expand_dims(log_std_var, 0), [tf.shape(x)[0], 1])

        log_std_out = keras.layers.Lambda(tiled_log_std)(inputs)
        return keras.layers.Concatenate(axis=1)([logits_out, log_std_out])

    @override(TFModelV2)
    def forward(
        self,
        input_dict: Dict[str, TensorType],
        state: List[TensorType],
        seq_lens: TensorType,
    ) -> Tuple[TensorType, List[TensorType]]:
        """Runs ``base_model`` on ``input_dict["obs_flat"]``.

        Raises:
            ValueError: the flat observation does not have width
                ``prod(obs_space.shape)``.
        """
        obs_flat = input_dict["obs_flat"]
        shape: Any = getattr(obs_flat, "shape", None)
        if not (getattr(shape, "rank", None) == 2 and shape.as_list()[1] == self._obs_size):
            check_input_shape(obs_flat, [self._obs_size], self, what="flat observation")
        model_out, self._value_out = self._base_replay(self.base_model, obs_flat)
        return model_out, state

    @override(TFModelV2)
    def value_function(self) -> TensorType:
        """The value estimates [B] of the last ``forward()`` call."""
        if self._value_out is None:
            raise ValueError(f"FullyConnectedNetwork({self.name!r}): call the model before value_function()")
        return tf.reshape(self._value_out, [-1])


def _value_head(keras, vf_in, hiddens: List[int], activation, separate: bool):
    """``value_out`` on the shared trunk, or on its own ``fc_value_{i}`` trunk."""
    if separate:
        for i, size in enumerate(hiddens, 1):
            vf_in = _dense(keras, size, f"fc_value_{i}", activation, 1.0)(vf_in)
    return _dense(keras, 1, "value_out", None, 0.01)(vf_in)


def _dense(keras, size: int, name: str, activation, init_std: float):
    """A Dense layer with a normc-initialised kernel (RLlib's defaults)."""
    return keras.layers.Dense(
        size, name=name, activation=activation, kernel_initializer=normc_initializer(init_std)
    )
