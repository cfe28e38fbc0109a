"""TF attention nets (RLlib's ``ray.rllib.models.tf.attention_net``).

[1] Vaswani et al. 2017, "Attention Is All You Need".
[2] Parisotto et al. 2019, "Stabilizing Transformers for Reinforcement Learning".
[3] Dai et al. 2019, "Transformer-XL".

* ``PositionwiseFeedforward``: the 2-layer MLP of a transformer unit.
* ``TrXLNet``: a Transformer-XL [1, 3] whose state is the last
  ``max_seq_len`` observations.
* ``GTrXLNet``: the gated Transformer-XL of [2] (the same network as
  :class:`rlpolicy.models.torch.attention_net.GTrXLNet`). Its memory is the
  trajectory itself: ``state_in_i`` reads the last ``memory_inference`` values
  of ``state_out_i`` through the view requirements
  (:mod:`rlpolicy.models._attention_views`).
* ``AttentionWrapper``: the GTrXL the catalog puts on top of a default model
  when ``use_attention=True``.

The Keras models are built where the model is constructed: inside the
policy's ``tf1.Graph`` (graph mode) or eagerly.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import gymnasium as gym
import numpy as np

from rlpolicy.models._attention_views import (
    action_input_size,
    check_non_negative_ints,
    check_positive_ints,
    flat_obs_dim,
    memory_view_requirements,
    prev_action_reward_view_requirements,
    wrapper_config,
)
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.tf.layers.gru_gate import GRUGate
from rlpolicy.models.tf.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from rlpolicy.models.tf.layers.skip_connection import SkipConnection
from rlpolicy.models.tf.misc import one_hot_encode
from rlpolicy.models.tf.recurrent_net import RecurrentNetwork
from rlpolicy.models.tf.tf_modelv2 import TFModelV2
from rlpolicy.utils.annotations import PublicAPI, override
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.spaces.space_utils import get_base_struct_from_space, shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()
keras: Any = get_keras() if tf is not None else None
# Names mypy accepts as base classes (keras is a variable here); object without TF.
_Layer: Any = keras.layers.Layer if keras is not None else object
_Model: Any = keras.Model if keras is not None else object


@PublicAPI
class PositionwiseFeedforward(_Layer):
    """Dense(hidden_dim, relu) -> Dense(out_dim, output_activation), applied per timestep [1]."""

    def __init__(self, out_dim: int, hidden_dim: int, output_activation: Optional[Any] = None, **kwargs: Any):
        """Initializes a PositionwiseFeedforward layer.

        Args:
            out_dim: Output size per timestep.
            hidden_dim: Size of the hidden (ReLU) layer.
            output_activation: Activation of the output layer (None: linear).
            **kwargs: Passed on to the Keras Layer (e.g. ``name``).
        """
        super().__init__(**kwargs)
        self._hidden_layer = keras.layers.Dense(hidden_dim, activation=tf.nn.relu, name="hidden")
        self._output_layer = keras.layers.Dense(out_dim, activation=output_activation, name="out")

    def call(self, inputs: TensorType, **kwargs: Any) -> TensorType:
        """Returns [..., out_dim] for inputs [..., in_dim]."""
        return self._output_layer(self._hidden_layer(inputs))


def _sequences_of(obs: TensorType, seq_lens: Any) -> TensorType:
    """[B*T, ...] -> [B, T, ...] with B = len(seq_lens) (T from the row count)."""
    if seq_lens is None:
        raise ValueError("attention net: seq_lens is required (one entry per sequence; ones when acting)")
    b = tf.shape(seq_lens)[0]
    shape = tf.shape(obs)
    return tf.reshape(obs, tf.concat([[b, shape[0] // b], shape[1:]], axis=0))


@PublicAPI
class TrXLNet(RecurrentNetwork):
    """A Transformer-XL [1, 3] over the last ``max_seq_len`` observations.

    The state is those observations ([max_seq_len, obs_dim], zeros at first);
    every call appends the new inputs and keeps the newest ``max_seq_len``.
    Each of the L units is relative multi-head attention (residual) ->
    position-wise MLP (residual) -> LayerNorm; a linear ``logits`` layer
    follows.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        name: str,
        num_transformer_units: int,
        attention_dim: int,
        num_heads: int,
        head_dim: int,
        position_wise_mlp_dim: int,
    ):
        """Initializes a TrXLNet.

        Args:
            observation_space: A 1-D observation space.
            action_space: The action space.
            num_outputs: Logits size.
            model_config: The model config (reads ``max_seq_len``).
            name: The model's name.
            num_transformer_units: Number of transformer units (L).
            attention_dim: Input and output size of every unit.
            num_heads: Attention heads per unit (H).
            head_dim: Size of one head (d).
            position_wise_mlp_dim: Hidden size of the position-wise MLP.

        Raises:
            ValueError: A size is not a positive int or the obs space is not 1-D.
        """
        super().__init__(observation_space, action_space, num_outputs, model_config, name)
        owner = f"TrXLNet({name!r})"
        check_positive_ints(
            owner,
            num_outputs=num_outputs,
            num_transformer_units=num_transformer_units,
            attention_dim=attention_dim,
            num_heads=num_heads,
            head_dim=head_dim,
            position_wise_mlp_dim=position_wise_mlp_dim,
            max_seq_len=model_config.get("max_seq_len"),
        )
        self.num_transformer_units = num_transformer_units
        self.attention_dim = attention_dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.max_seq_len = model_config["max_seq_len"]
        self.obs_dim = flat_obs_dim(owner, observation_space)
        inputs = keras.layers.Input(shape=(self.max_seq_len, self.obs_dim), name="inputs")
        out = keras.layers.Dense(attention_dim, name="input_projection")(inputs)
        for i in range(num_transformer_units):
            out = SkipConnection(
                RelativeMultiHeadAttention(
                    out_dim=attention_dim,
                    num_heads=num_heads,
                    head_dim=head_dim,
                    input_layernorm=False,
                    output_activation=None,
                    name=f"attention_{i + 1}",
                ),
                name=f"mha_{i + 1}",
            )(out)
            out = SkipConnection(
                PositionwiseFeedforward(attention_dim, position_wise_mlp_dim, name=f"mlp_{i + 1}"),
                name=f"pos_wise_mlp_{i + 1}",
            )(out)
            out = keras.layers.LayerNormalization(axis=-1, name=f"layer_norm_{i + 1}")(out)
        logits = keras.layers.Dense(self.num_outputs, activation=None, name="logits")(out)
        self.base_model = keras.models.Model([inputs], [logits])

    @override(RecurrentNetwork)
    def forward_rnn(
        self, inputs: TensorType, state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """Appends ``inputs`` [B, T, obs] to the kept observations; logits of the last T steps."""
        observations = tf.concat([tf.cast(state[0], inputs.dtype), inputs], axis=1)[:, -self.max_seq_len :]
        logits = self.base_model([observations])
        return logits[:, -tf.shape(inputs)[1] :], [observations]

    @override(RecurrentNetwork)
    def get_initial_state(self) -> List[np.ndarray]:
        """The kept observations: zeros [max_seq_len, obs_dim]."""
        return [np.zeros((self.max_seq_len, self.obs_dim), np.float32)]


def _gtrxl_keras_model(
    obs_dim: int,
    num_units: int,
    dim: int,
    num_heads: int,
    head_dim: int,
    mlp_dim: int,
    gate_bias: float,
    num_outputs: Optional[int],
) -> Tuple[Any, Any]:
    """The GTrXL of [2] as a Keras model, and its logits tensor (None without heads).

    Inputs ``inputs`` [B, T, obs_dim] and ``memory_in_i`` [B, Tau, dim]; outputs
    ``[logits, values]`` (if ``num_outputs``) or ``[features]``, followed by the
    L memory outputs (the input of every unit: the projection, then units 1..L-1).
    """
    input_layer = keras.layers.Input(shape=(None, obs_dim), name="inputs")
    memory_ins = [
        keras.layers.Input(shape=(None, dim), dtype=tf.float32, name=f"memory_in_{i}")
        for i in range(num_units)
    ]
    # Every layer is named, uniquely within the model: the weight keys are then the same
    # for every instance, and no two variables share a name (eager names are not made unique).
    out = keras.layers.Dense(dim, name="input_projection")(input_layer)
    memory_outs = [out]
    for i in range(num_units):
        out = SkipConnection(
            RelativeMultiHeadAttention(
                out_dim=dim,
                num_heads=num_heads,
                head_dim=head_dim,
                input_layernorm=True,
                output_activation=tf.nn.relu,
                name=f"attention_{i + 1}",
            ),
            fan_in_layer=GRUGate(gate_bias, name="gru_gate"),
            name=f"mha_{i + 1}",
        )(out, memory=memory_ins[i])
        out = SkipConnection(
            keras.Sequential(
                (
                    keras.layers.LayerNormalization(axis=-1, name=f"layer_norm_{i + 1}"),
                    PositionwiseFeedforward(
                        out_dim=dim, hidden_dim=mlp_dim, output_activation=tf.nn.relu, name=f"mlp_{i + 1}"
                    ),
                ),
                name=f"mlp_block_{i + 1}",
            ),
            fan_in_layer=GRUGate(gate_bias, name="gru_gate"),
            name=f"pos_wise_mlp_{i + 1}",
        )(out)
        memory_outs.append(out)
    logits = None
    if num_outputs is not None:
        logits = keras.layers.Dense(num_outputs, activation=None, name="logits")(out)
        outs = [logits, keras.layers.Dense(1, activation=None, name="values")(out)]
    else:
        outs = [out]
    return keras.Model(inputs=[input_layer] + memory_ins, outputs=outs + memory_outs[:-1]), logits


@PublicAPI
class GTrXLNet(RecurrentNetwork):
    """The gated Transformer-XL (GTrXL) of [2], a drop-in replacement for an LSTM.

    Use as ``config["model"]["custom_model"] = GTrXLNet`` with the sizes in
    ``custom_model_config`` (``num_transformer_units``, ``attention_dim``,
    ``num_heads``, ``memory_inference``, ...), or through ``use_attention``.

    ``forward`` takes the flat observations [B*T, obs_dim] with
    ``len(seq_lens) == B`` and ``state = [memory_0, ..., memory_{L-1}]``, each
    [B, Tau, attention_dim]; it returns [B*T, num_outputs] and the L new memory
    rows [B*T, attention_dim] (unit i's input at every step). Keras model:
    ``trxl_model`` (inputs ``inputs``, ``memory_in_i``).
    """

    def __init__(
        self,
        observation_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int],
        model_config: ModelConfigDict,
        name: str,
        *,
        num_transformer_units: int = 1,
        attention_dim: int = 64,
        num_heads: int = 2,
        memory_inference: int = 50,
        memory_training: int = 50,
        head_dim: int = 32,
        position_wise_mlp_dim: int = 32,
        init_gru_gate_bias: float = 2.0,
    ):
        """Initializes a GTrXLNet.

        Args:
            observation_space: A 1-D observation space.
            action_space: The action space.
            num_outputs: Logits size; None builds no logits/value heads (then
                ``num_outputs`` becomes ``attention_dim``).
            model_config: The model config (reads ``max_seq_len``).
            name: The model's name.
            num_transformer_units: Number of transformer units (L in [2]).
            attention_dim: Input and output size of every unit.
            num_heads: Attention heads per unit (H).
            memory_inference: Memory timesteps fed to each unit (the
                ``state_in_i`` window: ``-memory_inference:-1``).
            memory_training: Kept for RLlib compatibility (1.11 reads the same
                ``memory_inference`` window in training).
            head_dim: Size of one head (d).
            position_wise_mlp_dim: Hidden size of the position-wise MLP.
            init_gru_gate_bias: Initial update-gate bias of the GRU gates.

        Raises:
            ValueError: A size is not a positive int or the obs space is not 1-D.
        """
        super().__init__(observation_space, action_space, num_outputs, model_config, name)
        owner = f"GTrXLNet({name!r})"
        check_positive_ints(
            owner,
            num_transformer_units=num_transformer_units,
            attention_dim=attention_dim,
            num_heads=num_heads,
            memory_inference=memory_inference,
            memory_training=memory_training,
            head_dim=head_dim,
            position_wise_mlp_dim=position_wise_mlp_dim,
            max_seq_len=model_config.get("max_seq_len"),
        )
        self.num_transformer_units = num_transformer_units
        self.attention_dim = attention_dim
        self.num_heads = num_heads
        self.memory_inference = memory_inference
        self.memory_training = memory_training
        self.head_dim = head_dim
        self.max_seq_len = model_config["max_seq_len"]
        self.obs_dim = flat_obs_dim(owner, observation_space)
        self._logits = None
        self._value_out = None
        self.trxl_model = self._build_trxl_model(
            num_heads, head_dim, position_wise_mlp_dim, init_gru_gate_bias
        )
        self.view_requirements.update(
            memory_view_requirements(num_transformer_units, attention_dim, memory_inference, self.max_seq_len)
        )

    def _build_trxl_model(self, num_heads: int, head_dim: int, mlp_dim: int, gate_bias: float) -> Any:
        """Keras model [inputs, memory_in_0..L-1] -> [logits, values,] memory outs (RLlib's layout)."""
        model, logits = _gtrxl_keras_model(
            self.obs_dim,
            self.num_transformer_units,
            self.attention_dim,
            num_heads,
            head_dim,
            mlp_dim,
            gate_bias,
            self.num_outputs,
        )
        self._logits = logits
        if self.num_outputs is None:
            self.num_outputs = self.attention_dim
        return model

    @override(ModelV2)
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """[B*T, obs] + L memories [B, Tau, dim] -> [B*T, num_outputs], L memory rows [B*T, dim].

        Raises:
            ValueError: seq_lens is None or the state holds the wrong number of memories.
        """
        if len(state) != self.num_transformer_units:
            raise ValueError(
                f"GTrXLNet({self.name!r}): expected {self.num_transformer_units} memory tensors (state_in_0..{self.num_transformer_units - 1}) of shape [B, Tau, {self.attention_dim}], got {len(state)}"
            )
        observations = _sequences_of(tf.cast(input_dict["obs"], tf.float32), seq_lens)
        all_out = self.trxl_model([observations] + [tf.cast(s, tf.float32) for s in state])
        all_out = all_out if isinstance(all_out, (list, tuple)) else [all_out]
        if self._logits is not None:
            out = tf.reshape(all_out[0], [-1, self.num_outputs])
            self._value_out = all_out[1]
            memory_outs = all_out[2:]
        else:
            out = tf.reshape(all_out[0], [-1, self.attention_dim])
            memory_outs = all_out[1:]
        return out, [tf.reshape(m, [-1, self.attention_dim]) for m in memory_outs]

    @override(RecurrentNetwork)
    def get_initial_state(self) -> List[np.ndarray]:
        """``[]``: the memory comes from the view requirements, not from a state."""
        return []

    @override(ModelV2)
    def value_function(self) -> TensorType:
        """The value estimates [B*T] of the last ``forward()`` call.

        Raises:
            ValueError: Before ``forward()`` or without a value head.
        """
        if self._value_out is None:
            raise ValueError(
                f"GTrXLNet({self.name!r}): value_function() needs a forward() call first and a value head (num_outputs not None)"
            )
        return tf.reshape(self._value_out, [-1])


