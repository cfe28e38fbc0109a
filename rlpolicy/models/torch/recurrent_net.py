"""Recurrent torch models (RLlib's ``ray.rllib.models.torch.recurrent_net``).

``RecurrentNetwork`` adds the time dimension for ``forward_rnn``;
``LSTMWrapper`` puts an LSTM on top of any default model (``use_lstm=True``).
The catalog builds ``type("<Model>_as_LSTMWrapper", (LSTMWrapper, Model), ...)``
with ``_wrapped_forward = Model.forward``, so the wrapped model's parameters
come first in ``state_dict()``, followed by ``lstm.*`` and ``_logits_branch.*``
(``_value_branch`` keeps the wrapped model's slot but maps cell_size -> 1).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Tuple, Union, cast

import gymnasium as gym
import numpy as np

from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.torch.misc import SlimFC
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

torch, nn = try_import_torch()
_Module: Any = nn.Module  # a name mypy accepts as a base class (nn is a variable here)


def _add_time_dim(flat: TensorType, seq_lens: TensorType, time_major: bool) -> TensorType:
    """Reshapes [B*T, ...] (padded, batch-major rows) to [B, T, ...] or [T, B, ...].

    B is ``len(seq_lens)``. The sizes stay symbolic (``seq_lens.shape[0]`` and
    -1, never python ints), so a traced or ONNX-exported model works at any
    batch size, not only the one it was traced at.
    """
    num_seqs = seq_lens.shape[0]
    if not _exporting():
        rows, n = int(flat.shape[0]), int(num_seqs)
        if n == 0 or rows % n != 0:
            raise ValueError(
                f"padded batch of {rows} rows is not divisible by the number of sequences {n} (len(seq_lens))"
            )
    features = tuple(flat.shape[1:])
    if time_major:
        return torch.reshape(flat, (-1, num_seqs) + features)
    return torch.reshape(flat, (num_seqs, -1) + features)


def _exporting() -> bool:
    """Whether torch.jit tracing or an ONNX export is recording this call."""
    if torch.jit.is_tracing():
        return True
    onnx = sys.modules.get("torch.onnx")  # never imported: no export is running
    is_exporting = getattr(onnx, "is_in_onnx_export", None)
    return bool(is_exporting()) if callable(is_exporting) else False


@DeveloperAPI
class RecurrentNetwork(TorchModelV2):
    """Base class for torch RNN models: implement ``forward_rnn`` instead of ``forward``.

    ``forward`` reshapes the padded flat inputs [B*T, obs] to [B, T, obs]
    (B = len(seq_lens)), calls ``forward_rnn`` and flattens its [B, T, out]
    output back to [B*T, out].
    """

    @override(ModelV2)
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        if seq_lens is None:
            raise ValueError(
                f"recurrent model {self.name!r} needs seq_lens (one length per sequence); got None"
            )
        if isinstance(seq_lens, np.ndarray):
            seq_lens = torch.from_numpy(seq_lens).int()
        flat_inputs = input_dict["obs_flat"].float()
        self.time_major = self.model_config.get("_time_major", False)
        inputs = _add_time_dim(flat_inputs, seq_lens, bool(self.time_major))
        output, new_state = self.forward_rnn(inputs, state, seq_lens)
        return torch.reshape(output, [-1, self.num_outputs]), new_state

    def forward_rnn(
        self, inputs: TensorType, state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """Runs the RNN over padded sequences.

        Args:
            inputs: [B, T, obs_size] (or [T, B, obs_size] if time-major).
            state: State tensors, each [B, size].
            seq_lens: [B] sequence lengths.

        Returns:
            The output [B, T, num_outputs] and the new state tensors [B, size].
        """
        raise NotImplementedError("implement forward_rnn() in your RecurrentNetwork subclass")


def _action_dim(action_space: gym.Space) -> int:
    """Width of a one-hot/flattened previous action."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    if isinstance(action_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        from rlpolicy.utils.spaces.space_utils import flatten_space

        return sum(_action_dim(s) for s in flatten_space(action_space))
    return int(np.prod(shape_of(action_space)))


def _one_hot_actions(actions: TensorType, space: gym.Space) -> TensorType:
    """One-hot encodes Discrete [B] or MultiDiscrete [B, n] actions (concatenated)."""
    actions = actions.long()
    if isinstance(space, gym.spaces.Discrete):
        return nn.functional.one_hot(actions.reshape(-1), int(space.n)).float()
    nvec = cast(gym.spaces.MultiDiscrete, space).nvec
    actions = actions.reshape(-1, len(nvec))
    return torch.cat(
        [nn.functional.one_hot(actions[:, i], int(n)).float() for i, n in enumerate(nvec)], dim=-1
    )


