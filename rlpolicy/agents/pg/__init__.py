"""Vanilla policy gradient (REINFORCE): ``PGTorchPolicy`` (``build_policy_class``) and ``PGTFPolicy``
(``build_tf_policy``; ``PGTFPolicy.as_eager()`` for tf2)."""

from rlpolicy.agents.pg.pg import DEFAULT_CONFIG

__all__ = ["DEFAULT_CONFIG", "PGTFPolicy", "PGTorchPolicy"]


def __getattr__(name):
    if name == "PGTorchPolicy":
        from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

        return PGTorchPolicy
    if name == "PGTFPolicy":
        from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy

        return PGTFPolicy
    raise AttributeError(name)
