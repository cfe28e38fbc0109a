"""Steps and seconds to solve CartPole-v1 with `rlpolicy train`'s defaults: one row per
algorithm x framework (median over seeds), next to what the README promises.

Every run is `rlpolicy train --algo A --framework F --env CartPole-v1 --seed S` with the
shipped per-env defaults (``rlpolicy.cli.algorithms.TRAINING_DEFAULTS``) and the same stop
rule: whenever the mean return of the last 100 training episodes reaches 475 (and, for
DQN, every ``eval_every`` iterations), a greedy evaluation (20 episodes, explore off,
seeded envs) runs; the task is solved when its mean is >= 475. Reported per run: env
steps sampled and seconds until solved: the training loop's (sampling, learning and the
evaluations; what the 10 s goal of the main job counts) and the total with the policy's
construction; per row: how many seeds solved, the median steps and seconds over the seeds
that solved, and the promise (:data:`PROMISES`, the README's table) with whether the row
keeps it (every seed solved within the promised step budget).

``--variant NAME=JSON`` (repeatable) adds rows with config overrides on top of the shipped
defaults (``num_envs`` and ``eval_every`` set the loop), run interleaved with the defaults
seed by seed, so configurations are compared side by side on the same machine load.
``--sb3 zoo`` (or ``default``) adds a PPO row of Stable-Baselines3 (RL Zoo's tuned
CartPole-v1 hyperparameters, or SB3's defaults) stopped by the same rule, evaluated at the
same cadence as rlpolicy's PPO (every ``train_batch_size * eval_every`` steps, and when the
training mean reaches the target); SB3 is optional (``pip install rlpolicy[bench]``). One
thread per run (torch and TF).

    .venv/bin/python benchmarks/bench_training.py [--algos pg,ppo,dqn] \
        [--frameworks torch,tf,tf2] [--seeds 0,1,2] [--max-steps N] [--sb3 off|zoo|default] \
        [--variant 'kl0={"kl_coeff": 0.0}']
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from rlpolicy.cli.algorithms import LOOP_KEYS, config_defaults, get_algorithm, loop_default  # noqa: E402
from rlpolicy.cli.train_run import RunOptions, run_training  # noqa: E402
from rlpolicy.cli.training import evaluate_policy  # noqa: E402

ENV_ID, TARGET, EVAL_EPISODES, EVAL_SEED = "CartPole-v1", 475.0, 20, 10_000

# What the README promises for `rlpolicy train --env CartPole-v1` (its table): every seed
# of 0, 1, 2 solves (greedy evaluation >= 475) within this many env steps.
PROMISES: Dict[Tuple[str, str], int] = {
    (algo, fw): budget
    for algo, budget in (("pg", 400_000), ("ppo", 200_000), ("dqn", 100_000))
    for fw in ("torch", "tf", "tf2")
}


def make_env() -> Any:
    return gym.make(ENV_ID)


def _seed_and_threads(framework: str, seed: int) -> None:
    """As `rlpolicy train` does: python/numpy/framework seeds, one intra-op thread."""
    random.seed(seed)
    np.random.seed(seed)
    if framework == "torch":
        import torch

        torch.set_num_threads(1)
        torch.manual_seed(seed)
    else:
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(1)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # TF's runtime already started
            pass
        tf.random.set_seed(seed)


def _merged(config: Dict[str, Any], overrides: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(config)
    for k, v in overrides.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def run_rlpolicy(
    algo: str,
    framework: str,
    seed: int,
    max_steps: int,
    max_seconds: float,
    overrides: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """One `rlpolicy train` run with the shipped defaults (plus ``overrides``; its
    ``num_envs``/``eval_every`` set the loop); how it ended."""
    overrides = dict(overrides or {})
    loop = {k: overrides.pop(k, loop_default(algo, ENV_ID, k, d)) for k, d in zip(LOOP_KEYS, (8, 0))}
    _seed_and_threads(framework, seed)
    start = time.perf_counter()
    config = _merged(dict(config_defaults(algo, ENV_ID), framework=framework, seed=seed), overrides)
    if framework in ("tf2", "tfe"):
        config.setdefault("eager_tracing", True)  # as `rlpolicy train` does
    trainer = get_algorithm(algo).make_trainer(
        make_env, config, num_envs=loop["num_envs"], num_workers=0, seed=seed
    )
    cpu0 = time.process_time()
    summary = run_training(
        trainer,
        make_env,
        RunOptions(
            stop_reward=TARGET,
            stop_timesteps=max_steps,
            max_seconds=max_seconds,
            eval_episodes=EVAL_EPISODES,
            eval_seed=EVAL_SEED,
            eval_every=loop["eval_every"],
            progress_bar=False,
        ),
        log=lambda s: None,
    )
    best = max((e["eval_mean"] for e in summary.evaluations), default=None)
    return {
        "solved": summary.solved,
        "steps": summary.timesteps,
        "train_s": summary.wall_s,
        "cpu_s": time.process_time() - cpu0,
        "wall_s": time.perf_counter() - start,
        "eval_mean": summary.eval_mean,
        "best_eval": best,
        "evaluations": len(summary.evaluations),
    }


class _SB3AsPolicy:
    """Lets rlpolicy's evaluate_policy play an SB3 model greedily."""

    def __init__(self, model: Any):
        self.model, self.action_space = model, model.action_space
        self.config: Dict[str, Any] = {}
        self.global_timestep = 0

    def get_initial_state(self) -> List[Any]:
        return []

    def compute_actions(self, obs: np.ndarray, state_batches: Any = None, explore: bool = False) -> Any:
        actions, _ = self.model.predict(obs, deterministic=not explore)
        return actions, [], {}


