"""Proximal Policy Optimization (PPO), built with ``build_policy_class``."""
from rlpolicy.agents.ppo.ppo import DEFAULT_CONFIG

__all__ = ["DEFAULT_CONFIG", "PPOTorchPolicy"]


def __getattr__(name):
    if name == "PPOTorchPolicy":
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

        return PPOTorchPolicy
    raise AttributeError(name)
