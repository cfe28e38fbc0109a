"""Action-distribution steps of ``TorchPolicy``: distribution inputs and log-likelihoods.

Only imported by torch modules; torch is looked up through ``try_import_torch``.
"""
from __future__ import annotations

import functools
from typing import Any, List, Optional, Tuple

import numpy as np

from rlpolicy._core.action_dist_fn import resolve_action_distribution_fn
from rlpolicy._core.torch_convert import (
    NoGrad,
    action_outputs_to_numpy,
    set_training,
    to_numpy_fast,
)
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.torch_utils import convert_to_torch_tensor

torch, _ = try_import_torch()

# The flags of ``SampleBatch({"obs": ..., "is_training": False})``.
_ACTING_FLAGS = {"_is_training": False, "_time_major": None, "_zero_padded": False,
                 "_max_seq_len": None}


def acting_batch(policy: Any, obs_batch: Any, prev_action_batch: Any,
                 prev_reward_batch: Any) -> SampleBatch:
    """``compute_actions``' input dict: the observations (and previous actions
    and rewards, if given) in a SampleBatch that hands out tensors on the
    policy's device. A numpy observation batch skips the constructor's checks
    (one column: nothing to check)."""
    if type(obs_batch) is np.ndarray and obs_batch.ndim > 0:
        batch = SampleBatch._trusted({SampleBatch.CUR_OBS: obs_batch}, len(obs_batch),
                                     _ACTING_FLAGS)
    else:
        batch = SampleBatch({SampleBatch.CUR_OBS: obs_batch, "is_training": False})
    if prev_action_batch is not None:
        batch[SampleBatch.PREV_ACTIONS] = np.asarray(prev_action_batch)
    if prev_reward_batch is not None:
        batch[SampleBatch.PREV_REWARDS] = np.asarray(prev_reward_batch)
    return policy._lazy_tensor_dict(batch)


def act(policy: Any, input_dict: SampleBatch, state_batches: List[Any], seq_lens: Any,
        explore: Optional[bool], timestep: Optional[int]) -> tuple:
    """Forward pass, sampling and exploration of ``TorchPolicy``'s two compute
    paths (the caller holds the policy's lock and has autograd off).

    Returns:
        ``(actions, state_outs, extra_fetches)`` as numpy structures.
    """
    explore = explore if explore is not None else policy.config["explore"]
    timestep = timestep if timestep is not None else policy.global_timestep
    policy._is_recurrent = bool(state_batches)
    model = policy.model
    if model is not None and model.training:
        set_training(model, False)
    if policy.action_sampler_fn:
        action_dist = dist_inputs = None
        outs = policy.action_sampler_fn(policy, model, input_dict, state_batches,
                                        explore=explore, timestep=timestep)
        if len(outs) == 4:
            actions, logp, dist_inputs, state_out = outs
        else:
            actions, logp, state_out = outs
    else:
        exploration = policy.exploration
        exploration.before_compute_actions(explore=explore, timestep=timestep)
        dist_inputs, dist_class, state_out = compute_dist_inputs(
            policy, input_dict, state_batches, seq_lens, explore, timestep)
        action_dist = dist_class(dist_inputs, model)
        actions, logp = exploration.get_exploration_action(
            action_distribution=action_dist, timestep=timestep, explore=explore)
    input_dict[SampleBatch.ACTIONS] = actions
    extra_fetches = policy.extra_action_out(input_dict, state_batches, model, action_dist)
    if dist_inputs is not None:
        extra_fetches[SampleBatch.ACTION_DIST_INPUTS] = dist_inputs
    if logp is not None:
        extra_fetches[SampleBatch.ACTION_PROB] = torch.exp(
            logp if logp.dtype == torch.float32 else logp.float())
        extra_fetches[SampleBatch.ACTION_LOGP] = logp
    obs = input_dict[SampleBatch.CUR_OBS]
    policy.global_timestep += (obs.shape[0] if type(obs) is torch.Tensor and obs.dim() > 0
                               else len(obs))
    return action_outputs_to_numpy(actions, state_out, extra_fetches)


def compute_dist_inputs(policy: Any, input_dict: Any, state_batches: List[Any], seq_lens: Any,
                explore: Optional[bool], timestep: Optional[int],
                is_training: bool = False) -> Tuple[Any, Any, List[Any]]:
    """Distribution inputs, class and state-outs of ``policy.model`` (or of the
    policy's ``action_distribution_fn``), checking the class once per class."""
    if not policy.action_distribution_fn:
        inputs, state_out = policy.model(input_dict, state_batches, seq_lens)
        dist_class = policy.dist_class
    else:
        # Which of RLlib's two signatures: decided from the function's signature.
        call = resolve_action_distribution_fn(policy.action_distribution_fn)
        inputs, dist_class, state_out = call(
            policy, policy.model, input_dict, state_batches=state_batches, seq_lens=seq_lens,
            explore=explore, timestep=timestep, is_training=is_training)
    if dist_class is not policy._checked_dist_class:
        check_dist_class(dist_class)
        policy._checked_dist_class = dist_class
    return inputs, dist_class, state_out


def check_dist_class(dist_class: Any) -> None:
    """Raises ValueError unless ``dist_class`` is a TorchDistributionWrapper
    subclass (or a ``functools.partial`` of one), as RLlib 1.11 requires."""
    from rlpolicy.models.torch.torch_action_dist import TorchDistributionWrapper

    if isinstance(dist_class, functools.partial) or (
            isinstance(dist_class, type) and issubclass(dist_class, TorchDistributionWrapper)):
        return
    raise ValueError(
        f"`dist_class` ({getattr(dist_class, '__name__', dist_class)}) not a "
        "TorchDistributionWrapper subclass! Make sure your `action_distribution_fn` or "
        "`make_model_and_action_dist` return a correct distribution class.")


def log_likelihoods(policy: Any, actions: Any, obs_batch: Any, state_batches: Optional[List[Any]],
                    prev_action_batch: Any, prev_reward_batch: Any,
                    actions_normalized: bool) -> Any:
    """``TorchPolicy.compute_log_likelihoods``' body (the caller holds the lock)."""
    if policy.action_sampler_fn and policy.action_distribution_fn is None:
        raise ValueError("Cannot compute log-prob/likelihood w/o an "
                         "`action_distribution_fn` and a provided `action_sampler_fn`!")
    if not actions_normalized and policy.config["normalize_actions"]:
        # Normalize on the numpy side (before the tensors are made).
        from rlpolicy.utils.spaces.space_utils import normalize_action

        actions = normalize_action(to_numpy_fast(actions) if torch.is_tensor(actions)
                                   else np.asarray(actions), policy.action_space_struct)
    with NoGrad():
        input_dict = policy._lazy_tensor_dict(
            {SampleBatch.CUR_OBS: obs_batch, SampleBatch.ACTIONS: actions})
        if prev_action_batch is not None:
            input_dict[SampleBatch.PREV_ACTIONS] = prev_action_batch
        if prev_reward_batch is not None:
            input_dict[SampleBatch.PREV_REWARDS] = prev_reward_batch
        seq_lens = torch.ones(len(obs_batch), dtype=torch.int32)
        state_batches = [convert_to_torch_tensor(s, policy.device)
                         for s in (state_batches or [])]
        policy.exploration.before_compute_actions(explore=False)
        inputs, dist_class, _ = compute_dist_inputs(policy, input_dict, state_batches, seq_lens,
                                            explore=False, timestep=None)
        action_dist = dist_class(inputs, policy.model)
        return action_dist.logp(input_dict[SampleBatch.ACTIONS])