def encode_prev_actions(prev_actions: Any, action_space: gym.Space, n: int) -> TensorType:
    """The n previous actions [B, n, ...] as one float32 row [B, n * action_input_size].

    (Multi)Discrete actions are one-hot encoded (counted from the space's
    ``start``), Box actions flattened; a nested (Dict/Tuple) action struct is
    encoded leaf by leaf.
    """
    if isinstance(prev_actions, (dict, tuple, list)):
        from rlpolicy.utils.tf_utils import flatten_inputs_to_1d_tensor

        flat = flatten_inputs_to_1d_tensor(
            prev_actions, spaces_struct=get_base_struct_from_space(action_space), time_axis=True
        )
        return tf.reshape(flat, [tf.shape(flat)[0], -1])
    x = tf.convert_to_tensor(prev_actions)
    b = tf.shape(x)[0]
    if isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return tf.reshape(one_hot_encode(x, action_space), [b, n * action_input_size(action_space)])
    return tf.reshape(tf.cast(x, tf.float32), [b, n * action_input_size(action_space)])


@PublicAPI
class AttentionWrapper(TFModelV2):
    """A GTrXL on top of another model (``use_attention=True``).

    The catalog builds ``class X(AttentionWrapper, <default model>)`` with
    ``X._wrapped_forward = <default model>.forward``: the wrapped model's
    output (plus the ``attention_use_n_prev_actions`` one-hot/flat previous
    actions and ``attention_use_n_prev_rewards`` previous rewards) goes through
    a :class:`GTrXLNet` (``gtrxl``) whose features feed the linear Keras models
    ``_logits_branch`` and ``_value_branch``. Config keys: the ``attention_*``
    keys of MODEL_DEFAULTS and ``max_seq_len``.
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        name: str,
    ):
        """Builds the wrapped model (with no output layer), the GTrXL and the two heads.

        Raises:
            ValueError: An ``attention_*`` setting is missing or not a valid size.
        """
        gtrxl_kwargs = wrapper_config(f"AttentionWrapper({name!r})", model_config)
        super().__init__(obs_space, action_space, None, model_config, name)
        self.use_n_prev_actions = int(model_config["attention_use_n_prev_actions"])
        self.use_n_prev_rewards = int(model_config["attention_use_n_prev_rewards"])
        self.action_space_struct = get_base_struct_from_space(self.action_space)
        self.action_dim = action_input_size(action_space)
        if self.num_outputs is None:  # an identity wrapped model: its output is the obs
            self.num_outputs = int(np.prod(shape_of(self.obs_space)))
        self.num_outputs += self.use_n_prev_actions * self.action_dim + self.use_n_prev_rewards
        self.attention_dim = gtrxl_kwargs["attention_dim"]
        in_space = gym.spaces.Box(float("-inf"), float("inf"), shape=(self.num_outputs,), dtype=np.float32)
        self.gtrxl = GTrXLNet(in_space, action_space, None, model_config, "gtrxl", **gtrxl_kwargs)
        self.num_outputs = num_outputs
        features = keras.layers.Input(shape=(self.gtrxl.num_outputs,))
        self._logits_branch = keras.models.Model(
            [features], [keras.layers.Dense(self.num_outputs, activation=None, name="logits")(features)]
        )
        self._value_branch = keras.models.Model(
            [features], [keras.layers.Dense(1, activation=None, name="values")(features)]
        )
        self._features = None
        self.view_requirements = self.gtrxl.view_requirements
        self.view_requirements["obs"].space = self.obs_space
        self.view_requirements.update(
            prev_action_reward_view_requirements(
                action_space, self.use_n_prev_actions, self.use_n_prev_rewards
            )
        )

    def _wrapped_forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """Identity stand-in, used only when AttentionWrapper is instantiated unwrapped."""
        return input_dict["obs_flat"], state

    @override(ModelV2)
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """Wrapped model -> concat previous actions/rewards -> GTrXL -> logits.

        Raises:
            ValueError: seq_lens is None, or a prev_actions / prev_rewards
                column the config asks for is missing.
        """
        if seq_lens is None:
            raise ValueError(
                f"AttentionWrapper({self.name!r}): seq_lens is required (one entry per sequence; ones when acting)"
            )
        wrapped_out, _ = self._wrapped_forward(input_dict, [], None)
        extra = []
        if self.use_n_prev_actions:
            prev = _require(input_dict, "prev_actions", self)
            extra.append(encode_prev_actions(prev, self.action_space, self.use_n_prev_actions))
        if self.use_n_prev_rewards:
            prev_r = _require(input_dict, "prev_rewards", self)
            extra.append(tf.reshape(tf.cast(prev_r, tf.float32), [-1, self.use_n_prev_rewards]))
        if extra:
            wrapped_out = tf.concat([tf.cast(wrapped_out, tf.float32)] + extra, axis=1)
        input_dict["obs_flat"] = input_dict["obs"] = wrapped_out
        self._features, memory_outs = self.gtrxl(input_dict, state, seq_lens)
        return self._logits_branch(self._features), memory_outs

    @override(ModelV2)
    def get_initial_state(self) -> Union[List[np.ndarray], List[TensorType]]:
        """``[]``: the memory comes from the view requirements."""
        return []

    @override(ModelV2)
    def value_function(self) -> TensorType:
        """The value estimates [B*T] of the last ``forward()`` call.

        Raises:
            ValueError: Before ``forward()``.
        """
        if self._features is None:
            raise ValueError(f"AttentionWrapper({self.name!r}): call the model before value_function()")
        return tf.reshape(self._value_branch(self._features), [-1])


def _require(input_dict: Dict[str, TensorType], key: str, model: AttentionWrapper) -> TensorType:
    if key not in input_dict:
        raise ValueError(
            f"AttentionWrapper({model.name!r}): input_dict has no {key!r} column but the model config asks for it (attention_use_n_prev_actions / attention_use_n_prev_rewards); provided: {sorted(input_dict.keys())}"
        )
    return input_dict[key]


@PublicAPI
class Keras_GTrXLNet(_Model):
    """The GTrXL of [2] as a native Keras model (RLlib 1.11's experimental native-model API).

    ``call(inputs, memory_ins)`` takes flat inputs [B*T, obs_dim] (B =
    ``len(memory_ins[0])``) and L memories [B, Tau, attention_dim]; it returns
    the features [B*T, attention_dim] and the L memory rows [B*T,
    attention_dim]. ``view_requirements`` are those of :class:`GTrXLNet`.
    """

    def __init__(
        self,
        input_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        *,
        name: str,
        max_seq_len: int = 20,
        num_transformer_units: int = 1,
        attention_dim: int = 64,
        num_heads: int = 2,
        memory_inference: int = 50,
        memory_training: int = 50,
        head_dim: int = 32,
        position_wise_mlp_dim: int = 32,
        init_gru_gate_bias: float = 2.0,
    ):
        """Initializes a Keras_GTrXLNet (arguments as :class:`GTrXLNet`'s, plus ``max_seq_len``).

        Raises:
            ValueError: A size is not a positive int or the input space is not 1-D.
        """
        super().__init__(name=name)
        owner = f"Keras_GTrXLNet({name!r})"
        check_positive_ints(
            owner,
            max_seq_len=max_seq_len,
            num_transformer_units=num_transformer_units,
            attention_dim=attention_dim,
            num_heads=num_heads,
            memory_inference=memory_inference,
            memory_training=memory_training,
            head_dim=head_dim,
            position_wise_mlp_dim=position_wise_mlp_dim,
        )
        self.num_transformer_units = num_transformer_units
        self.attention_dim = attention_dim
        self.num_heads = num_heads
        self.memory_inference = memory_inference
        self.memory_training = memory_training
        self.head_dim = head_dim
        self.max_seq_len = max_seq_len
        self.obs_dim = flat_obs_dim(owner, input_space)
        self.trxl_model, _ = _gtrxl_keras_model(
            self.obs_dim,
            num_transformer_units,
            attention_dim,
            num_heads,
            head_dim,
            position_wise_mlp_dim,
            init_gru_gate_bias,
            None,
        )
        from rlpolicy.policy.view_requirement import ViewRequirement

        self.view_requirements = {"obs": ViewRequirement(space=input_space)}
        self.view_requirements.update(
            memory_view_requirements(num_transformer_units, attention_dim, memory_inference, max_seq_len)
        )

    def call(self, inputs: TensorType, memory_ins: List[TensorType]) -> Tuple[TensorType, List[TensorType]]:
        """[B*T, obs_dim] + L memories [B, Tau, dim] -> features [B*T, dim], L memory rows [B*T, dim]."""
        b = tf.shape(memory_ins[0])[0]
        shape = tf.shape(inputs)
        inputs = tf.reshape(inputs, tf.concat([[b, shape[0] // b], shape[1:]], axis=0))
        all_out = self.trxl_model([inputs] + list(memory_ins))
        all_out = all_out if isinstance(all_out, (list, tuple)) else [all_out]
        out = tf.reshape(all_out[0], [-1, self.attention_dim])
        return out, [tf.reshape(m, [-1, self.attention_dim]) for m in all_out[1:]]


@PublicAPI
class Keras_AttentionWrapper(_Model):
    """A GTrXL on top of a native Keras model (``use_attention`` with native models, RLlib 1.11).

    ``wrapped_cls(input_space, action_space, None, name=..., **kwargs)`` is
    built first; its first output (plus the previous actions/rewards, if
    asked for) feeds a :class:`Keras_GTrXLNet`, then linear logits and value
    layers. ``call(input_dict)`` returns ``(logits, memory_outs, {"vf_preds":
    values})``.
    """

    def __init__(
        self,
        input_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int] = None,
        *,
        name: str,
        wrapped_cls: type,
        max_seq_len: int = 20,
        attention_num_transformer_units: int = 1,
        attention_dim: int = 64,
        attention_num_heads: int = 1,
        attention_head_dim: int = 32,
        attention_memory_inference: int = 50,
        attention_memory_training: int = 50,
        attention_position_wise_mlp_dim: int = 32,
        attention_init_gru_gate_bias: float = 2.0,
        attention_use_n_prev_actions: int = 0,
        attention_use_n_prev_rewards: int = 0,
        **kwargs: Any,
    ):
        """Initializes a Keras_AttentionWrapper (the ``attention_*`` model config keys as kwargs).

        Raises:
            ValueError: A size is not a valid int.
        """
        super().__init__(name=name)
        owner = f"Keras_AttentionWrapper({name!r})"
        check_positive_ints(owner, num_outputs=num_outputs)
        check_non_negative_ints(
            owner,
            attention_use_n_prev_actions=attention_use_n_prev_actions,
            attention_use_n_prev_rewards=attention_use_n_prev_rewards,
        )
        self.wrapped_keras_model = wrapped_cls(
            input_space, action_space, None, name="wrapped_" + name, **kwargs
        )
        self.action_space = action_space
        self.max_seq_len = max_seq_len
        self.use_n_prev_actions = int(attention_use_n_prev_actions)
        self.use_n_prev_rewards = int(attention_use_n_prev_rewards)
        self.attention_dim = attention_dim
        self.action_dim = action_input_size(action_space)
        in_size = _keras_output_size(self.wrapped_keras_model, input_space)
        in_size += self.use_n_prev_actions * self.action_dim + self.use_n_prev_rewards
        in_space = gym.spaces.Box(float("-inf"), float("inf"), shape=(in_size,), dtype=np.float32)
        self.gtrxl = Keras_GTrXLNet(
            in_space,
            action_space,
            name="gtrxl",
            max_seq_len=max_seq_len,
            num_transformer_units=attention_num_transformer_units,
            attention_dim=attention_dim,
            num_heads=attention_num_heads,
            head_dim=attention_head_dim,
            memory_inference=attention_memory_inference,
            memory_training=attention_memory_training,
            position_wise_mlp_dim=attention_position_wise_mlp_dim,
            init_gru_gate_bias=attention_init_gru_gate_bias,
        )
        self._logits_layer = keras.layers.Dense(num_outputs, activation=None, name="logits")
        self._value_layer = keras.layers.Dense(1, activation=None, name="values")
        self.view_requirements = self.gtrxl.view_requirements
        self.view_requirements["obs"].space = input_space
        self.view_requirements.update(
            prev_action_reward_view_requirements(
                action_space, self.use_n_prev_actions, self.use_n_prev_rewards
            )
        )

    def call(
        self, input_dict: Dict[str, TensorType]
    ) -> Tuple[TensorType, List[TensorType], Dict[str, TensorType]]:
        """input_dict (obs, state_in_i, seq_lens, prev_actions/rewards) -> logits, memory outs, vf_preds.

        Raises:
            ValueError: Without ``seq_lens`` or a prev column the config asks for.
        """
        if input_dict.get("seq_lens") is None:
            raise ValueError(
                f"Keras_AttentionWrapper({self.name!r}): input_dict needs 'seq_lens' (one entry per sequence; ones when acting)"
            )
        wrapped_out, _, _ = self.wrapped_keras_model(input_dict)
        extra = []
        if self.use_n_prev_actions:
            prev = _require(input_dict, "prev_actions", self)
            extra.append(encode_prev_actions(prev, self.action_space, self.use_n_prev_actions))
        if self.use_n_prev_rewards:
            prev_r = _require(input_dict, "prev_rewards", self)
            extra.append(tf.reshape(tf.cast(prev_r, tf.float32), [-1, self.use_n_prev_rewards]))
        if extra:
            wrapped_out = tf.concat([tf.cast(wrapped_out, tf.float32)] + extra, axis=1)
        i, memory_ins = 0, []
        while f"state_in_{i}" in input_dict:
            memory_ins.append(tf.cast(input_dict[f"state_in_{i}"], tf.float32))
            i += 1
        features, memory_outs = self.gtrxl(wrapped_out, memory_ins)
        values = tf.reshape(self._value_layer(features), [-1])
        return self._logits_layer(features), memory_outs, {"vf_preds": values}


def _keras_output_size(model: Any, input_space: gym.spaces.Space) -> int:
    """Width of a native Keras model's first output (the flat input size if it has no layers)."""
    if not getattr(model, "layers", None):
        return int(np.prod(shape_of(input_space)))
    outputs = getattr(model.layers[-1], "outputs", None)
    shape = outputs[0].shape if outputs else None
    if shape is None or len(shape) != 2 or shape[1] is None:
        raise ValueError(
            f"Keras_AttentionWrapper: cannot tell the output size of the wrapped model {type(model).__name__}: its last layer must be a built Keras model/layer with one [B, n] output"
        )
    return int(shape[1])


__all__ = [
    "PositionwiseFeedforward",
    "TrXLNet",
    "GTrXLNet",
    "AttentionWrapper",
    "Keras_GTrXLNet",
    "Keras_AttentionWrapper",
]
