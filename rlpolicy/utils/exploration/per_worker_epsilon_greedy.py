"""Ape-X style per-worker epsilons (RLlib's ``...exploration.per_worker_epsilon_greedy``)."""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym

from rlpolicy.utils.exploration._ops import per_worker_constant
from rlpolicy.utils.exploration.epsilon_greedy import EpsilonGreedy


class PerWorkerEpsilonGreedy(EpsilonGreedy):
    """EpsilonGreedy with a constant epsilon that depends on the worker index.

    With ``num_workers > 0``, remote worker ``i`` (1-based) uses
    ``0.4 ** (1 + (i - 1) / (num_workers - 1) * 7)`` (Ape-X, Horgan et al. 2018,
    p. 5) and the local worker (index 0) uses 0.0 so its rollouts are greedy.
    With ``num_workers == 0`` the usual EpsilonGreedy schedule applies.
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
        """Creates a PerWorkerEpsilonGreedy exploration.

        Args:
            action_space: The policy's (discrete) action space.
            framework: "torch", "tf", "tf2" or "tfe".
            num_workers: The total number of rollout workers.
            worker_index: This worker's index (0 = local worker).
            **kwargs: Further EpsilonGreedy / Exploration constructor arguments.

        Raises:
            ValueError: If ``worker_index`` exceeds ``num_workers``.
        """
        epsilon_schedule = per_worker_constant(
            type(self).__name__, num_workers, worker_index, framework, index_offset=1, check_index=True
        )
        if epsilon_schedule is not None:
            kwargs["epsilon_schedule"] = epsilon_schedule
        super().__init__(
            action_space, framework=framework, num_workers=num_workers, worker_index=worker_index, **kwargs
        )
