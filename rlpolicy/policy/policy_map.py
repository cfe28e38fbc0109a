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

    def __init__(
        self,
        worker_index: int,
        num_workers: int,
        capacity: Optional[int] = None,
        path: Optional[str] = None,
        policy_config: Optional[TrainerConfigDict] = None,
        session_creator: Optional[Callable[[], Any]] = None,
        seed: Optional[int] = None,
    ):
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

    def create_policy(
        self,
        policy_id: PolicyID,
        policy_cls: type,
        observation_space: gym.Space,
        action_space: gym.Space,
        config_override: Optional[PartialTrainerConfigDict],
        merged_config: TrainerConfigDict,
    ) -> Any:
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
        cls = _eager_class_if_needed(policy_cls, merged_config)
        if merged_config.get("framework", "tf") == "tf" and _is_graph_tf_class(cls):
            policy = self._build_in_own_graph(cls, observation_space, action_space, merged_config)
        else:
            policy = cls(observation_space, action_space, merged_config)
        self[policy_id] = policy
        self.policy_specs[policy_id] = PolicySpec(
            policy_cls, observation_space, action_space, config_override
        )
        return policy

    def _build_in_own_graph(
        self, cls: type, observation_space: gym.Space, action_space: gym.Space, config: TrainerConfigDict
    ) -> Any:
        """Builds a graph-mode TF policy inside a new ``tf1.Graph`` and ``Session`` (RLlib
        1.11's PolicyMap), so everything its constructor and hooks (``before_init``,
        mixins) create lands in the policy's own graph, in eager and graph processes alike."""
        from rlpolicy.utils.framework import try_import_tf

        tf1, _, _ = try_import_tf()
        with tf1.Graph().as_default() as graph:
            if self.session_creator is not None:
                sess = self.session_creator()
            else:
                args = dict(config.get("tf_session_args") or {})
                sess = tf1.Session(graph=graph, config=tf1.ConfigProto(**args))
            with sess.as_default():
                if self.seed is not None:
                    tf1.set_random_seed(self.seed)
                return cls(observation_space, action_space, config)

    def __delitem__(self, policy_id: PolicyID) -> None:
        super().__delitem__(policy_id)
        self.policy_specs.pop(policy_id, None)


def _is_graph_tf_class(cls: type) -> bool:
    """Whether ``cls`` is a graph-mode TF policy class (a ``TFPolicy``), without importing TF."""
    return any(
        c.__name__ == "TFPolicy" and c.__module__ == "rlpolicy.policy.tf_policy"
        for c in getattr(cls, "__mro__", ())
    )


def _eager_class_if_needed(cls: type, config: TrainerConfigDict) -> type:
    """RLlib 1.11's ``get_tf_eager_cls_if_necessary``: with ``framework="tf2"``/``"tfe"``
    a graph TF policy class made by ``build_tf_policy`` becomes its eager version
    (``as_eager()``; it traces when ``config["eager_tracing"]`` is set).

    Raises:
        ValueError: For a graph TF policy class that has no eager version.
    """
    if config.get("framework") not in ("tf2", "tfe") or not _is_graph_tf_class(cls):
        return cls
    if not hasattr(cls, "as_eager"):
        raise ValueError(
            f"policy class {cls.__name__} is a graph-mode TFPolicy without as_eager(); it "
            "cannot run with framework='tf2' (use framework='tf', or build it with build_tf_policy)"
        )
    return cls.as_eager()  # the eager class reads config["eager_tracing"] itself


__all__ = ["PolicyMap"]
