"""PPO's torch policy: the clipped surrogate loss with value-function and KL terms."""

from __future__ import annotations

from typing import Dict, List, Type, Union

import gymnasium as gym

from rlpolicy.agents.ppo.ppo import DEFAULT_CONFIG, setup_config
from rlpolicy.evaluation.postprocessing import Postprocessing, compute_gae_for_sample_batch
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.torch.torch_action_dist import TorchDistributionWrapper
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.policy_template import build_policy_class
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.torch_mixins import (
    EntropyCoeffSchedule,
    KLCoeffMixin,
    LearningRateSchedule,
    ValueNetworkMixin,
)
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.torch_utils import apply_grad_clipping, explained_variance, sequence_mask
from rlpolicy.utils.typing import TensorType, TrainerConfigDict

torch, nn = try_import_torch()


def ppo_surrogate_loss(
    policy: Policy, model: ModelV2, dist_class: Type[TorchDistributionWrapper], train_batch: SampleBatch
) -> Union[TensorType, List[TensorType]]:
    """PPO's loss: -clipped surrogate + kl_coeff * KL + vf_coeff * clipped VF error - entropy bonus."""
    logits, state = model(train_batch)
    curr_dist = dist_class(logits, model)
    masked_mean = _masked_mean_fn(train_batch, logits, state, model)

    prev_dist = dist_class(train_batch[SampleBatch.ACTION_DIST_INPUTS], model)
    ratio = torch.exp(curr_dist.logp(train_batch[SampleBatch.ACTIONS]) - train_batch[SampleBatch.ACTION_LOGP])
    advantages = train_batch[Postprocessing.ADVANTAGES]
    clip = policy.config["clip_param"]
    surrogate = torch.min(advantages * ratio, advantages * torch.clamp(ratio, 1 - clip, 1 + clip))

    use_kl = policy.config["kl_coeff"] > 0.0
    action_kl = prev_dist.kl(curr_dist) if use_kl else torch.tensor(0.0, device=logits.device)
    entropy = curr_dist.entropy()

    if policy.config["use_critic"]:
        value_fn_out = model.value_function()  # computed once, also used for the stats
        vf_error = (value_fn_out - train_batch[Postprocessing.VALUE_TARGETS]) ** 2
        vf_clipped = torch.clamp(vf_error, 0, policy.config["vf_clip_param"])
    else:
        vf_clipped = torch.tensor(0.0, device=logits.device)

    total = masked_mean(
        -surrogate
        + policy.kl_coeff * action_kl
        + policy.config["vf_loss_coeff"] * vf_clipped
        - policy.entropy_coeff * entropy
    )

    # The stats are reported only: no autograd bookkeeping for them.
    with torch.no_grad():
        stats = model.tower_stats
        stats["total_loss"] = total
        stats["mean_policy_loss"] = masked_mean(-surrogate)
        stats["mean_vf_loss"] = masked_mean(vf_clipped) if policy.config["use_critic"] else vf_clipped
        stats["vf_explained_var"] = (
            explained_variance(train_batch[Postprocessing.VALUE_TARGETS], value_fn_out)
            if policy.config["use_critic"]
            else torch.tensor(0.0)
        )
        stats["mean_entropy"] = masked_mean(entropy)
        stats["mean_kl_loss"] = masked_mean(action_kl) if use_kl else action_kl
    return total


def _masked_mean_fn(train_batch: SampleBatch, logits: TensorType, state: list, model: ModelV2):
    """Mean over valid (unpadded) time steps for RNNs, plain mean otherwise."""
    if not state:
        return torch.mean
    seq_lens = train_batch[SampleBatch.SEQ_LENS]
    max_len = logits.shape[0] // len(seq_lens)
    mask = torch.reshape(sequence_mask(seq_lens, max_len, time_major=model.is_time_major()), [-1])
    num_valid = torch.sum(mask)
    return lambda t: torch.sum(t[mask]) / num_valid


def kl_and_loss_stats(policy: Policy, train_batch: SampleBatch) -> Dict[str, TensorType]:
    """Learner stats: tower means of the loss terms, plus the current coefficients."""
    # (stat, tower_stats key): the tower means are turned into python floats
    # with a single conversion (one device sync) rather than one per stat.
    means = [
        ("total_loss", "total_loss"),
        ("policy_loss", "mean_policy_loss"),
        ("vf_loss", "mean_vf_loss"),
        ("vf_explained_var", "vf_explained_var"),
        ("kl", "mean_kl_loss"),
        ("entropy", "mean_entropy"),
    ]
    with torch.no_grad():
        scalars = _single_tower_scalars(policy, [key for _, key in means])
        if scalars is None:
            scalars = [_tower_mean(policy, key).detach() for _, key in means]
        values = torch.stack(scalars).tolist()
    return {
        "cur_kl_coeff": policy.kl_coeff,
        "cur_lr": policy.cur_lr,
        **{name: v for (name, _), v in zip(means, values)},
        "entropy_coeff": policy.entropy_coeff,
    }


def _tower_mean(policy: Policy, name: str) -> TensorType:
    values = [torch.as_tensor(v, dtype=torch.float32).to(policy.device) for v in policy.get_tower_stats(name)]
    if len(values) == 1 and values[0].dim() == 0:
        return values[0]  # the mean of one scalar is that scalar
    return torch.mean(torch.stack(values))


def _single_tower_scalars(policy: Policy, keys: List[str]):
    """The stats themselves when one tower holds them all as 0-D float32
    tensors on the policy's device (their tower mean), else None."""
    towers = getattr(policy, "model_gpu_towers", None)
    if not towers or len(towers) != 1:
        return None
    stats = towers[0].tower_stats
    out = []
    for key in keys:
        v = stats.get(key)
        if (
            not isinstance(v, torch.Tensor)
            or v.dim() != 0
            or v.dtype != torch.float32
            or v.device != policy.device
        ):
            return None
        out.append(v.detach())
    return out


def vf_preds_fetches(
    policy: Policy, input_dict, state_batches, model: ModelV2, action_dist
) -> Dict[str, TensorType]:
    """Adds the value estimate of each step to the sampled batch."""
    return {SampleBatch.VF_PREDS: model.value_function()}


def setup_mixins(
    policy: Policy, obs_space: gym.Space, action_space: gym.Space, config: TrainerConfigDict
) -> None:
    ValueNetworkMixin.__init__(policy, config)
    KLCoeffMixin.__init__(policy, config)
    EntropyCoeffSchedule.__init__(policy, config["entropy_coeff"], config["entropy_coeff_schedule"])
    LearningRateSchedule.__init__(policy, config["lr"], config["lr_schedule"])


PPOTorchPolicy = build_policy_class(
    name="PPOTorchPolicy",
    framework="torch",
    get_default_config=lambda: DEFAULT_CONFIG,
    loss_fn=ppo_surrogate_loss,
    stats_fn=kl_and_loss_stats,
    extra_action_out_fn=vf_preds_fetches,
    postprocess_fn=compute_gae_for_sample_batch,
    extra_grad_process_fn=apply_grad_clipping,
    before_init=setup_config,
    before_loss_init=setup_mixins,
    mixins=[LearningRateSchedule, EntropyCoeffSchedule, KLCoeffMixin, ValueNetworkMixin],
)
