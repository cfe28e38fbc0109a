"""Dummy-batch loss initialisation of ``DynamicTFPolicy`` (TF graph mode).

The framework-neutral rule (which columns acting, postprocessing and the loss
read, and how view requirements are pruned from that record) lives in
``_core.loss_init``. Graph mode differs from torch and eager TF in how the
record is taken:

1. *acting*: the columns read while the action graph was **built** (the
   access log of the policy's placeholder input dict); the extra action
   outputs get columns shaped from their static shapes (RLlib 1.11: no
   ``compute_actions_from_input_dict`` call at construction);
2. *postprocessing*: runs on the numpy dummy batch, as in torch; every column
   it adds gets a placeholder;
3. *loss*: is built once, on placeholders for every column of the
   postprocessed batch and those a client added to ``_loss_input_dict``
   (``before_loss_init``); the loss inputs are the columns the loss read plus
   those whose placeholders the loss graph depends on.

tensorflow is imported lazily.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, List, Set, Tuple

import numpy as np
import tree

from rlpolicy._core.loss_init import AccessRecord, new_box, prune_view_requirements
from rlpolicy._core.obs_prep import prepare_observation_space
from rlpolicy._core.tf_feeds import placeholders_needed_by

if TYPE_CHECKING:  # pragma: no cover
    from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy
    from rlpolicy.policy.sample_batch import SampleBatch

logger = logging.getLogger(__name__)
SEQ_LENS = "seq_lens"
DUMMY_BATCH_SIZE = 32


def build_input_dict(policy: "DynamicTFPolicy", view_requirements: Dict[str, Any],
                     existing_inputs: Dict[str, Any], create_missing: bool = True
                     ) -> "SampleBatch":
    """Placeholders (a SampleBatch of them) for every view-requirement column used in training.

    ``state_in_i`` columns map to ``policy._state_inputs[i]``; columns in
    ``existing_inputs`` (tower inputs, the action placeholder) are taken from
    there; ``state_out_i`` and ``action_dist_inputs`` get none (RLlib 1.11).
    With ``create_missing=False`` (towers) no new placeholders are made.
    """
    from rlpolicy.policy.sample_batch import SampleBatch
    from rlpolicy.utils.tf_utils import get_placeholder

    disable_preprocessor = policy.config.get("_disable_preprocessor_api", False)
    input_dict: Dict[str, Any] = {}
    for col, vr in view_requirements.items():
        if col.startswith("state_in_"):
            idx = int(col[len("state_in_"):])
            if idx < len(policy._state_inputs):
                input_dict[col] = policy._state_inputs[idx]
        elif col.startswith("state_out_") or col == SampleBatch.ACTION_DIST_INPUTS:
            continue
        elif col in existing_inputs:
            input_dict[col] = existing_inputs[col]
        elif vr.used_for_training and create_missing:
            is_obs = col in (SampleBatch.OBS, SampleBatch.NEXT_OBS)
            flatten = not is_obs or not disable_preprocessor
            # Nested observations arrive preprocessed (one-hot discrete parts).
            space = prepare_observation_space(vr.space, policy.config) if is_obs else vr.space
            input_dict[col] = get_placeholder(space=space, name=col,
                                              time_axis=not isinstance(vr.shift, int),
                                              flatten=flatten)
    extra = {SEQ_LENS: policy._seq_lens} if policy._seq_lens is not None else {}
    return SampleBatch(input_dict, **extra)


def _needed_keys(train_batch: "SampleBatch", roots: List[Any]) -> Set[str]:
    needed_ops = placeholders_needed_by(roots)
    keys = set()
    for key, value in dict.items(train_batch):
        leaves = [v for v in tree.flatten(value) if hasattr(v, "op")]
        if any(v.op in needed_ops for v in leaves):
            keys.add(key)
    return keys


def _extra_action_specs(policy: "DynamicTFPolicy", dummy: "SampleBatch"
                        ) -> Dict[str, Tuple[Tuple[int, ...], Any]]:
    """``{key: (per-row shape, numpy dtype)}`` of the extra action fetches.

    As RLlib 1.11's DynamicTFPolicy: from the fetch tensors' static shapes,
    without a ``compute_actions_from_input_dict`` call (no exploration step,
    timestep or callbacks run at construction; torch and eager do run one).
    Only fetches whose per-row shape is not static are evaluated, on the
    dummy batch, in the policy's session (RLlib 1.11 fails on those).
    """
    specs: Dict[str, Tuple[Tuple[int, ...], Any]] = {}
    dynamic: Dict[str, Any] = {}
    for key, tensor in policy.extra_compute_action_fetches().items():
        shape = getattr(tensor, "shape", None)
        if shape is None or not hasattr(tensor, "dtype") or not hasattr(shape, "rank"):
            value = np.asarray(tensor)
            specs[key] = (tuple(value.shape[1:]), value.dtype)
        elif shape.rank is not None and shape[1:].is_fully_defined():
            specs[key] = (tuple(shape.as_list()[1:]), tensor.dtype.as_numpy_dtype)
        else:
            dynamic[key] = tensor
    if dynamic:
        from rlpolicy._core.tf_feeds import compute_actions_feed
        from rlpolicy.policy.sample_batch import SampleBatch

        probe = SampleBatch(dict(dict.items(dummy)))
        feed = compute_actions_feed(policy, probe, list(dynamic.values()))
        if getattr(policy, "_is_exploring", None) is not None:
            feed[policy._is_exploring] = False
        for key, value in policy.get_session().run(dynamic, feed_dict=feed).items():
            value = np.asarray(value)
            specs[key] = (tuple(value.shape[1:]), value.dtype)
    return specs


def _add_extra_action_columns(policy: "DynamicTFPolicy", dummy: "SampleBatch",
                              specs: Dict[str, Tuple[Tuple[int, ...], Any]]) -> None:
    """Extra action outputs (logp, dist inputs, vf preds, ...) become columns,
    placeholders and view requirements (not used for acting)."""
    from rlpolicy.policy.view_requirement import ViewRequirement
    from rlpolicy.utils.tf_utils import get_placeholder

    for key, tensor in policy.extra_compute_action_fetches().items():
        shape, dtype = specs[key]
        dict.__setitem__(dummy, key, np.zeros((len(dummy),) + tuple(shape), dtype=dtype))
        if not dict.__contains__(policy._input_dict, key):
            dict.__setitem__(policy._input_dict, key, get_placeholder(value=tensor, name=key))
        if key not in policy.view_requirements:
            policy.view_requirements[key] = ViewRequirement(
                space=new_box(-1.0, 1.0, tuple(shape), dtype), used_for_compute_actions=False)


def _postprocess(policy: "DynamicTFPolicy", dummy: "SampleBatch") -> Tuple["SampleBatch", Set[str]]:
    """Runs exploration + policy postprocessing on ``dummy``; gives new columns placeholders.

    Returns:
        The postprocessed batch and the set of columns it added.
    """
    from rlpolicy.policy.view_requirement import ViewRequirement
    from rlpolicy.utils.tf_utils import get_placeholder

    before = set(dummy.keys())
    if policy.exploration is not None:
        policy.exploration.postprocess_trajectory(policy, dummy, policy.get_session())
    post = policy.postprocess_trajectory(dummy)
    post = dummy if post is None else post
    added = set(dummy.added_keys) | (set(post.keys()) - before)
    for key in sorted(added):
        if key == SEQ_LENS or key.startswith("state_out_") or not dict.__contains__(post, key):
            continue
        value = dict.__getitem__(post, key)
        arr = np.asarray(value) if not isinstance(value, (dict, tuple)) else None
        if arr is None or arr.dtype == object or arr.ndim == 0:
            continue
        if not dict.__contains__(policy._input_dict, key):
            dict.__setitem__(policy._input_dict, key, get_placeholder(value=arr, name=key))
        if key not in policy.view_requirements:
            policy.view_requirements[key] = ViewRequirement(
                space=new_box(-1.0, 1.0, tuple(arr.shape[1:]), arr.dtype),
                used_for_compute_actions=False)
    return post, added


def initialize_loss_from_dummy_batch(policy: "DynamicTFPolicy",
                                     auto_remove_unneeded_view_reqs: bool = True) -> AccessRecord:
    """Implements ``DynamicTFPolicy._initialize_loss_from_dummy_batch``.

    Returns:
        The access record of the run (what acting, postprocessing and the
        loss read).
    """
    from rlpolicy._core.tf_variables import initialize_uninitialized
    from rlpolicy.utils import force_list

    if not policy._optimizers:
        policy._optimizers = force_list(policy.optimizer())
        policy._optimizer = policy._optimizers[0] if policy._optimizers else None
    initialize_uninitialized(policy.get_session())
    compute_keys = set(policy._input_dict.accessed_keys)
    for key, vr in policy.view_requirements.items():
        if not key.startswith("state_in_") and key not in compute_keys:
            vr.used_for_compute_actions = False
    dummy = policy._dummy_batch
    _add_extra_action_columns(policy, dummy, _extra_action_specs(policy, dummy))
    post, added = _postprocess(policy, dummy)
    train_keys, has_loss = _build_loss(policy)
    record = AccessRecord(
        compute_accessed=compute_keys,
        postprocess_accessed=set(dummy.accessed_keys) | set(getattr(post, "accessed_keys", ())),
        postprocess_added=added, postprocess_deleted=set(dummy.deleted_keys),
        train_accessed=train_keys)
    if auto_remove_unneeded_view_reqs:
        _prune(policy, record, has_loss, train_keys)
    return record


def _build_loss(policy: "DynamicTFPolicy") -> Tuple[Set[str], bool]:
    """Builds the loss on all placeholders, then gradients etc. (``TFPolicy._initialize_loss``)
    on the columns it reads or depends on (plus the model's own columns).

    Returns:
        The columns the loss needs, and whether there is a loss at all.
    """
    from rlpolicy.policy.sample_batch import SampleBatch
    from rlpolicy.policy.tf_policy import TFPolicy

    # As RLlib 1.11: placeholders a client put into _loss_input_dict (before_loss_init,
    # e.g. MAML's "split") are loss inputs too, fed from the train batch column.
    columns = dict(dict.items(policy._input_dict))
    columns.update(getattr(policy, "_loss_input_dict", None) or {})
    train_batch = SampleBatch(columns, _is_training=True)
    if policy._state_inputs:
        dict.__setitem__(train_batch, SEQ_LENS, policy._seq_lens)
    losses = policy._do_loss_init(train_batch)
    train_keys = set(train_batch.accessed_keys)
    if not losses:
        return train_keys, False
    train_keys |= _needed_keys(train_batch, list(losses) + tree.flatten(policy._stats_fetches))
    model_keys = set(getattr(policy.model, "view_requirements", {}) or {})
    keep = train_keys | (model_keys & set(train_batch.keys()))
    loss_inputs = [(k, v) for k, v in dict.items(train_batch) if k in keep and k != SEQ_LENS]
    if policy._state_inputs:
        loss_inputs.append((SEQ_LENS, policy._seq_lens))
    TFPolicy._initialize_loss(policy, losses, loss_inputs)
    if policy._grad_stats_fn:
        policy._stats_fetches.update(policy._grad_stats_fn(policy, train_batch, policy._grads))
    return train_keys, True


def _prune(policy: "DynamicTFPolicy", record: AccessRecord, has_loss: bool,
           train_keys: Set[str]) -> None:
    """Shared pruning rule, then re-adds data columns other columns are views of."""
    from rlpolicy.policy.view_requirement import ViewRequirement

    model = policy.model
    protected = set(getattr(model, "view_requirements", {}) or {})
    prune_view_requirements(policy.view_requirements, record, protected=protected,
                            has_loss=has_loss, keep_all=policy.config.get("output") is not None)
    # RLlib 1.11: a column that is a view of a removed data column keeps it alive.
    for key in list(policy.view_requirements):
        vr = policy.view_requirements[key]
        if vr.data_col is not None and vr.data_col not in policy.view_requirements:
            policy.view_requirements[vr.data_col] = ViewRequirement(
                space=vr.space, used_for_training=vr.data_col in train_keys)

