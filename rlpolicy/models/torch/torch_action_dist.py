"""Torch action distributions (RLlib's ``ray.rllib.models.torch.torch_action_dist``).

Each class is built from the model output ``inputs`` [BATCH, n] (see
``required_model_output_shape``) and returns one value per batch row from
``logp``, ``entropy`` and ``kl``.

The wrapped ``torch.distributions`` objects are built with
``validate_args=False`` (except Dirichlet, as in RLlib): their argument and
sample checks cost more than the math on the per-step action path.
``TorchCategorical`` and ``TorchDiagGaussian`` (the default distributions)
go further: they compute sample, log-likelihood, entropy and KL with plain
tensor ops and build their ``torch.distributions`` object (``self.dist``)
only when something reads it. A subclass that assigns its own ``self.dist``
gets the ``torch.distributions``-based methods of the base wrapper.
"""

from __future__ import annotations

import functools
from math import log
from typing import Any, List, Optional, Union, cast

import gymnasium as gym
import numpy as np

from rlpolicy.models.action_dist import ActionDistribution, multi_dim_action_shape
from rlpolicy.models.torch.dist_helpers import (
    LOG_SQRT_2PI,
    LazyDist,
    check_bounds,
    flat_action_widths,
    flatten_actions,
    no_grad_call,
    reshape_to_space,
    to_tensor,
)
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.utils.annotations import DeveloperAPI, override
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.numpy import MAX_LOG_NN_OUTPUT, MIN_LOG_NN_OUTPUT, SMALL_NUMBER
from rlpolicy.utils.spaces.space_utils import shape_of
from rlpolicy.utils.typing import ModelConfigDict, TensorType

torch, nn = try_import_torch()


@DeveloperAPI
class TorchDistributionWrapper(ActionDistribution):
    """Wraps a ``torch.distributions`` object stored as ``self.dist``."""

    dist = LazyDist()

    @override(ActionDistribution)
    def __init__(self, inputs: TensorType, model: Optional[TorchModelV2]):
        super().__init__(inputs if type(inputs) is torch.Tensor else to_tensor(inputs, model), model)
        self.last_sample = None

    def _lean(self) -> bool:
        """Whether ``self.dist`` is (or will be) the one ``_make_dist`` builds,
        so that the plain-tensor formulas of a subclass describe it."""
        d = self.__dict__
        return "dist" not in d or d["dist"] is d.get("_lazy_dist")

    @override(ActionDistribution)
    def logp(self, actions: TensorType) -> TensorType:
        return self.dist.log_prob(actions)

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        return self.dist.entropy()

    @override(ActionDistribution)
    def kl(self, other: ActionDistribution) -> TensorType:
        return torch.distributions.kl.kl_divergence(self.dist, cast(TorchDistributionWrapper, other).dist)

    @override(ActionDistribution)
    def sample(self) -> TensorType:
        self.last_sample = self.dist.sample()
        return self.last_sample

    @override(ActionDistribution)
    def sampled_action_logp(self) -> TensorType:
        if self.last_sample is None:
            raise ValueError(
                f"{type(self).__name__}.sampled_action_logp() called before "
                "sample() or deterministic_sample()"
            )
        return self.logp(self.last_sample)


def draw_one(weights: Any, owner: str) -> Any:
    """``torch.multinomial(weights, 1)`` ([B, 1] indices) for rows of non-negative,
    finite weights, without its costly input checks: the same recipe (argmax of
    ``weights / q``, ``q ~ Exp(1)`` from ``empty_like(weights).exponential_()``),
    so the same draws on a fixed seed. A row that sums to 0 or NaN gets ``owner``'s
    ValueError, as multinomial raises."""
    w = weights.detach()
    if w.numel() and not float(w.sum(-1).min()) > 0:  # (NaN: min is NaN)
        raise ValueError(f"{owner}: a row of action weights sums to 0 or NaN (all masked, or NaN inputs)")
    q = torch.empty_like(w).exponential_()
    return torch.div(w, q, out=q).argmax(-1, keepdim=True)


