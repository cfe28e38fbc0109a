"""Torch attention nets (RLlib's ``ray.rllib.models.torch.attention_net``).

[1] Vaswani et al. 2017, "Attention Is All You Need".
[2] Parisotto et al. 2019, "Stabilizing Transformers for Reinforcement Learning".
[3] Dai et al. 2019, "Transformer-XL".

``GTrXLNet`` is the gated Transformer-XL of [2]: a linear projection of the
observation to ``attention_dim``, then L units of (relative multi-head
attention over [memory; segment] -> GRU gate) and (LayerNorm -> 2-layer ReLU
MLP -> GRU gate). The memory of unit i is the trajectory's last
``memory_inference`` outputs of the layer below it, which the model emits as
``state_out_i`` and reads back as ``state_in_i`` through its view
requirements (see :mod:`rlpolicy.models._attention_views`).
``AttentionWrapper`` is what the catalog puts on top of a default model when
``use_attention=True``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import gymnasium as gym
import numpy as np

from rlpolicy.models._attention_views import (
    action_input_size,
    check_positive_ints,
    flat_obs_dim,
    memory_view_requirements,
    prev_action_reward_view_requirements,
    wrapper_config,
)
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.torch.misc import SlimFC
from rlpolicy.models.torch.modules.gru_gate import GRUGate
from rlpolicy.models.torch.modules.relative_multi_head_attention import RelativeMultiHeadAttention
from rlpolicy.models.torch.modules.skip_connection import SkipConnection
from rlpolicy.models.torch.recurrent_net import RecurrentNetwork
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.utils.annotations import PublicAPI, override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.spaces.space_utils import get_base_struct_from_space, shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

torch, nn = try_import_torch()
_Module: Any = nn.Module  # a name mypy accepts as a base class (nn is a variable here)


def _num_sequences(seq_lens: Any) -> int:
    if seq_lens is None:
        raise ValueError("GTrXLNet: seq_lens is required (one entry per sequence; ones when acting)")
    return int(seq_lens.shape[0]) if hasattr(seq_lens, "shape") else len(seq_lens)


@PublicAPI
class GTrXLNet(RecurrentNetwork, _Module):
    """The gated Transformer-XL (GTrXL) of [2], a drop-in replacement for an LSTM.

    Use as ``config["model"]["custom_model"] = GTrXLNet`` with the sizes in
    ``custom_model_config`` (``num_transformer_units``, ``attention_dim``,
    ``num_heads``, ``memory_inference``, ...), or through ``use_attention``.

    ``forward`` takes the flat observations [B*T, obs_dim] with
    ``len(seq_lens) == B`` and ``state = [memory_0, ..., memory_{L-1}]``, each
    [B, Tau, attention_dim], and returns [B*T, num_outputs] plus the L new
    memory rows [B*T, attention_dim] (unit i's input at every step).
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
        nn.Module.__init__(self)
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
        self._build_layers(num_heads, head_dim, position_wise_mlp_dim, init_gru_gate_bias)
        self._build_heads()
        self.view_requirements.update(
            memory_view_requirements(num_transformer_units, attention_dim, memory_inference, self.max_seq_len)
        )

    def _build_layers(self, num_heads: int, head_dim: int, mlp_dim: int, gate_bias: float) -> None:
        """The input projection and the 2 * L gated sub-layers (RLlib 1.11's module names)."""
        dim = self.attention_dim
        self.linear_layer = SlimFC(in_size=self.obs_dim, out_size=dim)
        blocks = []
        for _ in range(self.num_transformer_units):
            attention = SkipConnection(
                RelativeMultiHeadAttention(
                    in_dim=dim,
                    out_dim=dim,
                    num_heads=num_heads,
                    head_dim=head_dim,
                    input_layernorm=True,
                    output_activation=nn.ReLU,
                ),
                fan_in_layer=GRUGate(dim, gate_bias),
            )
            mlp = SkipConnection(
                nn.Sequential(
                    nn.LayerNorm(dim),
                    SlimFC(in_size=dim, out_size=mlp_dim, use_bias=False, activation_fn=nn.ReLU),
                    SlimFC(in_size=mlp_dim, out_size=dim, use_bias=False, activation_fn=nn.ReLU),
                ),
                fan_in_layer=GRUGate(dim, gate_bias),
            )
            blocks.extend([attention, mlp])
        self.attention_layers = nn.Sequential(*blocks)

    def _build_heads(self) -> None:
        """Logits (ReLU, as RLlib 1.11) and value heads, unless num_outputs is None."""
        self.logits: Any = None
        self.values_out: Any = None
        self._value_out = None
        if self.num_outputs is not None:
            self.logits = SlimFC(in_size=self.attention_dim, out_size=self.num_outputs, activation_fn=nn.ReLU)
            self.values_out = SlimFC(in_size=self.attention_dim, out_size=1, activation_fn=None)
        else:
            self.num_outputs = self.attention_dim

    @override(ModelV2)
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """[B*T, obs] + L memories [B, Tau, dim] -> [B*T, num_outputs], L memory rows [B*T, dim].

        Raises:
            ValueError: seq_lens is None, the row count is not a multiple of
                len(seq_lens), or the state holds the wrong number of memories.
        """
        b = _num_sequences(seq_lens)
        obs = input_dict["obs"].float()
        rows = int(obs.shape[0])
        if b == 0 or rows % b != 0:
            raise ValueError(
                f"GTrXLNet({self.name!r}): {rows} observation rows do not split into {b} sequences (len(seq_lens))"
            )
        if len(state) != self.num_transformer_units:
            raise ValueError(
                f"GTrXLNet({self.name!r}): expected {self.num_transformer_units} memory tensors (state_in_0..{self.num_transformer_units - 1}) of shape [B, Tau, {self.attention_dim}], got {len(state)}"
            )
        out = torch.reshape(obs, (b, rows // b) + tuple(obs.shape[1:]))
        out = self.linear_layer(out)
        memory_outs = [out]
        for i in range(self.num_transformer_units):
            memory = torch.as_tensor(state[i], device=out.device).float()
            out = self.attention_layers[2 * i](out, memory=memory)
            out = self.attention_layers[2 * i + 1](out)
            memory_outs.append(out)
        memory_outs = memory_outs[:-1]  # the last unit's output feeds no unit
        if self.logits is not None:
            self._value_out = self.values_out(out)
            out = self.logits(out)
        return (
            torch.reshape(out, (-1, self.num_outputs)),
            [torch.reshape(m, (-1, self.attention_dim)) for m in memory_outs],
        )

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
        return torch.reshape(self._value_out, [-1])


def encode_prev_actions(prev_actions: Any, action_space: gym.Space, n: int) -> TensorType:
    """The n previous actions [B, n, ...] as one float row [B, n * action_input_size].

    (Multi)Discrete actions are one-hot encoded (counted from the space's
    ``start``), Box actions flattened; a nested (Dict/Tuple) action struct is
    encoded leaf by leaf.
    """
    if isinstance(prev_actions, (dict, tuple, list)):
        from rlpolicy.utils.torch_utils import flatten_inputs_to_1d_tensor

        flat = flatten_inputs_to_1d_tensor(
            prev_actions, spaces_struct=get_base_struct_from_space(action_space), time_axis=True
        )
        return torch.reshape(flat, (flat.shape[0], -1))
    x = torch.as_tensor(prev_actions)
    b = x.shape[0]
    if isinstance(action_space, gym.spaces.Discrete):
        steps = x.reshape(-1).long() - int(action_space.start)
        return nn.functional.one_hot(steps, int(action_space.n)).float().reshape(b, -1)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        nvec = np.ravel(action_space.nvec)
        start = torch.as_tensor(np.ravel(action_space.start).astype(np.int64), device=x.device)
        steps = x.reshape(-1, len(nvec)).long() - start
        parts = [nn.functional.one_hot(steps[:, i], int(k)).float() for i, k in enumerate(nvec)]
        return torch.cat(parts, dim=-1).reshape(b, -1)
    return x.float().reshape(b, n * action_input_size(action_space))


@PublicAPI
class AttentionWrapper(TorchModelV2, _Module):
    """A GTrXL on top of another model (``use_attention=True``).

    The catalog builds ``class X(AttentionWrapper, <default model>)`` with
    ``X._wrapped_forward = <default model>.forward``: the wrapped model's
    output (plus the ``attention_use_n_prev_actions`` one-hot/flat previous
    actions and ``attention_use_n_prev_rewards`` previous rewards) goes through
    a :class:`GTrXLNet` (``gtrxl``) whose features feed a linear
    ``_logits_branch`` and ``_value_branch``. Config keys: the
    ``attention_*`` keys of MODEL_DEFAULTS and ``max_seq_len``.
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
        nn.Module.__init__(self)
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
        self._logits_branch = SlimFC(
            in_size=self.attention_dim,
            out_size=self.num_outputs,
            activation_fn=None,
            initializer=nn.init.xavier_uniform_,
        )
        self._value_branch = SlimFC(
            in_size=self.attention_dim, out_size=1, activation_fn=None, initializer=nn.init.xavier_uniform_
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
        _num_sequences(seq_lens)
        wrapped_out, _ = self._wrapped_forward(input_dict, [], None)
        extra = []
        if self.use_n_prev_actions:
            prev = _require(input_dict, "prev_actions", self)
            extra.append(encode_prev_actions(prev, self.action_space, self.use_n_prev_actions))
        if self.use_n_prev_rewards:
            prev_r = _require(input_dict, "prev_rewards", self)
            extra.append(torch.reshape(torch.as_tensor(prev_r).float(), [-1, self.use_n_prev_rewards]))
        if extra:
            wrapped_out = torch.cat([wrapped_out.float()] + [e.to(wrapped_out.device) for e in extra], dim=1)
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
        return torch.reshape(self._value_branch(self._features), [-1])


def _require(input_dict: Dict[str, TensorType], key: str, model: AttentionWrapper) -> TensorType:
    if key not in input_dict:
        raise ValueError(
            f"AttentionWrapper({model.name!r}): input_dict has no {key!r} column but the model config asks for it (attention_use_n_prev_actions / attention_use_n_prev_rewards); provided: {sorted(input_dict.keys())}"
        )
    return input_dict[key]


__all__ = ["GTrXLNet", "AttentionWrapper"]
