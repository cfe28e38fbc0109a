"""Framework-neutral parts of the GTrXL attention nets (torch and tf ``attention_net``).

RLlib 1.11's GTrXL keeps no recurrent state of its own (``get_initial_state()``
is ``[]``). Its memory is the trajectory itself: the view requirement
``state_in_i`` reads the ``memory_inference`` previous values of
``state_out_i`` (the output of transformer unit i - 1, or of the input
projection for i = 0), one window per ``max_seq_len`` rows in a train batch.
These helpers build those view requirements, check the sizes, and size the
previous-action input.
"""

from __future__ import annotations

from typing import Any, Dict

import gymnasium as gym
import numpy as np
import tree

from rlpolicy.policy.view_requirement import ViewRequirement
from rlpolicy.utils.spaces.space_utils import get_base_struct_from_space


def check_positive_ints(owner: str, **sizes: Any) -> None:
    """Raises ValueError naming the first argument that is not an int >= 1."""
    for key, value in sizes.items():
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{owner}: {key} must be an int >= 1, got {value!r}")


def check_non_negative_ints(owner: str, **sizes: Any) -> None:
    """Raises ValueError naming the first argument that is not an int >= 0."""
    for key, value in sizes.items():
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{owner}: {key} must be an int >= 0, got {value!r}")


def flat_obs_dim(owner: str, space: gym.Space) -> int:
    """The size of a 1-D observation space (what GTrXL's input projection reads).

    Raises:
        ValueError: If the space is not 1-D.
    """
    shape = getattr(space, "shape", None)
    if shape is None or len(shape) != 1:
        raise ValueError(
            f"{owner}: the observation space must be 1-D (flat), got {space}; use it behind use_attention=True (which wraps a default model) or flatten the observations"
        )
    return int(shape[0])


def memory_view_requirements(
    num_transformer_units: int, attention_dim: int, memory_inference: int, max_seq_len: int
) -> Dict[str, ViewRequirement]:
    """``state_in_i`` / ``state_out_i`` views of GTrXL's L memory streams.

    ``state_in_i`` = ``state_out_i`` shifted ``-memory_inference:-1`` (a
    [memory_inference, attention_dim] window per row), repeated every
    ``max_seq_len`` rows in a train batch; ``state_out_i`` is only collected,
    not trained on (RLlib 1.11).
    """
    views: Dict[str, ViewRequirement] = {}
    for i in range(num_transformer_units):
        space = gym.spaces.Box(-1.0, 1.0, shape=(attention_dim,), dtype=np.float32)
        views[f"state_in_{i}"] = ViewRequirement(
            f"state_out_{i}", shift=f"-{memory_inference}:-1", batch_repeat_value=max_seq_len, space=space
        )
        views[f"state_out_{i}"] = ViewRequirement(space=space, used_for_training=False)
    return views


def prev_action_reward_view_requirements(
    action_space: gym.Space, n_prev_actions: int, n_prev_rewards: int
) -> Dict[str, ViewRequirement]:
    """``prev_actions`` / ``prev_rewards`` over the last n steps (shift ``-n:-1``), if used."""
    views: Dict[str, ViewRequirement] = {}
    if n_prev_actions:
        views["prev_actions"] = ViewRequirement("actions", space=action_space, shift=f"-{n_prev_actions}:-1")
    if n_prev_rewards:
        views["prev_rewards"] = ViewRequirement("rewards", shift=f"-{n_prev_rewards}:-1")
    return views


def action_input_size(action_space: gym.Space) -> int:
    """Width of one encoded action: one-hot for (Multi)Discrete parts, flat for the rest."""
    size = 0
    for space in tree.flatten(get_base_struct_from_space(action_space)):
        if isinstance(space, gym.spaces.Discrete):
            size += int(space.n)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            size += int(np.sum(space.nvec))
        elif space.shape is not None:
            size += int(np.prod(space.shape))
        else:
            size += int(len(space))
    return size


def wrapper_config(owner: str, model_config: Dict[str, Any]) -> Dict[str, Any]:
    """The checked ``attention_*`` settings of an AttentionWrapper, as GTrXLNet kwargs + extras.

    Raises:
        ValueError: Naming the model config key that is missing or not a valid size.
    """
    keys = (
        "attention_num_transformer_units",
        "attention_dim",
        "attention_num_heads",
        "attention_head_dim",
        "attention_memory_inference",
        "attention_memory_training",
        "attention_position_wise_mlp_dim",
        "max_seq_len",
    )
    missing = [
        k
        for k in keys
        + ("attention_init_gru_gate_bias", "attention_use_n_prev_actions", "attention_use_n_prev_rewards")
        if k not in model_config
    ]
    if missing:
        raise ValueError(f"{owner}: model config lacks {missing}; start from MODEL_DEFAULTS")
    check_positive_ints(owner, **{k: model_config[k] for k in keys})
    check_non_negative_ints(
        owner,
        attention_use_n_prev_actions=model_config["attention_use_n_prev_actions"],
        attention_use_n_prev_rewards=model_config["attention_use_n_prev_rewards"],
    )
    return dict(
        num_transformer_units=int(model_config["attention_num_transformer_units"]),
        attention_dim=int(model_config["attention_dim"]),
        num_heads=int(model_config["attention_num_heads"]),
        head_dim=int(model_config["attention_head_dim"]),
        memory_inference=int(model_config["attention_memory_inference"]),
        memory_training=int(model_config["attention_memory_training"]),
        position_wise_mlp_dim=int(model_config["attention_position_wise_mlp_dim"]),
        init_gru_gate_bias=float(model_config["attention_init_gru_gate_bias"]),
    )
