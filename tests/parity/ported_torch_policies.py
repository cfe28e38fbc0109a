"""1.x-style torch policy modules, as RLlib 1.x algorithm code writes them, ported by
replacing ``ray.rllib`` with ``rlpolicy`` (and nothing else).

- ``PPOLikeTorchPolicy``: a PPO-style ``build_policy_class`` policy whose mixins come from
  ``policy.torch_policy`` (RLlib 1.11's home of ``LearningRateSchedule`` and
  ``EntropyCoeffSchedule``), set up in ``before_loss_init`` as 1.x PPO does.
- ``PGLikeTorchPolicy``: a policy built with the deprecated ``build_torch_policy``.
- ``CQLStyleTorchPolicy``: a ``compute_gradients_fn`` that steps its own optimizer and
  converts its stats with ``policy._convert_to_numpy`` (RLlib 1.11's CQL does this).
"""

import gymnasium as gym
import numpy as np

from rlpolicy.agents.ppo import DEFAULT_CONFIG as PPO_DEFAULT_CONFIG
from rlpolicy.evaluation.postprocessing import (
    Postprocessing,
    compute_advantages,
    compute_gae_for_sample_batch,
)
from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.policy.policy_template import build_policy_class
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.torch_mixins import ValueNetworkMixin
from rlpolicy.policy.torch_policy import EntropyCoeffSchedule, LearningRateSchedule, TorchPolicy
from rlpolicy.policy.torch_policy_template import build_torch_policy
from rlpolicy.utils.annotations import override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY
from rlpolicy.utils.torch_utils import apply_grad_clipping

torch, nn = try_import_torch()

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)


# ---------------------------------------------------------------- PPO-like


def ppo_like_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    curr_dist = dist_class(logits, model)
    logp_ratio = torch.exp(
        curr_dist.logp(train_batch[SampleBatch.ACTIONS]) - train_batch[SampleBatch.ACTION_LOGP]
    )
    advantages = train_batch[Postprocessing.ADVANTAGES]
    clip = policy.config["clip_param"]
    surrogate = torch.min(advantages * logp_ratio, advantages * torch.clamp(logp_ratio, 1 - clip, 1 + clip))
    vf_loss = torch.pow(model.value_function() - train_batch[Postprocessing.VALUE_TARGETS], 2.0)
    entropy = curr_dist.entropy()
    total = (
        -surrogate.mean()
        + policy.config["vf_loss_coeff"] * vf_loss.mean()
        - policy.entropy_coeff * entropy.mean()
    )
    model.tower_stats["total_loss"] = total
    model.tower_stats["mean_entropy"] = entropy.mean()
    return total


def ppo_like_stats(policy, train_batch):
    return {
        "cur_lr": policy.cur_lr,
        "entropy_coeff": policy.entropy_coeff,
        "total_loss": torch.mean(torch.stack(policy.get_tower_stats("total_loss"))),
        "entropy": torch.mean(torch.stack(policy.get_tower_stats("mean_entropy"))),
    }


def vf_preds_fetches(policy, input_dict, state_batches, model, action_dist):
    return {SampleBatch.VF_PREDS: model.value_function()}


def setup_mixins(policy, obs_space, action_space, config):
    ValueNetworkMixin.__init__(policy, config)
    EntropyCoeffSchedule.__init__(policy, config["entropy_coeff"], config["entropy_coeff_schedule"])
    LearningRateSchedule.__init__(policy, config["lr"], config["lr_schedule"])


PPOLikeTorchPolicy = build_policy_class(
    name="PPOLikeTorchPolicy",
    framework="torch",
    get_default_config=lambda: PPO_DEFAULT_CONFIG,
    loss_fn=ppo_like_loss,
    stats_fn=ppo_like_stats,
    extra_action_out_fn=vf_preds_fetches,
    postprocess_fn=compute_gae_for_sample_batch,
    extra_grad_process_fn=apply_grad_clipping,
    before_loss_init=setup_mixins,
    mixins=[LearningRateSchedule, EntropyCoeffSchedule, ValueNetworkMixin],
)


# ---------------------------------------------------------------- a custom model


class LinearLogitsModel(TorchModelV2, nn.Module):
    """logits = W obs + b (no hidden layer), value 0: gradients are easy to work out by hand."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.logits = nn.Linear(int(np.prod(obs_space.shape)), num_outputs)
        self._batch = 0

    @override(TorchModelV2)
    def forward(self, input_dict, state, seq_lens):
        obs = input_dict["obs_flat"].float()
        self._batch = obs.shape[0]
        return self.logits(obs), state

    @override(TorchModelV2)
    def value_function(self):
        return torch.zeros(self._batch)


ModelCatalog.register_custom_model("ported_linear_logits", LinearLogitsModel)


# ---------------------------------------------------------------- build_torch_policy user


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    return -torch.mean(logp * train_batch[Postprocessing.ADVANTAGES])


def post_process_advantages(policy, sample_batch, other_agent_batches=None, episode=None):
    return compute_advantages(sample_batch, 0.0, policy.config["gamma"], use_gae=False, use_critic=False)


def sgd_optimizer(policy, config):
    return torch.optim.SGD(policy.model.parameters(), lr=config["lr"])


def make_pg_like_policy_class():
    """Builds the class (``build_torch_policy`` warns at each call, so tests call this)."""
    return build_torch_policy(
        name="PGLikeTorchPolicy",
        loss_fn=pg_loss,
        optimizer_fn=sgd_optimizer,
        postprocess_fn=post_process_advantages,
    )


# ---------------------------------------------------------------- CQL-style gradients


def cql_style_loss(policy, model, dist_class, train_batch):
    loss = pg_loss(policy, model, dist_class, train_batch)
    policy.last_loss = loss.detach()
    # Like CQL, the loss steps its own optimizer on a real train batch (not on the
    # dummy batch of loss initialisation); compute_gradients_fn returns no grads.
    if train_batch.count == policy.config["train_batch_size"]:
        optim = policy._optimizers[0]
        optim.zero_grad()
        loss.backward()
        optim.step()
    return loss


def cql_style_stats(policy, train_batch):
    return {
        "loss": policy.last_loss,
        "weight": policy.model.logits.weight.detach().clone(),
        "batch_size": torch.tensor(train_batch.count),
    }


def cql_style_compute_gradients_fn(policy, postprocessed_batch):
    batch = policy._lazy_tensor_dict(postprocessed_batch)
    policy._loss(policy, policy.model, policy.dist_class, batch)
    stats = {LEARNER_STATS_KEY: policy._convert_to_numpy(cql_style_stats(policy, batch))}
    return [None, stats]


def cql_style_apply_gradients_fn(policy, gradients):
    return


CQLStyleTorchPolicy = build_policy_class(
    name="CQLStyleTorchPolicy",
    framework="torch",
    loss_fn=cql_style_loss,
    stats_fn=cql_style_stats,
    optimizer_fn=sgd_optimizer,
    postprocess_fn=post_process_advantages,
    compute_gradients_fn=cql_style_compute_gradients_fn,
    apply_gradients_fn=cql_style_apply_gradients_fn,
)


__all__ = [
    "PPOLikeTorchPolicy",
    "CQLStyleTorchPolicy",
    "LinearLogitsModel",
    "make_pg_like_policy_class",
    "OBS_SPACE",
    "ACTION_SPACE",
    "TorchPolicy",
]
