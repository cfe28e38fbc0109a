"""The model catalog (RLlib's ``ray.rllib.models.catalog``).

``ModelCatalog`` picks the default model, action distribution and
preprocessor for a space and keeps the registries of custom models, action
distributions and preprocessors. Framework classes are imported only when
asked for, so this module needs neither torch nor tensorflow.
"""

from __future__ import annotations

import importlib
import logging
from functools import partial
from typing import Any, Dict, Optional, Tuple, Type

import gymnasium as gym
import numpy as np

from rlpolicy._core import checkpoint_trust
from rlpolicy._core.defaults import MODEL_DEFAULTS
from rlpolicy.models.action_dist import ActionDistribution
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.preprocessors import Preprocessor, get_preprocessor
from rlpolicy.utils.annotations import DeveloperAPI, PublicAPI
from rlpolicy.utils.error import UnsupportedSpaceException  # re-exported (defined at RLlib's path)
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

logger = logging.getLogger(__name__)

__all__ = ["ModelCatalog", "MODEL_DEFAULTS", "UnsupportedSpaceException"]

TF_FRAMEWORKS = ("tf", "tf2", "tfe")
SUPPORTED_FRAMEWORKS = TF_FRAMEWORKS + ("torch",)

# Registries (RLlib keeps these in Ray's global registry).
_CUSTOM_MODELS: Dict[str, type] = {}
_CUSTOM_ACTION_DISTS: Dict[str, type] = {}
_CUSTOM_PREPROCESSORS: Dict[str, type] = {}
# What is registered here may be named by a checkpoint (docs/checkpoints.md).
checkpoint_trust.add_registry_source(
    lambda: [*_CUSTOM_MODELS.values(), *_CUSTOM_ACTION_DISTS.values(), *_CUSTOM_PREPROCESSORS.values()]
)

_MODEL_MODULES = {
    "torch": {
        "fcnet": ("rlpolicy.models.torch.fcnet", "FullyConnectedNetwork"),
        "vision": ("rlpolicy.models.torch.visionnet", "VisionNetwork"),
        "complex": ("rlpolicy.models.torch.complex_input_net", "ComplexInputNetwork"),
        "lstm": ("rlpolicy.models.torch.recurrent_net", "LSTMWrapper"),
        "attention": ("rlpolicy.models.torch.attention_net", "AttentionWrapper"),
    },
    "tf": {
        "fcnet": ("rlpolicy.models.tf.fcnet", "FullyConnectedNetwork"),
        "vision": ("rlpolicy.models.tf.visionnet", "VisionNetwork"),
        "complex": ("rlpolicy.models.tf.complex_input_net", "ComplexInputNetwork"),
        "lstm": ("rlpolicy.models.tf.recurrent_net", "LSTMWrapper"),
        "attention": ("rlpolicy.models.tf.attention_net", "AttentionWrapper"),
    },
}


def _check_framework(framework: str) -> str:
    if framework not in SUPPORTED_FRAMEWORKS:
        raise ValueError(f"framework={framework!r} is not supported; use one of {list(SUPPORTED_FRAMEWORKS)}")
    from rlpolicy._core.framework_check import require_framework

    require_framework(framework, "ModelCatalog")  # a clear ImportError if it is not installed
    return "torch" if framework == "torch" else "tf"


def _model_class(framework: str, kind: str) -> type:
    module, name = _MODEL_MODULES[_check_framework(framework)][kind]
    return getattr(importlib.import_module(module), name)


def _dist_class(framework: str, name: str) -> type:
    """The torch (``Torch<name>``) or tf (``<name>``) action distribution class."""
    if _check_framework(framework) == "torch":
        module = importlib.import_module("rlpolicy.models.torch.torch_action_dist")
        return getattr(module, "Torch" + name)
    return getattr(importlib.import_module("rlpolicy.models.tf.tf_action_dist"), name)


def _is_multi_action_dist(cls: Any) -> bool:
    return isinstance(cls, type) and any(
        c.__name__ in ("MultiActionDistribution", "TorchMultiActionDistribution") for c in cls.__mro__
    )


