"""Small torch layers and helpers shared by the default torch models (RLlib's ``misc``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, List, Optional, Sequence, Tuple, Type, Union

import numpy as np

from rlpolicy.models.utils import get_activation_fn
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, nn = try_import_torch()
_Module: Any = nn.Module  # a name mypy accepts as a base class (nn is a variable here)
if torch is not None:
    from torch.nn.modules import module as _torch_module

    _Linear: Any = nn.Linear
    _linear = torch.nn.functional.linear
    _tracing_state = torch._C._get_tracing_state
    _set_grad_enabled = torch._C._set_grad_enabled

IntPair = Union[int, Tuple[int, int], List[int]]


@DeveloperAPI
def normc_initializer(std: float = 1.0) -> Callable[[TensorType], None]:
    """Returns an in-place initializer drawing N(0, 1) rows rescaled to L2 norm ``std``.

    Each row (output unit) of the weight matrix gets norm ``std`` (RLlib's
    "normc" initialisation, normalised over dim 1 of the torch weight).
    """

    def initializer(tensor: TensorType) -> None:
        prev = torch.is_grad_enabled()
        _set_grad_enabled(False)  # (torch.no_grad(), without its cost)
        try:
            tensor.normal_(0.0, 1.0)
            tensor.div_(torch.linalg.vector_norm(tensor, dim=1, keepdim=True))
            if std != 1.0:
                tensor.mul_(std)
        finally:
            _set_grad_enabled(prev)

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
        init_module(self)  # (= super().__init__())
        # The weights are initialised once, by `initializer` (not by torch's
        # default init first); the bias is a constant.
        initializer = initializer or nn.init.xavier_uniform_
        bias_set = False
        if _overwrites(initializer):
            linear = _uninitialized_linear(int(in_size), int(out_size), use_bias, bias_init)
            bias_set = _DIRECT_LINEAR_OK  # (made with its constant already)
        else:  # an initializer that may read the weights it changes
            linear = nn.Linear(int(in_size), int(out_size), bias=use_bias)
        initializer(linear.weight)
        if use_bias and not bias_set:
            with torch.no_grad():
                linear.bias.fill_(bias_init)
        layers = [linear]
        activation = _activation_module(activation_fn)
        if activation is not None:
            layers.append(new_module(activation))
        self._modules["_model"] = _sequential(*layers)  # (= self._model = nn.Sequential(...))
        # Unregistered shortcut (see forward); deep copies remap its modules.
        self.__dict__["_fast_plan"] = _linear_plan(self._model)

    def forward(self, x: TensorType) -> TensorType:
        seq = self._modules["_model"]
        plan = self.__dict__.get("_fast_plan")
        if plan is not None and plan[0] is seq and _plan_usable(plan):
            params = plan[2]._parameters
            out = _linear(x, params["weight"], params["bias"])
            act_fn = plan[3]
            return out if act_fn is None else act_fn(out)
        return seq(x)


if torch is not None:

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


def _uninitialized_linear(in_size: int, out_size: int, bias: bool, bias_init: float = 0.0) -> Any:
    """A plain ``nn.Linear`` (exactly that class) with an uninitialised weight,
    for layers whose weight is set right after (saves torch's default init,
    which draws as many random numbers as the real initialisation). The bias
    is ``bias_init`` where the layer is built directly (``_DIRECT_LINEAR_OK``),
    else uninitialised too."""
    if _DIRECT_LINEAR_OK:
        return _direct_linear(in_size, out_size, bias, bias_init)
    linear = _NoInitLinear(in_size, out_size, bias=bias)
    linear.__class__ = nn.Linear
    return linear


def _direct_linear(in_size: int, out_size: int, bias: bool, bias_init: float = 0.0) -> Any:
    # What nn.Linear.__init__ leaves behind (minus reset_parameters), set directly:
    # its registrations go through nn.Module.__setattr__'s checks, which cost more
    # than the rest. Used only if it matches the constructor (checked at import).
    linear = object.__new__(nn.Linear)
    init_module(linear)
    d = linear.__dict__
    d["in_features"], d["out_features"] = in_size, out_size
    params = d["_parameters"]
    params["weight"] = nn.Parameter(torch.empty((out_size, in_size)))
    params["bias"] = (
        nn.Parameter(torch.zeros(out_size) if bias_init == 0.0 else torch.full((out_size,), float(bias_init)))
        if bias
        else None
    )
    return linear


def _same_linear(a: Any, b: Any) -> bool:
    da, db = a.__dict__, b.__dict__
    if type(a) is not type(b) or list(da) != list(db) or list(a._parameters) != list(b._parameters):
        return False
    if any(type(da[k]) is not type(db[k]) for k in da):
        return False
    return all(
        (x is None and y is None)
        or (
            x is not None
            and y is not None
            and type(x) is type(y)
            and x.shape == y.shape
            and x.dtype == y.dtype
            and x.requires_grad == y.requires_grad
        )
        for x, y in zip(a._parameters.values(), b._parameters.values())
    )


def _sequential(*modules: Any) -> Any:
    """``nn.Sequential(*modules)``, registering the (freshly made) children directly."""
    if _MODULE_FIELDS is None:
        seq = nn.Sequential()
    else:  # (what nn.Sequential() does without arguments)
        seq = object.__new__(nn.Sequential)
        init_module(seq)
    seq._modules.update((str(i), m) for i, m in enumerate(modules))
    return seq


def _module_fields() -> Optional[Tuple[Tuple[str, Any], ...]]:
    """What ``nn.Module.__init__`` stores, as ``(name, constant or container type)``,
    if it is only constants and fresh empty containers (else None: use it)."""
    try:
        probe = nn.Module()
    except Exception:  # noqa: BLE001
        return None
    fields: List[Tuple[str, Any]] = []
    for name, value in probe.__dict__.items():
        if type(value) in (dict, set, OrderedDict) and not value:
            fields.append((name, type(value)))
        elif value is None or type(value) is bool:
            fields.append((name, value))
        else:
            return None
    return tuple(fields)


def init_module(module: Any) -> None:
    """``nn.Module.__init__(module)`` (no arguments): the same attributes, set
    directly (fresh empty hook/parameter/child containers, ``training=True``)."""
    fields = _MODULE_FIELDS
    if fields is None or type(module).call_super_init:
        nn.Module.__init__(module)
        return
    d = module.__dict__
    for name, value in fields:
        d[name] = value() if type(value) is type else value


def new_module(cls: Type[Any]) -> Any:
    """``cls()`` for a module class; the ones that only run ``nn.Module.__init__``
    (e.g. ``nn.Tanh``) are set up directly."""
    if _MODULE_FIELDS is None or cls.__init__ is not nn.Module.__init__ or cls.__new__ is not object.__new__:
        return cls()
    module: Any = object.__new__(cls)
    init_module(module)
    return module


def _check_direct_linear() -> bool:
    try:
        # Runs at import time, often right after a user seeded torch: keep the global RNG untouched.
        with torch.random.fork_rng(devices=[]):
            return all(_same_linear(_direct_linear(3, 2, b), nn.Linear(3, 2, bias=b)) for b in (True, False))
    except Exception:  # noqa: BLE001 - any surprise: use the constructor
        return False


# Activation modules (exact types, default arguments) and their functional twins.
# The shortcut applies them to the linear layer's fresh output, which nothing else
# sees, so tanh/sigmoid/relu run in place there (the same values, one allocation
# less per layer; their backward only needs the result). SiLU's backward needs its
# input, so it stays out of place. (Empty without torch: the module still imports.)
_FUNCTIONAL_ACTIVATIONS = (
    {}
    if torch is None
    else {
        nn.Tanh: torch.tanh_,
        nn.Sigmoid: torch.sigmoid_,
        nn.ReLU: torch.relu_,
        nn.SiLU: torch.nn.functional.silu,
    }
)


def _linear_plan(seq: Any) -> Optional[tuple]:
    """``(seq, modules, linear, act_fn)`` when ``seq`` is ``Linear [-> activation]``
    that can run as plain functional calls, else None."""
    mods = tuple(seq._modules.values())
    if not mods or type(mods[0]) is not nn.Linear or len(mods) > 2:
        return None
    act_fn = None
    if len(mods) == 2:
        act = mods[1]
        act_fn = _FUNCTIONAL_ACTIVATIONS.get(type(act))
        if act_fn is None or getattr(act, "inplace", False):
            return None
    return seq, mods, mods[0], act_fn


def _plan_usable(plan: tuple) -> bool:
    """Whether the functional shortcut computes exactly what calling the
    modules would: same plain modules, no hooks anywhere, not being traced."""
    seq, mods = plan[0], plan[1]
    if tuple(seq._modules.values()) != mods or type(mods[0]) is not _Linear:
        return False  # modules swapped, or e.g. a parametrization was registered
    for m in (seq, *mods):
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
            return False
    g = _torch_module
    if (
        g._global_forward_hooks
        or g._global_forward_pre_hooks
        or g._global_backward_hooks
        or g._global_backward_pre_hooks
    ):
        return False
    return not _tracing_state()


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


_MODULE_FIELDS = _module_fields() if torch is not None else None
_DIRECT_LINEAR_OK = torch is not None and _check_direct_linear()
