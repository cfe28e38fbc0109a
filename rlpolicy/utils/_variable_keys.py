"""Unique keys for variables whose names repeat (not in RLlib).

``TFModelV2.variables(as_dict=True)`` and the eager policy's weight dicts key
variables by name; eager TF does not make names unique, so the keys are made
unique here. Pure Python: nothing here imports a framework.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Tuple


def unique_keys(pairs: Iterable[Tuple[str, Any]]) -> Dict[str, Any]:
    """``{key: variable}`` from ``(key, variable)`` pairs, keeping every variable.

    Eager TF variable names are not unique (two ``add_weight(name="w")`` calls of
    one layer both give ``".../w:0"``), so keys built from them can repeat. The
    first variable keeps its key; each later one with a taken key gets
    ``<key>_<n>`` (n = 1, 2, ..., in order, skipping keys used anywhere in
    ``pairs``), so the keys are deterministic for a model class and none is lost.
    A variable listed twice under the same key is kept once.
    """
    pairs = list(pairs)
    bases = {key for key, _ in pairs}
    out: Dict[str, Any] = {}
    for key, var in pairs:
        if key in out and out[key] is var:
            continue
        if key in out:
            base, n = key, 1
            while f"{base}_{n}" in out or f"{base}_{n}" in bases:
                n += 1
            key = f"{base}_{n}"
        out[key] = var
    return out


__all__ = ["unique_keys"]
