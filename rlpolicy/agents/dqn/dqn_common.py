"""DQN pieces shared by the torch and TF policies (no framework imported here).

RLlib 1.11 keeps these in ``dqn_tf_policy``; rlpolicy re-exports them there so
that the torch policy does not have to import TensorFlow.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np

from rlpolicy.evaluation.postprocessing import adjust_nstep
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.error import UnsupportedSpaceException
from rlpolicy.utils.numpy import convert_to_numpy
from rlpolicy.utils.typing import AgentID

Q_SCOPE = "q_func"
Q_TARGET_SCOPE = "target_q_func"
PRIO_WEIGHTS = "weights"


def check_dqn_action_space(action_space: gym.Space, who: str = "DQN") -> None:
    """Raises UnsupportedSpaceException unless ``action_space`` is Discrete."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise UnsupportedSpaceException(
            f"Action space {action_space} is not supported for {who}; supported: Discrete"
        )
    if int(action_space.start) != 0:
        # Q-values are indexed by action; an offset would need every Q op to shift.
        raise UnsupportedSpaceException(
            f"Action space {action_space} (start={int(action_space.start)}) is not supported for "
            f"{who}: its actions must be 0..n-1; use Discrete({int(action_space.n)}) and add "
            f"{int(action_space.start)} to the action in the env (e.g. a gymnasium ActionWrapper)"
        )


def q_model_num_outputs(config: dict, action_space: gym.spaces.Discrete) -> int:
    """Feature width of the base network under the Q heads (RLlib 1.11's rule).

    With ``hiddens``, the base network's last hidden layer is the output
    (``no_final_linear`` is set in the policy's own model config); without,
    the base network outputs the Q-values directly.
    """
    if config["hiddens"]:
        config["model"]["no_final_linear"] = True  # RLlib 1.11 sets this in the policy's config
        return ([256] + list(config["model"]["fcnet_hiddens"]))[-1]
    return int(action_space.n)


def q_model_kwargs(config: dict, add_layer_norm: bool) -> Dict[str, Any]:
    """The DQN model-interface keyword arguments read from the config."""
    return dict(
        q_hiddens=config["hiddens"],
        dueling=config["dueling"],
        num_atoms=config["num_atoms"],
        use_noisy=config["noisy"],
        v_min=config["v_min"],
        v_max=config["v_max"],
        sigma0=config["sigma0"],
        add_layer_norm=add_layer_norm,
    )


def uses_parameter_noise(policy: Any, config: dict) -> bool:
    """Whether the policy explores with ParameterNoise (its model then gets LayerNorms)."""
    exploration_type = (config.get("exploration_config") or {}).get("type")
    name = (
        exploration_type if isinstance(exploration_type, str) else getattr(exploration_type, "__name__", "")
    )
    return (
        type(getattr(policy, "exploration", None)).__name__ == "ParameterNoise"
        or name.rsplit(".", 1)[-1] == "ParameterNoise"
    )


def terminal_flags(batch: SampleBatch) -> Any:
    """The flags that stop bootstrapping: ``terminateds`` where the batch has
    them (a time-limit truncation still bootstraps), else ``dones`` (RLlib 1.11)."""
    if SampleBatch.TERMINATEDS in batch:
        return batch[SampleBatch.TERMINATEDS]
    return batch[SampleBatch.DONES]


def postprocess_nstep_and_prio(
    policy: Any,
    batch: SampleBatch,
    other_agent: Optional[Dict[AgentID, Tuple[Any, SampleBatch]]] = None,
    episode: Any = None,
) -> SampleBatch:
    """DQN's trajectory postprocessing.

    1. With ``n_step > 1``: the n-step rewrite of ``adjust_nstep`` (rewards
       summed with discounts, ``new_obs`` and done flags shifted).
    2. A ``weights`` column of ones if the batch has none (the loss reads it).
    3. With ``worker_side_prioritization``: ``weights`` becomes
       ``|td_error| + prioritized_replay_eps`` (the initial replay priorities),
       the TD errors coming from ``policy.compute_td_error``.

    Returns:
        ``batch``, changed in place.
    """
    config = policy.config
    if SampleBatch.TERMINATEDS not in batch and SampleBatch.DONES in batch:
        # Old-style batches: every done is a termination. The loss reads this
        # column (graph-mode TF needs it in the dummy batch to get a placeholder).
        batch[SampleBatch.TERMINATEDS] = np.asarray(batch[SampleBatch.DONES]).copy()
    if config["n_step"] > 1:
        adjust_nstep(config["n_step"], config["gamma"], batch)
    if PRIO_WEIGHTS not in batch:
        batch[PRIO_WEIGHTS] = np.ones_like(batch[SampleBatch.REWARDS], dtype=np.float32)
    if batch.count > 0 and config["worker_side_prioritization"]:
        td_errors = policy.compute_td_error(
            batch[SampleBatch.OBS],
            batch[SampleBatch.ACTIONS],
            batch[SampleBatch.REWARDS],
            batch[SampleBatch.NEXT_OBS],
            terminal_flags(batch),
            batch[PRIO_WEIGHTS],
        )
        new_priorities = np.abs(convert_to_numpy(td_errors)) + config["prioritized_replay_eps"]
        batch[PRIO_WEIGHTS] = new_priorities.astype(np.float32)
    return batch


def check_num_atoms(config: dict) -> None:
    """Validates the distributional settings of the config.

    Raises:
        ValueError: If ``num_atoms`` is not an int >= 1, or ``v_min >= v_max``
            with ``num_atoms > 1``.
    """
    num_atoms = config["num_atoms"]
    if not isinstance(num_atoms, int) or isinstance(num_atoms, bool) or num_atoms < 1:
        raise ValueError(f"DQN config: num_atoms must be an int >= 1, got {num_atoms!r}")
    if num_atoms > 1 and not config["v_min"] < config["v_max"]:
        raise ValueError(
            f"DQN config: v_min ({config['v_min']}) must be < v_max ({config['v_max']}) when num_atoms > 1"
        )


__all__ = ["PRIO_WEIGHTS", "Q_SCOPE", "Q_TARGET_SCOPE", "postprocess_nstep_and_prio"]
