"""SampleBatch and MultiAgentBatch: column-oriented batches of trajectory data.

Mirrors `ray.rllib.policy.sample_batch` (RLlib 1.11), with gymnasium's `terminateds` /
`truncateds` columns added (`dones` is derived as terminated OR truncated when absent).
"""

from __future__ import annotations

import collections
import functools
import itertools
from numbers import Number
from typing import AbstractSet, Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

import numpy as np

from rlpolicy._core import batch_ops as ops
from rlpolicy.utils.annotations import DeveloperAPI, ExperimentalAPI, PublicAPI
from rlpolicy.utils.deprecation import deprecation_warning
from rlpolicy.utils.typing import PolicyID, TensorType, ViewRequirementsDict

# Policy id used when a single-agent batch is treated as a multi-agent one.
DEFAULT_POLICY_ID = "default_policy"


def _is_state_key(key: Any) -> bool:
    return isinstance(key, str) and key.startswith("state_in_")


def _slice_column(key: str, value: Any, start: int, stop: int) -> Any:
    """Rows [start, stop) of one column (leaves without a batch axis stay as they are)."""
    if type(value) is np.ndarray:
        return value[start:stop] if value.ndim else value
    return ops.map_column(key, value, lambda leaf: ops.slice_leaf(leaf, start, stop))


def _row_of_leaf(leaf: Any, i: int) -> Any:
    """Row ``i`` of a batched leaf; an unbatched leaf (no length) as it is."""
    return leaf[i] if ops.leaf_length(leaf) else leaf


