"""Framework-dispatching helpers for model building (RLlib's ``ray.rllib.models.utils``)."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Union

from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.framework import TF_FRAMEWORKS, lookup_activation_fn, try_import_torch


@DeveloperAPI
def get_activation_fn(
    name: Optional[Union[Callable, str]] = None, framework: str = "tf"
) -> Optional[Callable]:
    """Returns the activation for ``name`` in the given framework.

    Args:
        name: "relu", "tanh", "elu", "swish"/"silu", "linear" or None (no
            activation), or a callable (returned unchanged).
        framework: "torch" (returns an ``nn.Module`` class), or "tf"/"tf2"/"tfe"
            (returns a ``tf.nn`` function).

    Returns:
        The activation, or None for "linear"/None.

    Raises:
        ValueError: unknown activation name or framework.
    """
    return lookup_activation_fn(name, framework)


_FILTERS = {
    (480, 640): [[16, [24, 32], [14, 18]], [32, [6, 6], 4], [256, [9, 9], 1]],
    (240, 320): [[16, [12, 16], [7, 9]], [32, [6, 6], 4], [256, [9, 9], 1]],
    (96, 96): [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 2]],
    (84, 84): [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 1]],
    (42, 42): [[16, [4, 4], 2], [32, [4, 4], 2], [256, [11, 11], 1]],
    (10, 10): [[16, [5, 5], 2], [32, [5, 5], 2]],
}


@DeveloperAPI
def get_filter_config(shape: Sequence[int]) -> List[list]:
    """Returns RLlib's default ``conv_filters`` for an image shape.

    Known sizes (as [H, W, C] or [C, H, W]): 480x640, 240x320, 96x96, 84x84,
    42x42 and 10x10.

    Args:
        shape: The image shape, e.g. (84, 84, 3).

    Returns:
        A list of ``[out_channels, [kernel_h, kernel_w], stride]`` entries.

    Raises:
        ValueError: no default exists for ``shape``.
    """
    shape = [int(s) for s in shape]
    if len(shape) in (2, 3):
        for key in (tuple(shape[:2]), tuple(shape[1:])):
            if key in _FILTERS:
                return [list(f) for f in _FILTERS[key]]
    raise ValueError(
        f"no default conv_filters for observation shape {shape}; set `conv_filters` in the "
        "model config (defaults exist for [480, 640, K], [240, 320, K], [96, 96, K], "
        "[84, 84, K], [42, 42, K], [10, 10, K]) or use a custom model"
    )


def default_filter_config(shape: Sequence[int]) -> List[list]:
    """``conv_filters`` for an image shape: RLlib's default where one exists, else computed.

    The computed stack (beyond RLlib 1.11, which raises for other sizes) halves
    the image with 3x3 stride-2 convolutions ("same" padding; 16, 32, 64, 128
    channels) until both sides are at most 6 (at most four times), then ends
    with one 128-channel convolution whose kernel covers what is left, so the
    stack's output is [B, 1, 1, 128] as the vision nets require.

    Args:
        shape: The image shape [H, W, C].
    """
    try:
        return get_filter_config(shape)
    except ValueError:
        pass
    h, w = int(shape[0]), int(shape[1])
    filters: List[list] = []
    while max(h, w) > 6 and len(filters) < 4:
        filters.append([16 * 2 ** len(filters), [3, 3], 2])
        h, w = -(-h // 2), -(-w // 2)
    filters.append([128, [h, w], 1])
    return filters


@DeveloperAPI
def get_initializer(name: Optional[Union[str, Callable]], framework: str = "tf") -> Any:
    """Returns the weight initializer for ``name`` in the given framework.

    Args:
        name: "xavier_uniform" (also None/"default") or "xavier_normal", or a
            callable (returned unchanged).
        framework: "torch" (in-place ``nn.init`` function) or "tf"/"tf2"/"tfe"
            (keras initializer class).

    Raises:
        ValueError: unknown initializer name or framework.
    """
    if callable(name):
        return name
    if name not in (None, "default", "xavier_uniform", "xavier_normal"):
        raise ValueError(
            f"unknown initializer {name!r} for framework={framework!r}; use xavier_uniform or xavier_normal"
        )
    normal = name == "xavier_normal"
    if framework == "torch":
        _, nn = try_import_torch()
        return nn.init.xavier_normal_ if normal else nn.init.xavier_uniform_
    if framework in TF_FRAMEWORKS:
        from rlpolicy.utils.framework import get_keras

        keras = get_keras()
        return keras.initializers.GlorotNormal if normal else keras.initializers.GlorotUniform
    raise ValueError(f"get_initializer: unsupported framework {framework!r}; use one of torch, tf, tf2, tfe")
