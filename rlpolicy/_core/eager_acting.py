"""Action computation and log-likelihoods of eager TF policies.

:func:`compute_actions_step` is the body that an eager policy runs directly
or, with ``eager_tracing``, as a ``tf.function``: forward pass (the model, an
``action_distribution_fn`` or an ``action_sampler_fn``), exploration, and
the extra outputs RLlib 1.11 returns (``action_prob``, ``action_logp``,
``action_dist_inputs`` and whatever ``extra_action_out_fn`` adds).

Tensorflow is imported lazily.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import tree

from rlpolicy._core.action_dist_fn import resolve_action_distribution_fn

OBS, SEQ_LENS = "obs", "seq_lens"
PREV_ACTIONS, PREV_REWARDS = "prev_actions", "prev_rewards"


def _tf() -> Any:
    from rlpolicy.utils.framework import try_import_tf

    return try_import_tf(error=True)[1]


def is_keras_model(model: Any) -> bool:
    """Whether ``model`` is a Keras (``tf_keras``) model rather than a ModelV2."""
    from rlpolicy.utils.framework import get_keras

    return isinstance(model, get_keras().Model)


def check_model(owner: str, model: Any) -> None:
    """Raises TypeError unless ``model`` is a TFModelV2 or a Keras model."""
    from rlpolicy.models.tf.tf_modelv2 import TFModelV2

    if not isinstance(model, TFModelV2) and not is_keras_model(model):
        raise TypeError(f"{owner}: the model must be a TFModelV2 (or Keras model), got "
                        f"{type(model).__name__}")


def as_array(x: Any) -> Any:
    """A list of rows as a numpy array (lists of objects stay lists)."""
    if isinstance(x, list):
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):
            return x
        return x if arr.dtype == object else arr
    return x


def as_tensor_batch(samples: Any, training: bool) -> Any:
    """A SampleBatch view of ``samples`` (already one, or a traced dict of tensors).

    Inside ``tf.function`` the batch arrives as a plain dict; its ``count`` is
    the static batch size (None once TF generalised it to any size).
    """
    from rlpolicy.policy.sample_batch import SampleBatch

    if isinstance(samples, SampleBatch):
        return samples
    first = next((v for k, v in samples.items()
                  if k != SEQ_LENS and not k.startswith(("state_in_", "state_out_"))), None)
    count = None if first is None else tree.flatten(first)[0].shape[0]
    flags = {"_time_major": None, "_max_seq_len": None, "_is_training": training,
             "_zero_padded": training and SEQ_LENS in samples}
    return SampleBatch._trusted(dict(samples), count, flags)


def compute_actions_step(policy: Any, input_dict: Any, state_batches: List[Any], episodes: Any,
                         explore: Any, timestep: Any) -> Tuple[Any, List[Any], Dict[str, Any]]:
    """Forward pass, sampling and exploration on tensors.

    Returns:
        ``(actions, state_outs, extra_fetches)`` as tensors.
    """
    from rlpolicy._core.eager_tracing import disallow_variable_creation

    tf = _tf()
    hooks = policy._hooks
    input_dict = as_tensor_batch(input_dict, training=False)
    obs = tree.flatten(input_dict[OBS])[0]
    seq_lens = tf.ones(tf.shape(obs)[0], dtype=tf.int32) if state_batches else None
    extra_fetches: Dict[str, Any] = {}
    with tf.variable_creator_scope(disallow_variable_creation):
        if hooks.action_sampler_fn is not None:
            outs = hooks.action_sampler_fn(policy, policy.model, input_dict[OBS], explore=explore,
                                           timestep=timestep, episodes=episodes)
            if len(outs) == 4:
                actions, logp, dist_inputs, state_out = outs
            else:
                (actions, logp), dist_inputs, state_out = outs, None, []
        else:
            dist_inputs, state_out, extra_fetches = dist_inputs_step(
                policy, input_dict, state_batches, seq_lens, explore, timestep)
            action_dist = policy.dist_class(dist_inputs, policy.model)
            actions, logp = policy.exploration.get_exploration_action(
                action_distribution=action_dist, timestep=timestep, explore=explore)
    if logp is not None:
        extra_fetches["action_prob"] = tf.exp(logp)
        extra_fetches["action_logp"] = logp
    if dist_inputs is not None:
        extra_fetches["action_dist_inputs"] = dist_inputs
    if hooks.extra_action_out_fn is not None:
        extra_fetches.update(hooks.extra_action_out_fn(policy))
    return actions, list(state_out), extra_fetches


def dist_inputs_step(policy: Any, input_dict: Any, state_batches: List[Any], seq_lens: Any,
                     explore: Any, timestep: Any) -> Tuple[Any, List[Any], Dict[str, Any]]:
    """Distribution inputs and state outs of one forward pass.

    With an ``action_distribution_fn`` its returned dist class becomes
    ``policy.dist_class`` (RLlib 1.11); a Keras model returns extra fetches.
    """
    fn = policy._hooks.action_distribution_fn
    model = policy.model
    if fn is not None:
        # RLlib's newer or older signature, whichever ``fn`` has (``_core.action_dist_fn``).
        dist_inputs, policy.dist_class, state_out = resolve_action_distribution_fn(fn)(
            policy, model, input_dict, state_batches=state_batches, seq_lens=seq_lens,
            explore=explore, timestep=timestep, is_training=False)
        return dist_inputs, state_out, {}
    if is_keras_model(model):
        for i, s in enumerate(state_batches):
            input_dict.setdefault(f"state_in_{i}", s)
        input_dict[SEQ_LENS] = seq_lens
        dist_inputs, state_out, extra = model(input_dict)
        return dist_inputs, state_out, dict(extra)
    dist_inputs, state_out = model(input_dict, state_batches, seq_lens)
    return dist_inputs, state_out, {}


def log_likelihoods(policy: Any, actions: Any, obs_batch: Any, state_batches: Optional[List[Any]],
                    prev_action_batch: Any, prev_reward_batch: Any,
                    actions_normalized: bool) -> Any:
    """Implements ``compute_log_likelihoods`` (see the Policy docstring).

    Raises:
        ValueError: With an ``action_sampler_fn`` but no ``action_distribution_fn``.
    """
    from rlpolicy._core.eager_tracing import to_tensor
    from rlpolicy.policy.sample_batch import SampleBatch
    from rlpolicy.utils.spaces.space_utils import normalize_action

    tf = _tf()
    hooks = policy._hooks
    if hooks.action_sampler_fn is not None and hooks.action_distribution_fn is None:
        raise ValueError("Cannot compute log-prob/likelihood w/o an `action_distribution_fn` "
                         "and a provided `action_sampler_fn`!")
    batch = SampleBatch({OBS: as_array(obs_batch)}, _is_training=False)
    if prev_action_batch is not None:
        batch[PREV_ACTIONS] = as_array(prev_action_batch)
    if prev_reward_batch is not None:
        batch[PREV_REWARDS] = as_array(prev_reward_batch)
    batch = policy._lazy_tensor_dict(batch)
    states = [to_tensor(as_array(s)) for s in (state_batches or [])]
    seq_lens = tf.ones(len(batch), dtype=tf.int32) if states else None
    policy.exploration.before_compute_actions(explore=False)
    if hooks.action_distribution_fn is not None:
        dist_inputs, dist_class, _ = resolve_action_distribution_fn(hooks.action_distribution_fn)(
            policy, policy.model, batch, state_batches=states, seq_lens=seq_lens, explore=False,
            is_training=False)
    else:
        dist_inputs, _ = policy.model(batch, states, seq_lens)
        dist_class = policy.dist_class
    if not actions_normalized and policy.config["normalize_actions"]:
        actions = normalize_action(actions, policy.action_space_struct)
    return dist_class(dist_inputs, policy.model).logp(to_tensor(as_array(actions)))


__all__ = ["compute_actions_step", "dist_inputs_step", "log_likelihoods", "as_tensor_batch",
           "as_array", "is_keras_model"]
