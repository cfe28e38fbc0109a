"""DQN's TF policy (RLlib 1.11's ``ray.rllib.agents.dqn.dqn_tf_policy``).

Graph mode (``framework="tf"``) via ``build_tf_policy``; ``DQNTFPolicy.as_eager()``
is the tf2 version. Same algorithm as ``DQNTorchPolicy``: target network,
double Q, dueling, noisy nets, n-step, C51, Huber loss with importance
weights, and ``td_error`` in the learn results. As in RLlib, TF clips each
gradient by its own norm (``grad_clip``), where torch clips the global norm.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym

from rlpolicy.agents.dqn.distributional_q_tf_model import DistributionalQTFModel
from rlpolicy.agents.dqn.dqn_common import (  # noqa: F401  (re-exported at RLlib's path)
    PRIO_WEIGHTS,
    Q_SCOPE,
    Q_TARGET_SCOPE,
    check_dqn_action_space,
    check_num_atoms,
    postprocess_nstep_and_prio,
    q_model_kwargs,
    q_model_num_outputs,
    terminal_flags,
    uses_parameter_noise,
)
from rlpolicy.agents.dqn.dqn_config import DEFAULT_CONFIG
from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.tf.tf_action_dist import Categorical
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.tf_mixins import LearningRateSchedule, TargetNetworkMixin
from rlpolicy.policy.tf_policy_template import build_tf_policy
from rlpolicy.utils.framework import get_keras, try_import_tf
from rlpolicy.utils.tf_utils import huber_loss, make_tf_callable, minimize_and_clip, reduce_mean_ignore_inf
from rlpolicy.utils.typing import TensorType, TrainerConfigDict

tf1, tf, tfv = try_import_tf()


class QLoss:
    """The Q-learning loss of one batch (RLlib 1.11's TF ``QLoss``); see the torch QLoss."""

    def __init__(
        self,
        q_t_selected: TensorType,
        q_logits_t_selected: TensorType,
        q_tp1_best: TensorType,
        q_dist_tp1_best: TensorType,
        importance_weights: TensorType,
        rewards: TensorType,
        done_mask: TensorType,
        gamma: float = 0.99,
        n_step: int = 1,
        num_atoms: int = 1,
        v_min: float = -10.0,
        v_max: float = 10.0,
    ):
        discount = gamma**n_step
        weights = tf.cast(importance_weights, tf.float32)
        rewards = tf.cast(rewards, tf.float32)
        if num_atoms > 1:
            z = v_min + tf.range(num_atoms, dtype=tf.float32) * (v_max - v_min) / float(num_atoms - 1)
            r_tau = tf.expand_dims(rewards, -1) + discount * tf.expand_dims(
                1.0 - done_mask, -1
            ) * tf.expand_dims(z, 0)
            m = project_distribution(r_tau, q_dist_tp1_best, v_min, v_max, num_atoms)
            self.td_error = tf.nn.softmax_cross_entropy_with_logits(
                labels=tf.stop_gradient(m), logits=q_logits_t_selected
            )
            self.loss = tf.reduce_mean(self.td_error * weights)
            self.stats = {"mean_td_error": tf.reduce_mean(self.td_error)}
            return
        target = rewards + discount * (1.0 - done_mask) * q_tp1_best
        self.td_error = q_t_selected - tf.stop_gradient(target)
        self.loss = tf.reduce_mean(weights * huber_loss(self.td_error))
        self.stats = {
            "mean_q": tf.reduce_mean(q_t_selected),
            "min_q": tf.reduce_min(q_t_selected),
            "max_q": tf.reduce_max(q_t_selected),
            "mean_td_error": tf.reduce_mean(self.td_error),
        }


def project_distribution(
    r_tau: TensorType, probs: TensorType, v_min: float, v_max: float, num_atoms: int
) -> TensorType:
    """C51 projection of atoms ``r_tau`` with masses ``probs`` onto the fixed support."""
    r_tau = tf.clip_by_value(r_tau, v_min, v_max)
    b = (r_tau - v_min) / ((v_max - v_min) / float(num_atoms - 1))
    lb, ub = tf.floor(b), tf.math.ceil(b)
    on_atom = tf.cast(ub - lb < 0.5, tf.float32)
    l_project = tf.one_hot(tf.cast(lb, tf.int32), num_atoms)  # [B, N(src), N(dst)]
    u_project = tf.one_hot(tf.cast(ub, tf.int32), num_atoms)
    ml = tf.reduce_sum(l_project * tf.expand_dims(probs * (ub - b + on_atom), -1), axis=1)
    mu = tf.reduce_sum(u_project * tf.expand_dims(probs * (b - lb), -1), axis=1)
    return ml + mu


def build_q_model(
    policy: Policy, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> ModelV2:
    """Builds ``policy.q_model`` (returned) and ``policy.target_model``.

    Raises:
        UnsupportedSpaceException: For a non-Discrete action space.
        ValueError: For bad ``num_atoms`` / ``v_min`` / ``v_max``.
    """
    check_dqn_action_space(action_space, "DQN")
    check_num_atoms(config)
    num_outputs = q_model_num_outputs(config, action_space)
    kwargs = q_model_kwargs(config, uses_parameter_noise(policy, config))
    framework = "tf" if config["framework"] == "tf" else "tf2"
    policy.q_model = ModelCatalog.get_model_v2(
        obs_space=obs_space,
        action_space=action_space,
        num_outputs=num_outputs,
        model_config=config["model"],
        framework=framework,
        model_interface=DistributionalQTFModel,
        name=Q_SCOPE,
        **kwargs,
    )
    policy.target_model = ModelCatalog.get_model_v2(
        obs_space=obs_space,
        action_space=action_space,
        num_outputs=num_outputs,
        model_config=config["model"],
        framework=framework,
        model_interface=DistributionalQTFModel,
        name=Q_TARGET_SCOPE,
        **kwargs,
    )
    return policy.q_model


def compute_q_values(
    policy: Policy,
    model: ModelV2,
    input_batch: Dict[str, TensorType],
    state_batches: Optional[List[TensorType]] = None,
    seq_lens: Optional[TensorType] = None,
    explore: Optional[bool] = None,
    is_training: bool = False,
) -> Tuple[TensorType, ...]:
    """``(q_values, logits, probs_or_logits, state_out)``; see the torch version."""
    model_out, state = model(input_batch, state_batches or [], seq_lens)
    if policy.config["num_atoms"] > 1:
        scores, z, support_logits, logits, dist = model.get_q_value_distributions(model_out)
    else:
        scores, logits, dist = model.get_q_value_distributions(model_out)
    if not policy.config["dueling"]:
        return scores, logits, dist, state
    state_score = model.get_state_value(model_out)
    if policy.config["num_atoms"] > 1:
        centered = support_logits - tf.reduce_mean(support_logits, 1, keepdims=True)
        support_logits = tf.expand_dims(state_score, 1) + centered
        dist = tf.nn.softmax(support_logits)
        return tf.reduce_sum(z * dist, axis=-1), support_logits, dist, state
    centered = scores - tf.expand_dims(reduce_mean_ignore_inf(scores, 1), 1)
    return state_score + centered, logits, dist, state


def get_distribution_inputs_and_class(
    policy: Policy, model: ModelV2, input_dict: SampleBatch, *, explore: bool = True, **kwargs: Any
) -> Tuple[TensorType, type, list]:
    """The Q-values as inputs of a Categorical (argmax / epsilon-greedy)."""
    q_vals = compute_q_values(policy, model, input_dict, explore=explore)[0]
    policy.q_values = q_vals
    return q_vals, Categorical, []


def _select(values: TensorType, one_hot: TensorType) -> TensorType:
    return tf.reduce_sum(values * one_hot, 1)


def build_q_losses(policy: Policy, model: ModelV2, _: Any, train_batch: SampleBatch) -> TensorType:
    """DQN's loss; keeps the QLoss in ``policy.q_loss`` (for stats and ``td_error``)."""
    config, n_actions = policy.config, policy.action_space.n
    q_t, q_logits_t, _, _ = compute_q_values(
        policy, model, SampleBatch({"obs": train_batch[SampleBatch.CUR_OBS]}), explore=False
    )
    next_obs = SampleBatch({"obs": train_batch[SampleBatch.NEXT_OBS]})
    q_tp1, _, q_dist_tp1, _ = compute_q_values(policy, policy.target_model, next_obs, explore=False)
    if not hasattr(policy, "target_q_func_vars"):
        policy.target_q_func_vars = policy.target_model.variables()
    one_hot_selection = tf.one_hot(tf.cast(train_batch[SampleBatch.ACTIONS], tf.int32), n_actions)
    q_t_selected = _select(q_t, one_hot_selection)
    q_logits_t_selected = tf.reduce_sum(q_logits_t * tf.expand_dims(one_hot_selection, -1), 1)
    if config["double_q"]:
        q_tp1_online = compute_q_values(policy, model, next_obs, explore=False)[0]
        best = tf.one_hot(tf.argmax(q_tp1_online, 1), n_actions)
    else:
        best = tf.one_hot(tf.argmax(q_tp1, 1), n_actions)
    q_tp1_best = _select(q_tp1, best)
    q_dist_tp1_best = tf.reduce_sum(q_dist_tp1 * tf.expand_dims(best, -1), 1)
    policy.q_loss = QLoss(
        q_t_selected,
        q_logits_t_selected,
        q_tp1_best,
        q_dist_tp1_best,
        train_batch[PRIO_WEIGHTS],
        train_batch[SampleBatch.REWARDS],
        tf.cast(terminal_flags(train_batch), tf.float32),
        config["gamma"],
        config["n_step"],
        config["num_atoms"],
        config["v_min"],
        config["v_max"],
    )
    return policy.q_loss.loss


def adam_optimizer(policy: Policy, config: TrainerConfigDict) -> Any:
    """Adam(cur_lr, eps=adam_epsilon): Keras eagerly, tf1.train in graph mode."""
    if policy.config["framework"] in ("tf2", "tfe"):
        lr = getattr(policy, "cur_lr", config["lr"])
        lr = float(lr.numpy()) if hasattr(lr, "numpy") else float(lr)
        return get_keras().optimizers.Adam(learning_rate=lr, epsilon=config["adam_epsilon"])
    return tf1.train.AdamOptimizer(learning_rate=policy.cur_lr, epsilon=config["adam_epsilon"])


def clip_gradients(policy: Policy, optimizer: Any, loss: TensorType) -> List[Tuple[TensorType, Any]]:
    """Gradients of the Q-model's variables, each clipped to norm ``grad_clip``."""
    if not hasattr(policy, "q_func_vars"):
        policy.q_func_vars = policy.model.variables()
    return minimize_and_clip(
        optimizer, loss, var_list=policy.q_func_vars, clip_val=policy.config["grad_clip"]
    )


def build_q_stats(policy: Policy, batch: SampleBatch) -> Dict[str, TensorType]:
    """``cur_lr`` plus the QLoss stats."""
    return dict({"cur_lr": tf.cast(policy.cur_lr, tf.float64)}, **policy.q_loss.stats)


class ComputeTDErrorMixin:
    """Adds ``compute_td_error(obs_t, act_t, rew_t, obs_tp1, done_mask,
    importance_weights)`` (numpy in, numpy/eager tensor out)."""

    def __init__(self):
        @make_tf_callable(self.get_session(), dynamic_shape=True)
        def compute_td_error(obs_t, act_t, rew_t, obs_tp1, done_mask, importance_weights):
            train_loss = getattr(self, "q_loss", None)
            build_q_losses(
                self,
                self.model,
                None,
                {
                    SampleBatch.CUR_OBS: tf.convert_to_tensor(obs_t),
                    SampleBatch.ACTIONS: tf.convert_to_tensor(act_t),
                    SampleBatch.REWARDS: tf.convert_to_tensor(rew_t),
                    SampleBatch.NEXT_OBS: tf.convert_to_tensor(obs_tp1),
                    SampleBatch.DONES: tf.convert_to_tensor(done_mask),
                    PRIO_WEIGHTS: tf.convert_to_tensor(importance_weights),
                },
            )
            td_error = self.q_loss.td_error
            if train_loss is not None:  # keep the training loss' tensors for the fetches
                self.q_loss = train_loss
            return td_error

        self.compute_td_error = compute_td_error


def setup_mid_mixins(
    policy: Policy, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> None:
    LearningRateSchedule.__init__(policy, config["lr"], config["lr_schedule"])
    ComputeTDErrorMixin.__init__(policy)


def setup_late_mixins(
    policy: Policy, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> None:
    TargetNetworkMixin.__init__(policy, obs_space, action_space, config)


def _td_error_fetches(policy: Policy) -> Dict[str, TensorType]:
    return {"td_error": policy.q_loss.td_error}


def _q_values_fetches(policy: Policy) -> Dict[str, TensorType]:
    return {"q_values": policy.q_values}


DQNTFPolicy = build_tf_policy(
    name="DQNTFPolicy",
    get_default_config=lambda: DEFAULT_CONFIG,
    make_model=build_q_model,
    action_distribution_fn=get_distribution_inputs_and_class,
    loss_fn=build_q_losses,
    stats_fn=build_q_stats,
    postprocess_fn=postprocess_nstep_and_prio,
    optimizer_fn=adam_optimizer,
    compute_gradients_fn=clip_gradients,
    extra_action_out_fn=_q_values_fetches,
    extra_learn_fetches_fn=_td_error_fetches,
    before_loss_init=setup_mid_mixins,
    after_init=setup_late_mixins,
    mixins=[TargetNetworkMixin, ComputeTDErrorMixin, LearningRateSchedule],
)

__all__ = [
    "DQNTFPolicy",
    "PRIO_WEIGHTS",
    "Q_SCOPE",
    "Q_TARGET_SCOPE",
    "QLoss",
    "build_q_losses",
    "build_q_model",
    "compute_q_values",
    "postprocess_nstep_and_prio",
]
