"""DQN's torch policy (RLlib 1.11's ``ray.rllib.agents.dqn.dqn_torch_policy``).

Q-learning with a target network (one per GPU tower), double Q, dueling
heads, noisy nets, n-step returns, distributional C51 (``num_atoms > 1``),
the Huber loss weighted by prioritized-replay importance weights, and the TD
errors handed back for new priorities (``td_error`` in the learn results).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Type

import gymnasium as gym
import numpy as np

from rlpolicy.agents.dqn.dqn_common import (
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
from rlpolicy.agents.dqn.dqn_torch_model import DQNTorchModel
from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.models.modelv2 import ModelV2
from rlpolicy.models.torch.torch_action_dist import TorchCategorical
from rlpolicy.policy._torch.optimizers import default_adam
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.policy_template import build_policy_class
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.torch_mixins import LearningRateSchedule, TargetNetworkMixin
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.torch_utils import (
    FLOAT_MIN,
    apply_grad_clipping,
    concat_multi_gpu_td_errors,
    huber_loss,
    reduce_mean_ignore_inf,
    softmax_cross_entropy_with_logits,
)
from rlpolicy.utils.typing import TensorType, TrainerConfigDict

torch, nn = try_import_torch()
F = nn.functional if torch is not None else None


class QLoss:
    """The Q-learning loss of one batch (RLlib 1.11's torch ``QLoss``).

    One atom: ``td_error = Q(s, a) - (r + gamma^n (1 - done) Q'(s', a*))`` and
    ``loss = mean(w * huber(td_error))``. Several atoms (C51): the target
    distribution ``r + gamma^n (1 - done) z`` is clipped to ``[v_min, v_max]``
    and projected onto the support; ``td_error`` is the cross entropy between
    it and the predicted distribution, and ``loss = mean(w * td_error)``.
    ``self.stats`` holds the mean/min/max Q (or the mean TD error). With one atom
    ``q_logits_t_selected`` and ``q_probs_tp1_best`` are not read (may be None).
    """

    def __init__(
        self,
        q_t_selected: TensorType,
        q_logits_t_selected: Optional[TensorType],
        q_tp1_best: TensorType,
        q_probs_tp1_best: Optional[TensorType],
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
        if num_atoms > 1:
            z = v_min + torch.arange(num_atoms, dtype=torch.float32, device=rewards.device) * (
                v_max - v_min
            ) / float(num_atoms - 1)
            r_tau = rewards.unsqueeze(-1) + discount * (1.0 - done_mask).unsqueeze(-1) * z.unsqueeze(0)
            m = project_distribution(r_tau, q_probs_tp1_best, v_min, v_max, num_atoms)
            self.td_error = softmax_cross_entropy_with_logits(logits=q_logits_t_selected, labels=m.detach())
            self.loss = torch.mean(self.td_error * importance_weights.float())
            self.stats = {"mean_td_error": torch.mean(self.td_error)}
            return
        target = rewards + discount * (1.0 - done_mask) * q_tp1_best
        self.td_error = q_t_selected - target.detach()
        self.loss = torch.mean(importance_weights.float() * huber_loss(self.td_error))
        with torch.no_grad():  # (reported only: no autograd nodes)
            self.stats = {
                "mean_q": torch.mean(q_t_selected),
                "min_q": torch.min(q_t_selected),
                "max_q": torch.max(q_t_selected),
            }


def project_distribution(
    r_tau: TensorType, probs: TensorType, v_min: float, v_max: float, num_atoms: int
) -> TensorType:
    """Projects the distribution with atoms ``r_tau`` [B, N] and masses ``probs``
    [B, N] onto the fixed support ``linspace(v_min, v_max, N)`` (C51).

    Each mass is split between the two neighbouring support atoms in
    proportion to closeness; a mass landing exactly on an atom goes to it whole.
    """
    r_tau = torch.clamp(r_tau, v_min, v_max)
    b = (r_tau - v_min) / ((v_max - v_min) / float(num_atoms - 1))
    lb, ub = torch.floor(b), torch.ceil(b)
    on_atom = ((ub - lb) < 0.5).float()
    lower_mass = probs * (ub - b + on_atom)
    upper_mass = probs * (b - lb)
    m = torch.zeros_like(probs)
    m.scatter_add_(1, lb.long().clamp(0, num_atoms - 1), lower_mass)
    m.scatter_add_(1, ub.long().clamp(0, num_atoms - 1), upper_mass)
    return m


def build_q_model_and_distribution(
    policy: Policy, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> Tuple[ModelV2, Type[TorchCategorical]]:
    """Builds the Q-model (``policy.q_model``) and its target copy (``policy.target_model``).

    Raises:
        UnsupportedSpaceException: For a non-Discrete action space.
        ValueError: For bad ``num_atoms`` / ``v_min`` / ``v_max``.
    """
    check_dqn_action_space(action_space, "DQN")
    check_num_atoms(config)
    num_outputs = q_model_num_outputs(config, action_space)
    kwargs = q_model_kwargs(config, uses_parameter_noise(policy, config))
    policy.q_model = ModelCatalog.get_model_v2(
        obs_space=obs_space,
        action_space=action_space,
        num_outputs=num_outputs,
        model_config=config["model"],
        framework="torch",
        model_interface=DQNTorchModel,
        name=Q_SCOPE,
        **kwargs,
    )
    # Set before TorchPolicy.__init__, which gives every tower its target model.
    policy.target_model = ModelCatalog.get_model_v2(
        obs_space=obs_space,
        action_space=action_space,
        num_outputs=num_outputs,
        model_config=config["model"],
        framework="torch",
        model_interface=DQNTorchModel,
        name=Q_TARGET_SCOPE,
        **kwargs,
    )
    return policy.q_model, TorchCategorical


def compute_q_values(
    policy: Policy,
    model: ModelV2,
    input_dict: Dict[str, TensorType],
    state_batches: Optional[List[TensorType]] = None,
    seq_lens: Optional[TensorType] = None,
    explore: Optional[bool] = None,
    is_training: bool = False,
) -> Tuple[TensorType, ...]:
    """Q-values of ``model`` for ``input_dict["obs"]``.

    Dueling: ``Q = V + (A - mean_a A)`` (the mean ignores ``-inf`` advantages);
    with atoms the centring is done on the support logits, per atom.

    Returns:
        ``(q_values [B, A], logits, probs_or_logits, state_out)``; with one
        atom ``logits``/``probs_or_logits`` are all-ones placeholders, with
        several they are the per-action support logits / probabilities [B, A, N].
    """
    model_out, state = model(input_dict, state_batches or [], seq_lens)
    if policy.config["num_atoms"] > 1:
        action_scores, z, support_logits, logits, probs_or_logits = model.get_q_value_distributions(model_out)
    else:
        action_scores, logits, probs_or_logits = model.get_q_value_distributions(model_out)
    if not policy.config["dueling"]:
        return action_scores, logits, probs_or_logits, state
    state_score = model.get_state_value(model_out)
    if policy.config["num_atoms"] > 1:
        centered = support_logits - torch.mean(support_logits, dim=1, keepdim=True)
        support_logits = state_score.unsqueeze(1) + centered
        probs_or_logits = F.softmax(support_logits, dim=-1)
        return torch.sum(z * probs_or_logits, dim=-1), support_logits, probs_or_logits, state
    centered = action_scores - reduce_mean_ignore_inf(action_scores, 1).unsqueeze(1)
    return state_score + centered, logits, probs_or_logits, state


def get_distribution_inputs_and_class(
    policy: Policy,
    model: ModelV2,
    input_dict: SampleBatch,
    *,
    explore: bool = True,
    is_training: bool = False,
    **kwargs: Any,
) -> Tuple[TensorType, type, List[TensorType]]:
    """The Q-values as the inputs of a categorical (argmax / epsilon-greedy) distribution."""
    q_vals = compute_q_values(policy, model, input_dict, explore=explore, is_training=is_training)[0]
    model.tower_stats["q_values"] = q_vals
    policy.q_values = q_vals
    return q_vals, TorchCategorical, []  # no RNN state


def _select(values: TensorType, index: TensorType) -> TensorType:
    """``values[b, index[b]]``; masked (<= FLOAT_MIN) Q-values count as 0 (RLlib sums
    ``where(values > FLOAT_MIN, values, 0) * one_hot``: the same values and gradients)."""
    safe = torch.where(values > FLOAT_MIN, values, 0.0)
    return safe.gather(1, index.unsqueeze(1)).squeeze(1)


def build_q_losses(policy: Policy, model: ModelV2, _: Any, train_batch: SampleBatch) -> TensorType:
    """DQN's loss on ``train_batch``: (double) Q-learning targets from the
    tower's target model; stores ``td_error`` and ``q_loss`` in ``model.tower_stats``."""
    config = policy.config
    q_t, q_logits_t, _, _ = compute_q_values(
        policy, model, {"obs": train_batch[SampleBatch.CUR_OBS]}, explore=False, is_training=True
    )
    n_actions = policy.action_space.n
    distributional = config["num_atoms"] > 1
    actions = train_batch[SampleBatch.ACTIONS].long()
    q_t_selected = _select(q_t, actions)
    # With one atom QLoss reads neither the logits nor the next-state probabilities.
    q_logits_t_selected = (
        torch.sum(q_logits_t * F.one_hot(actions, n_actions).unsqueeze(-1), 1) if distributional else None
    )
    # The next-state side only feeds the (detached) targets: no autograd graph for it.
    with torch.no_grad():
        q_tp1, _, q_probs_tp1, _ = compute_q_values(
            policy,
            policy.target_models[model],
            {"obs": train_batch[SampleBatch.NEXT_OBS]},
            explore=False,
            is_training=True,
        )
        if config["double_q"]:
            # The online network picks a*, the target network evaluates it.
            q_tp1_online, _, _, _ = compute_q_values(
                policy, model, {"obs": train_batch[SampleBatch.NEXT_OBS]}, explore=False, is_training=True
            )
            best = torch.argmax(q_tp1_online, 1)
        else:
            best = torch.argmax(q_tp1, 1)
        q_tp1_best = _select(q_tp1, best)
        q_probs_tp1_best = (
            torch.sum(q_probs_tp1 * F.one_hot(best, n_actions).unsqueeze(-1), 1) if distributional else None
        )
    q_loss = QLoss(
        q_t_selected,
        q_logits_t_selected,
        q_tp1_best,
        q_probs_tp1_best,
        train_batch[PRIO_WEIGHTS],
        train_batch[SampleBatch.REWARDS],
        terminal_flags(train_batch).float(),
        config["gamma"],
        config["n_step"],
        config["num_atoms"],
        config["v_min"],
        config["v_max"],
    )
    # Per tower, so that towers computing in parallel do not overwrite each other.
    model.tower_stats["td_error"] = q_loss.td_error
    model.tower_stats["q_loss"] = q_loss
    return q_loss.loss


