"""``check_env``: catch common environment mistakes early (RLlib's ``utils.pre_checks.env``).

As in RLlib 1.11, the env is reset once and stepped once with a sampled action, and
what comes back is checked against its spaces and types. The API checked is gymnasium's
(``reset() -> (obs, info)``, ``step() -> (obs, reward, terminated, truncated, info)``),
which is what rlpolicy samples; RLlib 1.11 checked gym's 4-tuple.
"""

from __future__ import annotations

import logging
from numbers import Number
from typing import Any, Set

import gymnasium as gym
import numpy as np

from rlpolicy.utils.typing import EnvType

logger = logging.getLogger(__name__)

_RESET_API = "reset(*, seed=None, options=None) -> (obs, info)"
_STEP_API = "step(action) -> (obs, reward, terminated, truncated, info)"
_OLD_GYM_HINT = "an env written for the old gym API can be wrapped with shimmy.GymV21CompatibilityV0(env=env)"


def check_env(env: EnvType) -> None:
    """Resets and steps ``env`` once and checks what it returns.

    Args:
        env: A ``gymnasium.Env`` or an rlpolicy ``MultiAgentEnv``.

    Raises:
        ValueError: If ``env`` is of neither type, does not follow gymnasium's API, or
            returns an observation outside its observation space (the message says
            which call, the value and the space).
        AttributeError: If a single-agent env has no observation or action space.
        AssertionError: For a reward that is not a number, a terminated/truncated
            flag that is not a bool, or an info that is not a dict (as RLlib 1.11).
    """
    from rlpolicy.env.multi_agent_env import MultiAgentEnv

    if isinstance(env, MultiAgentEnv):
        check_multiagent_environments(env)
    elif isinstance(env, gym.Env):
        check_gym_environments(env)
    else:
        raise ValueError(
            f"check_env: env must be a gymnasium.Env or a MultiAgentEnv, got {type(env).__name__}"
            f" ({_OLD_GYM_HINT})"
        )


def check_gym_environments(env: gym.Env) -> None:
    """``check_env`` for a single-agent ``gymnasium.Env`` (see ``check_env``)."""
    for attr in ("observation_space", "action_space"):
        if getattr(env, attr, None) is None:
            raise AttributeError(f"check_env: env must have an {attr}")
        if not isinstance(getattr(env, attr), gym.spaces.Space):
            raise ValueError(
                f"check_env: env.{attr} must be a gymnasium.spaces.Space, "
                f"got {type(getattr(env, attr)).__name__}"
            )
    if getattr(getattr(env, "spec", None), "max_episode_steps", None) is None:
        logger.warning(
            "check_env: the env has no spec.max_episode_steps; episodes end only when it "
            "terminates or truncates itself (or at the config's `horizon`)"
        )
    _check_contained(env.observation_space.sample(), env.observation_space, "observation_space.sample()")
    action = env.action_space.sample()
    _check_contained(action, env.action_space, "action_space.sample()", "action")

    obs, reset_info = _unpack(env.reset(), 2, "reset()", _RESET_API)
    _check_contained(obs, env.observation_space, "reset()")
    _check_info(reset_info, "reset()")
    next_obs, reward, terminated, truncated, info = _unpack(env.step(action), 5, "step()", _STEP_API)
    _check_contained(next_obs, env.observation_space, "step(sampled_action)")
    _check_reward(reward, "step()")
    _check_flag(terminated, "step()", "terminated flag")
    _check_flag(truncated, "step()", "truncated flag")
    _check_info(info, "step()")


