"""``EnvContext``: the env config plus where the env runs (RLlib 1.11's
``ray.rllib.env.env_context``)."""

from __future__ import annotations

import copy
from typing import Optional

from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import EnvConfigDict


@PublicAPI
class EnvContext(dict):
    """The ``env_config`` dict, with extra attributes telling an env creator
    which worker and which sub-environment it builds.

    Attributes:
        worker_index: 0 for the local worker, ``1..num_workers`` for remote ones.
        vector_index: Index of the sub-environment within its worker.
        remote: Whether sub-environments run as their own Ray actors (always False here).
        num_workers: Number of remote workers of the worker set.
    """

    def __init__(
        self,
        env_config: Optional[EnvConfigDict],
        worker_index: int,
        vector_index: int = 0,
        remote: bool = False,
        num_workers: Optional[int] = None,
    ):
        """Initializes an EnvContext.

        Args:
            env_config: The user's env config (copied into this dict).
            worker_index: The worker's index (0: local worker).
            vector_index: The sub-environment's index within the worker.
            remote: Whether sub-environments are Ray actors.
            num_workers: The number of remote workers.
        """
        super().__init__(env_config or {})
        self.worker_index = worker_index
        self.vector_index = vector_index
        self.remote = remote
        self.num_workers = num_workers

    def copy_with_overrides(
        self,
        env_config: Optional[EnvConfigDict] = None,
        worker_index: Optional[int] = None,
        vector_index: Optional[int] = None,
        remote: Optional[bool] = None,
        num_workers: Optional[int] = None,
    ) -> "EnvContext":
        """A copy with some fields replaced (None keeps the current value)."""
        return EnvContext(
            copy.deepcopy(dict(self)) if env_config is None else env_config,
            self.worker_index if worker_index is None else worker_index,
            self.vector_index if vector_index is None else vector_index,
            self.remote if remote is None else remote,
            self.num_workers if num_workers is None else num_workers,
        )


__all__ = ["EnvContext"]
