"""MultiAgentBatch and `concat_samples` (public home: `rlpolicy.policy.sample_batch`)."""
from __future__ import annotations

import collections
import itertools
from typing import Any, Dict, List, Optional, Set

import numpy as np

from rlpolicy._core import batch_ops as ops
from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from rlpolicy.utils.annotations import DeveloperAPI, PublicAPI
from rlpolicy.utils.typing import PolicyID

# Unroll ids handed out to the batches that `MultiAgentBatch.timeslices` builds: one process-wide
# counter (like RLlib 1.11's batch builder), so ids stay unique across calls.
_UNROLL_IDS = itertools.count()


@PublicAPI
class MultiAgentBatch:
    """Per-policy SampleBatches collected over `env_steps` environment steps.

    Args:
        policy_batches: Maps policy ids to their SampleBatch.
        env_steps: Number of env steps the data covers (each env step may hold
            several agent steps).
    """

    @PublicAPI
    def __init__(self, policy_batches: Dict[PolicyID, SampleBatch], env_steps: int):
        for pid, batch in policy_batches.items():
            if not isinstance(batch, SampleBatch):
                raise ValueError(f"MultiAgentBatch: policy_batches[{pid!r}] is a {type(batch).__name__}, expected a SampleBatch")
        self.policy_batches = policy_batches
        self.count = env_steps

    @PublicAPI
    def env_steps(self) -> int:
        """Number of env steps in this batch."""
        return self.count

    def __len__(self) -> int:
        return self.count

    @PublicAPI
    def agent_steps(self) -> int:
        """Sum of the agent steps over all policy batches."""
        return sum(b.count for b in self.policy_batches.values())

    @PublicAPI
    def timeslices(self, k: int) -> List["MultiAgentBatch"]:
        """Cuts into batches of `k` env steps each (env steps = distinct (eps_id, t)).

        Rows of all policies are ordered by (eps_id, t, agent_index); rows sharing
        (eps_id, t) belong to the same env step. Each policy batch of a slice is built
        anew and, unless its rows already carry an `unroll_id` column, gets one with a
        fresh id (one id per built batch, unique within the process), as RLlib 1.11's
        batch builder does. A policy without rows in a slice is left out of that slice.

        Raises:
            ValueError: If k < 1 or a policy batch lacks eps_id / t / agent_index.
        """
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"MultiAgentBatch.timeslices(k={k!r}): k must be an int >= 1")
        steps = []
        for pid, batch in self.policy_batches.items():
            missing = [c for c in (SampleBatch.EPS_ID, SampleBatch.T, SampleBatch.AGENT_INDEX) if c not in batch]
            if missing:
                raise ValueError(f"MultiAgentBatch.timeslices(): policy batch {pid!r} lacks columns {missing}")
            for i, row in enumerate(batch.rows()):
                key = (row[SampleBatch.EPS_ID], row[SampleBatch.T], row[SampleBatch.AGENT_INDEX])
                steps.append((key, str(pid), i, pid, row))
        steps.sort(key=lambda s: (s[0], s[1], s[2]))
        slices, cur, cur_size = [], collections.defaultdict(list), 0
        for _, group in itertools.groupby(steps, key=lambda s: s[0][:2]):
            for *_, pid, row in group:
                cur[pid].append(row)
            cur_size += 1
            if cur_size >= k:
                slices.append(MultiAgentBatch({p: _rows_to_batch(r) for p, r in cur.items()}, cur_size))
                cur, cur_size = collections.defaultdict(list), 0
        if cur_size > 0:
            slices.append(MultiAgentBatch({p: _rows_to_batch(r) for p, r in cur.items()}, cur_size))
        return slices

    @staticmethod
    @PublicAPI
    def wrap_as_needed(policy_batches: Dict[PolicyID, SampleBatch], env_steps: int) -> Any:
        """Returns the bare SampleBatch if it is the only one, under DEFAULT_POLICY_ID."""
        if len(policy_batches) == 1 and DEFAULT_POLICY_ID in policy_batches:
            return policy_batches[DEFAULT_POLICY_ID]
        return MultiAgentBatch(policy_batches=policy_batches, env_steps=env_steps)

    @staticmethod
    @PublicAPI
    def concat_samples(samples: List[Any]) -> "MultiAgentBatch":
        """Concatenates SampleBatches/MultiAgentBatches per policy id into one MultiAgentBatch."""
        per_policy: Dict[PolicyID, List[SampleBatch]] = collections.defaultdict(list)
        env_steps = 0
        for s in samples:
            if isinstance(s, SampleBatch):
                if len(s) <= 0:
                    continue
                s = s.as_multi_agent()
            elif not isinstance(s, MultiAgentBatch):
                raise ValueError(f"MultiAgentBatch.concat_samples() can only concat SampleBatch|MultiAgentBatch objects, not {type(s).__name__}")
            for pid, batch in s.policy_batches.items():
                per_policy[pid].append(batch)
            env_steps += s.env_steps()
        return MultiAgentBatch({pid: concat_samples(bs) for pid, bs in per_policy.items()}, env_steps)

    @PublicAPI
    def copy(self) -> "MultiAgentBatch":
        """Deep-copies every policy batch."""
        return MultiAgentBatch({k: v.copy() for k, v in self.policy_batches.items()}, self.count)

    @PublicAPI
    def size_bytes(self) -> int:
        return sum(b.size_bytes() for b in self.policy_batches.values())

    @DeveloperAPI
    def compress(self, bulk: bool = False, columns: Set[str] = frozenset(["obs", "new_obs"])) -> None:
        """Compresses the given columns of every policy batch in place."""
        for batch in self.policy_batches.values():
            batch.compress(bulk=bulk, columns=columns)

    @DeveloperAPI
    def decompress_if_needed(self, columns: Set[str] = frozenset(["obs", "new_obs"])) -> "MultiAgentBatch":
        for batch in self.policy_batches.values():
            batch.decompress_if_needed(columns)
        return self

    def to_device(self, device: Any, framework: str = "torch") -> "MultiAgentBatch":
        for batch in self.policy_batches.values():
            batch.to_device(device, framework=framework)
        return self

    @DeveloperAPI
    def as_multi_agent(self) -> "MultiAgentBatch":
        """Returns self (already multi-agent)."""
        return self

    def __getitem__(self, key: PolicyID) -> SampleBatch:
        return self.policy_batches[key]

    def __str__(self) -> str:
        return f"MultiAgentBatch({self.policy_batches}, env_steps={self.count})"

    __repr__ = __str__


