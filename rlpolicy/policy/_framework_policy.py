"""``FrameworkPolicy``: the public acting, learning and state methods shared by
the three framework policies.

``TorchPolicy``, ``TFPolicy`` and ``EagerTFPolicy`` derive from
``FrameworkPolicy(Policy)``. It writes the order of the steps of every public
method once: the lock, batch preparation
and input checks, the learn callback, the tower buffers, what ``get_state``
holds and in which order ``set_state`` checks and assigns. The framework class
supplies only the steps that touch tensors (the ``# framework step`` methods
below); everything else is here.

Steps a framework class implements (abstract here):

- ``_compute_actions_step(input_dict, state_batches, explore, timestep, episodes)``
- ``_log_likelihoods_step(actions, obs_batch, state_batches, prev_action_batch,
  prev_reward_batch, actions_normalized)``
- ``_learn_step(batch)``: one SGD step on a prepared train batch; returns the stats.
- ``_device_slices(batch)``: the prepared batch as one batch per device
  (padded, converted, placed), for ``load_batch_into_buffer``.
- ``_learn_on_device_batches(batches, buffer_index)``: one SGD step on one
  minibatch per device, taken from a loaded buffer.
- ``_optimizer_state()``, ``_check_optimizer_state(values)``,
  ``_set_optimizer_state(checked)``: the optimizer part of the policy state.

Optional steps with a default here: ``_check_can_learn(what)``,
``_state_weights()``, ``_set_exploration_state(state)``.

Classes made by a policy factory (``build_policy_class``, ``build_tf_policy``)
carry ``_resolve_dispatch(cls)``: when such a class (or a subclass of it) is
created, :meth:`FrameworkPolicy.__init_subclass__` stores its result, the
table of what each hook-backed method runs (a hook, or the implementation it
falls through to), in ``cls._dispatch``; the methods read it, no MRO walk per call.

The framework class calls ``self._init_tower_buffers(num_devices)`` in its
constructor, once its devices are known.

The lock: every public method that reads or writes the model, optimizer or
counters runs under ``@with_lock`` (RLlib 1.11 exports it as
``torch_policy.with_lock``), holding ``self._lock``, one re-entrant lock per
policy, so no forward pass or session run sees weights half-assigned by another
thread. It is made on first use (a graph policy's methods may run during its
construction, before any ``__init__`` line could make it); a class may also
create it itself. Code that needs the lock without a method uses
``with policy_lock(self):``.
"""

from __future__ import annotations

import functools
import threading
from abc import abstractmethod
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Tuple, TypeVar

import numpy as np

from rlpolicy._core.action_dist_fn import resolve_action_distribution_fn
from rlpolicy._core.tower_buffers import (
    EXACT_KEY,
    TowerBuffers,
    device_minibatch_size,
    exact_chunk_count,
)
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch

STATE_KEYS = ("weights", "global_timestep")
_STATE_IN = "state_in_"

F = TypeVar("F", bound=Callable[..., Any])


def policy_lock(obj: Any) -> Any:
    """``obj._lock``, created as a ``threading.RLock`` if ``obj`` has none yet.

    ``dict.setdefault`` is atomic, so two threads racing on the first call
    still end up sharing one lock.
    """
    lock = obj.__dict__.get("_lock")
    if lock is None:
        lock = obj.__dict__.setdefault("_lock", threading.RLock())
    return lock