def build_q_stats(policy: Policy, batch: SampleBatch) -> Dict[str, TensorType]:
    """Tower means of the QLoss stats, plus ``cur_lr``."""
    towers = [t for t in policy.model_gpu_towers if "q_loss" in t.tower_stats]
    stats: Dict[str, Any] = {}
    if len(towers) == 1 and towers[0].tower_stats["q_loss"].stats:
        # One tower: its stats are the means (a mean over one value is that value).
        stats.update(towers[0].tower_stats["q_loss"].stats)
    elif towers:
        for key in towers[0].tower_stats["q_loss"].stats:
            stats[key] = torch.mean(
                torch.stack([t.tower_stats["q_loss"].stats[key].to(policy.device) for t in towers])
            )
    stats["cur_lr"] = policy.cur_lr
    return stats


def adam_optimizer(policy: Policy, config: TrainerConfigDict) -> "torch.optim.Optimizer":
    """Adam over the (tower-0) Q-model's parameters, ``lr=cur_lr``, ``eps=adam_epsilon``."""
    # The towers are placed by now, so these are the variables on the main device.
    if not hasattr(policy, "q_func_vars"):
        policy.q_func_vars = policy.model.variables()
    return default_adam(policy.q_func_vars, lr=policy.cur_lr, eps=config["adam_epsilon"])


