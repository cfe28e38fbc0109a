"""Recurrent TF models (RLlib's ``ray.rllib.models.tf.recurrent_net``).

``RecurrentNetwork`` turns the flat, padded batch ``[B * T, ...]`` the policy
feeds into ``[B, T, ...]`` for ``forward_rnn()``. ``LSTMWrapper`` is what the
catalog puts on top of a default model when ``use_lstm=True``: the catalog
builds ``class X(LSTMWrapper, <default model>)`` and sets
``X._wrapped_forward = <default model>.forward``; the default model's output
(plus optional one-hot previous action / previous reward) feeds an LSTM whose
output goes to a ``logits`` and a ``values`` dense layer.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Tuple

import gymnasium as gym
import numpy as np
import tree
from gymnasium.spaces import Discrete, MultiDiscrete

from rlpolicy.models._time_dimension import add_time_dimension
from rlpolicy.models.tf.functional_replay import KerasReplay
from rlpolicy.models.tf.misc import one_hot_encode
from rlpolicy.models.tf.tf_modelv2 import TFModelV2
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.spaces.space_utils import get_base_struct_from_space, shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()
logger = logging.getLogger(__name__)

# SampleBatch column names (kept literal: sample_batch is not needed here).
_PREV_ACTIONS = "prev_actions"
_PREV_REWARDS = "prev_rewards"


@DeveloperAPI
class RecurrentNetwork(TFModelV2):
    """Base class for TF RNN models: implement ``forward_rnn()`` instead of ``forward()``.

    A subclass builds a Keras model taking ``[inputs [B, T, n], seq_lens [B],
    *state [B, size]]`` and returns ``(outputs [B, T, num_outputs],
    new_state)`` from ``forward_rnn``; ``forward`` adds and removes the time
    dimension around it. ``get_initial_state`` must also be implemented.
    """

    @override(TFModelV2)
    def forward(
        self,
        input_dict: Dict[str, TensorType],
        state: List[TensorType],
        seq_lens: TensorType,
    ) -> Tuple[TensorType, List[TensorType]]:
        """Reshapes ``obs_flat`` [B*T, n] to [B, T, n], runs ``forward_rnn``, flattens back.

        T is ``B*T // len(seq_lens)``: the batch must be padded so that every
        sequence has the same length.

        Raises:
            ValueError: ``seq_lens`` is None.
        """
        if seq_lens is None:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): recurrent models need seq_lens (one length "
                "per sequence); pass seq_lens=[...] or a 'seq_lens' column"
            )
        # T = (padded batch size) // (number of sequences).
        inputs = add_time_dimension(input_dict["obs_flat"], seq_lens=seq_lens, framework="tf")
        output, new_state = self.forward_rnn(inputs, state, seq_lens)
        return tf.reshape(output, [-1, self.num_outputs]), new_state

    def forward_rnn(
        self, inputs: TensorType, state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """Runs the RNN on time-major-free inputs.

        Args:
            inputs: Input tensor [B, T, n].
            state: State tensors, each [B, size].
            seq_lens: Sequence lengths [B].

        Returns:
            The outputs [B, T, num_outputs] and the new state tensors [B, size].
        """
        raise NotImplementedError(f"{type(self).__name__} must implement forward_rnn()")

    def get_initial_state(self) -> List[TensorType]:
        """Returns the initial state arrays (no batch dimension)."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_initial_state()")


