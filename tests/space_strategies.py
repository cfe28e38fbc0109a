"""Hypothesis strategies that generate gymnasium spaces for property tests.

Leaves: ``Box`` (rank 0..3, dims 1..3, finite and possibly asymmetric bounds;
observation boxes may also have infinite bounds), ``Discrete`` (``start`` may
be non-zero), ``MultiDiscrete`` (1-D or 2-D ``nvec``, possibly with
``start``), ``MultiBinary`` (int or shape). Containers: ``Dict``/``Tuple``
nested up to depth 2 (a depth-2 space holds at least one container).

Observation and action spaces are drawn separately (:func:`space_pairs`).

While a kind of space is known to fail, ``RLPOLICY_SPACE_EXCLUDE`` (a
comma-separated list of :data:`EXCLUDABLE` names) narrows the draw for a
local run; unset (the default, and what CI uses) every kind is drawn.
"""

from __future__ import annotations

import os
from typing import Any, FrozenSet, List, Tuple

import gymnasium as gym
import numpy as np
from hypothesis import strategies as st

MAX_DEPTH = 2
# start != 0 for Discrete/MultiDiscrete; rank-0 / rank-2+ / rank-3 Boxes; 2-D MultiDiscrete;
# MultiBinary; Dict/Tuple containers.
EXCLUDABLE = ("start", "box_rank0", "box_multidim", "box_image", "multidiscrete_2d", "multibinary", "nested")


def excluded() -> FrozenSet[str]:
    """The kinds named in ``RLPOLICY_SPACE_EXCLUDE`` (empty by default)."""
    names = frozenset(n.strip() for n in os.environ.get("RLPOLICY_SPACE_EXCLUDE", "").split(",") if n.strip())
    unknown = names - set(EXCLUDABLE)
    if unknown:
        raise ValueError(f"RLPOLICY_SPACE_EXCLUDE: unknown kind(s) {sorted(unknown)}; known: {EXCLUDABLE}")
    return names


@st.composite
def shapes(draw: Any, max_rank: int = 3, max_dim: int = 3) -> Tuple[int, ...]:
    """A small shape: rank 0..max_rank, every dim 1..max_dim."""
    out = excluded()
    ranks = [
        r
        for r in range(max_rank + 1)
        if not (
            (r == 0 and "box_rank0" in out)
            or (r >= 2 and "box_multidim" in out)
            or (r == 3 and "box_image" in out)
        )
    ]
    rank = draw(st.sampled_from(ranks))
    return tuple(draw(st.lists(st.integers(1, max_dim), min_size=rank, max_size=rank)))


def _bound_values(draw: Any, shape: Tuple[int, ...]) -> Tuple[np.ndarray, np.ndarray]:
    # Scalar bounds (broadcast) or per-element bounds; low < high always.
    per_element = draw(st.booleans()) and shape != ()
    n = int(np.prod(shape)) if per_element else 1
    lows = draw(st.lists(st.floats(-10.0, 10.0, allow_nan=False, width=32), min_size=n, max_size=n))
    widths = draw(st.lists(st.floats(0.125, 20.0, allow_nan=False, width=32), min_size=n, max_size=n))
    low = np.asarray(lows, np.float32)
    high = (low + np.asarray(widths, np.float32)).astype(np.float32)
    if per_element:
        return low.reshape(shape), high.reshape(shape)
    return np.full(shape, low[0], np.float32), np.full(shape, high[0], np.float32)


@st.composite
def box_spaces(draw: Any, allow_inf: bool = False) -> gym.spaces.Box:
    """A float32 Box of a small shape with finite (asymmetric) bounds.

    Args:
        draw: Hypothesis' draw function.
        allow_inf: If True, some (or all) bounds may be -inf/+inf (for
            observation spaces).
    """
    shape = draw(shapes())
    low, high = _bound_values(draw, shape)
    if allow_inf and draw(st.booleans()):
        kind = draw(st.sampled_from(["both", "low", "high", "some"]))
        low, high = low.copy(), high.copy()
        if kind in ("both", "low"):
            low[...] = -np.inf
        if kind in ("both", "high"):
            high[...] = np.inf
        if kind == "some" and low.size:
            mask = np.asarray(draw(st.lists(st.booleans(), min_size=low.size, max_size=low.size)))
            low.reshape(-1)[mask] = -np.inf
            high.reshape(-1)[~mask] = np.inf
    return gym.spaces.Box(low, high, shape, np.float32)


