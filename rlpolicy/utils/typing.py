"""Type aliases used across rlpolicy's signatures (RLlib 1.11 names)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

import numpy as np

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