@DeveloperAPI
class TorchCategorical(TorchDistributionWrapper):
    """Categorical over ``n`` actions from logits [BATCH, n], optionally tempered."""

    @override(ActionDistribution)
    def __init__(self, inputs: TensorType, model: Optional[TorchModelV2] = None, temperature: float = 1.0):
        """Args: inputs: logits; model: the model; temperature: logits are divided by it (> 0)."""
        if temperature <= 0.0:
            raise ValueError(f"Categorical temperature must be > 0, got {temperature}")
        if type(inputs) is not torch.Tensor:
            inputs = to_tensor(inputs, model)
        if temperature != 1.0:
            inputs = inputs / temperature
        super().__init__(inputs, model)
        self._logits = self.inputs  # what the distribution is of, even if `inputs` is reassigned
        self._log_probs: TensorType = None  # set by sample()
        self._drawn: Optional[tuple] = (
            None  # (last sample, its [B, 1] index) from the 2-D fast path of sample()
        )

    def _make_dist(self) -> Any:
        return torch.distributions.categorical.Categorical(logits=self._logits, validate_args=False)

    def _log_softmax(self) -> TensorType:
        """The normalised log-probabilities [..., n] (computed once)."""
        if self._log_probs is None:
            self._log_probs = torch.log_softmax(self._logits, -1)
        return self._log_probs

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        probs = self._log_softmax().exp() if self._lean() else self.dist.probs
        self.last_sample = probs.argmax(dim=1)
        return self.last_sample

    @override(TorchDistributionWrapper)
    def sample(self) -> TensorType:
        if not self._lean():
            return super().sample()
        log_probs = self._log_probs
        if log_probs is None:
            log_probs = self._log_probs = torch.log_softmax(self._logits, -1)
        probs = log_probs.exp()
        if probs.dim() == 2:
            index = draw_one(probs, type(self).__name__)
            self.last_sample = index.squeeze(1)
            self._drawn = (self.last_sample, index)
            return self.last_sample
        flat = no_grad_call(torch.multinomial, probs.reshape(-1, probs.shape[-1]), 1, True)
        self.last_sample = flat.reshape(probs.shape[:-1])
        return self.last_sample

    @override(TorchDistributionWrapper)
    def sampled_action_logp(self) -> TensorType:
        drawn = self._drawn
        if drawn is not None and drawn[0] is self.last_sample and self._lean():
            return self._log_probs.gather(-1, drawn[1]).squeeze(-1)  # (set by sample())
        return super().sampled_action_logp()

    @override(TorchDistributionWrapper)
    def logp(self, actions: TensorType) -> TensorType:
        if (
            not self._lean()
            or not isinstance(actions, torch.Tensor)
            or actions.shape != self._logits.shape[:-1]
        ):
            return self.dist.log_prob(actions)  # broadcasting and the rest: as torch does it
        return self._log_softmax().gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    @override(TorchDistributionWrapper)
    def entropy(self) -> TensorType:
        if not self._lean():
            return super().entropy()
        log_probs = self._log_softmax()
        clamped = torch.clamp(log_probs, min=torch.finfo(log_probs.dtype).min)
        return -(clamped * log_probs.exp()).sum(-1)

    @override(TorchDistributionWrapper)
    def kl(self, other: ActionDistribution) -> TensorType:
        if not (self._lean() and isinstance(other, TorchCategorical) and other._lean()):
            return super().kl(other)
        log_p, log_q = self._log_softmax(), other._log_softmax()
        p = log_p.exp()
        # As torch's categorical KL: +inf where q is 0 (and p is not), 0 where p is 0.
        terms = (p * (log_p - log_q)).masked_fill(log_q.exp() == 0, float("inf"))
        return terms.masked_fill(p == 0, 0.0).sum(-1)

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return cast(gym.spaces.Discrete, action_space).n


@DeveloperAPI
def get_torch_categorical_class_with_temperature(t: float) -> type:
    """Returns a TorchCategorical subclass whose default temperature is ``t``."""

    def __init__(self, inputs, model=None, temperature=t):
        TorchCategorical.__init__(self, inputs, model, temperature)

    return type("TorchCategoricalWithTemperature", (TorchCategorical,), {"__init__": __init__})


def _reshape_to_space(sample: TensorType, action_space: Optional[gym.Space]) -> TensorType:
    if isinstance(action_space, gym.spaces.Box):
        return torch.reshape(sample, [-1] + list(action_space.shape))
    shape = multi_dim_action_shape(action_space)  # MultiBinary, multi-dim nvec
    return reshape_to_space(
        sample, shape, None if shape is None or action_space is None else action_space.dtype
    )


