"""A clear error when a policy or model needs a deep-learning framework that is not installed.

rlpolicy imports without torch or tensorflow (their modules then hold ``None``
placeholders), so without this check the first use of a missing framework
ends in an unrelated ``AttributeError`` deep inside a model module.
"""

from __future__ import annotations

from rlpolicy.utils.framework import try_import_tf, try_import_torch

_TF_FRAMEWORKS = ("tf", "tf2", "tfe")


def require_framework(framework: str, user: str) -> None:
    """Raises ImportError unless the package behind ``framework`` can be imported.

    Args:
        framework: ``"torch"``, ``"tf"``, ``"tf2"`` or ``"tfe"``; anything
            else is not checked here.
        user: What needs it, for the message (e.g. ``"PPOTorchPolicy"``).

    Raises:
        ImportError: Saying which package is missing and the
            ``pip install rlpolicy[...]`` command that installs it.
    """
    if framework == "torch":
        if try_import_torch()[0] is None:
            raise ImportError(
                f"{user} needs PyTorch (framework='torch'), but torch is not "
                "installed; install it with `pip install rlpolicy[torch]`"
            )
    elif framework in _TF_FRAMEWORKS:
        if try_import_tf()[1] is None:
            raise ImportError(
                f"{user} needs TensorFlow (framework={framework!r}), but "
                "tensorflow is not installed; install it with "
                "`pip install rlpolicy[tf]`"
            )


__all__ = ["require_framework"]
