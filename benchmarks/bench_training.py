"""Time to solve CartPole-v1 with PPO: rlpolicy's `rlpolicy train` defaults against
Stable-Baselines3's PPO, side by side in one run.

Both sides stop on the same rule, the one `rlpolicy train` uses: whenever the mean
return of the last 100 training episodes reaches 475, a greedy evaluation (20
episodes, explore off / ``deterministic=True``, the same seeded envs and the same
evaluation code) runs; the task is solved when its mean is >= 475. Reported per
seed: env steps sampled and wall seconds until solved (evaluations included).
The runs alternate (rlpolicy first for even seeds, SB3 first for odd ones) so
both see the same machine load; torch uses one thread on both sides.

SB3 runs with RL Zoo's tuned CartPole-v1 hyperparameters (``--sb3 zoo``, the
default: 8 envs, n_steps 32, batch 256, 20 epochs, gamma 0.98, GAE lambda 0.8,
linearly decaying lr 1e-3 and clip 0.2) or with its own defaults (``--sb3 default``).
SB3 is optional (``pip install rlpolicy[bench]``); without it only rlpolicy runs.

    .venv/bin/python benchmarks/bench_training.py [--seeds 0,1,2] [--max-steps 300000]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any, Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

from rlpolicy.agents.train_run import RunOptions, run_training
from rlpolicy.agents.training import evaluate_policy, make_trainer
from rlpolicy.cli import _default_overrides, _tuned

ENV_ID, TARGET, EVAL_EPISODES, EVAL_SEED = "CartPole-v1", 475.0, 20, 10_000


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_env() -> Any:
    return gym.make(ENV_ID)


def run_rlpolicy(seed: int, max_steps: int, max_seconds: float) -> Dict[str, Any]:
    """`rlpolicy train --algo ppo --env CartPole-v1` with its shipped defaults."""
    _seed_all(seed)
    start = time.perf_counter()
    config = dict(_default_overrides("ppo", ENV_ID), seed=seed)
    trainer = make_trainer("ppo", make_env, config, num_envs=_tuned("ppo", ENV_ID)["num_envs"], seed=seed)
    summary = run_training(trainer, make_env, RunOptions(
        stop_reward=TARGET, stop_timesteps=max_steps, max_seconds=max_seconds,
        eval_episodes=EVAL_EPISODES, eval_seed=EVAL_SEED, progress_bar=False), log=lambda s: None)
    return {"solved": summary.solved, "steps": summary.timesteps,
            "wall_s": time.perf_counter() - start, "eval_mean": summary.eval_mean}


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

    return {"n_envs": 8, "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98,
            "n_epochs": 20, "ent_coef": 0.0, "learning_rate": linear(1e-3), "clip_range": linear(0.2)}


def run_sb3(seed: int, max_steps: int, max_seconds: float, which: str) -> Optional[Dict[str, Any]]:
    """SB3's PPO until the same stop rule holds; None if SB3 is not installed."""
    try:
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

        def _on_rollout_start(self) -> None:
            if time.perf_counter() - start >= max_seconds:
                self.stop = True
            infos = self.model.ep_info_buffer
            if len(infos) and np.mean([e["r"] for e in infos]) >= TARGET:
                returns = evaluate_policy(_SB3AsPolicy(self.model), make_env, EVAL_EPISODES, seed=EVAL_SEED)
                self.eval_mean = float(np.mean(returns))
                if self.eval_mean >= TARGET:
                    self.solved = self.stop = True

        def _on_step(self) -> bool:
            return not self.stop

    _seed_all(seed)
    start = time.perf_counter()
    params = _sb3_hyperparameters(which)
    env = make_vec_env(ENV_ID, n_envs=params.pop("n_envs"), seed=seed)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **params)
    check = SolvedCheck()
    model.learn(total_timesteps=max_steps, callback=check)
    return {"solved": check.solved, "steps": model.num_timesteps, "wall_s": time.perf_counter() - start,
            "eval_mean": check.eval_mean}


def _fmt(r: Optional[Dict[str, Any]]) -> str:
    if r is None:
        return "(not installed)"
    mark = "" if r["solved"] else " NOT SOLVED"
    return f"{r['steps']:7d} steps {r['wall_s']:6.1f}s{mark}"


def _median(results: List[Dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--max-steps", type=int, default=300_000, help="step budget per run")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="time budget per run")
    parser.add_argument("--sb3", choices=("zoo", "default"), default="zoo", help="SB3 hyperparameters")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    ours: List[Dict[str, Any]] = []
    theirs: List[Dict[str, Any]] = []
    print(f"time to solve {ENV_ID} (eval mean >= {TARGET:g} over {EVAL_EPISODES} greedy episodes), "
          f"PPO; SB3 with {args.sb3} hyperparameters")
    for seed in seeds:
        jobs = [("rlpolicy", lambda: run_rlpolicy(seed, args.max_steps, args.max_seconds)),
                ("sb3", lambda: run_sb3(seed, args.max_steps, args.max_seconds, args.sb3))]
        results = dict((name, job()) for name, job in (jobs if seed % 2 == 0 else jobs[::-1]))
        ours.append(results["rlpolicy"])
        if results["sb3"] is not None:
            theirs.append(results["sb3"])
        print(f"seed {seed}: rlpolicy {_fmt(results['rlpolicy'])} | SB3 {_fmt(results['sb3'])}", flush=True)
    print(f"median: rlpolicy {_median(ours, 'steps'):.0f} steps {_median(ours, 'wall_s'):.1f}s "
          f"(solved {sum(r['solved'] for r in ours)}/{len(ours)})", end="")
    if theirs:
        print(f" | SB3 {_median(theirs, 'steps'):.0f} steps {_median(theirs, 'wall_s'):.1f}s "
              f"(solved {sum(r['solved'] for r in theirs)}/{len(theirs)}); "
              f"wall-time ratio rlpolicy/SB3 {_median(ours, 'wall_s') / _median(theirs, 'wall_s'):.2f}")
    else:
        print(" | SB3 not installed (pip install rlpolicy[bench]): skipped")


if __name__ == "__main__":
    main()
