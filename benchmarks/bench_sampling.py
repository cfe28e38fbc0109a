"""Sampling throughput (env steps per second) with 0, 1 and 2 Ray rollout workers.

Workload: CartPole-v1, ``PPOTorchPolicy`` with a 2x64 tanh MLP, ``num_envs_per_worker``
sub-envs stepped in lock-step (batched inference), ``truncate_episodes`` fragments,
GAE postprocessing on the worker. With 0 workers the local worker samples in the
driver process; with N > 0, ``WorkerSet.sample(steps)`` asks the N Ray actors for
fragments in parallel and concatenates them on the driver (one object-store
transfer per fragment).

Each setting first samples one warm-up round (actors start, torch loads), then
``--rounds`` timed calls of ``WorkerSet.sample(steps)`` with ``steps`` = workers x
fragment (so every worker samples one fragment per call). The table shows the median
wall time per call and env steps/s, and the speed-up against 1 worker. Ray is started
once with ``num_cpus`` = the largest worker count (each worker asks for 1 CPU).
It also reports the busiest sampling process's CPU time per call, and the speed-up
that CPU time implies when every worker has a core of its own.

The speed-up needs a free core per worker: on a shared machine, other processes'
load lowers it (the result line says how busy the machine was).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sampling.py [--workers 0,1,2]
        [--rounds 5] [--envs 8] [--fragment 250]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Dict, List

import gymnasium as gym


def make_env(env_context):
    return gym.make("CartPole-v1")


def measure(num_workers: int, args: argparse.Namespace) -> Dict[str, float]:
    """Median seconds per sample() call and steps/s for one worker count."""
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy
    from rlpolicy.evaluation.worker_set import WorkerSet

    config = {
        "framework": "torch",
        "model": {"fcnet_hiddens": [64, 64]},
        "seed": 0,
        "num_envs_per_worker": args.envs,
        "rollout_fragment_length": args.fragment,
        "num_cpus_per_worker": 1,
    }
    ws = WorkerSet(
        env_creator=make_env, policy_class=PPOTorchPolicy, trainer_config=config, num_workers=num_workers
    )
    steps = max(1, num_workers) * args.envs * args.fragment
    try:
        ws.sample(steps)  # warm-up: actors start, imports, first inference
        cpu_before = _sampler_cpu(ws)
        times: List[float] = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            batch = ws.sample(steps)
            times.append(time.perf_counter() - start)
            assert batch.count == steps, (batch.count, steps)
        busiest = max(a - b for a, b in zip(_sampler_cpu(ws), cpu_before)) / args.rounds
    finally:
        ws.stop()
    median = statistics.median(times)
    return {
        "workers": num_workers,
        "steps": steps,
        "seconds": median,
        "steps_per_s": steps / median,
        "cpu": busiest,
        "steps_per_cpu_s": steps / busiest,
    }


def _sampler_cpu(ws) -> List[float]:
    """Process CPU seconds so far of each sampling process (the remote workers, else the driver)."""
    cpu = ws.foreach_worker(lambda w: time.process_time())
    return cpu[1:] if ws.remote_workers() else cpu[:1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,1,2", help="comma-separated worker counts")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--envs", type=int, default=8, help="sub-envs per worker")
    parser.add_argument("--fragment", type=int, default=250, help="steps per sub-env per fragment")
    args = parser.parse_args()
    counts = [int(c) for c in args.workers.split(",")]
    if max(counts) > 0:
        import ray

        ray.init(num_cpus=max(counts), include_dashboard=False, log_to_driver=False)
    load_before = os.getloadavg()[0]
    rows = [measure(n, args) for n in counts]
    load_after = os.getloadavg()[0]
    base = next((r for r in rows if r["workers"] == 1), None)
    print(
        f"{'workers':>7} {'steps/call':>10} {'s/call':>8} {'steps/s':>9} {'vs 1 worker':>11} "
        f"{'CPU s/call':>10} {'CPU-bound vs 1':>14}"
    )
    for r in rows:
        ratio = f"{r['steps_per_s'] / base['steps_per_s']:.2f}x" if base else "-"
        ideal = f"{r['steps_per_cpu_s'] / base['steps_per_cpu_s']:.2f}x" if base else "-"
        print(
            f"{r['workers']:>7} {r['steps']:>10} {r['seconds']:>8.3f} {r['steps_per_s']:>9.0f} {ratio:>11} "
            f"{r['cpu']:>10.3f} {ideal:>14}"
        )
    print(
        f"cores: {os.cpu_count()}, load average before/after: {load_before:.2f}/{load_after:.2f}. "
        "'CPU s/call' is the busiest sampling process's CPU time per call; 'CPU-bound vs 1' is the "
        "speed-up if every worker had a free core (what the wall-clock ratio reaches on an idle machine)."
    )


if __name__ == "__main__":
    main()
