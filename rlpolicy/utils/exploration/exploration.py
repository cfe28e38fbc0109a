"""The Exploration base class (RLlib's ``ray.rllib.utils.exploration.exploration``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import gymnasium as gym

from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.deprecation import Deprecated
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import LocalOptimizer, TensorType, TrainerConfigDict

if TYPE_CHECKING:
    from rlpolicy.models.action_dist import ActionDistribution
    from rlpolicy.models.modelv2 import ModelV2
    from rlpolicy.policy.sample_batch import SampleBatch

    Policy = Any  # rlpolicy.policy.policy.Policy, the layer above that owns an Exploration


@DeveloperAPI
class Exploration:
    """An exploration strategy: turns a policy's action distribution into actions.

    A Policy owns one Exploration (built from ``config["exploration_config"]``)
    and calls ``get_exploration_action`` with the action distribution its model
    produced, the current timestep and the ``explore`` switch. Subclasses
    decide how much randomness to add; with ``explore=False`` they return the
    deterministic (greedy / most likely) action.

    Hooks around sampling (``before_compute_actions``, ``on_episode_start``,
    ``on_episode_end``, ``postprocess_trajectory``) and around training
    (``get_exploration_optimizer``, ``get_exploration_loss``) let a strategy
    keep its own state or learn; all default to no-ops.
    """

    def __init__(
        self,
        action_space: gym.Space,
        *,
        framework: str,
        policy_config: TrainerConfigDict,
        model: "ModelV2",
        num_workers: int,
        worker_index: int,
    ):
        """Stores the context every exploration needs.

        Args:
            action_space: The space in which actions are chosen.
            framework: "torch", "tf" (graph mode), "tf2" or "tfe" (eager).
            policy_config: The owning Policy's config dict.
            model: The owning Policy's model (may be None).
            num_workers: The total number of rollout workers.
            worker_index: The index of the worker using this object (0 = local).
        """
        self.action_space = action_space
        self.policy_config = policy_config
        self.model = model
        self.num_workers = num_workers
        self.worker_index = worker_index
        self.framework = framework
        # Torch: actions are produced on the device of the model's parameters.
        self.device = None
        _, nn = try_import_torch()
        if isinstance(model, nn.Module):
            first = _first_parameter(model, nn.Module)
            if first is not None:
                self.device = first.device

    @DeveloperAPI
    def before_compute_actions(
        self,
        *,
        timestep: Optional[Union[TensorType, int]] = None,
        explore: Optional[Union[TensorType, bool]] = None,
        tf_sess: Optional[Any] = None,
        **kwargs,
    ) -> None:
        """Called by the Policy before each forward pass that computes actions.

        Args:
            timestep: The current timestep (int, or a tensor in graph mode).
            explore: The explore flag of the coming call.
            tf_sess: The Policy's tf Session (graph mode).
            **kwargs: Reserved for future arguments.
        """
        pass

    @DeveloperAPI
    def get_exploration_action(
        self,
        *,
        action_distribution: "ActionDistribution",
        timestep: Union[TensorType, int],
        explore: bool = True,
    ):
        """Picks (possibly exploratory) actions from ``action_distribution``.

        Args:
            action_distribution: The action distribution built from the model's outputs.
            timestep: The current sampling timestep: an int, or a tensor in TF graph mode.
            explore: True for exploratory behaviour; False for the deterministic
                action. May be a boolean tensor in TF graph mode.

        Returns:
            A tuple of (actions, log-likelihoods of these actions). In TF graph
            mode both are graph tensors to fetch.
        """
        pass

    @DeveloperAPI
    def on_episode_start(
        self, policy: "Policy", *, environment: Any = None, episode: Any = None, tf_sess: Optional[Any] = None
    ) -> None:
        """Called when an episode starts.

        Args:
            policy: The Policy owning this Exploration.
            environment: The environment being acted in.
            episode: The episode that starts.
            tf_sess: The Policy's tf Session (graph mode).
        """
        pass

    @DeveloperAPI
    def on_episode_end(
        self, policy: "Policy", *, environment: Any = None, episode: Any = None, tf_sess: Optional[Any] = None
    ) -> None:
        """Called when an episode ends.

        Args:
            policy: The Policy owning this Exploration.
            environment: The environment being acted in.
            episode: The episode that ends.
            tf_sess: The Policy's tf Session (graph mode).
        """
        pass

    @DeveloperAPI
    def postprocess_trajectory(
        self, policy: "Policy", sample_batch: "SampleBatch", tf_sess: Optional[Any] = None
    ) -> "SampleBatch":
        """Post-processes a collected trajectory (after the Policy's own postprocessing).

        May change ``sample_batch`` in place.

        Args:
            policy: The Policy owning this Exploration.
            sample_batch: The trajectory.
            tf_sess: The Policy's tf Session (graph mode).

        Returns:
            The (possibly changed) batch.
        """
        return sample_batch

    @DeveloperAPI
    def get_exploration_optimizer(self, optimizers: List[LocalOptimizer]) -> List[LocalOptimizer]:
        """Lets the exploration append optimizers of its own to the Policy's.

        The Policy's loss plus ``get_exploration_loss`` must then produce one
        loss term per optimizer.

        Args:
            optimizers: The Policy's optimizers.

        Returns:
            The optimizers to use (by default, ``optimizers`` unchanged).
        """
        return optimizers

    @DeveloperAPI
    def get_exploration_loss(
        self, policy_loss: List[TensorType], train_batch: "SampleBatch"
    ) -> List[TensorType]:
        """Lets the exploration change or extend the Policy's loss terms.

        Args:
            policy_loss: The loss terms computed by the Policy (and model).
            train_batch: The training batch (already passed through
                ``postprocess_trajectory``).

        Returns:
            The loss terms to use (by default, ``policy_loss`` unchanged).
        """
        return policy_loss

    @DeveloperAPI
    def get_state(self, sess: Optional[Any] = None) -> Dict[str, TensorType]:
        """Returns the exploration's state (e.g. the current epsilon and timestep).

        Args:
            sess: The Policy's tf Session (graph mode), used to read variables.

        Returns:
            A dict of state values; empty for stateless explorations.
        """
        return {}

    @DeveloperAPI
    def set_state(self, state: object, sess: Optional[Any] = None) -> None:
        """Restores a state returned by ``get_state``.

        Args:
            state: The state to restore.
            sess: The Policy's tf Session (graph mode), used to assign variables.
        """
        pass

    @Deprecated(new="get_state", error=False)
    def get_info(self, sess: Optional[Any] = None) -> Dict[str, TensorType]:
        """Deprecated alias of ``get_state``."""
        return self.get_state(sess)


def _first_parameter(model: Any, module_cls: Any) -> Any:
    """``next(iter(model.parameters()), None)``: the first parameter in torch's
    order (modules pre-order, each once), found by a direct walk when no module
    on the way changes how torch enumerates them (else by ``parameters()``)."""
    root = type(model)
    if (
        root.parameters is not module_cls.parameters
        or root.named_parameters is not module_cls.named_parameters
        or root._named_members is not module_cls._named_members
    ):
        return next(iter(model.parameters()), None)
    named_modules = module_cls.named_modules
    stack, seen = [model], set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        if type(m).named_modules is not named_modules:
            return next(iter(model.parameters()), None)
        seen.add(id(m))
        for p in m._parameters.values():
            if p is not None:
                return p
        stack.extend(c for c in reversed(m._modules.values()) if c is not None)
    return None
