"""PG's postprocessing: discounted Monte-Carlo returns as advantages."""

from typing import Optional

from rlpolicy.evaluation.postprocessing import compute_advantages
from rlpolicy.policy.sample_batch import SampleBatch


def post_process_advantages(
    policy, sample_batch: SampleBatch, other_agent_batches=None, episode: Optional[object] = None
) -> SampleBatch:
    """Adds ``advantages`` = discounted return-to-go (no critic, no bootstrap)."""
    return compute_advantages(sample_batch, 0.0, policy.config["gamma"], use_gae=False, use_critic=False)
