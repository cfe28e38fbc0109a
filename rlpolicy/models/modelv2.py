"""The framework-neutral model base class (RLlib's ``ray.rllib.models.modelv2``).

``ModelV2`` is the interface every policy model implements. Observations travel
flattened through sample batches; ``ModelV2.__call__`` puts back the original
(Dict / Tuple / Repeated) structure with ``restore_original_dimensions`` before
``forward`` sees them, and also hands over the flat tensor as
``input_dict["obs_flat"]``.

No deep-learning framework is imported at module level.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import gymnasium as gym
import numpy as np

from rlpolicy.models.repeated_values import RepeatedValues
from rlpolicy.policy.sample_batch import fast_shallow_copy
from rlpolicy.utils import NullContextManager
from rlpolicy.utils.annotations import DeveloperAPI, PublicAPI
from rlpolicy.utils.spaces.repeated import Repeated
from rlpolicy.utils.typing import ModelConfigDict, TensorStructType, TensorType


@PublicAPI
class ModelV2:
    """Abstract neural-network model used by rlpolicy policies.

    Subclass ``TorchModelV2`` or ``TFModelV2`` rather than this class.

    Data flow::

        obs -> forward() -> model_out
            \\-> value_function() -> V(s)
    """

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: Optional[int],
        model_config: ModelConfigDict,
        name: str,
        framework: str,
    ):
        """Stores the model's spaces and config; subclasses create variables.

        Args:
            obs_space: The (preprocessed, flat) observation space. It may carry
                an ``original_space`` attribute that describes how a flat
                observation is unpacked back into a Dict/Tuple structure.
            action_space: The environment's action space.
            num_outputs: Number of output units of ``forward()``.
            model_config: The model config dict (see ``MODEL_DEFAULTS``).
            name: Name (scope) of the model.
            framework: "tf", "tf2", "tfe", "torch" or "jax".
        """
        from rlpolicy.policy.view_requirement import ViewRequirement

        self.obs_space: gym.spaces.Space = obs_space
        self.action_space: gym.spaces.Space = action_space
        self.num_outputs: Optional[int] = num_outputs
        self.model_config: ModelConfigDict = model_config
        self.name: str = name or "default_model"
        self.framework: str = framework
        self._last_output = None
        self.time_major = self.model_config.get("_time_major")
        # Every model reads at least the current observation.
        self.view_requirements = {"obs": ViewRequirement(shift=0, space=self.obs_space)}

    @PublicAPI
    def get_initial_state(self) -> List[TensorType]:
        """Returns the initial recurrent state (one array per state tensor, no batch dim).

        Non-recurrent models return an empty list.
        """
        return []

    @PublicAPI
    def forward(
        self, input_dict: Dict[str, TensorType], state: List[TensorType], seq_lens: TensorType
    ) -> Tuple[TensorType, List[TensorType]]:
        """Computes the model output from the inputs and the recurrent state.

        ``input_dict["obs"]`` holds the observation in its original structure
        and ``input_dict["obs_flat"]`` the flat tensor. Override this (not
        ``__call__``) in custom models.

        Args:
            input_dict: Input tensors ("obs", "obs_flat", "prev_actions",
                "prev_rewards", "is_training", ...).
            state: State tensors, each [BATCH, ...] (matching
                ``get_initial_state()`` plus a batch dim).
            seq_lens: 1D tensor of sequence lengths (recurrent models) or None.

        Returns:
            The output tensor of shape [BATCH, num_outputs] and the list of new
            state tensors.
        """
        raise NotImplementedError

    @PublicAPI
    def value_function(self) -> TensorType:
        """Returns the value estimates [BATCH] of the most recent ``forward()`` call."""
        raise NotImplementedError

    @PublicAPI
    def custom_loss(
        self, policy_loss: TensorType, loss_inputs: Dict[str, TensorType]
    ) -> Union[List[TensorType], TensorType]:
        """Lets a model change the policy's loss(es); returns them unchanged by default.

        Args:
            policy_loss: The policy loss, or a list of losses.
            loss_inputs: The loss input tensors of the train batch.

        Returns:
            The (possibly modified) loss or list of losses.
        """
        return policy_loss

    @PublicAPI
    def metrics(self) -> Dict[str, TensorType]:
        """Returns custom model metrics, reported under the learner stats' "model" key."""
        return {}

    def __call__(
        self,
        input_dict: Dict[str, TensorType],
        state: Optional[List[Any]] = None,
        seq_lens: Optional[TensorType] = None,
    ) -> Tuple[TensorType, List[TensorType]]:
        """Runs ``forward()`` after restoring the observation structure.

        Policies use this entry point. It adds "obs_flat", unpacks Dict/Tuple
        observations into "obs", collects "state_in_i" columns when ``state``
        is empty, checks the outputs and remembers them for ``last_output()``.

        Args:
            input_dict: Dict (or SampleBatch) of input tensors; needs "obs".
            state: State tensors, each [BATCH, ...], or None.
            seq_lens: 1D sequence lengths, or None (then read from "seq_lens").

        Returns:
            The output [BATCH, num_outputs] and the list of state-out tensors
            (the input state when the model returns none).

        Raises:
            ValueError: the observation does not match the model's observation
                space, or forward() returned a wrongly shaped result.
        """
        restored = _shallow_copy(input_dict)
        if not state and "state_in_0" in input_dict:
            state = _collect_state_inputs(input_dict)
        if seq_lens is None and "seq_lens" in input_dict:
            seq_lens = input_dict.get("seq_lens")
        obs = input_dict["obs"]
        if self.model_config.get("_disable_preprocessor_api"):
            restored["obs_flat"] = obs
        else:
            shape: Any = getattr(obs, "shape", None)
            layout = self.__dict__.get("_obs_layout_cache")
            if layout is None or layout[0] is not self.obs_space:
                layout = self._obs_layout()
            _, expected, nested = layout
            # (the common case of _check_obs_shape, inline: [B, *space shape]; a TF
            # TensorShape of known rank compares as its list of dims)
            dims = shape.as_list() if getattr(shape, "rank", None) is not None else shape
            if not (
                isinstance(dims, (tuple, list))
                and len(dims) == len(expected) + 1
                and tuple(dims[1:]) == expected
            ):
                _check_obs_shape(obs, self.obs_space, self.name)
            if nested:
                restored["obs"] = restore_original_dimensions(obs, self.obs_space, self.framework)
            # else: restoring would hand back `obs` itself.
            if shape is not None and len(shape) > 2:
                restored["obs_flat"] = flatten(obs, self.framework)
            else:
                restored["obs_flat"] = obs
                if getattr(getattr(restored, "get_interceptor", None), "idempotent", False):
                    # `obs` already came through this interceptor: reading
                    # "obs_flat" would hand it back unchanged.
                    cast(Any, restored).intercepted_values["obs_flat"] = obs  # (a SampleBatch here)
        if type(self).context is ModelV2.context:  # the no-op context: skip it
            res = self.forward(restored, state or [], seq_lens)
        else:
            with self.context():
                res = self.forward(restored, state or [], seq_lens)
        _copy_key_tracking(input_dict, restored)
        # (the common case of _check_forward_result, inline: a ([B, num_outputs], list)
        # pair; a torch.Size/tuple or a TensorShape of known rank 2)
        shape = getattr(res[0], "shape", None) if type(res) is tuple and len(res) == 2 else None
        if not (
            shape is not None
            and type(res[1]) is list
            and (len(shape) if isinstance(shape, tuple) else getattr(shape, "rank", None)) == 2
            and shape[1] == self.num_outputs
        ):
            res = _check_forward_result(res, self.num_outputs, self.name)
        outputs, state_out = res
        self.__dict__["_last_output"] = outputs  # (bypasses nn.Module.__setattr__)
        return outputs, state_out if len(state_out) > 0 else (state or [])

    def _obs_layout(self) -> Tuple[Any, Any, bool]:
        """``(obs_space, its shape or a never-matching marker, whether
        observations unpack into a Dict/Tuple)``, kept until the space changes."""
        space = self.obs_space
        shape = getattr(space, "shape", None)
        expected = tuple(shape) if isinstance(shape, tuple) else (None,)
        cached = (space, expected, _is_nested_space(space))
        self.__dict__["_obs_layout_cache"] = cached  # (bypasses nn.Module.__setattr__)
        return cached

    @PublicAPI
    def from_batch(
        self, train_batch: Dict[str, TensorType], is_training: bool = True
    ) -> Tuple[TensorType, List[TensorType]]:
        """Calls the model on a (train) batch, reading its "state_in_i" and "seq_lens".

        Args:
            train_batch: The batch (SampleBatch or dict of tensors).
            is_training: Value to put under "is_training" for the call.

        Returns:
            Same as ``__call__``.
        """
        input_dict = _shallow_copy(train_batch)
        input_dict["is_training"] = is_training
        states = _collect_state_inputs(input_dict)
        return self.__call__(input_dict, states, input_dict.get("seq_lens"))

    def last_output(self) -> TensorType:
        """Returns the output of the most recent call."""
        return self._last_output

    def context(self) -> contextlib.AbstractContextManager:
        """Returns the context manager that wraps each forward pass (a no-op here)."""
        return NullContextManager()

    def variables(self, as_dict: bool = False) -> Union[List[TensorType], Dict[str, TensorType]]:
        """Returns the model's variables as a list, or a name->variable dict."""
        raise NotImplementedError

    def trainable_variables(self, as_dict: bool = False) -> Union[List[TensorType], Dict[str, TensorType]]:
        """Returns the model's trainable variables as a list, or a name->variable dict."""
        raise NotImplementedError

    @DeveloperAPI
    def update_ops(self) -> List[TensorType]:
        """Returns the ops to run after each training step (e.g. batch-norm updates)."""
        return []

    def import_from_h5(self, h5_file: str) -> None:
        """Imports weights from an h5 file; only some model classes support it.

        Args:
            h5_file: Path to the h5 file.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not support import_from_h5({h5_file!r}); "
            "override import_from_h5 in your model class"
        )

    def is_time_major(self) -> bool:
        """Whether this model expects time-major ([T, B, ...]) inputs."""
        return self.time_major is True


def _shallow_copy(input_dict: Any) -> Dict[str, Any]:
    """A shallow copy that keeps a SampleBatch a SampleBatch (sharing its
    interceptor and its accessed/added/deleted key sets)."""
    if type(input_dict) is dict:
        return input_dict.copy()
    fast = fast_shallow_copy(input_dict)
    if fast is not None:
        return fast
    try:
        return input_dict.copy(shallow=True)  # SampleBatch
    except TypeError:
        return input_dict.copy()


def _collect_state_inputs(input_dict: Dict[str, Any]) -> List[Any]:
    state, i = [], 0
    while f"state_in_{i}" in input_dict:
        state.append(input_dict[f"state_in_{i}"])
        i += 1
    return state


def _copy_key_tracking(input_dict: Any, restored: Any) -> None:
    """Carries SampleBatch key-access tracking of the copy back to the original."""
    if not hasattr(restored, "accessed_keys") or not hasattr(input_dict, "accessed_keys"):
        return
    if restored.accessed_keys is input_dict.accessed_keys and getattr(
        restored, "added_keys", None
    ) is getattr(input_dict, "added_keys", ()):
        # The copy shares the original's sets: dropping "obs_flat" is all there is to do.
        input_dict.accessed_keys.discard("obs_flat")
        input_dict.added_keys.discard("obs_flat")
        return
    input_dict.accessed_keys = set(restored.accessed_keys) - {"obs_flat"}
    if hasattr(restored, "deleted_keys"):
        input_dict.deleted_keys = restored.deleted_keys
    if hasattr(restored, "added_keys"):
        input_dict.added_keys = set(restored.added_keys) - {"obs_flat"}


def _static_shape(x: Any) -> Optional[List[Optional[int]]]:
    """Returns the static shape of an array/tensor (None entries if unknown)."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return None
    try:
        dims = list(shape)
    except (TypeError, ValueError):  # tf tensor of unknown rank
        return None
    out = []
    for d in dims:
        d = getattr(d, "value", d)
        out.append(None if d is None else int(d))
    return out