@DeveloperAPI
class LSTMWrapper(RecurrentNetwork, _Module):
    """Feeds the wrapped model's output (plus optional prev action/reward) through an LSTM.

    Config keys: ``lstm_cell_size``, ``lstm_use_prev_action``,
    ``lstm_use_prev_reward``, ``max_seq_len``, ``_time_major``.
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        name: str,
    ):
        nn.Module.__init__(self)
        # Builds the wrapped model (next class in the MRO) without an output layer.
        super().__init__(obs_space, action_space, None, model_config, name)
        if self.num_outputs is None:
            self.num_outputs = int(np.prod(shape_of(self.obs_space)))
        self.cell_size = model_config["lstm_cell_size"]
        self.time_major = model_config.get("_time_major", False)
        self.use_prev_action = model_config["lstm_use_prev_action"]
        self.use_prev_reward = model_config["lstm_use_prev_reward"]
        self.action_dim = _action_dim(action_space)
        lstm_in = (
            self.num_outputs
            + (self.action_dim if self.use_prev_action else 0)
            + (1 if self.use_prev_reward else 0)
        )
        self.lstm = nn.LSTM(lstm_in, self.cell_size, batch_first=not self.time_major)
        self.num_outputs = num_outputs
        self._logits_branch = SlimFC(
            in_size=self.cell_size,
            out_size=self.num_outputs,
            activation_fn=None,
            initializer=nn.init.xavier_uniform_,
        )
        self._value_branch = SlimFC(
            in_size=self.cell_size, out_size=1, activation_fn=None, initializer=nn.init.xavier_uniform_
        )
        self._features = None
        self._add_view_requirements(model_config)

    def _add_view_requirements(self, model_config: ModelConfigDict) -> None:
        """Prev action/reward inputs (shift -1) and state_in_i/state_out_i columns."""
        from rlpolicy.policy.view_requirement import ViewRequirement

        if self.use_prev_action:
            self.view_requirements["prev_actions"] = ViewRequirement(
                "actions", space=self.action_space, shift=-1
            )
        if self.use_prev_reward:
            self.view_requirements["prev_rewards"] = ViewRequirement("rewards", shift=-1)
        space = gym.spaces.Box(-1.0, 1.0, shape=(self.cell_size,), dtype=np.float32)
        for i in range(2):
            self.view_requirements[f"state_in_{i}"] = ViewRequirement(
                f"state_out_{i}",
                shift=-1,
                used_for_compute_actions=True,
                batch_repeat_value=model_config.get("max_seq_len", 20),
                space=space,
            )
            self.view_requirements[f"state_out_{i}"] = ViewRequirement(space=space, used_for_training=True)

    @override(RecurrentNetwork)
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        if seq_lens is None:
            raise ValueError(f"LSTM model {self.name!r} needs seq_lens; got None")
        wrapped_out, _ = self._wrapped_forward(input_dict, [], None)
        extra = []
        if self.use_prev_action:
            prev_a = input_dict["prev_actions"]
            if isinstance(self.action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
                prev_a = _one_hot_actions(prev_a, self.action_space)
            extra.append(torch.reshape(prev_a.float(), [-1, self.action_dim]))
        if self.use_prev_reward:
            extra.append(torch.reshape(input_dict["prev_rewards"].float(), [-1, 1]))
        if extra:
            wrapped_out = torch.cat([wrapped_out] + extra, dim=1)
        input_dict["obs_flat"] = wrapped_out
        return super().forward(input_dict, state, seq_lens)

    @override(RecurrentNetwork)
    def forward_rnn(
        self, inputs: TensorType, state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        if len(state) != 2:
            raise ValueError(f"LSTM model {self.name!r} expects 2 state tensors (h, c), got {len(state)}")
        h0, c0 = (torch.unsqueeze(s.float(), 0) for s in state)
        self._features, (h, c) = self.lstm(inputs, (h0, c0))
        model_out = self._logits_branch(self._features)
        return model_out, [torch.squeeze(h, 0), torch.squeeze(c, 0)]

    @override(ModelV2)
    def get_initial_state(self) -> Union[List[np.ndarray], List[TensorType]]:
        weight = self._logits_branch._model[0].weight
        return [weight.new_zeros(self.cell_size), weight.new_zeros(self.cell_size)]

    @override(ModelV2)
    def value_function(self) -> TensorType:
        if self._features is None:
            raise ValueError("value_function() called before forward(); call the model first")
        return torch.reshape(self._value_branch(self._features), [-1])
