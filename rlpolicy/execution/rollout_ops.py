"""Sampling from a ``WorkerSet`` (RLlib's ``ray.rllib.execution.rollout_ops``)."""

from __future__ import annotations

from typing import Any, List, Optional, Union

from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch, concat_samples
from rlpolicy.utils.annotations import ExperimentalAPI
from rlpolicy.utils.typing import SampleBatchType


@ExperimentalAPI
def synchronous_parallel_sample(
    worker_set: Any,
    *,
    max_env_steps: Optional[int] = None,
    max_agent_steps: Optional[int] = None,
    concat: bool = True,
) -> Union[SampleBatchType, List[SampleBatchType]]:
    """Samples from all workers of ``worker_set`` in parallel rounds until enough steps are in.

    Each round asks the remote workers (or, without any, the local worker)
    for one fragment each, asking only as many as the missing steps need
    when fragments have a fixed size. Fragments are postprocessed whole on
    their worker. With a step limit and ``concat=True``, a SampleBatch result
    is cut to exactly the limit (its last fragment loses its tail rows, which
    keep the values computed over the whole fragment, e.g. bootstrapped
    advantages); a MultiAgentBatch is returned whole (at least the limit),
    because its rows cannot be cut by env step.

    Args:
        worker_set: The WorkerSet.
        max_env_steps: Env steps to collect (None: one round).
        max_agent_steps: Agent steps to collect instead (counts rows of all policies).
        concat: Return one concatenated batch (True) or the list of fragments.

    Returns:
        The batch (or the list of fragments, uncut).

    Raises:
        ValueError: If both limits are given, or a limit is < 1.
    """
    if max_env_steps is not None and max_agent_steps is not None:
        raise ValueError("synchronous_parallel_sample: give max_env_steps or max_agent_steps, not both")
    limit = max_env_steps if max_env_steps is not None else max_agent_steps
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"synchronous_parallel_sample: the step limit must be an int >= 1, got {limit!r}")
    by_agent = max_agent_steps is not None
    batches: List[SampleBatchType] = []
    have = 0
    while True:
        missing = None if limit is None else limit - have
        round_ = worker_set.sample_fragments(None if by_agent else missing)
        batches.extend(round_)
        have += sum(_steps(b, by_agent) for b in round_)
        if limit is None or have >= limit:
            break
    if not concat:
        worker_set.num_env_steps_sampled += sum(_steps(b, False) for b in batches)
        return batches
    out = concat_samples(batches)
    if limit is not None and isinstance(out, SampleBatch) and out.count > limit:
        out = out.slice(0, limit)
    worker_set.num_env_steps_sampled += _steps(out, False)
    return out


def _steps(batch: SampleBatchType, by_agent: bool) -> int:
    if isinstance(batch, MultiAgentBatch):
        return batch.agent_steps() if by_agent else batch.env_steps()
    return batch.count


__all__ = ["synchronous_parallel_sample"]
