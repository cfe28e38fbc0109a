"""Fast paths that reach into framework internals, each behind a guard, with its plain twin.

Every shortcut that relies on how a framework works inside (private modules,
attributes, C bindings) lives in this package and nowhere else; the rest of
rlpolicy calls the public framework API or an entry here. An entry is:

* ``name``: its key (``RLPOLICY_FAST_PLAIN`` and :func:`plain` use it);
* ``written_for``: the framework versions and internals it was written and
  measured against, in words;
* ``guard()``: checked once, on first use; None when the fast path may run,
  else the reason it may not (then the plain path runs, with one log line
  per process);
* the fast path and the plain path: module-level functions of the entry's
  module with the same signature and the same results; the plain one calls
  only the framework's public API and is the reference the tests compare with.

An entry's module builds it with :func:`register` and dispatches on
``ENTRY.active`` (a plain attribute, cheap to read on hot paths)::

    ENTRY = register("name", "torch 2.x: ...", guard)

    def op(x):
        return _op_fast(x) if ENTRY.active else _op_plain(x)

``tests/test_fast_paths.py`` runs every registered entry both ways
(:func:`plain`) on representative inputs and compares the results.

What this package may import: the standard library, numpy, the frameworks
(torch; TF and tf_keras only inside functions, as their callers import them
first through ``rlpolicy.utils.framework``) and its own modules -- nothing
else from rlpolicy, so that every layer may use it.

``RLPOLICY_FAST=0`` in the environment runs the plain path of every entry;
``RLPOLICY_FAST_PLAIN=a,b`` that of the named ones.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Callable, Dict, Iterator, Optional, Tuple

logger = logging.getLogger(__name__)


class Entry:
    """One fast path: its guard, checked once, and whether it runs (``active``)."""

    __slots__ = ("name", "written_for", "guard", "active", "reason", "_forced_plain")

    def __init__(self, name: str, written_for: str, guard: Callable[[], Optional[str]]):
        self.name = name
        self.written_for = written_for
        self.guard = guard
        self.reason: Optional[str] = None  # why the guard failed, if it did
        self._forced_plain = _env_forces_plain(name)
        self.active = False
        self._check()

    def _check(self) -> None:
        try:
            self.reason = self.guard()
        except Exception as e:  # noqa: BLE001 - a guard that breaks is a failed guard
            self.reason = f"guard raised {type(e).__name__}: {e}"
        if self.reason is not None:
            logger.info(
                "rlpolicy fast path %r off (%s; written for %s): the plain path runs",
                self.name,
                self.reason,
                self.written_for,
            )
        self._update()

    def _update(self) -> None:
        self.active = self.reason is None and not self._forced_plain

    def force_plain(self, forced: bool) -> bool:
        """Sets whether the plain path is forced; returns the previous setting."""
        before, self._forced_plain = self._forced_plain, forced
        self._update()
        return before


REGISTRY: Dict[str, Entry] = {}


def untested_version(
    name: str, version: str, tested: Tuple[Tuple[int, int], Tuple[int, int]]
) -> Optional[str]:
    """None when ``version``'s (major, minor) lies in ``tested`` ([from, below)), else why
    not (for entry guards: internals are trusted only on the versions they were checked on)."""
    parsed = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    return None if tested[0] <= parsed < tested[1] else f"{name} {version} untested"


def register(name: str, written_for: str, guard: Callable[[], Optional[str]]) -> Entry:
    """Creates (once per process) and returns the entry ``name``; see the module docstring."""
    entry = REGISTRY.get(name)
    if entry is None:
        entry = REGISTRY[name] = Entry(name, written_for, guard)
    return entry


def _env_forces_plain(name: str) -> bool:
    if os.environ.get("RLPOLICY_FAST", "1").strip().lower() in ("0", "false", "no", "off"):
        return True
    names = os.environ.get("RLPOLICY_FAST_PLAIN", "")
    return name in {n.strip() for n in names.split(",")}


@contextlib.contextmanager
def plain(*names: str) -> Iterator[None]:
    """Runs the plain path of the named entries (all if none named) inside the block.

    Process-wide (for tests and benchmarks, not for concurrent use).
    """
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise KeyError(f"rlpolicy._fast.plain: unknown entries {unknown}; known: {sorted(REGISTRY)}")
    entries = [REGISTRY[n] for n in names] if names else list(REGISTRY.values())
    before = [(e, e.force_plain(True)) for e in entries]
    try:
        yield
    finally:
        for e, was in before:
            e.force_plain(was)
