"""RLlib 1.11's ``DefaultCallbacks`` (public at ``rlpolicy.agents.callbacks``).

Defined here, at the policy layer, because every policy makes one when its config
names no callbacks: ``Policy`` imports it from here instead of reaching up into
``agents/``. ``rlpolicy.agents.callbacks`` re-exports it (with ``MultiCallbacks``
and the sampler's adapter), and the class names that module as its own, so
tracebacks, ``repr`` and pickles show RLlib's path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from rlpolicy.utils.annotations import PublicAPI
from rlpolicy.utils.deprecation import deprecation_warning
from rlpolicy.utils.typing import AgentID, EnvType, PolicyID

if TYPE_CHECKING:  # pragma: no cover
    from rlpolicy.policy.policy import Policy
    from rlpolicy.policy.sample_batch import SampleBatch

    # The sampler's classes sit a layer above (evaluation/): hinted, not imported.
    Episode = Any
    RolloutWorker = Any

# Hooks that the legacy dict interface (pre-1.0 RLlib) can fill.
_LEGACY_HOOKS = (
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_postprocess_traj",
    "on_sample_end",
    "on_train_result",
)


@PublicAPI
class DefaultCallbacks:
    """Base class of RLlib-style callbacks; every hook is a no-op by default.

    Use them for custom metrics (``episode.custom_metrics``), per-episode
    scratch data (``episode.user_data``) or custom trajectory postprocessing.
    """

    def __init__(self, legacy_callbacks_dict: Optional[Dict[str, Callable]] = None):
        """Initializes the callbacks.

        Args:
            legacy_callbacks_dict: Deprecated: a dict mapping hook names
                (``"on_episode_start"``, ``"on_episode_step"``,
                ``"on_episode_end"``, ``"on_postprocess_traj"``,
                ``"on_sample_end"``, ``"on_train_result"``) to functions that
                take one info dict.

        Raises:
            ValueError: If ``legacy_callbacks_dict`` has an unknown key.
        """
        if legacy_callbacks_dict:
            unknown = sorted(set(legacy_callbacks_dict) - set(_LEGACY_HOOKS))
            if unknown:
                raise ValueError(
                    f"legacy_callbacks_dict: unknown hook(s) {unknown}; allowed: {list(_LEGACY_HOOKS)}"
                )
            deprecation_warning(
                "callbacks dict interface", "a class extending rlpolicy.agents.callbacks.DefaultCallbacks"
            )
        self.legacy_callbacks = legacy_callbacks_dict or {}

    def _legacy(self, name: str, info: Dict[str, Any]) -> None:
        fn = self.legacy_callbacks.get(name)
        if fn:
            fn(info)

    def on_sub_environment_created(
        self,
        *,
        worker: "RolloutWorker",
        sub_environment: EnvType,
        env_context: Any,
        **kwargs,
    ) -> None:
        """Runs after a sub-environment (e.g. one ``gymnasium.Env``) was created on a worker.

        Args:
            worker: The rollout worker that owns the environment.
            sub_environment: The newly created environment.
            env_context: The env config (with ``worker_index``, ``vector_index``...).
            kwargs: Room for future arguments.
        """

    def on_trainer_init(self, *, trainer: Any, **kwargs) -> None:
        """Runs once at the end of a trainer's setup.

        Args:
            trainer: The trainer (here: whatever object drives training).
            kwargs: Room for future arguments.
        """

    def on_episode_start(
        self,
        *,
        worker: "RolloutWorker",
        base_env: Any,
        policies: Dict[PolicyID, "Policy"],
        episode: "Episode",
        env_index: Optional[int] = None,
        **kwargs,
    ) -> None:
        """Runs on a rollout worker right before an episode starts.

        Args:
            worker: The rollout worker.
            base_env: The vectorised env running the episode.
            policies: Policy id -> Policy (single agent: just ``"default_policy"``).
            episode: The new episode; store scratch data in ``episode.user_data``
                and metrics in ``episode.custom_metrics``.
            env_index: Index of the sub-environment within ``base_env``.
            kwargs: Room for future arguments.
        """
        self._legacy("on_episode_start", {"env": base_env, "policy": policies, "episode": episode})

    def on_episode_step(
        self,
        *,
        worker: "RolloutWorker",
        base_env: Any,
        policies: Optional[Dict[PolicyID, "Policy"]] = None,
        episode: "Episode",
        env_index: Optional[int] = None,
        **kwargs,
    ) -> None:
        """Runs after each env step of an episode.

        Args:
            worker: The rollout worker.
            base_env: The vectorised env running the episode.
            policies: Policy id -> Policy.
            episode: The running episode.
            env_index: Index of the sub-environment within ``base_env``.
            kwargs: Room for future arguments.
        """
        self._legacy("on_episode_step", {"env": base_env, "episode": episode})

    def on_episode_end(
        self,
        *,
        worker: "RolloutWorker",
        base_env: Any,
        policies: Dict[PolicyID, "Policy"],
        episode: "Episode",
        env_index: Optional[int] = None,
        **kwargs,
    ) -> None:
        """Runs when an episode is done.

        Args:
            worker: The rollout worker.
            base_env: The vectorised env running the episode.
            policies: Policy id -> Policy.
            episode: The finished episode.
            env_index: Index of the sub-environment within ``base_env``.
            kwargs: Room for future arguments.
        """
        self._legacy("on_episode_end", {"env": base_env, "policy": policies, "episode": episode})

    def on_postprocess_trajectory(
        self,
        *,
        worker: "RolloutWorker",
        episode: "Episode",
        agent_id: AgentID,
        policy_id: PolicyID,
        policies: Dict[PolicyID, "Policy"],
        postprocessed_batch: "SampleBatch",
        original_batches: Dict[AgentID, Any],
        **kwargs,
    ) -> None:
        """Runs right after a policy's ``postprocess_trajectory``.

        Args:
            worker: The rollout worker.
            episode: The episode the trajectory belongs to.
            agent_id: The agent whose trajectory was postprocessed.
            policy_id: The policy that agent maps to.
            policies: Policy id -> Policy.
            postprocessed_batch: The postprocessed batch; may be changed in place.
            original_batches: Agent id -> that agent's trajectory data before
                postprocessing (as the sampler passes it); do not change.
            kwargs: Room for future arguments.
        """
        if self.legacy_callbacks.get("on_postprocess_traj"):
            self._legacy(
                "on_postprocess_traj",
                {
                    "episode": episode,
                    "agent_id": agent_id,
                    "pre_batch": original_batches[agent_id],
                    "post_batch": postprocessed_batch,
                    "all_pre_batches": original_batches,
                },
            )

    def on_sample_end(
        self,
        *,
        worker: "RolloutWorker",
        samples: "SampleBatch",
        **kwargs,
    ) -> None:
        """Runs at the end of ``RolloutWorker.sample()``.

        Args:
            worker: The rollout worker.
            samples: The batch about to be returned; may be changed in place.
            kwargs: Room for future arguments.
        """
        self._legacy("on_sample_end", {"worker": worker, "samples": samples})

    def on_learn_on_batch(
        self, *, policy: "Policy", train_batch: "SampleBatch", result: dict, **kwargs
    ) -> None:
        """Runs at the start of ``Policy.learn_on_batch()`` (before zero-padding).

        With ``framework="tf"`` the ``infos`` column is not in ``train_batch``.

        Args:
            policy: The learning policy.
            train_batch: The batch to learn on; may be changed in place.
            result: Dict to add custom metrics to.
            kwargs: Room for future arguments.
        """

    def on_train_result(self, *, trainer: Any, result: dict, **kwargs) -> None:
        """Runs at the end of a training iteration.

        Args:
            trainer: The trainer.
            result: The iteration's result dict; may be changed in place.
            kwargs: Room for future arguments.
        """
        self._legacy("on_train_result", {"trainer": trainer, "result": result})


# Its public home (RLlib's path), which re-exports it.
DefaultCallbacks.__module__ = "rlpolicy.agents.callbacks"
