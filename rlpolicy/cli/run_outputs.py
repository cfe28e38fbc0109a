"""What ``rlpolicy train --out DIR`` writes, and how ``evaluate``/``export`` find it again.

Layout of ``DIR``::

    DIR/rlpolicy_checkpoint.json, *.npz   the last policy checkpoint (Policy.export_checkpoint)
    DIR/rlpolicy_run.json                 algo, framework, env, seed, iteration, timesteps, ...
    DIR/checkpoint_best/                  the best-scoring policy (same two files inside)
    DIR/checkpoint_000010/                a periodic checkpoint (same two files inside)
    DIR/progress.csv                      one row per training iteration (PROGRESS_COLUMNS)
    DIR/learning_curve.png                mean return against env steps
    DIR/export_FORMAT[_pipeline]/          an export (``--export`` / ``rlpolicy export``)

A checkpoint directory is one holding both ``rlpolicy_checkpoint.json`` and
``rlpolicy_run.json``; the run record is what lets ``evaluate`` and
``export`` rebuild the policy and its env from the path alone. Folder
checkpoints are written into a temporary folder beside their place and then
renamed into it, so a folder checkpoint is either the old one or the new one.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from rlpolicy._core.checkpoint import METADATA_FILE
from rlpolicy._core.checkpoint_io import LOCK_FILE

RUN_FILE = "rlpolicy_run.json"
PROGRESS_FILE = "progress.csv"
PLOT_FILE = "learning_curve.png"
BEST_DIR = "checkpoint_best"
_PERIODIC = re.compile(r"checkpoint_(\d+)$")
_EXPORT = re.compile(r"export_(torchscript|onnx|savedmodel)(_pipeline)?$")  # what train/export write
# Names of the files a policy checkpoint consists of (--overwrite removes no others):
# the JSON, run record, lock, content-named arrays, and a TF policy's Saver files.
_RLPOLICY_FILE = re.compile(
    r"rlpolicy_checkpoint\.json|rlpolicy_run\.json|\.rlpolicy_checkpoint\.lock|[A-Za-z0-9_.\-]+-[0-9a-f]{12}\.npz"
    r"|model\.(index|meta|data-\d+-of-\d+)|checkpoint"
)
# THE columns of progress.csv, the same for every algorithm and framework (documented in
# docs/cli.md). The algorithm's learner stats go into one JSON object, "learner_stats".
PROGRESS_COLUMNS = (
    "iteration",
    "timesteps_total",
    "episodes_total",
    "episode_reward_mean",
    "time_total_s",
    "steps_per_s",
    "eval_reward_mean",
    "eval_reward_std",
    "learner_stats",
)
# Learner stats left out of progress.csv: the towers' merge time, always 0 on one device.
_DROPPED_STATS = ("allreduce_latency",)
FLOAT_FORMAT = "%.6g"


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
    episodes_total: int = 0
    time_total_s: float = 0.0
    # checkpoint_best: what it was chosen by ("eval_reward_mean" or "episode_reward_mean")
    # and its score under "best_by" and "score".
    extra: Dict[str, Any] = field(default_factory=dict)
    # The files rlpolicy wrote into this folder (what --overwrite may remove).
    files: List[str] = field(default_factory=list)


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
    """Writes the policy checkpoint and the run record into ``directory``; returns it.

    The policy's files are replaced atomically (``export_checkpoint``), then the
    run record; use :func:`save_folder_checkpoint` for a folder of its own.
    """
    directory = os.path.abspath(directory)
    before = set(os.listdir(directory)) if os.path.isdir(directory) else set()
    policy.export_checkpoint(directory)
    arrays = _checkpoint_arrays_file(directory)
    written = {n for n in set(os.listdir(directory)) - before if _RLPOLICY_FILE.fullmatch(n)}
    record.files = sorted(written | {METADATA_FILE, RUN_FILE} | ({arrays} if arrays else set()))
    _write_json_atomically(os.path.join(directory, RUN_FILE), asdict(record))
    return directory


def save_folder_checkpoint(policy: Any, directory: str, record: RunRecord) -> str:
    """Writes a checkpoint folder atomically: into a temporary folder beside
    ``directory``, then renamed into its place (a previous one is replaced)."""
    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".tmp-{os.path.basename(directory)}-")
    old = None
    try:
        os.chmod(tmp, _umask_mode(0o777))
        save_checkpoint(policy, tmp, record)
        if os.path.isdir(directory):
            old = tempfile.mkdtemp(dir=parent, prefix=f".old-{os.path.basename(directory)}-")
            os.replace(directory, os.path.join(old, "c"))
        os.replace(tmp, directory)
    finally:
        for leftover in (tmp, old):
            if leftover and os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
    return directory


def update_run_record(directory: str, **changes: Any) -> None:
    """Rewrites fields of a checkpoint's run record (atomically)."""
    record = read_run_record(directory)
    _write_json_atomically(os.path.join(directory, RUN_FILE), {**asdict(record), **changes})


