"""The default convolutional TF model (RLlib's ``ray.rllib.models.tf.visionnet``).

Keras layer names follow RLlib 1.11: ``conv1 .. conv{n-1}`` ("same" padding),
the last filter as ``conv{n}`` ("valid"), a 1x1 ``conv_out`` producing the
logits, optional ``post_fcnet_{i}`` dense layers, and the value head
``value_out`` (shared trunk) or ``conv_value_{i}`` + ``conv_value_out``
(separate trunk). Inputs are NHWC ("channels_last").
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym

from rlpolicy.models.tf.functional_replay import KerasReplay
from rlpolicy.models.tf.misc import check_input_shape, normc_initializer
from rlpolicy.models.tf.tf_modelv2 import TFModelV2
from rlpolicy.models.utils import default_filter_config, get_activation_fn
from rlpolicy.utils.annotations import PublicAPI, override
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

tf1, tf, tfv = try_import_tf()


@PublicAPI
class VisionNetwork(TFModelV2):
    """A conv-net for image observations with logits and value heads.

    Config keys read: ``conv_filters`` (a list of
    ``[out_channels, kernel, stride]``; picked from the observation shape when
    empty), ``conv_activation``, ``post_fcnet_hiddens``,
    ``post_fcnet_activation``, ``no_final_linear``, ``vf_share_layers``.
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int],
        model_config: ModelConfigDict,
        name: str,
    ):
        """Builds ``self.base_model``: image [B, H, W, C] -> [logits, value].

        Args:
            obs_space: A Box observation space of shape (H, W, C).
            action_space: The action space.
            num_outputs: Width of the logits; None/0 flattens the last conv
                output instead (``self.num_outputs`` becomes its width).
            model_config: The model config dict. As in RLlib, a missing
                ``conv_filters`` entry is filled in (the dict is updated).
            name: The model's name.

        Raises:
            ValueError: the filters do not reduce the image to 1x1 where a
                1x1 output is needed, or no default filters exist for the
                observation shape.
        """
        if not model_config.get("conv_filters"):
            # RLlib 1.11 writes the default filters back into the config dict.
            model_config["conv_filters"] = default_filter_config(shape_of(obs_space))
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        keras = get_keras()
        cfg = self.model_config
        filters = cfg["conv_filters"]
        activation = get_activation_fn(cfg.get("conv_activation"), framework="tf")
        post_hiddens = list(cfg.get("post_fcnet_hiddens", []))
        post_act = get_activation_fn(cfg.get("post_fcnet_activation"), framework="tf")
        self.data_format = "channels_last"
        self.last_layer_is_flattened = False

        inputs = keras.layers.Input(shape=obs_space.shape, name="observations")
        trunk = _conv_stack(keras, inputs, filters[:-1], activation, "conv{}")
        if cfg.get("no_final_linear") and num_outputs:
            logits_out, feature_out = self._no_final_linear_head(
                keras, trunk, filters[-1], activation, post_hiddens, post_act, num_outputs
            )
        else:
            logits_out, feature_out = self._standard_head(
                keras, trunk, filters, activation, post_hiddens, post_act, num_outputs
            )

        if cfg.get("vf_share_layers"):
            value_out = _shared_value_head(keras, feature_out, squeeze=not self.last_layer_is_flattened)
        else:
            value_out = _separate_value_trunk(keras, inputs, filters, activation)

        self.base_model = keras.Model(inputs, [logits_out, value_out])
        self._value_out: Optional[TensorType] = None
        # Eager calls of base_model skip Keras' per-layer call machinery (exactly).
        self._base_replay = KerasReplay()

    def _no_final_linear_head(
        self, keras, last_layer, last_filter, activation, post_hiddens, post_act, num_outputs
    ):
        """Last conv ``conv_out`` has the activation and emits the outputs directly."""
        out_size, kernel, stride = last_filter
        last_layer = keras.layers.Conv2D(
            out_size if post_hiddens else num_outputs,
            kernel,
            strides=_pair(stride),
            activation=activation,
            padding="valid",
            data_format="channels_last",
            name="conv_out",
        )(last_layer)
        feature_out = last_layer
        sizes = post_hiddens[:-1] + ([num_outputs] if post_hiddens else [])
        for i, size in enumerate(sizes):
            feature_out = last_layer
            last_layer = keras.layers.Dense(
                size, name=f"post_fcnet_{i}", activation=post_act, kernel_initializer=normc_initializer(1.0)
            )(last_layer)
        return last_layer, feature_out

    def _standard_head(self, keras, last_layer, filters, activation, post_hiddens, post_act, num_outputs):
        """Last filter as ``conv{n}``, then a 1x1 ``conv_out`` (or a flatten)."""
        out_size, kernel, stride = filters[-1]
        last_layer = keras.layers.Conv2D(
            out_size,
            kernel,
            strides=_pair(stride),
            activation=activation,
            padding="valid",
            data_format="channels_last",
            name=f"conv{len(filters)}",
        )(last_layer)
        if not num_outputs:
            self.last_layer_is_flattened = True
            last_layer = keras.layers.Flatten(data_format="channels_last")(last_layer)
            for i, size in enumerate(post_hiddens):
                last_layer = keras.layers.Dense(
                    size,
                    name=f"post_fcnet_{i}",
                    activation=post_act,
                    kernel_initializer=normc_initializer(1.0),
                )(last_layer)
            self.num_outputs = int(last_layer.shape[1])
            return last_layer, last_layer
        if post_hiddens:
            last_cnn = last_layer = keras.layers.Conv2D(
                post_hiddens[0],
                [1, 1],
                activation=post_act,
                padding="same",
                data_format="channels_last",
                name="conv_out",
            )(last_layer)
            sizes = post_hiddens[1:] + [num_outputs]
            for i, size in enumerate(sizes):
                feature_out = last_layer
                last_layer = keras.layers.Dense(
                    size,
                    name=f"post_fcnet_{i + 1}",
                    activation=post_act if i < len(post_hiddens) - 1 else None,
                    kernel_initializer=normc_initializer(1.0),
                )(last_layer)
        else:
            feature_out = last_layer
            last_cnn = last_layer = keras.layers.Conv2D(
                num_outputs,
                [1, 1],
                activation=None,
                padding="same",
                data_format="channels_last",
                name="conv_out",
            )(last_layer)
        if last_cnn.shape[1] != 1 or last_cnn.shape[2] != 1:
            raise ValueError(
                f"VisionNetwork({self.name!r}): conv_filters {self.model_config['conv_filters']} turn the "
                f"observation of shape {list(self.obs_space.shape)} into {last_cnn.shape.as_list()}, not "
                f"[B, 1, 1, {num_outputs}]; adjust conv_filters so that the last conv outputs 1x1"
            )
        return last_layer, feature_out

    @override(TFModelV2)
    def forward(
        self,
        input_dict: Dict[str, TensorType],
        state: List[TensorType],
        seq_lens: TensorType,
    ) -> Tuple[TensorType, List[TensorType]]:
        """Runs ``base_model`` on the (float-cast) image batch ``input_dict["obs"]``.

        Raises:
            ValueError: the image batch does not have shape [B] + obs_space.shape.
        """
        obs = input_dict["obs"]
        check_input_shape(obs, shape_of(self.obs_space), self, what="image observation")
        model_out, self._value_out = self._base_replay(self.base_model, tf.cast(obs, tf.float32))
        if self.last_layer_is_flattened:
            return model_out, state
        return tf.squeeze(model_out, axis=[1, 2]), state

    @override(TFModelV2)
    def value_function(self) -> TensorType:
        """The value estimates [B] of the last ``forward()`` call."""
        if self._value_out is None:
            raise ValueError(f"VisionNetwork({self.name!r}): call the model before value_function()")
        return tf.reshape(self._value_out, [-1])


