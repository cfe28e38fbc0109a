"""Exploration strategies (RLlib's ``ray.rllib.utils.exploration``).

Importing this package imports neither torch nor tensorflow.
"""

from rlpolicy.utils.exploration.epsilon_greedy import EpsilonGreedy
from rlpolicy.utils.exploration.exploration import Exploration
from rlpolicy.utils.exploration.gaussian_noise import GaussianNoise
from rlpolicy.utils.exploration.ornstein_uhlenbeck_noise import OrnsteinUhlenbeckNoise
from rlpolicy.utils.exploration.parameter_noise import ParameterNoise
from rlpolicy.utils.exploration.per_worker_epsilon_greedy import PerWorkerEpsilonGreedy
from rlpolicy.utils.exploration.per_worker_gaussian_noise import PerWorkerGaussianNoise
from rlpolicy.utils.exploration.per_worker_ornstein_uhlenbeck_noise import (
    PerWorkerOrnsteinUhlenbeckNoise,
)
from rlpolicy.utils.exploration.random import Random
from rlpolicy.utils.exploration.stochastic_sampling import StochasticSampling

__all__ = [
    "Exploration",
    "EpsilonGreedy",
    "GaussianNoise",
    "OrnsteinUhlenbeckNoise",
    "ParameterNoise",
    "PerWorkerEpsilonGreedy",
    "PerWorkerGaussianNoise",
    "PerWorkerOrnsteinUhlenbeckNoise",
    "Random",
    "StochasticSampling",
]