@PublicAPI
class SampleBatch(dict):
    """A dict of columns (numpy arrays, tensors, or nested dicts/tuples of them), one row per step.

    As in RLlib 1.11 a column may have another length (e.g. a per-worker value);
    the row count is then that of the first non-empty column, and slicing,
    shuffling or concatenating the batch raises rather than misalign it.

    Extra keyword arguments (all optional):
        _time_major: Whether sequence data is laid out time-major.
        _max_seq_len: Maximum sequence length (taken from `seq_lens` if not given).
        _zero_padded: Whether sequences are already right-zero-padded to `_max_seq_len`.
        _is_training: Whether the batch is used for training (vs. action computation).

    Raises:
        ValueError: If columns differ in length (naming the column and both lengths) or
            if `seq_lens` does not sum to the batch length.
    """

    # Column names (RLlib 1.11 plus gymnasium's terminateds/truncateds).
    OBS = "obs"
    CUR_OBS = "obs"
    NEXT_OBS = "new_obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    PREV_ACTIONS = "prev_actions"
    PREV_REWARDS = "prev_rewards"
    DONES = "dones"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    INFOS = "infos"
    SEQ_LENS = "seq_lens"
    T = "t"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    ACTION_PROB = "action_prob"
    ACTION_LOGP = "action_logp"
    ACTION_DIST = "action_dist"
    EPS_ID = "eps_id"
    ENV_ID = "env_id"
    AGENT_INDEX = "agent_index"
    UNROLL_ID = "unroll_id"
    VF_PREDS = "vf_preds"
    OBS_EMBEDS = "obs_embeds"
    RETURNS_TO_GO = "returns_to_go"
    ATTENTION_MASKS = "attention_masks"

    @PublicAPI
    def __init__(self, *args: Any, **kwargs: Any):
        self.time_major = kwargs.pop("_time_major", None)
        self.max_seq_len = kwargs.pop("_max_seq_len", None)
        self.zero_padded = kwargs.pop("_zero_padded", False)
        self._is_training = kwargs.pop("_is_training", None)
        self.accessed_keys: Set[str] = set()
        self.added_keys: Set[str] = set()
        self.deleted_keys: Set[str] = set()
        self.intercepted_values: Dict[str, Any] = {}
        self.get_interceptor: Optional[Callable[[Any], Any]] = None
        self._slice_map: Optional[np.ndarray] = None
        dict.__init__(self, *args, **kwargs)

        self._normalize_seq_lens()
        if self._is_training is None:
            self._is_training = dict.pop(self, "is_training", False)
        else:
            dict.pop(self, "is_training", None)
        for k, v in list(dict.items(self)):
            # RLlib 1.11: plain lists / numbers become numpy arrays (INFOS stays as given).
            if type(v) is not np.ndarray and k != self.INFOS and isinstance(v, (Number, list)):
                dict.__setitem__(self, k, np.array(v))
        self._derive_dones()
        self.count = self._count_and_validate()

    @classmethod
    def _trusted(cls, data: Dict[str, Any], count: int, flags: Dict[str, Any]) -> "SampleBatch":
        """Builds a batch from columns cut out of an already validated batch.

        Skips the per-column checks of `__init__` (the hot path of slicing, which
        TorchPolicy runs once per minibatch); `data` must be consistent with `count`.
        """
        out = dict.__new__(cls)
        dict.update(out, data)
        for k, v in data.items():
            # As in __init__: plain lists / numbers become numpy arrays (INFOS stays as given).
            if type(v) is not np.ndarray and k != cls.INFOS and isinstance(v, (Number, list)):
                dict.__setitem__(out, k, np.array(v))
        out.time_major = flags["_time_major"]
        out.max_seq_len = flags["_max_seq_len"]
        out.zero_padded = flags["_zero_padded"]
        out._is_training = flags["_is_training"]
        out.accessed_keys, out.added_keys, out.deleted_keys = set(), set(), set()
        out.intercepted_values = {}
        out.get_interceptor = None
        out._slice_map = None
        if out.max_seq_len is None and cls.SEQ_LENS in data:
            seq_lens = ops.concrete_seq_lens(data[cls.SEQ_LENS])
            if seq_lens is not None and len(seq_lens) > 0:
                out.max_seq_len = int(seq_lens.max())
        out.count = count
        return out

    # ------------------------------------------------------------------ construction

    def _normalize_seq_lens(self) -> None:
        seq_lens = dict.get(self, self.SEQ_LENS)
        if seq_lens is None or (isinstance(seq_lens, list) and len(seq_lens) == 0):
            dict.pop(self, self.SEQ_LENS, None)
            return
        if isinstance(seq_lens, list):
            dict.__setitem__(self, self.SEQ_LENS, np.array(seq_lens, dtype=np.int32))
        concrete = ops.concrete_seq_lens(dict.__getitem__(self, self.SEQ_LENS))
        if self.max_seq_len is None and concrete is not None and len(concrete) > 0:
            self.max_seq_len = int(concrete.max())

    def _derive_dones(self) -> None:
        # gymnasium: an episode step is "done" if it terminated or was truncated.
        if self.DONES in self or self.TERMINATEDS not in self:
            return
        term = dict.__getitem__(self, self.TERMINATEDS)
        trunc = dict.get(self, self.TRUNCATEDS)
        if not isinstance(term, np.ndarray) or not isinstance(trunc, (np.ndarray, type(None))):
            return
        dones = term.astype(bool) if trunc is None else np.logical_or(term, trunc)
        dict.__setitem__(self, self.DONES, dones)

    def _row_leaves(self) -> Iterator[Tuple[str, int, bool]]:
        """``(path, length, nested)`` of every leaf that has a batch axis, in column
        order; ``seq_lens`` and ``state_in_*`` / ``state_out_*`` (one row per
        sequence) are skipped, as are the ``infos`` of a zero-padded batch (infos
        are never padded)."""
        for key, value in dict.items(self):
            if key == self.SEQ_LENS or (isinstance(key, str) and key.startswith(("state_in_", "state_out_"))):
                continue
            if key == self.INFOS and self.zero_padded:
                continue
            if type(value) is np.ndarray:  # the common plain column
                if value.ndim:
                    yield key, value.shape[0], False
                continue
            for path, leaf in ops.column_leaves(key, value):
                n = ops.leaf_length(leaf)
                if n is not None:
                    yield path, n, path != key

    def _rows_expected(self) -> Tuple[Optional[int], Optional[str]]:
        """The rows a per-row column has, and the column that says so (RLlib 1.11:
        the first non-empty plain column; else the first nested leaf), or
        ``seq_lens`` x ``_max_seq_len`` for a zero-padded batch."""
        seq_lens = self._seq_lens_np() if dict.__contains__(self, self.SEQ_LENS) else None
        if self.zero_padded and seq_lens is not None and self.max_seq_len is not None:
            return len(seq_lens) * int(self.max_seq_len), "seq_lens (padded)"
        first: Tuple[Optional[int], Optional[str]] = (None, None)
        for path, n, nested in self._row_leaves():
            if n and not nested:
                return n, path
            if first[0] is None or (not first[0] and n):
                first = (n, path)
        return first

    def _count_and_validate(self) -> int:
        """The batch's row count, as RLlib 1.11 counts it: the sum of ``seq_lens``
        if present, else the length of the first non-empty column (see
        ``_rows_expected``). Columns of other lengths are kept (RLlib 1.11 code
        relies on them, e.g. per-worker values); operations that would misalign
        them refuse (``_check_aligned``).

        Raises:
            ValueError: ``seq_lens`` that do not fit the columns.
        """
        seq_lens = self._seq_lens_np() if dict.__contains__(self, self.SEQ_LENS) else None
        expected_rows, ref_key = self._rows_expected()
        if seq_lens is None:
            return expected_rows or 0
        total = int(seq_lens.sum())
        padded = ref_key == "seq_lens (padded)"
        if not padded and expected_rows is not None and total != expected_rows:
            raise ValueError(
                f"SampleBatch seq_lens {seq_lens.tolist()} sum to {total} but column {ref_key!r} has {expected_rows} rows; seq_lens must sum to the batch length"
            )
        if padded and int(seq_lens.max()) > int(self.max_seq_len):  # type: ignore[arg-type]
            raise ValueError(
                f"SampleBatch seq_lens {seq_lens.tolist()} exceed _max_seq_len={self.max_seq_len} of a zero-padded batch"
            )
        return total

    def _check_aligned(self, operation: str) -> None:
        """Raises if a column's length differs from the batch's rows (a ragged
        column, which RLlib 1.11 keeps): ``operation`` (slicing, shuffling,
        concatenating, ...) would silently misalign it, as RLlib 1.11 does.

        Raises:
            ValueError: Naming the column, its length and the batch's.
        """
        n_rows = self.count
        if not dict.__contains__(self, self.SEQ_LENS) and all(
            type(v) is np.ndarray and (v.ndim == 0 or v.shape[0] == n_rows) for v in dict.values(self)
        ):
            return  # the common case: plain arrays of one length
        rows, ref_key = self._rows_expected()
        if rows is None:
            return
        for path, n, _ in self._row_leaves():
            if n != rows:
                raise ValueError(
                    f"SampleBatch.{operation}: column {path!r} has {n} rows but the batch has {rows} (from {ref_key!r}); {operation} would misalign it, so drop or fix the column first"
                )

    # ------------------------------------------------------------------ sizes

    @PublicAPI
    def __len__(self) -> int:
        """Number of timesteps (rows) in the batch (excluding zero-padding)."""
        return self.count

    @PublicAPI
    def agent_steps(self) -> int:
        """Number of agent steps (equals `count` for a single-agent batch)."""
        return len(self)

    @PublicAPI
    def env_steps(self) -> int:
        """Number of env steps (equals `count` for a single-agent batch)."""
        return len(self)

    # ------------------------------------------------------------------ item access

    @PublicAPI
    def __getitem__(self, key: Union[str, slice]) -> TensorType:
        """Returns a column (recording the access) or, for a slice, a sliced batch."""
        if isinstance(key, slice):
            return self._slice(key)
        if key == "is_training":
            return self.is_training  # backward compatibility with input dicts
        if key == self.DONES and not dict.__contains__(self, key) and self.TERMINATEDS in self:
            return self._dones_from_terminateds()
        value = dict.__getitem__(self, key)  # raises KeyError for unknown columns
        self.accessed_keys.add(key)
        if self.get_interceptor is not None:
            if key not in self.intercepted_values:
                self.intercepted_values[key] = self.get_interceptor(value)
            value = self.intercepted_values[key]
        return value

    def _dones_from_terminateds(self) -> TensorType:
        term = self[self.TERMINATEDS]
        if self.TRUNCATEDS not in self:
            return term
        trunc = self[self.TRUNCATEDS]
        if ops.is_torch_tensor(term):
            return ops.loaded_torch().logical_or(term.bool(), trunc.bool())
        if ops.is_tf_tensor(term):
            tf = ops.loaded_tf()
            return tf.logical_or(tf.cast(term, tf.bool), tf.cast(trunc, tf.bool))
        return np.logical_or(term, trunc)

    @PublicAPI
    def __setitem__(self, key: str, item: Any) -> None:
        """Sets (or replaces) a whole column, recording newly added keys."""
        if not hasattr(self, "added_keys"):
            # Being rebuilt by pickle: items arrive before the instance attributes.
            dict.__setitem__(self, key, item)
            return
        if key == "is_training":
            self.set_training(item)  # backward compatibility with input dicts
            return
        if key not in self:
            self.added_keys.add(key)
        dict.__setitem__(self, key, item)
        if key in self.intercepted_values:
            self.intercepted_values[key] = item
        if key == self.SEQ_LENS:
            self._slice_map = None
        elif self.count == 0 and self.SEQ_LENS not in self:
            self.count = ops.first_length(key, item) or 0

    @PublicAPI
    def __delitem__(self, key: str) -> None:
        self.deleted_keys.add(key)
        dict.__delitem__(self, key)
        self.intercepted_values.pop(key, None)

    @PublicAPI
    def get(self, key: str, default: Any = None) -> Any:
        """Returns column `key` (through `__getitem__`) or `default` if absent."""
        try:
            return self.__getitem__(key)
        except KeyError:
            return default

    @PublicAPI
    def columns(self, keys: List[str]) -> List[Any]:
        """Returns the data of the given columns, in order."""
        return [self[k] for k in keys]

    @DeveloperAPI
    def set_get_interceptor(self, fn: Optional[Callable[[Any], Any]]) -> None:
        """Sets a function applied (once, lazily) to each column when it is first read."""
        if fn is not self.get_interceptor:
            self.intercepted_values = {}
        self.get_interceptor = fn

    @property
    def is_training(self) -> Any:
        """The training flag (passed through the get-interceptor if one is set)."""
        if self.get_interceptor is not None and isinstance(self._is_training, bool):
            if "_is_training" not in self.intercepted_values:
                self.intercepted_values["_is_training"] = self.get_interceptor(np.array(self._is_training))
            return self.intercepted_values["_is_training"]
        return self._is_training

    def set_training(self, training: Any = True) -> None:
        """Sets the `is_training` flag (a bool, or e.g. a tf placeholder)."""
        self._is_training = training
        self.intercepted_values.pop("_is_training", None)

    def _raw(self) -> Dict[str, Any]:
        """The raw column dict (no interceptor, no accessed-key tracking)."""
        return dict(dict.items(self))

    def _flags(self, zero_padded: Optional[bool] = None) -> Dict[str, Any]:
        zp = self.zero_padded if zero_padded is None else zero_padded
        return {
            "_is_training": self._is_training,
            "_time_major": self.time_major,
            "_zero_padded": zp,
            "_max_seq_len": self.max_seq_len if zp else None,
        }

    # ------------------------------------------------------------------ copy / concat

    @PublicAPI
    def copy(self, shallow: bool = False) -> "SampleBatch":
        """Returns a copy; numpy leaves are copied unless `shallow`.

        The copy shares the interceptor and the accessed/added/deleted key sets with
        `self` (as in RLlib), so key tracking spans both objects.
        """

        def copy_leaf(v: Any) -> Any:
            return np.array(v, copy=not shallow) if isinstance(v, np.ndarray) else v

        data = {
            k: (
                list(v)
                if k == self.INFOS and isinstance(v, list) and not shallow
                else ops.map_column(k, v, copy_leaf)
            )
            for k, v in dict.items(self)
        }
        out = SampleBatch(data, **self._flags())
        out.max_seq_len = self.max_seq_len
        out.set_get_interceptor(self.get_interceptor)
        out.accessed_keys = self.accessed_keys
        out.added_keys = self.added_keys
        out.deleted_keys = self.deleted_keys
        return out

    @staticmethod
    @PublicAPI
    def concat_samples(samples: List[Any]) -> Any:
        """See the module-level `concat_samples`."""
        return concat_samples(samples)

    @PublicAPI
    def concat(self, other: "SampleBatch") -> "SampleBatch":
        """Returns a new batch with `other`'s rows appended to this one's."""
        return concat_samples([self, other])

    @PublicAPI
    def as_multi_agent(self) -> "MultiAgentBatch":
        """Wraps this batch as a MultiAgentBatch under DEFAULT_POLICY_ID."""
        return MultiAgentBatch({DEFAULT_POLICY_ID: self}, self.count)

    # ------------------------------------------------------------------ row views

    @PublicAPI
    def rows(self) -> Iterator[Dict[str, Any]]:
        """Yields one dict per timestep (`seq_lens` shows as 1 in every row)."""
        self._check_aligned("rows")
        raw = self._raw()
        for i in range(self.count):
            row = {}
            for k, v in raw.items():
                if k == self.SEQ_LENS:
                    row[k] = 1
                else:
                    row[k] = ops.map_column(k, v, functools.partial(_row_of_leaf, i=i))
            yield row

    @PublicAPI
    def shuffle(self) -> "SampleBatch":
        """Shuffles the rows in place (all columns with one permutation).

        Raises:
            ValueError: If the batch has `seq_lens` (shuffling would break sequences).
        """
        if dict.get(self, self.SEQ_LENS) is not None:
            raise ValueError(
                "SampleBatch.shuffle() is not possible for a batch with seq_lens (sequences would be torn apart); use pad_batch_to_sequences_of_same_size(..., shuffle=True) instead"
            )
        self._check_aligned("shuffle")
        perm = np.random.permutation(self.count)
        shuffled = {}
        for k, v in dict.items(self):
            if k == self.INFOS and isinstance(v, list):
                shuffled[k] = [v[i] for i in perm]
            else:
                shuffled[k] = ops.map_column(
                    k, v, lambda leaf: leaf[perm] if ops.leaf_length(leaf) == self.count else leaf
                )
        dict.update(self, shuffled)
        self.intercepted_values = {}
        return self

    @PublicAPI
    def split_by_episode(self, key: Optional[str] = None) -> List["SampleBatch"]:
        """Splits into one batch per episode: by `eps_id` if present, else after each done.

        Args:
            key: Force splitting by "eps_id" or by "dones" (None: eps_id if present).
        """
        if key not in (None, self.EPS_ID, self.DONES):
            raise ValueError(f"split_by_episode(key={key!r}): key must be None, 'eps_id' or 'dones'")
        if self.count == 0:
            return []
        use_eps = key == self.EPS_ID or (key is None and self.EPS_ID in self)
        if use_eps:
            if self.EPS_ID not in self:
                raise KeyError(
                    f"split_by_episode(key='eps_id'): batch has no 'eps_id' column (keys: {list(self.keys())})"
                )
            ids = np.asarray(dict.__getitem__(self, self.EPS_ID))
            cuts = [i for i in range(1, self.count) if ids[i] != ids[i - 1]]
        else:
            if self.DONES not in self and self.TERMINATEDS not in self:
                raise KeyError(
                    f"split_by_episode: batch has neither 'eps_id' nor 'dones'/'terminateds' (keys: {list(self.keys())})"
                )
            dones = np.asarray(self._dones_raw())
            cuts = [i + 1 for i in range(self.count - 1) if dones[i]]
        bounds = [0] + cuts + [self.count]
        return [self[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def _dones_raw(self) -> Any:
        if dict.__contains__(self, self.DONES):
            return dict.__getitem__(self, self.DONES)
        term = np.asarray(dict.__getitem__(self, self.TERMINATEDS))
        trunc = dict.get(self, self.TRUNCATEDS)
        return term if trunc is None else np.logical_or(term, np.asarray(trunc))

    # ------------------------------------------------------------------ slicing

    def _seq_lens_np(self) -> Optional[np.ndarray]:
        seq_lens = ops.concrete_seq_lens(dict.get(self, self.SEQ_LENS))
        return seq_lens if seq_lens is not None and len(seq_lens) > 0 else None

    def _check_bounds(self, slice_: slice) -> tuple:
        """(start, stop) of `slice_` with Python/numpy semantics (clamped; stop >= start)."""
        if slice_.step not in (None, 1):
            raise ValueError(f"SampleBatch slices must have step 1, got step={slice_.step}")
        start, stop, _ = slice_.indices(self.count)
        return start, max(start, stop)

    def _slice(self, slice_: slice) -> "SampleBatch":
        """`batch[start:stop]` (numpy semantics: negative bounds count from the end, bounds
        past the end are clamped); with seq_lens both ends snap back to a sequence start."""
        start, stop = self._check_bounds(slice_)
        seq_lens = self._seq_lens_np()
        self._check_aligned("slicing")
        if seq_lens is None:
            data = {k: _slice_column(k, v, start, stop) for k, v in dict.items(self)}
            return SampleBatch._trusted(data, stop - start, self._flags())
        if self._slice_map is None:  # cached row offsets of the sequence starts
            self._slice_map = ops.seq_starts(seq_lens)
        starts = self._slice_map
        s0, s1 = ops.seq_index_of_row(starts, start), ops.seq_index_of_row(starts, stop)
        return self._slice_by_sequences(s0, s1, starts)

    def _slice_by_sequences(self, s0: int, s1: int, starts: np.ndarray) -> "SampleBatch":
        """Rows of sequences [s0, s1) (padded rows too, if zero-padded)."""
        r0, r1 = int(starts[s0]), int(starts[s1])
        padded = bool(self.zero_padded) and self.max_seq_len is not None
        p0, p1 = (s0 * self.max_seq_len, s1 * self.max_seq_len) if padded else (r0, r1)
        padded_rows = (len(starts) - 1) * self.max_seq_len if padded else None
        data = {}
        num_seqs = len(starts) - 1
        for k, v in dict.items(self):
            n = v.shape[0] if type(v) is np.ndarray and v.ndim else ops.first_length(k, v)
            # state_in_* normally holds one row per sequence, but may still be per-row.
            if k == self.SEQ_LENS or (_is_state_key(k) and n == num_seqs):
                a, b = s0, s1
            elif padded and n == padded_rows:
                a, b = p0, p1
            else:
                a, b = r0, r1
            data[k] = _slice_column(k, v, a, b)
        return SampleBatch._trusted(data, r1 - r0, self._flags())

    @PublicAPI
    def slice(
        self, start: int, end: int, state_start: Optional[int] = None, state_end: Optional[int] = None
    ) -> "SampleBatch":
        """Returns rows [start, end) without snapping; sequences cut by the bounds shrink.

        Without seq_lens the bounds follow Python/numpy slicing (negative values count
        from the end, bounds past the end are clamped). With seq_lens, `end` is clamped
        the same way but a negative `start` left-pads with -start zero rows (RLlib 1.11).

        Args:
            start: First row (see above for negative values).
            end: One past the last row.
            state_start: With `state_end`, take `state_in_*` and seq_lens from these
                sequence indices (the last seq_len is trimmed to fit).
            state_end: See `state_start`.
        """
        self._check_aligned("slice")
        n, seq_lens = self.count, self._seq_lens_np()
        if seq_lens is None:
            start, end, _ = slice(start, end).indices(n)  # the builtin `slice`
            end = max(start, end)
        else:
            end = min(max(end + n if end < 0 else end, 0), n)
            start = min(start, end) if start >= 0 else start
        data = {}
        per_seq = {
            k
            for k in ops.iter_state_keys(dict.keys(self))
            if seq_lens is not None
            and ops.first_length(k, dict.__getitem__(self, k)) == len(seq_lens) != self.count
        }
        for k, v in dict.items(self):
            if k == self.SEQ_LENS or k in per_seq:
                continue
            data[k] = ops.map_column(k, v, lambda leaf: ops.slice_with_left_pad(leaf, start, end))
        if seq_lens is None:
            return SampleBatch(data, _is_training=self._is_training, _time_major=self.time_major)
        new_lens, s0, s1 = ops.sub_seq_lens(seq_lens, start, end, state_start, state_end)
        for k in per_seq:
            data[k] = dict.__getitem__(self, k)[s0:s1]
        data[self.SEQ_LENS] = np.asarray(new_lens, dtype=np.int32)
        return SampleBatch(data, _is_training=self._is_training, _time_major=self.time_major)

    @PublicAPI
    def timeslices(
        self, size: Optional[int] = None, num_slices: Optional[int] = None, k: Optional[int] = None
    ) -> List["SampleBatch"]:
        """Cuts the batch along time into slices (via `batch[a:b]`, so seq_lens snap).

        Args:
            size: Rows per slice (the last one may be shorter).
            num_slices: Number of (about equal) slices; e.g. one per device.
            k: Deprecated alias of `size`.

        Raises:
            ValueError: If neither size nor num_slices is given, either is < 1, or the
                batch has fewer rows than `num_slices`.
        """
        if size is None and num_slices is None:
            if k is None:
                raise ValueError("SampleBatch.timeslices() needs `size` or `num_slices`")
            deprecation_warning("timeslices(k=...)", "timeslices(size=...) or timeslices(num_slices=...)")
            size = k
        bounds = ops.timeslice_bounds(len(self), size, num_slices)
        return [self[a:b] for a, b in bounds]

    # ------------------------------------------------------------------ padding / devices

    def right_zero_pad(self, max_seq_len: int, exclude_states: bool = True) -> "SampleBatch":
        """Right-zero-pads every sequence to `max_seq_len` rows, in place.

        Args:
            max_seq_len: Rows per sequence after padding.
            exclude_states: Leave `state_in_*` columns (one row per sequence) as they are.

        Raises:
            ValueError: If the batch has no seq_lens, or a sequence is longer than
                `max_seq_len`.
        """
        seq_lens = self._seq_lens_np()
        if seq_lens is None:
            raise ValueError(f"SampleBatch.right_zero_pad() needs a seq_lens column; {self!r} has none")
        if self.zero_padded:
            if self.max_seq_len == max_seq_len:
                return self
            raise ValueError(
                f"SampleBatch.right_zero_pad({max_seq_len}): batch is already zero-padded to {self.max_seq_len}"
            )
        if int(seq_lens.max()) > max_seq_len:
            raise ValueError(
                f"SampleBatch.right_zero_pad({max_seq_len}): seq_lens {seq_lens.tolist()} contain a sequence longer than max_seq_len"
            )
        self._check_aligned("right_zero_pad")
        padded = {}
        dest = ops.padded_positions(seq_lens, max_seq_len)
        for k, v in dict.items(self):
            if k == self.SEQ_LENS or (exclude_states and _is_state_key(k)):
                continue
            padded[k] = ops.map_column(
                k, v, lambda leaf: ops.pad_leaf(leaf, dest, len(seq_lens) * max_seq_len)
            )
        dict.update(self, padded)
        self.intercepted_values = {}
        self._slice_map = None
        self.zero_padded = True
        self.max_seq_len = max_seq_len
        return self

    @ExperimentalAPI
    def to_device(self, device: Any, framework: str = "torch") -> "SampleBatch":
        """Converts all numeric columns to torch tensors on `device`, in place."""
        if framework != "torch":
            raise NotImplementedError(
                f"SampleBatch.to_device(framework={framework!r}): only 'torch' is supported"
            )
        from rlpolicy.utils.framework import try_import_torch

        torch, _ = try_import_torch()
        if torch is None:
            raise ImportError("SampleBatch.to_device(framework='torch') needs torch installed")
        for k, v in list(dict.items(self)):
            if k != self.INFOS:
                dict.__setitem__(self, k, ops.map_column(k, v, lambda leaf: ops.to_torch_leaf(leaf, device)))
        self.intercepted_values = {}
        return self

    @PublicAPI
    def size_bytes(self) -> int:
        """Total bytes of all column data (`nbytes` for arrays, getsizeof otherwise)."""
        return sum(ops.leaf_nbytes(leaf) for k, v in dict.items(self) for _, leaf in ops.column_leaves(k, v))

    # ------------------------------------------------------------------ compression

    @DeveloperAPI
    def compress(
        self, bulk: bool = False, columns: AbstractSet[str] = frozenset(["obs", "new_obs"])
    ) -> "SampleBatch":
        """Compresses the given columns in place (zlib over `np.save`, no pickle).

        Args:
            bulk: Compress each column as one blob (True) or row by row (False).
            columns: Which columns to compress.
        """
        for k in columns:
            if k in self:
                value = dict.__getitem__(self, k)
                dict.__setitem__(self, k, ops.map_column(k, value, lambda leaf: ops.pack_leaf(leaf, bulk)))
        self.intercepted_values = {}
        return self

    @DeveloperAPI
    def decompress_if_needed(
        self, columns: AbstractSet[str] = frozenset(["obs", "new_obs"])
    ) -> "SampleBatch":
        """Undoes `compress` for the given columns (no-op for uncompressed ones)."""
        for k in columns:
            if k in self:
                dict.__setitem__(self, k, ops.map_column(k, dict.__getitem__(self, k), ops.unpack_leaf))
        self.intercepted_values = {}
        return self

    # ------------------------------------------------------------------ misc

    @ExperimentalAPI
    def get_single_step_input_dict(
        self, view_requirements: ViewRequirementsDict, index: Union[str, int] = "last"
    ) -> "SampleBatch":
        """Builds a one-timestep input dict (for model calls) from this trajectory.

        Args:
            view_requirements: The model's view requirements.
            index: A row index, or "last" for the step after the end of the trajectory
                (OBS from NEXT_OBS, PREV_ACTIONS from ACTIONS, PREV_REWARDS from REWARDS).
        """
        from rlpolicy._core.batch_views import single_step_input_dict

        return SampleBatch(
            single_step_input_dict(self, view_requirements, index), seq_lens=np.array([1], dtype=np.int32)
        )

    def __repr__(self) -> str:
        keys = list(self.keys())
        if dict.get(self, self.SEQ_LENS) is None:
            return f"SampleBatch({self.count}: {keys})"
        keys.remove(self.SEQ_LENS)
        num_seqs = ops.leaf_length(dict.__getitem__(self, self.SEQ_LENS))
        return f"SampleBatch({self.count} (seqs={'?' if num_seqs is None else num_seqs}): {keys})"

    __str__ = __repr__


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
                raise ValueError(
                    f"MultiAgentBatch: policy_batches[{pid!r}] is a {type(batch).__name__}, expected a SampleBatch"
                )
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
            missing = [
                c for c in (SampleBatch.EPS_ID, SampleBatch.T, SampleBatch.AGENT_INDEX) if c not in batch
            ]
            if missing:
                raise ValueError(
                    f"MultiAgentBatch.timeslices(): policy batch {pid!r} lacks columns {missing}"
                )
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
                raise ValueError(
                    f"MultiAgentBatch.concat_samples() can only concat SampleBatch|MultiAgentBatch objects, not {type(s).__name__}"
                )
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
    def compress(self, bulk: bool = False, columns: AbstractSet[str] = frozenset(["obs", "new_obs"])) -> None:
        """Compresses the given columns of every policy batch in place."""
        for batch in self.policy_batches.values():
            batch.compress(bulk=bulk, columns=columns)

    @DeveloperAPI
    def decompress_if_needed(
        self, columns: AbstractSet[str] = frozenset(["obs", "new_obs"])
    ) -> "MultiAgentBatch":
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
            raise ValueError(
                f"concat_samples: sample {i} has zero_padded={s.zero_padded}, time_major={s.time_major} but sample 0 has zero_padded={first.zero_padded}, time_major={first.time_major}; they must match"
            )
        if first.zero_padded and s.max_seq_len != first.max_seq_len:
            raise ValueError(
                f"concat_samples: zero-padded samples must share max_seq_len; sample {i} has {s.max_seq_len}, sample 0 has {first.max_seq_len}"
            )
    lens = [s.max_seq_len for s in samples if s.max_seq_len is not None]
    return first.zero_padded, first.time_major, (max(lens) if lens else None)


def _concat_column(key: str, values: List[Any], time_major: Optional[bool]) -> Any:
    if key == SampleBatch.INFOS or not isinstance(values[0], (dict, tuple)):
        return ops.concat_leaves(values, time_major)
    import tree

    try:
        return tree.map_structure(lambda *xs: ops.concat_leaves(xs, time_major), *values)
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"concat_samples: column {key!r} has different nested structures across samples ({err})"
        ) from err


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
            raise ValueError(
                f"concat_samples: sample {i} is a {type(s).__name__}, expected SampleBatch or MultiAgentBatch"
            )
    nonempty = [s for s in samples if s.count > 0]
    if not nonempty:
        return SampleBatch()
    zero_padded, time_major, max_seq_len = _check_consistent(nonempty)
    for s in nonempty:
        s._check_aligned("concat_samples")
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
        data[SampleBatch.SEQ_LENS] = np.concatenate(seq_lens).astype(np.int32)  # type: ignore[arg-type]
    elif any(sl is not None for sl in seq_lens):
        raise ValueError(
            "concat_samples: some samples have seq_lens and others do not; they must all have them or none"
        )
    return SampleBatch(data, _time_major=time_major, _zero_padded=zero_padded, _max_seq_len=max_seq_len)


def fast_shallow_copy(batch: Any) -> Optional["SampleBatch"]:
    """``batch.copy(shallow=True)`` for a plain SampleBatch (a model's input), without
    re-validating its columns and re-running the get-interceptor on columns already
    converted; None for anything else (the caller falls back to ``copy``)."""
    if type(batch) is not SampleBatch:
        return None
    out = dict.__new__(SampleBatch)
    dict.update(out, batch)
    for k, v in dict.items(batch):
        # As in __init__: plain lists / numbers become numpy arrays (INFOS stays as given).
        if type(v) is not np.ndarray and k != SampleBatch.INFOS and isinstance(v, (Number, list)):
            dict.__setitem__(out, k, np.array(v))
    # The flags, count and get-interceptor, and the very key-tracking sets.
    attrs = out.__dict__
    attrs.update(batch.__dict__)
    # Values the interceptor already produced for these very columns stay valid.
    attrs["intercepted_values"] = dict(batch.intercepted_values)
    attrs["_slice_map"] = None
    return out


__all__ = ["DEFAULT_POLICY_ID", "SampleBatch", "MultiAgentBatch", "concat_samples"]


# Further names RLlib 1.11 defines or imports in this module (1.x client code imports
# them from here); resolved on first access, see rlpolicy/utils/_lazy.py.
from rlpolicy.utils._lazy import FRAMEWORK_HANDLES, lazy_module_attrs  # noqa: E402

_RLLIB_1_11_NAMES = {
    "pack": "rlpolicy.utils.compression:pack",
    "unpack": "rlpolicy.utils.compression:unpack",
    "is_compressed": "rlpolicy.utils.compression:is_compressed",
    "Deprecated": "rlpolicy.utils.deprecation:Deprecated",
    "try_import_tf": "rlpolicy.utils.framework:try_import_tf",
    "try_import_torch": "rlpolicy.utils.framework:try_import_torch",
    "concat_aligned": "rlpolicy.utils.numpy:concat_aligned",
    "PolicyID": "rlpolicy.utils.typing:PolicyID",
    "tf1": FRAMEWORK_HANDLES["tf1"],
    "tf": FRAMEWORK_HANDLES["tf"],
    "tfv": FRAMEWORK_HANDLES["tfv"],
    "torch": FRAMEWORK_HANDLES["torch"],
}
__getattr__ = lazy_module_attrs(__name__, _RLLIB_1_11_NAMES)
