"""``rlpolicy`` command line: train, evaluate and export reference policies.

Examples::

    rlpolicy train --algo ppo --env CartPole-v1 --out runs/cartpole --export onnx
    rlpolicy evaluate runs/cartpole --episodes 20
    rlpolicy export runs/cartpole --format torchscript

Bad arguments (an unknown env, framework or config key, invalid JSON or
config values, a missing checkpoint, a format the checkpoint's framework
cannot export) end in one ``rlpolicy <command>: error: ...`` line and exit
code 2, as argparse does for its own errors (which also print the usage).

Exit codes (docs/cli.md): 0 done (solved, or a step/time budget ran out), 1
an export did not verify, 2 bad arguments, 3 training diverged (non-finite
loss, weights or env samples), 4 unsolved with ``--fail-if-unsolved``, 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from rlpolicy import __version__
from rlpolicy.cli.algorithms import ALGORITHMS, FRAMEWORKS, config_defaults, get_algorithm, loop_default

EXPORT_FORMATS = ("torchscript", "onnx", "savedmodel")
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DIVERGED, EXIT_UNSOLVED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


class _Parser(argparse.ArgumentParser):
    """argparse's parser; once the command line is parsed, ``error()`` prints one
    line without the usage block (the arguments were well-formed, a value was not)."""

    parsed = False

    def error(self, message: str) -> Any:
        if not self.parsed:
            super().error(message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _number(kind: Callable[[str], Any], low: float, strict: bool = False) -> Callable[[str], Any]:
    """An argparse ``type``: ``kind(text)`` that must be >= low (> low if strict)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {low}, got {text}")
        return value

    return parse


def _add_train_arguments(train: argparse.ArgumentParser) -> None:
    add = train.add_argument
    add("--algo", default="ppo", choices=tuple(ALGORITHMS), help="algorithm")
    add("--env", default="CartPole-v1", help="registered gymnasium env id")
    add("--framework", default="torch", choices=FRAMEWORKS, help="deep-learning framework")
    add(
        "--stop-reward",
        type=float,
        default=None,
        help="target mean return: reached when a greedy evaluation (--eval-episodes, explore "
        "off) scores at least this; None: the env's reward_threshold (475 for CartPole-v1)",
    )
    add(
        "--stop-timesteps",
        "--max-timesteps",
        dest="max_timesteps",
        type=_number(int, 1),
        default=400_000,
        help="stop after this many env steps (a normal end: exit 0 unless --fail-if-unsolved)",
    )
    add(
        "--max-seconds",
        type=_number(float, 0, strict=True),
        default=600.0,
        help="stop after this many seconds (a normal end, as --stop-timesteps)",
    )
    add(
        "--fail-if-unsolved",
        action="store_true",
        help="exit 4 when a budget ends the run before --stop-reward is reached",
    )
    add(
        "--num-envs",
        type=_number(int, 1),
        default=None,
        help="envs sampled in lock-step per worker (None: 8 for pg/ppo, 16 for PPO on Pendulum-v1, "
        "1 for dqn)",
    )
    add(
        "--num-workers",
        type=_number(int, 0),
        default=0,
        help="Ray rollout workers sampling in parallel (0: sample in this process)",
    )
    add("--num-gpus", type=_number(float, 0), default=0, help="config['num_gpus']")
    add("--fake-gpus", action="store_true", help="towers on CPU (fake GPUs)")
    add("--seed", type=_number(int, 0), default=0, help="random seed")
    add("--config", default="{}", help="JSON dict merged into the algorithm config")
    add(
        "--out",
        "--checkpoint-dir",
        dest="out",
        default=None,
        help="write progress.csv, learning_curve.png and checkpoints here (the last "
        "checkpoint in the folder itself, the best in OUT/checkpoint_best; see docs/cli.md)",
    )
    existing = train.add_mutually_exclusive_group()
    existing.add_argument(
        "--overwrite",
        action="store_true",
        help="OUT holds an earlier run: delete its checkpoints, progress.csv and plot first",
    )
    existing.add_argument(
        "--resume",
        action="store_true",
        help="OUT holds an earlier run: continue from its latest checkpoint "
        "(weights, optimizer state, step/iteration counters; progress.csv "
        "appended); --stop-timesteps counts the earlier steps too",
    )
    add("--trust-checkpoint", action="store_true", help="with --resume: " + _TRUST_HELP)
    add(
        "--checkpoint-every",
        type=_number(int, 0),
        default=0,
        help="also checkpoint every N iterations into OUT/checkpoint_NNNNNN (0: only at the end)",
    )
    add(
        "--eval-episodes",
        type=_number(int, 0),
        default=20,
        help="episodes of each greedy evaluation (0: stop on the training mean alone)",
    )
    add(
        "--eval-every",
        type=_number(int, 0),
        default=None,
        help="also evaluate every N iterations (0: only when the training mean reaches the target; "
        "None: 1 for ppo (0 on Pendulum-v1), 0 for pg, 5 for dqn)",
    )
    add(
        "--export",
        action="append",
        default=[],
        choices=EXPORT_FORMATS,
        help="export the final policy into OUT/export_FORMAT and verify it (repeatable)",
    )
    add(
        "--num-threads",
        type=_number(int, 1),
        default=None,
        help="torch/TF intra-op threads (None: 1, best for these small networks)",
    )
    add(
        "--progress-bar",
        choices=("auto", "on", "off"),
        default="auto",
        help="tqdm progress bar on stderr (auto: when stderr is a terminal)",
    )


