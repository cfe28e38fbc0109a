"""Deprecated alias of ``rlpolicy.utils.torch_utils`` (RLlib's old ``utils.torch_ops``).

RLlib 1.11 raises on importing this module; rlpolicy warns and re-exports
``torch_utils`` so that code written for older 1.x releases still runs.
"""

from rlpolicy.utils.deprecation import deprecation_warning
from rlpolicy.utils.torch_utils import *  # noqa: F401,F403

deprecation_warning(old="rlpolicy.utils.torch_ops.[...]", new="rlpolicy.utils.torch_utils.[...]")
