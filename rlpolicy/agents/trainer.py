"""The trainer-level config pieces policies need (RLlib 1.11's ``ray.rllib.agents.trainer``).

rlpolicy has no ``Trainer``; it keeps ``COMMON_CONFIG`` (the policy-relevant
defaults) and ``with_common_config`` for algorithm configs.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from rlpolicy._core.config import merge_configs
from rlpolicy._core.defaults import COMMON_CONFIG
from rlpolicy.utils.typing import PartialTrainerConfigDict, TrainerConfigDict


def with_common_config(extra_config: PartialTrainerConfigDict) -> TrainerConfigDict:
    """Returns ``COMMON_CONFIG`` deep-merged with an algorithm's extra defaults.

    Algorithms define their default config this way; new keys are allowed at
    every level, and neither input is modified.

    Args:
        extra_config: The algorithm's additional/overridden config keys.

    Returns:
        A new config dict.

    Raises:
        ValueError: If ``extra_config`` is not a dict.
    """
    if not isinstance(extra_config, Mapping):
        raise ValueError(
            f"with_common_config: extra_config must be a dict, got {type(extra_config).__name__}"
        )
    return merge_configs(copy.deepcopy(COMMON_CONFIG), copy.deepcopy(dict(extra_config)))


def merge_trainer_configs(
    config1: TrainerConfigDict, config2: PartialTrainerConfigDict, _allow_unknown_configs: Any = None
) -> TrainerConfigDict:
    """Deep-merges ``config2`` into a copy of ``config1`` (RLlib's ``Trainer.merge_trainer_configs``).

    Unknown keys are always allowed (``_allow_unknown_configs`` is accepted
    for signature compatibility).
    """
    return merge_configs(copy.deepcopy(dict(config1)), copy.deepcopy(dict(config2 or {})))


__all__ = ["COMMON_CONFIG", "with_common_config", "merge_trainer_configs"]