def with_lock(method: F) -> F:
    """Runs ``method`` holding the instance's re-entrant lock (see :func:`policy_lock`)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.__dict__.get("_lock") or policy_lock(self):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def as_sample_batch(batch: Any) -> SampleBatch:
    """``batch`` itself if it is a SampleBatch, else ``SampleBatch(batch)``.

    RLlib takes a plain dict passed to the learning methods as a SampleBatch.

    Raises:
        TypeError: If ``batch`` is neither a SampleBatch nor a mapping.
    """
    if isinstance(batch, SampleBatch):
        return batch
    if not isinstance(batch, Mapping):
        raise TypeError(f"expected a SampleBatch or a dict of columns, got {type(batch).__name__}")
    return SampleBatch(dict(batch))


def state_in_columns(input_dict: Any) -> List[Any]:
    """The ``state_in_<i>`` columns of ``input_dict``, ordered by ``i``."""
    keys = [k for k in input_dict.keys() if isinstance(k, str) and k.startswith(_STATE_IN)]
    keys.sort(key=lambda k: int(k[len(_STATE_IN) :]) if k[len(_STATE_IN) :].isdigit() else -1)
    return [input_dict[k] for k in keys]


# The flags of an acting batch that compute_actions builds.
_ACTING_FLAGS = {"_is_training": False, "_time_major": None, "_zero_padded": False, "_max_seq_len": None}


def _acting_batch(columns: Dict[str, Any]) -> SampleBatch:
    """``SampleBatch(columns, _is_training=False)``; built without the constructor's
    per-column checks when every column but ``infos`` is a batched numpy array
    with the observations' row count (the common case)."""
    obs = columns[SampleBatch.OBS]
    if type(obs) is np.ndarray and obs.ndim > 0:
        n = len(obs)
        for k, v in columns.items():
            if k != SampleBatch.INFOS and not (type(v) is np.ndarray and v.ndim > 0 and len(v) == n):
                break
        else:
            return SampleBatch._trusted(columns, n, _ACTING_FLAGS)
    return SampleBatch(columns, _is_training=False)


