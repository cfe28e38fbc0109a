"""1.x-style policies the sampling tests share (imported by several test modules)."""

from rlpolicy.policy.policy import Policy


class ActOnlyPolicy(Policy):
    """A policy that only acts: learning and weights are no-ops (subclasses define compute_actions)."""


class RandomPolicy(ActOnlyPolicy):
    """RLlib 1.x's examples/policy/random_policy.py, as users copy it: returns a Python list."""

    def compute_actions(
        self, obs_batch, state_batches=None, prev_action_batch=None, prev_reward_batch=None, **kwargs
    ):
        return [self.action_space.sample() for _ in obs_batch], [], {}
