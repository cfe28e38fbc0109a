"""Torch model for Dict/Tuple observations (RLlib 1.11's ``torch.complex_input_net``).

Each flat sub-observation is turned into a vector: image Boxes ([H, W, C])
through their own ``VisionNetwork`` (``cnn_{i}``), Discrete/MultiDiscrete
one-hot encoded, everything else flattened. The concatenation goes through
the ``post_fcnet_hiddens`` stack (``post_fc_stack``), then ``logits_layer``
and ``value_layer``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, cast

import gymnasium as gym
import numpy as np

from rlpolicy.models.modelv2 import ModelV2, restore_original_dimensions
from rlpolicy.models.torch.misc import SlimFC, normc_initializer
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.models.utils import default_filter_config
from rlpolicy.utils.annotations import override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

torch, nn = try_import_torch()
_Module: Any = nn.Module  # a name mypy accepts as a base class (nn is a variable here)

_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")


class ComplexInputNetwork(TorchModelV2, _Module):
    """Concatenates CNN outputs, one-hot and flattened inputs, then an FC stack."""

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        name: str,
    ):
        from rlpolicy.utils.spaces.space_utils import flatten_space

        self.original_space = getattr(obs_space, "original_space", obs_space)
        self.processed_obs_space = (
            self.original_space if model_config.get("_disable_preprocessor_api") else obs_space
        )
        nn.Module.__init__(self)
        TorchModelV2.__init__(self, self.original_space, action_space, num_outputs, model_config, name)
        self.flattened_input_space = flatten_space(self.original_space)
        # Plain dicts (as RLlib 1.11): the CNNs are registered once, as "cnn_{i}".
        self.cnns: Dict[int, Any] = {}
        self.one_hot: Dict[int, bool] = {}
        self.flatten: Dict[int, int] = {}
        concat_size = sum(
            self._add_component(i, c, model_config) for i, c in enumerate(self.flattened_input_space)
        )
        self.post_fc_stack = self._catalog().get_model_v2(
            gym.spaces.Box(float("-inf"), float("inf"), shape=(concat_size,), dtype=np.float32),
            self.action_space,
            None,
            {
                "fcnet_hiddens": model_config.get("post_fcnet_hiddens", []),
                "fcnet_activation": model_config.get("post_fcnet_activation", "relu"),
            },
            framework="torch",
            name="post_fc_stack",
        )
        self.logits_layer: Optional[Any] = None
        self.value_layer: Any = None
        self._value_out = None
        if num_outputs:
            width = self.post_fc_stack.num_outputs
            self.logits_layer = SlimFC(
                in_size=width, out_size=num_outputs, activation_fn=None, initializer=normc_initializer(0.01)
            )
            self.value_layer = SlimFC(
                in_size=width, out_size=1, activation_fn=None, initializer=normc_initializer(0.01)
            )
        else:
            self.num_outputs = concat_size

    @staticmethod
    def _catalog():
        from rlpolicy.models.catalog import ModelCatalog

        return ModelCatalog

    def _add_component(self, i: int, component: gym.Space, model_config: ModelConfigDict) -> int:
        """Registers how sub-observation ``i`` is encoded; returns its encoded width."""
        if isinstance(component, gym.spaces.Box) and len(component.shape) == 3:
            config = {
                "conv_filters": model_config.get("conv_filters") or default_filter_config(component.shape),
                "conv_activation": model_config.get("conv_activation"),
                "post_fcnet_hiddens": [],
            }
            cnn = self._catalog().get_model_v2(
                component,
                self.action_space,
                num_outputs=None,
                model_config=config,
                framework="torch",
                name=f"cnn_{i}",
            )
            self.cnns[i] = cnn
            self.add_module(f"cnn_{i}", cnn)
            return int(cnn.num_outputs)
        if isinstance(component, gym.spaces.Discrete):
            self.one_hot[i] = True
            return int(component.n)
        if isinstance(component, gym.spaces.MultiDiscrete):
            self.one_hot[i] = True
            return int(np.sum(component.nvec))
        self.flatten[i] = int(np.prod(shape_of(component)))
        return self.flatten[i]

    def _encode(self, i: int, component: TensorType) -> TensorType:
        if i in self.cnns:
            out, _ = self.cnns[i]({"obs": component})
            return out
        if i in self.one_hot:
            if str(component.dtype).replace("torch.", "") in _INT_DTYPES:
                return _one_hot(component, self.flattened_input_space[i])
            return component.float()
        return torch.reshape(component, [-1, self.flatten[i]]).float()

    @override(ModelV2)
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        import tree

        if "obs" in input_dict and "obs_flat" in input_dict:
            orig_obs = input_dict["obs"]
        else:
            orig_obs = restore_original_dimensions(
                input_dict["obs"], self.processed_obs_space, tensorlib="torch"
            )
        outs = [self._encode(i, c) for i, c in enumerate(tree.flatten(orig_obs))]
        out, _ = self.post_fc_stack({"obs": torch.cat(outs, dim=1)})
        if self.logits_layer is None:
            return out, []
        logits, values = self.logits_layer(out), self.value_layer(out)
        self._value_out = torch.reshape(values, [-1])
        return logits, []

    @override(ModelV2)
    def value_function(self) -> TensorType:
        if self._value_out is None:
            raise ValueError(
                "value_function() called before forward() (or the model has no "
                "value head because num_outputs=None)"
            )
        return self._value_out


def _one_hot(x: TensorType, space: gym.Space) -> TensorType:
    """One-hot encodes integer Discrete [B] / MultiDiscrete [B, n] values."""
    x = x.long()
    if isinstance(space, gym.spaces.Discrete):  # values counted from gymnasium's `start`
        return nn.functional.one_hot(x.reshape(-1) - int(space.start), int(space.n)).float()
    multi = cast(gym.spaces.MultiDiscrete, space)
    nvec = np.ravel(multi.nvec)
    x = x.reshape(-1, len(nvec)) - torch.as_tensor(np.ravel(multi.start), device=x.device)
    return torch.cat([nn.functional.one_hot(x[:, j], int(n)).float() for j, n in enumerate(nvec)], dim=-1)
