"""Building single-timestep model input dicts out of a trajectory batch."""

from __future__ import annotations

from typing import Any, Dict, Union

import numpy as np
import tree  # dm-tree

# With index="last", the next step's inputs come from these trajectory columns.
_LAST_STEP_SOURCES = {"obs": "new_obs", "prev_actions": "actions", "prev_rewards": "rewards"}


def single_step_input_dict(
    batch: Any, view_requirements: Dict[str, Any], index: Union[str, int] = "last"
) -> Dict[str, Any]:
    """Column -> one-row data for every view requirement used for compute_actions.

    Args:
        batch: A SampleBatch holding one trajectory.
        view_requirements: Maps view columns to ViewRequirement objects.
        index: Row index, or "last" for the step right after the trajectory's end.
    """
    out: Dict[str, Any] = {}
    for view_col, req in view_requirements.items():
        if req.used_for_compute_actions is False:
            continue
        data_col = req.data_col or view_col
        if index == "last":
            data_col = _LAST_STEP_SOURCES.get(data_col, data_col)
            if req.shift_from is not None:
                out[view_col] = _last_window(batch, view_col, data_col, req)
            else:
                out[view_col] = tree.map_structure(lambda v: v[-1:], batch[data_col])
        else:
            row = int(index)  # type: ignore[arg-type]  # (not "last" here)
            stop = row + 1 if row != -1 else None
            out[view_col] = tree.map_structure(lambda v, a=row, b=stop: v[a:b], batch[data_col])
    return out


def _last_window(batch: Any, view_col: str, data_col: str, req: Any) -> np.ndarray:
    """The shifted range window for the step after the end.

    With one window per row (how rlpolicy's sampler stores every range view,
    e.g. an attention net's ``state_in_i``), it is the last row's window moved
    on by one step. Otherwise (RLlib 1.11's layout: one window per
    ``batch_repeat_value`` rows) RLlib 1.11's rule applies.
    """
    windows, frames = batch[view_col], batch[data_col]
    # Observation index 0 already means "the latest obs" (after the action), hence -1.
    obs_shift = -1 if data_col in ("obs", "new_obs") else 0
    if len(windows) == len(frames) and req.shift_step == 1:
        newest = len(frames) + req.shift_to + obs_shift  # the value at shift_to of the next step
        window = np.asarray(windows[-1])
        value = frames[newest] if 0 <= newest < len(frames) else np.zeros_like(window[-1])
        return np.concatenate([window[1:], np.asarray(value, dtype=window.dtype)[None]])[None]
    window = windows[-1]
    missing_at_end = len(frames) % req.batch_repeat_value
    # RLlib 1.11: `frames[-missing_at_end:]`; for 0 that is ALL frames, which is what makes
    # the window end at the newest frame when batch_repeat_value == 1.
    tail = frames[-missing_at_end:]
    from_ = req.shift_from + obs_shift
    to_ = req.shift_to + obs_shift + 1
    return np.array([np.concatenate([window, tail])[from_ : (to_ if to_ != 0 else None)]])
