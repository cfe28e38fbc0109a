"""The training run behind ``rlpolicy train``: iterate, evaluate, log, checkpoint, plot.

:func:`run_training` calls ``trainer.train()`` until the target is met or a
budget (env steps, seconds) runs out. "Solved" means a greedy evaluation
(``explore=False``, ``eval_episodes`` episodes) reached ``stop_reward``; an
evaluation runs whenever the training mean return (last 100 episodes)
reaches the target, and training continues if the evaluation falls short.
With ``eval_episodes=0`` the training mean alone decides.

Each iteration prints one line (mean return, env steps, throughput) and, on
a terminal, updates a tqdm progress bar over the step budget. With an output
directory it writes ``progress.csv`` every iteration, a checkpoint every
``checkpoint_every`` iterations and at the end, and ``learning_curve.png``.
"""
from __future__ import annotations

import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from rlpolicy.cli import run_outputs
from rlpolicy.cli.run_outputs import ProgressLog, RunRecord
from rlpolicy.cli.training import IterationResult, evaluate_policy


@dataclass
class RunOptions:
    """When to stop, evaluate and checkpoint, and where to write (see module doc)."""

    stop_reward: float
    stop_timesteps: int = 1_000_000
    max_seconds: float = math.inf
    eval_episodes: int = 20
    eval_every: int = 0          # also evaluate every N iterations (0: only at the target)
    eval_seed: int = 10_000
    checkpoint_every: int = 0    # 0: only the final checkpoint
    out_dir: Optional[str] = None
    progress_bar: Optional[bool] = None  # None: when stderr is a terminal
    record: Optional[RunRecord] = None   # algo/framework/env written with each checkpoint


@dataclass
class RunSummary:
    """How a run ended."""

    solved: bool
    reason: str                  # "solved", "timesteps", "time" or "interrupted"
    iterations: int
    timesteps: int
    wall_s: float
    train_mean: float
    eval_mean: Optional[float] = None
    eval_std: Optional[float] = None
    evaluations: List[Dict[str, float]] = field(default_factory=list)
    checkpoint_dir: Optional[str] = None


