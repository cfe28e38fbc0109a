"""The ``session.run`` steps of the TF graph-mode ``TFPolicy``.

Acting, computing/applying gradients and learning each add feeds and fetches
to a ``TFRunBuilder``. ``TFPolicy`` keeps RLlib's (private) step methods
(``_build_compute_actions``, ``_build_learn_on_batch`` ...), so subclasses can
still override them, and delegates their bodies here.

No framework is imported at module level.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from rlpolicy._core import tf_feeds
from rlpolicy._core.tf_grads import flatten_grad_groups
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY

if TYPE_CHECKING:  # pragma: no cover
    from rlpolicy.policy.tf_policy import TFPolicy
    from rlpolicy.utils.tf_run_builder import TFRunBuilder


def run_compute_actions(policy: "TFPolicy", name: str, input_dict: Any,
                        explore: Optional[bool], timestep: Optional[int],
                        rows: int) -> Tuple[Any, List[Any], Dict[str, Any]]:
    """Runs the action fetches for ``input_dict`` and advances the global timestep.

    Args:
        policy: The policy.
        name: The run's name (for ``TFRunBuilder`` errors).
        input_dict: Observations and other action inputs by column.
        explore: Whether to explore (default: ``config["explore"]``).
        timestep: The sampling timestep (default: the global timestep).
        rows: Rows to add to the global timestep.

    Returns:
        ``(actions, state_outs, extra_fetches)``.
    """
    from rlpolicy.utils.tf_run_builder import TFRunBuilder

    explore = explore if explore is not None else policy.config["explore"]
    timestep = timestep if timestep is not None else policy.global_timestep
    builder = TFRunBuilder(policy.get_session(), name)
    to_fetch = policy._build_compute_actions(builder, input_dict=input_dict, explore=explore,
                                             timestep=timestep)
    fetched = builder.get(to_fetch)
    policy.global_timestep += rows
    return fetched


def build_compute_actions(policy: "TFPolicy", builder: "TFRunBuilder", input_dict: Any,
                          explore: bool, timestep: Optional[int]) -> Tuple[Any, Any, Any]:
    """Adds the action fetches (sampled actions, state outs, extra fetches) and feeds."""
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf(error=True)
    if policy.exploration is not None:
        policy.exploration.before_compute_actions(timestep=timestep, explore=explore,
                                                  tf_sess=policy.get_session())
    to_fetch = [policy._sampled_action] + policy._state_outputs + \
        [policy.extra_compute_action_fetches()]
    builder.add_feed_dict(policy.extra_compute_action_feed_dict())
    builder.add_feed_dict(tf_feeds.compute_actions_feed(policy, input_dict, to_fetch))
    if tf.is_tensor(policy._is_exploring):
        builder.add_feed_dict({policy._is_exploring: explore})
    if timestep is not None:
        builder.add_feed_dict({policy._timestep: timestep})
    fetches = builder.add_fetches(to_fetch)
    return fetches[0], fetches[1:-1], fetches[-1]


def build_grad_step(policy: "TFPolicy", builder: "TFRunBuilder", batch: SampleBatch,
                    first_fetch: Any) -> List[Any]:
    """Feeds ``batch`` into the loss and fetches ``[first_fetch, grad-and-stats fetches]``."""
    builder.add_feed_dict(policy.extra_compute_grad_feed_dict())
    builder.add_feed_dict(policy._get_loss_inputs_dict(batch, shuffle=False))
    return builder.add_fetches([first_fetch, policy._get_grad_and_stats_fetches()])


def build_apply_gradients(policy: "TFPolicy", builder: "TFRunBuilder", gradients: Any) -> Any:
    """Feeds ``gradients`` into the gradient tensors and fetches the apply op.

    Raises:
        ValueError: If ``gradients`` does not have one value per gradient tensor.
    """
    multi = policy.config["_tf_policy_handles_more_than_one_loss"]
    targets = flatten_grad_groups(policy._grads, multi)
    values = flatten_grad_groups(gradients, multi)
    if len(values) != len(targets):
        raise ValueError(f"apply_gradients got {len(values)} gradients for the "
                         f"{len(targets)} gradient tensors of this policy; pass what "
                         "compute_gradients returned")
    builder.add_feed_dict({policy._is_training: True})
    builder.add_feed_dict(dict(zip(targets, values)))
    return builder.add_fetches([policy._apply_op])[0]


def grad_and_stats_fetches(policy: "TFPolicy") -> Dict[str, Any]:
    """``extra_compute_grad_fetches()`` with the stats fetches merged into its learner stats.

    Raises:
        ValueError: If the extra fetches have no learner-stats entry.
    """
    fetches = policy.extra_compute_grad_fetches()
    if LEARNER_STATS_KEY not in fetches:
        raise ValueError(f"extra_compute_grad_fetches() must return a {LEARNER_STATS_KEY!r} "
                         f"entry (a dict of stats), got keys {sorted(fetches)}")
    if policy._stats_fetches:
        fetches[LEARNER_STATS_KEY] = dict(policy._stats_fetches, **fetches[LEARNER_STATS_KEY])
    return fetches


def loss_inputs_feed(policy: "TFPolicy", train_batch: Any, shuffle: bool) -> Dict[Any, Any]:
    """Pads ``train_batch`` (RNNs, divisibility) and maps loss placeholders to its columns."""
    if not isinstance(train_batch, SampleBatch):
        train_batch = SampleBatch(train_batch)
    if not train_batch.zero_padded:
        policy._pad_for_loss(train_batch, shuffle)
    train_batch.set_training(True)
    return tf_feeds.loss_feed(policy, train_batch)


__all__ = ["run_compute_actions", "build_compute_actions", "build_grad_step",
           "build_apply_gradients", "grad_and_stats_fetches", "loss_inputs_feed"]
