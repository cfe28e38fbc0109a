"""Debugging helpers (RLlib's ``utils.debug``): ``summarize`` and global seeding."""

from __future__ import annotations

import os
import pprint
import random
from typing import Any, Mapping, Optional

import numpy as np

from rlpolicy.utils.framework import try_import_tf, try_import_torch

_printer = pprint.PrettyPrinter(indent=2, width=60)


def summarize(obj: Any) -> str:
    """A pretty-printed summary of ``obj`` for logs.

    Numpy arrays are shown as their shape, dtype and min/max/mean (object and string
    arrays: their first element), SampleBatches and MultiAgentBatches as typed dicts,
    namedtuples as ``{"type": ..., "data": ...}``; dicts, lists and tuples are summarized
    element by element, and anything else is shown as is (as RLlib 1.11 does).
    """
    return _printer.pformat(_summarize(obj))


def _summarize(obj: Any) -> Any:
    from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch

    if isinstance(obj, SampleBatch):
        return {"type": "SampleBatch", "data": {k: _summarize(v) for k, v in obj.items()}}
    if isinstance(obj, MultiAgentBatch):
        return {
            "type": "MultiAgentBatch",
            "policy_batches": _summarize(obj.policy_batches),
            "count": obj.count,
        }
    if isinstance(obj, Mapping):
        return {k: _summarize(v) for k, v in obj.items()}
    if hasattr(obj, "_asdict"):
        return {"type": type(obj).__name__, "data": _summarize(obj._asdict())}
    if isinstance(obj, list):
        return [_summarize(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_summarize(x) for x in obj)
    if isinstance(obj, np.ndarray):
        return _Summary(_array_summary(obj))
    return obj


def _array_summary(a: np.ndarray) -> str:
    if a.size == 0:
        return f"np.ndarray({a.shape}, dtype={a.dtype})"
    if a.dtype == object or a.dtype.type is np.str_:
        return f"np.ndarray({a.shape}, dtype={a.dtype}, head={_summarize(a.flat[0])})"
    return (
        f"np.ndarray({a.shape}, dtype={a.dtype}, min={round(float(np.min(a)), 3)}, "
        f"max={round(float(np.max(a)), 3)}, mean={round(float(np.mean(a)), 3)})"
    )


class _Summary:
    """Prints as its text (no quotes) inside pprint's output."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def update_global_seed_if_necessary(framework: Optional[str] = None, seed: Optional[int] = None) -> None:
    """Seeds Python's ``random``, numpy and the given framework (nothing if ``seed`` is None).

    Args:
        framework: "torch", "tf2", "tfe", "tf" or None. torch also turns on its
            deterministic algorithms where they exist (warning, not failing, on ops
            without one); TF1 graph mode ("tf") is seeded per graph by the policy.
        seed: The seed.
    """
    if seed is None:
        return
    random.seed(seed)
    np.random.seed(seed)
    if framework == "torch":
        torch, _ = try_import_torch(error=True)
        torch.manual_seed(seed)
        if torch.version.cuda is not None:  # deterministic cuBLAS needs a fixed workspace
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
    elif framework in ("tf2", "tfe"):
        tf1, tf, _ = try_import_tf(error=True)
        if framework == "tf2":
            tf.random.set_seed(seed)
        else:
            tf1.set_random_seed(seed)


__all__ = ["summarize", "update_global_seed_if_necessary"]