def _is_simplex(space: gym.Space) -> bool:
    return type(space).__name__ == "Simplex"


@PublicAPI
class ModelCatalog:
    """Registry and factory of models, action distributions and preprocessors.

    Example::

        dist_cls, n = ModelCatalog.get_action_dist(env.action_space, config["model"],
                                                   framework="torch")
        model = ModelCatalog.get_model_v2(obs_space, env.action_space, n,
                                          config["model"], framework="torch")
    """

    @staticmethod
    @DeveloperAPI
    def get_action_dist(
        action_space: gym.Space,
        config: Optional[ModelConfigDict],
        dist_type: Optional[Any] = None,
        framework: str = "tf",
        **kwargs,
    ) -> Tuple[type, int]:
        """Returns the action distribution class and the model output size it needs.

        Args:
            action_space: The action space.
            config: The model config (``custom_action_dist`` is honoured).
            dist_type: None (default for the space), "deterministic" (Box), or
                an ActionDistribution subclass to use directly.
            framework: "torch", "tf", "tf2" or "tfe".

        Returns:
            ``(dist_class, num_outputs)``; for MultiDiscrete, MultiBinary,
            integer Box, multi-dimensional Box and Tuple/Dict spaces
            ``dist_class`` is a ``functools.partial``. Beyond RLlib 1.11, a
            float Box with more than one dimension, MultiBinary and a
            multi-dimensional MultiDiscrete get a distribution over the
            flattened action whose samples come back in the space's shape.

        Raises:
            ValueError: unknown custom distribution or framework.
            UnsupportedSpaceException: the space has no default distribution.
        """
        config = config or MODEL_DEFAULTS
        if config.get("custom_action_dist"):
            name = config["custom_action_dist"]
            dist_cls = _lookup(_CUSTOM_ACTION_DISTS, name, "custom_action_dist")
            rest = {k: v for k, v in config.items() if k != "custom_action_dist"}
            return ModelCatalog._get_multi_action_distribution(dist_cls, action_space, rest, framework)
        _check_framework(framework)
        if (
            isinstance(dist_type, type)
            and issubclass(dist_type, ActionDistribution)
            and not _is_multi_action_dist(dist_type)
        ):
            return dist_type, _output_size(dist_type, action_space, config)
        if _is_multi_action_dist(dist_type) or isinstance(action_space, (gym.spaces.Tuple, gym.spaces.Dict)):
            cls = _dist_class(framework, "MultiActionDistribution")
            return ModelCatalog._get_multi_action_distribution(cls, action_space, config, framework)
        return _default_dist(action_space, config, dist_type, framework)

    @staticmethod
    def _get_multi_action_distribution(
        dist_class: type, action_space: gym.Space, config: ModelConfigDict, framework: str
    ) -> Tuple[Any, int]:
        """Gives a MultiActionDistribution its child classes and input sizes."""
        if not _is_multi_action_dist(dist_class):
            return dist_class, _output_size(dist_class, action_space, config)
        from rlpolicy.utils.spaces.space_utils import flatten_space

        children = [
            ModelCatalog.get_action_dist(s, config, framework=framework) for s in flatten_space(action_space)
        ]
        input_lens = [int(n) for _, n in children]
        return (
            partial(
                dist_class,
                action_space=action_space,
                child_distributions=[c for c, _ in children],
                input_lens=input_lens,
            ),
            int(sum(input_lens)),
        )

    @staticmethod
    @DeveloperAPI
    def get_action_shape(action_space: gym.Space, framework: str = "tf") -> Tuple[Any, tuple]:
        """Returns ``(dtype, shape)`` of a batch of actions; the batch dim is None.

        Tuple/Dict spaces are flattened: int64 if all parts are Discrete, else
        float32, with shape (None, total_size) (1 column per Discrete, the
        size of the shape for every other part). MultiBinary actions are
        int8 of the space's shape.
        """
        lib = _framework_lib(framework)
        if isinstance(action_space, gym.spaces.Discrete):
            return lib.int64, (None,)
        if isinstance(action_space, gym.spaces.Box) or _is_simplex(action_space):
            return lib.float32, (None,) + tuple(shape_of(action_space))
        if isinstance(action_space, gym.spaces.MultiDiscrete):
            return action_space.dtype, (None,) + tuple(action_space.shape)
        if isinstance(action_space, gym.spaces.MultiBinary):
            return lib.int8, (None,) + tuple(action_space.shape)
        if isinstance(action_space, (gym.spaces.Tuple, gym.spaces.Dict)):
            from rlpolicy.utils.spaces.space_utils import flatten_space

            flat = flatten_space(action_space)
            all_discrete = all(isinstance(s, gym.spaces.Discrete) for s in flat)
            size = sum(1 if isinstance(s, gym.spaces.Discrete) else int(np.prod(shape_of(s))) for s in flat)
            return (lib.int64 if all_discrete else lib.float32), (None, int(size))
        raise UnsupportedSpaceException(
            f"action space {action_space} not supported; supported: Discrete, MultiDiscrete, "
            "MultiBinary, Box, Tuple, Dict"
        )

    @staticmethod
    @DeveloperAPI
    def get_action_placeholder(action_space: gym.Space, name: str = "action") -> TensorType:
        """Returns a tf1 placeholder for a batch of actions (call inside a tf1 Graph)."""
        from rlpolicy.utils.framework import try_import_tf

        tf1, _, _ = try_import_tf(error=True)
        dtype, shape = ModelCatalog.get_action_shape(action_space, framework="tf")
        return tf1.placeholder(dtype, shape=shape, name=name)

    @staticmethod
    @DeveloperAPI
    def get_model_v2(
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        framework: str = "tf",
        name: str = "default_model",
        model_interface: type = None,
        default_model: type = None,
        **model_kwargs,
    ) -> ModelV2:
        """Builds the model for the given spaces and config.

        ``custom_model`` (a registered name or a class) wins; otherwise the
        default is chosen by ``_get_v2_model_class`` (or ``default_model``),
        wrapped in an LSTM when ``use_lstm`` is set (a GTrXL attention net
        when ``use_attention`` is), and in
        ``model_interface`` if given.

        Args:
            obs_space: The (preprocessed) observation space.
            action_space: The action space.
            num_outputs: Model output size (e.g. from ``get_action_dist``).
            model_config: The model config dict.
            framework: "torch", "tf", "tf2" or "tfe".
            name: Name (scope) of the model.
            model_interface: Optional extra base class for the model.
            default_model: Model class to use instead of the catalog's default.
            **model_kwargs: Passed to the model constructor.

        Returns:
            The model instance.

        Raises:
            ValueError: unknown framework or custom model name, or a custom
                model class that is not a ModelV2.
            UnsupportedSpaceException: no default model for ``obs_space``.
        """
        model_config = MODEL_DEFAULTS if model_config is None else model_config
        _check_framework(framework)
        _check_recurrent_wrapping(model_config, action_space)
        if model_config.get("custom_model"):
            return _build_custom_model(
                obs_space,
                action_space,
                num_outputs,
                model_config,
                framework,
                name,
                model_interface,
                model_kwargs,
            )
        v2_class = default_model or ModelCatalog._get_v2_model_class(
            obs_space, model_config, framework=framework
        )
        v2_class = _maybe_wrap_lstm(v2_class, model_config, framework)
        wrapper = ModelCatalog._wrap_if_needed(v2_class, model_interface)
        if framework in TF_FRAMEWORKS and _is_keras_model(wrapper):
            return wrapper(
                input_space=obs_space,
                action_space=action_space,
                num_outputs=num_outputs,
                name=name,
                **dict(model_kwargs, **model_config),
            )
        return wrapper(obs_space, action_space, num_outputs, model_config, name, **model_kwargs)

    @staticmethod
    @DeveloperAPI
    def get_preprocessor(env: gym.Env, options: Optional[dict] = None) -> Preprocessor:
        """Returns the preprocessor for ``env.observation_space``."""
        return ModelCatalog.get_preprocessor_for_space(env.observation_space, options)

    @staticmethod
    @DeveloperAPI
    def get_preprocessor_for_space(
        observation_space: gym.Space, options: Optional[dict] = None
    ) -> Preprocessor:
        """Returns a preprocessor instance for ``observation_space``.

        Raises:
            ValueError: ``options`` has a key that is not a model config key,
                or names an unregistered ``custom_preprocessor``.
        """
        options = options or MODEL_DEFAULTS
        unknown = [k for k in options if k not in MODEL_DEFAULTS]
        if unknown:
            raise ValueError(f"unknown model config key(s) {unknown}; valid keys: {sorted(MODEL_DEFAULTS)}")
        if options.get("custom_preprocessor"):
            cls = _lookup(_CUSTOM_PREPROCESSORS, options["custom_preprocessor"], "custom_preprocessor")
            logger.warning(
                "custom preprocessors are deprecated (as in RLlib); prefer wrapping the environment"
            )
        else:
            cls = get_preprocessor(observation_space)
        prep = cls(observation_space, options)
        logger.debug("Created preprocessor %s: %s -> %s", prep, observation_space, prep.shape)
        return prep

    @staticmethod
    @PublicAPI
    def register_custom_preprocessor(preprocessor_name: str, preprocessor_class: type) -> None:
        """Registers a Preprocessor subclass under a name for ``custom_preprocessor``."""
        _CUSTOM_PREPROCESSORS[preprocessor_name] = preprocessor_class

    @staticmethod
    @PublicAPI
    def register_custom_model(model_name: str, model_class: type) -> None:
        """Registers a ModelV2 subclass (or keras Model) under a name for ``custom_model``."""
        _CUSTOM_MODELS[model_name] = model_class

    @staticmethod
    @PublicAPI
    def register_custom_action_dist(action_dist_name: str, action_dist_class: type) -> None:
        """Registers an ActionDistribution subclass for ``custom_action_dist``."""
        _CUSTOM_ACTION_DISTS[action_dist_name] = action_dist_class

    @staticmethod
    def _wrap_if_needed(model_cls: type, model_interface: Optional[type]) -> type:
        """Returns ``model_cls``, or a subclass of (model_interface, model_cls)."""
        if not model_interface or issubclass(model_cls, model_interface):
            return model_cls
        if not issubclass(model_cls, ModelV2):
            raise ValueError(
                f"cannot wrap {model_cls.__name__} in {model_interface.__name__}: "
                "it is not a ModelV2 subclass"
            )
        name = f"{model_cls.__name__}_as_{model_interface.__name__}"
        return type(name, (model_interface, model_cls), {"__qualname__": name})

    @staticmethod
    def _get_v2_model_class(
        input_space: gym.Space, model_config: ModelConfigDict, framework: str = "tf"
    ) -> type:
        """Default model class: vision, fully connected or complex-input net.

        RLlib 1.11's rule: a 3-D Box gets the VisionNetwork; a 1-D Box (this
        includes preprocessed Discrete/MultiDiscrete/Dict/Tuple spaces) gets
        the FullyConnectedNetwork unless its ``original_space`` holds an
        image (a Box with >= 2 dims); everything else (image-holding or
        unpreprocessed Dict/Tuple, 2-D or >3-D Box, raw Discrete /
        MultiDiscrete) gets the ComplexInputNetwork, which one-hot encodes
        discrete parts, flattens the other non-image parts and runs a CNN on
        each image part.

        Raises:
            UnsupportedSpaceException: a (sub-)space the ComplexInputNetwork
                cannot encode (no fixed shape, e.g. Text, Graph or Sequence).
        """
        _check_framework(framework)
        original = getattr(input_space, "original_space", input_space)
        if isinstance(input_space, gym.spaces.Box) and len(input_space.shape) == 3:
            return _model_class(framework, "vision")
        if (
            isinstance(input_space, gym.spaces.Box)
            and len(input_space.shape) == 1
            and not _has_image_part(original)
        ):
            return _model_class(framework, "fcnet")
        _check_complex_input_space(original)
        return _model_class(framework, "complex")