@DeveloperAPI
class TorchMultiCategorical(TorchDistributionWrapper):
    """Independent categoricals, one per ``input_lens`` slice of the logits.

    Used for MultiDiscrete, MultiBinary and integer Box action spaces
    (samples come back in the shape of a Box, MultiBinary or
    multi-dimensional MultiDiscrete space).
    """

    @override(TorchDistributionWrapper)
    def __init__(
        self,
        inputs: TensorType,
        model: TorchModelV2,
        input_lens: Union[List[int], np.ndarray, tuple],
        action_space: Optional[gym.Space] = None,
    ):
        """Args: inputs: logits [B, sum(input_lens)]; model; input_lens: categories per
        sub-action; action_space: integer Box to reshape samples to (optional)."""
        super().__init__(inputs, model)
        lens = tuple(int(n) for n in input_lens)
        if self.inputs.shape[-1] != sum(lens):
            raise ValueError(
                f"MultiCategorical inputs have {self.inputs.shape[-1]} columns but "
                f"input_lens {list(lens)} sum to {sum(lens)}"
            )
        self.cats = [
            torch.distributions.categorical.Categorical(logits=part, validate_args=False)
            for part in self.inputs.split(lens, dim=1)
        ]
        self.action_space = action_space

    @override(TorchDistributionWrapper)
    def sample(self) -> TensorType:
        sample = torch.stack([cat.sample() for cat in self.cats], dim=1)
        self.last_sample = _reshape_to_space(sample, self.action_space)
        return self.last_sample

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        sample = torch.stack([torch.argmax(cat.probs, -1) for cat in self.cats], dim=1)
        self.last_sample = _reshape_to_space(sample, self.action_space)
        return self.last_sample

    @override(TorchDistributionWrapper)
    def logp(self, actions: TensorType) -> TensorType:
        if isinstance(actions, np.ndarray):
            actions = torch.from_numpy(actions)
        if isinstance(actions, torch.Tensor):
            actions = torch.reshape(actions, [-1, len(self.cats)])
            actions = torch.unbind(actions, dim=1)
        logps = torch.stack([cat.log_prob(a) for cat, a in zip(self.cats, actions)])
        return torch.sum(logps, dim=0)

    @override(ActionDistribution)
    def multi_entropy(self) -> TensorType:
        return torch.stack([cat.entropy() for cat in self.cats], dim=1)

    @override(TorchDistributionWrapper)
    def entropy(self) -> TensorType:
        return torch.sum(self.multi_entropy(), dim=1)

    @override(ActionDistribution)
    def multi_kl(self, other: ActionDistribution) -> TensorType:
        return torch.stack(
            [
                torch.distributions.kl.kl_divergence(c, o)
                for c, o in zip(self.cats, cast(TorchMultiCategorical, other).cats)
            ],
            dim=1,
        )

    @override(TorchDistributionWrapper)
    def kl(self, other: ActionDistribution) -> TensorType:
        return torch.sum(self.multi_kl(other), dim=1)

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        if isinstance(action_space, gym.spaces.Box):
            low, high = int(np.min(action_space.low)), int(np.max(action_space.high))
            return int(np.prod(shape_of(action_space))) * (high - low + 1)
        if isinstance(action_space, gym.spaces.MultiBinary):
            return 2 * int(np.prod(shape_of(action_space)))
        return int(np.sum(cast(gym.spaces.MultiDiscrete, action_space).nvec))