_TRUST_HELP = (
    "load the checkpoint even if it names classes/functions outside rlpolicy; this imports "
    "what it names, so use it only for checkpoints you wrote (docs/checkpoints.md)"
)


def _build_parser() -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    """The ``rlpolicy`` parser and its sub-parsers by command name."""
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = _Parser(prog="rlpolicy", description=__doc__.splitlines()[0], formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help="train a reference policy",
        formatter_class=fmt,
        description=f"Train a reference policy ({', '.join(ALGORITHMS)}) until a greedy "
        "evaluation (--eval-episodes, explore off) reaches --stop-reward; the evaluation runs "
        "whenever the mean return of the last 100 training episodes reaches it (and every "
        "--eval-every iterations), or --stop-timesteps / --max-seconds run out. Exit codes: "
        "0 done (solved or budget), 1 export failed, 2 bad arguments, 3 training diverged "
        "(non-finite loss, weights or env samples), 4 unsolved with --fail-if-unsolved, "
        "130 Ctrl-C. See docs/cli.md.",
    )
    _add_train_arguments(train)
    evaluate = sub.add_parser(
        "evaluate",
        help="evaluate a checkpoint (explore off)",
        formatter_class=fmt,
        description="Play episodes with a trained policy, explore off; "
        "prints the mean and std of the returns.",
    )
    evaluate.add_argument("checkpoint", help="checkpoint (or --out folder) of `rlpolicy train`")
    evaluate.add_argument("--episodes", type=_number(int, 1), default=20, help="episodes to play")
    evaluate.add_argument("--seed", type=_number(int, 0), default=10_000, help="seed of the first episode")
    evaluate.add_argument("--trust-checkpoint", action="store_true", help=_TRUST_HELP)
    export = sub.add_parser(
        "export",
        help="export a checkpoint for serving",
        formatter_class=fmt,
        description="Export a checkpoint's model and verify it by loading it "
        "back (torch.jit.load / onnxruntime / tf.saved_model.load).",
    )
    export.add_argument("checkpoint", help="checkpoint (or --out folder) of `rlpolicy train`")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="export format")
    export.add_argument(
        "--out",
        default=None,
        help="output folder (None: CHECKPOINT/export_FORMAT, "
        "with --pipeline CHECKPOINT/export_FORMAT_pipeline)",
    )
    export.add_argument(
        "--pipeline",
        action="store_true",
        help="export the whole action pipeline (preprocessing, model, action "
        "selection, unsquashing; docs/export_pipeline.md), not only the model",
    )
    export.add_argument("--trust-checkpoint", action="store_true", help=_TRUST_HELP)
    return parser, {"train": train, "evaluate": evaluate, "export": export}


