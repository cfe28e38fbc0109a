"""PG's torch policy: loss = -mean(log pi(a|s) * advantage)."""

from __future__ import annotations

from typing import Dict, Type

from rlpolicy.agents.pg.pg import DEFAULT_CONFIG
from rlpolicy.agents.pg.utils import post_process_advantages
from rlpolicy.evaluation.postprocessing import Postprocessing
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.torch.torch_action_dist import TorchDistributionWrapper
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.policy_template import build_policy_class
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType

torch, _ = try_import_torch()


def pg_torch_loss(
    policy: Policy, model: ModelV2, dist_class: Type[TorchDistributionWrapper], train_batch: SampleBatch
) -> TensorType:
    """The REINFORCE loss, its value kept in the tower stats for ``stats_fn``."""
    logits, _ = model(train_batch)
    dist = dist_class(logits, model)
    logp = dist.logp(train_batch[SampleBatch.ACTIONS])
    loss = -torch.mean(logp * train_batch[Postprocessing.ADVANTAGES])
    model.tower_stats["policy_loss"] = loss
    return loss


def pg_loss_stats(policy: Policy, train_batch: SampleBatch) -> Dict[str, TensorType]:
    return {"policy_loss": torch.mean(torch.stack(policy.get_tower_stats("policy_loss")))}


PGTorchPolicy = build_policy_class(
    name="PGTorchPolicy",
    framework="torch",
    get_default_config=lambda: DEFAULT_CONFIG,
    loss_fn=pg_torch_loss,
    stats_fn=pg_loss_stats,
    postprocess_fn=post_process_advantages,
)