def _sb3_hyperparameters(which: str) -> Dict[str, Any]:
    if which == "default":
        return {"n_envs": 1}

    def linear(start: float) -> Callable[[float], float]:
        return lambda progress_remaining: progress_remaining * start

    return {
        "n_envs": 8,
        "n_steps": 32,
        "batch_size": 256,
        "gae_lambda": 0.8,
        "gamma": 0.98,
        "n_epochs": 20,
        "ent_coef": 0.0,
        "learning_rate": linear(1e-3),
        "clip_range": linear(0.2),
    }


def run_sb3(
    seed: int, max_steps: int, max_seconds: float, which: str, eval_every_steps: int = 0
) -> Optional[Dict[str, Any]]:
    """SB3's PPO until the same stop rule holds (also evaluated every ``eval_every_steps``
    env steps, when > 0); None if SB3 is not installed."""
    try:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError:
        return None

    class SolvedCheck(BaseCallback):
        """After each update: the training mean, then (at the target) the greedy evaluation."""

        def __init__(self) -> None:
            super().__init__()
            self.solved, self.eval_mean, self.stop = False, None, False
            self.evaluations, self.next_eval = 0, eval_every_steps

        def _on_rollout_start(self) -> None:
            if time.perf_counter() - start >= max_seconds:
                self.stop = True
            infos = self.model.ep_info_buffer
            due = eval_every_steps > 0 and self.model.num_timesteps >= self.next_eval
            if due or (len(infos) and np.mean([e["r"] for e in infos]) >= TARGET):
                if due:
                    self.next_eval += eval_every_steps
                returns = evaluate_policy(_SB3AsPolicy(self.model), make_env, EVAL_EPISODES, seed=EVAL_SEED)
                self.evaluations += 1
                self.eval_mean = float(np.mean(returns))
                if self.eval_mean >= TARGET:
                    self.solved = self.stop = True

        def _on_step(self) -> bool:
            return not self.stop

    _seed_and_threads("torch", seed)
    torch.manual_seed(seed)
    start = time.perf_counter()
    params = _sb3_hyperparameters(which)
    env = make_vec_env(ENV_ID, n_envs=params.pop("n_envs"), seed=seed)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **params)
    check = SolvedCheck()
    learn_start, cpu0 = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=max_steps, callback=check)
    end = time.perf_counter()
    return {
        "solved": check.solved,
        "steps": model.num_timesteps,
        "train_s": end - learn_start,
        "cpu_s": time.process_time() - cpu0,
        "wall_s": end - start,
        "eval_mean": check.eval_mean,
        "best_eval": check.eval_mean,
        "evaluations": check.evaluations,
    }


def _fmt_run(r: Dict[str, Any]) -> str:
    if r["solved"]:
        return (
            f"solved after {r['steps']} steps, {r['train_s']:.1f}s training ({r['cpu_s']:.1f}s CPU; "
            f"{r['wall_s']:.1f}s with construction), {r['evaluations']} evaluations"
        )
    best = f", best evaluation {r['best_eval']:.1f}" if r.get("best_eval") is not None else ""
    last = f", last evaluation {r['eval_mean']:.1f}" if r.get("eval_mean") is not None else ""
    return f"NOT solved in {r['steps']} steps, {r['train_s']:.1f}s training{last}{best}"


def summarize(results: List[Dict[str, Any]], promise: Optional[int]) -> Dict[str, Any]:
    """Seeds solved, median steps/seconds to solve (over solved runs; None if none solved),
    and whether every run solved within the promised step budget."""
    solved = [r for r in results if r["solved"]]
    return {
        "solved": len(solved),
        "runs": len(results),
        "median_steps": statistics.median(r["steps"] for r in solved) if solved else None,
        "median_s": statistics.median(r["train_s"] for r in solved) if solved else None,
        "median_total_s": statistics.median(r["wall_s"] for r in solved) if solved else None,
        "median_cpu_s": statistics.median(r["cpu_s"] for r in solved)
        if solved and "cpu_s" in solved[0]
        else None,
        "max_steps": max(r["steps"] for r in solved) if solved else None,
        "kept": None
        if promise is None
        else (len(solved) == len(results) and all(r["steps"] <= promise for r in solved)),
    }


