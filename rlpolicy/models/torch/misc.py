"""Small torch layers and helpers shared by the default torch models (RLlib's ``misc``)."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from rlpolicy._fast.torch_functional import linear_plan, run_linear_plan
from rlpolicy.models.utils import get_activation_fn
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, nn = try_import_torch()
_Module: Any = nn.Module  # a name mypy accepts as a base class (nn is a variable here)

IntPair = Union[int, Tuple[int, int], List[int]]


@DeveloperAPI
def normc_initializer(std: float = 1.0) -> Callable[[TensorType], None]:
    """Returns an in-place initializer drawing N(0, 1) rows rescaled to L2 norm ``std``.

    Each row (output unit) of the weight matrix gets norm ``std`` (RLlib's
    "normc" initialisation, normalised over dim 1 of the torch weight).
    """

    def initializer(tensor: TensorType) -> None:
        with torch.no_grad():
            tensor.normal_(0.0, 1.0)
            tensor.div_(torch.linalg.vector_norm(tensor, dim=1, keepdim=True))
            if std != 1.0:
                tensor.mul_(std)

    initializer.__dict__["overwrites_tensor"] = True  # (sets every entry: see SlimFC)
    return initializer


def _pair(value: IntPair) -> Tuple[int, int]:
    if isinstance(value, (int, float, np.integer)):
        return int(value), int(value)
    return int(value[0]), int(value[1])


@DeveloperAPI
def same_padding(
    in_size: Sequence[float], filter_size: IntPair, stride_size: IntPair
) -> Tuple[Tuple[int, int, int, int], Tuple[int, int]]:
    """Computes the zero padding that reproduces TF's "same" conv padding.

    Args:
        in_size: Input (height, width).
        filter_size: Kernel size (int or (h, w)).
        stride_size: Stride (int or (h, w)).

    Returns:
        ``(padding, output)``: padding as (left, right, top, bottom) for
        ``nn.ZeroPad2d`` and the output (height, width) after the conv.
    """
    in_h, in_w = int(in_size[0]), int(in_size[1])
    f_h, f_w = _pair(filter_size)
    s_h, s_w = _pair(stride_size)
    out_h, out_w = -(-in_h // s_h), -(-in_w // s_w)
    pad_h = max((out_h - 1) * s_h + f_h - in_h, 0)
    pad_w = max((out_w - 1) * s_w + f_w - in_w, 0)
    # TF puts the odd pixel at the bottom/right.
    padding = (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2)
    return padding, (out_h, out_w)


def _activation_module(activation_fn: Any, default: Any = None) -> Optional[Any]:
    if activation_fn == "default":
        return default
    if isinstance(activation_fn, str):
        return get_activation_fn(activation_fn, "torch")
    return activation_fn


@DeveloperAPI
class SlimConv2d(_Module):
    """Conv2d with optional zero padding, custom init and activation (like tf.slim)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: IntPair,
        stride: IntPair,
        padding: Optional[Union[int, Tuple[int, ...]]],
        initializer: Any = "default",
        activation_fn: Any = "default",
        bias_init: float = 0,
    ):
        """Builds ``[ZeroPad2d] -> Conv2d -> [activation]`` inside ``self._model``.

        Args:
            in_channels: Input channels.
            out_channels: Output channels.
            kernel: Kernel size (int or (h, w)).
            stride: Stride (int or (h, w)).
            padding: ``nn.ZeroPad2d`` padding, or falsy for none ("valid").
            initializer: In-place weight initializer; "default" = xavier uniform,
                None = torch's default.
            activation_fn: Activation module class or name; "default" = ReLU.
            bias_init: Constant for the bias.
        """
        super().__init__()
        layers = []
        if padding:
            layers.append(nn.ZeroPad2d(padding))
        conv = nn.Conv2d(in_channels, out_channels, kernel, stride)
        if initializer:
            if initializer == "default":
                initializer = nn.init.xavier_uniform_
            initializer(conv.weight)
        nn.init.constant_(conv.bias, bias_init)
        layers.append(conv)
        activation = _activation_module(activation_fn, default=nn.ReLU)
        if activation is not None:
            layers.append(activation())
        self._model = nn.Sequential(*layers)

    def forward(self, x: TensorType) -> TensorType:
        return self._model(x)