def _env_and_stop_reward(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Tuple[Any, float]:
    """Checks ``--env`` (registered, constructible) and resolves ``--stop-reward``."""
    import gymnasium as gym

    try:
        spec = gym.spec(args.env)
        gym.make(args.env).close()
    except (gym.error.Error, ImportError) as e:
        parser.error(f"argument --env: {args.env!r}: {e}")
    stop = args.stop_reward if args.stop_reward is not None else spec.reward_threshold
    if stop is None:
        parser.error(f"argument --stop-reward: env {args.env!r} has no reward_threshold; give --stop-reward")
    return spec, float(stop)


def _checked_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """The algorithm config: defaults for CPU training, then ``--config``, then the flags.

    Invalid JSON, a non-dict, an unknown key or an invalid value is an argument error.
    """
    from rlpolicy._core.config import complete_config, merge_configs, unknown_keys, validate_config

    try:
        user = json.loads(args.config)
    except json.JSONDecodeError as e:
        parser.error(f"argument --config: not valid JSON ({e}): {args.config!r}")
    if not isinstance(user, dict):
        parser.error(
            f"argument --config: must be a JSON object of config keys, got "
            f"{type(user).__name__} {args.config!r}"
        )
    defaults = get_algorithm(args.algo).config()
    for key, close in unknown_keys(user, defaults, strict=True):
        hint = f"; did you mean {close!r}?" if close else ""
        parser.error(f"argument --config: unknown config key {key!r} for --algo {args.algo}{hint}")
    config = merge_configs(config_defaults(args.algo, args.env), user)
    config.update(
        framework=args.framework,
        num_gpus=args.num_gpus,
        _fake_gpus=args.fake_gpus,
        seed=args.seed,
        num_workers=args.num_workers,
    )
    # NaN/inf observations or rewards from the env stop the run with one line naming them.
    config.setdefault("_check_finite_samples", True)
    if args.framework in ("tf2", "tfe"):  # untraced eager steps are several times slower
        config.setdefault("eager_tracing", True)
    try:
        validate_config(complete_config(config, defaults), strict=True)
    except ValueError as e:
        parser.error(f"argument --config: {e}")
    return config


def _policy_class(
    parser: argparse.ArgumentParser, algo: str, framework: str, flag: str = "argument --framework"
) -> type:
    from rlpolicy._core.framework_check import require_framework

    try:
        cls = get_algorithm(algo).policy_class(framework)
        require_framework(framework, cls.__name__)
        return cls
    except (ValueError, ImportError) as e:
        parser.error(f"{flag}: {framework!r} cannot be used for {algo!r}: {e}")


def _check_train(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Tuple[float, dict]:
    """All ``train`` argument checks, before anything is trained; returns (stop reward, config)."""
    _, stop = _env_and_stop_reward(parser, args)
    config = _checked_config(parser, args)
    _policy_class(parser, args.algo, args.framework)
    if args.num_workers and not get_algorithm(args.algo).uses_workers:
        parser.error(
            f"argument --num-workers: {args.algo.upper()} trains in one process; "
            f"--num-workers {args.num_workers} is not supported for --algo {args.algo} (use 0)"
        )
    if args.num_workers and not _worker_set_available():
        parser.error(
            f"argument --num-workers: {args.num_workers} Ray workers need "
            "rlpolicy.evaluation.worker_set.WorkerSet, which is not available in this "
            "build; use --num-workers 0"
        )
    if args.num_workers and _missing_modules("ray"):
        parser.error(
            f"argument --num-workers: {args.num_workers} Ray workers need Ray, which is "
            "not installed: pip install 'rlpolicy[ray]' (or use --num-workers 0)"
        )
    from rlpolicy.cli.export_check import formats_for, required_modules

    for fmt in args.export:
        if fmt not in formats_for(args.framework):
            parser.error(
                f"argument --export: {fmt!r} cannot be exported from a "
                f"--framework {args.framework} policy; choose from "
                f"{', '.join(formats_for(args.framework))}"
            )
        missing = _missing_modules(*required_modules(args.framework, fmt))
        if missing:
            parser.error(
                f"argument --export: {fmt} needs {', '.join(missing)}, not installed: "
                f"pip install 'rlpolicy[{fmt}]'"
            )
    if args.export and not args.out:
        parser.error("argument --export: needs --out (the export goes to OUT/export_FORMAT)")
    if (args.overwrite or args.resume) and not args.out:
        parser.error(f"argument {'--overwrite' if args.overwrite else '--resume'}: needs --out")
    if args.out:
        _check_out_dir(parser, args)
    return stop, config


def _missing_modules(*names: str) -> List[str]:
    """The top-level modules of ``names`` that cannot be imported here."""
    import importlib.util

    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that blocks it, or a broken install
            found = False
        if not found:
            missing.append(name)
    return missing


def _optional_notes(args: argparse.Namespace) -> List[str]:
    """One line per missing optional package that only changes what gets written."""
    notes = []
    if args.out and _missing_modules("matplotlib"):
        notes.append(
            "note: learning_curve.png will not be written: matplotlib is not installed "
            "(pip install 'rlpolicy[cli]')"
        )
    if args.progress_bar == "on" or (args.progress_bar == "auto" and sys.stderr.isatty()):
        if _missing_modules("tqdm"):
            notes.append("note: no progress bar: tqdm is not installed (pip install 'rlpolicy[cli]')")
    return notes


def _read_resume_state(parser: argparse.ArgumentParser, ckpt: str, trusted: bool) -> Any:
    """The policy state saved in ``ckpt``; a bad checkpoint is an argument error (one line, exit 2)."""
    from rlpolicy._core import checkpoint_trust
    from rlpolicy._core.checkpoint import CheckpointError, read_checkpoint

    try:
        return read_checkpoint(ckpt, trust=checkpoint_trust.make_trust(None, trusted)).state
    except CheckpointError as e:
        parser.error(f"argument --resume: {e}")


def _check_out_dir(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--out holding an earlier run needs --overwrite or --resume; --resume needs a
    checkpoint of the same algorithm, framework and env there."""
    from rlpolicy.cli import run_outputs

    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"argument --out: {args.out!r} exists and is not a directory")
    earlier = run_outputs.existing_run_outputs(args.out)
    if args.resume:
        try:
            ckpt = run_outputs.latest_checkpoint(args.out) if os.path.isdir(args.out) else None
            if ckpt is None:
                raise ValueError(f"{args.out!r} does not exist")
            record = run_outputs.read_run_record(ckpt)
            _check_progress_columns(os.path.join(args.out, run_outputs.PROGRESS_FILE))
        except (OSError, ValueError) as e:
            parser.error(f"argument --resume: nothing to resume: {e}")
        mine = (args.algo, args.framework, args.env)
        theirs = (record.algo, record.framework, record.env)
        if mine != theirs:
            parser.error(
                f"argument --resume: {args.out!r} holds a run of --algo {theirs[0]} "
                f"--framework {theirs[1]} --env {theirs[2]}; resume it with those "
                f"(got --algo {mine[0]} --framework {mine[1]} --env {mine[2]})"
            )
        args.resume_from = (
            ckpt,
            record,
            _read_resume_state(parser, ckpt, getattr(args, "trust_checkpoint", False)),
        )
    elif earlier and not args.overwrite:
        shown = ", ".join(earlier[:4]) + (", ..." if len(earlier) > 4 else "")
        parser.error(
            f"argument --out: {args.out!r} already holds a run ({shown}); pass "
            "--overwrite to replace it or --resume to continue it"
        )


def _check_progress_columns(path: str) -> None:
    import csv

    from rlpolicy.cli.run_outputs import PROGRESS_COLUMNS

    if not os.path.isfile(path):
        return
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), None)
    if header is not None and tuple(header) != PROGRESS_COLUMNS:
        raise ValueError(f"{path!r} has other columns than this version writes; use --overwrite")


def _worker_set_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("rlpolicy.evaluation.worker_set") is not None


def _set_threads(framework: str, num_threads: Optional[int]) -> None:
    """Intra-op threads: 1 by default (these networks are too small to gain from more)."""
    n = num_threads or 1
    if framework == "torch":
        import torch

        torch.set_num_threads(n)
    else:
        import tensorflow as tf

        try:  # eager policies; graph-mode sessions follow config["tf_session_args"]
            tf.config.threading.set_intra_op_parallelism_threads(n)
            tf.config.threading.set_inter_op_parallelism_threads(n)
        except RuntimeError:  # TF's runtime already started: keep its setting
            pass


def _seed_frameworks(framework: str, seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    if framework == "torch":
        import torch

        torch.manual_seed(seed)
    else:
        import tensorflow as tf

        tf.random.set_seed(seed)


def train(args: argparse.Namespace, parser: Optional[argparse.ArgumentParser] = None) -> int:
    """Runs ``rlpolicy train``; returns an exit code (module docstring): 0 when solved
    or a budget ran out, 1 when an export failed, 3 when training diverged, 4 when
    unsolved with ``--fail-if-unsolved``, 130 when Ctrl-C stopped it (after the
    checkpoint was written)."""
    import gymnasium as gym

    from rlpolicy.cli.train_run import run_training
    from rlpolicy.cli.training import make_trainer

    parser = parser or _build_parser()[1]["train"]
    stop_reward, config = _check_train(parser, args)
    if args.resume and args.resume_from[1].timesteps_total >= args.max_timesteps:
        done = args.resume_from[1]
        print(
            f"nothing to train: {args.out} is at step {done.timesteps_total} (iteration "
            f"{done.iteration}), already >= --stop-timesteps {args.max_timesteps}",
            flush=True,
        )
        return EXIT_OK
    _set_threads(args.framework, args.num_threads)
    _seed_frameworks(args.framework, args.seed)
    num_envs = args.num_envs or loop_default(args.algo, args.env, "num_envs", 8)

    def env_creator() -> Any:
        return gym.make(args.env)

    for note in _optional_notes(args):
        print(note, flush=True)
    trainer = make_trainer(
        args.algo, env_creator, config, num_envs=num_envs, num_workers=args.num_workers, seed=args.seed
    )
    failed: List[str] = []
    summary = None
    try:
        try:
            record = _prepare_out(args, trainer)
        except ValueError as e:  # CheckpointError: the checkpoint does not fit the policy
            parser.error(f"argument --resume: {e}")
        devices = [str(d) for d in getattr(trainer.policy, "devices", [])]
        resumed = (
            f", resumed at step {record.timesteps_total} (iteration {record.iteration})"
            if args.resume
            else ""
        )
        print(
            f"training {type(trainer.policy).__name__} on {args.env} until mean return "
            f">= {stop_reward:g} (devices: {devices}, envs: {num_envs}, workers: {args.num_workers}"
            f"{resumed})",
            flush=True,
        )
        summary = run_training(trainer, env_creator, _run_options(args, stop_reward, record))
        if summary.reason == "diverged":
            print(
                f"rlpolicy train: error: training diverged at {summary.error}; nothing of that "
                "iteration was saved",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_DIVERGED
        _report_training(summary, stop_reward)
        if summary.checkpoint_dir:
            written = (
                ["progress.csv"]
                + (["learning_curve.png"] if summary.plot_path else [])
                + (["checkpoint_best/"] if summary.best_dir else [])
            )
            print(f"checkpoint written to {args.out} ({', '.join(written)})", flush=True)
        if summary.final_eval_skipped:
            print(
                f"interrupted again: final evaluation skipped; the checkpoint is in {args.out}",
                file=sys.stderr,
                flush=True,
            )
        elif summary.checkpoint_dir and summary.reason != "interrupted":
            failed = [
                fmt
                for fmt in args.export
                if _export(
                    trainer.policy, args.framework, fmt, os.path.join(args.out, f"export_{fmt}"), env_creator
                )
            ]
    finally:
        getattr(trainer, "stop", lambda: None)()  # Ray workers
    if summary.reason == "interrupted":
        return EXIT_INTERRUPTED  # as a shell reports a command ended by SIGINT
    if failed:
        return EXIT_FAILED
    return EXIT_UNSOLVED if args.fail_if_unsolved and not summary.solved else EXIT_OK


def _prepare_out(args: argparse.Namespace, trainer: Any) -> Any:
    """Clears OUT (--overwrite) or restores the policy and counters from it (--resume);
    returns the run record the run continues (a fresh one without --resume)."""
    from rlpolicy.cli import run_outputs
    from rlpolicy.cli.run_outputs import RunRecord
    from rlpolicy.policy.policy import check_restorable_state

    if args.out and args.overwrite:
        run_outputs.remove_run_outputs(args.out)
    if not (args.out and args.resume):
        return RunRecord(algo=args.algo, framework=args.framework, env=args.env, seed=args.seed)
    ckpt, record, state = args.resume_from
    check_restorable_state(trainer.policy, state)
    trainer.policy.set_state(state)
    sync = getattr(getattr(trainer, "sampler", None), "sync_weights", None)
    if sync is not None:
        sync()  # Ray workers sample with the restored weights
    trainer.resume_counters(record.iteration, record.timesteps_total, record.episodes_total)
    return record


def _run_options(args: argparse.Namespace, stop_reward: float, record: Any) -> Any:
    from rlpolicy.cli.train_run import RunOptions

    eval_every = args.eval_every
    if eval_every is None:
        eval_every = loop_default(args.algo, args.env, "eval_every", 0)
    return RunOptions(
        stop_reward=stop_reward,
        stop_timesteps=args.max_timesteps,
        max_seconds=args.max_seconds,
        eval_episodes=args.eval_episodes,
        eval_every=eval_every,
        checkpoint_every=args.checkpoint_every,
        out_dir=args.out,
        progress_bar={"auto": None, "on": True, "off": False}[args.progress_bar],
        record=record,
        resume=bool(args.resume),
    )


def _report_training(summary: Any, stop_reward: float) -> None:
    ev = (
        f", evaluation mean return {summary.eval_mean:.1f} +/- {summary.eval_std:.1f}"
        if summary.eval_mean is not None
        else ""
    )
    if summary.solved:
        print(
            f"reached mean return >= {stop_reward:g} after {summary.timesteps} steps "
            f"({summary.iterations} iterations, {summary.wall_s:.1f}s){ev}",
            flush=True,
        )
    else:
        print(
            f"stopped ({summary.reason}) at mean return {summary.train_mean:.1f} (< {stop_reward:g}) "
            f"after {summary.timesteps} steps{ev}",
            flush=True,
        )


def _export(policy: Any, framework: str, fmt: str, out_dir: str, env_creator: Callable[[], Any]) -> int:
    """Exports and verifies; returns 0, or 1 (with one error line) if that failed."""
    from rlpolicy.cli.export_check import export_and_verify, sample_observations

    try:
        obs = sample_observations(env_creator, policy=policy)
        report = export_and_verify(policy, framework, fmt, out_dir, obs)
    except RuntimeError as e:  # the export did not reproduce the policy, or the exporter failed
        print(f"rlpolicy: error: {fmt} export failed: {e}", file=sys.stderr, flush=True)
        return 1
    print(
        f"exported {fmt} to {report.path}; verified: loaded back with {report.loader}, "
        f"max |output - policy| = {report.max_abs_diff:.2g} on {report.num_observations} observations",
        flush=True,
    )
    return 0


def _record(parser: argparse.ArgumentParser, path: str) -> Tuple[str, Any]:
    """The checkpoint directory ``path`` names and its run record; problems are argument errors."""
    import gymnasium as gym

    from rlpolicy.cli import run_outputs

    try:
        checkpoint_dir = run_outputs.resolve_checkpoint(path)
        record = run_outputs.read_run_record(checkpoint_dir)
    except (OSError, ValueError) as e:
        parser.error(f"argument checkpoint: {e}")
    try:
        gym.spec(record.env)
    except gym.error.Error as e:
        parser.error(f"argument checkpoint: its env {record.env!r} is not registered here: {e}")
    _policy_class(parser, record.algo, record.framework, flag="argument checkpoint")
    return checkpoint_dir, record


def _load(parser: argparse.ArgumentParser, checkpoint_dir: str, record: Any, trusted: bool = False) -> Any:
    """The policy saved in ``checkpoint_dir``."""
    from rlpolicy._core.checkpoint import CheckpointError
    from rlpolicy.cli import run_outputs

    _set_threads(record.framework, None)
    try:
        return run_outputs.load_checkpoint(checkpoint_dir, trusted=trusted)[0]
    except (OSError, CheckpointError) as e:
        parser.error(f"argument checkpoint: {e}")


def evaluate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Runs ``rlpolicy evaluate``: mean/std return over ``--episodes`` greedy episodes;
    returns 0, or 3 (one error line) if the checkpoint holds non-finite weights."""
    import gymnasium as gym
    import numpy as np

    from rlpolicy.cli.training import evaluate_policy

    checkpoint_dir, record = _record(parser, args.checkpoint)
    policy = _load(parser, checkpoint_dir, record, getattr(args, "trust_checkpoint", False))
    returns = evaluate_policy(policy, lambda: gym.make(record.env), args.episodes, seed=args.seed)
    print(
        f"evaluated {type(policy).__name__} ({record.algo}, {record.framework}) from "
        f"{checkpoint_dir} on {record.env}: {args.episodes} episodes, explore off"
    )
    print(
        f"mean return {np.mean(returns):.2f} +/- {np.std(returns):.2f} "
        f"(min {np.min(returns):.1f}, max {np.max(returns):.1f})",
        flush=True,
    )
    return 0


def export(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Runs ``rlpolicy export``: writes the model in ``--format`` and verifies it.

    Returns 0, or 1 if the exported file did not reproduce the policy (or the
    exporter failed); argument errors exit with 2.
    """
    import gymnasium as gym

    from rlpolicy.cli.export_check import formats_for, required_modules

    checkpoint_dir, record = _record(parser, args.checkpoint)
    if args.format not in formats_for(record.framework):
        choices = ", ".join(formats_for(record.framework))
        parser.error(
            f"argument --format: {args.format!r} cannot be exported from this "
            f"{record.framework!r} checkpoint; choose from {choices}"
        )
    missing = _missing_modules(*required_modules(record.framework, args.format))
    if missing:
        parser.error(
            f"argument --format: {args.format} needs {', '.join(missing)}, not installed: "
            f"pip install 'rlpolicy[{args.format}]'"
        )
    suffix = "_pipeline" if args.pipeline else ""
    out = args.out or os.path.join(checkpoint_dir, f"export_{args.format}{suffix}")
    policy = _load(parser, checkpoint_dir, record, getattr(args, "trust_checkpoint", False))
    if args.pipeline:
        return _export_pipeline(parser, policy, record.framework, args.format, out)
    try:
        return _export(policy, record.framework, args.format, out, lambda: gym.make(record.env))
    except ValueError as e:  # an --out folder holding something else
        parser.error(f"argument --out: {e}")


def _export_pipeline(parser: argparse.ArgumentParser, policy: Any, framework: str, fmt: str, out: str) -> int:
    """``rlpolicy export --pipeline``: returns 0, or 1 (one error line) if the
    pipeline did not reproduce the policy; what cannot be exported is an
    argument error."""
    from rlpolicy.cli.export_check import export_pipeline_and_verify

    try:
        report = export_pipeline_and_verify(policy, framework, fmt, out)
    except ValueError as e:  # no pipeline export for this policy, or --out holds something else
        parser.error(f"argument --pipeline: {e}")
    except RuntimeError as e:
        print(f"rlpolicy: error: {fmt} pipeline export failed: {e}", file=sys.stderr, flush=True)
        return 1
    print(
        f"exported {report.format} to {report.path}; verified: loaded back with "
        f"{report.loader}, max |actions - compute_actions| = {report.max_abs_diff:.2g} on "
        f"{report.num_observations} observations",
        flush=True,
    )
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``rlpolicy`` command; returns the exit status.

    Argument errors raise ``SystemExit(2)`` after printing one error line.
    """
    try:
        parser, subparsers = _build_parser()
        args = parser.parse_args(argv)
        for p in (parser, *subparsers.values()):
            p.parsed = True  # from here on, errors are about values: one line, no usage
        command = {"train": train, "evaluate": evaluate, "export": export}[args.command]
        return command(args, subparsers[args.command])
    except KeyboardInterrupt:  # before training started (or after it ended): no traceback
        print("rlpolicy: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
