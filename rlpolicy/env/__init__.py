"""Environment interfaces (RLlib 1.11's ``ray.rllib.env``): the multi-agent env
API and the context handed to env creators."""

from __future__ import annotations

from rlpolicy.env.env_context import EnvContext
from rlpolicy.env.multi_agent_env import MultiAgentEnv, make_multi_agent

__all__ = ["EnvContext", "MultiAgentEnv", "make_multi_agent"]
