"""The ``rlpolicy`` command line (``rlpolicy train | evaluate | export``).

Not part of RLlib's API: the package holds the command (:mod:`.commands`), the
algorithm registry and training defaults (:mod:`.algorithms`), the training
loops (:mod:`.training`), the run driver (:mod:`.train_run`), what a run writes
(:mod:`.run_outputs`) and the export check (:mod:`.export_check`).
``python -m rlpolicy.cli`` runs :func:`main`, as the ``rlpolicy`` script does.
"""

from __future__ import annotations

from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``rlpolicy`` command; returns the exit status.

    Argument errors raise ``SystemExit(2)`` after printing one error line.
    """
    try:
        from rlpolicy.cli.commands import main as run
    except KeyboardInterrupt:  # Ctrl-C while the command's modules load
        import sys

        print("rlpolicy: interrupted", file=sys.stderr, flush=True)
        return 130
    return run(argv)


__all__ = ["main"]