def table_row(name: str, s: Dict[str, Any], promise: Optional[int]) -> str:
    def num(v: Optional[float], fmt: str) -> str:
        width = int(fmt.lstrip(">").split(".")[0])
        return format("-", f">{width}") if v is None else format(v, fmt)

    promised = "-" if promise is None else f"<= {promise // 1000}k steps"
    kept = "-" if s["kept"] is None else ("yes" if s["kept"] else "NO")
    return (
        f"{name:<24} {s['solved']:>2}/{s['runs']:<2}  {num(s['median_steps'], '>9.0f')}  "
        f"{num(s['median_s'], '>8.1f')}  {num(s.get('median_cpu_s'), '>8.1f')}  "
        f"{num(s.get('median_total_s'), '>8.1f')}  "
        f"{num(s['max_steps'], '>9.0f')}  {promised:<16} {kept}"
    )


def _variant(text: str) -> Tuple[str, Dict[str, Any]]:
    name, sep, body = text.partition("=")
    try:
        overrides = json.loads(body) if sep else None
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: JSON after '=' does not parse: {e}") from None
    if not name or not isinstance(overrides, dict):
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected NAME={{JSON object}}")
    return name, overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", default="pg,ppo,dqn", help="comma-separated algorithms")
    parser.add_argument("--frameworks", default="torch,tf,tf2", help="comma-separated frameworks")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument(
        "--max-steps", type=int, default=None, help="step budget per run (default: the row's promised budget)"
    )
    parser.add_argument("--max-seconds", type=float, default=math.inf, help="time budget per run")
    parser.add_argument(
        "--variant",
        type=_variant,
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="also rows with these config overrides (repeatable)",
    )
    parser.add_argument("--no-defaults", action="store_true", help="only the --variant rows")
    parser.add_argument(
        "--sb3",
        choices=("off", "zoo", "default"),
        default="off",
        help="also run SB3's PPO (RL Zoo's or SB3's default hyperparameters)",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    combos = [(a, f) for a in args.algos.split(",") for f in args.frameworks.split(",")]
    for algo, fw in combos:
        get_algorithm(algo).policy_class(fw)  # unknown names and missing frameworks fail first
    variants = ([] if args.no_defaults else [("", {})]) + list(args.variant)
    if not variants and args.sb3 == "off":
        parser.error("--no-defaults without --variant or --sb3: nothing to run")
    ppo = config_defaults("ppo", ENV_ID)
    sb3_every = ppo["train_batch_size"] * loop_default("ppo", ENV_ID, "eval_every", 0)
    print(
        f"steps to solve {ENV_ID} (greedy evaluation mean >= {TARGET:g} over {EVAL_EPISODES} "
        f"episodes), seeds {args.seeds}",
        flush=True,
    )
    runs: Dict[Tuple[str, str, str], List[Dict[str, Any]]] = {}
    sb3: List[Optional[Dict[str, Any]]] = []
    for seed in seeds:  # seed by seed, every row: configurations side by side in time
        for algo, fw in combos:
            budget = args.max_steps or PROMISES.get((algo, fw)) or 400_000
            for name, overrides in variants:
                r = run_rlpolicy(algo, fw, seed, budget, args.max_seconds, overrides)
                runs.setdefault((algo, fw, name), []).append(r)
                print(f"{algo} {fw}{' ' + name if name else ''} seed {seed}: {_fmt_run(r)}", flush=True)
        if args.sb3 != "off" and None not in sb3:
            r = run_sb3(seed, args.max_steps or 200_000, args.max_seconds, args.sb3, sb3_every)
            sb3.append(r)
            if r is None:
                print("SB3 not installed (pip install rlpolicy[bench]): skipped")
            else:
                print(f"sb3-ppo torch seed {seed}: {_fmt_run(r)}", flush=True)
    rows: List[Tuple[str, Dict[str, Any], Optional[int]]] = []
    for (algo, fw, name), results in runs.items():
        promise = PROMISES.get((algo, fw)) if not name else None
        judged = promise if args.max_steps is None or args.max_steps >= (promise or 0) else None
        rows.append((f"{algo} {fw}{' ' + name if name else ''}", summarize(results, judged), promise))
    if sb3 and None not in sb3:
        rows.append((f"sb3-ppo ({args.sb3})", summarize([r for r in sb3 if r is not None], None), None))
    print(
        f"\n{'row':<24} solved  {'median st':>9}  {'train s':>8}  {'CPU s':>8}  {'total s':>8}  {'max steps':>9}  "
        f"{'README promise':<16} kept"
    )
    for name, summary, promise in rows:
        print(table_row(name, summary, promise))
    print(
        "(median steps and seconds over the seeds that solved; train s: the training loop with its "
        "evaluations, CPU s: its process CPU time (what an idle core would take), total s: with the "
        "policy's construction; kept: every seed solved within the "
        "promised steps)",
        flush=True,
    )


if __name__ == "__main__":
    main()