@st.composite
def discrete_spaces(draw: Any) -> gym.spaces.Discrete:
    """Discrete(n) with n in 1..5 and a start that is 0 half of the time."""
    n = draw(st.integers(1, 5))
    start = 0 if "start" in excluded() else draw(st.one_of(st.just(0), st.integers(-3, 3)))
    return gym.spaces.Discrete(n, start=start)


@st.composite
def multi_discrete_spaces(draw: Any) -> gym.spaces.MultiDiscrete:
    """MultiDiscrete with a 1-D (len 1..3) or 2-D (2x2 / 2x3 ...) nvec, sometimes with start."""
    two_d = st.tuples(st.integers(1, 2), st.integers(1, 3))
    shape = draw(
        st.one_of(st.tuples(st.integers(1, 3)), *([] if "multidiscrete_2d" in excluded() else [two_d]))
    )
    size = int(np.prod(shape))
    nvec = np.asarray(draw(st.lists(st.integers(1, 4), min_size=size, max_size=size))).reshape(shape)
    if "start" not in excluded() and draw(st.booleans()):
        start = np.asarray(draw(st.lists(st.integers(-2, 2), min_size=size, max_size=size))).reshape(shape)
        return gym.spaces.MultiDiscrete(nvec, start=start)
    return gym.spaces.MultiDiscrete(nvec)


@st.composite
def multi_binary_spaces(draw: Any) -> gym.spaces.MultiBinary:
    """MultiBinary(n) with an int n (1..4) or a 1-D/2-D shape."""
    n = draw(st.one_of(st.integers(1, 4), st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    return gym.spaces.MultiBinary(n)


def leaf_spaces(for_obs: bool) -> st.SearchStrategy:
    """Any primitive (non-container) space; ``for_obs`` allows infinite Box bounds."""
    kinds = [box_spaces(allow_inf=for_obs), discrete_spaces(), multi_discrete_spaces()]
    if "multibinary" not in excluded():
        kinds.append(multi_binary_spaces())
    return st.one_of(*kinds)


@st.composite
def _container(draw: Any, child: st.SearchStrategy) -> gym.Space:
    children: List[gym.Space] = draw(st.lists(child, min_size=1, max_size=3))
    if draw(st.booleans()):
        return gym.spaces.Tuple(children)
    keys = draw(
        st.lists(
            st.sampled_from(["a", "b", "c", "pos", "z_last"]),
            min_size=len(children),
            max_size=len(children),
            unique=True,
        )
    )
    return gym.spaces.Dict(dict(zip(keys, children)))


def spaces(for_obs: bool, max_depth: int = MAX_DEPTH) -> st.SearchStrategy:
    """A leaf space, or a Dict/Tuple nest of at most ``max_depth`` container levels."""
    leaf = leaf_spaces(for_obs)
    if max_depth <= 0 or "nested" in excluded():
        return leaf
    inner = spaces(for_obs, max_depth - 1)
    return st.one_of(leaf, _container(inner))


def space_pairs(max_depth: int = MAX_DEPTH) -> st.SearchStrategy:
    """``(observation_space, action_space)``, drawn independently."""
    return st.tuples(spaces(True, max_depth), spaces(False, max_depth))


def describe(space: gym.Space) -> str:
    """A short, reproducible constructor-like text for a space (for reports)."""
    if isinstance(space, gym.spaces.Dict):
        return "Dict({" + ", ".join(f"{k!r}: {describe(s)}" for k, s in space.spaces.items()) + "})"
    if isinstance(space, gym.spaces.Tuple):
        return "Tuple([" + ", ".join(describe(s) for s in space.spaces) + "])"
    if isinstance(space, gym.spaces.Box):
        return f"Box({space.low.tolist()}, {space.high.tolist()}, {space.shape}, float32)"
    if isinstance(space, gym.spaces.Discrete):
        return f"Discrete({int(space.n)}, start={int(space.start)})"
    if isinstance(space, gym.spaces.MultiDiscrete):
        return f"MultiDiscrete({space.nvec.tolist()}, start={space.start.tolist()})"
    return repr(space)
