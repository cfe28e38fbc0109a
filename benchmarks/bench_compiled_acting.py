"""TorchPolicy.compute_actions: eager against config["torch_compile_acting"]="jit".

Two policies with the same weights (a 2x256 tanh FC net with a Discrete(4)
head; PPOTorchPolicy with that net and its separate value net, ``vf_preds``
fetched; a 64-cell LSTM on top of a 64-unit layer), numpy in / numpy out, at batch 1
and batch 256, explore False and True. The calls run interleaved (eager, jit,
jit, eager, ...) in one process; reported are the median microseconds per call
(CPU time of the calling thread, torch at one thread, so that other load on the
machine does not count; ``--wall`` for wall-clock time) and the ratio
jit / eager (lower is better). ``--torch-compile`` also times
``torch.compile`` (inductor) of the same acting graph (model, distribution,
action) against that graph run eagerly, without the policy around it (the
compile takes minutes on a small CPU machine).

    .venv/bin/python benchmarks/bench_compiled_acting.py [--repeats 7] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List, Tuple, Type

import gymnasium as gym
import numpy as np
import torch

from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy
from rlpolicy.policy.torch_policy import TorchPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (8,), np.float32)
ACT = gym.spaces.Discrete(4)
FC = {"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh"}
MODELS: Dict[str, Tuple[Type, Dict]] = {
    "fc 2x256": (TorchPolicy, FC),
    # PPO's own policy class: separate 2x256 policy and value nets, vf_preds fetched.
    "ppo 2x256": (PPOTorchPolicy, FC),
    "lstm 64": (TorchPolicy, {"fcnet_hiddens": [64], "use_lstm": True, "lstm_cell_size": 64}),
    # The FC net with graphs at every batch size: on CPU the policy leaves feed-forward
    # batches above compiled_acting.CPU_FEEDFORWARD_MAX_BATCH to the eager path.
    "fc forced": (TorchPolicy, FC),
}


def _policies(cls: Type, model_config: Dict) -> List[TorchPolicy]:
    torch.manual_seed(0)
    eager = cls(OBS, ACT, {"model": dict(model_config)})
    jit = cls(OBS, ACT, {"model": dict(model_config), "torch_compile_acting": "jit"})
    jit.set_weights(eager.get_weights())
    return [eager, jit]


# CPU time of this thread (torch runs with one thread here): unlike wall time it
# leaves out the time the process waits for a core on a shared machine.
_CLOCK = time.thread_time


def _time(fn: Callable[[], object], calls: int) -> float:
    t = _CLOCK()
    for _ in range(calls):
        fn()
    return (_CLOCK() - t) / calls * 1e6


def _interleaved(fns: List[Callable[[], object]], calls: int, repeats: int) -> List[float]:
    for fn in fns:  # warm-up (the jit side traces here)
        for _ in range(5):
            fn()
    times: List[List[float]] = [[] for _ in fns]
    for r in range(repeats):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            times[i].append(_time(fns[i], calls))
    return [statistics.median(t) for t in times]


def bench_policies(repeats: int, quick: bool) -> None:
    print(f"{'model':10} {'batch':>5} {'explore':>7} {'eager us':>10} {'jit us':>10} {'jit/eager':>9}")
    rng = np.random.default_rng(0)
    for name, (cls, model_config) in MODELS.items():
        eager, jit = _policies(cls, model_config)
        if name == "fc forced":
            jit.compute_actions(np.zeros((1, 8), np.float32))  # (makes the graph cache)
            jit._compiled_acting.feedforward_max_batch = None
        for batch in (1, 256):
            obs = rng.uniform(-1, 1, (batch, 8)).astype(np.float32)
            states = [np.repeat(s[None], batch, 0) for s in eager.get_initial_state()]
            calls = (50 if batch == 1 else 10) if quick else (300 if batch == 1 else 40)
            for explore in (False, True):
                fns = [
                    lambda p=p, e=explore, o=obs, s=states: p.compute_actions(o, s, explore=e)
                    for p in (eager, jit)
                ]
                t_eager, t_jit = _interleaved(fns, calls, repeats)
                print(
                    f"{name:10} {batch:5d} {str(explore):>7} {t_eager:10.1f} {t_jit:10.1f} "
                    f"{t_jit / t_eager:9.2f}"
                )
        graphs = jit._compiled_acting
        assert graphs and graphs.disabled is None and graphs.num_traces >= 1, "jit path unused"


def bench_torch_compile(repeats: int, quick: bool) -> None:
    """The acting graph alone: eager module call vs torch.compile of it."""
    from rlpolicy.policy._torch.compiled_acting import _ActingGraph

    print(
        f"\n{'graph':10} {'batch':>5} {'explore':>7} {'eager us':>10} {'compile us':>10} "
        f"{'ratio':>9}  (compile time s)"
    )
    eager_policy, _ = _policies(*MODELS["fc 2x256"])
    rng = np.random.default_rng(0)
    for batch in (1, 256):
        obs = torch.from_numpy(rng.uniform(-1, 1, (batch, 8)).astype(np.float32))
        seq_lens = torch.ones(batch, dtype=torch.int32)
        for explore in (False, True):
            graph = _ActingGraph(eager_policy.model, eager_policy.dist_class, explore, ["obs"], 0)
            compiled = torch.compile(graph)
            with torch.no_grad():
                t = time.perf_counter()
                compiled(obs, seq_lens)
                compile_s = time.perf_counter() - t
                calls = (50 if batch == 1 else 10) if quick else (300 if batch == 1 else 40)
                t_eager, t_comp = _interleaved(
                    [
                        lambda g=graph, o=obs, n=seq_lens: g(o, n),
                        lambda c=compiled, o=obs, n=seq_lens: c(o, n),
                    ],
                    calls,
                    repeats,
                )
            print(
                f"{'fc 2x256':10} {batch:5d} {str(explore):>7} {t_eager:10.1f} {t_comp:10.1f} "
                f"{t_comp / t_eager:9.2f}  ({compile_s:.1f})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="fewer calls per repeat")
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="also time torch.compile of the acting graph (slow to compile)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--wall", action="store_true", help="wall-clock instead of thread CPU time")
    args = parser.parse_args()
    global _CLOCK
    if args.wall or args.threads != 1:
        _CLOCK = time.perf_counter  # (thread CPU time misses torch's worker threads)
    torch.set_num_threads(args.threads)
    clock = "wall" if _CLOCK is time.perf_counter else "thread CPU"
    print(f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats}, {clock} time")
    bench_policies(args.repeats, args.quick)
    if args.torch_compile:
        bench_torch_compile(args.repeats, args.quick)


if __name__ == "__main__":
    main()
