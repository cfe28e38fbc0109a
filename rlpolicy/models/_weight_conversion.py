"""Moving a catalog model's weights between torch, TF graph ("tf") and TF eager ("tf2").

The three frameworks store the same numbers under different names and layouts:

* torch: ``model.state_dict()`` keys (``_hidden_layers.0._model.0.weight``), dense
  weights ``[out, in]``, conv weights ``[out, in, h, w]`` (OIHW), an LSTM with two
  biases (``bias_ih_l0`` + ``bias_hh_l0``);
* TF graph: variable op names (``fc_1/kernel``), dense kernels ``[in, out]``, conv
  kernels ``[h, w, in, out]`` (HWIO), one LSTM bias;
* TF eager: the model's attribute paths (``base_model.fc_1.kernel:0``), TF layouts.

Everything goes through one *canonical* form: TF variable names without the
``:0`` (``fc_1/kernel``, ``lstm/lstm_cell/bias``) holding TF-layout arrays. The TF
names are the model's structure (RLlib's Keras layer names), so graph and eager
TF map onto each other through them. Torch parameters are mapped onto them by
the catalog models' module structure (:func:`torch_to_canonical_names`). Keras'
and torch's LSTM gates are both ordered input, forget, cell, output, so only the
transposes and the bias sum are needed.

Only numpy is imported here; torch and TF are never needed for the conversion.
The public entry is ``rlpolicy.models.convert_weights``; this module is private
(a module named ``convert_weights`` would be shadowed by that function).
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, cast

import numpy as np

from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import WeightsPolicy

__all__ = [
    "LAYOUTS",
    "adapt_weights",
    "canonical_weights",
    "convert_weights",
    "torch_to_canonical_names",
    "weights_layout",
]

#: The layouts: torch, TF graph ("tf") and TF eager ("tf2").
LAYOUTS = ("torch", "tf", "tf2")

_LSTM = "lstm/lstm_cell"
_TORCH_LSTM = {
    "lstm.weight_ih_l0": (f"{_LSTM}/kernel", "dense"),
    "lstm.weight_hh_l0": (f"{_LSTM}/recurrent_kernel", "dense"),
    "lstm.bias_ih_l0": (f"{_LSTM}/bias", "bias_ih"),
    "lstm.bias_hh_l0": (f"{_LSTM}/bias", "bias_hh"),
}
_TORCH_PARAM = re.compile(r"^(?P<layer>.+?)\._model\.\d+\.(?P<var>weight|bias)$")


@PublicAPI
def weights_layout(weights: Mapping[str, Any]) -> str:
    """Which framework a weights dict comes from, by its keys.

    Returns:
        ``"tf2"`` when a key carries a ``:N`` suffix (eager ``get_weights(as_dict=True)``),
        ``"tf"`` when a key has a ``/`` (graph ``get_weights()``), ``"torch"``
        when every key is a dotted module path (``state_dict()`` keys), else
        ``"unknown"`` (no conversion applies; the receiver's own key check reports it).

    Raises:
        ValueError: ``weights`` is not a non-empty mapping.
    """
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError(
            f"weights_layout: expected a non-empty dict of weights, got {type(weights).__name__}"
        )
    keys = [str(k) for k in weights]
    if any(re.search(r":\d+$", k) for k in keys):
        return "tf2"
    if any("/" in k for k in keys):
        return "tf"
    if all("." in k for k in keys):
        return "torch"
    return "unknown"


def _eager_canonical(key: str) -> str:
    """An eager key's TF variable name: ``base_model.fc_1.kernel:0`` -> ``fc_1/kernel``.

    The eager keys are the model's attribute path followed by the variable's own TF
    name; the first segment is the model attribute holding the Keras model
    (``base_model``, ``_rnn_model``). A free variable (``log_std_var``) is named
    after its TF name (``log_std``).
    """
    name = re.sub(r":\d+$", "", key)
    if "." not in name:
        return {"log_std_var": "log_std"}.get(name, name)
    return "/".join(name.split(".")[1:])


class _TorchContext:
    """Facts about a torch catalog model's structure that its keys alone leave open."""

    def __init__(self, torch_keys: Sequence[str], canonical_keys: Sequence[str]):
        layers = [m.group("layer") for m in map(_TORCH_PARAM.match, torch_keys) if m]
        self.is_lstm = any(k in _TORCH_LSTM for k in torch_keys)
        self.is_vision = any(layer.startswith("_convs.") for layer in layers)
        self.n_hidden = len({layer for layer in layers if layer.startswith("_hidden_layers.")})
        self.n_convs = len({layer for layer in layers if layer.startswith("_convs.")})
        self.n_value = len({layer for layer in layers if layer.startswith("_value_branch_separate.")})
        has_logits = any(layer == "_logits" for layer in layers)
        canonical = set(canonical_keys)
        # no_final_linear: the last hidden (conv) layer is the output layer fc_out (conv_out).
        self.last_is_out = not has_logits and (
            "conv_out/kernel" in canonical if self.is_vision else "fc_out/kernel" in canonical
        )


def _torch_layer(layer: str, ctx: _TorchContext) -> Optional[str]:
    """The TF layer name of a torch catalog sub-module (None: not a catalog layer)."""
    head, _, index = layer.partition(".")
    i = int(index) if index.isdigit() else -1
    if head == "_hidden_layers" and i >= 0:
        return "fc_out" if ctx.last_is_out and i == ctx.n_hidden - 1 else f"fc_{i + 1}"
    if head == "_convs" and i >= 0:
        return "conv_out" if ctx.last_is_out and i == ctx.n_convs - 1 else f"conv{i + 1}"
    if head == "_value_branch_separate" and i >= 0:
        if not ctx.is_vision:
            return f"fc_value_{i + 1}"
        return "conv_value_out" if i == ctx.n_value - 1 else f"conv_value_{i + 1}"
    if not index:
        if head == "_logits":
            return "conv_out" if ctx.is_vision else "fc_out"
        if head == "_value_branch":
            return "values" if ctx.is_lstm else "value_out"
        if head == "_logits_branch":
            return "logits"
    return None


@PublicAPI
def torch_to_canonical_names(
    torch_keys: Sequence[str], canonical_keys: Sequence[str] = ()
) -> Dict[str, Tuple[str, str]]:
    """Maps a torch catalog model's state-dict keys to TF variable names.

    Covers the catalog's ``FullyConnectedNetwork`` (shared or separate value
    trunk, ``no_final_linear``, ``free_log_std``), ``VisionNetwork`` (shared or
    separate value convs, ``no_final_linear``) and their ``LSTMWrapper``.

    Args:
        torch_keys: The torch model's ``state_dict()`` keys.
        canonical_keys: The TF side's variable names, where known; they settle
            whether the last hidden layer is the output layer (``no_final_linear``).

    Returns:
        ``{torch_key: (tf_name, kind)}``, kind one of ``"dense"`` (2-D weight:
        transposed), ``"conv"`` (OIHW <-> HWIO), ``"bias"`` (as is), ``"bias_ih"`` /
        ``"bias_hh"`` (the two torch LSTM biases; TF holds their sum).

    Raises:
        ValueError: Naming the first key that is no catalog model parameter.
    """
    ctx = _TorchContext(torch_keys, canonical_keys)
    out: Dict[str, Tuple[str, str]] = {}
    for key in torch_keys:
        if key in _TORCH_LSTM:
            out[key] = _TORCH_LSTM[key]
            continue
        if key == "_append_free_log_std.log_std":
            out[key] = ("log_std", "bias")
            continue
        match = _TORCH_PARAM.match(key)
        tf_layer = _torch_layer(match.group("layer"), ctx) if match else None
        if match is None or tf_layer is None:
            raise ValueError(
                f"convert_weights: torch key {key!r} is no parameter of a catalog model "
                "(FullyConnectedNetwork, VisionNetwork, LSTMWrapper); cannot map it to TF"
            )
        kind = "bias" if match.group("var") == "bias" else "weight"
        out[key] = (f"{tf_layer}/{'bias' if kind == 'bias' else 'kernel'}", kind)
    return out


def _to_tf_layout(value: np.ndarray, kind: str) -> np.ndarray:
    if kind in ("weight", "dense"):
        if value.ndim == 4:  # OIHW -> HWIO
            return np.ascontiguousarray(value.transpose(2, 3, 1, 0))
        return np.ascontiguousarray(value.T) if value.ndim == 2 else value
    return value


def _to_torch_layout(value: np.ndarray, kind: str) -> np.ndarray:
    if kind in ("weight", "dense"):
        if value.ndim == 4:  # HWIO -> OIHW
            return np.ascontiguousarray(value.transpose(3, 2, 0, 1))
        return np.ascontiguousarray(value.T) if value.ndim == 2 else value
    if kind == "bias_hh":  # TF's one bias goes to bias_ih; bias_hh is zero.
        return np.zeros_like(value)
    return value


@PublicAPI
def canonical_weights(
    weights: Mapping[str, Any],
    layout: Optional[str] = None,
    canonical_keys: Sequence[str] = (),
    names: Optional[Mapping[str, str]] = None,
) -> Dict[str, np.ndarray]:
    """A weights dict as ``{TF variable name: TF-layout array}``.

    Args:
        weights: A torch ``get_weights()``, TF graph ``get_weights()`` or eager
            ``get_weights(as_dict=True)`` dict.
        layout: Its layout (one of ``LAYOUTS``); default: :func:`weights_layout`.
        canonical_keys: The destination's TF names, where known (see
            :func:`torch_to_canonical_names`).
        names: For eager weights, ``{key: TF variable name}`` (the variables' own
            names without ``:0``); keys not in it are read off their attribute path.

    Raises:
        ValueError: An unknown layout, a torch key outside the catalog models, or
            two keys that map to the same TF name.
    """
    layout = layout or weights_layout(weights)
    if layout == "unknown":
        raise ValueError(
            f"convert_weights: keys {sorted(map(str, weights))[:4]} are neither torch "
            "state_dict keys, graph-TF variable names nor eager keys; cannot tell their layout"
        )
    if layout not in LAYOUTS:
        raise ValueError(f"convert_weights: unknown layout {layout!r}; expected one of {LAYOUTS}")
    if layout == "tf":
        return {str(k): np.asarray(v) for k, v in weights.items()}
    if layout == "tf2":
        out: Dict[str, np.ndarray] = {}
        for key, value in weights.items():
            name = (names or {}).get(str(key)) or _eager_canonical(str(key))
            if name in out:
                raise ValueError(
                    f"convert_weights: eager keys map twice onto TF variable {name!r} "
                    f"(second: {key!r}); not a single catalog model"
                )
            out[name] = np.asarray(value)
        return out
    torch_names = torch_to_canonical_names([str(k) for k in weights], canonical_keys)
    out = {}
    for key, (name, kind) in torch_names.items():
        value = _to_tf_layout(np.asarray(weights[key]), kind)
        if kind == "bias_hh":
            continue
        if kind == "bias_ih":  # TF's LSTM bias is torch's bias_ih + bias_hh.
            value = value + np.asarray(weights["lstm.bias_hh_l0"])
        out[name] = value
    return out


def _check_flatten_order(canonical: Mapping[str, np.ndarray]) -> None:
    """An LSTM over a conv net reads the flattened last conv output: torch flattens
    it channels-first (NCHW), TF channels-last (NHWC). They agree only for a 1x1
    output, the only case converted (the spatial size is not in the weights).

    Raises:
        ValueError: The LSTM's input is wider than the last conv layer's channels.
    """
    convs = sorted(
        (int(m.group(1)), v) for k, v in canonical.items() if (m := re.fullmatch(r"conv(\d+)/kernel", k))
    )
    lstm_kernel = canonical.get(f"{_LSTM}/kernel")
    if not convs or lstm_kernel is None:
        return
    channels, width = convs[-1][1].shape[-1], lstm_kernel.shape[0]
    if width != channels:
        raise ValueError(
            f"convert_weights: {_LSTM}/kernel reads {width} flattened conv features from "
            f"{channels} channels (a conv output larger than 1x1, or prev-action/reward "
            "inputs); torch flattens NCHW and TF NHWC, and the rows cannot be reordered "
            "without the spatial size: not converted"
        )


def _unused_inner_value_head(name: str, canonical: Mapping[str, Any]) -> bool:
    """The wrapped model's own value head inside a TF LSTMWrapper: never used (the
    wrapper's ``values`` layer gives the value), and torch's wrapper has none."""
    return f"{_LSTM}/kernel" in canonical and name.split("/")[0] == "value_out"


@PublicAPI
def adapt_weights(
    weights: Mapping[str, Any],
    target: Mapping[str, Any],
    target_layout: str,
    target_names: Optional[Mapping[str, str]] = None,
    source_layout: Optional[str] = None,
    source_names: Optional[Mapping[str, str]] = None,
) -> Dict[str, np.ndarray]:
    """Converts ``weights`` (any layout) to a model's own keys and layout.

    Args:
        weights: A torch, TF graph or TF eager weights dict.
        target: The destination model's current ``{key: array}`` (its own
            ``get_weights`` dict): the keys, shapes and dtypes to produce, and the
            values kept for a TF LSTM wrapper's unused inner value head.
        target_layout: The destination's layout (one of ``LAYOUTS``).
        target_names: For a ``"tf2"`` target, ``{key: TF variable name}`` (the
            variables' own names without ``:0``); default: read off the keys.
        source_layout: The layout of ``weights``; default: :func:`weights_layout`.
        source_names: For eager ``weights``, ``{key: TF variable name}`` (as
            ``target_names``).

    Returns:
        ``{target key: array}`` with every key of ``target``, cast to its dtype.

    Raises:
        ValueError: Naming the key that has no counterpart on the other side, or
            the key whose converted shape differs from the destination's.
    """
    if target_layout not in LAYOUTS:
        raise ValueError(f"convert_weights: unknown layout {target_layout!r}; expected one of {LAYOUTS}")
    src_layout = source_layout or weights_layout(weights)
    if target_layout == "torch":
        return _adapt_to_torch(weights, src_layout, target, source_names)
    if target_layout == "tf":
        names = {str(k): str(k) for k in target}
    else:
        names = {str(k): v for k, v in (target_names or {}).items()} or {
            str(k): _eager_canonical(str(k)) for k in target
        }
    canonical = canonical_weights(weights, src_layout, list(names.values()), source_names)
    if src_layout == "torch":
        _check_flatten_order(canonical)
    by_name = {name: key for key, name in names.items()}
    unknown = [n for n in canonical if n not in by_name]
    if unknown:
        raise ValueError(
            f"convert_weights: {src_layout} weights hold {unknown[0]!r} (TF name), which the "
            f"{target_layout} model has not; unmatched: {unknown}"
        )
    out: Dict[str, np.ndarray] = {}
    for key, name in names.items():
        current = np.asarray(target[key])
        if name not in canonical:
            if src_layout == "torch" and _unused_inner_value_head(name, by_name):
                out[key] = np.array(current, copy=True)
                continue
            raise ValueError(
                f"convert_weights: the {target_layout} model's {key!r} (TF name {name!r}) has no "
                f"counterpart in the {src_layout} weights"
            )
        out[key] = _checked(canonical[name], current, key, name)
    return out


def _adapt_to_torch(
    weights: Mapping[str, Any],
    src_layout: str,
    target: Mapping[str, Any],
    source_names: Optional[Mapping[str, str]] = None,
) -> Dict[str, np.ndarray]:
    if src_layout == "torch":
        canonical_src = None
    else:
        canonical_src = canonical_weights(weights, src_layout, (), source_names)
        _check_flatten_order(canonical_src)
    if canonical_src is None:
        return {str(k): np.asarray(v) for k, v in weights.items()}
    names = torch_to_canonical_names([str(k) for k in target], list(canonical_src))
    used = {name for name, _ in names.values()}
    unknown = [n for n in canonical_src if n not in used and not _unused_inner_value_head(n, canonical_src)]
    if unknown:
        raise ValueError(
            f"convert_weights: {src_layout} weights hold {unknown[0]!r}, which the torch model "
            f"has no parameter for; unmatched: {unknown}"
        )
    out: Dict[str, np.ndarray] = {}
    for key, (name, kind) in names.items():
        if name not in canonical_src:
            raise ValueError(
                f"convert_weights: the torch model's {key!r} (TF name {name!r}) has no "
                f"counterpart in the {src_layout} weights"
            )
        value = _to_torch_layout(canonical_src[name], kind)
        out[key] = _checked(value, np.asarray(target[key]), key, name)
    return out


def _checked(value: np.ndarray, current: np.ndarray, key: str, name: str) -> np.ndarray:
    if tuple(value.shape) != tuple(current.shape):
        raise ValueError(
            f"convert_weights: {key!r} (TF name {name!r}) gets shape {tuple(value.shape)} "
            f"after the layout conversion, but the destination's is {tuple(current.shape)}; "
            "the two models' architectures differ"
        )
    return np.array(value, dtype=current.dtype, copy=True)


def _policy_layout(policy: WeightsPolicy) -> str:
    framework = getattr(policy, "framework", None)
    if framework == "torch":
        return "torch"
    if framework in ("tf2", "tfe"):
        return "tf2"
    if framework == "tf":
        # A "tf" policy class run eagerly (as_eager) reports framework "tf2"; graph has a session.
        return "tf" if policy.get_session() is not None else "tf2"
    raise ValueError(
        f"convert_weights: {type(policy).__name__} has framework {framework!r}; expected "
        "'torch', 'tf' or 'tf2'"
    )


def _policy_weights(policy: WeightsPolicy) -> Dict[str, Any]:
    if _policy_layout(policy) == "tf2":
        return dict(cast(Any, policy).get_weights(as_dict=True))  # (an eager policy's get_weights)
    return dict(policy.get_weights())


def _eager_names(policy: WeightsPolicy) -> Optional[Dict[str, str]]:
    """An eager policy's ``{weights key: TF variable name}`` from its model's
    ``variables(as_dict=True)`` (the keys ``get_weights(as_dict=True)`` uses)."""
    variables = getattr(policy.model, "variables", None)
    try:
        named = variables(as_dict=True) if callable(variables) else None
    except TypeError:  # a model whose variables() takes no as_dict
        return None
    if not isinstance(named, dict):
        return None
    return {str(k): str(v.name).split(":")[0] for k, v in named.items()}


@PublicAPI
def convert_weights(src: Any, dst: Any, *, assign: bool = True) -> Dict[str, np.ndarray]:
    """Moves a catalog model's weights into another framework's policy.

    Args:
        src: A policy (torch, tf or tf2), or a weights dict: torch or TF graph
            ``get_weights()``, or eager ``get_weights(as_dict=True)``.
        dst: The destination policy, with the same model architecture (model
            config, observation and action spaces) in any framework.
        assign: Set the converted weights into ``dst`` (``dst.set_weights``).

    Returns:
        The weights in ``dst``'s own ``get_weights`` keys and layout (for an eager
        ``dst`` the ``as_dict=True`` keys).

    Raises:
        ValueError: Naming the first key without a counterpart or whose shape
            differs; nothing is assigned then.
    """
    if isinstance(src, (list, tuple)):
        raise ValueError(
            "convert_weights: a list of weights has no keys to convert by; pass the policy "
            "or its get_weights(as_dict=True) dict"
        )
    weights = src if isinstance(src, Mapping) else _policy_weights(src)
    layout = _policy_layout(dst)
    target = _policy_weights(dst)
    from_policy = not isinstance(src, Mapping)
    converted = adapt_weights(
        weights,
        target,
        layout,
        _eager_names(dst) if layout == "tf2" else None,
        _policy_layout(src) if from_policy else None,
        _eager_names(src) if from_policy and _policy_layout(src) == "tf2" else None,
    )
    if assign:
        dst.set_weights(converted)
    return converted