class FrameworkPolicy(Policy):
    """Base of the torch, graph-TF and eager policies (see the module doc).

    It has no ``__init__`` of its own (``Policy``'s); it relies on
    ``self._tower_buffers``, which :meth:`_init_tower_buffers` creates.
    """

    _tower_buffers: TowerBuffers
    # K fixed chunks per minibatch with config["_deterministic_towers"]; 0 when off.
    _exact_chunks: int = 0
    exploration: Any  # (the framework classes make one in __init__)
    # A factory-built class's hook table (see the module doc); {} elsewhere.
    _dispatch: ClassVar[Dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        resolve = getattr(cls, "_resolve_dispatch", None)
        if resolve is not None:
            cls._dispatch = resolve(cls)

    def _init_tower_buffers(self, num_devices: int, exact_supported: bool = False) -> None:
        """Creates ``self._tower_buffers``: ``config["num_multi_gpu_tower_stacks"]``
        buffers of ``num_devices`` batches each, and reads
        ``config["_deterministic_towers"]`` into ``self._exact_chunks``.

        Raises:
            ValueError: If ``_deterministic_towers`` is invalid for ``num_devices``,
                or set while the framework class does not support it
                (``exact_supported`` False).
        """
        self._tower_buffers = TowerBuffers(self.config.get("num_multi_gpu_tower_stacks", 1), num_devices)
        self._exact_chunks = exact_chunk_count(self.config, num_devices)
        if self._exact_chunks and not exact_supported:
            raise ValueError(
                f"config['{EXACT_KEY}'] is not supported by "
                f"{type(self).__name__}; use a torch or graph-mode TF policy, "
                "or leave it False"
            )

    # ------------------------------------------------------------------ acting

    def compute_actions(
        self,
        obs_batch: Any,
        state_batches: Optional[List[Any]] = None,
        prev_action_batch: Any = None,
        prev_reward_batch: Any = None,
        info_batch: Optional[Dict[str, list]] = None,
        episodes: Optional[List[Any]] = None,
        explore: Optional[bool] = None,
        timestep: Optional[int] = None,
        **kwargs: Any,
    ) -> Tuple[Any, List[Any], Dict[str, Any]]:
        """Computes actions for a batch of observations.

        Raw nested observations are flattened and the inputs checked (errors
        name ``compute_actions``); one input dict (``obs``, ``state_in_<i>``,
        ``prev_actions``, ``prev_rewards``, ``infos``; ``is_training`` False)
        then takes the same path as :meth:`compute_actions_from_input_dict`'s
        (``_compute_actions_checked``), without checking it a second time. As in
        RLlib 1.11's torch and graph-TF policies, an override of
        ``compute_actions_from_input_dict`` does not change this method.
        """
        obs_batch = self.obs_flattener.batch(obs_batch)
        self._check_acting_inputs(
            obs_batch,
            state_batches,
            [
                c
                for c, v in (
                    (SampleBatch.PREV_ACTIONS, prev_action_batch),
                    (SampleBatch.PREV_REWARDS, prev_reward_batch),
                )
                if v is not None
            ],
            "compute_actions",
        )
        columns: Dict[str, Any] = {SampleBatch.OBS: obs_batch}
        for i, s in enumerate(state_batches or []):
            columns[f"{_STATE_IN}{i}"] = s
        if prev_action_batch is not None:
            columns[SampleBatch.PREV_ACTIONS] = prev_action_batch
        if prev_reward_batch is not None:
            columns[SampleBatch.PREV_REWARDS] = prev_reward_batch
        if info_batch is not None:
            columns[SampleBatch.INFOS] = info_batch
        # (no state_in_<i> columns to look for when no state was passed)
        states: Optional[List[Any]] = None if state_batches else []
        return self._compute_actions_checked(_acting_batch(columns), explore, timestep, episodes, states)

    def compute_actions_from_input_dict(
        self,
        input_dict: Any,
        explore: Optional[bool] = None,
        timestep: Optional[int] = None,
        episodes: Optional[List[Any]] = None,
        **kwargs: Any,
    ) -> Tuple[Any, List[Any], Dict[str, Any]]:
        """Computes actions from an input dict (a SampleBatch or a dict of columns).

        Raw nested ``obs`` are flattened and the columns checked (errors name
        ``compute_actions_from_input_dict``); then ``_compute_actions_checked``.

        Returns:
            ``(actions, state_outs, extra_fetches)`` as numpy structures.
        """
        input_dict = self.obs_flattener.input_dict(input_dict)
        self._check_acting_input_dict(input_dict, "compute_actions_from_input_dict")
        return self._compute_actions_checked(input_dict, explore, timestep, episodes)

    @with_lock
    def _compute_actions_checked(
        self,
        input_dict: Any,
        explore: Optional[bool],
        timestep: Optional[int],
        episodes: Optional[List[Any]],
        states: Optional[List[Any]] = None,
    ) -> Tuple[Any, List[Any], Dict[str, Any]]:
        """The one acting path after the checks, under the policy lock: ``explore`` /
        ``timestep`` of None become ``config["explore"]`` / ``global_timestep``,
        then the framework's ``_compute_actions_step`` (``states``: the
        ``state_in_<i>`` columns when the caller knows them, else looked up)."""
        if explore is None:
            explore = self.config["explore"]
        if timestep is None:
            timestep = self.global_timestep
        if states is None:
            states = state_in_columns(input_dict)
        return self._compute_actions_step(input_dict, states, explore, timestep, episodes)

    @with_lock
    def compute_log_likelihoods(
        self,
        actions: Any,
        obs_batch: Any,
        state_batches: Optional[List[Any]] = None,
        prev_action_batch: Any = None,
        prev_reward_batch: Any = None,
        actions_normalized: bool = True,
    ) -> Any:
        """Log-likelihoods of ``actions`` under the policy's action distribution
        for ``obs_batch`` (raw nested observations are flattened first)."""
        obs_batch = self.obs_flattener.batch(obs_batch)
        return self._log_likelihoods_step(
            actions, obs_batch, state_batches, prev_action_batch, prev_reward_batch, actions_normalized
        )

    @abstractmethod
    def _compute_actions_step(
        self,
        input_dict: Any,
        state_batches: List[Any],
        explore: Any,
        timestep: Any,
        episodes: Optional[List[Any]],
    ) -> Tuple[Any, List[Any], Dict[str, Any]]:
        """Framework step: forward pass, sampling and exploration on a checked
        input dict (its ``state_in_<i>`` columns, as given, are ``state_batches``);
        advances ``global_timestep``; returns numpy structures."""

    @abstractmethod
    def _log_likelihoods_step(
        self,
        actions: Any,
        obs_batch: Any,
        state_batches: Optional[List[Any]],
        prev_action_batch: Any,
        prev_reward_batch: Any,
        actions_normalized: bool,
    ) -> Any:
        """Framework step of :meth:`compute_log_likelihoods` (``obs_batch`` is flat)."""

    def _dist_fn_call(self, fn: Callable) -> Any:
        """How to call ``fn`` (an ``action_distribution_fn``): its signature is read
        once and kept on the policy while the policy's function stays ``fn``."""
        call = self.__dict__.get("_resolved_dist_fn")
        if call is None or call.fn is not fn:
            call = self._resolved_dist_fn = resolve_action_distribution_fn(fn)
        return call

    # ------------------------------------------------------------------ learning

    def _check_can_learn(self, what: str) -> None:
        """Raises if the policy cannot learn (e.g. it has no loss); ``what`` names
        the public method for the message. The default accepts."""
        return None

    def _train_batch(self, batch: Any, what: str) -> SampleBatch:
        """``batch`` made ready for a learning step of public method ``what``.

        In this order: ``_check_can_learn(what)``; a dict becomes a SampleBatch;
        raw nested ``obs``/``new_obs`` are flattened (into a shallow copy);
        the loss columns and observations are checked; the batch is marked as
        training. A rejected batch changes nothing.
        """
        self._check_can_learn(what)
        batch = self.obs_flattener.input_dict(as_sample_batch(batch))
        self._check_train_batch(batch, what)
        batch.set_training(True)
        return batch

    @with_lock
    def learn_on_batch(self, postprocessed_batch: Any) -> Dict[str, Any]:
        """One SGD step on ``postprocessed_batch`` (a dict is taken as a SampleBatch).

        The batch is prepared (:meth:`_train_batch`), the callbacks'
        ``on_learn_on_batch`` runs on it with a fresh result dict, then the
        framework's ``_learn_step``; the result dict is returned under
        ``"custom_metrics"`` in the stats.
        """
        batch = self._train_batch(postprocessed_batch, "learn_on_batch")
        learn_stats: Dict[str, Any] = {}
        self._run_learn_callback(batch, learn_stats)
        stats = self._learn_step(batch)
        stats["custom_metrics"] = learn_stats
        return stats

    @abstractmethod
    def _learn_step(self, batch: SampleBatch) -> Dict[str, Any]:
        """Framework step: one SGD step on a prepared batch; returns the stats dict."""

    # ------------------------------------------------------------------ tower buffers

    @with_lock
    def load_batch_into_buffer(self, batch: Any, buffer_index: int = 0) -> int:
        """Loads ``batch`` into buffer ``buffer_index``, one slice per device.

        The index is checked first, then the batch is prepared like
        ``learn_on_batch``'s; the framework's ``_device_slices`` pads, converts,
        splits and places it.

        Returns:
            The number of rows loaded per device.
        """
        self._tower_buffers.check_index(buffer_index)
        batch = self._train_batch(batch, "load_batch_into_buffer")
        return self._tower_buffers.store(buffer_index, self._device_slices(batch))

    def get_num_samples_loaded_into_buffer(self, buffer_index: int = 0) -> int:
        """Rows per device loaded in buffer ``buffer_index`` (0 if none)."""
        return self._tower_buffers.num_loaded(buffer_index)

    @with_lock
    def learn_on_loaded_batch(self, offset: int = 0, buffer_index: int = 0) -> Dict[str, Any]:
        """One SGD step on rows ``[offset, offset + per-device minibatch)`` of each
        device's loaded slice (the whole slices when the minibatch covers them).

        The per-device minibatch is ``(sgd_minibatch_size or train_batch_size)
        // num_devices`` (RLlib 1.11).
        """
        size = device_minibatch_size(self.config, self._tower_buffers.num_devices)
        batches = self._tower_buffers.minibatches(buffer_index, offset, size)
        return self._learn_on_device_batches(batches, buffer_index)

    @abstractmethod
    def _device_slices(self, batch: SampleBatch) -> List[Any]:
        """Framework step: the prepared batch as one (padded, placed) batch per device."""

    @abstractmethod
    def _learn_on_device_batches(self, batches: List[Any], buffer_index: int) -> Dict[str, Any]:
        """Framework step: one SGD step on one minibatch per device; returns the stats."""

    # ------------------------------------------------------------------ state

    def _state_weights(self) -> Any:
        """The weights as ``get_state`` stores them (default: ``get_weights()``)."""
        return self.get_weights()

    @with_lock
    def get_state(self) -> Dict[str, Any]:
        """The policy state: ``weights``, ``global_timestep``, and where present
        ``_optimizer_variables`` and ``_exploration_state`` (numpy copies)."""
        state: Dict[str, Any] = {"weights": self._state_weights(), "global_timestep": self.global_timestep}
        optimizer = self._optimizer_state()
        if optimizer is not None:
            state["_optimizer_variables"] = optimizer
        if getattr(self, "exploration", None) is not None:
            state["_exploration_state"] = self.get_exploration_state()
        return state

    @with_lock
    def set_state(self, state: Any) -> None:
        """Restores a :meth:`get_state` snapshot.

        Everything is checked before anything changes: the state's keys, the
        optimizer values (``_check_optimizer_state``) and the weights
        (``set_weights`` checks all of them before it assigns any). Then the
        weights, ``global_timestep``, optimizer and exploration state are set.

        Raises:
            ValueError: A missing key, or values that do not fit the policy;
                the policy is unchanged then.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"set_state: expected the dict get_state() returns, got {type(state).__name__}")
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"set_state: the state lacks key(s) {missing}; it has {sorted(map(str, state))}")
        try:
            timestep = int(state["global_timestep"])  # (kept a Python int, as it is counted)
        except (TypeError, ValueError):
            raise ValueError(
                f"set_state: state['global_timestep']={state['global_timestep']!r} is not an integer"
            ) from None
        checked = self._check_optimizer_state(state.get("_optimizer_variables"))
        self.set_weights(state["weights"])
        self.global_timestep = timestep
        if checked is not None:
            self._set_optimizer_state(checked)
        if getattr(self, "exploration", None) is not None and "_exploration_state" in state:
            self._set_exploration_state(state["_exploration_state"])

    def _set_exploration_state(self, exploration_state: Any) -> None:
        """Framework step with a default: hands the state to ``self.exploration``."""
        self.exploration.set_state(state=exploration_state)

    @abstractmethod
    def _optimizer_state(self) -> Any:
        """Framework step: numpy copies of the optimizer state, or None if there is none."""

    @abstractmethod
    def _check_optimizer_state(self, values: Any) -> Any:
        """Framework step: checks ``state["_optimizer_variables"]`` (None if absent)
        against the optimizers without changing them.

        Returns:
            What ``_set_optimizer_state`` assigns, or None for nothing to assign.

        Raises:
            ValueError: If the values do not fit the optimizers.
        """

    @abstractmethod
    def _set_optimizer_state(self, checked: Any) -> None:
        """Framework step: assigns what ``_check_optimizer_state`` returned."""

    def _export_action_pipeline(
        self,
        exporter: Any,
        export_dir: str,
        onnx: Optional[int],
        action_sampler_fn: Any,
        action_distribution_fn: Any,
        **framework_kwargs: Any,
    ) -> None:
        """``export_model(..., pipeline=True)`` for every framework: refuses an
        ``action_sampler_fn``, traces an ``action_distribution_fn`` with explore
        off (as ``dist_inputs_fn``; graph TF passes None for both: its acting
        graph already holds the distribution inputs), and hands ``exporter`` the
        policy's data; the exporter's checking ``compute_actions`` calls leave
        ``global_timestep`` as it was."""
        if action_sampler_fn:
            raise ValueError(
                f"{type(self).__name__} computes actions with an action_sampler_fn; "
                "its action pipeline cannot be exported (pipeline=True)"
            )
        if action_distribution_fn:
            call = resolve_action_distribution_fn(action_distribution_fn)

            def dist_fn(model: Any, input_dict: Any, state_batches: Any, seq_lens: Any) -> Any:
                return call(
                    self,
                    model,
                    input_dict,
                    state_batches=state_batches,
                    seq_lens=seq_lens,
                    explore=False,
                    timestep=None,
                    is_training=False,
                )

            framework_kwargs["dist_inputs_fn"] = dist_fn
        policy: Any = self
        timestep = policy.global_timestep
        try:
            exporter(
                export_dir,
                model=policy.model,
                dist_class=policy.dist_class,
                observation_space=policy.observation_space,
                action_space=policy.action_space,
                config=policy.config,
                compute_actions=policy.compute_actions,
                initial_state=policy.get_initial_state(),
                onnx=onnx,
                exploration=type(policy.exploration).__name__,
                **framework_kwargs,
            )
        finally:
            policy.global_timestep = timestep


__all__ = ["FrameworkPolicy", "as_sample_batch", "policy_lock", "state_in_columns", "with_lock"]
