"""The framework-independent ``Policy`` base class (RLlib 1.11's ``ray.rllib.policy.policy``).

The logic shared by every framework lives in ``rlpolicy._core``:
``action_flow`` (single-action batching), ``loss_init`` (default view
requirements, dummy-batch loss initialisation, pruning) and ``checkpoint``
(pickle-free saving). This module wires them to RLlib's method names.
"""

from __future__ import annotations

import copy
import logging
import os
from abc import ABCMeta, abstractmethod
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar, Union

import gymnasium as gym
import numpy as np

from rlpolicy._core import (
    action_flow,
    checkpoint,
    checkpoint_checks,
    checkpoint_trust,
    input_checks,
    loss_init,
)
from rlpolicy.policy._callbacks import DefaultCallbacks
from rlpolicy.policy._obs_prep import ObsFlattener, prepare_observation_space
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.annotations import (
    DeveloperAPI,
    ExperimentalAPI,
    OverrideToImplementCustomLogic,
    PublicAPI,
)
from rlpolicy.utils.spaces.space_utils import get_base_struct_from_space
from rlpolicy.utils.typing import (
    AgentID,
    ModelGradients,
    ModelWeights,
    TensorStructType,
    TensorType,
    TrainerConfigDict,
)

if TYPE_CHECKING:  # pragma: no cover
    from rlpolicy.models.action_dist import ActionDistribution
    from rlpolicy.models.modelv2 import ModelV2

    Episode = Any  # rlpolicy.evaluation.episode.Episode, a layer above: hinted, not imported

logger = logging.getLogger(__name__)
T = TypeVar("T")


@PublicAPI
class PolicySpec(namedtuple("PolicySpec", ["policy_class", "observation_space", "action_space", "config"])):
    """How to build one policy of a multi-agent setup; every field may be None.

    ``policy_class`` None means the trainer's default policy class; spaces
    None mean "infer from the env"; ``config`` holds overrides of the
    trainer's config for this policy.
    """

    def __new__(
        cls,
        policy_class: Optional[type] = None,
        observation_space: Optional[gym.Space] = None,
        action_space: Optional[gym.Space] = None,
        config: Optional[dict] = None,
    ) -> "PolicySpec":
        return super().__new__(cls, policy_class, observation_space, action_space, config)


def _completed_config(config: Optional[dict], defaults: Optional[dict] = None, where: str = "Policy") -> dict:
    # The one place a policy config is completed, checked and validated: a new
    # dict (defaults deep-copied, the caller's dict deep-copied and left as it
    # was), so no two policies share a nested dict and no default changes.
    from rlpolicy._core.config import check_config

    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise TypeError(f"Policy config must be a dict, got {type(config).__name__}")
    return check_config(config, defaults, where=where)


def complete_policy_config(policy: "Policy", config: Optional[dict], defaults: Optional[dict] = None) -> dict:
    """Completes ``config`` for ``policy`` once, before or in ``Policy.__init__``.

    For constructors that need the complete config early (``build_policy_class``
    classes: their hooks and model run before ``TorchPolicy.__init__``). The
    result, passed on through the base-class constructors, is returned as it
    is by every later call (and kept by ``Policy.__init__``) rather than
    completed and checked a second time.

    Args:
        policy: The policy being constructed.
        config: The caller's (partial) config, or None. Not modified.
        defaults: The policy's default config (e.g. from ``get_default_config``);
            None: the class's ``_hooks.get_default_config()`` if it has one.

    Returns:
        The new, complete config dict.
    """
    return Policy._complete_config(policy, config, defaults)


def _same_config(a: dict, b: dict) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays or tensors inside: compare as different
        return False


def _copy_given_config(config: Optional[dict]) -> dict:
    # A deep copy (plain dicts/lists/tuples rebuilt directly, anything else by copy.deepcopy).
    from rlpolicy._core.config import deep_copy_plain

    if not isinstance(config, dict):
        return {}
    try:
        return deep_copy_plain(config)
    except Exception:  # an uncopyable value (a lock, an env handle): keep the top level
        return dict(config)


def _class_default_config(cls: type) -> Optional[dict]:
    # Classes made by the policy factories carry their get_default_config hook.
    hook = getattr(getattr(cls, "_hooks", None), "get_default_config", None)
    return hook() if callable(hook) else None


def _check_space(space: Any, arg: str) -> None:
    if not isinstance(space, gym.Space):
        raise TypeError(
            f"Policy {arg} must be a gymnasium.spaces.Space, got {space!r} ({type(space).__name__})"
        )


