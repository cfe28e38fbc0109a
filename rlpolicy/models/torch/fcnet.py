"""The default fully connected torch model (RLlib's ``torch.fcnet``).

The parameter layout (``state_dict()`` names and order) is RLlib 1.11's, so
weights saved from RLlib's default torch model load unchanged::

    _hidden_layers.{i}._model.0.weight / .bias     # fcnet_hiddens (+ post_fcnet_hiddens)
    _logits._model.0.weight / .bias                # unless no_final_linear or num_outputs=None
    _append_free_log_std.log_std                   # free_log_std only
    _value_branch_separate.{i}._model.0.weight/.bias   # vf_share_layers=False only
    _value_branch._model.0.weight / .bias
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, cast

import gymnasium as gym
import numpy as np

from rlpolicy._fast.torch_functional import FunctionalPlan, build_plan
from rlpolicy.models.torch.misc import AppendBiasLayer, SlimFC, normc_initializer
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.utils.annotations import override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

torch, nn = try_import_torch()
_Module: Any = nn.Module  # a name mypy accepts as a base class (nn is a variable here)


def _hidden_stack(in_size: int, sizes: List[int], activation: object) -> Tuple[List, int]:
    """Returns normc(1.0)-initialised SlimFC layers of ``sizes`` and the final width."""
    layers = []
    for size in sizes:
        layers.append(
            SlimFC(
                in_size=in_size, out_size=size, initializer=normc_initializer(1.0), activation_fn=activation
            )
        )
        in_size = size
    return layers, in_size


class FullyConnectedNetwork(TorchModelV2, _Module):
    """MLP policy/value model configured by ``fcnet_hiddens`` / ``fcnet_activation``.

    Config keys read: ``fcnet_hiddens``, ``fcnet_activation``,
    ``post_fcnet_hiddens`` (appended to the hidden sizes),
    ``post_fcnet_activation`` (used when ``fcnet_hiddens`` is empty),
    ``no_final_linear``, ``vf_share_layers``, ``free_log_std``.
    With ``num_outputs=None`` the model outputs its last hidden layer and
    sets ``self.num_outputs`` to that width.
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int],
        model_config: ModelConfigDict,
        name: str,
    ):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        hiddens = list(model_config.get("fcnet_hiddens", [])) + list(
            model_config.get("post_fcnet_hiddens", [])
        )
        activation = model_config.get("fcnet_activation")
        if not model_config.get("fcnet_hiddens", []):
            activation = model_config.get("post_fcnet_activation")
        # Plain attributes go straight into __dict__ (what nn.Module.__setattr__
        # does with them, after its checks); modules are registered as usual.
        d = self.__dict__
        d["vf_share_layers"] = model_config.get("vf_share_layers")
        d["free_log_std"] = model_config.get("free_log_std")
        num_outputs = self._split_free_log_std(num_outputs)
        in_size = int(np.prod(shape_of(obs_space)))
        d["_logits"] = None
        if model_config.get("no_final_linear") and num_outputs:
            # The last layer itself produces the outputs, with the activation.
            layers, out_size = _hidden_stack(in_size, hiddens[:-1] + [num_outputs], activation)
        else:
            layers, out_size = _hidden_stack(in_size, hiddens, activation)
            if num_outputs:
                self._logits = SlimFC(
                    in_size=out_size,
                    out_size=num_outputs,
                    initializer=normc_initializer(0.01),
                    activation_fn=None,
                )
            else:
                self.num_outputs = out_size
        if self.free_log_std and self._logits:
            self._append_free_log_std = AppendBiasLayer(
                cast(int, num_outputs)
            )  # (set: there is a _logits layer)
        self._hidden_layers = nn.Sequential(*layers)
        d["_value_branch_separate"] = None
        vf_in = out_size
        if not self.vf_share_layers:
            # The value head sits on the separate stack's last layer (RLlib 1.11 used
            # num_outputs here, which crashes whenever it differs from hiddens[-1]).
            vf_layers, vf_in = _hidden_stack(in_size, hiddens, activation)
            self._value_branch_separate = nn.Sequential(*vf_layers)
        self._value_branch = SlimFC(
            in_size=vf_in, out_size=1, initializer=normc_initializer(0.01), activation_fn=None
        )
        d["_features"] = d["_last_flat_in"] = d["_planned_features"] = None
        d["_plan"] = self._build_plan()

    def _build_plan(self) -> Optional[FunctionalPlan]:
        """The functional replay of the hidden, logits and value stacks (see
        ``rlpolicy._fast.torch_functional``); None if some layer cannot be replayed."""
        separate = self._value_branch_separate
        value_layers = [*separate, self._value_branch] if separate is not None else [self._value_branch]
        return build_plan(
            self,
            {
                "hidden": ([self._hidden_layers], list(self._hidden_layers)),
                "logits": ([], [self._logits] if self._logits is not None else []),
                "value": ([separate] if separate is not None else [], value_layers),
            },
            SlimFC,
        )

    def _split_free_log_std(self, num_outputs: Optional[int]) -> Optional[int]:
        """With free_log_std, the network computes only the means (half the outputs)."""
        if not self.free_log_std:
            return num_outputs
        if not num_outputs or num_outputs % 2 != 0:
            raise ValueError(
                f"free_log_std=True needs an even num_outputs (means + log stds), "
                f"got num_outputs={num_outputs}"
            )
        return num_outputs // 2

    @override(TorchModelV2)
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        obs = input_dict["obs_flat"]
        if obs.dtype != torch.float32:  # (.float() of a float32 tensor is the tensor itself)
            obs = obs.float()
        flat_in = obs if obs.dim() == 2 else obs.reshape(obs.shape[0], -1)
        plan = self.__dict__.get("_plan")
        if plan is not None and plan.usable():
            planned = features = plan.run("hidden", flat_in)
            logits = plan.run("logits", features)  # (logits: maybe no layer)
        else:
            features = self._hidden_layers(flat_in)
            logits = self._logits(features) if self._logits else features
            planned = None
        # Plain tensor attributes: skip nn.Module.__setattr__'s registry checks.
        d = self.__dict__
        d["_last_flat_in"], d["_features"], d["_planned_features"] = flat_in, features, planned
        if self.free_log_std:
            logits = self._append_free_log_std(logits)
        return logits, state

    @override(TorchModelV2)
    def value_function(self) -> TensorType:
        if self._features is None:
            raise ValueError("value_function() called before forward(); call the model first")
        plan = self.__dict__.get("_plan")
        # The check made by the forward pass that produced these features holds
        # for its value estimate too (the same call of the policy).
        if plan is not None and (self.__dict__.get("_planned_features") is self._features or plan.usable()):
            separate = not self.vf_share_layers
            out = plan.run("value", self._last_flat_in if separate else self._features)
        elif self._value_branch_separate:
            out = self._value_branch(self._value_branch_separate(self._last_flat_in))
        else:
            out = self._value_branch(self._features)
        return out.squeeze(1)