def _check_complex_input_space(space: gym.Space) -> None:
    """Raises unless every leaf of ``space`` is a Box, Discrete, MultiDiscrete or MultiBinary."""
    from rlpolicy.utils.spaces.space_utils import flatten_space

    supported = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
    leaves = flatten_space(space) if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)) else [space]
    for leaf in leaves:
        if not isinstance(leaf, supported):
            where = "" if leaf is space else f" (inside {space})"
            raise UnsupportedSpaceException(
                f"no default model for observation space {leaf}{where}; supported: Box, Discrete, "
                "MultiDiscrete, MultiBinary and Dict/Tuple of those; or set custom_model"
            )


def _lookup(registry: Dict[str, type], name: Any, key: str) -> type:
    if isinstance(name, type):
        return name
    if name not in registry:
        raise ValueError(f"{key} {name!r} is not registered; registered: {sorted(registry)}")
    return registry[name]


def _output_size(dist_cls: Any, action_space: gym.Space, config: ModelConfigDict) -> Any:
    size = dist_cls.required_model_output_shape(action_space, config)
    # Plain ints rather than numpy scalars; shape arrays (custom dists) pass through.
    return int(size) if np.ndim(size) == 0 else size


def _default_dist(
    action_space: gym.Space, config: ModelConfigDict, dist_type: Any, framework: str
) -> Tuple[Any, int]:
    """Default distributions of the non-nested spaces (RLlib 1.11's table); discrete
    spaces whose values do not start at 0 get their samples shifted (beyond RLlib)."""
    from rlpolicy.models.dist_offsets import action_offset, with_action_offset

    dist_class, size = _default_dist_unshifted(action_space, config, dist_type, framework)
    offset = action_offset(action_space)
    if offset is not None:
        dist_class = with_action_offset(dist_class, offset, framework)
    return dist_class, size