def best_score(out_dir: str) -> Optional[Tuple[str, float]]:
    """``(chosen by, score)`` of ``out_dir``'s ``checkpoint_best``, or None."""
    path = os.path.join(out_dir, BEST_DIR)
    if not _is_checkpoint(path):
        return None
    extra = read_run_record(path).extra
    if "score" not in extra:
        return None
    return extra.get("best_by", "eval_reward_mean"), float(extra["score"])


def existing_run_outputs(out_dir: str) -> List[str]:
    """What an earlier ``rlpolicy train`` left in ``out_dir`` (names; empty if none)."""
    if not os.path.isdir(out_dir):
        return []
    found = [
        name
        for name in (RUN_FILE, METADATA_FILE, PROGRESS_FILE)
        if os.path.isfile(os.path.join(out_dir, name))
    ]
    found += sorted(
        name + "/"
        for name in os.listdir(out_dir)
        if (_PERIODIC.match(name) or name == BEST_DIR)
        and os.path.isfile(os.path.join(out_dir, name, RUN_FILE))
    )
    return found


def remove_run_outputs(out_dir: str) -> None:
    """Deletes what an earlier run wrote into ``out_dir`` (checkpoints, their
    folders, progress.csv, learning_curve.png, export_FORMAT folders): rlpolicy's
    fixed file names and the files each run record lists as written by rlpolicy;
    nothing else."""
    for name in existing_run_outputs(out_dir):
        if name.endswith("/"):
            folder = os.path.join(out_dir, name.rstrip("/"))
            _remove_recorded(folder)
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only if nothing else is left in it
    _remove_recorded(out_dir)
    for name in (PROGRESS_FILE, PLOT_FILE):
        _remove_file(os.path.join(out_dir, name))
    if os.path.isdir(out_dir):
        for name in os.listdir(out_dir):
            path = os.path.join(out_dir, name)
            if _EXPORT.match(name) and os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)


def _remove_recorded(directory: str) -> None:
    # The files a run record names (plain names in that folder), then the fixed ones.
    try:
        listed = read_run_record(directory).files
    except ValueError:
        listed = []
    for name in [*listed, METADATA_FILE, RUN_FILE, LOCK_FILE]:
        if isinstance(name, str) and _RLPOLICY_FILE.fullmatch(name):
            _remove_file(os.path.join(directory, name))


def _checkpoint_arrays_file(directory: str) -> Optional[str]:
    try:
        with open(os.path.join(directory, METADATA_FILE), encoding="utf-8") as f:
            name = json.load(f).get("arrays_file")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and os.path.basename(name) == name else None


def _remove_file(path: str) -> None:
    if os.path.isfile(path) or os.path.islink(path):
        os.remove(path)


def latest_checkpoint(out_dir: str) -> str:
    """The checkpoint of ``out_dir`` with the most env steps: the run folder's own
    or a ``checkpoint_NNNNNN`` (what ``--resume`` continues from).

    Raises:
        ValueError: If there is none.
    """
    candidates = [out_dir] if _is_checkpoint(out_dir) else []
    candidates += [
        os.path.join(out_dir, name)
        for name in sorted(os.listdir(out_dir))
        if _PERIODIC.match(name) and _is_checkpoint(os.path.join(out_dir, name))
    ]
    if not candidates:
        raise ValueError(f"{out_dir!r} holds no checkpoint written by `rlpolicy train` to resume from")
    return max(candidates, key=lambda d: (read_run_record(d).timesteps_total, d == out_dir))