def _is_nested_space(obs_space: Any) -> bool:
    """Whether observations of ``obs_space`` unpack into a Dict/Tuple/Repeated structure."""
    original = getattr(obs_space, "original_space", obs_space)
    return isinstance(original, _STRUCT_SPACES)


def _check_obs_shape(obs: Any, obs_space: gym.spaces.Space, name: str) -> None:
    """Raises if a flat observation batch does not end in ``obs_space.shape``."""
    if isinstance(obs, (dict, list, tuple)) or obs_space is None:
        return
    expected = getattr(obs_space, "shape", None)
    shape = getattr(obs, "shape", None)
    if isinstance(shape, tuple):  # numpy / torch: concrete dims
        if expected is None or (len(shape) == len(expected) + 1 and shape[1:] == tuple(expected)):
            return
    received = _static_shape(obs)
    if expected is None or received is None:
        return
    expected = list(expected)
    n = len(expected)
    tail = received[len(received) - n :] if n else []
    ok = len(received) == n + 1 and all(r is None or r == e for r, e in zip(tail, expected))
    if not ok:
        raise ValueError(
            f"model {name!r}: observation batch has shape {tuple(received)} but the model's "
            f"observation space {obs_space} expects [BATCH, *{tuple(expected)}]"
        )


def _check_forward_result(res: Any, num_outputs: Optional[int], name: str) -> Tuple[Any, List[Any]]:
    """Validates the ``(outputs, state_out)`` pair returned by ``forward()``."""
    if not isinstance(res, (list, tuple)) or len(res) != 2:
        raise ValueError(f"model {name!r}: forward() must return a tuple (output, state_list), got {res!r}")
    outputs, state_out = res
    if type(state_out) is list and isinstance(num_outputs, int):
        shape = getattr(outputs, "shape", None)
        if isinstance(shape, tuple) and len(shape) == 2 and shape[1] == num_outputs:
            return outputs, state_out  # the common, well-formed case
    if not isinstance(state_out, list):
        raise ValueError(
            f"model {name!r}: forward() must return the state as a list, got "
            f"{type(state_out).__name__}: {state_out!r}"
        )
    shape = _static_shape(outputs)
    if isinstance(num_outputs, (int, np.integer)) and shape is not None:
        bad_rank = len(shape) != 2
        bad_size = not bad_rank and shape[-1] is not None and shape[-1] != int(num_outputs)
        if bad_rank or bad_size:
            raise ValueError(
                f"model {name!r}: forward() output has shape {tuple(shape)} but expected "
                f"[BATCH, num_outputs={int(num_outputs)}]"
            )
    return outputs, state_out