@DeveloperAPI
class SlimFC(_Module):
    """Linear layer with custom init and optional activation (like tf.slim's fully_connected)."""

    def __init__(
        self,
        in_size: int,
        out_size: int,
        initializer: Any = None,
        activation_fn: Any = None,
        use_bias: bool = True,
        bias_init: float = 0.0,
    ):
        """Builds ``Linear -> [activation]`` inside ``self._model``.

        Args:
            in_size: Input features.
            out_size: Output features.
            initializer: In-place weight initializer (default xavier uniform).
            activation_fn: Activation module class or name, or None.
            use_bias: Whether the linear layer has a bias.
            bias_init: Constant for the bias.
        """
        super().__init__()
        # The weights are initialised once, by `initializer` (not by torch's
        # default init first); the bias is a constant.
        initializer = initializer or nn.init.xavier_uniform_
        if _overwrites(initializer):
            linear = _uninitialized_linear(int(in_size), int(out_size), use_bias)
        else:  # an initializer that may read the weights it changes
            linear = nn.Linear(int(in_size), int(out_size), bias=use_bias)
        initializer(linear.weight)
        if use_bias:
            with torch.no_grad():
                linear.bias.fill_(bias_init)
        layers = [linear]
        activation = _activation_module(activation_fn)
        if activation is not None:
            layers.append(activation())
        self._model = nn.Sequential(*layers)
        # Unregistered shortcut (see forward); deep copies remap its modules.
        self.__dict__["_fast_plan"] = linear_plan(self._model)

    def forward(self, x: TensorType) -> TensorType:
        # (self._model(x), as functional calls where rlpolicy._fast.torch_functional may)
        return run_linear_plan(self.__dict__.get("_fast_plan"), self._modules["_model"], x)


if torch is not None:
    _Linear: Any = nn.Linear

    class _NoInitLinear(_Linear):
        """``nn.Linear`` whose constructor leaves the parameters uninitialised."""

        def reset_parameters(self) -> None:
            pass


def _overwrites(initializer: Any) -> bool:
    """Whether ``initializer`` sets every entry without reading the old values:
    normc and torch's own ``nn.init`` fills."""
    if getattr(initializer, "overwrites_tensor", False):
        return True
    return (
        getattr(initializer, "__module__", None) == "torch.nn.init"
        and getattr(initializer, "__name__", "") in _TORCH_FILLS
    )


_TORCH_FILLS = frozenset(
    {
        "xavier_uniform_",
        "xavier_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "orthogonal_",
        "normal_",
        "uniform_",
        "trunc_normal_",
        "zeros_",
        "ones_",
        "constant_",
        "eye_",
    }
)


def _uninitialized_linear(in_size: int, out_size: int, bias: bool) -> Any:
    """A plain ``nn.Linear`` (exactly that class) with uninitialised parameters,
    for layers whose weight is set right after (saves torch's default init,
    which draws as many random numbers as the real initialisation)."""
    linear = _NoInitLinear(in_size, out_size, bias=bias)
    linear.__class__ = nn.Linear
    return linear


@DeveloperAPI
class AppendBiasLayer(_Module):
    """Appends a learned, input-independent vector (``log_std``) to each row (free_log_std)."""

    def __init__(self, num_bias_vars: int):
        super().__init__()
        self.log_std = nn.Parameter(torch.zeros(int(num_bias_vars)))

    def forward(self, x: TensorType) -> TensorType:
        return torch.cat([x, self.log_std.unsqueeze(0).expand(x.shape[0], -1)], dim=1)


@DeveloperAPI
class Reshape(_Module):
    """Reshapes its input to ``shape`` (a module so it can sit in nn.Sequential)."""

    def __init__(self, shape: List[int]):
        super().__init__()
        self.shape = list(shape)

    def forward(self, x: TensorType) -> TensorType:
        return x.view(*self.shape)
