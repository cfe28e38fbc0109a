"""Keys of the learner-info dicts returned by ``learn_on_batch``."""

from __future__ import annotations

from typing import Dict, List

import numpy as np

# Stats computed by the policy's `stats_fn` sit under this key.
LEARNER_STATS_KEY = "learner_stats"
LEARNER_INFO = "learner"


class LearnerInfoBuilder:
    """Collects per-policy learner results and reduces tower results by mean."""

    def __init__(self, num_devices: int = 1):
        self.num_devices = num_devices
        self.results_all_towers: Dict[str, List[dict]] = {}

    def add_learn_on_batch_results(self, results: dict, policy_id: str = "default_policy") -> None:
        self.results_all_towers.setdefault(policy_id, []).append(results)

    def finalize(self) -> dict:
        out = {}
        for pid, results in self.results_all_towers.items():
            out[pid] = _mean_nested(results)
        return out


def _mean_nested(results: List[dict]) -> dict:
    merged: dict = {}
    for key in results[0]:
        values = [r[key] for r in results if key in r]
        if isinstance(values[0], dict):
            merged[key] = _mean_nested(values)
        else:
            try:
                merged[key] = float(np.nanmean(np.asarray(values, dtype=np.float64)))
            except (TypeError, ValueError):
                merged[key] = values[0]
    return merged


def learner_stats_of(result: dict) -> Dict[str, float]:
    """Learner stats of a ``learn_on_batch``/``learn_on_loaded_batch`` result as floats:
    the mean over its ``tower_i`` entries (multi-device), else its top-level
    ``learner_stats`` (single device). Entries that are not numbers are left out."""
    towers = [_float_stats(v.get(LEARNER_STATS_KEY, {})) for k, v in result.items() if k.startswith("tower_")]
    if not towers:
        return _float_stats(result.get(LEARNER_STATS_KEY, {}))
    return {k: float(np.mean([t[k] for t in towers if k in t])) for k in towers[0]}


def _float_stats(stats: dict) -> Dict[str, float]:
    """Each stat's mean as a float (array-valued stats are averaged)."""
    out = {}
    for k, v in stats.items():
        try:
            out[k] = float(np.asarray(v, dtype=np.float64).mean())
        except (TypeError, ValueError):
            continue
    return out
