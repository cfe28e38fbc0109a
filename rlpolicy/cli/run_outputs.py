"""What ``rlpolicy train --out DIR`` writes, and how ``evaluate``/``export`` find it again.

Layout of ``DIR``::

    DIR/rlpolicy_checkpoint.json, *.npz   the final policy checkpoint (Policy.export_checkpoint)
    DIR/rlpolicy_run.json                 algo, framework, env, seed, iteration, timesteps, ...
    DIR/checkpoint_000010/                a periodic checkpoint (same two files inside)
    DIR/progress.csv                      one row per training iteration
    DIR/learning_curve.png                mean return against env steps

A checkpoint directory is one holding both ``rlpolicy_checkpoint.json`` and
``rlpolicy_run.json``; the run record is what lets ``evaluate`` and
``export`` rebuild the policy and its env from the path alone.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from rlpolicy._core.checkpoint import METADATA_FILE

RUN_FILE = "rlpolicy_run.json"
PROGRESS_FILE = "progress.csv"
PLOT_FILE = "learning_curve.png"
_PERIODIC = re.compile(r"checkpoint_(\d+)$")
# Columns every progress.csv starts with; learner stats follow (sorted).
PROGRESS_COLUMNS = ("iteration", "timesteps_total", "episodes_total", "episode_reward_mean",
                    "time_total_s", "steps_per_s", "eval_reward_mean", "eval_reward_std")


@dataclass
class RunRecord:
    """What a checkpoint needs besides the policy: how to rebuild its env and policy class."""

    algo: str
    framework: str
    env: str
    seed: int = 0
    iteration: int = 0
    timesteps_total: int = 0
    eval_reward_mean: Optional[float] = None
    extra: Dict[str, Any] = field(default_factory=dict)


def _umask_mode(mode: int) -> int:
    """``mode`` less the process umask (mkstemp/mkdtemp create owner-only files)."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def _write_json_atomically(path: str, data: Dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.chmod(tmp, _umask_mode(0o666))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_checkpoint(policy: Any, directory: str, record: RunRecord) -> str:
    """Writes the policy checkpoint and the run record into ``directory``; returns it."""
    directory = os.path.abspath(directory)
    policy.export_checkpoint(directory)
    _write_json_atomically(os.path.join(directory, RUN_FILE), asdict(record))
    return directory


def periodic_checkpoint_dir(out_dir: str, iteration: int) -> str:
    return os.path.join(out_dir, f"checkpoint_{iteration:06d}")


def is_periodic_checkpoint(path: str) -> bool:
    """Whether ``path`` is a ``checkpoint_NNNNNN`` folder written by ``rlpolicy train``."""
    return bool(_PERIODIC.match(os.path.basename(path))) and os.path.isdir(path) and \
        os.path.isfile(os.path.join(path, RUN_FILE))


def _is_checkpoint(path: str) -> bool:
    return all(os.path.isfile(os.path.join(path, f)) for f in (RUN_FILE, METADATA_FILE))


def resolve_checkpoint(path: str) -> str:
    """The checkpoint directory ``path`` names: itself, or else its newest
    ``checkpoint_NNNNNN`` (a run stopped before its final checkpoint).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If no checkpoint written by ``rlpolicy train`` is there.
    """
    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist (or is not a directory)")
    if _is_checkpoint(path):
        return path
    periodic = sorted((int(m.group(1)), name) for name in os.listdir(path)
                      if (m := _PERIODIC.match(name)) and _is_checkpoint(os.path.join(path, name)))
    if periodic:
        return os.path.join(path, periodic[-1][1])
    raise ValueError(f"{path!r} holds no checkpoint written by `rlpolicy train` (expected "
                     f"{RUN_FILE} and {METADATA_FILE}, or checkpoint_NNNNNN/ folders with them)")


def read_run_record(checkpoint_dir: str) -> RunRecord:
    """The run record of a checkpoint directory.

    Raises:
        ValueError: If the record is unreadable or lacks algo/framework/env.
    """
    path = os.path.join(checkpoint_dir, RUN_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return RunRecord(**data)
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"run record {path!r} is unreadable: {e}") from None


def load_checkpoint(path: str) -> Tuple[Any, RunRecord, str]:
    """Rebuilds the policy of a checkpoint (or run directory) from the path alone.

    Returns:
        ``(policy, run record, checkpoint directory)``.
    """
    from rlpolicy.cli.training import get_policy_class

    checkpoint_dir = resolve_checkpoint(path)
    record = read_run_record(checkpoint_dir)
    cls = get_policy_class(record.algo, record.framework)
    return cls.from_checkpoint(checkpoint_dir), record, checkpoint_dir


class ProgressLog:
    """Rows of ``progress.csv``: fixed columns, then every learner stat seen so far.

    The file is rewritten whole after each row (a run has a few hundred rows),
    so a new stat column never leaves earlier rows misaligned.
    """

    def __init__(self, path: Optional[str]):
        self.path = path
        self.rows: List[Dict[str, Any]] = []

    def add(self, row: Dict[str, Any]) -> None:
        self.rows.append(dict(row))
        if self.path:
            self.write()

    def columns(self) -> List[str]:
        extra = sorted({k for r in self.rows for k in r} - set(PROGRESS_COLUMNS))
        return list(PROGRESS_COLUMNS) + extra

    def write(self) -> None:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".tmp-", suffix=".csv")
        try:
            with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=self.columns(), restval="")
                writer.writeheader()
                for row in self.rows:
                    writer.writerow({k: _csv_value(v) for k, v in row.items()})
            os.chmod(tmp, _umask_mode(0o666))
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def _csv_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return ""
    return value


def read_progress(path: str) -> List[Dict[str, Optional[float]]]:
    """The rows of a ``progress.csv`` as floats (empty cells: None)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: (float(v) if v not in ("", None) else None) for k, v in row.items()}
                for row in csv.DictReader(f)]


def plot_learning_curve(rows: List[Dict[str, Any]], path: str, *, title: str,
                        target: Optional[float] = None) -> str:
    """Writes a PNG of the training mean return (and evaluations) against env steps.

    Uses matplotlib's Agg backend (no display needed).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    try:
        steps = [r["timesteps_total"] for r in rows]
        ax.plot(steps, [r["episode_reward_mean"] for r in rows], label="training mean return (last 100)")
        evals = [(r["timesteps_total"], r["eval_reward_mean"]) for r in rows
                 if r.get("eval_reward_mean") is not None and not _isnan(r["eval_reward_mean"])]
        if evals:
            ax.plot(*zip(*evals), "o", label="evaluation mean (explore off)")
        if target is not None:
            ax.axhline(target, color="gray", linestyle="--", label=f"target {target:g}")
        ax.set_xlabel("env steps")
        ax.set_ylabel("return")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path


def _isnan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
