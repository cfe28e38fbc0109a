"""Off-policy updates per framework: DQN and SAC-style ``learn_on_batch`` (issue 19).

Two workloads:

* DQN: CartPole's spaces (Box(4) -> Discrete(2)), DQN's default model (2x256
  FC base, a 256 Q-head, dueling, double Q), a replay-sized batch of 32 rows;
  ``DQNTorchPolicy`` against ``DQNTFPolicy.as_eager()``.
* SAC: the SAC-style policies of ``examples/sac_style_policy.py`` (a
  squashed-Gaussian actor, twin Q critics and a learned alpha, 2x256 nets each,
  three optimizers, a polyak target update in every ``learn_on_batch``) on
  Pendulum's spaces (Box(3) -> Box(1)), 256 rows; ``SACStyleTorchPolicy``
  against ``SACStyleTFPolicy`` in a graph ("tf") and ``.as_eager()``.

Systems: "torch", "tf" (graph), "traced" (tf2, ``eager_tracing`` on) and
"untraced" (tf2, off). Per workload all systems are built, each learns on 8
batches (warm-up, traces), then ``--repeats`` rounds time 30 calls of every
system in turn (interleaved, so load changes hit all alike); the median round
is shown in process CPU time per call, with the ratio to torch and the goals
(untraced <= 2x torch, traced <= 1.2x). The traced policies' trace counts are
printed: they stay at 1 across batches.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_offpolicy.py [--repeats 5]
        [--algos dqn,sac] [--systems torch,tf,traced,untraced]
        [--batch 32] [--sac-batch 256] [--calls 30]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

GOALS = {"traced": 1.2, "untraced": 2.0}
DEFAULT_SYSTEMS = {"dqn": "torch,traced,untraced", "sac": "torch,tf,traced,untraced"}
ROOT = Path(__file__).resolve().parents[1]


def make_batches(n: int, count: int) -> List[Any]:
    """DQN batches: CartPole-shaped transitions."""
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
    """A DQN policy for ``system`` ("torch", "tf", "traced", "untraced")."""
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

    if system == "tf":
        return DQNTFPolicy(*spaces, {**cfg, "framework": "tf"})
    return DQNTFPolicy.as_eager()(*spaces, {**cfg, "framework": "tf2", "eager_tracing": system == "traced"})


def _sac_example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "sac_style_policy", ROOT / "examples" / "sac_style_policy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAC_SPACES = (
    gym.spaces.Box(-1.0, 1.0, (3,), np.float32),  # Pendulum: cos, sin, angular velocity (scaled)
    gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
)


def make_sac_batches(n: int, count: int) -> List[Any]:
    """SAC batches: Pendulum-shaped transitions."""
    from rlpolicy.policy.sample_batch import SampleBatch

    rng = np.random.default_rng(1)
    return [
        SampleBatch(
            {
                "obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                "new_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                "actions": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
                "rewards": rng.standard_normal(n).astype(np.float32),
                "dones": np.zeros(n, bool),
                "terminateds": np.zeros(n, bool),
            }
        )
        for _ in range(count)
    ]


def make_sac_policy(system: str, batch: int) -> Any:
    """A SAC-style policy (2x256 actor and critics) for ``system``."""
    example = _sac_example()
    cfg = {"hiddens": [256, 256], "train_batch_size": batch}
    framework = {"torch": "torch", "tf": "tf"}.get(system, "tf2")
    return example.make_policy(framework, *SAC_SPACES, cfg, traced=system == "traced")


def time_interleaved(
    policies: Dict[str, Any], batches: List[Any], repeats: int, calls: int
) -> Dict[str, float]:
    """Median CPU ms per learn_on_batch per system; each round times every system in turn."""
    for policy in policies.values():
        for b in batches:
            policy.learn_on_batch(b.copy())
    rounds: Dict[str, List[float]] = {s: [] for s in policies}
    for _ in range(repeats):
        for system, policy in policies.items():
            t0 = time.process_time()
            for i in range(calls):
                policy.learn_on_batch(batches[i % len(batches)].copy())
            rounds[system].append((time.process_time() - t0) / calls * 1e3)
    return {s: statistics.median(t) for s, t in rounds.items()}


def report(title: str, results: Dict[str, float], policies: Dict[str, Any]) -> None:
    """Prints the per-system lines and the markdown table."""
    for system, ms in results.items():
        counts = getattr(policies[system], "trace_counts", None)
        print(f"{system:9s} {ms:8.3f} ms/learn_on_batch" + (f"  trace counts {counts}" if counts else ""))
    print(f"\n| {title} | CPU ms | vs torch | goal |")
    print("|---|---:|---:|---|")
    for system, ms in results.items():
        ratio = ms / results["torch"] if "torch" in results else float("nan")
        goal = GOALS.get(system)
        verdict = "" if goal is None else f"<= {goal} {'ok' if ratio <= goal else 'MISS'}"
        print(f"| {system} | {ms:.3f} | {ratio:.2f} | {verdict} |")
    print(flush=True)


def run_workload(
    title: str,
    factory: Callable[[str, int], Any],
    batches: List[Any],
    systems: List[str],
    batch: int,
    repeats: int,
    calls: int,
) -> None:
    policies = {s: factory(s, batch) for s in systems}
    report(title, time_interleaved(policies, batches, repeats, calls), policies)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--algos", default="dqn,sac")
    ap.add_argument("--systems", default=None, help="default: " + str(DEFAULT_SYSTEMS))
    ap.add_argument("--batch", type=int, default=32, help="DQN batch rows")
    ap.add_argument("--sac-batch", type=int, default=256, help="SAC batch rows")
    ap.add_argument("--calls", type=int, default=30, help="calls per timed round")
    args = ap.parse_args()
    import tensorflow as tf
    import torch

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    torch.set_num_threads(1)
    for algo in args.algos.split(","):
        systems = (args.systems or DEFAULT_SYSTEMS[algo]).split(",")
        if algo == "dqn":
            title = f"DQN learn_on_batch, batch {args.batch}"
            run_workload(
                title, make_policy, make_batches(args.batch, 8), systems, args.batch, args.repeats, args.calls
            )
        elif algo == "sac":
            title = f"SAC-style learn_on_batch (3 optimizers + polyak), batch {args.sac_batch}"
            batches = make_sac_batches(args.sac_batch, 8)
            run_workload(title, make_sac_policy, batches, systems, args.sac_batch, args.repeats, args.calls)
        else:
            raise SystemExit(f"--algos: unknown {algo!r}; choose from dqn, sac")


if __name__ == "__main__":
    main()
