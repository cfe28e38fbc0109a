"""``MultiAgentEnv``: the multi-agent environment interface (RLlib 1.11's
``ray.rllib.env.multi_agent_env``), in gymnasium's style.

Every call works on dicts keyed by agent id. ``reset`` returns
``(obs, infos)``; ``step(action_dict)`` returns the 5-tuple
``(obs, rewards, terminateds, truncateds, infos)``. ``terminateds`` and
``truncateds`` carry the special key ``"__all__"``, which ends the episode
for every agent. Only agents that receive an observation act in the next step.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Set, Tuple, Union

import gymnasium as gym

from rlpolicy.utils.annotations import DeveloperAPI, ExperimentalAPI, PublicAPI, override  # noqa: F401
from rlpolicy.utils.typing import AgentID, EnvCreator, EnvID, EnvType, MultiAgentDict, MultiEnvDict  # noqa: F401

# Key of the global env state in an observation dict (QMIX-style grouped envs; RLlib 1.11).
ENV_STATE = "state"

#: The key of ``terminateds`` / ``truncateds`` that ends the whole episode.
ALL_AGENTS = "__all__"


@PublicAPI
class MultiAgentEnv(gym.Env):
    """An environment hosting several agents that act and observe by agent id.

    Subclasses implement :meth:`reset` and :meth:`step`. ``observation_space``
    and ``action_space`` are the spaces of one agent (all agents alike); with
    agents that differ, give each policy its spaces in its ``PolicySpec``.

    Example:
        >>> env = MyTwoAgentEnv()
        >>> obs, infos = env.reset()
        >>> obs
        {"car_0": [...], "car_1": [...]}
        >>> obs, rewards, terminateds, truncateds, infos = env.step({"car_0": 1, "car_1": 0})
        >>> terminateds
        {"car_0": False, "car_1": True, "__all__": False}
    """

    observation_space: Optional[gym.Space] = None
    action_space: Optional[gym.Space] = None

    def __init__(self):
        if not hasattr(self, "_agent_ids"):
            self._agent_ids: Set[AgentID] = set()

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[dict] = None
    ) -> Tuple[MultiAgentDict, MultiAgentDict]:
        """Starts a new episode.

        Args:
            seed: Seeds the env's random generator (gymnasium semantics).
            options: Env-specific reset options.

        Returns:
            ``(obs, infos)``: dicts keyed by the agents that act first.
        """
        raise NotImplementedError

    def step(
        self, action_dict: MultiAgentDict
    ) -> Tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        """Applies the actions of the agents that were asked to act.

        Args:
            action_dict: Agent id -> action, for each agent that got an observation.

        Returns:
            ``(obs, rewards, terminateds, truncateds, infos)``. ``obs`` holds the
            agents that act next; ``rewards`` may name other agents too;
            ``terminateds`` must have ``"__all__"`` (``truncateds`` may).
        """
        raise NotImplementedError

    def get_agent_ids(self) -> Set[AgentID]:
        """The ids of the agents this env knows (``self._agent_ids``)."""
        if not isinstance(self._agent_ids, set):
            self._agent_ids = set(self._agent_ids)
        return self._agent_ids

    def render(self) -> Any:
        """Renders the env (nothing by default)."""
        return None


class _MultiCopyEnv(MultiAgentEnv):
    """``num_agents`` independent copies of one single-agent env; agent i plays copy i."""

    _make_env: Callable[[dict], gym.Env]

    def __init__(self, config: Optional[dict] = None):
        super().__init__()
        config = dict(config or {})
        num_agents = int(config.pop("num_agents", 1))
        self.agents = [self._make_env(config) for _ in range(num_agents)]
        self.observation_space = self.agents[0].observation_space
        self.action_space = self.agents[0].action_space
        self._agent_ids = set(range(num_agents))
        self._finished: Set[int] = set()

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        self._finished = set()
        obs, infos = {}, {}
        for i, env in enumerate(self.agents):
            obs[i], infos[i] = env.reset(seed=None if seed is None else seed + i, options=options)
        return obs, infos

    def step(self, action_dict: MultiAgentDict):
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        for i, action in action_dict.items():
            obs[i], rewards[i], terms[i], truncs[i], infos[i] = self.agents[i].step(action)
            if terms[i] or truncs[i]:
                self._finished.add(i)
        all_done = len(self._finished) == len(self.agents)
        terms[ALL_AGENTS] = all_done and all(terms.get(i, True) for i in action_dict)
        truncs[ALL_AGENTS] = all_done and not terms[ALL_AGENTS]
        return obs, rewards, terms, truncs, infos


@PublicAPI
def make_multi_agent(env_name_or_creator: Union[str, Callable[[dict], gym.Env]]) -> type:
    """Builds a MultiAgentEnv class running ``config["num_agents"]`` copies of a single-agent env.

    Agent ``i`` (an int) plays copy ``i``; the episode ends when every copy is done.

    Args:
        env_name_or_creator: A gymnasium env id (for ``gymnasium.make``) or a
            callable ``config -> env``.

    Returns:
        The MultiAgentEnv subclass; instantiate it with a config dict.
    """
    if isinstance(env_name_or_creator, str):
        name = env_name_or_creator

        def make(config: Dict) -> gym.Env:
            return gym.make(name)
    else:
        make = env_name_or_creator
    return type("MultiEnv", (_MultiCopyEnv,), {"_make_env": staticmethod(make)})


__all__ = ["MultiAgentEnv", "make_multi_agent", "ALL_AGENTS", "ENV_STATE"]
