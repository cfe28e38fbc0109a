"""Type aliases used across rlpolicy's signatures (RLlib 1.11 names)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Tuple, TypeVar, Union

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

TensorType = Any  # np.ndarray, torch.Tensor, tf.Tensor
TensorStructType = Union[TensorType, dict, tuple]
TensorShape = Union[Tuple[int, ...], List[int]]
ModelConfigDict = Dict[str, Any]
TrainerConfigDict = dict
PartialTrainerConfigDict = dict
EnvConfigDict = dict
EnvType = Any
PolicyID = str
AgentID = Any
EnvID = Any
EpisodeID = int
FileType = Any
ModelWeights = dict
ModelGradients = Union[List[Tuple[TensorType, TensorType]], List[TensorType]]
ModelInputDict = Dict[str, TensorType]
LocalOptimizer = Any  # torch.optim.Optimizer or a tf optimizer
GradInfoDict = dict
LearnerStatsDict = dict
ResultDict = dict
SampleBatchType = Any  # SampleBatch or MultiAgentBatch
ViewRequirementsDict = Dict[
    str, Any
]  # values: policy.view_requirement.ViewRequirement (utils sits below policy)
SpaceStruct = Union[Any, dict, tuple]
EnvObsType = Any
EnvActionType = Any
EnvInfoDict = dict
MultiAgentDict = Dict[AgentID, Any]
TensorOrNumpy = Union[TensorType, np.ndarray]
AlgorithmConfigDict = TrainerConfigDict

# --- further RLlib 1.11 aliases (utils/typing.py) ---
T = TypeVar("T")
FromConfigSpec = Union[Dict[str, Any], type, str]
EnvCreator = Callable[[Any], Optional[EnvType]]  # takes an env.env_context.EnvContext
MultiAgentPolicyConfigDict = Dict[PolicyID, Any]  # values: policy.policy.PolicySpec
PolicyState = Dict[str, TensorStructType]
UnrollID = int
MultiEnvDict = Dict[EnvID, MultiAgentDict]


# --- what helpers that take a policy read of it (structural: any object with these members) ---


class ObsPrepPolicy(Protocol):
    """What the observation-flattening helpers (``policy/_obs_prep.py``) read of a policy."""

    @property
    def observation_space(self) -> "gym.Space": ...

    @property
    def config(self) -> TrainerConfigDict: ...


class SessionPolicy(Protocol):
    """A policy that may own a ``tf1.Session`` (None when eager)."""

    def get_session(self) -> Optional[Any]: ...


class WeightsPolicy(SessionPolicy, Protocol):
    """What weight conversion (``models/_weight_conversion.py``) reads of a policy."""

    @property
    def model(self) -> Any: ...

    def get_weights(self) -> ModelWeights: ...


class SamplingPolicy(Protocol):
    """What ``ParameterNoise`` runs on a policy: extra, non-counted forward passes."""

    dist_class: Optional[type]
    global_timestep: int

    def compute_actions_from_input_dict(
        self, input_dict: Any, explore: Optional[bool] = None, timestep: Optional[int] = None, **kwargs: Any
    ) -> Tuple[TensorType, List[TensorType], Dict[str, TensorType]]: ...
