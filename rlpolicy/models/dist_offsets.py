"""Discrete action spaces whose values do not start at 0.

gymnasium's ``Discrete(n, start=s)`` holds ``s .. s+n-1``, ``MultiDiscrete``
has a per-entry ``start``, and an integer ``Box`` holds ``low .. high``. The
categorical distributions sample category indices ``0 .. n-1``; RLlib 1.11
hands those indices out as actions (outside the space when the start is not
0, a silent wrong result). :func:`with_action_offset` wraps a categorical
distribution class so its samples are shifted by the space's start and the
actions given to ``logp`` are shifted back.

Nothing here imports torch or tensorflow at module level.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Optional

import gymnasium as gym
import numpy as np


def action_offset(space: gym.Space) -> Optional[np.ndarray]:
    """The value of category 0 for each entry of a discrete action space, or None if all are 0.

    Returns:
        A scalar array for Discrete and for integer Box (its lowest bound, as the
        distribution's categories run from ``min(low)`` to ``max(high)``), an
        array of the space's shape for MultiDiscrete.
    """
    if isinstance(space, gym.spaces.Discrete):
        offset = np.asarray(int(space.start), np.int64)
    elif isinstance(space, gym.spaces.MultiDiscrete):
        offset = np.asarray(space.start, np.int64)
    elif isinstance(space, gym.spaces.Box) and space.dtype.name.startswith("int"):
        offset = np.asarray(int(np.min(space.low)), np.int64)
    else:
        return None
    return offset if np.any(offset) else None


def with_action_offset(dist_class: Any, offset: np.ndarray, framework: str) -> Any:
    """``dist_class`` (a class or ``functools.partial``) with samples shifted by ``offset``.

    Args:
        dist_class: A categorical / multi-categorical distribution class.
        offset: From :func:`action_offset`.
        framework: "torch", or "tf" / "tf2" / "tfe".
    """
    base = dist_class.func if isinstance(dist_class, partial) else dist_class
    wrapper = _torch_wrapper(base, offset) if framework == "torch" else _tf_wrapper(base, offset)
    if isinstance(dist_class, partial):
        return partial(wrapper, *dist_class.args, **dist_class.keywords)
    return wrapper


def _matching(offset: np.ndarray, actions: Any) -> np.ndarray:
    """``offset`` laid out like ``actions`` (space-shaped, or flattened per row)."""
    if offset.ndim == 0 or tuple(actions.shape[1:]) == offset.shape:
        return offset
    return offset.reshape(-1)


def _torch_wrapper(base: Any, offset: np.ndarray) -> type:
    import torch

    def shift(self, actions):
        return actions + torch.as_tensor(
            _matching(offset, actions), dtype=actions.dtype, device=actions.device
        )

    def sample(self):
        self.last_sample = shift(self, base.sample(self))
        return self.last_sample

    def deterministic_sample(self):
        self.last_sample = shift(self, base.deterministic_sample(self))
        return self.last_sample

    def logp(self, actions):
        if not isinstance(actions, torch.Tensor):
            actions = torch.as_tensor(np.asarray(actions))
        back = torch.as_tensor(_matching(offset, actions), dtype=actions.dtype, device=actions.device)
        return base.logp(self, actions - back)

    def sampled_action_logp(self):
        if self.last_sample is None:
            return base.sampled_action_logp(self)  # its own "sample() first" error
        return logp(self, self.last_sample)

    return type(
        base.__name__,
        (base,),
        {
            "sample": sample,
            "deterministic_sample": deterministic_sample,
            "logp": logp,
            "sampled_action_logp": sampled_action_logp,
            "action_offset": offset,
            "__doc__": f"{base.__name__} whose actions start at {offset.tolist()}.",
        },
    )


def _tf_wrapper(base: Any, offset: np.ndarray) -> type:
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()

    def constant(actions):
        return tf.constant(_matching(offset, actions), dtype=actions.dtype)

    def _build_sample_op(self):
        sample = base._build_sample_op(self)
        return sample + constant(sample)

    def deterministic_sample(self):
        sample = base.deterministic_sample(self)
        return sample + constant(sample)

    def logp(self, actions):
        actions = tf.convert_to_tensor(actions)
        return base.logp(self, actions - constant(actions))

    return type(
        base.__name__,
        (base,),
        {
            "_build_sample_op": _build_sample_op,
            "deterministic_sample": deterministic_sample,
            "logp": logp,
            "action_offset": offset,
            "__doc__": f"{base.__name__} whose actions start at {offset.tolist()}.",
        },
    )