@DeveloperAPI
class Policy(metaclass=ABCMeta):
    """Base class of all policies: computes actions, postprocesses, learns.

    A policy owns its model(s) and answers four kinds of calls: computing
    actions from observations (or from a view-requirement input dict),
    postprocessing trajectories, computing losses and gradients from a train
    batch, and updating its weights (in one ``learn_on_batch`` step, or by
    ``load_batch_into_buffer`` followed by several ``learn_on_loaded_batch``
    minibatch steps). Framework subclasses (``TorchPolicy``, ``TFPolicy``) or
    the factories (``build_policy_class``, ``build_tf_policy``) are the usual
    way in; subclassing ``Policy`` directly works too (implement at least
    ``compute_actions``).
    """

    @DeveloperAPI
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: TrainerConfigDict):
        """Initializes the framework-independent part of a policy.

        Args:
            observation_space: Observation space of the policy.
            action_space: Action space of the policy.
            config: The policy/trainer config. ``self.config`` is a completed
                deep copy: missing keys are filled from ``COMMON_CONFIG`` (and
                ``model`` from ``MODEL_DEFAULTS``); the caller's dict is not
                modified. Unknown top-level keys are kept, with a warning.

        Raises:
            TypeError: If a space is not a gymnasium space or config not a dict.
            ValueError: If a config value is invalid (the message names the key).
        """
        _check_space(observation_space, "observation_space")
        _check_space(action_space, "action_space")
        # Raw Dict/Tuple spaces become their flat preprocessed Box (see policy._obs_prep).
        self.observation_space: gym.Space = prepare_observation_space(observation_space, config)
        self.action_space: gym.Space = action_space
        # Base struct of the action space, e.g. Dict({"a": Discrete(2)}) -> {"a": Discrete(2)}.
        self.action_space_struct = get_base_struct_from_space(action_space)
        self.config: TrainerConfigDict = complete_policy_config(self, config)
        del self.__dict__["_precompleted_config"]  # completion is over
        self.framework = self.config["framework"]
        # Raw Dict/Tuple/Repeated (or one-hot) observations -> the flat ones the policy works on.
        self.obs_flattener = ObsFlattener(self.observation_space, self.config.get("model"))
        self.callbacks: "DefaultCallbacks" = self._make_callbacks()
        # Broadcast down from the driver from time to time.
        self.global_timestep: int = 0
        # Action distribution class for sampling; set by subclasses.
        self.dist_class: Optional[Type] = None
        # Maximal view requirements; pruned later by the dummy-batch loss init.
        view_reqs = self._get_default_view_requirements()
        if not hasattr(self, "view_requirements"):
            self.view_requirements = view_reqs
        else:
            for k, v in view_reqs.items():
                self.view_requirements.setdefault(k, v)
        self._model_init_state_automatically_added = False

    def _complete_config(self, config: Optional[dict], defaults: Optional[dict] = None) -> dict:
        """``complete_policy_config(self, config, defaults)``: completes ``config`` once.

        The result is remembered (until ``Policy.__init__`` keeps it), so a
        later call with that very dict returns it unchanged; what the
        constructor was given is kept for checkpoints (see ``export_checkpoint``).
        """
        done = self.__dict__.get("_precompleted_config")
        if config is not None and config is done:
            return done
        if defaults is None:
            defaults = _class_default_config(type(self))
        full = _completed_config(config, defaults, type(self).__name__)
        self.__dict__["_precompleted_config"] = full
        self.__dict__.setdefault("_given_config", _copy_given_config(config))
        return full

    def _make_callbacks(self) -> "DefaultCallbacks":
        """``config["callbacks"]()`` (RLlib 1.11 only calls it), else a DefaultCallbacks.

        Any class or factory is accepted whose product has at least one of
        DefaultCallbacks' ``on_*`` hooks; a hook it lacks counts as
        DefaultCallbacks' (which does nothing), see ``_run_learn_callback``.

        Raises:
            ValueError: If the object made has none of the hooks.
        """
        factory = self.config["callbacks"]  # None or callable (checked with the config)
        if factory is None:
            return DefaultCallbacks()
        callbacks = factory()
        if not isinstance(callbacks, DefaultCallbacks):
            hooks = [n for n in dir(DefaultCallbacks) if n.startswith("on_")]
            if not any(callable(getattr(callbacks, n, None)) for n in hooks):
                raise ValueError(
                    f"config['callbacks']={factory!r} made a {type(callbacks).__name__} object "
                    f"with none of the callback methods ({', '.join(hooks)}); pass a "
                    "DefaultCallbacks subclass or a class with (some of) these methods"
                )
        return callbacks

    def _run_learn_callback(self, train_batch: SampleBatch, result: dict) -> None:
        """Calls ``self.callbacks.on_learn_on_batch`` if the callbacks object has it
        (a duck-typed callbacks class may leave it out: DefaultCallbacks' does nothing)."""
        hook = getattr(self.callbacks, "on_learn_on_batch", None)
        if hook is not None:
            hook(policy=self, train_batch=train_batch, result=result)

    # ------------------------------------------------------------------ acting
    @DeveloperAPI
    def compute_single_action(
        self,
        obs: Optional[TensorStructType] = None,
        state: Optional[List[TensorType]] = None,
        *,
        prev_action: Optional[TensorStructType] = None,
        prev_reward: Optional[TensorStructType] = None,
        info: dict = None,
        input_dict: Optional[SampleBatch] = None,
        episode: Optional["Episode"] = None,
        explore: Optional[bool] = None,
        timestep: Optional[int] = None,
        **kwargs,
    ) -> Tuple[TensorStructType, List[TensorType], Dict[str, TensorType]]:
        """Computes one action for one (unbatched) input.

        The inputs are given a batch axis of size 1, passed through
        ``compute_actions_from_input_dict``, and the outputs cut back to
        their single row.

        Args:
            obs: A single observation.
            state: RNN state inputs, if any.
            prev_action: The previous action, if any.
            prev_reward: The previous reward, if any.
            info: An info dict, if any.
            input_dict: A dict (or SampleBatch) of single, unbatched inputs;
                used instead of ``obs``/``state``/``prev_*``/``info`` if given.
            episode: The episode the observation belongs to.
            explore: Explore (True) or exploit (False); None means
                ``config["explore"]``.
            timestep: The current sampling timestep.
            kwargs: Forward-compatibility placeholder. Two opt-in keywords
                post-process the returned action (as RLlib's
                ``Trainer.compute_single_action`` does; both default to off):
                ``unsquash_actions=True`` maps every float Box component from
                [-1, 1] onto its bounds, ``low + (a + 1) * (high - low) / 2``,
                then clips it into them (for ``normalize_actions=True``
                policies, whose raw actions live in [-1, 1]);
                ``clip_actions=True`` clips every Box component into its
                bounds. Unsquashing wins if both are set. The singular
                spellings ``unsquash_action``/``clip_action`` (the Trainer's
                names) are accepted too. Non-Box components are unchanged.

        Returns:
            The action (shaped like one element of the action space), the
            list of RNN state outputs, and a dict of extra outputs.

        Raises:
            ValueError: If both spellings of one post-processing keyword are
                given with different values.
        """
        unsquash, clip = action_flow.pop_single_action_flags(kwargs)
        if input_dict is None:
            # A recurrent model without its state or previous action/reward: one
            # error naming the argument (RLlib 1.11 fails deep inside the model).
            if self._takes_state_inputs():  # (other policies check in compute_actions*)
                self._check_state_batches(state, "compute_single_action", single=True)
            self._check_prev_inputs(
                [
                    c
                    for c, v in (("prev_actions", prev_action), ("prev_rewards", prev_reward))
                    if v is not None
                ],
                "compute_single_action",
            )
            # (a Repeated list's items would be batched as rows: see obs_prep)
            obs = self.obs_flattener.single_list(obs)
            input_dict = action_flow.build_single_input_dict(  # type: ignore[assignment]
                obs, state, prev_action=prev_action, prev_reward=prev_reward, info=info
            )
        batched = action_flow.batch_input_dict(input_dict)  # type: ignore[arg-type]
        out = self.compute_actions_from_input_dict(
            input_dict=SampleBatch(batched),
            episodes=[episode] if episode is not None else None,
            explore=explore,
            timestep=timestep,
        )
        single = action_flow.unbatch_single_output(out)
        action = action_flow.postprocess_single_action(
            single.action, self.action_space_struct, unsquash=unsquash, clip=clip
        )
        return action, single.state_out, single.info

    @DeveloperAPI
    def compute_actions_from_input_dict(
        self,
        input_dict: Union[SampleBatch, Dict[str, TensorStructType]],
        explore: bool = None,
        timestep: Optional[int] = None,
        episodes: Optional[List["Episode"]] = None,
        **kwargs,
    ) -> Tuple[TensorType, List[TensorType], Dict[str, TensorType]]:
        """Computes actions from an input dict that already satisfies the view requirements.

        The default passes ``obs``, the ``state_in_*`` columns, the previous
        actions/rewards and infos on to :meth:`compute_actions`.

        Args:
            input_dict: A SampleBatch or dict of batched inputs.
            explore: Explore or exploit; None means ``config["explore"]``.
            timestep: The current sampling timestep.
            episodes: The episodes of the batch rows, if known.
            kwargs: Forward-compatibility placeholder.

        Returns:
            Batched actions, list of RNN state output batches, dict of extra
            output batches.
        """
        state_batches = [s for k, s in input_dict.items() if k[:9] == "state_in_"]
        return self.compute_actions(
            input_dict[SampleBatch.OBS],
            state_batches,
            prev_action_batch=input_dict.get(SampleBatch.PREV_ACTIONS),
            prev_reward_batch=input_dict.get(SampleBatch.PREV_REWARDS),
            info_batch=input_dict.get(SampleBatch.INFOS),  # type: ignore[arg-type]
            explore=explore,
            timestep=timestep,
            episodes=episodes,
            **kwargs,
        )

    @abstractmethod
    @DeveloperAPI
    def compute_actions(
        self,
        obs_batch: Union[List[TensorStructType], TensorStructType],
        state_batches: Optional[List[TensorType]] = None,
        prev_action_batch: Union[List[TensorStructType], TensorStructType] = None,
        prev_reward_batch: Union[List[TensorStructType], TensorStructType] = None,
        info_batch: Optional[Dict[str, list]] = None,
        episodes: Optional[List["Episode"]] = None,
        explore: Optional[bool] = None,
        timestep: Optional[int] = None,
        **kwargs,
    ) -> Tuple[TensorType, List[TensorType], Dict[str, TensorType]]:
        """Computes actions for a batch of observations.

        Args:
            obs_batch: Batch of observations.
            state_batches: RNN state input batches, if any.
            prev_action_batch: Batch of previous actions.
            prev_reward_batch: Batch of previous rewards.
            info_batch: Batch of info dicts.
            episodes: One Episode per observation.
            explore: Explore or exploit; None means ``config["explore"]``.
            timestep: The current sampling timestep.
            kwargs: Forward-compatibility placeholder.

        Returns:
            Actions [BATCH_SIZE, ACTION_SHAPE], list of RNN state output
            batches [BATCH_SIZE, STATE_SIZE], dict of extra output batches.
        """
        raise NotImplementedError

    @DeveloperAPI
    def compute_log_likelihoods(
        self,
        actions: Union[List[TensorType], TensorType],
        obs_batch: Union[List[TensorType], TensorType],
        state_batches: Optional[List[TensorType]] = None,
        prev_action_batch: Optional[Union[List[TensorType], TensorType]] = None,
        prev_reward_batch: Optional[Union[List[TensorType], TensorType]] = None,
        actions_normalized: bool = True,
    ) -> TensorType:
        """Returns log-likelihoods [BATCH_SIZE] of ``actions`` under ``self.dist_class``.

        Args:
            actions: Batch of actions to score.
            obs_batch: Batch of observations.
            state_batches: RNN state input batches, if any.
            prev_action_batch: Batch of previous actions.
            prev_reward_batch: Batch of previous rewards.
            actions_normalized: Whether ``actions`` are already normalized to
                [-1, 1]; if not and ``normalize_actions=True``, they are
                normalized first.
        """
        raise NotImplementedError

    @DeveloperAPI
    def postprocess_trajectory(
        self,
        sample_batch: SampleBatch,
        other_agent_batches: Optional[Dict[AgentID, Tuple["Policy", SampleBatch]]] = None,
        episode: Optional["Episode"] = None,
    ) -> SampleBatch:
        """Algorithm-specific processing of one trajectory fragment (of one episode).

        Args:
            sample_batch: The fragment's experiences.
            other_agent_batches: Agent id -> (policy, batch) of the other
                agents in a multi-agent env.
            episode: The episode the fragment comes from.

        Returns:
            The postprocessed batch (the default returns ``sample_batch``).
        """
        return sample_batch

    # ------------------------------------------------------------------ learning
    @ExperimentalAPI
    @OverrideToImplementCustomLogic
    def loss(
        self, model: "ModelV2", dist_class: "ActionDistribution", train_batch: SampleBatch
    ) -> Union[TensorType, List[TensorType]]:
        """The policy's loss; override to implement a custom loss.

        Args:
            model: The model to compute the loss(es) with.
            dist_class: The action distribution class for the model outputs.
            train_batch: The batch to compute the loss on.

        Returns:
            One loss tensor, or a list of them (one per optimizer).
        """
        raise NotImplementedError

    @DeveloperAPI
    def learn_on_batch(self, samples: SampleBatch) -> Dict[str, TensorType]:
        """Runs one learning update on ``samples``.

        The default is :meth:`compute_gradients` followed by
        :meth:`apply_gradients`; implement either this or both of those.

        Returns:
            The info dict returned by ``compute_gradients``.
        """
        grads, grad_info = self.compute_gradients(samples)
        self.apply_gradients(grads)
        return grad_info

    @DeveloperAPI
    def load_batch_into_buffer(self, batch: SampleBatch, buffer_index: int = 0) -> int:
        """Loads ``batch`` onto the devices (split evenly, excess dropped).

        Args:
            batch: The batch to load.
            buffer_index: Which buffer (of ``num_multi_gpu_tower_stacks``).

        Returns:
            The number of rows loaded per device.
        """
        raise NotImplementedError

    @DeveloperAPI
    def get_num_samples_loaded_into_buffer(self, buffer_index: int = 0) -> int:
        """Returns the number of rows per device loaded in buffer ``buffer_index``."""
        raise NotImplementedError

    @DeveloperAPI
    def learn_on_loaded_batch(self, offset: int = 0, buffer_index: int = 0):
        """Runs one SGD step on the loaded rows ``[offset, offset + minibatch)``.

        Args:
            offset: Row offset into the loaded data (for minibatch SGD over
                data loaded once).
            buffer_index: Which buffer to learn from.

        Returns:
            The learner stats of the step.
        """
        raise NotImplementedError

    @DeveloperAPI
    def compute_gradients(
        self, postprocessed_batch: SampleBatch
    ) -> Tuple[ModelGradients, Dict[str, TensorType]]:
        """Computes gradients on a batch.

        Returns:
            The gradients and an info dict.
        """
        raise NotImplementedError

    @DeveloperAPI
    def apply_gradients(self, gradients: ModelGradients) -> None:
        """Applies previously computed ``gradients`` to the model."""
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    @DeveloperAPI
    def get_weights(self) -> ModelWeights:
        """Returns a serializable copy (or view) of the model weights."""
        raise NotImplementedError

    @DeveloperAPI
    def set_weights(self, weights: ModelWeights) -> None:
        """Sets the model weights from ``weights`` (as :meth:`get_weights` returns them)."""
        raise NotImplementedError

    @DeveloperAPI
    def get_exploration_state(self) -> Dict[str, TensorType]:
        """Returns the exploration component's state ({} without one)."""
        exploration = getattr(self, "exploration", None)
        if exploration is not None and callable(getattr(exploration, "get_state", None)):
            return exploration.get_state()
        return {}

    @DeveloperAPI
    def is_recurrent(self) -> bool:
        """Whether the policy's model is recurrent."""
        return False

    @DeveloperAPI
    def num_state_tensors(self) -> int:
        """Number of RNN state tensors the model keeps."""
        return 0

    @DeveloperAPI
    def get_initial_state(self) -> List[TensorType]:
        """Initial RNN state (empty for non-recurrent policies)."""
        return []

    @DeveloperAPI
    def get_state(self) -> Union[Dict[str, TensorType], List[TensorType]]:
        """Returns the whole policy state (not an RNN state).

        The base policy returns ``{"weights": ..., "global_timestep": ...}``;
        subclasses add optimizer and exploration state.
        """
        return {"weights": self.get_weights(), "global_timestep": self.global_timestep}

    @DeveloperAPI
    def set_state(self, state: Union[Dict[str, TensorType], List[TensorType]]) -> None:
        """Restores the state returned by :meth:`get_state`."""
        values: Dict[str, Any] = state  # type: ignore[assignment]  # (a dict, as get_state's)
        self.set_weights(values["weights"])
        self.global_timestep = values["global_timestep"]

    @DeveloperAPI
    def on_global_var_update(self, global_vars: Dict[str, TensorType]) -> None:
        """Receives the global vars broadcast by the driver (stores ``timestep``)."""
        self.global_timestep = global_vars["timestep"]

    @DeveloperAPI
    def apply(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Calls ``func(self, *args, **kwargs)`` and returns its result."""
        return func(self, *args, **kwargs)

    # ------------------------------------------------------------------ saving
    @DeveloperAPI
    def export_model(self, export_dir: str, onnx: Optional[int] = None) -> None:
        """Exports the model for serving (format depends on the framework).

        Args:
            export_dir: Writable local directory.
            onnx: If given, export to ONNX with this opset version.
        """
        raise NotImplementedError

    @DeveloperAPI
    def export_checkpoint(
        self, export_dir: str, filename_prefix: str = "model", policy_state: Optional[Dict[str, Any]] = None
    ) -> None:
        """Saves the policy's full state to ``export_dir`` without pickle.

        Writes ``rlpolicy_checkpoint.json`` (class import path, spaces, config,
        state structure, format version) and an ``.npz`` file of the arrays.
        The save is atomic: if it fails, a previous checkpoint in
        ``export_dir`` stays intact. Config values that cannot be stored
        without pickle (e.g. lambdas) are left out with a warning.

        Args:
            export_dir: Writable local directory (created if missing).
            filename_prefix: Prefix of the array file's name.
            policy_state: The state to save; default ``self.get_state()``.
        """
        cls = type(self)
        recipe = checkpoint.class_recipe(cls)
        if recipe is None:
            logger.warning(
                "export_checkpoint: policy class %s (%s) cannot be imported by name, so "
                "Policy.from_checkpoint(dir) cannot rebuild it; restore this checkpoint "
                "with %s.from_checkpoint(dir)",
                cls.__qualname__,
                cls.__module__,
                cls.__name__,
            )
        given = self.__dict__.get("_given_config")
        path = recipe.get("import") if recipe else None
        checkpoint.write_checkpoint(
            export_dir,
            policy_class=path or f"{cls.__module__}:{cls.__qualname__}",
            observation_space=self.observation_space,
            action_space=self.action_space,
            config=self.config,
            state=self.get_state() if policy_state is None else policy_state,  # type: ignore[arg-type]
            filename_prefix=filename_prefix,
            class_recipe=None if path else recipe,
            given_config=None if given is None or _same_config(given, self.config) else given,
        )

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint_dir: str,
        config_overrides: Optional[dict] = None,
        *,
        safe_globals: Optional[List[Any]] = None,
        trusted: Union[bool, str] = False,
        limits: Optional["checkpoint.Limits"] = None,
        allow_non_finite: bool = False,
    ) -> "Policy":
        """Rebuilds a policy saved by :meth:`export_checkpoint`.

        Called on ``Policy`` itself, the class recorded in the checkpoint is
        rebuilt: resolved by name, or, for a class made by ``as_eager()``,
        ``with_tracing()`` or ``with_updates(...)``, made again the same way
        from its base class. Called on a subclass, that subclass is built. The
        constructor gets the config the saved policy's constructor was given
        (not only the completed ``policy.config``); ``config_overrides`` are
        applied on top.

        Loading imports and calls nothing because the file names it: names
        resolve only to rlpolicy's own classes and functions, ``cls``, what
        ``safe_globals`` holds, names registered with
        ``rlpolicy.add_safe_globals`` or ``ModelCatalog``, and, only with
        ``trusted``, more (see docs/checkpoints.md).

        Args:
            checkpoint_dir: The directory given to ``export_checkpoint``.
            config_overrides: Config keys to change (e.g. values the
                checkpoint could not store).
            safe_globals: Classes/functions (user callbacks, models, loss
                functions) the checkpoint may name.
            trusted: False (default); "imported": also classes and functions
                of modules already imported; True: import what the file names
                (only for files you wrote).
            limits: Size/depth limits (``rlpolicy._core.checkpoint_io.Limits``).
            allow_non_finite: Accept NaN/inf in the saved arrays.

        Raises:
            rlpolicy._core.checkpoint.CheckpointError (a ValueError): For every
                failure of the load: missing directory (also a
                FileNotFoundError), corrupt or foreign files, untrusted names,
                values out of range, limits exceeded, a constructor that fails.
        """
        extra = [] if cls is Policy else [cls]
        trust = checkpoint_trust.make_trust(safe_globals, trusted, *extra)
        with checkpoint_trust.loading(trust):
            try:
                return cls._load_checkpoint(checkpoint_dir, config_overrides, limits, allow_non_finite)
            except checkpoint.CheckpointError:
                raise
            except Exception as e:  # the constructor or set_state failed on the file's values
                raise checkpoint.CheckpointError(
                    f"policy checkpoint {os.fspath(checkpoint_dir)!r} cannot be loaded: {type(e).__name__}: {e}"
                ) from e

    @classmethod
    def _load_checkpoint(
        cls, checkpoint_dir: str, config_overrides: Optional[dict], limits: Any, allow_non_finite: bool
    ) -> "Policy":
        contents = checkpoint.read_checkpoint(
            checkpoint_dir, limits=limits, allow_non_finite=allow_non_finite
        )
        if cls is not Policy:
            target = cls
        elif contents.class_recipe is not None:
            target = checkpoint.rebuild_class(contents.class_recipe, Policy)
        else:
            target = checkpoint.resolve_policy_class(contents.policy_class, Policy)
        config = dict(contents.config if contents.given_config is None else contents.given_config)
        config.update(config_overrides or {})
        policy = target(contents.observation_space, contents.action_space, config)
        check_restorable_state(policy, contents.state)
        policy.set_state(contents.state)
        return policy

    @DeveloperAPI
    def import_model_from_h5(self, import_file: str) -> None:
        """Loads model weights from a local h5 file."""
        raise NotImplementedError

    @DeveloperAPI
    def get_session(self) -> Optional["Any"]:
        """The tf Session of a TFPolicy; None for every other policy."""
        return None

    # ------------------------------------------------------------------ input checks
    # The policy gathers what its callers' input is compared against and hands it to
    # the data checks of ``_core.input_checks``; errors name ``where`` (the entry point).

    def _check_obs(self, obs: Any, where: str, column: str = "obs") -> None:
        """Rejects non-numeric (and, with ``config["_check_finite_obs"]``, NaN/inf) observations."""
        input_checks.check_obs_values(
            obs,
            where,
            observation_space=self.observation_space,
            check_finite=bool(self.config.get("_check_finite_obs", False)),
            column=column,
        )

    def _has_custom_action_fns(self) -> bool:
        """Whether acting runs a custom ``action_sampler_fn``/``action_distribution_fn``
        (which may take state inputs the model does not declare)."""
        # (straight-line: this runs on every compute_actions)
        if getattr(self, "action_sampler_fn", None) is not None:
            return True
        if getattr(self, "action_distribution_fn", None) is not None:
            return True
        hooks = getattr(self, "_hooks", None)
        return hooks is not None and (
            getattr(hooks, "action_sampler_fn", None) is not None
            or getattr(hooks, "action_distribution_fn", None) is not None
        )

    def _model_view_requirements(self) -> Dict[str, Any]:
        return getattr(getattr(self, "model", None), "view_requirements", None) or {}

    def _takes_state_inputs(self) -> bool:
        """Whether the policy keeps RNN state (or its model reads ``state_in_i`` views)."""
        try:
            return (
                self.num_state_tensors() > 0
                or input_checks.num_state_views(self._model_view_requirements()) > 0
            )
        except Exception:  # a hand-built policy without a model
            return False

    def _initial_state_shapes(self) -> List[tuple]:
        """The shapes of ``get_initial_state()``, looked up once (the layout does not change)."""
        shapes = self.__dict__.get("_state_shapes")
        if shapes is None:
            try:
                shapes = [tuple(np.shape(s)) for s in self.get_initial_state()]
            except Exception:
                shapes = []
            self._state_shapes = shapes
        return shapes

    def _check_state_batches(self, state_batches: Optional[Any], where: str, single: bool = False) -> None:
        """Rejects RNN state inputs whose number or shapes do not fit the model's."""
        if not self._has_custom_action_fns():
            self._check_states(list(state_batches or []), where, single, self._model_view_requirements())

    def _check_states(self, states: List[Any], where: str, single: bool, views: Dict[str, Any]) -> None:
        expected = 0
        if states or self._takes_state_inputs():
            expected = max(self.num_state_tensors(), input_checks.num_state_views(views))
        shapes = self._initial_state_shapes() if states and not isinstance(states[0], str) else None
        input_checks.check_state_inputs(
            states, where, expected=expected, initial_shapes=shapes, single=single
        )

    def _check_prev_inputs(self, present: Any, where: str) -> None:
        """Rejects a call without the previous action/reward the model reads."""
        if not self._has_custom_action_fns():
            input_checks.check_prev_columns(
                present,
                where,
                model_views=self._model_view_requirements(),
                model_config=(self.config or {}).get("model") or {},
            )

    def _check_acting_inputs(self, obs: Any, states: Optional[Any], present: Any, where: str) -> None:
        """The acting checks in one pass: observations, RNN states (their number and
        shapes), and the previous action/reward the model reads (``present``: the
        column names given)."""
        self._check_obs(obs, where)
        if self._has_custom_action_fns():
            return
        views = self._model_view_requirements()
        self._check_states(list(states or []), where, False, views)
        input_checks.check_prev_columns(
            present, where, model_views=views, model_config=(self.config or {}).get("model") or {}
        )

    def _check_acting_input_dict(self, input_dict: Any, where: str) -> None:
        """The observation, state and previous-input checks for an input dict."""
        states = [input_dict[k] for k in input_checks.state_in_keys(input_dict.keys())]
        if "obs" in input_dict:
            self._check_acting_inputs(input_dict["obs"], states, input_dict.keys(), where)
        else:
            self._check_state_batches(states, where)
            self._check_prev_inputs(input_dict.keys(), where)

    def _loss_columns_read(self) -> Optional[List[str]]:
        """The train-batch columns the loss read during loss initialization (None: unknown)."""
        cols = getattr(self, "_loss_columns", None)
        loss_inputs = getattr(self, "_loss_input_dict", None)
        if cols is None and loss_inputs:
            cols = [k for k in loss_inputs if k != SampleBatch.SEQ_LENS]
        return sorted(cols) if cols is not None else None

    def _check_train_batch(self, batch: Any, where: str) -> None:
        """Rejects a train batch that lacks a loss column or has bad observations."""
        if not hasattr(batch, "keys"):
            return
        input_checks.check_loss_columns(batch.keys(), self._loss_columns_read(), where)
        if "obs" in batch.keys():
            self._check_obs(batch["obs"], where)

    # ------------------------------------------------------------------ internals
    def _create_exploration(self) -> Any:
        """Builds (once) the Exploration object from ``config["exploration_config"]``."""
        existing = getattr(self, "exploration", None)
        if existing is not None:
            return existing
        from rlpolicy.utils.exploration._factory import create_exploration

        return create_exploration(
            self.config["exploration_config"],
            action_space=self.action_space,
            policy_config=self.config,
            model=getattr(self, "model", None),
            num_workers=self.config["num_workers"],
            worker_index=self.config["worker_index"],
            framework=getattr(self, "framework", self.config["framework"]),
        )

    def _get_default_view_requirements(self) -> Dict[str, Any]:
        from rlpolicy.policy.view_requirement import ViewRequirement

        return loss_init.default_view_requirements(self.observation_space, self.action_space, ViewRequirement)

    def _get_dummy_batch_from_view_requirements(self, batch_size: int = 1) -> SampleBatch:
        config = self.config
        return SampleBatch(
            loss_init.dummy_columns(
                self.view_requirements,
                batch_size,
                config,
                flat_obs_space=lambda space: prepare_observation_space(space, config),
            )
        )

    def _update_model_view_requirements_from_init_state(self) -> None:
        """Adds ``state_in_i``/``state_out_i`` requirements from the initial RNN state.

        The model's (or, without a model, the policy's) ``get_initial_state()``
        gives one entry per state tensor; they go into the model's and the
        policy's view requirements, existing user-provided entries are kept.
        """
        from rlpolicy.policy.view_requirement import ViewRequirement

        self._model_init_state_automatically_added = True
        model = getattr(self, "model", None)
        obj = model or self
        if model is not None and not hasattr(model, "view_requirements"):
            model.view_requirements = {"obs": ViewRequirement(space=self.observation_space)}
        init_state = self._initial_state_for_view_requirements(obj, model)
        targets = [obj.view_requirements]
        if hasattr(self, "view_requirements") and self.view_requirements is not obj.view_requirements:
            targets.append(self.view_requirements)
        max_seq_len = (self.config.get("model") or {}).get("max_seq_len", 1)
        entries = loss_init.state_view_requirements(init_state, max_seq_len, ViewRequirement)
        for vrs in targets:
            for key, vr in entries.items():
                vrs.setdefault(key, vr if vrs is targets[0] else copy.copy(vr))

    def _initial_state_for_view_requirements(self, obj: Any, model: Any) -> list:
        """``obj.get_initial_state()``; an object without one gets it set (a Keras
        model: zeros of its ``state_in_*`` spaces; else none, and a policy whose
        requirements hold ``state_in_0`` reports ``is_recurrent()``)."""
        if callable(getattr(obj, "get_initial_state", None)):
            return list(obj.get_initial_state())
        vrs = obj.view_requirements
        if loss_init.is_keras_model(model) and "state_in_0" not in vrs:
            obj.get_initial_state = lambda: [
                np.zeros_like(vr.space.sample())
                for k, vr in model.view_requirements.items()
                if k.startswith("state_in_")
            ]
        else:
            obj.get_initial_state = lambda: []
            if "state_in_0" in vrs:
                self.is_recurrent = lambda: True  # type: ignore[method-assign]
        return []

    def _initialize_loss_from_dummy_batch(
        self, auto_remove_unneeded_view_reqs: bool = True, stats_fn: Optional[Callable] = None
    ) -> None:
        """Runs acting, postprocessing and loss once on dummy data; prunes view requirements."""
        self._run_dummy_loss_init(auto_remove_unneeded_view_reqs, stats_fn)

    def _run_dummy_loss_init(
        self, auto_remove_unneeded_view_reqs: bool = True, stats_fn: Optional[Callable] = None
    ) -> "loss_init.AccessRecord":
        """RLlib 1.11's dummy-batch loss initialisation (see ``_core.loss_init``).

        Acts on a batch of zeros built from the view requirements, postprocesses
        a fresh one, runs the loss (and ``stats_fn``) on it, records which
        columns each step read, then prunes the view requirements. The batch
        size is ``max(4 * batch_divisibility_req, 32)``.

        Returns:
            The access record of the run.
        """
        self._no_tracing = True  # eager tracing would hide column accesses
        try:
            batch_size = max(getattr(self, "batch_divisibility_req", 1) * 4, 32)
            state_outs, compute_keys = self._probe_compute_actions(batch_size)
            post_record, train_batch, has_loss = self._probe_postprocess_and_loss(
                batch_size, state_outs, stats_fn
            )
        finally:
            self._no_tracing = False
        accessed, added, deleted = post_record
        record = loss_init.AccessRecord(
            compute_accessed=compute_keys,
            postprocess_accessed=accessed,
            postprocess_added=added,
            postprocess_deleted=deleted,
            train_accessed=set(train_batch.accessed_keys),
        )
        if has_loss:  # what learn_on_batch checks a train batch against
            self._loss_columns = sorted(k for k in record.train_accessed if k != SampleBatch.SEQ_LENS)
        if auto_remove_unneeded_view_reqs:
            from rlpolicy.policy.view_requirement import ViewRequirement

            model = getattr(self, "model", None)
            # A policy without a model (a plain Policy subclass) protects what its
            # action computation read, as a model's own view requirements would be.
            protected = (
                set(getattr(model, "view_requirements", {}) or {}) if model is not None else set(compute_keys)
            )
            loss_init.prune_view_requirements(
                self.view_requirements,
                record,
                protected=protected,
                has_loss=has_loss,
                keep_all=self.config.get("output") is not None,
                new_requirement=ViewRequirement,
            )
        return record

    def _as_loss_batch(self, batch: SampleBatch) -> SampleBatch:
        fn = getattr(self, "_lazy_tensor_dict", None)
        return fn(batch) if callable(fn) else batch

    def _probe_compute_actions(self, batch_size: int) -> tuple:
        """Dummy run step 1: act on a dummy batch; mark which columns acting needs."""
        from rlpolicy.policy.view_requirement import ViewRequirement

        vrs = self.view_requirements
        dummy = self._get_dummy_batch_from_view_requirements(batch_size)
        self._as_loss_batch(dummy)
        _, state_outs, extra_outs = self.compute_actions_from_input_dict(dummy, explore=False)
        for key, vr in vrs.items():
            if key not in dummy.accessed_keys:
                vr.used_for_compute_actions = False
        for key, value in (extra_outs or {}).items():
            if key in vrs:
                continue
            shape = getattr(value, "shape", None)
            space = (
                loss_init.new_box(-1.0, 1.0, tuple(shape[1:]), loss_init.numpy_dtype(value.dtype))
                if shape is not None
                else None
            )
            vrs[key] = ViewRequirement(space=space, used_for_compute_actions=False)
        for key in dummy.accessed_keys:
            if key not in vrs:
                vrs[key] = ViewRequirement(space=loss_init.new_box(float("-inf"), float("inf"), ()))
            vrs[key].used_for_compute_actions = True
        return state_outs, set(dummy.accessed_keys)

    def _probe_postprocess_and_loss(
        self, batch_size: int, state_outs: list, stats_fn: Optional[Callable]
    ) -> tuple:
        """Dummy run step 2: postprocess a fresh dummy batch, then run loss and stats on it."""
        dummy = self._get_dummy_batch_from_view_requirements(batch_size)
        dummy.set_get_interceptor(None)
        self._dummy_batch = dummy
        exploration = getattr(self, "exploration", None)
        if exploration is not None:
            exploration.postprocess_trajectory(self, dummy)
        post = self.postprocess_trajectory(dummy)
        seq_lens = loss_init.cut_states_to_sequences(post, batch_size) if state_outs else None
        post_record = (set(dummy.accessed_keys), set(dummy.added_keys), set(dummy.deleted_keys))
        train_batch = self._as_loss_batch(post)
        # The train batch is usually the very object postprocessing returned, so
        # its access log restarts here: what the loss reads is told apart from
        # what only postprocessing read. (RLlib 1.11's torch path shares one log,
        # which makes its "postprocessing only" tagging a no-op there.)
        train_batch.accessed_keys = set()
        train_batch.set_training(True)
        if seq_lens is not None:
            train_batch[SampleBatch.SEQ_LENS] = seq_lens
        train_batch.count = dummy.count
        loss_fn = loss_init.resolve_loss(type(self), getattr(self, "_loss", None))
        if loss_fn is not None:
            loss_fn(self, getattr(self, "model", None), self.dist_class, train_batch)
        if stats_fn is not None:
            stats_fn(self, train_batch)
        return post_record, train_batch, loss_fn is not None


def load_policy_from_checkpoint(
    checkpoint_dir: str, config_overrides: Optional[dict] = None, **load_options: Any
) -> Policy:
    """Rebuilds whatever policy class is recorded in a checkpoint (``Policy.from_checkpoint``)."""
    return Policy.from_checkpoint(checkpoint_dir, config_overrides, **load_options)


def check_restorable_state(policy: Policy, state: Any) -> None:
    """Raises CheckpointError unless ``state``'s weights fit ``policy``'s (shapes, lossless dtypes)."""
    if not isinstance(state, dict) or "weights" not in state:
        return
    try:
        current = policy.get_weights()
    except Exception:  # noqa: BLE001 - a policy without weights: nothing to compare
        return
    checkpoint_checks.check_arrays_match(state["weights"], current)


# Further names RLlib 1.11 defines or imports in this module (1.x client code imports
# them from here); resolved on first access, see rlpolicy/utils/_lazy.py.
from rlpolicy.utils._lazy import FRAMEWORK_HANDLES, lazy_module_attrs  # noqa: E402

_RLLIB_1_11_NAMES = {
    "Box": "gymnasium.spaces:Box",
    "ActionDistribution": "rlpolicy.models.action_dist:ActionDistribution",
    "ModelCatalog": "rlpolicy.models.catalog:ModelCatalog",
    "ModelV2": "rlpolicy.models.modelv2:ModelV2",
    "ViewRequirement": "rlpolicy.policy.view_requirement:ViewRequirement",
    "Deprecated": "rlpolicy.utils.deprecation:Deprecated",
    "Exploration": "rlpolicy.utils.exploration.exploration:Exploration",
    "try_import_tf": "rlpolicy.utils.framework:try_import_tf",
    "try_import_torch": "rlpolicy.utils.framework:try_import_torch",
    "from_config": "rlpolicy.utils.from_config:from_config",
    "get_dummy_batch_for_space": "rlpolicy.utils.spaces.space_utils:get_dummy_batch_for_space",
    "unbatch": "rlpolicy.utils.spaces.space_utils:unbatch",
    "tf1": FRAMEWORK_HANDLES["tf1"],
    "tf": FRAMEWORK_HANDLES["tf"],
    "tfv": FRAMEWORK_HANDLES["tfv"],
    "torch": FRAMEWORK_HANDLES["torch"],
}
__getattr__ = lazy_module_attrs(__name__, _RLLIB_1_11_NAMES)