def _default_dist_unshifted(
    action_space: gym.Space, config: ModelConfigDict, dist_type: Any, framework: str
) -> Tuple[Any, int]:
    if isinstance(action_space, gym.spaces.Box) and action_space.dtype.name.startswith("int"):
        low, high = int(np.min(action_space.low)), int(np.max(action_space.high))
        num_cats = int(np.prod(action_space.shape))
        cls = _dist_class(framework, "MultiCategorical")
        return (
            partial(cls, input_lens=[high - low + 1] * num_cats, action_space=action_space),
            num_cats * (high - low + 1),
        )
    if isinstance(action_space, gym.spaces.Box):
        if dist_type is None:
            cls = _dist_class(framework, "DiagGaussian")
        elif dist_type == "deterministic":
            cls = _dist_class(framework, "Deterministic")
        else:
            raise ValueError(
                f"dist_type {dist_type!r} not supported for Box action spaces; use "
                "None, 'deterministic' or an ActionDistribution subclass"
            )
        if len(action_space.shape) != 1:
            # Beyond RLlib 1.11: a distribution over the flattened action, whose
            # samples are reshaped back to the Box's shape (also a 0-d Box: [B]).
            return partial(cls, action_space=action_space), _output_size(cls, action_space, config)
        return cls, _output_size(cls, action_space, config)
    if isinstance(action_space, gym.spaces.Discrete):
        cls = _dist_class(framework, "Categorical")
        return cls, _output_size(cls, action_space, config)
    if isinstance(action_space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        # MultiBinary(shape) is a MultiDiscrete of 2s; a multi-dimensional nvec is
        # flattened (beyond RLlib 1.11); samples come back in the space's shape.
        nvec = (
            np.full(action_space.shape, 2)
            if isinstance(action_space, gym.spaces.MultiBinary)
            else action_space.nvec
        )
        cls = _dist_class(framework, "MultiCategorical")
        return (
            partial(cls, input_lens=[int(n) for n in np.ravel(nvec)], action_space=action_space),
            int(np.sum(nvec)),
        )
    if _is_simplex(action_space):
        if framework == "torch":
            raise UnsupportedSpaceException(
                "Simplex action spaces are not supported for torch (as in RLlib 1.11); use framework='tf'"
            )
        cls = _dist_class(framework, "Dirichlet")
        return cls, _output_size(cls, action_space, config)
    raise UnsupportedSpaceException(
        f"action space {action_space} (dist_type={dist_type!r}) not supported; supported: "
        "Discrete, MultiDiscrete, MultiBinary, Box, Tuple, Dict"
    )


def _framework_lib(framework: str) -> Any:
    if _check_framework(framework) == "torch":
        from rlpolicy.utils.framework import try_import_torch

        return try_import_torch(error=True)[0]
    from rlpolicy.utils.framework import try_import_tf

    return try_import_tf(error=True)[1]


def _has_image_part(space: gym.Space) -> bool:
    if not isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        return False
    from rlpolicy.utils.spaces.space_utils import flatten_space

    return any(isinstance(s, gym.spaces.Box) and len(s.shape) >= 2 for s in flatten_space(space))


def _is_keras_model(cls: type) -> bool:
    if issubclass(cls, ModelV2):
        return False
    from rlpolicy.utils.framework import get_keras

    return issubclass(cls, get_keras().Model)


def _check_recurrent_wrapping(model_config: ModelConfigDict, action_space: gym.Space) -> None:
    """RLlib 1.11's rules: at most one of ``use_lstm`` / ``use_attention``, and the
    attention net reads previous Dict/Tuple actions only unflattened."""
    if model_config.get("use_lstm") and model_config.get("use_attention"):
        raise ValueError("model config: only one of use_lstm and use_attention may be True")
    if (
        model_config.get("use_attention")
        and (model_config.get("attention_use_n_prev_actions") or 0) > 0
        and isinstance(action_space, (gym.spaces.Tuple, gym.spaces.Dict))
        and not model_config.get("_disable_action_flattening")
    ):
        raise ValueError(
            f"model config: attention_use_n_prev_actions > 0 with the complex action space {action_space} needs _disable_action_flattening=True in the model config (as RLlib 1.11)"
        )


def _maybe_wrap_lstm(model_cls: Type[Any], model_config: ModelConfigDict, framework: str) -> type:
    """With ``use_lstm`` (``use_attention``), returns ``<Model>_as_LSTMWrapper``
    (``<Model>_as_AttentionWrapper``): an LSTM (a GTrXL) on top of the model."""
    if model_config.get("use_attention"):
        lstm_cls = _model_class(framework, "attention")
    elif model_config.get("use_lstm"):
        lstm_cls = _model_class(framework, "lstm")
    else:
        return model_cls
    if issubclass(model_cls, lstm_cls):
        return model_cls
    name = f"{model_cls.__name__}_as_{lstm_cls.__name__}"
    return type(name, (lstm_cls, model_cls), {"__qualname__": name, "_wrapped_forward": model_cls.forward})


def _build_custom_model(
    obs_space: gym.Space,
    action_space: gym.Space,
    num_outputs: int,
    model_config: ModelConfigDict,
    framework: str,
    name: str,
    model_interface: Optional[type],
    model_kwargs: dict,
) -> ModelV2:
    """Instantiates ``custom_model`` with ``custom_model_config`` as extra kwargs."""
    model_cls = _lookup(_CUSTOM_MODELS, model_config["custom_model"], "custom_model")
    if not isinstance(model_cls, type) or not (
        issubclass(model_cls, ModelV2) or (framework in TF_FRAMEWORKS and _is_keras_model(model_cls))
    ):
        raise ValueError(
            f"custom_model {model_config['custom_model']!r} must be a ModelV2 "
            f"subclass (or a keras Model for tf), got {model_cls!r}"
        )
    model_cls = ModelCatalog._wrap_if_needed(model_cls, model_interface)
    if issubclass(model_cls, ModelV2):
        model_cls = _maybe_wrap_lstm(model_cls, model_config, framework)
    custom_kwargs = dict(model_kwargs, **model_config.get("custom_model_config", {}))
    args = (obs_space, action_space, num_outputs, model_config, name)
    try:
        return model_cls(*args, **custom_kwargs)
    except TypeError as e:
        if "__init__() got an unexpected" not in str(e):
            raise
        logger.warning("custom models should accept custom_model_config entries as **kwargs")
        return model_cls(*args, **model_kwargs)