def grad_process_and_td_error_fn(policy: Policy, optimizer: Any, loss: TensorType) -> Dict[str, TensorType]:
    """Clips gradients by global norm (``grad_clip``)."""
    return apply_grad_clipping(policy, optimizer, loss)


def extra_action_out_fn(
    policy: Policy, input_dict: Any, state_batches: Any, model: ModelV2, action_dist: Any
) -> Dict[str, TensorType]:
    """Adds the ``q_values`` of each step to the sampled batch."""
    return {"q_values": model.tower_stats["q_values"]}


class ComputeTDErrorMixin:
    """Adds ``compute_td_error(obs_t, act_t, rew_t, obs_tp1, done_mask,
    importance_weights) -> td_errors`` (used for worker-side prioritization)."""

    def __init__(self):
        def compute_td_error(
            obs_t: Any, act_t: Any, rew_t: Any, obs_tp1: Any, done_mask: Any, importance_weights: Any
        ) -> TensorType:
            batch = self._lazy_tensor_dict(
                {
                    SampleBatch.CUR_OBS: obs_t,
                    SampleBatch.ACTIONS: act_t,
                    SampleBatch.REWARDS: rew_t,
                    SampleBatch.NEXT_OBS: obs_tp1,
                    SampleBatch.DONES: np.asarray(done_mask),
                    PRIO_WEIGHTS: importance_weights,
                }
            )
            with torch.no_grad():
                build_q_losses(self, self.model, None, batch)
            return self.model.tower_stats["q_loss"].td_error

        self.compute_td_error = compute_td_error


def setup_early_mixins(
    policy: Policy, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> None:
    LearningRateSchedule.__init__(policy, config["lr"], config["lr_schedule"])


def before_loss_init(
    policy: Policy, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, config: TrainerConfigDict
) -> None:
    ComputeTDErrorMixin.__init__(policy)
    TargetNetworkMixin.__init__(policy)


DQNTorchPolicy = build_policy_class(
    name="DQNTorchPolicy",
    framework="torch",
    loss_fn=build_q_losses,
    get_default_config=lambda: DEFAULT_CONFIG,
    make_model_and_action_dist=build_q_model_and_distribution,
    action_distribution_fn=get_distribution_inputs_and_class,
    stats_fn=build_q_stats,
    postprocess_fn=postprocess_nstep_and_prio,
    optimizer_fn=adam_optimizer,
    extra_grad_process_fn=grad_process_and_td_error_fn,
    extra_learn_fetches_fn=concat_multi_gpu_td_errors,
    extra_action_out_fn=extra_action_out_fn,
    before_init=setup_early_mixins,
    before_loss_init=before_loss_init,
    mixins=[TargetNetworkMixin, ComputeTDErrorMixin, LearningRateSchedule],
)

__all__ = [
    "DQNTorchPolicy",
    "QLoss",
    "build_q_losses",
    "build_q_model_and_distribution",
    "compute_q_values",
    "get_distribution_inputs_and_class",
    "postprocess_nstep_and_prio",
]
