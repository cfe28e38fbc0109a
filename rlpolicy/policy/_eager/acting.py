"""Data helpers of the eager TF policy's acting path.

The policy's compute-actions step (``EagerTFPolicy._compute_actions_helper``,
run directly or, with ``eager_tracing``, as a ``tf.function``) uses these:
numpy views of list inputs, the batch view a traced call receives, and one
forward pass of a ModelV2 or a Keras model. They take models, tensors and
batches, never the policy. Tensorflow is imported on first use.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import tree

from rlpolicy.policy.sample_batch import SampleBatch

SEQ_LENS = "seq_lens"


def is_keras_model(model: Any) -> bool:
    """Whether ``model`` is a Keras (``tf_keras``) model rather than a ModelV2."""
    from rlpolicy.utils.framework import get_keras

    return isinstance(model, get_keras().Model)


def check_model(owner: str, model: Any) -> None:
    """Raises TypeError unless ``model`` is a TFModelV2 or a Keras model."""
    from rlpolicy.models.tf.tf_modelv2 import TFModelV2

    if not isinstance(model, TFModelV2) and not is_keras_model(model):
        raise TypeError(
            f"{owner}: the model must be a TFModelV2 (or Keras model), got {type(model).__name__}"
        )


def as_array(x: Any) -> Any:
    """A list of rows as a numpy array (lists of objects stay lists)."""
    if isinstance(x, list):
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):
            return x
        return x if arr.dtype == object else arr
    return x


def as_tensor_batch(samples: Any, training: bool) -> SampleBatch:
    """A SampleBatch view of ``samples`` (already one, or a traced dict of tensors).

    Inside ``tf.function`` the batch arrives as a plain dict; its ``count`` is
    the static batch size (None once TF generalised it to any size).
    """
    if isinstance(samples, SampleBatch):
        return samples
    first = next(
        (v for k, v in samples.items() if k != SEQ_LENS and not k.startswith(("state_in_", "state_out_"))),
        None,
    )
    count = None if first is None else tree.flatten(first)[0].shape[0]
    flags = {
        "_time_major": None,
        "_max_seq_len": None,
        "_is_training": training,
        "_zero_padded": training and SEQ_LENS in samples,
    }
    return SampleBatch._trusted(dict(samples), count, flags)  # type: ignore[arg-type]


def model_forward(
    model: Any, input_dict: Any, state_batches: List[Any], seq_lens: Any
) -> Tuple[Any, List[Any], Dict[str, Any]]:
    """One forward pass: ``(dist_inputs, state_outs, extra_fetches)``.

    A ModelV2 is called as ``model(input_dict, state, seq_lens)``; a Keras
    model as ``model(input_dict)`` with the states and ``seq_lens`` put into
    ``input_dict`` (it returns its extra fetches as a third output).
    """
    if is_keras_model(model):
        for i, s in enumerate(state_batches):
            input_dict.setdefault(f"state_in_{i}", s)
        input_dict[SEQ_LENS] = seq_lens
        dist_inputs, state_out, extra = model(input_dict)
        return dist_inputs, list(state_out), dict(extra)
    dist_inputs, state_out = model(input_dict, state_batches, seq_lens)
    return dist_inputs, list(state_out), {}


def action_extras(logp: Any, dist_inputs: Any) -> Dict[str, Any]:
    """RLlib 1.11's extra action outputs: ``action_prob``/``action_logp`` (when
    ``logp`` is not None) and ``action_dist_inputs`` (when given)."""
    out: Dict[str, Any] = {}
    if logp is not None:
        from rlpolicy.utils.framework import try_import_tf

        out["action_prob"] = try_import_tf(error=True)[1].exp(logp)
        out["action_logp"] = logp
    if dist_inputs is not None:
        out["action_dist_inputs"] = dist_inputs
    return out


__all__ = ["is_keras_model", "check_model", "as_array", "as_tensor_batch", "model_forward", "action_extras"]
