"""The record one training iteration returns (``SimpleTrainer.train``, ``SimpleDQNTrainer.train``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass
class IterationResult:
    """What one training iteration did (totals are since the trainer was built)."""

    iteration: int
    timesteps_total: int
    episode_reward_mean: float
    episodes_total: int
    learner_stats: Dict[str, float]
    time_s: float
