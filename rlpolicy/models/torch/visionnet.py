"""The default torch conv net for image observations (RLlib's ``torch.visionnet``).

Parameter layout (RLlib 1.11): ``_logits.*`` (when there is a logits layer),
``_convs.{i}._model.{j}.*``, then ``_value_branch.*`` (vf_share_layers) or
``_value_branch_separate.{i}._model.{j}.*``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy.models.torch.misc import SlimConv2d, SlimFC, normc_initializer, same_padding
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.models.utils import default_filter_config, get_activation_fn
from rlpolicy.utils.annotations import override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

torch, nn = try_import_torch()
_Module: Any = nn.Module  # a name mypy accepts as a base class (nn is a variable here)


def _conv_stack(
    obs_shape: Tuple[int, ...], filters: List[list], activation: object
) -> Tuple[List, int, List[int]]:
    """All but the last filter, each with TF-"same" padding; returns (layers, channels, size)."""
    h, w, in_channels = obs_shape
    in_size = [h, w]
    layers = []
    for out_channels, kernel, stride in filters[:-1]:
        padding, out_size = same_padding(in_size, kernel, stride)
        layers.append(
            SlimConv2d(in_channels, out_channels, kernel, stride, padding, activation_fn=activation)
        )
        in_channels, in_size = out_channels, list(out_size)
    return layers, in_channels, in_size


class VisionNetwork(TorchModelV2, _Module):
    """Conv net over [B, H, W, C] images (``conv_filters``, ``conv_activation``).

    The last filter uses "valid" padding and must reduce the image to 1x1.
    Then either a 1x1 conv (or ``post_fcnet_hiddens`` FC layers) produces
    ``num_outputs``, or, with ``num_outputs=None``, the flattened conv output
    is returned.
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int],
        model_config: ModelConfigDict,
        name: str,
    ):
        if not model_config.get("conv_filters"):
            model_config["conv_filters"] = default_filter_config(shape_of(obs_space))
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        if len(shape_of(obs_space)) != 3:
            raise ValueError(
                f"VisionNetwork needs an image observation space [H, W, C], got shape {obs_space.shape}"
            )
        activation = self.model_config.get("conv_activation")
        filters = self.model_config["conv_filters"]
        if len(filters) == 0:
            raise ValueError("conv_filters must have at least one entry")
        self._post_hiddens = list(model_config.get("post_fcnet_hiddens", []))
        self._post_activation = get_activation_fn(
            model_config.get("post_fcnet_activation"), framework="torch"
        )
        self.last_layer_is_flattened = False
        self._logits: Any = None
        layers, in_channels, in_size = _conv_stack(shape_of(obs_space), filters, activation)
        out_channels, kernel, stride = filters[-1]
        if self.model_config.get("no_final_linear") and num_outputs:
            layers += self._no_final_linear_head(in_channels, filters[-1], activation, num_outputs)
            out_channels = self._head_width
        else:
            layers.append(
                SlimConv2d(in_channels, out_channels, kernel, stride, None, activation_fn=activation)
            )
            if num_outputs:
                layers += self._logits_head(out_channels, in_size, kernel, stride, num_outputs)
                # Deviation: RLlib sizes the shared value head by the conv channels even
                # when post_fcnet layers follow (which then fails); use their width.
                out_channels = self._post_hiddens[-1] if self._post_hiddens else out_channels
            else:
                self.last_layer_is_flattened = True
                layers.append(nn.Flatten())
        self._convs = nn.Sequential(*layers)
        if self.num_outputs is None:
            self.num_outputs = self._flat_output_size()
        self._value_branch_separate = self._value_branch = None
        if self.model_config.get("vf_share_layers"):
            self._value_branch = SlimFC(
                out_channels, 1, initializer=normc_initializer(0.01), activation_fn=None
            )
        else:
            self._value_branch_separate = self._separate_value_convs(filters, activation)
        self._features = None

    def _no_final_linear_head(
        self, in_channels: int, last_filter: list, activation: object, num_outputs: int
    ) -> List:
        """Last conv outputs num_outputs channels itself (or feeds post_fcnet layers)."""
        _, kernel, stride = last_filter
        out_channels = last_filter[0] if self._post_hiddens else num_outputs
        layers = [SlimConv2d(in_channels, out_channels, kernel, stride, None, activation_fn=activation)]
        sizes = self._post_hiddens[:-1] + ([num_outputs] if self._post_hiddens else [])
        for size in sizes:
            layers.append(
                SlimFC(
                    in_size=out_channels,
                    out_size=size,
                    activation_fn=self._post_activation,
                    initializer=normc_initializer(1.0),
                )
            )
            out_channels = size
        self._head_width = out_channels
        return layers

    def _logits_head(
        self, out_channels: int, in_size: List[int], kernel: list, stride: int, num_outputs: int
    ) -> List:
        """Sets ``self._logits``: a 1x1 conv, or the last of the post_fcnet FC layers."""
        if not self._post_hiddens:
            k = kernel if isinstance(kernel, (list, tuple)) else [kernel, kernel]
            size = [np.ceil((in_size[0] - k[0]) / stride), np.ceil((in_size[1] - k[1]) / stride)]
            padding, _ = same_padding(size, [1, 1], [1, 1])
            self._logits = SlimConv2d(out_channels, num_outputs, [1, 1], 1, padding, activation_fn=None)
            return []
        layers, in_w = [nn.Flatten()], out_channels
        sizes = self._post_hiddens + [num_outputs]
        for i, size in enumerate(sizes):
            act = self._post_activation if i < len(self._post_hiddens) - 1 else None
            layers.append(
                SlimFC(in_size=in_w, out_size=size, activation_fn=act, initializer=normc_initializer(1.0))
            )
            in_w = size
        self._logits = layers.pop()
        return layers

    def _flat_output_size(self) -> int:
        dummy = torch.from_numpy(np.asarray(self.obs_space.sample(), dtype=np.float32))
        with torch.no_grad():
            out = self._convs(dummy.permute(2, 0, 1).unsqueeze(0))
        return int(out.shape[1])

    def _separate_value_convs(self, filters: List[list], activation: object) -> Any:
        layers, in_channels, _ = _conv_stack(shape_of(self.obs_space), filters, activation)
        out_channels, kernel, stride = filters[-1]
        layers.append(SlimConv2d(in_channels, out_channels, kernel, stride, None, activation_fn=activation))
        layers.append(
            SlimConv2d(
                in_channels=out_channels, out_channels=1, kernel=1, stride=1, padding=None, activation_fn=None
            )
        )
        return nn.Sequential(*layers)

    @override(TorchModelV2)
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        self._features = input_dict["obs"].float().permute(0, 3, 1, 2)
        conv_out = self._convs(self._features)
        if not self._value_branch_separate:
            self._features = conv_out
        if self.last_layer_is_flattened:
            return conv_out, state
        if self._logits:
            conv_out = self._logits(conv_out)
        if len(conv_out.shape) == 4:
            if conv_out.shape[2] != 1 or conv_out.shape[3] != 1:
                raise ValueError(
                    f"conv_filters {self.model_config['conv_filters']} give conv output shape "
                    f"{list(conv_out.shape)}, expected [B, {self.num_outputs}, 1, 1]; adjust the "
                    "filters so that the last layer outputs 1x1"
                )
            conv_out = conv_out.squeeze(3).squeeze(2)
        return conv_out, state

    @override(TorchModelV2)
    def value_function(self) -> TensorType:
        if self._features is None:
            raise ValueError("value_function() called before forward(); call the model first")
        if self._value_branch_separate:
            value = self._value_branch_separate(self._features)
            return value.squeeze(3).squeeze(2).squeeze(1)
        features = self._features
        if features.dim() == 4:
            features = features.squeeze(3).squeeze(2)
        return self._value_branch(features).squeeze(1)
