"""Trajectory postprocessing: discounted returns, GAE advantages, n-step rewards
(RLlib 1.11's ``ray.rllib.evaluation.postprocessing``).

Pure numpy; scipy is not needed (``discount_cumsum`` is a reverse recursion).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.numpy import convert_to_numpy
from rlpolicy.utils.typing import AgentID


@DeveloperAPI
class Postprocessing:
    """Names of the columns added by postprocessing."""

    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"


def discount_cumsum(x: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted cumulative sums along axis 0: ``y[t] = sum_{k>=0} gamma^k x[t+k]``.

    Computed by the reverse recursion ``y[t] = x[t] + gamma * y[t+1]``.

    Args:
        x: Array of shape ``[T, ...]``.
        gamma: Discount factor.

    Returns:
        float64 array of the same shape as ``x``.

    Examples:
        >>> discount_cumsum(np.array([1.0, 2.0, 3.0]), 0.5)
        array([2.75, 3.5 , 3.  ])
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:  # the same float64 arithmetic on Python floats (no per-step numpy calls)
        values, running, g = [], 0.0, float(gamma)
        for v in reversed(x.tolist()):
            running = v + g * running
            values.append(running)
        return np.array(values[::-1], dtype=np.float64)
    out = np.empty_like(x)
    running = np.zeros_like(x[0]) if len(x) else 0.0
    for t in range(len(x) - 1, -1, -1):
        running = x[t] + gamma * running
        out[t] = running
    return out


def _last_r_array(last_r: Any) -> np.ndarray:
    if type(last_r) is float:  # (a terminated trajectory's 0.0)
        return np.array([last_r])
    arr = np.asarray(convert_to_numpy(last_r), dtype=np.float64).reshape(-1)
    if arr.size != 1:
        raise ValueError(
            f"compute_advantages: last_r must be one number (the value of the state "
            f"after the trajectory), got shape {np.shape(last_r)}"
        )
    return arr


def compute_advantages(
    rollout: SampleBatch,
    last_r: float,
    gamma: float = 0.9,
    lambda_: float = 1.0,
    use_gae: bool = True,
    use_critic: bool = True,
) -> SampleBatch:
    """Adds ``advantages`` and ``value_targets`` columns to a single trajectory.

    With ``use_gae``: ``delta_t = r_t + gamma V_{t+1} - V_t`` (``V_T = last_r``),
    ``advantages = discount_cumsum(delta, gamma * lambda_)`` and
    ``value_targets = advantages + V``. Without GAE: the discounted returns
    ``G_t`` of ``rewards + [last_r]``; ``advantages = G - V`` and
    ``value_targets = G`` with a critic, or ``advantages = G`` and zero
    value targets without one.

    Args:
        rollout: One trajectory (``rewards``, and ``vf_preds`` if a critic is used).
            Changed in place and returned.
        last_r: Value estimate of the state after the last step (0.0 if the
            episode terminated there).
        gamma: Discount factor.
        lambda_: GAE lambda.
        use_gae: Use generalized advantage estimation (needs a critic).
        use_critic: Whether ``vf_preds`` are used as a baseline.

    Returns:
        ``rollout`` with the two new float32 columns.

    Raises:
        ValueError: If ``use_critic`` is set but ``vf_preds`` are missing, or
            ``use_gae`` is set without ``use_critic``.
    """
    if use_critic and SampleBatch.VF_PREDS not in rollout:
        raise ValueError(
            f"compute_advantages: use_critic=True but the batch has no "
            f"{SampleBatch.VF_PREDS!r} column (columns: {sorted(rollout.keys())})"
        )
    if use_gae and not use_critic:
        raise ValueError(
            "compute_advantages: use_gae=True needs a value function; set use_critic=True or use_gae=False"
        )
    rewards = np.asarray(rollout[SampleBatch.REWARDS], dtype=np.float64)
    last = _last_r_array(last_r)
    if use_gae:
        vf_preds = np.asarray(rollout[SampleBatch.VF_PREDS], dtype=np.float64)
        vpred_t = np.concatenate([vf_preds, last])
        delta_t = rewards + gamma * vpred_t[1:] - vpred_t[:-1]
        advantages = discount_cumsum(delta_t, gamma * lambda_)
        value_targets = advantages + vf_preds
    else:
        returns = discount_cumsum(np.concatenate([rewards, last]), gamma)[:-1]
        if use_critic:
            advantages = returns - np.asarray(rollout[SampleBatch.VF_PREDS], dtype=np.float64)
            value_targets = returns
        else:
            advantages = returns
            value_targets = np.zeros_like(returns)
    rollout[Postprocessing.ADVANTAGES] = advantages.astype(np.float32)
    rollout[Postprocessing.VALUE_TARGETS] = value_targets.astype(np.float32)
    return rollout


def _episode_terminated(sample_batch: SampleBatch) -> bool:
    """Whether the trajectory ends in a terminal state (so the bootstrap value is 0).

    gymnasium separates termination from truncation: a truncated episode
    (time limit) still gets bootstrapped. Old-style batches only have ``dones``.
    """
    if SampleBatch.TERMINATEDS in sample_batch:
        return bool(np.asarray(sample_batch[SampleBatch.TERMINATEDS])[-1])
    return bool(np.asarray(sample_batch[SampleBatch.DONES])[-1])


def compute_gae_for_sample_batch(
    policy: Any,
    sample_batch: SampleBatch,
    other_agent_batches: Optional[Dict[AgentID, Tuple[Any, SampleBatch]]] = None,
    episode: Optional[Any] = None,
) -> SampleBatch:
    """Adds GAE (or Monte-Carlo) advantages to a trajectory, bootstrapping if needed.

    If the trajectory ended in a terminal state, ``last_r = 0``. Otherwise
    (cut off by the rollout fragment length, or truncated by a time limit)
    ``last_r = policy._value(**input_dict)`` with the one-step input dict of
    the state after the last step
    (``sample_batch.get_single_step_input_dict(policy.model.view_requirements, index="last")``).
    Then :func:`compute_advantages` runs with ``policy.config``'s ``gamma``,
    ``lambda``, ``use_gae`` and ``use_critic`` (default True).

    Args:
        policy: The policy (needs ``config``, and ``_value`` and
            ``model.view_requirements`` for unfinished trajectories).
        sample_batch: One trajectory of one agent; changed in place.
        other_agent_batches: Other agents' batches (unused).
        episode: The episode (unused).

    Returns:
        The postprocessed batch.
    """
    if _episode_terminated(sample_batch):
        last_r = 0.0
    else:
        input_dict = sample_batch.get_single_step_input_dict(policy.model.view_requirements, index="last")
        last_r = policy._value(**input_dict)
    config = policy.config
    return compute_advantages(
        sample_batch,
        last_r,
        config["gamma"],
        config["lambda"],
        use_gae=config["use_gae"],
        use_critic=config.get("use_critic", True),
    )


def _shift_done_column(batch: SampleBatch, key: str, n_step: int, len_: int) -> None:
    col = np.asarray(batch[key])
    batch[key] = np.concatenate([col[n_step - 1 :], np.tile(col[-1], min(n_step - 1, len_))], axis=0)


class MidTrajectoryDoneError(ValueError, AssertionError):
    """``adjust_nstep`` got a trajectory with a done flag before its last step.

    RLlib 1.11 asserts (``AssertionError``); this is both that and a ``ValueError``,
    so callers catching either keep working.
    """


def adjust_nstep(n_step: int, gamma: float, batch: SampleBatch) -> None:
    """Rewrites a trajectory in place for n-step TD targets.

    ``rewards[i]`` becomes ``sum_{j<n_step, i+j<len} gamma^j rewards[i+j]``,
    ``new_obs[i]`` becomes ``obs[i+n_step]`` (the last ``new_obs`` past the
    end) and the done flags are shifted by ``n_step - 1`` (repeating the
    last one).

    Args:
        n_step: Number of steps to look ahead (>= 1).
        gamma: Discount factor.
        batch: One trajectory; a done flag may only be set at its last step.

    Raises:
        ValueError: If ``n_step < 1``.
        MidTrajectoryDoneError: (a ValueError and an AssertionError, as RLlib 1.11
            asserts) If a done flag is set before the last step.
    """
    if n_step < 1:
        raise ValueError(f"adjust_nstep: n_step must be >= 1, got {n_step}")
    dones = np.asarray(batch[SampleBatch.DONES])
    if np.any(dones[:-1]):
        raise MidTrajectoryDoneError(
            f"adjust_nstep: Unexpected done in middle of trajectory "
            f"(at index {int(np.argmax(dones[:-1]))} of {len(dones)}); pass one episode's steps"
        )
    len_ = len(batch)
    obs, next_obs = batch[SampleBatch.OBS], batch[SampleBatch.NEXT_OBS]
    batch[SampleBatch.NEXT_OBS] = np.concatenate(
        [obs[n_step:], np.stack([next_obs[-1]] * min(n_step, len_))], axis=0
    )
    for key in (SampleBatch.DONES, SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS):
        if dict.__contains__(batch, key):
            _shift_done_column(batch, key, n_step, len_)
    rewards = batch[SampleBatch.REWARDS]
    original = np.array(rewards, dtype=np.float64)
    summed = np.zeros(len_, dtype=np.float64)
    for j in range(n_step):
        summed[: max(len_ - j, 0)] += gamma**j * original[j:]
    # In place, as RLlib: callers may hold a reference to the rewards array.
    rewards[:] = summed.astype(rewards.dtype)


__all__ = [
    "MidTrajectoryDoneError",
    "Postprocessing",
    "adjust_nstep",
    "compute_advantages",
    "compute_gae_for_sample_batch",
    "discount_cumsum",
]