@DeveloperAPI
class TorchDiagGaussian(TorchDistributionWrapper):
    """Diagonal Gaussian from inputs [BATCH, 2 * d] = (means, log stds).

    With a multi-dimensional Box ``action_space`` (d = its size), samples
    come back as [BATCH, *shape] and ``logp`` flattens such actions first.
    """

    @override(ActionDistribution)
    def __init__(
        self,
        inputs: TensorType,
        model: TorchModelV2,
        *,
        action_space: Optional[gym.spaces.Space] = None,
    ):
        super().__init__(inputs, model)
        mean, log_std = torch.chunk(self.inputs, 2, dim=1)
        self._mean, self.log_std = mean, log_std
        self._std = torch.exp(log_std)
        # A Box(shape=()) action space gets scalar samples.
        self.zero_action_dim = action_space is not None and action_space.shape == ()
        self.action_shape = multi_dim_action_shape(action_space)

    def _make_dist(self) -> Any:
        return torch.distributions.normal.Normal(self._mean, self._std, validate_args=False)

    @override(TorchDistributionWrapper)
    def sample(self) -> TensorType:
        if self._lean():
            # mean + std * N(0, 1): the same law as torch.normal(mean, std), drawn
            # with the vectorised normal kernel (torch.normal's per-element one is
            # several times slower on CPU).
            noise = torch.randn_like(self._mean)
            self.last_sample = sample = no_grad_call(torch.addcmul, self._mean, self._std, noise)
        else:
            sample = super().sample()
        if self.action_shape is not None:
            return reshape_to_space(sample, self.action_shape)
        return torch.squeeze(sample, dim=-1) if self.zero_action_dim else sample

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        self.last_sample = self._mean if self._lean() else self.dist.mean
        return reshape_to_space(self.last_sample, self.action_shape)

    @override(TorchDistributionWrapper)
    def logp(self, actions: TensorType) -> TensorType:
        actions = flatten_actions(actions, self.action_shape)
        if not (self._lean() and isinstance(actions, torch.Tensor)):
            return super().logp(actions).sum(-1)
        z = (actions - self._mean) / self._std
        return (-0.5 * z * z - self.log_std - LOG_SQRT_2PI).sum(-1)

    @override(TorchDistributionWrapper)
    def entropy(self) -> TensorType:
        if not self._lean():
            return super().entropy().sum(-1)
        return (self.log_std + (0.5 + LOG_SQRT_2PI)).sum(-1)

    @override(TorchDistributionWrapper)
    def kl(self, other: ActionDistribution) -> TensorType:
        if not (self._lean() and isinstance(other, TorchDiagGaussian) and other._lean()):
            return super().kl(other).sum(-1)
        ratio = self._std / other._std
        var_ratio = ratio * ratio
        t1 = ((self._mean - other._mean) / other._std) ** 2
        return (0.5 * (var_ratio + t1 - 1.0) - (self.log_std - other.log_std)).sum(-1)

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return int(np.prod(shape_of(action_space))) * 2


