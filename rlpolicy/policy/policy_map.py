"""``PolicyMap``: policy id -> Policy, for the policies one rollout worker
holds (RLlib 1.11's ``ray.rllib.policy.policy_map``)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import gymnasium as gym

from rlpolicy.policy.policy import PolicySpec
from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.typing import PartialTrainerConfigDict, PolicyID, TrainerConfigDict


@PublicAPI
class PolicyMap(dict):
    """A dict of policy id -> Policy that also remembers how each policy was built.

    RLlib 1.11 swaps least-recently used policies to disk once more than
    ``capacity`` are held; rlpolicy keeps every policy in memory (``capacity``
    and ``path`` are accepted and stored).
    """

    def __init__(self, worker_index: int, num_workers: int, capacity: Optional[int] = None,
                 path: Optional[str] = None, policy_config: Optional[TrainerConfigDict] = None,
                 session_creator: Optional[Callable[[], Any]] = None, seed: Optional[int] = None):
        """Initializes an empty PolicyMap.

        Args:
            worker_index: Index of the owning rollout worker (0: local).
            num_workers: Number of remote workers in the worker set.
            capacity: Kept for RLlib compatibility; no policy is swapped out.
            path: Kept for RLlib compatibility (RLlib's swap directory).
            policy_config: The worker's (trainer) config.
            session_creator: Kept for RLlib compatibility (TF sessions).
            seed: The worker's seed.
        """
        super().__init__()
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.capacity = capacity
        self.path = path
        self.policy_config = policy_config or {}
        self.session_creator = session_creator
        self.seed = seed
        #: Policy id -> the PolicySpec each policy was created from.
        self.policy_specs: Dict[PolicyID, PolicySpec] = {}

    def create_policy(self, policy_id: PolicyID, policy_cls: type, observation_space: gym.Space,
                      action_space: gym.Space, config_override: Optional[PartialTrainerConfigDict],
                      merged_config: TrainerConfigDict) -> Any:
        """Builds ``policy_cls(observation_space, action_space, merged_config)`` and stores it.

        Args:
            policy_id: The id to store the policy under.
            policy_cls: The Policy class.
            observation_space: The policy's observation space.
            action_space: The policy's action space.
            config_override: The per-policy overrides (kept in the stored spec).
            merged_config: The full config the policy is built with.

        Returns:
            The new policy.
        """
        policy = policy_cls(observation_space, action_space, merged_config)
        self[policy_id] = policy
        self.policy_specs[policy_id] = PolicySpec(policy_cls, observation_space, action_space,
                                                  config_override)
        return policy

    def __delitem__(self, policy_id: PolicyID) -> None:
        super().__delitem__(policy_id)
        self.policy_specs.pop(policy_id, None)


__all__ = ["PolicyMap"]
