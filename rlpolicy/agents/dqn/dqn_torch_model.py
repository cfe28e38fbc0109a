"""DQN's torch Q-model head (RLlib 1.11's ``ray.rllib.agents.dqn.dqn_torch_model``).

``DQNTorchModel`` is a model *interface*: the catalog builds the base network
(e.g. the fully connected one, producing ``num_outputs`` features) as a
subclass of it, and this class adds the Q heads on top of those features:

- an advantage (or plain Q) stream ``q_hiddens -> num_actions * num_atoms``;
- with ``dueling``, a state-value stream ``q_hiddens -> num_atoms``;
- with ``use_noisy``, NoisyLayers instead of linear ones (``sigma0``);
- with ``num_atoms > 1``, distributional (C51) outputs on the fixed support
  ``z = linspace(v_min, v_max, num_atoms)``;
- with ``add_layer_norm`` (parameter-space noise), a LayerNorm after each hidden layer.

The policy combines the streams (``compute_q_values`` in ``dqn_torch_policy``).
"""

from __future__ import annotations

from typing import Sequence, Tuple

import gymnasium as gym

from rlpolicy.models.torch.misc import SlimFC
from rlpolicy.models.torch.modules.noisy_layer import NoisyLayer
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2
from rlpolicy.utils.annotations import DeveloperAPI
from rlpolicy.utils.framework import try_import_torch
from rlpolicy.utils.typing import ModelConfigDict, TensorType

torch, nn = try_import_torch()


@DeveloperAPI
class DQNTorchModel(TorchModelV2, nn.Module):
    """Adds DQN's advantage and (dueling) value heads to a base model's output features."""

    def __init__(
        self,
        obs_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_outputs: int,
        model_config: ModelConfigDict,
        name: str,
        *,
        q_hiddens: Sequence[int] = (256,),
        dueling: bool = False,
        dueling_hiddens: Sequence[int] = None,
        num_atoms: int = 1,
        use_noisy: bool = False,
        v_min: float = -10.0,
        v_max: float = 10.0,
        sigma0: float = 0.5,
        add_layer_norm: bool = False,
    ):
        """Initializes the Q heads.

        Args:
            obs_space: Observation space.
            action_space: Action space; must be Discrete.
            num_outputs: Number of features the base model outputs (the heads' input).
            model_config: The model config.
            name: Model name.
            q_hiddens: Hidden layer sizes of each head (ReLU). Empty: the base
                model's output already is the Q-values (``num_outputs`` must
                then equal the number of actions, one atom).
            dueling: Whether to add the state-value head.
            dueling_hiddens: Hidden sizes of the value head (default: ``q_hiddens``).
            num_atoms: Atoms of the return distribution (1: plain Q-learning).
            use_noisy: Use NoisyLayers (noisy nets) in the heads.
            v_min: Lowest atom of the support.
            v_max: Highest atom of the support.
            sigma0: Initial noise scale of the NoisyLayers.
            add_layer_norm: LayerNorm after each hidden layer (for parameter noise).

        Raises:
            ValueError: For a non-Discrete action space, ``num_atoms < 1`` or
                ``v_min >= v_max`` with ``num_atoms > 1``.
        """
        nn.Module.__init__(self)
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"DQNTorchModel: action space must be Discrete, got {action_space}")
        if not isinstance(num_atoms, int) or num_atoms < 1:
            raise ValueError(f"DQNTorchModel: num_atoms must be an int >= 1, got {num_atoms!r}")
        if num_atoms > 1 and not v_min < v_max:
            raise ValueError(f"DQNTorchModel: v_min ({v_min}) must be < v_max ({v_max}) for num_atoms > 1")
        self.dueling = dueling
        self.num_atoms = num_atoms
        self.v_min, self.v_max, self.sigma0 = float(v_min), float(v_max), sigma0
        self.use_noisy = use_noisy
        n_actions = int(action_space.n)
        q_hiddens = list(q_hiddens)
        self.advantage_module = self._head(
            "A", q_hiddens, n_actions * num_atoms, add_layer_norm, skip_output=not q_hiddens and not use_noisy
        )
        if dueling:
            v_hiddens = q_hiddens if dueling_hiddens is None else list(dueling_hiddens)
            self.value_module = self._head("V", v_hiddens, num_atoms, add_layer_norm)

    def _head(
        self, tag: str, hiddens: Sequence[int], out_size: int, layer_norm: bool, skip_output: bool = False
    ) -> "nn.Sequential":
        """``hiddens`` ReLU layers (named ``dueling_{tag}_{i}``) and a linear output ``tag``."""
        head = nn.Sequential()
        ins = self.num_outputs
        for i, n in enumerate(hiddens):
            if self.use_noisy:
                head.add_module(
                    f"dueling_{tag}_{i}", NoisyLayer(ins, n, sigma0=self.sigma0, activation="relu")
                )
            else:
                head.add_module(f"dueling_{tag}_{i}", SlimFC(ins, n, activation_fn=nn.ReLU))
                if layer_norm:
                    head.add_module(f"LayerNorm_{tag}_{i}", nn.LayerNorm(n))
            ins = n
        if skip_output:
            return head  # the base model's outputs are the Q-values (RLlib: hiddens=[])
        if self.use_noisy:
            head.add_module(tag, NoisyLayer(ins, out_size, sigma0=self.sigma0, activation=None))
        else:
            head.add_module(tag, SlimFC(ins, out_size, activation_fn=None))
        return head

    def get_q_value_distributions(self, model_out: TensorType) -> Tuple[TensorType, ...]:
        """The advantage stream's outputs for the base model's features.

        Returns:
            With one atom: ``(action_scores, logits, probs_or_logits)``, the
            last two all-ones placeholders of shape ``[B, A, 1]``. With
            ``num_atoms > 1``: ``(action_scores, z, support_logits_per_action,
            logits, probs_or_logits)``; ``action_scores[b, a] = sum_i z_i p_i``
            with ``p = softmax(support_logits_per_action[b, a])``.
        """
        action_scores = self.advantage_module(model_out)
        if self.num_atoms == 1:
            ones = action_scores.new_ones((*action_scores.shape, 1))
            return action_scores, ones, ones
        z = self.support(action_scores.device)
        support_logits = torch.reshape(action_scores, (-1, self.action_space.n, self.num_atoms))
        support_probs = nn.functional.softmax(support_logits, dim=-1)
        action_scores = torch.sum(z * support_probs, dim=-1)
        return action_scores, z, support_logits, support_logits, support_probs

    def support(self, device: "torch.device" = None) -> TensorType:
        """The atoms ``v_min + i (v_max - v_min) / (num_atoms - 1)``, i = 0..num_atoms-1."""
        i = torch.arange(self.num_atoms, dtype=torch.float32, device=device)
        return self.v_min + i * (self.v_max - self.v_min) / float(self.num_atoms - 1)

    def get_state_value(self, model_out: TensorType) -> TensorType:
        """The value stream's output: ``[B, num_atoms]`` (needs ``dueling``).

        Raises:
            ValueError: If the model was built without ``dueling``.
        """
        if not self.dueling:
            raise ValueError(
                f"{type(self).__name__}.get_state_value: the model has no value "
                "head; build it with dueling=True"
            )
        return self.value_module(model_out)


__all__ = ["DQNTorchModel"]