@DeveloperAPI
class TorchSquashedGaussian(TorchDistributionWrapper):
    """Gaussian squashed by tanh into (low, high); inputs = (means, log stds).

    Log stds are clipped to [MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT]. Samples
    never reach ``low``/``high`` exactly.
    """

    def __init__(self, inputs: TensorType, model: TorchModelV2, low: float = -1.0, high: float = 1.0):
        """Args: inputs: [B, 2d]; model; low, high: bounds of the (open) action interval."""
        super().__init__(inputs, model)
        check_bounds(low, high, "SquashedGaussian")
        mean, log_std = torch.chunk(self.inputs, 2, dim=-1)
        log_std = torch.clamp(log_std, MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)
        std = torch.exp(log_std)
        self.dist = torch.distributions.normal.Normal(mean, std, validate_args=False)
        self.low, self.high = low, high
        self.mean, self.std = mean, std

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        self.last_sample = self._squash(self.dist.mean)
        return self.last_sample

    @override(TorchDistributionWrapper)
    def sample(self) -> TensorType:
        self.last_sample = self._squash(self.dist.rsample())
        return self.last_sample

    @override(ActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        raw = self._unsquash(x)
        gauss = torch.clamp(self.dist.log_prob(raw), -100, 100).sum(-1)
        # Change of variables for tanh (RLlib 1.11 omits the (high-low)/2 scale term).
        return gauss - torch.sum(torch.log(1 - torch.tanh(raw) ** 2 + SMALL_NUMBER), dim=-1)

    def sample_logp(self):
        """Returns a reparameterised sample in [-1, 1] scale and its log-probability."""
        z = self.dist.rsample()
        actions = self._squash(z)
        logp = torch.sum(self.dist.log_prob(z) - torch.log(1 - actions * actions + SMALL_NUMBER), dim=-1)
        return actions, logp

    @override(TorchDistributionWrapper)
    def entropy(self) -> TensorType:
        raise ValueError("entropy is not defined for SquashedGaussian (no closed form)")

    @override(TorchDistributionWrapper)
    def kl(self, other: ActionDistribution) -> TensorType:
        raise ValueError("kl is not defined for SquashedGaussian (no closed form)")

    def _squash(self, raw_values: TensorType) -> TensorType:
        squashed = (torch.tanh(raw_values) + 1.0) / 2.0 * (self.high - self.low) + self.low
        return torch.clamp(squashed, self.low, self.high)

    def _unsquash(self, values: TensorType) -> TensorType:
        normed = (values - self.low) / (self.high - self.low) * 2.0 - 1.0
        return torch.atanh(torch.clamp(normed, -1.0 + SMALL_NUMBER, 1.0 - SMALL_NUMBER))

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return int(np.prod(shape_of(action_space))) * 2


@DeveloperAPI
class TorchBeta(TorchDistributionWrapper):
    """Beta distribution scaled to [low, high]; inputs [B, 2d] give alpha, beta.

    Each input ``v`` becomes a concentration ``softplus(clip(v)) + 1`` (so > 1).
    """

    def __init__(self, inputs: TensorType, model: TorchModelV2, low: float = 0.0, high: float = 1.0):
        """Args: inputs: [B, 2d]; model; low, high: the action interval."""
        super().__init__(inputs, model)
        check_bounds(low, high, "Beta")
        clipped = torch.clamp(self.inputs, log(SMALL_NUMBER), -log(SMALL_NUMBER))
        self.inputs = torch.log(torch.exp(clipped) + 1.0) + 1.0
        self.low, self.high = low, high
        alpha, beta = torch.chunk(self.inputs, 2, dim=-1)
        self.dist = torch.distributions.Beta(concentration1=alpha, concentration0=beta, validate_args=False)

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        self.last_sample = self._squash(self.dist.mean)
        return self.last_sample

    @override(TorchDistributionWrapper)
    def sample(self) -> TensorType:
        self.last_sample = self._squash(self.dist.rsample())
        return self.last_sample

    @override(ActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        return torch.sum(self.dist.log_prob(self._unsquash(x)), dim=-1)

    @override(TorchDistributionWrapper)
    def entropy(self) -> TensorType:
        return super().entropy().sum(-1)

    @override(TorchDistributionWrapper)
    def kl(self, other: ActionDistribution) -> TensorType:
        return super().kl(other).sum(-1)

    def _squash(self, raw_values: TensorType) -> TensorType:
        return raw_values * (self.high - self.low) + self.low

    def _unsquash(self, values: TensorType) -> TensorType:
        return (values - self.low) / (self.high - self.low)

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return int(np.prod(shape_of(action_space))) * 2


@DeveloperAPI
class TorchDeterministic(TorchDistributionWrapper):
    """Point mass at the inputs (a Gaussian with zero std); logp of samples is 0."""

    @override(TorchDistributionWrapper)
    def __init__(
        self,
        inputs: TensorType,
        model: TorchModelV2,
        *,
        action_space: Optional[gym.spaces.Space] = None,
    ):
        """Args: inputs: the actions [B, k]; model; action_space: a Box with more than
        one dimension makes the actions come back as [B, *shape] (optional)."""
        super().__init__(inputs, model)
        self.action_shape = multi_dim_action_shape(action_space)

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        return reshape_to_space(self.inputs, self.action_shape)

    @override(TorchDistributionWrapper)
    def sampled_action_logp(self) -> TensorType:
        return torch.zeros((self.inputs.size()[0],), dtype=torch.float32, device=self.inputs.device)

    @override(TorchDistributionWrapper)
    def sample(self) -> TensorType:
        return self.deterministic_sample()

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return int(np.prod(shape_of(action_space)))


@DeveloperAPI
class TorchDirichlet(TorchDistributionWrapper):
    """Dirichlet over the simplex; concentration = exp(inputs) + 1e-7."""

    def __init__(self, inputs: TensorType, model: Optional[TorchModelV2]):
        inputs = to_tensor(inputs, model)
        self.epsilon = torch.tensor(1e-7, device=inputs.device)
        concentration = torch.exp(inputs) + self.epsilon
        self.dist = torch.distributions.dirichlet.Dirichlet(concentration=concentration, validate_args=True)
        super().__init__(concentration, model)

    @override(ActionDistribution)
    def deterministic_sample(self) -> TensorType:
        self.last_sample = nn.functional.softmax(self.dist.concentration, dim=-1)
        return self.last_sample

    @override(ActionDistribution)
    def logp(self, x: TensorType) -> TensorType:
        # Keep x strictly inside the simplex (validate_args rejects zeros).
        x = torch.max(x, self.epsilon)
        return self.dist.log_prob(x / torch.sum(x, dim=-1, keepdim=True))

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        return self.dist.entropy()

    @staticmethod
    @override(ActionDistribution)
    def required_model_output_shape(
        action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return int(np.prod(shape_of(action_space)))


@DeveloperAPI
class TorchMultiActionDistribution(TorchDistributionWrapper):
    """Joint distribution of independent sub-distributions for Tuple/Dict action spaces."""

    def __init__(
        self,
        inputs: TensorType,
        model: TorchModelV2,
        *,
        child_distributions: Any,
        input_lens: Any,
        action_space: gym.Space,
    ):
        """Splits ``inputs`` by ``input_lens`` and builds one child per flat sub-space.

        Args:
            inputs: [BATCH, sum(input_lens)].
            model: The model that produced ``inputs``.
            child_distributions: Flat list (or struct) of child classes.
            input_lens: Flat list (or struct) of input sizes per child.
            action_space: The (nested) Tuple/Dict action space.
        """
        import tree

        from rlpolicy.utils.spaces.space_utils import get_base_struct_from_space

        super().__init__(inputs, model)
        self.action_space = action_space
        self.action_space_struct = get_base_struct_from_space(action_space)
        self.input_lens = [int(n) for n in tree.flatten(input_lens)]
        children = tree.flatten(child_distributions)
        if self.inputs.shape[1] != sum(self.input_lens):
            raise ValueError(
                f"MultiActionDistribution inputs have {self.inputs.shape[1]} columns "
                f"but input_lens {self.input_lens} sum to {sum(self.input_lens)}"
            )
        splits = torch.split(self.inputs, self.input_lens, dim=1)
        self.flat_child_distributions = [d(x, model) for d, x in zip(children, splits)]

    @override(ActionDistribution)
    def logp(self, x: Any) -> TensorType:
        import tree

        if isinstance(x, np.ndarray):
            x = torch.from_numpy(x)
        if isinstance(x, torch.Tensor):
            widths = flat_action_widths(self.action_space)
            split_x = list(torch.split(x, widths, dim=1))
        else:
            split_x = tree.flatten(x)
        logps = []
        for val, dist in zip(split_x, self.flat_child_distributions):
            if isinstance(dist, TorchCategorical):
                val = (torch.squeeze(val, dim=-1) if len(val.shape) > 1 else val).long()
            logps.append(dist.logp(val))
        return functools.reduce(lambda a, b: a + b, logps)

    @override(ActionDistribution)
    def kl(self, other: ActionDistribution) -> TensorType:
        kls = [
            d.kl(o)
            for d, o in zip(
                self.flat_child_distributions,
                cast(TorchMultiActionDistribution, other).flat_child_distributions,
            )
        ]
        return functools.reduce(lambda a, b: a + b, kls)

    @override(ActionDistribution)
    def entropy(self) -> TensorType:
        return functools.reduce(lambda a, b: a + b, [d.entropy() for d in self.flat_child_distributions])

    @override(ActionDistribution)
    def sample(self) -> Any:
        import tree

        samples = [d.sample() for d in self.flat_child_distributions]
        return tree.unflatten_as(self.action_space_struct, samples)

    @override(ActionDistribution)
    def deterministic_sample(self) -> Any:
        import tree

        samples = [d.deterministic_sample() for d in self.flat_child_distributions]
        return tree.unflatten_as(self.action_space_struct, samples)

    @override(TorchDistributionWrapper)
    def sampled_action_logp(self) -> TensorType:
        return functools.reduce(
            lambda a, b: a + b, [d.sampled_action_logp() for d in self.flat_child_distributions]
        )

    @override(ActionDistribution)
    def required_model_output_shape(  # type: ignore[override]  # an instance method, as in 1.11
        self, action_space: gym.Space, model_config: ModelConfigDict
    ) -> Union[int, np.integer, np.ndarray]:
        return int(np.sum(self.input_lens))
