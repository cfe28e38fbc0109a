"""ViewRequirement: which data (column, time shift) a model or policy needs to see."""

from __future__ import annotations

from typing import List, Optional, Union

import gymnasium as gym
import numpy as np

from rlpolicy._core.loss_init import new_box
from rlpolicy.utils.annotations import PublicAPI


@PublicAPI
class ViewRequirement:
    """Describes one input "view" on the trajectory data.

    Args:
        data_col: The SampleBatch column the view reads; None means the dict key under
            which this requirement is stored.
        space: Space of one item of the data (used e.g. for zero-filling steps outside
            the trajectory). Defaults to a scalar, unbounded float Box.
        shift: Time offset(s) relative to the current step: an int (e.g. -1 for the
            previous step), a list of ints (e.g. [-3, -2, -1, 0] for frame stacking), or a
            range string "from:to" (both ends included, e.g. "-50:-1"), optionally
            "from:to:step".
        index: Optional absolute position inside the trajectory.
        batch_repeat_value: How many timesteps pass before the view is repeated in a train
            batch (e.g. max_seq_len for RNN states: one state per sequence).
        used_for_compute_actions: Whether this view goes into compute_actions input dicts.
        used_for_training: Whether this view is kept in the train batch.

    Raises:
        ValueError: If `shift` is not an int, list/tuple of ints or "from:to[:step]" string.
    """

    def __init__(
        self,
        data_col: Optional[str] = None,
        space: Optional[gym.Space] = None,
        shift: Union[int, str, List[int]] = 0,
        index: Optional[int] = None,
        batch_repeat_value: int = 1,
        used_for_compute_actions: bool = True,
        used_for_training: bool = True,
    ):
        self.data_col = data_col
        # A copy of a cached prototype Box: building a gymnasium Box is slow.
        self.space = space if space is not None else new_box(float("-inf"), float("inf"), ())
        self.index = index
        self.batch_repeat_value = batch_repeat_value
        self.used_for_compute_actions = used_for_compute_actions
        self.used_for_training = used_for_training
        self.shift_from: Optional[int] = None
        self.shift_to: Optional[int] = None
        self.shift_step: Optional[int] = None
        self.shift: Union[int, str, np.ndarray]
        if type(shift) is int:  # (the usual case, directly)
            self.shift = shift
            self.shift_arr = np.array([shift])
            return
        # RLlib 1.11 keeps list shifts as numpy arrays.
        self.shift = np.array(shift) if isinstance(shift, (list, tuple)) else shift
        self.shift_arr = self._parse_shift(shift)

    def _parse_shift(self, shift: Union[int, str, List[int]]) -> np.ndarray:
        if isinstance(shift, str):
            parts = shift.split(":")
            try:
                nums = [int(p) for p in parts]
            except ValueError:
                nums = []
            if len(parts) not in (2, 3) or len(nums) != len(parts):
                raise ValueError(
                    f"ViewRequirement shift={shift!r}: a range string must look like 'from:to' or 'from:to:step', e.g. '-50:-1'"
                )
            self.shift_from, self.shift_to = nums[0], nums[1]
            self.shift_step = nums[2] if len(nums) == 3 else 1
            if self.shift_step == 0:
                raise ValueError(f"ViewRequirement shift={shift!r}: step must not be 0")
            return np.arange(self.shift_from, self.shift_to + 1, self.shift_step)
        if isinstance(shift, (bool, np.bool_)):
            raise ValueError(
                f"ViewRequirement shift={shift!r}: expected an int, a list of ints or a 'from:to' string"
            )
        if isinstance(shift, (int, np.integer)):
            return np.array([int(shift)])
        if isinstance(shift, (list, tuple, np.ndarray)) and all(
            isinstance(s, (int, np.integer)) for s in shift
        ):
            return np.array(shift, dtype=np.int64)
        raise ValueError(
            f"ViewRequirement shift={shift!r}: expected an int, a list of ints or a 'from:to' string"
        )

    def __repr__(self) -> str:
        shift = self.shift.tolist() if isinstance(self.shift, np.ndarray) else self.shift
        return (
            f"ViewRequirement(data_col={self.data_col!r}, space={self.space}, shift={shift!r}, "
            f"index={self.index}, batch_repeat_value={self.batch_repeat_value}, "
            f"used_for_compute_actions={self.used_for_compute_actions}, "
            f"used_for_training={self.used_for_training})"
        )

    __str__ = __repr__