def _rows_to_batch(rows: List[Dict[str, Any]]) -> SampleBatch:
    """Stacks row dicts (from `SampleBatch.rows()`) back into a SampleBatch (adding unroll ids)."""
    data: Dict[str, Any] = {}
    for key in rows[0]:
        if key == SampleBatch.SEQ_LENS:
            continue
        values = [r[key] for r in rows]
        if key == SampleBatch.INFOS:
            data[key] = values
        elif isinstance(values[0], (dict, tuple)):
            import tree

            data[key] = tree.map_structure(lambda *xs: np.stack(xs), *values)
        else:
            data[key] = np.stack([np.asarray(v) for v in values])
    if SampleBatch.UNROLL_ID not in data:
        data[SampleBatch.UNROLL_ID] = np.full(len(rows), next(_UNROLL_IDS), dtype=np.int64)
    return SampleBatch(data)


def _check_consistent(samples: List[SampleBatch]) -> tuple:
    """Checks that the batches agree on zero_padded / time_major / max_seq_len."""
    first = samples[0]
    for i, s in enumerate(samples[1:], start=1):
        if s.zero_padded != first.zero_padded or s.time_major != first.time_major:
            raise ValueError(f"concat_samples: sample {i} has zero_padded={s.zero_padded}, time_major={s.time_major} but sample 0 has zero_padded={first.zero_padded}, time_major={first.time_major}; they must match")
        if first.zero_padded and s.max_seq_len != first.max_seq_len:
            raise ValueError(f"concat_samples: zero-padded samples must share max_seq_len; sample {i} has {s.max_seq_len}, sample 0 has {first.max_seq_len}")
    lens = [s.max_seq_len for s in samples if s.max_seq_len is not None]
    return first.zero_padded, first.time_major, (max(lens) if lens else None)


def _concat_column(key: str, values: List[Any], time_major: Optional[bool]) -> Any:
    if key == SampleBatch.INFOS or not isinstance(values[0], (dict, tuple)):
        return ops.concat_leaves(values, time_major)
    import tree

    try:
        return tree.map_structure(lambda *xs: ops.concat_leaves(xs, time_major), *values)
    except (ValueError, TypeError) as err:
        raise ValueError(f"concat_samples: column {key!r} has different nested structures across samples ({err})") from err


@PublicAPI
def concat_samples(samples: List[Any]) -> Any:
    """Concatenates SampleBatches (rows and seq_lens) into one new SampleBatch.

    If any input is a MultiAgentBatch, all inputs are concatenated per policy into a
    MultiAgentBatch (SampleBatches count as DEFAULT_POLICY_ID). Empty batches are skipped.

    Raises:
        ValueError: If the batches disagree on zero_padded/time_major/max_seq_len, a
            column is missing from some batch, or nested structures differ.
    """
    if any(isinstance(s, MultiAgentBatch) for s in samples):
        return MultiAgentBatch.concat_samples(samples)
    for i, s in enumerate(samples):
        if not isinstance(s, SampleBatch):
            raise ValueError(f"concat_samples: sample {i} is a {type(s).__name__}, expected SampleBatch or MultiAgentBatch")
    nonempty = [s for s in samples if s.count > 0]
    if not nonempty:
        return SampleBatch()
    zero_padded, time_major, max_seq_len = _check_consistent(nonempty)
    raws = [s._raw() for s in nonempty]
    seq_lens = [ops.concrete_seq_lens(r.get(SampleBatch.SEQ_LENS)) for r in raws]
    data = {}
    for key in raws[0]:
        if key == SampleBatch.SEQ_LENS:
            continue
        for i, r in enumerate(raws):
            if key not in r:
                raise ValueError(f"concat_samples: column {key!r} is in sample 0 but missing from sample {i}")
        data[key] = _concat_column(key, [r[key] for r in raws], time_major)
    if all(sl is not None for sl in seq_lens):
        data[SampleBatch.SEQ_LENS] = np.concatenate(seq_lens).astype(np.int32)
    elif any(sl is not None for sl in seq_lens):
        raise ValueError("concat_samples: some samples have seq_lens and others do not; they must all have them or none")
    return SampleBatch(data, _time_major=time_major, _zero_padded=zero_padded, _max_seq_len=max_seq_len)


MultiAgentBatch.__module__ = "rlpolicy.policy.sample_batch"
concat_samples.__module__ = "rlpolicy.policy.sample_batch"