def check_multiagent_environments(env: Any) -> None:
    """``check_env`` for a ``MultiAgentEnv``: every return value is a dict keyed by agent
    ids (``get_agent_ids()``, where the env sets them, plus ``"__all__"`` in the flags),
    each observation lies in the agents' ``observation_space`` (where set)."""
    from rlpolicy.env.multi_agent_env import MultiAgentEnv

    if not isinstance(env, MultiAgentEnv):
        raise ValueError(f"check_env: the env is not a MultiAgentEnv, got {type(env).__name__}")
    agent_ids = set(env.get_agent_ids())
    obs, infos = _unpack(env.reset(), 2, "reset()", "reset(*, seed=None, options=None) -> (obs, infos)")
    _check_agent_dict(obs, agent_ids, "reset() obs")
    _check_agent_dict(infos, agent_ids, "reset() infos")
    _check_agent_obs(env, obs, "reset()")
    if env.action_space is None:
        raise AttributeError("check_env: a MultiAgentEnv needs an action_space to sample actions from")
    actions = {aid: env.action_space.sample() for aid in obs}
    returned = _unpack(
        env.step(actions), 5, "step()", "step(action_dict) -> (obs, rewards, terminateds, truncateds, infos)"
    )
    names = ("obs", "rewards", "terminateds", "truncateds", "infos")
    for name, value in zip(names, returned):
        _check_agent_dict(value, agent_ids, f"step() {name}", allow_all=name in ("terminateds", "truncateds"))
    next_obs, rewards, terminateds, truncateds, infos = returned
    if "__all__" not in terminateds:
        raise ValueError("check_env: step() terminateds must have the key '__all__' (True ends the episode)")
    _check_agent_obs(env, next_obs, "step(sampled_actions)")
    for aid, reward in rewards.items():
        _check_reward(reward, f"step() for agent {aid!r}")
    for flags, name in ((terminateds, "terminateds"), (truncateds, "truncateds")):
        for aid, flag in flags.items():
            _check_flag(flag, f"step() for agent {aid!r}", f"{name} flag")
    for aid, info in infos.items():
        _check_info(info, f"step() for agent {aid!r}")


def _unpack(out: Any, n: int, call: str, api: str) -> tuple:
    if not isinstance(out, tuple) or len(out) != n:
        got = f"a {len(out)}-tuple" if isinstance(out, tuple) else type(out).__name__
        raise ValueError(f"check_env: {call} returned {got}; gymnasium's API is {api} ({_OLD_GYM_HINT})")
    return out


def _check_contained(value: Any, space: gym.Space, call: str, kind: str = "observation") -> None:
    if not space.contains(value):
        dtype = getattr(value, "dtype", type(value).__name__)
        raise ValueError(
            f"check_env: the {kind} from {call} is not in the env's {kind} space (a dtype "
            f"mismatch or a value out of bounds?): {kind}={value!r} (dtype {dtype}), "
            f"space={space} (dtype {space.dtype})"
        )


def _check_agent_dict(value: Any, agent_ids: Set[Any], what: str, allow_all: bool = False) -> None:
    if not isinstance(value, dict):
        raise ValueError(
            f"check_env: {what} must be a MultiAgentDict (agent id -> value), got {type(value).__name__}"
        )
    if agent_ids:
        unknown = [k for k in value if k not in agent_ids and not (allow_all and k == "__all__")]
        if unknown:
            raise ValueError(
                f"check_env: {what} has keys {unknown} that are not agent ids of the env "
                f"({sorted(map(str, agent_ids))})"
            )


def _check_agent_obs(env: Any, obs: dict, call: str) -> None:
    if env.observation_space is None:
        return
    for aid, agent_obs in obs.items():
        _check_contained(agent_obs, env.observation_space, f"{call} for agent {aid!r}")


def _check_reward(reward: Any, where: str) -> None:
    if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (Number, np.number)):
        raise AssertionError(f"check_env: the reward from {where} must be an int or float, got {reward!r}")


def _check_flag(flag: Any, where: str, name: str) -> None:
    if not isinstance(flag, (bool, np.bool_)):
        raise AssertionError(f"check_env: the {name} from {where} must be a bool, got {flag!r}")


def _check_info(info: Any, where: str) -> None:
    if not isinstance(info, dict):
        raise AssertionError(f"check_env: the info from {where} must be a dict, got {type(info).__name__}")


__all__ = ["check_env", "check_gym_environments", "check_multiagent_environments"]