@DeveloperAPI
def flatten(obs: TensorType, framework: str) -> TensorType:
    """Flattens all but the batch dimension of ``obs``.

    Args:
        obs: The tensor [BATCH, ...].
        framework: "tf", "tf2", "tfe", "torch" or "numpy".

    Returns:
        The tensor reshaped to [BATCH, -1].
    """
    if framework in ("tf", "tf2", "tfe"):
        from rlpolicy.utils.framework import try_import_tf

        _, tf, _ = try_import_tf()
        # numpy inputs (eager calls) have a plain tuple shape: go through TensorShape.
        dims = tf.TensorShape(obs.shape).as_list()[1:]
        if None in dims:
            return tf.reshape(obs, tf.stack([tf.shape(obs)[0], -1]))
        return tf.reshape(obs, [-1, int(np.prod(dims))])
    if framework == "torch":
        from rlpolicy.utils.framework import try_import_torch

        torch, _ = try_import_torch()
        return torch.flatten(obs, start_dim=1)
    if framework == "numpy":
        return np.reshape(obs, (obs.shape[0], -1))
    raise NotImplementedError(
        f"flatten: framework {framework!r} not supported; use one of tf, tf2, tfe, torch, numpy"
    )


def _resolve_tensorlib(tensorlib: Any) -> Any:
    if tensorlib in ("tf", "tf2", "tfe"):
        from rlpolicy.utils.framework import try_import_tf

        return try_import_tf()[1]
    if tensorlib == "torch":
        from rlpolicy.utils.framework import try_import_torch

        return try_import_torch()[0]
    if tensorlib == "numpy" or tensorlib is None:
        return np
    return tensorlib


