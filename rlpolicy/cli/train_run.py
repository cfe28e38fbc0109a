"""The training run behind ``rlpolicy train``: iterate, evaluate, log, checkpoint, plot.

:func:`run_training` calls ``trainer.train()`` until the target is met or a
budget (env steps, seconds) runs out. "Solved" means a greedy evaluation
(``explore=False``, ``eval_episodes`` episodes) reached ``stop_reward``; an
evaluation runs whenever the training mean return (last 100 episodes)
reaches the target, and training continues if the evaluation falls short.
With ``eval_episodes=0`` the training mean alone decides.

Each iteration prints one line (mean return, env steps, throughput) and, on
a terminal, updates a tqdm progress bar over the step budget. With an output
directory it appends a row to ``progress.csv`` every iteration, writes a
checkpoint every ``checkpoint_every`` iterations, keeps the best-scoring
policy in ``checkpoint_best/`` (by greedy evaluation; by the training mean
with ``eval_episodes=0``), and at the end saves the last checkpoint FIRST,
then runs the final evaluation (its result goes into the last row, the run
record and the plot), then writes ``learning_curve.png``.

Non-finite training: if an iteration's learner stats or the policy's weights
hold a NaN/inf, or the env returned one (``NonFiniteSampleError``, with
``config["_check_finite_samples"]``), the run stops (reason ``"diverged"``,
``RunSummary.error`` names the iteration and what was non-finite): nothing of
that iteration is saved (no best, periodic or last checkpoint; the last
checkpoint on disk is whatever an earlier run or iteration wrote), and there
is no final evaluation.

Ctrl-C: the first one stops training; the last checkpoint is saved and the
final evaluation runs. A second one during the final evaluation skips it
(the checkpoint is already on disk). A Ctrl-C that arrives while a
checkpoint is being written waits until the write is done.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from rlpolicy.cli import run_outputs
from rlpolicy.cli.run_outputs import ProgressLog, RunRecord
from rlpolicy.cli.training import IterationResult, evaluate_policy
from rlpolicy.utils.error import NonFiniteSampleError

# The interpreter's own print, taken before anything (Ray's workers) can replace
# builtins.print: the iteration lines are written with it (or through the bar).
_REAL_PRINT = builtins.print


@dataclass
class RunOptions:
    """When to stop, evaluate and checkpoint, and where to write (see module doc)."""

    stop_reward: float
    stop_timesteps: int = 1_000_000
    max_seconds: float = math.inf
    eval_episodes: int = 20
    eval_every: int = 0  # also evaluate every N iterations (0: only at the target)
    eval_seed: int = 10_000
    checkpoint_every: int = 0  # 0: only the final checkpoint
    out_dir: Optional[str] = None
    progress_bar: Optional[bool] = None  # None: when stderr is a terminal
    record: Optional[RunRecord] = None  # algo/framework/env written with each checkpoint
    resume: bool = False  # append to OUT's progress.csv; counters come from `record`
    keep_best: bool = True  # keep OUT/checkpoint_best
    plot: bool = True  # write learning_curve.png (needs matplotlib)


@dataclass
class RunSummary:
    """How a run ended."""

    solved: bool
    reason: str  # "solved", "timesteps", "time", "interrupted" or "diverged"
    iterations: int
    timesteps: int
    wall_s: float
    train_mean: float
    eval_mean: Optional[float] = None
    eval_std: Optional[float] = None
    evaluations: List[Dict[str, float]] = field(default_factory=list)
    checkpoint_dir: Optional[str] = None
    best_dir: Optional[str] = None
    plot_path: Optional[str] = None
    final_eval_skipped: bool = False  # a second Ctrl-C stopped the final evaluation
    error: Optional[str] = None  # reason "diverged": the iteration and what was non-finite


class _Display:
    """Iteration lines on stdout and, on a terminal, a tqdm bar over the step budget.

    With ``log=None`` the lines go to stdout through the bar (``bar.write``) or
    with the real ``print``, whatever ``builtins.print`` has become since.
    """

    def __init__(
        self, total: int, enabled: Optional[bool], log: Optional[Callable[[str], None]], initial: int = 0
    ):
        self._log, self.bar = log, None
        if enabled is None:
            enabled = sys.stderr.isatty()
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # the bar is optional (rlpolicy[cli]); the lines are not
                return
            self.bar = tqdm(
                total=total,
                initial=min(initial, total),
                unit="step",
                unit_scale=True,
                dynamic_ncols=True,
                file=sys.stderr,
                leave=False,
            )

    def line(self, text: str) -> None:
        if self._log is not None:
            self._log(text)
        elif self.bar is not None:
            self.bar.write(text, file=sys.stdout)
            sys.stdout.flush()
        else:
            _REAL_PRINT(text, flush=True)

    def update(self, steps: int, result: IterationResult, rate: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(
                f"return {result.episode_reward_mean:.1f}, {rate:,.0f} steps/s", refresh=False
            )
            self.bar.update(max(0, min(steps, self.bar.total) - self.bar.n))
            self.bar.refresh()  # one redraw per iteration (iterations take ~0.1 s or more)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class TrainingDiverged(Exception):
    """An iteration produced non-finite stats or weights, or the env non-finite samples."""


def describe_non_finite(stats: Dict[str, Any], weights: Any) -> Optional[str]:
    """What holds a NaN/inf (``"total_loss, kl, weights (4 of 4 arrays, first 'x')"``),
    or None if everything is finite."""
    keys = non_finite_stats(stats)
    arrays, total = non_finite_arrays(weights)
    parts = keys[:4] + ([f"{len(keys) - 4} more stats"] if len(keys) > 4 else [])
    if arrays:
        parts.append(f"weights ({len(arrays)} of {total} arrays, first {arrays[0]!r})")
    return ", ".join(parts) or None


def non_finite_stats(stats: Dict[str, Any]) -> List[str]:
    """The keys of the numeric learner stats that hold a NaN or inf."""
    bad = []
    for key, value in stats.items():
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):  # not a number
            continue
        if not np.isfinite(arr).all():
            bad.append(key)
    return bad


def non_finite_arrays(weights: Any) -> Tuple[List[str], int]:
    """(paths of the float arrays in ``weights`` that hold a NaN or inf, number of arrays)."""
    import tree

    leaves = tree.flatten_with_path(weights)
    bad = [
        "/".join(str(p) for p in path)
        for path, value in leaves
        if np.asarray(value).dtype.kind in "fc" and not np.isfinite(np.asarray(value)).all()
    ]
    return bad, len(leaves)


class _Interrupts:
    """What :func:`deferred_interrupts` saw."""

    def __init__(self) -> None:
        self.pending = False


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[_Interrupts]:
    """Holds SIGINT back while the block runs (a checkpoint write): a Ctrl-C in it
    sets ``.pending`` instead of raising. Outside the main thread: no effect."""
    state = _Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def hold(signum: int, frame: Any) -> None:
        state.pending = True

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


class _Run:
    """State of one :func:`run_training` call."""

    def __init__(
        self,
        trainer: Any,
        env_creator: Callable[[], Any],
        opts: RunOptions,
        log: Optional[Callable[[str], None]],
    ):
        self.trainer, self.env_creator, self.opts = trainer, env_creator, opts
        base = opts.record if opts.resume and opts.record else None
        self._time0 = base.time_total_s if base else 0.0
        self.display = _Display(
            opts.stop_timesteps, opts.progress_bar, log, initial=base.timesteps_total if base else 0
        )
        out = opts.out_dir
        if out:
            os.makedirs(out, exist_ok=True)
        self.progress = ProgressLog(
            os.path.join(out, run_outputs.PROGRESS_FILE) if out else None, resume=opts.resume
        )
        self.start = time.perf_counter()
        self.last: Optional[IterationResult] = None
        self.last_eval: Optional[Dict[str, float]] = None
        self.evaluations: List[Dict[str, float]] = []
        self._pending: Optional[Dict[str, Any]] = None  # the last iteration's row, not yet written
        self._prev_steps = base.timesteps_total if base else 0
        self._prev_time = self.start
        self.best = run_outputs.best_score(out) if out and opts.resume else None
        self.best_dir: Optional[str] = None

    def elapsed(self) -> float:
        return self._time0 + time.perf_counter() - self.start

    def evaluate(self) -> Dict[str, float]:
        returns = evaluate_policy(
            self.trainer.policy, self.env_creator, self.opts.eval_episodes, seed=self.opts.eval_seed
        )
        r = self.last
        result = {
            "iteration": r.iteration if r else 0,
            "timesteps": r.timesteps_total if r else 0,
            "eval_mean": float(np.mean(returns)),
            "eval_std": float(np.std(returns)),
            "time_s": self.elapsed(),
        }
        self.evaluations.append(result)
        self.last_eval = result
        return result

    def step(self) -> Optional[str]:
        """One iteration; returns why to stop, or None."""
        opts = self.opts
        iteration = (self.last.iteration if self.last else getattr(self.trainer, "iteration", 0)) + 1
        try:
            r = self.trainer.train()
        except NonFiniteSampleError as err:  # also Ray's RayTaskError wrapping one
            raise TrainingDiverged(f"iteration {iteration}: {_first_line(err)}") from err
        except RuntimeError as err:
            # Older torch (< 2.1) refuses an optimizer step whose scalars overflow float32
            # (e.g. Adam with lr=1e38) where newer releases write inf/NaN weights: the same
            # divergence, reported the same way.
            if "overflow" not in str(err):
                raise
            raise TrainingDiverged(
                f"iteration {iteration}: non-finite optimizer step ({_first_line(err)}; "
                "try a lower lr, or grad_clip)"
            ) from err
        bad = describe_non_finite(dict(r.learner_stats), self.trainer.policy.get_weights())
        if bad:
            raise TrainingDiverged(
                f"iteration {r.iteration}: non-finite {bad} (try a lower lr, or grad_clip)"
            )
        self.last = r
        now = time.perf_counter()
        rate = (r.timesteps_total - self._prev_steps) / max(1e-9, now - self._prev_time)
        self._pending = self._row(r, rate)
        self.display.update(r.timesteps_total, r, rate)
        self._print_iteration(r, rate)
        ev = None
        at_target = r.episode_reward_mean >= opts.stop_reward
        if opts.eval_episodes > 0 and (at_target or (opts.eval_every and r.iteration % opts.eval_every == 0)):
            ev = self._evaluate_last()
            self.display.line(
                f"  evaluation ({opts.eval_episodes} episodes, explore off): "
                f"mean return {ev['eval_mean']:.1f} +/- {ev['eval_std']:.1f}"
            )
        elif opts.eval_episodes <= 0:
            self._keep_best("episode_reward_mean", r.episode_reward_mean)
        if opts.checkpoint_every and opts.out_dir and r.iteration % opts.checkpoint_every == 0:
            self.save(run_outputs.periodic_checkpoint_dir(opts.out_dir, r.iteration), folder=True)
        self._prev_steps, self._prev_time = r.timesteps_total, time.perf_counter()
        if opts.eval_episodes <= 0:
            solved = at_target
        else:
            solved = ev is not None and ev["eval_mean"] >= opts.stop_reward
        reason = None
        if solved:
            reason = "solved"
        elif r.timesteps_total >= opts.stop_timesteps:
            reason = "timesteps"
        elif time.perf_counter() - self.start >= opts.max_seconds:
            reason = "time"
        if reason is None or ev is not None or opts.eval_episodes <= 0:
            self._flush_row()  # else the final evaluation completes the row
        return reason

    def _evaluate_last(self) -> Dict[str, float]:
        ev = self.evaluate()
        if self._pending is not None:
            self._pending.update(eval_reward_mean=ev["eval_mean"], eval_reward_std=ev["eval_std"])
        self._keep_best("eval_reward_mean", ev["eval_mean"])
        return ev

    def _row(self, r: IterationResult, rate: float) -> Dict[str, Any]:
        return {
            "iteration": r.iteration,
            "timesteps_total": r.timesteps_total,
            "episodes_total": r.episodes_total,
            "episode_reward_mean": r.episode_reward_mean,
            "time_total_s": self.elapsed(),
            "steps_per_s": rate,
            "eval_reward_mean": None,
            "eval_reward_std": None,
            "learner_stats": dict(r.learner_stats),
        }

    def _flush_row(self) -> None:
        """Appends the pending row to progress.csv. A Ctrl-C during the write is held
        until the row is written and no longer pending (so no later flush repeats
        it), then raised as KeyboardInterrupt."""
        if self._pending is None:
            return
        with deferred_interrupts() as held:
            self.progress.add(self._pending)
            self._pending = None
        if held.pending:
            raise KeyboardInterrupt

    def _print_iteration(self, r: IterationResult, rate: float) -> None:
        self.display.line(
            f"iter {r.iteration:3d}  steps {r.timesteps_total:7d}  episodes {r.episodes_total:5d}  "
            f"mean return {r.episode_reward_mean:7.1f}  {rate:6.0f} steps/s  time {self.elapsed():6.1f}s"
        )

    def _keep_best(self, by: str, score: float) -> None:
        """Saves ``checkpoint_best`` if ``score`` beats the best so far (same measure)."""
        opts = self.opts
        if not (opts.out_dir and opts.keep_best) or score is None or not math.isfinite(score):
            return
        if self.best is not None and self.best[0] == by and score <= self.best[1]:
            return
        self.best = (by, float(score))
        self.best_dir = self.save(
            os.path.join(opts.out_dir, run_outputs.BEST_DIR),
            folder=True,
            extra={"best_by": by, "score": float(score)},
        )

    def save(self, directory: str, folder: bool = False, extra: Optional[dict] = None) -> str:
        """Writes a checkpoint; a Ctrl-C during the write is held until it is done
        and then raised as KeyboardInterrupt."""
        base = self.opts.record or RunRecord(algo="?", framework="?", env="?")
        r, ev = self.last, self.last_eval
        ev_now = ev if ev is not None and r is not None and ev["iteration"] == r.iteration else None
        record = RunRecord(
            **{
                **base.__dict__,
                "iteration": r.iteration if r else 0,
                "timesteps_total": r.timesteps_total if r else 0,
                "episodes_total": r.episodes_total if r else 0,
                "time_total_s": round(self.elapsed(), 3),
                "eval_reward_mean": ev_now["eval_mean"] if ev_now else None,
                "extra": dict(extra or {}),
            }
        )
        write = run_outputs.save_folder_checkpoint if folder else run_outputs.save_checkpoint
        with deferred_interrupts() as held:
            path = write(self.trainer.policy, directory, record)
        if held.pending:
            raise KeyboardInterrupt
        return path

    def finish(self, reason: str) -> RunSummary:
        opts, r = self.opts, self.last
        self.display.close()
        summary = RunSummary(
            solved=reason == "solved",
            reason=reason,
            iterations=r.iteration if r else 0,
            timesteps=r.timesteps_total if r else 0,
            wall_s=0.0,
            train_mean=r.episode_reward_mean if r else float("nan"),
        )
        if reason == "diverged":  # nothing of the diverged iteration is saved or evaluated
            summary.wall_s = time.perf_counter() - self.start
            return summary
        if opts.out_dir and r is not None:
            try:
                summary.checkpoint_dir = self.save(opts.out_dir)  # first: nothing slow before it
            except KeyboardInterrupt:  # held during the write: the checkpoint is complete
                summary.checkpoint_dir = os.path.abspath(opts.out_dir)
                summary.final_eval_skipped = True
                summary.reason = "interrupted"
        if (
            r is not None
            and opts.eval_episodes > 0
            and not summary.final_eval_skipped
            and (self.last_eval is None or self.last_eval["iteration"] != r.iteration)
        ):
            try:
                self.display.line(f"final evaluation ({opts.eval_episodes} episodes, explore off) ...")
                ev = self._evaluate_last()
                self.display.line(
                    f"final evaluation ({opts.eval_episodes} episodes, explore off): "
                    f"mean return {ev['eval_mean']:.1f} +/- {ev['eval_std']:.1f}"
                )
                if summary.checkpoint_dir:
                    run_outputs.update_run_record(summary.checkpoint_dir, eval_reward_mean=ev["eval_mean"])
            except KeyboardInterrupt:
                summary.final_eval_skipped = True
                summary.reason = "interrupted"
        try:
            self._flush_row()
        except KeyboardInterrupt:  # held during the write: the row is in progress.csv
            summary.reason = "interrupted"
        ev = self.last_eval
        if ev is not None and r is not None and ev["iteration"] == r.iteration:  # only a current one
            summary.eval_mean, summary.eval_std = ev["eval_mean"], ev["eval_std"]
        summary.evaluations = list(self.evaluations)
        summary.best_dir = self.best_dir or (
            os.path.join(opts.out_dir, run_outputs.BEST_DIR) if opts.out_dir and self.best else None
        )
        if opts.out_dir and opts.plot and self.progress.rows and not summary.final_eval_skipped:
            summary.plot_path = self.plot()
        summary.wall_s = time.perf_counter() - self.start
        return summary

    def plot(self) -> Optional[str]:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return None
        rec = self.opts.record
        title = f"{rec.algo.upper()} ({rec.framework}) on {rec.env}" if rec else "training"
        path = os.path.join(self.opts.out_dir, run_outputs.PLOT_FILE)
        return run_outputs.plot_learning_curve(
            self.progress.rows, path, title=title, target=self.opts.stop_reward
        )


def run_training(
    trainer: Any,
    env_creator: Callable[[], Any],
    opts: RunOptions,
    log: Optional[Callable[[str], None]] = None,
) -> RunSummary:
    """Trains until solved or out of budget; see the module docstring.

    Args:
        log: Called with each progress line; None: stdout (through the progress
            bar when there is one).

    Ctrl-C ends the run like a budget would (reason ``"interrupted"``): the
    last checkpoint is written, then the final evaluation and the plot; a
    second Ctrl-C during the final evaluation skips it and the plot
    (``final_eval_skipped``).
    """
    run = _Run(trainer, env_creator, opts, log)
    reason, error = None, None
    try:
        while reason is None:
            reason = run.step()
    except KeyboardInterrupt:
        reason = "interrupted"
        run.display.line("interrupted: saving the checkpoint (Ctrl-C again skips the final evaluation)")
    except TrainingDiverged as err:
        reason, error = "diverged", str(err)
    summary = run.finish(reason)
    summary.error = error
    return summary


def _first_line(err: BaseException) -> str:
    """The error's message: its first line, or for a Ray-wrapped error (whose text is
    the remote traceback) the message after its last ``NonFiniteSampleError:``."""
    text = str(err).strip()
    if "NonFiniteSampleError: " in text:
        text = text.rsplit("NonFiniteSampleError: ", 1)[1]
    return text.splitlines()[0] if text else type(err).__name__
