"""Ape-X style per-worker noise scales (RLlib's ``...exploration.per_worker_gaussian_noise``)."""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym

from rlpolicy.utils.exploration._ops import per_worker_constant
from rlpolicy.utils.exploration.gaussian_noise import GaussianNoise


class PerWorkerGaussianNoise(GaussianNoise):
    """GaussianNoise with a constant scale that depends on the worker index.

    With ``num_workers > 0``, worker ``i >= 1`` uses the constant scale
    ``0.4 ** (1 + i / (num_workers - 1) * 7)`` (as RLlib 1.11 writes it for
    this class) and the local worker (index 0) uses 0.0.
    """

    def __init__(
        self,
        action_space: gym.Space,
        *,
        framework: str,
        num_workers: Optional[int],
        worker_index: Optional[int],
        **kwargs: Any,
    ):
        """Creates a PerWorkerGaussianNoise exploration.

        Args:
            action_space: The policy's Box action space.
            framework: "torch", "tf", "tf2" or "tfe".
            num_workers: The total number of rollout workers.
            worker_index: This worker's index (0 = local worker).
            **kwargs: Further GaussianNoise / Exploration constructor arguments.
        """
        scale_schedule = per_worker_constant(
            type(self).__name__, num_workers, worker_index, framework, index_offset=0
        )
        if scale_schedule is not None:
            kwargs["scale_schedule"] = scale_schedule
        super().__init__(
            action_space, framework=framework, num_workers=num_workers, worker_index=worker_index, **kwargs
        )