@DeveloperAPI
def restore_original_dimensions(
    obs: TensorType, obs_space: gym.spaces.Space, tensorlib: Any = "tf"
) -> TensorStructType:
    """Unpacks flat Dict/Tuple/Repeated observations into their original structure.

    Args:
        obs: The flat observation batch [..., flat_size].
        obs_space: The flat space; when it has an ``original_space``
            attribute, ``obs`` is unpacked according to that space.
        tensorlib: "tf", "tf2", "torch", "numpy" or a module with ``reshape``.

    Returns:
        ``obs`` itself for non-nested spaces, else a (nested) OrderedDict /
        list of tensors shaped [..., *sub_space_shape]. A Repeated part
        becomes a ``RepeatedValues`` (as RLlib 1.11): ``lengths`` is slot 0
        of its flat slice ([...]), ``values`` the rest reshaped to
        [..., max_len, item_size] and unpacked further by the child space.
    """
    lib = _resolve_tensorlib(tensorlib)
    original_space = getattr(obs_space, "original_space", obs_space)
    return _unpack_obs(obs, original_space, tensorlib=lib)


# Preprocessors of recently unpacked spaces, keyed by id(space).
_cache: Dict[int, Any] = {}
_STRUCT_SPACES = (gym.spaces.Dict, gym.spaces.Tuple, Repeated)


