"""Vanilla policy gradient (REINFORCE), built with ``build_policy_class``."""
from rlpolicy.agents.pg.pg import DEFAULT_CONFIG

__all__ = ["DEFAULT_CONFIG", "PGTorchPolicy"]


def __getattr__(name):
    if name == "PGTorchPolicy":
        from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

        return PGTorchPolicy
    raise AttributeError(name)
