"""User hooks into sampling and training (RLlib 1.11's ``ray.rllib.agents.callbacks``).

Subclass :class:`DefaultCallbacks`, override the hooks you need, and put the
class into the config under ``"callbacks"``. Every hook is keyword-only and
takes ``**kwargs`` so new arguments can be added later without breaking
user subclasses. The classes live where they are used: ``DefaultCallbacks`` at
the policy layer (every policy makes one by default), ``MultiCallbacks`` beside
the rollout worker.
"""

from __future__ import annotations

from rlpolicy.evaluation._callbacks import MultiCallbacks
from rlpolicy.policy._callbacks import DefaultCallbacks

__all__ = ["DefaultCallbacks", "MultiCallbacks"]