class _Display:
    """Iteration lines on stdout and, on a terminal, a tqdm bar over the step budget."""

    def __init__(self, total: int, enabled: Optional[bool], log: Callable[[str], None]):
        self._log, self.bar = log, None
        if enabled is None:
            enabled = sys.stderr.isatty()
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # the bar is optional (rlpolicy[cli]); the lines are not
                return
            self.bar = tqdm(total=total, unit="step", unit_scale=True, dynamic_ncols=True,
                            file=sys.stderr, leave=False)

    def line(self, text: str) -> None:
        if self.bar is not None and self._log is print:
            self.bar.write(text, file=sys.stdout)
        else:
            self._log(text)

    def update(self, steps: int, result: IterationResult, rate: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"return {result.episode_reward_mean:.1f}, {rate:,.0f} steps/s",
                                     refresh=False)
            self.bar.update(max(0, min(steps, self.bar.total) - self.bar.n))
            self.bar.refresh()  # one redraw per iteration (iterations take ~0.1 s or more)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Run:
    """State of one :func:`run_training` call."""

    def __init__(self, trainer: Any, env_creator: Callable[[], Any], opts: RunOptions,
                 log: Callable[[str], None]):
        self.trainer, self.env_creator, self.opts = trainer, env_creator, opts
        self.display = _Display(opts.stop_timesteps, opts.progress_bar, log)
        out = opts.out_dir
        if out:
            os.makedirs(out, exist_ok=True)
            _remove_stale_checkpoints(out)
        self.progress = ProgressLog(os.path.join(out, run_outputs.PROGRESS_FILE) if out else None)
        self.start = time.perf_counter()
        self.last: Optional[IterationResult] = None
        self.last_eval: Optional[Dict[str, float]] = None
        self.evaluations: List[Dict[str, float]] = []
        self._prev_steps, self._prev_time = 0, self.start

    def evaluate(self) -> Dict[str, float]:
        returns = evaluate_policy(self.trainer.policy, self.env_creator, self.opts.eval_episodes,
                                  seed=self.opts.eval_seed)
        r = self.last
        result = {"iteration": r.iteration if r else 0, "timesteps": r.timesteps_total if r else 0,
                  "eval_mean": float(np.mean(returns)), "eval_std": float(np.std(returns)),
                  "time_s": time.perf_counter() - self.start}
        self.evaluations.append(result)
        self.last_eval = result
        return result

    def step(self) -> Optional[str]:
        """One iteration; returns why to stop, or None."""
        opts = self.opts
        r = self.last = self.trainer.train()
        now = time.perf_counter()
        rate = (r.timesteps_total - self._prev_steps) / max(1e-9, now - self._prev_time)
        ev = None
        at_target = r.episode_reward_mean >= opts.stop_reward
        if opts.eval_episodes > 0 and (at_target or (opts.eval_every and r.iteration % opts.eval_every == 0)):
            ev = self.evaluate()
        self._record_row(r, rate, ev)
        self.display.update(r.timesteps_total, r, rate)
        if opts.checkpoint_every and opts.out_dir and r.iteration % opts.checkpoint_every == 0:
            self.save(run_outputs.periodic_checkpoint_dir(opts.out_dir, r.iteration))
        self._prev_steps, self._prev_time = r.timesteps_total, time.perf_counter()
        if opts.eval_episodes <= 0:
            solved = at_target
        else:
            solved = ev is not None and ev["eval_mean"] >= opts.stop_reward
        if solved:
            return "solved"
        if r.timesteps_total >= opts.stop_timesteps:
            return "timesteps"
        if time.perf_counter() - self.start >= opts.max_seconds:
            return "time"
        return None

    def _record_row(self, r: IterationResult, rate: float, ev: Optional[Dict[str, float]]) -> None:
        elapsed = time.perf_counter() - self.start
        row = {"iteration": r.iteration, "timesteps_total": r.timesteps_total,
               "episodes_total": r.episodes_total, "episode_reward_mean": r.episode_reward_mean,
               "time_total_s": round(elapsed, 3), "steps_per_s": round(rate, 1),
               "eval_reward_mean": ev["eval_mean"] if ev else None,
               "eval_reward_std": ev["eval_std"] if ev else None, **r.learner_stats}
        self.progress.add(row)
        self.display.line(
            f"iter {r.iteration:3d}  steps {r.timesteps_total:7d}  episodes {r.episodes_total:5d}  "
            f"mean return {r.episode_reward_mean:7.1f}  {rate:6.0f} steps/s  time {elapsed:6.1f}s")
        if ev:
            self.display.line(f"  evaluation ({self.opts.eval_episodes} episodes, explore off): "
                              f"mean return {ev['eval_mean']:.1f} +/- {ev['eval_std']:.1f}")

    def save(self, directory: str) -> str:
        base = self.opts.record or RunRecord(algo="?", framework="?", env="?")
        r, ev = self.last, self.last_eval
        record = RunRecord(**{**base.__dict__, "iteration": r.iteration if r else 0,
                              "timesteps_total": r.timesteps_total if r else 0,
                              "eval_reward_mean": ev["eval_mean"] if ev else None})
        return run_outputs.save_checkpoint(self.trainer.policy, directory, record)

    def finish(self, reason: str) -> RunSummary:
        self.display.close()
        opts, r = self.opts, self.last
        if r is not None and opts.eval_episodes > 0 and (
                self.last_eval is None or self.last_eval["iteration"] != r.iteration):
            ev = self.evaluate()  # the end state is always evaluated
            self.display.line(f"final evaluation ({opts.eval_episodes} episodes, explore off): "
                              f"mean return {ev['eval_mean']:.1f} +/- {ev['eval_std']:.1f}")
        ev = self.last_eval
        summary = RunSummary(
            solved=reason == "solved", reason=reason, iterations=r.iteration if r else 0,
            timesteps=r.timesteps_total if r else 0, wall_s=time.perf_counter() - self.start,
            train_mean=r.episode_reward_mean if r else float("nan"),
            eval_mean=ev["eval_mean"] if ev else None, eval_std=ev["eval_std"] if ev else None,
            evaluations=list(self.evaluations))
        if opts.out_dir and r is not None:
            summary.checkpoint_dir = self.save(opts.out_dir)
            if self.progress.rows:
                self.plot()
        return summary

    def plot(self) -> Optional[str]:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.display.line("learning_curve.png skipped: matplotlib is not installed "
                              "(pip install 'rlpolicy[cli]')")
            return None
        rec = self.opts.record
        title = f"{rec.algo.upper()} ({rec.framework}) on {rec.env}" if rec else "training"
        path = os.path.join(self.opts.out_dir, run_outputs.PLOT_FILE)
        return run_outputs.plot_learning_curve(self.progress.rows, path, title=title,
                                               target=self.opts.stop_reward)


def _remove_stale_checkpoints(out_dir: str) -> None:
    """Periodic checkpoints of an earlier run in ``out_dir`` (only ours) are removed."""
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if run_outputs.is_periodic_checkpoint(path):
            shutil.rmtree(path)


def run_training(trainer: Any, env_creator: Callable[[], Any], opts: RunOptions,
                 log: Callable[[str], None] = print) -> RunSummary:
    """Trains until solved or out of budget; see the module docstring.

    Ctrl-C ends the run like a budget would (reason ``"interrupted"``): the
    final evaluation, checkpoint and plot are still written.
    """
    run = _Run(trainer, env_creator, opts, log)
    reason = None
    try:
        while reason is None:
            reason = run.step()
    except KeyboardInterrupt:
        reason = "interrupted"
        run.display.line("interrupted: writing the final checkpoint")
    return run.finish(reason)
