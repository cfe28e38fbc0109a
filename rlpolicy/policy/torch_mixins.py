"""Mixins for ``TorchPolicy`` subclasses (RLlib 1.11's torch policy mixins).

Mix them in before ``TorchPolicy`` (``class P(LearningRateSchedule,
TorchPolicy)`` or ``build_policy_class(..., mixins=[...])``) and call their
``__init__`` from the policy's ``before_init``/``after_init`` step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from rlpolicy._core.config import check_config_value
from rlpolicy._core.mixin_rules import adapted_kl_coeff, make_entropy_coeff_schedule, make_lr_schedule
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.torch_policy import TorchPolicy, with_lock
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import TensorType, TrainerConfigDict

torch, nn = try_import_torch()

if TYPE_CHECKING:  # (the mixins run on a TorchPolicy; type-checked as one)
    _MixinBase = TorchPolicy
else:
    _MixinBase = object


@DeveloperAPI
class LearningRateSchedule(_MixinBase):
    """Adds a piecewise-linear learning-rate schedule (``cur_lr``).

    On every ``on_global_var_update`` the rate is looked up at the global
    timestep and written into all param groups of all optimizers.
    """

    @DeveloperAPI
    def __init__(self, lr: float, lr_schedule: Optional[List[List[Union[int, float]]]]):
        """Args:
        lr: The constant rate used when ``lr_schedule`` is None.
        lr_schedule: ``[[timestep, lr], ...]`` endpoints; after the last
            endpoint its value is kept.
        """
        self._lr_schedule = make_lr_schedule(lr_schedule)
        if self._lr_schedule is None:  # lr is read only without a schedule: checked here
            check_config_value("lr", lr)
        self.cur_lr = lr if self._lr_schedule is None else self._lr_schedule.value(0)

    @override(Policy)
    def on_global_var_update(self, global_vars: Dict[str, TensorType]) -> None:
        super().on_global_var_update(global_vars)
        if self._lr_schedule:
            self.cur_lr = self._lr_schedule.value(global_vars["timestep"])
            for opt in self._optimizers:
                for group in opt.param_groups:
                    group["lr"] = self.cur_lr


@DeveloperAPI
class EntropyCoeffSchedule(_MixinBase):
    """Adds an entropy-coefficient schedule (``entropy_coeff``).

    ``entropy_coeff_schedule`` is either ``[[timestep, value], ...]`` endpoints
    or (older form) a single timestep at which the coefficient has decayed
    linearly from ``entropy_coeff`` to 0.
    """

    @DeveloperAPI
    def __init__(
        self,
        entropy_coeff: float,
        entropy_coeff_schedule: Optional[Union[int, List[List[Union[int, float]]]]],
    ):
        self._entropy_coeff_schedule = make_entropy_coeff_schedule(entropy_coeff, entropy_coeff_schedule)
        self.entropy_coeff = (
            entropy_coeff if self._entropy_coeff_schedule is None else self._entropy_coeff_schedule.value(0)
        )

    @override(Policy)
    def on_global_var_update(self, global_vars: Dict[str, TensorType]) -> None:
        super().on_global_var_update(global_vars)
        if self._entropy_coeff_schedule is not None:
            self.entropy_coeff = self._entropy_coeff_schedule.value(global_vars["timestep"])


@DeveloperAPI
class KLCoeffMixin(_MixinBase):
    """Adds the adaptive KL coefficient of PPO (``kl_coeff``, ``update_kl``).

    The coefficient is part of the policy state (``"current_kl_coeff"``).
    """

    @DeveloperAPI
    def __init__(self, config: TrainerConfigDict):
        """Reads ``config["kl_coeff"]`` (start value) and ``config["kl_target"]``."""
        self.kl_coeff = config["kl_coeff"]
        self.kl_target = config["kl_target"]

    def update_kl(self, sampled_kl: float) -> float:
        """Grows the coefficient by 1.5x if the KL exceeds twice the target,
        halves it if the KL is below half the target; returns the new value."""
        self.kl_coeff = adapted_kl_coeff(self.kl_coeff, sampled_kl, self.kl_target)
        return self.kl_coeff

    @override(Policy)
    def get_state(self) -> Dict[str, Any]:
        state = super().get_state()
        state["current_kl_coeff"] = self.kl_coeff
        return state

    @override(Policy)
    def set_state(self, state: Any) -> None:
        self.kl_coeff = state.get("current_kl_coeff", self.config["kl_coeff"])
        super().set_state(state)


@DeveloperAPI
class ValueNetworkMixin(_MixinBase):
    """Adds ``self._value(**input_dict) -> float``: a fresh forward pass giving
    the value estimate of a single observation (used for GAE bootstrapping).

    Without ``use_gae`` (or ``vtrace``) in the config it always returns 0.0.
    """

    @DeveloperAPI
    def __init__(self, config: TrainerConfigDict):
        if config.get("use_gae") or config.get("vtrace"):
            self._value = self._value_estimate
        else:
            self._value = _zero_value

    @with_lock
    def _value_estimate(self, **input_dict: Any) -> float:
        batch = self._lazy_tensor_dict(SampleBatch(input_dict))
        with torch.no_grad():
            self.model(batch)
            # [0]: drop the batch dimension of the single observation.
            return self.model.value_function()[0].item()


def _zero_value(*args: Any, **kwargs: Any) -> float:
    return 0.0


@DeveloperAPI
class TargetNetworkMixin(_MixinBase):
    """Adds ``update_target(tau)``: (soft-)copies the main model into the
    target model(s) of every tower (``self.target_models``).

    Needs a ``target_model`` set before ``TorchPolicy.__init__`` ran. The
    constructor does a hard (tau=1) sync.
    """

    @DeveloperAPI
    def __init__(self):
        self.update_target(tau=1.0)

    def update_target(self, tau: Optional[float] = None) -> None:
        """target = tau * model + (1 - tau) * target; tau defaults to
        ``config["tau"]`` (1.0 if unset)."""
        tau = tau or self.config.get("tau", 1.0)
        target_models = getattr(self, "target_models", None)
        if not target_models:
            raise ValueError(
                f"{type(self).__name__}.update_target(): the policy has no "
                "target_models; set self.target_model before TorchPolicy.__init__"
            )
        model_state = self.model.state_dict()
        targets = list(dict.fromkeys(target_models.values()))
        target_state = targets[0].state_dict()
        new_state = {k: tau * model_state[k] + (1 - tau) * v for k, v in target_state.items()}
        for target in targets:
            target.load_state_dict(new_state)

    @override(TorchPolicy)
    def set_weights(self, weights: Dict[str, Any]) -> None:
        # Restoring the main model also re-syncs the target network(s).
        TorchPolicy.set_weights(self, weights)
        self.update_target()
