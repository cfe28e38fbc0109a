"""Row-by-row batch builders (RLlib 1.11's ``ray.rllib.evaluation.sample_batch_builder``).

RLlib 1.11 keeps these for user code (offline data writers, unit tests,
custom samplers); its own sampler uses a collector instead, as rlpolicy's
does. Both classes are deprecated there, and warn once per process here.
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Dict, List, Optional, Union

import numpy as np

from rlpolicy.evaluation.episode import _DUMMY_AGENT_ID
from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.deprecation import deprecation_warning
from rlpolicy.utils.typing import AgentID, PolicyID

logger = logging.getLogger(__name__)
_warned: set = set()


def _warn_once(old: str, new: str) -> None:
    if old not in _warned:
        _warned.add(old)
        deprecation_warning(old=old, new=new, error=False)


def to_float_array(v: List[Any]) -> np.ndarray:
    """``np.array(v)``, with float64 narrowed to float32 (RLlib 1.11's column conversion)."""
    arr = np.array(v)
    if arr.dtype == np.float64:
        return arr.astype(np.float32)
    return arr


@DeveloperAPI
class SampleBatchBuilder:
    """Builds a SampleBatch from rows (dicts of values) added one at a time.

    Example:
        >>> builder = SampleBatchBuilder()
        >>> builder.add_values(obs=[0.0, 1.0], actions=1, rewards=0.5, dones=False)
        >>> batch = builder.build_and_reset()  # batch["obs"].shape == (1, 2)
    """

    _next_unroll_id = 0  # one id per built batch, shared by all builders (as RLlib)

    def __init__(self):
        _warn_once("SampleBatchBuilder", "RolloutWorker.sample()")
        self.buffers: Dict[str, List[Any]] = collections.defaultdict(list)
        self.count = 0

    def add_values(self, **values: Any) -> None:
        """Adds one row; every keyword is a column."""
        for key, value in values.items():
            self.buffers[key].append(value)
        self.count += 1

    def add_batch(self, batch: SampleBatch) -> None:
        """Adds the rows of ``batch``."""
        for key, column in batch.items():
            self.buffers[key].extend(column)
        self.count += batch.count

    def build_and_reset(self) -> SampleBatch:
        """The rows added so far as a SampleBatch (float64 columns become float32);
        the builder is emptied. A batch without ``unroll_id`` gets a new one.

        Raises:
            ValueError: If the columns have different numbers of rows (a row missed a key).
        """
        lengths = {key: len(values) for key, values in self.buffers.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"SampleBatchBuilder: columns have different row counts {lengths}; "
                "give every row the same keys"
            )
        batch = SampleBatch({key: to_float_array(values) for key, values in self.buffers.items()})
        if SampleBatch.UNROLL_ID not in batch:
            batch[SampleBatch.UNROLL_ID] = np.repeat(SampleBatchBuilder._next_unroll_id, batch.count)
            SampleBatchBuilder._next_unroll_id += 1
        self.buffers.clear()
        self.count = 0
        return batch


@DeveloperAPI
class MultiAgentSampleBatchBuilder:
    """Builds per-policy SampleBatches from per-agent rows.

    Rows are collected per agent; :meth:`postprocess_batch_so_far` runs each
    agent's rows through its policy's exploration and
    ``postprocess_trajectory`` (with the other agents' rows as
    ``other_agent_batches``) and moves them to the agent's policy.
    """

    def __init__(
        self, policy_map: Dict[PolicyID, Any], clip_rewards: Union[bool, float, None], callbacks: Any
    ):
        """Initializes a MultiAgentSampleBatchBuilder.

        Args:
            policy_map: Policy id -> Policy.
            clip_rewards: True: rewards become their sign before postprocessing;
                a number: they are clipped to ``[-clip_rewards, clip_rewards]``;
                False/None: unchanged.
            callbacks: A DefaultCallbacks instance (``on_postprocess_trajectory``).
        """
        _warn_once("MultiAgentSampleBatchBuilder", "RolloutWorker.sample()")
        self.policy_map = policy_map
        self.clip_rewards = clip_rewards
        self.policy_builders = {pid: SampleBatchBuilder() for pid in policy_map}
        self.agent_builders: Dict[AgentID, SampleBatchBuilder] = {}
        self.agent_to_policy: Dict[AgentID, PolicyID] = {}
        self.callbacks = callbacks
        #: Env steps taken (the caller counts them; reported by ``build_and_reset``).
        self.count = 0

    def total(self) -> int:
        """Rows held by the per-agent builders (all agents)."""
        return sum(b.count for b in self.agent_builders.values())

    def has_pending_agent_data(self) -> bool:
        """Whether some agent has rows not yet postprocessed."""
        return len(self.agent_builders) > 0

    @DeveloperAPI
    def add_values(self, agent_id: AgentID, policy_id: PolicyID, **values: Any) -> None:
        """Adds one row for ``agent_id`` (controlled by ``policy_id``).

        Raises:
            KeyError: If ``policy_id`` is not in the policy map.
        """
        if policy_id not in self.policy_map:
            raise KeyError(
                f"MultiAgentSampleBatchBuilder.add_values: unknown policy id {policy_id!r}; "
                f"known: {sorted(self.policy_map)}"
            )
        if agent_id not in self.agent_builders:
            self.agent_builders[agent_id] = SampleBatchBuilder()
            self.agent_to_policy[agent_id] = policy_id
        if agent_id != _DUMMY_AGENT_ID:  # multi-agent algorithms read the agent id
            values["agent_id"] = agent_id
        self.agent_builders[agent_id].add_values(**values)

    def postprocess_batch_so_far(self, episode: Optional[Any] = None) -> None:
        """Postprocesses every agent's pending rows and moves them to their policies' builders.

        Raises:
            ValueError: If an agent's rows span more than one episode (a done
                before the last row, or several ``eps_id`` values).
        """
        pre_batches = {
            agent_id: (self.policy_map[self.agent_to_policy[agent_id]], b.build_and_reset())
            for agent_id, b in self.agent_builders.items()
        }
        for _, batch in pre_batches.values():
            self._clip_rewards(batch)
        post_batches = {}
        for agent_id, (policy, batch) in pre_batches.items():
            _check_single_trajectory(agent_id, batch)
            others = {a: v for a, v in pre_batches.items() if a != agent_id}
            if getattr(policy, "exploration", None) is not None:
                policy.exploration.postprocess_trajectory(policy, batch, policy.get_session())
            post_batches[agent_id] = policy.postprocess_trajectory(batch, others, episode)
        from rlpolicy.evaluation.rollout_worker import get_global_worker

        for agent_id, post in sorted(post_batches.items(), key=lambda kv: str(kv[0])):
            policy_id = self.agent_to_policy[agent_id]
            self.callbacks.on_postprocess_trajectory(
                worker=get_global_worker(),
                episode=episode,
                agent_id=agent_id,
                policy_id=policy_id,
                policies=self.policy_map,
                postprocessed_batch=post,
                original_batches=pre_batches,
            )
            self.policy_builders[policy_id].add_batch(post)
        self.agent_builders.clear()
        self.agent_to_policy.clear()

    def _clip_rewards(self, batch: SampleBatch) -> None:
        if SampleBatch.REWARDS not in batch or not self.clip_rewards:
            return
        if self.clip_rewards is True:
            batch[SampleBatch.REWARDS] = np.sign(batch[SampleBatch.REWARDS])
        else:
            bound = float(self.clip_rewards)
            batch[SampleBatch.REWARDS] = np.clip(batch[SampleBatch.REWARDS], -bound, bound)

    def check_missing_dones(self) -> None:
        """Raises if an agent's last pending row is not done (the env ended without its last obs).

        Raises:
            ValueError: Naming the agent and its policy.
        """
        for agent_id, builder in self.agent_builders.items():
            dones = builder.buffers.get(SampleBatch.DONES) or [False]
            if dones[-1] is not True:
                raise ValueError(
                    f"The environment terminated for all agents, but there is no last observation for "
                    f"agent {agent_id!r} (policy {self.agent_to_policy[agent_id]!r}); include the last "
                    "observations of all live agents when setting '__all__' done, or set "
                    "no_done_at_end=True"
                )

    @DeveloperAPI
    def build_and_reset(self, episode: Optional[Any] = None) -> Union[SampleBatch, MultiAgentBatch]:
        """Postprocesses pending rows and returns every policy's batch (then starts over).

        Returns:
            ``MultiAgentBatch.wrap_as_needed(policy_batches, env_steps=self.count)``:
            a plain SampleBatch when only ``"default_policy"`` has data.
        """
        self.postprocess_batch_so_far(episode)
        policy_batches = {pid: b.build_and_reset() for pid, b in self.policy_builders.items() if b.count > 0}
        env_steps, self.count = self.count, 0
        return MultiAgentBatch.wrap_as_needed(policy_batches, env_steps)


def _check_single_trajectory(agent_id: AgentID, batch: SampleBatch) -> None:
    dones = batch.get(SampleBatch.DONES)
    eps_ids = batch.get(SampleBatch.EPS_ID)
    if (dones is not None and np.any(np.asarray(dones)[:-1])) or (
        eps_ids is not None and len(set(np.asarray(eps_ids).tolist())) > 1
    ):
        raise ValueError(
            f"MultiAgentSampleBatchBuilder: rows of agent {agent_id!r} sent to postprocessing "
            "must come from a single trajectory (a done before the last row, or several eps_id)"
        )


__all__ = ["SampleBatchBuilder", "MultiAgentSampleBatchBuilder", "to_float_array"]