@DeveloperAPI
class LSTMWrapper(RecurrentNetwork):
    """Adds an LSTM on top of another TF model (``use_lstm=True``).

    Config keys read: ``lstm_cell_size``, ``lstm_use_prev_action``,
    ``lstm_use_prev_reward``, ``max_seq_len``. Keras layers: ``lstm``,
    ``logits``, ``values`` (inputs ``inputs``, ``seq_in``, ``h``, ``c``).
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        name: str,
    ):
        """Builds the wrapped model (with no output layer) and the LSTM model ``_rnn_model``.

        Args:
            obs_space: The (flat) observation space.
            action_space: The action space (sizes the previous-action input).
            num_outputs: Width of the logits after the LSTM.
            model_config: The model config dict.
            name: The model's name.
        """
        # The wrapped model is built without its own output layer.
        super().__init__(obs_space, action_space, None, model_config, name)
        if self.num_outputs is None:
            self.num_outputs = int(np.prod(shape_of(self.obs_space)))
        self.cell_size = int(model_config["lstm_cell_size"])
        self.use_prev_action = bool(model_config["lstm_use_prev_action"])
        self.use_prev_reward = bool(model_config["lstm_use_prev_reward"])
        self.action_dim = _action_input_size(action_space)

        lstm_in_size = self.num_outputs
        lstm_in_size += self.action_dim if self.use_prev_action else 0
        lstm_in_size += 1 if self.use_prev_reward else 0
        self.num_outputs = num_outputs
        self._rnn_model = _build_lstm_model(lstm_in_size, self.cell_size, num_outputs)
        # Eager calls of _rnn_model skip Keras' per-layer call machinery (exactly).
        self._rnn_replay = KerasReplay()
        if logger.isEnabledFor(logging.INFO):
            self._rnn_model.summary()
        self._value_out = None
        self._add_view_requirements(model_config)

    def _add_view_requirements(self, model_config: ModelConfigDict) -> None:
        """prev_actions / prev_rewards (if used) and the state_in/state_out columns."""
        from rlpolicy.policy.view_requirement import ViewRequirement

        if self.use_prev_action:
            self.view_requirements[_PREV_ACTIONS] = ViewRequirement(
                "actions", space=self.action_space, shift=-1
            )
        if self.use_prev_reward:
            self.view_requirements[_PREV_REWARDS] = ViewRequirement("rewards", shift=-1)
        space = gym.spaces.Box(-1.0, 1.0, shape=(self.cell_size,), dtype=np.float32)
        for i in range(2):
            # As the policy adds them from get_initial_state() (RLlib 1.11).
            self.view_requirements[f"state_in_{i}"] = ViewRequirement(
                f"state_out_{i}",
                shift=-1,
                used_for_compute_actions=True,
                batch_repeat_value=model_config.get("max_seq_len", 20),
                space=space,
            )
            self.view_requirements[f"state_out_{i}"] = ViewRequirement(space=space, used_for_training=True)

    def _wrapped_forward(self, input_dict, state, seq_lens):
        """Identity stand-in, used only when LSTMWrapper is instantiated unwrapped.

        The catalog's wrapper class replaces this with the wrapped model's
        ``forward``.
        """
        return input_dict["obs_flat"], state

    @override(RecurrentNetwork)
    def forward(
        self,
        input_dict: Dict[str, TensorType],
        state: List[TensorType],
        seq_lens: TensorType,
    ) -> Tuple[TensorType, List[TensorType]]:
        """Wrapped model -> concat prev action/reward -> LSTM -> logits.

        Raises:
            ValueError: ``seq_lens`` is None, or a required prev-action /
                prev-reward column is missing.
        """
        if seq_lens is None:
            raise ValueError(
                f"LSTMWrapper({self.name!r}): seq_lens is required (one length per sequence); "
                "pass seq_lens=[...] or a 'seq_lens' column"
            )
        wrapped_out, _ = self._wrapped_forward(input_dict, [], None)
        extra = []
        if self.use_prev_action:
            prev_a = _require(input_dict, _PREV_ACTIONS, self)
            if isinstance(self.action_space, (Discrete, MultiDiscrete)):
                prev_a = one_hot_encode(prev_a, self.action_space)
            extra.append(tf.reshape(tf.cast(prev_a, tf.float32), [-1, self.action_dim]))
        if self.use_prev_reward:
            prev_r = _require(input_dict, _PREV_REWARDS, self)
            extra.append(tf.reshape(tf.cast(prev_r, tf.float32), [-1, 1]))
        if extra:
            wrapped_out = tf.concat([wrapped_out] + extra, axis=1)
        input_dict["obs_flat"] = wrapped_out
        return super().forward(input_dict, state, seq_lens)

    @override(RecurrentNetwork)
    def forward_rnn(
        self, inputs: TensorType, state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """Runs ``_rnn_model``; returns logits [B, T, n] and the new [h, c]."""
        if len(state) != 2:
            raise ValueError(
                f"LSTMWrapper({self.name!r}): expected 2 state tensors [h, c] of shape [B, {self.cell_size}], "
                f"got {len(state)}; start from get_initial_state()"
            )
        model_out, self._value_out, h, c = self._rnn_replay(self._rnn_model, [inputs, seq_lens] + list(state))
        return model_out, [h, c]

    @override(RecurrentNetwork)
    def get_initial_state(self) -> List[np.ndarray]:
        """Zero ``h`` and ``c`` arrays of shape [lstm_cell_size]."""
        return [np.zeros(self.cell_size, np.float32), np.zeros(self.cell_size, np.float32)]

    @override(TFModelV2)
    def value_function(self) -> TensorType:
        """The value estimates [B*T] of the last ``forward()`` call."""
        if self._value_out is None:
            raise ValueError(f"LSTMWrapper({self.name!r}): call the model before value_function()")
        return tf.reshape(self._value_out, [-1])


def _build_lstm_model(in_size: int, cell_size: int, num_outputs: int):
    """Keras model [inputs, seq_in, h, c] -> [logits, values, h', c'] (RLlib's layout)."""
    keras = get_keras()
    input_layer = keras.layers.Input(shape=(None, in_size), name="inputs")
    state_in_h = keras.layers.Input(shape=(cell_size,), name="h")
    state_in_c = keras.layers.Input(shape=(cell_size,), name="c")
    seq_in = keras.layers.Input(shape=(), name="seq_in", dtype=tf.int32)
    # maxlen = T keeps the mask aligned even if max(seq_lens) < T.
    mask = tf.sequence_mask(seq_in, maxlen=tf.shape(input_layer)[1])
    lstm_out, state_h, state_c = keras.layers.LSTM(
        cell_size, return_sequences=True, return_state=True, name="lstm"
    )(inputs=input_layer, mask=mask, initial_state=[state_in_h, state_in_c])
    logits = keras.layers.Dense(num_outputs, activation=keras.activations.linear, name="logits")(lstm_out)
    values = keras.layers.Dense(1, activation=None, name="values")(lstm_out)
    return keras.Model(
        inputs=[input_layer, seq_in, state_in_h, state_in_c], outputs=[logits, values, state_h, state_c]
    )


def _action_input_size(action_space: gym.spaces.Space) -> int:
    """Width of the (one-hot / flattened) previous-action input."""
    size = 0
    for space in tree.flatten(get_base_struct_from_space(action_space)):
        if isinstance(space, Discrete):
            size += int(space.n)
        elif isinstance(space, MultiDiscrete):
            size += int(np.sum(space.nvec))
        elif space.shape is not None:
            size += int(np.prod(space.shape))
    return size


def _require(input_dict: Dict[str, TensorType], key: str, model: LSTMWrapper) -> TensorType:
    if key not in input_dict:
        raise ValueError(
            f"LSTMWrapper({model.name!r}): input_dict has no {key!r} column but the model config asks "
            f"for it (lstm_use_prev_action / lstm_use_prev_reward); provided: {sorted(input_dict.keys())}"
        )
    return input_dict[key]
