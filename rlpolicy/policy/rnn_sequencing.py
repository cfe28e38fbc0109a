"""Sequence utilities for RNN / attention models (mirrors `ray.rllib.policy.rnn_sequencing`).

A train batch of B timesteps is cut into sequences (at episode, unroll and agent
boundaries and every `max_seq_len` steps), each sequence is right-zero-padded to the same
length T, and models then reshape the flat [N*T, ...] data into [N, T, ...].
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np
import tree  # dm-tree

from rlpolicy._core import batch_ops as ops
from rlpolicy.models._time_dimension import add_time_dimension  # noqa: F401  (RLlib's path)
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.typing import ViewRequirementsDict


@DeveloperAPI
def pad_batch_to_sequences_of_same_size(
    batch: SampleBatch,
    max_seq_len: int,
    shuffle: bool = False,
    batch_divisibility_req: int = 1,
    feature_keys: Optional[List[str]] = None,
    view_requirements: Optional[ViewRequirementsDict] = None,
) -> None:
    """Pads `batch` in place so that it splits into equally long sequences.

    Does nothing to a batch that is already zero-padded. Otherwise:

    - RNN/attention case (`state_in_0` or `state_out_0` present): cuts the rows into
      sequences (given `seq_lens`, or episode/unroll/agent boundaries and `max_seq_len`),
      keeps each `state_in_*` only at sequence starts, and pads every sequence to the same
      length. That length is the longest sequence ("dynamic max") if the view
      requirement of `state_in_0` has no shift range (RNNs), else `max_seq_len`
      (attention nets, whose state inputs cover a range).
    - Multi-agent case (length not divisible by `batch_divisibility_req`, or agent
      indices other than 0): pads sequences to `batch_divisibility_req` rows.
    - Otherwise only shuffles rows (if `shuffle`).

    Args:
        batch: The batch to pad (modified in place; `zero_padded` becomes True).
        max_seq_len: Maximum sequence length used for chopping.
        shuffle: Shuffle (whole sequences, or rows in the simple case).
        batch_divisibility_req: The padded batch length must be divisible by this.
        feature_keys: Columns to pad; default: all except state_*, seq_lens and infos.
        view_requirements: The policy's view requirements (decides dynamic max).
    """
    if batch.zero_padded:
        return
    raw = dict(dict.items(batch))
    rnn = "state_in_0" in raw or "state_out_0" in raw
    if batch_divisibility_req > 1 and not rnn:
        agents = raw.get(SampleBatch.AGENT_INDEX)
        single_agent = agents is None or len(agents) == 0 or int(np.max(agents)) == 0
        if len(batch) % batch_divisibility_req != 0 or not single_agent:
            max_seq_len, dynamic_max = batch_divisibility_req, False
            _chop_batch_in_place(batch, raw, max_seq_len, dynamic_max, shuffle, feature_keys)
            batch.zero_padded = True
            return
    if not rnn:
        if shuffle:
            batch.shuffle()
        batch.zero_padded = True  # RLlib 1.11 marks the batch even when nothing needs padding
        return
    req = view_requirements.get("state_in_0") if view_requirements else None
    # RNNs (single-step state input) pad to the longest sequence; attention nets
    # (state input over a shift range) need the full max_seq_len.
    dynamic_max = req is not None and req.shift_from is None
    _chop_batch_in_place(batch, raw, max_seq_len, dynamic_max, shuffle, feature_keys)
    # Only now (a failed chop leaves the batch as it was).
    batch.zero_padded = True


def _chop_batch_in_place(
    batch: SampleBatch,
    raw: dict,
    max_seq_len: int,
    dynamic_max: bool,
    shuffle: bool,
    feature_keys: Optional[List[str]],
) -> None:
    seq_lens = raw.get(SampleBatch.SEQ_LENS)
    state_keys = [k for k in raw if k.startswith("state_in_")]
    reduced = seq_lens is not None and len(state_keys) > 0 and len(raw[state_keys[0]]) == len(seq_lens)
    if feature_keys:
        keys = list(feature_keys)
    else:
        keys = [k for k, v in raw.items() if _is_row_feature(k, v, len(batch))]
    features, states, new_lens = chop_into_sequences(
        feature_columns=[raw[k] for k in keys],
        state_columns=[raw[k] for k in state_keys],
        episode_ids=raw.get(SampleBatch.EPS_ID),
        unroll_ids=raw.get(SampleBatch.UNROLL_ID),
        agent_indices=raw.get(SampleBatch.AGENT_INDEX),
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        dynamic_max=dynamic_max,
        states_already_reduced_to_init=reduced,
        shuffle=shuffle,
        handle_nested_data=True,
    )
    for k, leaves in zip(keys, features):
        value = raw[k]
        batch[k] = tree.unflatten_as(value, leaves) if isinstance(value, (dict, tuple)) else leaves[0]
    for k, s in zip(state_keys, states):
        batch[k] = s
    batch[SampleBatch.SEQ_LENS] = np.asarray(new_lens, dtype=np.int32)
    batch.max_seq_len = int(max(new_lens)) if dynamic_max and len(new_lens) else max_seq_len
    batch.intercepted_values = {}


def _is_row_feature(key: str, value: Any, count: int) -> bool:
    """Whether a column holds one numpy row per timestep (and so must be padded)."""
    if key in (SampleBatch.SEQ_LENS, SampleBatch.INFOS) or key.startswith(("state_in_", "state_out_")):
        return False
    leaves = tree.flatten(value) if isinstance(value, (dict, tuple)) else [value]
    return bool(leaves) and all(isinstance(x, np.ndarray) and x.ndim > 0 and len(x) == count for x in leaves)


@DeveloperAPI
def chop_into_sequences(
    *,
    feature_columns: List[Any],
    state_columns: List[Any],
    max_seq_len: int,
    episode_ids: Optional[Any] = None,
    unroll_ids: Optional[Any] = None,
    agent_indices: Optional[Any] = None,
    dynamic_max: bool = True,
    shuffle: bool = False,
    seq_lens: Optional[Any] = None,
    states_already_reduced_to_init: bool = False,
    handle_nested_data: bool = False,
    _extra_padding: int = 0,
) -> Tuple[List[Any], List[np.ndarray], np.ndarray]:
    """Cuts flat per-timestep columns into right-zero-padded sequences.

    Without `seq_lens`, a new sequence starts wherever the episode id, unroll id or
    agent index changes, and after every `max_seq_len` rows.

    Args:
        feature_columns: Per-timestep columns to pad (nested ones need
            `handle_nested_data=True`).
        state_columns: Per-timestep state columns; the value at each sequence start is
            kept (unless `states_already_reduced_to_init`).
        max_seq_len: Longest allowed sequence (also the padded length if not dynamic).
        episode_ids: Episode id per row (default: all 0).
        unroll_ids: Unroll id per row (default: all 0).
        agent_indices: Agent index per row (default: all 0).
        dynamic_max: Pad to the longest sequence (+ `_extra_padding`) instead of
            `max_seq_len`.
        shuffle: Randomly permute whole sequences.
        seq_lens: Use these sequence lengths instead of computing them.
        states_already_reduced_to_init: State columns already hold one row per sequence.
        handle_nested_data: Flatten each feature column with dm-tree and return, per
            column, the list of padded leaves (instead of one padded array).
        _extra_padding: Extra rows added to the dynamic max length.

    Returns:
        (feature_sequences, initial_states, seq_lens): padded features of
        len(seq_lens) * T rows each, states with one row per sequence, and the
        int32 sequence lengths.

    Raises:
        ValueError: On non-positive max_seq_len, seq_lens not summing to the number of
            rows, or (not dynamic) a given sequence longer than max_seq_len.
    """
    if max_seq_len is None or int(max_seq_len) < 1:
        raise ValueError(f"chop_into_sequences: max_seq_len must be an int >= 1, got {max_seq_len!r}")
    n_rows = _num_rows(feature_columns, state_columns, episode_ids, seq_lens)
    if seq_lens is None or len(seq_lens) == 0:
        seq_lens = _compute_seq_lens(n_rows, int(max_seq_len), episode_ids, unroll_ids, agent_indices)
    seq_lens = np.asarray(seq_lens, dtype=np.int32).reshape(-1)
    _check_seq_lens(seq_lens, n_rows, feature_columns, max_seq_len, dynamic_max)
    if dynamic_max:
        max_seq_len = (int(seq_lens.max()) if len(seq_lens) else 0) + _extra_padding
    dest = ops.padded_positions(seq_lens, int(max_seq_len))
    total = len(seq_lens) * int(max_seq_len)
    features = [
        [
            _pad(np.asarray(leaf) if not isinstance(leaf, np.ndarray) else leaf, dest, total)
            for leaf in tree.flatten(col)
        ]
        if handle_nested_data
        else [_pad(np.asarray(col), dest, total)]
        for col in feature_columns
    ]
    if states_already_reduced_to_init:
        states = [np.asarray(s) for s in state_columns]
    else:
        starts = (np.cumsum(seq_lens) - seq_lens).astype(np.int64)
        states = [np.asarray(s)[starts] for s in state_columns]
    if shuffle and len(seq_lens) > 0:
        perm = np.random.permutation(len(seq_lens))
        features = [[_permute_sequences(f, perm, len(seq_lens)) for f in col] for col in features]
        states = [s[perm] for s in states]
        seq_lens = seq_lens[perm]
    if not handle_nested_data:
        features = [col[0] for col in features]
    return features, states, seq_lens


def _num_rows(feature_columns: List[Any], state_columns: List[Any], episode_ids: Any, seq_lens: Any) -> int:
    for col in feature_columns:
        leaves = tree.flatten(col) if isinstance(col, (dict, tuple)) else [col]
        if leaves:
            return len(leaves[0])
    if episode_ids is not None:
        return len(episode_ids)
    if seq_lens is not None:
        return int(np.sum(seq_lens))
    return len(state_columns[0]) if state_columns else 0


def _compute_seq_lens(
    n_rows: int, max_seq_len: int, episode_ids: Any, unroll_ids: Any, agent_indices: Any
) -> np.ndarray:
    """Sequence lengths: a new sequence at every id change and every max_seq_len rows."""
    ids = [np.asarray(x).reshape(-1) for x in (episode_ids, unroll_ids, agent_indices) if x is not None]
    for x in ids:
        if len(x) != n_rows:
            raise ValueError(f"chop_into_sequences: got {len(x)} episode/unroll/agent ids for {n_rows} rows")
    lens: List[int] = []
    cur = 0
    for i in range(n_rows):
        boundary = i > 0 and any(x[i] != x[i - 1] for x in ids)
        if cur > 0 and (boundary or cur >= max_seq_len):
            lens.append(cur)
            cur = 0
        cur += 1
    if cur:
        lens.append(cur)
    return np.asarray(lens, dtype=np.int32)


def _check_seq_lens(
    seq_lens: np.ndarray, n_rows: int, feature_columns: List[Any], max_seq_len: int, dynamic_max: bool
) -> None:
    if feature_columns and int(seq_lens.sum()) != n_rows:
        raise ValueError(
            f"chop_into_sequences: seq_lens {seq_lens.tolist()} sum to {int(seq_lens.sum())} but the feature columns have {n_rows} rows"
        )
    if not dynamic_max and len(seq_lens) and int(seq_lens.max()) > int(max_seq_len):
        raise ValueError(
            f"chop_into_sequences: seq_lens {seq_lens.tolist()} contain a sequence longer than max_seq_len={max_seq_len}"
        )


def _pad(leaf: np.ndarray, dest: np.ndarray, total: int) -> Any:
    if len(leaf) != len(dest):
        raise ValueError(
            f"chop_into_sequences: a feature column has {len(leaf)} rows but seq_lens sum to {len(dest)}"
        )
    if leaf.dtype == object or leaf.dtype.kind in "US":
        out: list = [None] * total
        for src, d in enumerate(dest):
            out[d] = leaf[src]
        return out
    padded = np.zeros((total,) + leaf.shape[1:], dtype=leaf.dtype)
    padded[dest] = leaf
    return padded


def _permute_sequences(f: Any, perm: np.ndarray, num_seqs: int) -> Any:
    if isinstance(f, list):
        t = len(f) // num_seqs
        return [x for i in perm for x in f[i * t : (i + 1) * t]]
    shaped = f.reshape((num_seqs, -1) + f.shape[1:])
    return shaped[perm].reshape(f.shape)


@DeveloperAPI
def timeslice_along_seq_lens_with_overlap(
    sample_batch: SampleBatch,
    seq_lens: Optional[List[int]] = None,
    zero_pad_max_seq_len: int = 0,
    pre_overlap: int = 0,
    zero_init_states: bool = True,
) -> List[SampleBatch]:
    """Cuts a batch into one SampleBatch per sequence, each extended by `pre_overlap` steps.

    Every slice also holds the `pre_overlap` timesteps before its sequence (a "burn-in",
    e.g. for R2D2). Steps before the batch start or from an earlier episode (per
    `eps_id`) are replaced by zeros at the slice's front, and the slice's initial state
    is then zeroed. Example with seq_lens [5, 5, 2], pre_overlap=3 and
    zero_pad_max_seq_len=10 (Z = zero):
    `[Z Z Z 0 1 2 3 4 Z Z]`, `[2 3 4 5 6 7 8 9 Z Z]`, `[7 8 9 10 11 Z Z Z Z Z]`.

    Args:
        sample_batch: Batch with per-timestep rows (state_in_*/state_out_* per row too).
        seq_lens: Where to cut; default: the batch's seq_lens, or if it has none,
            chunks of `zero_pad_max_seq_len - pre_overlap` rows.
        zero_pad_max_seq_len: If > 0, right-zero-pad every slice to this length (which
            includes the overlap).
        pre_overlap: Number of preceding timesteps prepended to each slice.
        zero_init_states: Use zero initial states; if False, a slice's state_in_i is the
            state_out_i of the step before it (zeros at the very start).

    Returns:
        One SampleBatch per sequence (with seq_lens [pre_overlap + sequence length]).

    Raises:
        ValueError: If no sequence lengths can be derived or they are empty.
    """
    if seq_lens is None:
        seq_lens = dict.get(sample_batch, SampleBatch.SEQ_LENS)
    if seq_lens is None:
        chunk = zero_pad_max_seq_len - pre_overlap
        if chunk < 1:
            raise ValueError(
                f"timeslice_along_seq_lens_with_overlap: batch has no seq_lens, so zero_pad_max_seq_len ({zero_pad_max_seq_len}) - pre_overlap ({pre_overlap}) must be >= 1"
            )
        full, rest = divmod(len(sample_batch), chunk)
        seq_lens = [chunk] * full + ([rest] if rest else [])
    if len(seq_lens) == 0:
        raise ValueError("timeslice_along_seq_lens_with_overlap: seq_lens is empty; nothing to slice along")
    raw = {k: v for k, v in dict.items(sample_batch) if k != SampleBatch.SEQ_LENS}
    eps_ids = raw.get(SampleBatch.EPS_ID)
    out, start = [], 0
    for seq_len in (int(x) for x in seq_lens):
        begin, end = start - pre_overlap, start + seq_len
        zeros, zero_init = _overlap_zeros(begin, start, end, eps_ids)
        data = {k: _cut_with_front_zeros(k, v, begin + zeros, end, zeros) for k, v in raw.items()}
        _set_initial_states(data, raw, begin, zero_init or zero_init_states)
        out.append(SampleBatch(data, seq_lens=[end - begin]))
        start = end
    if zero_pad_max_seq_len > 0:
        for ts in out:
            ts.right_zero_pad(max_seq_len=zero_pad_max_seq_len, exclude_states=True)
    return out


def _overlap_zeros(begin: int, start: int, end: int, eps_ids: Any) -> Tuple[int, bool]:
    """How many leading rows of a slice must be zeros, and whether states must be zeroed."""
    if begin < 0:
        return start - begin, True  # reaches before the batch start
    if eps_ids is None:
        return 0, False
    ids = np.asarray(eps_ids[begin:end])
    other_episode = int(np.sum(ids != ids[-1]))  # rows of earlier episodes in the overlap
    return other_episode, other_episode > 0


def _cut_with_front_zeros(key: str, value: Any, data_begin: int, end: int, zeros: int) -> Any:
    def cut(leaf: Any) -> Any:
        part = leaf[data_begin:end]
        if zeros == 0:
            return part
        if isinstance(leaf, list) or (isinstance(leaf, np.ndarray) and leaf.dtype == object):
            return [None] * zeros + list(part)
        arr = np.asarray(part)
        return np.concatenate([np.zeros((zeros,) + arr.shape[1:], dtype=arr.dtype), arr])

    if key == SampleBatch.INFOS or not isinstance(value, (dict, tuple)):
        return cut(value)
    return tree.map_structure(cut, value)


def _set_initial_states(data: dict, raw: dict, begin: int, zero_init: bool) -> None:
    i = 0
    while f"state_in_{i}" in data:
        key, out_key = f"state_in_{i}", f"state_out_{i}"
        if zero_init or begin < 1 or out_key not in raw:
            data[key] = np.zeros_like(np.asarray(raw[key])[0:1])
        else:
            data[key] = np.asarray(raw[out_key])[begin - 1 : begin]
        data.pop(out_key, None)
        i += 1
