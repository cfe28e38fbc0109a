"""Sampling-side pieces of RLlib 1.11's ``ray.rllib.evaluation``: episodes, trajectory
postprocessing, rollout workers and worker sets. Names are loaded lazily so that importing this
package pulls in neither a framework nor Ray."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Episode": "rlpolicy.evaluation.episode",
    "MultiAgentEpisode": "rlpolicy.evaluation.episode",
    "Postprocessing": "rlpolicy.evaluation.postprocessing",
    "compute_advantages": "rlpolicy.evaluation.postprocessing",
    "compute_gae_for_sample_batch": "rlpolicy.evaluation.postprocessing",
    "discount_cumsum": "rlpolicy.evaluation.postprocessing",
    "adjust_nstep": "rlpolicy.evaluation.postprocessing",
    "RolloutWorker": "rlpolicy.evaluation.rollout_worker",
    "WorkerSet": "rlpolicy.evaluation.worker_set",
    "SampleBatchBuilder": "rlpolicy.evaluation.sample_batch_builder",
    "MultiAgentSampleBatchBuilder": "rlpolicy.evaluation.sample_batch_builder",
    "SampleBatch": "rlpolicy.policy.sample_batch",
    "MultiAgentBatch": "rlpolicy.policy.sample_batch",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlpolicy.evaluation' has no attribute {name!r}")


__all__ = list(_LAZY)
