"""Builds the Exploration a policy's ``exploration_config`` names.

The type is an Exploration class, a class name exported by
``rlpolicy.utils.exploration``, or a ``"module.path.ClassName"`` string (resolved
through the checkpoint's trusted set while a checkpoint loads). It sits beside the
classes it builds; the type lookup it shares with schedules is the floor's
(``_core/exploration_factory.py``).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional

import gymnasium as gym

from rlpolicy._core.exploration_factory import instantiate, known_type_names, resolve_type
from rlpolicy.utils.exploration.exploration import Exploration

DEFAULT_EXPLORATION_CONFIG: Dict[str, Any] = {"type": "StochasticSampling"}

_EXPLORATION_MODULE = "rlpolicy.utils.exploration"


def create_exploration(
    config_exploration: Optional[dict],
    *,
    action_space: gym.Space,
    policy_config: dict,
    model: Any,
    num_workers: int,
    worker_index: int,
    framework: str,
) -> Any:
    """Instantiates the Exploration described by ``config_exploration``.

    Args:
        config_exploration: The policy's ``exploration_config``: a dict with a
            ``"type"`` key plus constructor keywords (None or an empty dict mean
            ``{"type": "StochasticSampling"}``), or an already built
            Exploration object, which is returned unchanged. Not modified.
        action_space: The policy's action space.
        policy_config: The policy's full config dict.
        model: The policy's model (may be None).
        num_workers: The number of rollout workers.
        worker_index: This worker's index (0 = local worker).
        framework: "torch", "tf", "tf2" or "tfe".

    Returns:
        The Exploration object.

    Raises:
        ValueError: If ``type`` is missing, unknown, or not an Exploration class.
        TypeError: If the config holds a keyword the class does not accept.
    """
    if isinstance(config_exploration, Exploration):
        return config_exploration
    if not config_exploration:
        config_exploration = DEFAULT_EXPLORATION_CONFIG
    if not isinstance(config_exploration, dict):
        raise ValueError(f"exploration_config must be a dict with a 'type' key, got {config_exploration!r}")
    kwargs = {k: v for k, v in config_exploration.items() if k != "type"}
    if kwargs:  # (the object must not share mutable options with the config)
        kwargs = copy.deepcopy(kwargs)
    if "type" not in config_exploration:
        raise ValueError(
            f"exploration_config {config_exploration!r} has no 'type' key; "
            f"known types: {known_type_names(_EXPLORATION_MODULE, Exploration)}"
        )
    cls = resolve_type(
        config_exploration["type"], _EXPLORATION_MODULE, Exploration, "exploration_config['type']"
    )
    ctor_kwargs = dict(
        action_space=action_space,
        policy_config=policy_config,
        model=model,
        num_workers=num_workers,
        worker_index=worker_index,
        framework=framework,
    )
    clash = sorted(set(kwargs) & set(ctor_kwargs))
    if clash:
        raise ValueError(
            f"exploration_config for {cls.__name__} sets {clash}, which the policy passes "
            "itself; remove these keys"
        )
    return instantiate(cls, {**kwargs, **ctor_kwargs})
