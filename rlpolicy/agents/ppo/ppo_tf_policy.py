"""PPO's TF policy (graph mode; ``PPOTFPolicy.as_eager()`` for tf2).

The loss, its config keys and the learner-stat names are those of
``PPOTorchPolicy``: -clipped surrogate + kl_coeff * KL + vf_loss_coeff *
clipped VF error - entropy_coeff * entropy, averaged over valid steps.
``KLCoeffMixin`` and ``ValueNetworkMixin`` are importable from here, as in
RLlib 1.11. The loss and its stats are ``PPOLossMixin``'s methods (the loss
terms are the policy's own attributes); the 1.11 module functions call them.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Type, Union

import gymnasium as gym

from rlpolicy.agents.ppo.ppo import DEFAULT_CONFIG, setup_config
from rlpolicy.evaluation.postprocessing import Postprocessing, compute_gae_for_sample_batch
from rlpolicy.models.action_dist import ActionDistribution
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.tf_mixins import (
    EntropyCoeffSchedule,
    KLCoeffMixin,
    LearningRateSchedule,
    ValueNetworkMixin,
)
from rlpolicy.policy.tf_policy_template import build_tf_policy
from rlpolicy.utils.framework import try_import_tf
from rlpolicy.utils.tf_utils import explained_variance
from rlpolicy.utils.typing import ModelGradients, TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()

# RLlib 1.11's name for the GAE postprocessing of PPO.
postprocess_ppo_gae = compute_gae_for_sample_batch


class PPOLossMixin:
    """PPO's loss and learner stats as the policy's own methods.

    ``ppo_loss`` keeps the loss terms on the policy under RLlib 1.11's names
    (``_total_loss``, ``_mean_policy_loss``, ``_mean_vf_loss``,
    ``_vf_explained_var``, ``_mean_kl_loss`` and its older name ``_mean_kl``,
    ``_mean_entropy``, ``_value_fn_out``), which ``loss_stats`` (and 1.x
    client stats functions) read. The module functions ``ppo_surrogate_loss``
    and ``kl_and_loss_stats`` call these methods unbound, so they also work on
    a policy class built without this mixin (as ``setup_mixins`` calls the
    other mixins' ``__init__``).
    """

    def ppo_loss(
        self, model: ModelV2, dist_class: Type[ActionDistribution], train_batch: SampleBatch
    ) -> TensorType:
        """-clipped surrogate + kl_coeff * KL + vf_loss_coeff * clipped VF error
        - entropy_coeff * entropy, averaged over valid steps."""
        config = self.config
        logits, state = model(train_batch)
        curr_dist = dist_class(logits, model)
        mean_valid = _mean_valid_fn(train_batch, state)

        prev_dist = dist_class(train_batch[SampleBatch.ACTION_DIST_INPUTS], model)
        ratio = tf.exp(
            curr_dist.logp(train_batch[SampleBatch.ACTIONS]) - train_batch[SampleBatch.ACTION_LOGP]
        )
        advantages = train_batch[Postprocessing.ADVANTAGES]
        clip = config["clip_param"]
        surrogate = tf.minimum(advantages * ratio, advantages * tf.clip_by_value(ratio, 1 - clip, 1 + clip))

        use_kl = config["kl_coeff"] > 0.0
        action_kl = prev_dist.kl(curr_dist) if use_kl else tf.constant(0.0)
        entropy = curr_dist.entropy()

        if config["use_critic"]:
            value_fn_out = model.value_function()
            vf_clipped = tf.clip_by_value(
                tf.math.square(value_fn_out - train_batch[Postprocessing.VALUE_TARGETS]),
                0,
                config["vf_clip_param"],
            )
            self._mean_vf_loss = mean_valid(vf_clipped)
            self._vf_explained_var = explained_variance(
                train_batch[Postprocessing.VALUE_TARGETS], value_fn_out
            )
        else:
            value_fn_out = vf_clipped = tf.constant(0.0)
            self._mean_vf_loss = self._vf_explained_var = value_fn_out

        total = mean_valid(
            -surrogate
            + self.kl_coeff * action_kl
            + config["vf_loss_coeff"] * vf_clipped
            - self.entropy_coeff * entropy
        )
        self._total_loss = total
        self._mean_policy_loss = mean_valid(-surrogate)
        self._mean_entropy = mean_valid(entropy)
        # RLlib 1.11 keeps the older name `_mean_kl` as well.
        self._mean_kl_loss = self._mean_kl = mean_valid(action_kl) if use_kl else action_kl
        self._value_fn_out = value_fn_out
        return total

    def loss_stats(self, train_batch: SampleBatch) -> Dict[str, TensorType]:
        """Learner stats of the last ``ppo_loss``, with PPOTorchPolicy's names."""
        return {
            "cur_kl_coeff": tf.cast(self.kl_coeff, tf.float64),
            "cur_lr": tf.cast(self.cur_lr, tf.float64),
            "total_loss": self._total_loss,
            "policy_loss": self._mean_policy_loss,
            "vf_loss": self._mean_vf_loss,
            "vf_explained_var": self._vf_explained_var,
            "kl": self._mean_kl_loss,
            "entropy": self._mean_entropy,
            "entropy_coeff": tf.cast(self.entropy_coeff, tf.float64),
        }


def ppo_surrogate_loss(
    policy: Policy, model: ModelV2, dist_class: Type[ActionDistribution], train_batch: SampleBatch
) -> Union[TensorType, List[TensorType]]:
    """PPO's loss (``PPOLossMixin.ppo_loss``); the loss terms are kept on the
    policy for ``kl_and_loss_stats``."""
    return PPOLossMixin.ppo_loss(policy, model, dist_class, train_batch)  # type: ignore[arg-type]


def _mean_valid_fn(train_batch: SampleBatch, state: list) -> Callable[[TensorType], TensorType]:
    """Mean over valid (unpadded) time steps for RNNs, plain mean otherwise."""
    if not state:
        return tf.reduce_mean
    seq_lens = train_batch[SampleBatch.SEQ_LENS]
    mask = tf.reshape(tf.sequence_mask(seq_lens, tf.reduce_max(seq_lens)), [-1])
    return lambda t: tf.reduce_mean(tf.boolean_mask(t, mask))


def kl_and_loss_stats(policy: Policy, train_batch: SampleBatch) -> Dict[str, TensorType]:
    """Learner stats (``PPOLossMixin.loss_stats``), with PPOTorchPolicy's names."""
    return PPOLossMixin.loss_stats(policy, train_batch)  # type: ignore[arg-type]


def vf_preds_fetches(policy: Policy) -> Dict[str, TensorType]:
    """Adds the value estimate of each step to the sampled batch."""
    return {SampleBatch.VF_PREDS: policy.model.value_function()}


def compute_and_clip_gradients(policy: Policy, optimizer: Any, loss: TensorType) -> ModelGradients:
    """Gradients of ``loss`` w.r.t. the model's trainable variables, clipped
    by global norm to ``config["grad_clip"]`` (if set; not in tower copies)."""
    variables = policy.model.trainable_variables()
    if hasattr(optimizer, "compute_gradients"):
        grads_and_vars = optimizer.compute_gradients(loss, variables)
    else:  # an eager optimizer that carries the loss' GradientTape
        grads_and_vars = list(zip(optimizer.tape.gradient(loss, variables), variables))
    # A tower copy leaves clipping to its tower stack, which clips the
    # averaged gradient (so towers step like one device).
    if not policy.config["grad_clip"] or getattr(policy, "_is_tower", False):
        return grads_and_vars
    grads = [g for g, _ in grads_and_vars]
    clipped, _ = tf.clip_by_global_norm(grads, policy.config["grad_clip"])
    return list(zip(clipped, [v for _, v in grads_and_vars]))


def setup_mixins(
    policy: Policy, obs_space: gym.Space, action_space: gym.Space, config: TrainerConfigDict
) -> None:
    ValueNetworkMixin.__init__(policy, obs_space, action_space, config)
    KLCoeffMixin.__init__(policy, config)
    EntropyCoeffSchedule.__init__(policy, config["entropy_coeff"], config["entropy_coeff_schedule"])
    LearningRateSchedule.__init__(policy, config["lr"], config["lr_schedule"])


# RLlib 1.11 passes compute_gradients_fn=compute_and_clip_gradients. Here both
# TF bases clip by config["grad_clip"] (global norm) themselves, and with
# towers they clip the averaged gradient; a hook clipping each eager tower
# slice would break "towers step like one device", so the bases do it.
PPOTFPolicy = build_tf_policy(
    name="PPOTFPolicy",
    loss_fn=ppo_surrogate_loss,
    get_default_config=lambda: DEFAULT_CONFIG,
    postprocess_fn=compute_gae_for_sample_batch,
    stats_fn=kl_and_loss_stats,
    extra_action_out_fn=vf_preds_fetches,
    before_init=setup_config,
    before_loss_init=setup_mixins,
    mixins=[PPOLossMixin, LearningRateSchedule, EntropyCoeffSchedule, KLCoeffMixin, ValueNetworkMixin],
)

__all__ = [
    "PPOTFPolicy",
    "PPOLossMixin",
    "KLCoeffMixin",
    "ValueNetworkMixin",
    "ppo_surrogate_loss",
    "kl_and_loss_stats",
    "vf_preds_fetches",
    "compute_and_clip_gradients",
    "setup_mixins",
    "setup_config",
    "postprocess_ppo_gae",
]
