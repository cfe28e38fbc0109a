"""TF model for Dict / Tuple observations (RLlib's ``ray.rllib.models.tf.complex_input_net``).

Data flow (RLlib 1.11): each image component (3D Box) goes through its own
``VisionNetwork`` ``cnn_{i}`` (no output layer); Discrete / MultiDiscrete
components are one-hot encoded; everything else is flattened. The pieces are
concatenated, passed through ``post_fc_stack`` (a ``FullyConnectedNetwork``
built from ``post_fcnet_hiddens``), then into ``logits`` and ``value_out``
heads (``logits_and_value_model``), if ``num_outputs`` is set.

Deviation: RLlib builds the sub-models through ``ModelCatalog.get_model_v2``;
for these configs the catalog returns exactly the default ``VisionNetwork`` /
``FullyConnectedNetwork``, which we instantiate directly.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, cast

import gymnasium as gym
import numpy as np
import tree
from gymnasium.spaces import Box, Discrete, MultiDiscrete

from rlpolicy.models.modelv2 import restore_original_dimensions
from rlpolicy.models.tf.fcnet import FullyConnectedNetwork
from rlpolicy.models.tf.misc import normc_initializer, one_hot_encode
from rlpolicy.models.tf.tf_modelv2 import TFModelV2
from rlpolicy.models.tf.visionnet import VisionNetwork
from rlpolicy.models.utils import default_filter_config
from rlpolicy.utils.annotations import PublicAPI, override
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.spaces.space_utils import flatten_space, shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()


@PublicAPI
class ComplexInputNetwork(TFModelV2):
    """Concatenates CNN outputs of image components with the flat/one-hot others.

    Config keys read: ``conv_filters``, ``conv_activation`` (for the CNNs),
    ``post_fcnet_hiddens``, ``post_fcnet_activation`` (after the concat).
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        name: str,
    ):
        """Builds one sub-model per image component plus the post-concat stack and heads.

        Args:
            obs_space: A Dict/Tuple space, or a flat space carrying such a
                space as ``original_space`` (as preprocessors produce). A
                plain space (e.g. a 2-D Box or a raw Discrete) is one component.
            action_space: The action space.
            num_outputs: Width of the logits; None/0 builds no heads
                (``self.num_outputs`` becomes the post-stack width).
            model_config: The model config dict.
            name: The model's name.

        Raises:
            ValueError: a (sub-)space is not a Box, Discrete, MultiDiscrete
                or MultiBinary.
        """
        self.original_space = getattr(obs_space, "original_space", obs_space)
        _check_components(self.original_space, name)
        super().__init__(self.original_space, action_space, num_outputs, model_config, name)
        self.flattened_input_space = flatten_space(self.original_space)
        self.cnns: Dict[int, VisionNetwork] = {}
        self.one_hot: Dict[int, bool] = {}
        self.flatten: Dict[int, int] = {}
        concat_size = self._build_components(model_config)

        post_fc_stack_config = {
            "fcnet_hiddens": model_config.get("post_fcnet_hiddens", []),
            "fcnet_activation": model_config.get("post_fcnet_activation", "relu"),
        }
        self.post_fc_stack = FullyConnectedNetwork(
            Box(float("-inf"), float("inf"), shape=(concat_size,), dtype=np.float32),
            self.action_space,
            None,
            post_fc_stack_config,
            name="post_fc_stack",
        )
        self.logits_and_value_model = None
        self._value_out: Optional[TensorType] = None
        if num_outputs:
            self.logits_and_value_model = _build_heads(
                int(cast(int, self.post_fc_stack.num_outputs)), num_outputs
            )
        else:
            self.num_outputs = self.post_fc_stack.num_outputs

    def _build_components(self, model_config: ModelConfigDict) -> int:
        """Creates the per-component handling; returns the concatenated width."""
        concat_size = 0
        for i, component in enumerate(self.flattened_input_space):
            if isinstance(component, Box) and len(component.shape) == 3:
                config = {
                    "conv_filters": model_config["conv_filters"]
                    if model_config.get("conv_filters")
                    else default_filter_config(component.shape),
                    "conv_activation": model_config.get("conv_activation"),
                    "post_fcnet_hiddens": [],
                }
                self.cnns[i] = VisionNetwork(component, self.action_space, None, config, name=f"cnn_{i}")
                concat_size += int(cast(int, self.cnns[i].num_outputs))  # (set by the headless CNN)
            elif isinstance(component, Discrete):
                self.one_hot[i] = True
                concat_size += int(component.n)
            elif isinstance(component, MultiDiscrete):
                self.one_hot[i] = True
                concat_size += int(np.sum(component.nvec))
            else:
                self.flatten[i] = int(np.prod(shape_of(component)))
                concat_size += self.flatten[i]
        return concat_size

    @override(TFModelV2)
    def forward(
        self,
        input_dict: Dict[str, TensorType],
        state: List[TensorType],
        seq_lens: TensorType,
    ) -> Tuple[TensorType, List[TensorType]]:
        """Runs components -> concat -> post_fc_stack -> heads.

        ``input_dict["obs"]`` may be the structured observation (as
        ``__call__`` provides it together with "obs_flat") or the flat one.
        """
        if "obs_flat" in input_dict:
            orig_obs = input_dict["obs"]
        else:
            orig_obs = restore_original_dimensions(input_dict["obs"], self.obs_space, tensorlib="tf")
        components = tree.flatten(orig_obs)
        if len(components) != len(self.flattened_input_space):
            raise ValueError(
                f"ComplexInputNetwork({self.name!r}): observation has {len(components)} components, "
                f"expected {len(self.flattened_input_space)} for space {self.original_space}"
            )
        outs = [self._component_out(i, c) for i, c in enumerate(components)]
        out = tf.concat(outs, axis=1)
        out, _ = self.post_fc_stack({"obs": out})
        if self.logits_and_value_model is None:
            return out, []
        logits, values = self.logits_and_value_model(out)
        self._value_out = tf.reshape(values, [-1])
        return logits, []

    def _component_out(self, i: int, component: TensorType) -> TensorType:
        """The flat [B, n] float tensor contributed by component ``i``."""
        if i in self.cnns:
            cnn_out, _ = self.cnns[i]({"obs": component})
            return cnn_out
        if i in self.one_hot:
            if component.dtype in (tf.int32, tf.int64, tf.uint8):
                return one_hot_encode(component, self.flattened_input_space[i])
            return tf.cast(component, tf.float32)
        return tf.cast(tf.reshape(component, [-1, self.flatten[i]]), tf.float32)

    @override(TFModelV2)
    def value_function(self) -> TensorType:
        """The value estimates [B] of the last ``forward()`` call."""
        if self._value_out is None:
            raise ValueError(
                f"ComplexInputNetwork({self.name!r}): no value head (num_outputs was not set) or the "
                "model was not called yet"
            )
        return self._value_out


def _check_components(space: gym.spaces.Space, name: str) -> None:
    """Raises ValueError for a (sub-)space this model cannot encode."""
    for leaf in flatten_space(space):
        if not isinstance(leaf, (Box, Discrete, MultiDiscrete, gym.spaces.MultiBinary)):
            raise ValueError(
                f"ComplexInputNetwork({name!r}): cannot encode observation (sub-)space {leaf} of {space}; "
                "supported: Box, Discrete, MultiDiscrete, MultiBinary (and Dict/Tuple of those)"
            )


def _build_heads(in_size: int, num_outputs: int):
    """Keras model concat -> [logits, value_out]."""
    keras = get_keras()
    concat_layer = keras.layers.Input((in_size,))
    logits = keras.layers.Dense(num_outputs, activation=keras.activations.linear, name="logits")(concat_layer)
    value = keras.layers.Dense(
        1, name="value_out", activation=None, kernel_initializer=normc_initializer(0.01)
    )(concat_layer)
    return keras.models.Model(concat_layer, [logits, value])
