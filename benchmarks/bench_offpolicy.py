"""Off-policy updates per framework: DQN ``learn_on_batch`` (issue 19).

Workload: CartPole's spaces (Box(4) -> Discrete(2)), DQN's default model (2x256
FC base, a 256 Q-head, dueling, double Q), a replay-sized batch of 32 rows;
``DQNTorchPolicy`` against ``DQNTFPolicy.as_eager()`` with ``eager_tracing`` on
("traced") and off ("untraced"). Each system first learns on 8 batches (warm-up,
traces), then the median of ``--repeats`` timings of 30 calls is shown, in
process CPU time per call, with the ratio to torch and the goals (untraced <= 2x
torch, traced <= 1.2x). The traced policy's trace counts are printed: they stay
at 1 across batches.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_offpolicy.py [--repeats 5]
        [--systems torch,traced,untraced] [--batch 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

GOALS = {"traced": 1.2, "untraced": 2.0}


def make_batches(n: int, count: int) -> List[Any]:
    from rlpolicy.policy.sample_batch import SampleBatch

    rng = np.random.default_rng(0)
    return [
        SampleBatch(
            {
                "obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
                "new_obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
                "actions": rng.integers(0, 2, n),
                "rewards": rng.standard_normal(n).astype(np.float32),
                "dones": np.zeros(n, bool),
                "terminateds": np.zeros(n, bool),
                "weights": np.ones(n, np.float32),
            }
        )
        for _ in range(count)
    ]


def make_policy(system: str, batch: int) -> Any:
    spaces = (gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2))
    cfg: Dict[str, Any] = {
        "model": {"fcnet_hiddens": [256, 256]},
        "hiddens": [256],
        "train_batch_size": batch,
    }
    if system == "torch":
        from rlpolicy.agents.dqn.dqn_torch_policy import DQNTorchPolicy

        return DQNTorchPolicy(*spaces, {**cfg, "framework": "torch"})
    from rlpolicy.agents.dqn.dqn_tf_policy import DQNTFPolicy

    return DQNTFPolicy.as_eager()(*spaces, {**cfg, "framework": "tf2", "eager_tracing": system == "traced"})


def time_learn(policy: Any, batches: List[Any], repeats: int, calls: int = 30) -> float:
    """Median CPU ms per learn_on_batch (after a warm-up pass over the batches)."""
    for b in batches:
        policy.learn_on_batch(b.copy())
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        for i in range(calls):
            policy.learn_on_batch(batches[i % len(batches)].copy())
        times.append((time.process_time() - t0) / calls * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--systems", default="torch,traced,untraced")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    import tensorflow as tf
    import torch

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    torch.set_num_threads(1)
    batches = make_batches(args.batch, 8)
    results: Dict[str, float] = {}
    for system in args.systems.split(","):
        policy = make_policy(system, args.batch)
        results[system] = time_learn(policy, batches, args.repeats)
        counts = getattr(policy, "trace_counts", None)
        print(
            f"{system:9s} {results[system]:8.3f} ms/learn_on_batch"
            + (f"  trace counts {counts}" if counts else ""),
            flush=True,
        )
    print(f"\n| DQN learn_on_batch, batch {args.batch} | CPU ms | vs torch | goal |")
    print("|---|---:|---:|---|")
    for system, ms in results.items():
        ratio = ms / results["torch"] if "torch" in results else float("nan")
        goal = GOALS.get(system)
        verdict = "" if goal is None else f"<= {goal} {'ok' if ratio <= goal else 'MISS'}"
        print(f"| {system} | {ms:.3f} | {ratio:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
