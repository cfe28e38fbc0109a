"""Proximal Policy Optimization (PPO): ``PPOTorchPolicy`` (``build_policy_class``) and ``PPOTFPolicy``
(``build_tf_policy``; ``PPOTFPolicy.as_eager()`` for tf2)."""

from rlpolicy.agents.ppo.ppo import DEFAULT_CONFIG

__all__ = ["DEFAULT_CONFIG", "PPOTFPolicy", "PPOTorchPolicy"]


def __getattr__(name):
    if name == "PPOTorchPolicy":
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

        return PPOTorchPolicy
    if name == "PPOTFPolicy":
        from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

        return PPOTFPolicy
    raise AttributeError(name)
