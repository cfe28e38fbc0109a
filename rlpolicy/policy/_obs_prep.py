"""Dict/Tuple/Repeated observations: one preprocessing shared by policies and samplers.

RLlib 1.11 preprocesses nested observations in the RolloutWorker (one-hot for
discrete parts, everything flattened and concatenated) and hands the policy
the flat preprocessed ``Box`` (with the raw space as ``original_space``). A
policy built directly on the raw Dict/Tuple space fails there. Here every
policy turns such a space into that same flat space when it is built
(:func:`prepare_observation_space`), and accepts raw nested observations at
its entry points (its :class:`ObsFlattener`, ``policy.obs_flattener``), so a
policy built directly and one built by a RolloutWorker are the same policy, and
the worker's samples and the policy's own preprocessing cannot disagree: both
go through the flattener's preprocessor.

With ``_disable_preprocessor_api`` set, spaces and observations are left
exactly as given. Nothing here imports torch or tensorflow.
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np

from rlpolicy.models.preprocessors import OneHotPreprocessor, get_preprocessor, stack_rows
from rlpolicy.utils.spaces.repeated import Repeated
from rlpolicy.utils.typing import ObsPrepPolicy

_NESTED = (gym.spaces.Dict, gym.spaces.Tuple, Repeated)
# A policy a RolloutWorker built on a Discrete/MultiDiscrete env works on the one-hot
# Box (RLlib 1.11's preprocessor), with the raw space as ``original_space``.
_ONE_HOT = (gym.spaces.Discrete, gym.spaces.MultiDiscrete)


def prepare_observation_space(space: gym.Space, config: Optional[dict]) -> gym.Space:
    """The observation space a policy works on.

    Args:
        space: The space the policy was given.
        config: The (possibly partial) policy config.

    Returns:
        For a raw Dict/Tuple/Repeated space, the flat float32 Box of its preprocessed
        observations, carrying ``space`` as ``original_space`` (what RLlib's
        RolloutWorker gives its policies); any other space unchanged.
    """
    config = config or {}
    if (
        not isinstance(space, _NESTED)
        or hasattr(space, "original_space")
        or config.get("_disable_preprocessor_api", False)
    ):
        return space
    return get_preprocessor(space)(space, config.get("model") or None).observation_space


class ObsFlattener:
    """One policy's preparation of raw observations, built once from its observation space.

    ``prep`` is the preprocessor of the raw Dict/Tuple/Repeated space (or the one-hot
    encoder of a policy on a worker's one-hot Box for a Discrete / MultiDiscrete env)
    that ``space.original_space`` describes, or None; ``raw_space`` is that raw space.
    ``Policy.__init__`` builds one as ``policy.obs_flattener``.
    """

    def __init__(self, space: Optional[gym.Space], model_config: Optional[dict] = None):
        original = getattr(space, "original_space", None)
        self.prep: Any = None
        if isinstance(original, _NESTED):
            self.prep = get_preprocessor(original)(original, model_config)
        elif isinstance(original, _ONE_HOT) and isinstance(space, gym.spaces.Box):
            self.prep = OneHotPreprocessor(original, None)
        self.raw_space: Optional[gym.Space] = original if self.prep is not None else None

    def batch(self, obs: Any) -> Any:
        """Raw nested observations -> the flat [B, size] float32 batch; else ``obs``.

        Accepted raw forms: a dict (Dict space) or tuple (Tuple space) of
        batched leaves, or a list of single raw observations (for a Repeated
        space: a list of lists of items, or an array [B, n, *item shape]).
        Flat batches (arrays, tensors, lists of flat rows) come back unchanged.

        Raises:
            ValueError: A raw batch that does not fit the space (the message
                names the key path, e.g. ``observation['pos']``).
        """
        prep, raw = self.prep, self.raw_space
        if prep is None:
            return obs
        if isinstance(raw, _ONE_HOT):
            return self._one_hot_if_raw(obs, batched=True)
        if not isinstance(obs, (dict, tuple, list)):
            # Arrays and tensors are flat batches, except an array of raw Repeated lists.
            if not (isinstance(obs, np.ndarray) and self._is_raw_repeated_batch(obs)):
                return obs
        if isinstance(raw, Repeated):
            return prep.transform_batch(obs) if self._is_raw_repeated_batch(obs) else obs
        if isinstance(obs, list):
            if not obs or not isinstance(obs[0], (dict, tuple, list)):
                return obs  # flat rows (or empty): the usual checks see them
            obs = stack_rows(obs, raw)
        return prep.transform_batch(obs)

    def single(self, obs: Any) -> Any:
        """One raw observation -> its flat preprocessed vector (samplers use this)."""
        prep, raw = self.prep, self.raw_space
        if prep is None:
            return obs
        if isinstance(raw, _ONE_HOT):
            return self._one_hot_if_raw(obs, batched=False)
        if isinstance(obs, np.ndarray) and (not isinstance(raw, Repeated) or obs.shape == prep.shape):
            return obs
        return prep.transform_batch(stack_rows([obs], raw))[0]

    def single_list(self, obs: Any) -> Any:
        """One raw observation of a space holding a Repeated -> its flat vector; else ``obs``.

        ``compute_single_action`` batches other observations leaf by leaf (a plain
        Policy subclass sees them nested, as in RLlib 1.11); a Repeated list's
        items would be read as rows that way, so such observations are flattened
        whole first.
        """
        if self.prep is None or not _holds_repeated(self.raw_space):
            return obs
        return self.single(obs)

    def input_dict(self, input_dict: Any, columns: tuple = ("obs", "new_obs")) -> Any:
        """``input_dict`` with raw nested ``columns`` flattened (a shallow copy if any is)."""
        changed = self._flattened_columns(input_dict, columns)
        if not changed:
            return input_dict
        # A SampleBatch keeps its flags (seq_lens, is_training, ...) in a shallow copy.
        copy = (
            input_dict.copy(shallow=True) if hasattr(input_dict, "set_get_interceptor") else dict(input_dict)
        )
        for col, flat in changed.items():
            copy[col] = flat  # (item assignment: SampleBatch tracks its keys there)
        return copy

    def batch_in_place(self, batch: Any) -> Any:
        """Replaces raw nested ``obs`` / ``new_obs`` columns of ``batch`` by flat ones.

        For ``postprocess_trajectory``, which by RLlib's contract adds its columns
        to the batch it is given: the batch keeps being the caller's object.
        """
        for col, flat in self._flattened_columns(batch, ("obs", "new_obs")).items():
            batch[col] = flat
        return batch

    def _flattened_columns(self, batch: Any, columns: tuple) -> dict:
        """The flat versions of those ``columns`` of ``batch`` that hold raw nested observations."""
        if self.prep is None:
            return {}
        changed = {}
        for col in columns:
            if col in batch:
                value = batch[col]
                flat = self.batch(value)
                if flat is not value:
                    changed[col] = flat
        return changed

    def _one_hot_if_raw(self, obs: Any, batched: bool) -> Any:
        """Raw Discrete/MultiDiscrete observations (integers of the raw space's shape,
        batched or single) -> their one-hot encoding; anything else (the encoded
        float rows, tensors) unchanged."""
        if not isinstance(obs, (list, tuple, int, np.integer, np.ndarray)) or isinstance(obs, bool):
            return obs
        raw = np.asarray(obs)
        shape = (
            self.raw_space.shape if self.raw_space is not None else ()
        )  # () for Discrete, (k,) for MultiDiscrete
        if (
            raw.dtype.kind not in "iu"
            or raw.shape[1 if batched else 0 :] != shape
            or (batched and raw.ndim == 0)
        ):
            return obs
        return self.prep.transform_batch(raw) if batched else self.prep.transform_batch(raw[None])[0]

    def _is_raw_repeated_batch(self, obs: Any) -> bool:
        """Whether ``obs`` is a batch of raw Repeated lists (not flat [B, size] rows).

        A flat batch is numeric and exactly [B, size]; raw lists have at most
        ``max_len`` < size items, or items of their own shape, or are ragged.
        """
        if not isinstance(self.raw_space, Repeated):
            return False
        if isinstance(obs, np.ndarray):
            arr = obs
        else:
            try:
                arr = np.asarray(obs)
            except ValueError:  # ragged: lists of different lengths
                return True
        return not (arr.dtype != object and arr.ndim == 2 and arr.shape[1] == self.prep.size)


def _holds_repeated(space: Optional[gym.Space]) -> bool:
    if isinstance(space, Repeated):
        return True
    if isinstance(space, gym.spaces.Dict):
        return any(_holds_repeated(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return any(_holds_repeated(s) for s in space.spaces)
    return False


def flattener_of(policy: ObsPrepPolicy) -> ObsFlattener:
    """``policy.obs_flattener`` (every rlpolicy Policy has one), else one built now from
    ``policy.observation_space`` (a duck-typed policy: nothing is stored on it)."""
    flattener = getattr(policy, "obs_flattener", None)
    if flattener is None:
        flattener = ObsFlattener(getattr(policy, "observation_space", None), _model_config(policy))
    return flattener


def _model_config(policy: ObsPrepPolicy) -> Optional[dict]:
    return (getattr(policy, "config", None) or {}).get("model")


def flatten_single_obs(policy: ObsPrepPolicy, obs: Any) -> Any:
    """``ObsFlattener.single`` of ``policy``'s flattener (samplers, the CLI and exports
    hold a policy, not its flattener)."""
    return flattener_of(policy).single(obs)


__all__ = [
    "ObsFlattener",
    "flattener_of",
    "prepare_observation_space",
    "flatten_single_obs",
    "stack_rows",
]