def _unpack_obs(obs: TensorType, space: gym.spaces.Space, tensorlib: Any = np) -> TensorStructType:
    """Splits a flat [..., flat_size] tensor into the sub-observations of ``space``."""
    if not isinstance(space, _STRUCT_SPACES):
        return obs
    if isinstance(obs, (dict, list, tuple, RepeatedValues)):  # already unpacked
        return obs
    prep = _cached_preprocessor(space)
    shape = _static_shape(obs)
    if shape is None or len(shape) < 2 or shape[-1] != prep.shape[0]:
        raise ValueError(
            f"expected a flat observation of shape [..., {prep.shape[0]}] for space {space}, "
            f"got {tuple(shape) if shape is not None else None}"
        )
    batch_dims = _batch_dims(obs, shape, tensorlib)
    if isinstance(space, Repeated):
        return _unpack_repeated(obs, space, prep, batch_dims, tensorlib)
    offset, parts = 0, []
    for p, sub in zip(prep.preprocessors, _sub_spaces(space)):
        piece = obs[..., offset : offset + p.size]
        offset += p.size
        piece = tensorlib.reshape(piece, _target_shape(batch_dims, list(p.shape)))
        parts.append(_unpack_obs(piece, sub, tensorlib=tensorlib))
    if isinstance(space, gym.spaces.Tuple):
        return parts
    return OrderedDict(zip(space.spaces.keys(), parts))


def _unpack_repeated(
    obs: TensorType, space: Repeated, prep: Any, batch_dims: List[Any], tensorlib: Any
) -> RepeatedValues:
    # RLlib 1.11's layout: [..., 1 + max_len * item_size] -> lengths [...] and
    # items [..., max_len, item_size] (then unpacked by the child space).
    items = tensorlib.reshape(
        obs[..., 1:], _target_shape(batch_dims, [space.max_len, prep.child_preprocessor.size])
    )
    values = _unpack_obs(items, space.child_space, tensorlib=tensorlib)
    return RepeatedValues(values, lengths=obs[..., 0], max_len=space.max_len)


def _sub_spaces(space: gym.spaces.Space) -> Sequence[gym.spaces.Space]:
    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces.values())
    return list(cast(gym.spaces.Tuple, space).spaces)


def _batch_dims(obs: Any, shape: List[Optional[int]], tensorlib: Any) -> List[Any]:
    dims = shape[:-1]
    if any(d is None for d in dims):
        # Unknown (TF graph) batch dims: -1 works for a single unknown dim.
        if sum(d is None for d in dims) == 1:
            return [-1 if d is None else d for d in dims]
        dyn = tensorlib.shape(obs)
        return [dyn[i] if d is None else d for i, d in enumerate(dims)]
    return list(dims)


def _target_shape(batch_dims: List[Any], tail: List[int]) -> List[Any]:
    """``batch_dims + tail``, with -1 for a static leading batch dim: a traced
    (TorchScript) model must not bake in the batch size it was traced with.
    (Not for zero-size tails, where -1 would be ambiguous.)"""
    if batch_dims and isinstance(batch_dims[0], int) and int(np.prod(tail)) > 0:
        return [-1] + list(batch_dims[1:]) + list(tail)
    return list(batch_dims) + list(tail)


def _cached_preprocessor(space: gym.spaces.Space) -> Any:
    from rlpolicy.models.preprocessors import get_preprocessor

    prep = _cache.get(id(space))
    if prep is None or prep._obs_space is not space:
        prep = get_preprocessor(space)(space)
        if len(_cache) < 999:
            _cache[id(space)] = prep
    return prep
