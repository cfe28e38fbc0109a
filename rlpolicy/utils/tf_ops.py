"""Deprecated alias of ``rlpolicy.utils.tf_utils`` (RLlib's old ``utils.tf_ops``).

RLlib 1.11 raises on importing this module; rlpolicy warns and re-exports
``tf_utils`` so that code written for older 1.x releases still runs.
"""

from rlpolicy.utils.deprecation import deprecation_warning
from rlpolicy.utils.tf_utils import *  # noqa: F401,F403

deprecation_warning(old="rlpolicy.utils.tf_ops.[...]", new="rlpolicy.utils.tf_utils.[...]")
