"""PG's TF policy (graph mode; ``PGTFPolicy.as_eager()`` for tf2): loss = -mean(log pi(a|s) * advantage)."""

from __future__ import annotations

from typing import Dict, Type

from rlpolicy.agents.pg.pg import DEFAULT_CONFIG
from rlpolicy.agents.pg.utils import post_process_advantages
from rlpolicy.evaluation.postprocessing import Postprocessing
from rlpolicy.models.action_dist import ActionDistribution
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.tf_policy_template import build_tf_policy
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.typing import TensorType

tf1, tf, tfv = try_import_tf()


def pg_tf_loss(
    policy: Policy, model: ModelV2, dist_class: Type[ActionDistribution], train_batch: SampleBatch
) -> TensorType:
    """The REINFORCE loss; kept as ``policy.policy_loss`` for ``pg_loss_stats``."""
    logits, _ = model(train_batch)
    dist = dist_class(logits, model)
    advantages = tf.cast(train_batch[Postprocessing.ADVANTAGES], tf.float32)
    loss = -tf.reduce_mean(dist.logp(train_batch[SampleBatch.ACTIONS]) * advantages)
    policy.policy_loss = loss
    return loss


def pg_loss_stats(policy: Policy, train_batch: SampleBatch) -> Dict[str, TensorType]:
    """Learner stats: the loss (same name as PGTorchPolicy's)."""
    return {"policy_loss": policy.policy_loss}


PGTFPolicy = build_tf_policy(
    name="PGTFPolicy",
    get_default_config=lambda: DEFAULT_CONFIG,
    postprocess_fn=post_process_advantages,
    stats_fn=pg_loss_stats,
    loss_fn=pg_tf_loss,
)