def _pair(stride: Any) -> Tuple[int, int]:
    return tuple(stride) if isinstance(stride, (list, tuple)) else (stride, stride)


def _conv_stack(keras, x, filters: Sequence, activation, name_fmt: str):
    """'same'-padded Conv2D layers named ``name_fmt.format(i)`` (i from 1)."""
    for i, (out_size, kernel, stride) in enumerate(filters, 1):
        x = keras.layers.Conv2D(
            out_size,
            kernel,
            strides=_pair(stride),
            activation=activation,
            padding="same",
            data_format="channels_last",
            name=name_fmt.format(i),
        )(x)
    return x


def _shared_value_head(keras, feature_out, squeeze: bool):
    """``value_out`` on the policy trunk's features ([B, 1, 1, C] squeezed first)."""
    if squeeze:
        feature_out = keras.layers.Lambda(lambda x: tf.squeeze(x, axis=[1, 2]))(feature_out)
    return keras.layers.Dense(
        1, name="value_out", activation=None, kernel_initializer=normc_initializer(0.01)
    )(feature_out)


def _separate_value_trunk(keras, inputs, filters: Sequence, activation):
    """The value net's own conv stack: ``conv_value_{i}`` then ``conv_value_out``."""
    x = _conv_stack(keras, inputs, filters[:-1], activation, "conv_value_{}")
    out_size, kernel, stride = filters[-1]
    x = keras.layers.Conv2D(
        out_size,
        kernel,
        strides=_pair(stride),
        activation=activation,
        padding="valid",
        data_format="channels_last",
        name=f"conv_value_{len(filters)}",
    )(x)
    x = keras.layers.Conv2D(
        1, [1, 1], activation=None, padding="same", data_format="channels_last", name="conv_value_out"
    )(x)
    return keras.layers.Lambda(lambda t: tf.squeeze(t, axis=[1, 2]))(x)