def periodic_checkpoint_dir(out_dir: str, iteration: int) -> str:
    return os.path.join(out_dir, f"checkpoint_{iteration:06d}")


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
    periodic = sorted(
        (int(m.group(1)), name)
        for name in os.listdir(path)
        if (m := _PERIODIC.match(name)) and _is_checkpoint(os.path.join(path, name))
    )
    if periodic:
        return os.path.join(path, periodic[-1][1])
    raise ValueError(
        f"{path!r} holds no checkpoint written by `rlpolicy train` (expected "
        f"{RUN_FILE} and {METADATA_FILE}, or checkpoint_NNNNNN/ folders with them)"
    )


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


def load_checkpoint(path: str, trusted: bool = False) -> Tuple[Any, RunRecord, str]:
    """Rebuilds the policy of a checkpoint (or run directory) from the path alone.

    ``trusted``: import what the checkpoint names (``--trust-checkpoint``).

    Returns:
        ``(policy, run record, checkpoint directory)``.
    """
    from rlpolicy.cli.training import get_policy_class

    checkpoint_dir = resolve_checkpoint(path)
    record = read_run_record(checkpoint_dir)
    cls = get_policy_class(record.algo, record.framework)
    return cls.from_checkpoint(checkpoint_dir, trusted=trusted), record, checkpoint_dir


class ProgressLog:
    """Rows of ``progress.csv``, always the columns of :data:`PROGRESS_COLUMNS`.

    Each row is appended (and flushed) when it is added; with ``resume`` the
    rows already in the file stay and new ones follow them. Floats are written
    with :data:`FLOAT_FORMAT` (6 significant digits), missing values as empty
    cells, the learner stats as one JSON object.
    """

    def __init__(self, path: Optional[str], resume: bool = False):
        self.path = path
        self.rows: List[Dict[str, Any]] = []
        if path and resume and os.path.isfile(path):
            with open(path, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                header = next(reader, None)
            if header is not None and tuple(header) != PROGRESS_COLUMNS:
                raise ValueError(
                    f"{path!r} has other columns than rlpolicy train writes "
                    f"({', '.join(header)}); it cannot be continued"
                )
            self.rows = read_progress(path)
        elif path and os.path.isfile(path):
            os.remove(path)

    def add(self, row: Dict[str, Any]) -> None:
        """Appends one row (keys of PROGRESS_COLUMNS; learner stats as a dict)."""
        unknown = set(row) - set(PROGRESS_COLUMNS)
        if unknown:
            raise ValueError(
                f"progress row has unknown columns {sorted(unknown)}; known: {', '.join(PROGRESS_COLUMNS)}"
            )
        self.rows.append(dict(row))
        if not self.path:
            return
        new = not os.path.isfile(self.path) or os.path.getsize(self.path) == 0
        with open(self.path, "a", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(PROGRESS_COLUMNS)
            writer.writerow([format_value(row.get(c)) for c in PROGRESS_COLUMNS])
            f.flush()


def format_value(value: Any) -> str:
    """A progress.csv cell: floats with 6 significant digits, None/NaN empty,
    dicts (learner stats) as compact JSON with their floats formatted the same way."""
    if value is None:
        return ""
    if isinstance(value, dict):
        parts = [
            f"{json.dumps(str(k))}: {_json_number(v)}"
            for k, v in sorted(value.items())
            if k not in _DROPPED_STATS
        ]
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, (bool, int)) and not isinstance(value, float):
        return str(int(value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(number):
        return ""
    return FLOAT_FORMAT % number


def _json_number(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return json.dumps(str(value))
    if not math.isfinite(number):
        return "null"
    return FLOAT_FORMAT % number


def read_progress(path: str) -> List[Dict[str, Any]]:
    """The rows of a ``progress.csv``: numbers as floats (empty cells: None), the
    learner stats as a dict."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            out.append(
                {
                    k: (
                        json.loads(v)
                        if k == "learner_stats" and v
                        else float(v)
                        if v not in ("", None)
                        else None
                    )
                    for k, v in row.items()
                }
            )
    return out


def plot_learning_curve(
    rows: List[Dict[str, Any]], path: str, *, title: str, target: Optional[float] = None
) -> str:
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
        evals = [
            (r["timesteps_total"], r["eval_reward_mean"])
            for r in rows
            if r.get("eval_reward_mean") is not None and not _isnan(r["eval_reward_mean"])
        ]
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
