"""PyTorch helpers (RLlib 1.11's ``ray.rllib.utils.torch_utils``).

Importing this module does not require torch; the functions do.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, cast

import gymnasium as gym
import numpy as np
import tree  # dm-tree

from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.numpy import SMALL_NUMBER
from rlpolicy.utils.typing import SpaceStruct, TensorStructType, TensorType

if TYPE_CHECKING:  # pragma: no cover
    TorchPolicy = Any  # rlpolicy.policy.torch_policy.TorchPolicy, a layer above: hinted, not imported

torch, nn = try_import_torch()

# Limits of float32, used e.g. to mask out invalid logits.
FLOAT_MIN = -3.4e38
FLOAT_MAX = 3.4e38


def apply_grad_clipping(policy: "TorchPolicy", optimizer: Any, loss: TensorType) -> Dict[str, TensorType]:
    """Clips the gradients of each of ``optimizer``'s param groups by global norm.

    The norm limit is ``policy.config["grad_clip"]``; nothing happens if it is
    None/0. Parameters without a gradient are skipped.

    Args:
        policy: The policy (only ``policy.config`` is read).
        optimizer: A ``torch.optim.Optimizer`` whose grads are already computed.
        loss: The loss the grads came from (unused; kept for the hook signature).

    Returns:
        ``{"grad_gnorm": norm}`` with the (pre-clip) global norm of the last
        param group that had gradients, or ``{}`` if no clipping was done.
    """
    info: Dict[str, TensorType] = {}
    clip = policy.config.get("grad_clip")
    if not clip:
        return info
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if params:
            grad_gnorm = nn.utils.clip_grad_norm_(params, clip)
            if isinstance(grad_gnorm, torch.Tensor):
                grad_gnorm = grad_gnorm.cpu().numpy()
            info["grad_gnorm"] = grad_gnorm
    return info


def atanh(x: TensorType) -> TensorType:
    """Numerically safe ``atanh`` (clamps the log arguments at ``SMALL_NUMBER``)."""
    return 0.5 * torch.log((1 + x).clamp(min=SMALL_NUMBER) / (1 - x).clamp(min=SMALL_NUMBER))


def concat_multi_gpu_td_errors(policy: "TorchPolicy") -> Dict[str, TensorType]:
    """Concatenates the ``td_error`` tower stats of all towers of ``policy``.

    Also sets ``policy.td_error`` to the result.

    Args:
        policy: A TorchPolicy with ``model_gpu_towers`` (each with ``tower_stats``)
            and ``device``.

    Returns:
        ``{"td_error": concatenated, "mean_td_error": its mean}``.
    """
    errors = [
        t.tower_stats.get("td_error", torch.tensor([0.0])).to(policy.device) for t in policy.model_gpu_towers
    ]
    td_error = errors[0] if len(errors) == 1 else torch.cat(errors, dim=0)
    cast(Any, policy).td_error = td_error  # (an attribute 1.11 sets on the policy)
    return {"td_error": td_error, "mean_td_error": torch.mean(td_error)}


def convert_to_non_torch_type(stats: TensorStructType) -> TensorStructType:
    """Converts torch tensors in a (nested) struct to numpy (0-D tensors to python numbers).

    Args:
        stats: Any (nested) structure.

    Returns:
        The same structure without torch tensors.
    """

    def mapping(item):
        if torch is not None and isinstance(item, torch.Tensor):
            return item.cpu().item() if item.dim() == 0 else item.detach().cpu().numpy()
        return item

    if (
        torch is not None and type(stats) is dict
    ):  # the acting path's flat dict of tensors, without tree's walk
        out = {}
        for key, item in stats.items():
            if type(item) is not torch.Tensor:
                break
            out[key] = mapping(item)
        else:
            return out
    return tree.map_structure(mapping, stats)


def _tensor_from(item: Any, device: Optional[Any]) -> Any:
    if torch.is_tensor(item):
        return item if device is None else item.to(device)
    if isinstance(item, np.ndarray):
        if item.dtype == object:
            # E.g. an infos column: not convertible, leave as is.
            return item
        if not item.flags.writeable:
            # torch warns about sharing memory with read-only arrays.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tensor = torch.from_numpy(item)
        else:
            tensor = torch.from_numpy(item)
    else:
        tensor = torch.from_numpy(np.asarray(item))
    if tensor.dtype == torch.double:
        tensor = tensor.float()
    return tensor if device is None else tensor.to(device)


def _loaded_class(module: str, name: str) -> Any:
    """Class `name` of `module` if that module is imported already, else None.

    An instance of a class cannot exist before its module is imported, so a
    `sys.modules` lookup is enough for isinstance checks (and, unlike an import
    attempt, costs nothing when the module is absent: this runs once per column).
    """
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def convert_to_torch_tensor(x: TensorStructType, device: Optional[str] = None) -> TensorStructType:
    """Converts a (nested) struct of numpy arrays/numbers to torch tensors.

    float64 becomes float32; object arrays are left alone; existing tensors
    are only moved to ``device``. A ``SampleBatch`` comes back as a
    SampleBatch (a shallow copy with converted columns); converting it does not
    count as reading its columns (its ``accessed_keys`` stay as they were).

    Args:
        x: Any (nested) structure.
        device: Optional device to move the tensors to.

    Returns:
        The same structure with torch tensors as leaves.
    """
    repeated_cls = _loaded_class("rlpolicy.models.repeated_values", "RepeatedValues")
    sample_batch_cls = _loaded_class("rlpolicy.policy.sample_batch", "SampleBatch")

    def mapping(item):
        if repeated_cls is not None and isinstance(item, repeated_cls):
            return repeated_cls(tree.map_structure(mapping, item.values), item.lengths, item.max_len)
        return _tensor_from(item, device)

    if sample_batch_cls is not None and isinstance(x, sample_batch_cls):
        out = x.copy(shallow=True)
        # Read and write the raw columns: going through SampleBatch.__getitem__ would mark
        # every key as accessed (the copy shares that set with `x`), which would defeat the
        # view-requirement pruning that relies on accessed keys being what a loss read.
        for key, value in list(dict.items(out)):
            dict.__setitem__(out, key, tree.map_structure(mapping, value))
        out.intercepted_values = {}
        return out
    if not tree.is_nested(x):
        return mapping(x)
    return tree.map_structure(mapping, x)


def explained_variance(y: TensorType, pred: TensorType) -> TensorType:
    """Fraction of the variance of ``y`` explained by ``pred``: ``max(-1, 1 - var(y - pred) / var(y))``.

    Variances are unbiased (``torch.var``'s default), over axis 0.

    Args:
        y: Targets, shape ``[B]``.
        pred: Predictions, shape ``[B]``.

    Returns:
        A 0-D tensor.
    """
    y_var = torch.var(y, dim=[0])
    diff_var = torch.var(y - pred, dim=[0])
    min_ = torch.tensor([-1.0]).to(pred.device)
    return torch.max(min_, 1 - (diff_var / y_var))[0]


def flatten_inputs_to_1d_tensor(
    inputs: TensorStructType, spaces_struct: Optional[SpaceStruct] = None, time_axis: bool = False
) -> TensorType:
    """Flattens and concatenates a nested input struct into one ``[B, n]`` float tensor.

    Discrete/MultiDiscrete components (per ``spaces_struct``) are one-hot
    encoded; all others are reshaped to ``[B, -1]``.

    Args:
        inputs: Nested struct of ``[B, ...]`` (or ``[B, T, ...]``) tensors.
        spaces_struct: Matching struct of spaces, or None.
        time_axis: Whether a time axis follows the batch axis.

    Returns:
        ``[B, n]`` (or ``[B, T, n]``) float tensor.
    """
    flat_inputs = tree.flatten(inputs)
    flat_spaces = tree.flatten(spaces_struct) if spaces_struct is not None else [None] * len(flat_inputs)
    B = T = None
    out = []
    for input_, space in zip(flat_inputs, flat_spaces):
        if B is None:
            B = input_.shape[0]
            T = input_.shape[1] if time_axis else None
        lead = [B * T] if time_axis else [B]
        if isinstance(space, gym.spaces.Discrete):
            out.append(one_hot(torch.reshape(input_, lead), space).float())
        elif isinstance(space, gym.spaces.MultiDiscrete):
            out.append(one_hot(torch.reshape(input_, lead + [-1]), space).float())
        else:
            out.append(torch.reshape(input_, lead + [-1]).float())
    merged = torch.cat(out, dim=-1)
    if time_axis:
        merged = torch.reshape(merged, [B, T, -1])
    return merged


def global_norm(tensors: List[TensorType]) -> TensorType:
    """The L2 norm of all given tensors taken together (``sqrt(sum_i ||t_i||^2)``)."""
    single_l2s = [torch.pow(torch.sum(torch.pow(t, 2.0)), 0.5) for t in tensors]
    return torch.pow(sum(torch.pow(l2, 2.0) for l2 in single_l2s), 0.5)


def huber_loss(x: TensorType, delta: float = 1.0) -> TensorType:
    """Elementwise Huber loss: ``0.5 x^2`` for ``|x| < delta``, else ``delta (|x| - delta/2)``
    (torch's fused kernel: the same values and gradients as RLlib's ``where`` of the two
    branches, in 2 ops instead of ~18 with the backward pass)."""
    return nn.functional.huber_loss(x, torch.zeros_like(x), reduction="none", delta=delta)


def l2_loss(x: TensorType) -> TensorType:
    """Half the sum of squares of ``x``."""
    return 0.5 * torch.sum(torch.pow(x, 2.0))


def minimize_and_clip(optimizer: Any, clip_val: float = 10.0) -> None:
    """Clips each parameter's gradient to L2 norm ``clip_val`` (in place).

    Note:
        RLlib 1.11 passes ``p.grad`` itself to ``clip_grad_norm_``, which
        then finds no gradient and does nothing; rlpolicy clips ``p.grad``.
    """
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                torch.nn.utils.clip_grad_norm_([p], clip_val)


def one_hot(x: TensorType, space: gym.Space) -> TensorType:
    """One-hot (Discrete) or concatenated multi-one-hot (MultiDiscrete) encoding.

    Args:
        x: Int tensor: ``[B]`` for Discrete, ``[B, n]`` for MultiDiscrete.
        space: The Discrete or MultiDiscrete space ``x`` comes from.

    Returns:
        ``[B, space.n]`` or ``[B, sum(space.nvec)]`` int64 tensor.

    Raises:
        ValueError: For any other space.
    """
    if isinstance(space, gym.spaces.Discrete):
        return nn.functional.one_hot(x.long(), int(space.n))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return torch.cat(
            [nn.functional.one_hot(x[:, i].long(), int(n)) for i, n in enumerate(space.nvec)], dim=-1
        )
    raise ValueError(f"Unsupported space for `one_hot`: {space}; supported: Discrete, MultiDiscrete")


def reduce_mean_ignore_inf(x: TensorType, axis: Optional[int] = None) -> TensorType:
    """Mean of ``x`` over ``axis``, ignoring ``-inf`` entries."""
    mask = torch.ne(x, float("-inf"))
    x_zeroed = torch.where(mask, x, torch.zeros_like(x))
    if axis is None:
        return torch.sum(x_zeroed) / torch.sum(mask.float())
    return torch.sum(x_zeroed, axis) / torch.sum(mask.float(), axis)


def sequence_mask(
    lengths: TensorType, maxlen: Optional[int] = None, dtype=None, time_major: bool = False
) -> TensorType:
    """A ``[B, maxlen]`` mask (``[maxlen, B]`` if ``time_major``): True for ``t < lengths[b]``.

    Args:
        lengths: ``[B]`` int tensor of sequence lengths.
        maxlen: Mask width; defaults to ``max(lengths)``.
        dtype: dtype of the mask (default ``torch.bool``).
        time_major: Return the transposed (time-major) mask.

    Returns:
        The mask tensor, on ``lengths``'s device.

    Note:
        RLlib 1.11 ignores ``dtype`` (always bool); rlpolicy applies it.
    """
    if maxlen is None:
        maxlen = int(lengths.max())
    steps = torch.arange(maxlen, device=lengths.device)
    mask = steps[None, :] < lengths.reshape(-1, 1)
    if time_major:
        mask = mask.t()
    return mask if dtype is None else mask.to(dtype)


def set_torch_seed(seed: Optional[int] = None) -> None:
    """Seeds torch (if installed and ``seed`` is not None) and asks for deterministic kernels.

    Note:
        On CPU-only builds RLlib 1.11 calls ``torch.use_deterministic_algorithms(True)``;
        rlpolicy does so with ``warn_only=True`` so ops without a deterministic
        version warn instead of failing in every later test of the process.
    """
    if seed is None or torch is None:
        return
    torch.manual_seed(seed)
    cuda_version = torch.version.cuda
    if cuda_version is not None and float(cuda_version) >= 10.2:
        # See https://github.com/pytorch/pytorch/issues/47672.
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = "4096:8"
    else:
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True


def softmax_cross_entropy_with_logits(logits: TensorType, labels: TensorType) -> TensorType:
    """Cross entropy between ``labels`` (distributions) and ``softmax(logits)`` over the last axis."""
    return torch.sum(-labels * nn.functional.log_softmax(logits, -1), -1)


__all__ = [
    "FLOAT_MIN",
    "FLOAT_MAX",
    "apply_grad_clipping",
    "atanh",
    "concat_multi_gpu_td_errors",
    "convert_to_non_torch_type",
    "convert_to_torch_tensor",
    "explained_variance",
    "flatten_inputs_to_1d_tensor",
    "global_norm",
    "huber_loss",
    "l2_loss",
    "minimize_and_clip",
    "one_hot",
    "reduce_mean_ignore_inf",
    "sequence_mask",
    "set_torch_seed",
    "softmax_cross_entropy_with_logits",
]
