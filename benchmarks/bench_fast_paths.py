"""Each ``rlpolicy._fast`` entry's win: the same policy work with the entry on and
with its plain path (``rlpolicy._fast.plain(name)``), interleaved in one process.

Workload: PPO with a 2x256 tanh policy net and a separate 2x256 value net on
Box(4) -> Discrete(2), as in the shared bench (``/work/shared/bench/policy_bench.py``).
Each system (fast, and each entry plain) gets its own policy built and warmed up
in its mode, with the same weights. Reported: the median process CPU time per
call and win = plain / fast - 1 (the docs/fast_paths.md table; an entry that
wins < 10% is deleted).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fast_paths.py [--repeats 7] [--only torch|tf]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from rlpolicy import _fast  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
MODEL = {"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh", "vf_share_layers": False}
RNG = np.random.default_rng(0)
OBS1 = [RNG.standard_normal((1, 4)).astype(np.float32) for _ in range(16)]
OBS256 = [RNG.standard_normal((256, 4)).astype(np.float32) for _ in range(4)]


def make_policy(framework: str, tracing: bool = False):
    if framework == "torch":
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

        return PPOTorchPolicy(OBS, ACT, {"framework": "torch", "model": MODEL})
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

    cls = PPOTFPolicy if framework == "tf" else PPOTFPolicy.as_eager()
    return cls(OBS, ACT, {"framework": framework, "eager_tracing": tracing, "model": MODEL})


CASES = {
    "ca_b1": (lambda p, i: p.compute_actions(OBS1[i % 16]), 200),
    "ca_b256": (lambda p, i: p.compute_actions(OBS256[i % 4]), 20),
    "state_rt": (lambda p, i: p.set_state(p.get_state()), 50),
}
# (system, entries measured, cases)
GROUPS = {
    "torch": [("torch", ["torch_state_dict", "torch_functional_linear"], ["state_rt", "ca_b1", "ca_b256"])],
    "tf": [
        ("tf2", ["keras_replay", "tf_concrete_call"], ["ca_b1", "ca_b256"]),
        ("tf2-traced", ["tf_concrete_call"], ["ca_b1", "ca_b256"]),
        ("tf", ["tf_session_callable"], ["ca_b1", "ca_b256"]),
    ],
}


def build(system: str, mode: str, weights):
    framework, tracing = system.split("-")[0], system.endswith("traced")
    with _fast.plain(mode) if mode != "fast" else _nullcontext():
        policy = make_policy(framework, tracing)
        if weights is not None:
            policy.set_weights(weights)
        for fn, _ in CASES.values():
            fn(policy, 0)
    return policy


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def run_group(system, entries, cases, repeats):
    fast = build(system, "fast", None)
    policies = {"fast": fast, **{e: build(system, e, fast.get_weights()) for e in entries}}
    for case in cases:
        fn, n = CASES[case]
        times = {m: [] for m in policies}
        for r in range(repeats):
            order = list(policies) if r % 2 == 0 else list(reversed(list(policies)))
            for m in order:
                with _fast.plain(m) if m != "fast" else _nullcontext():
                    start = time.process_time()
                    for i in range(n):
                        fn(policies[m], i)
                    times[m].append((time.process_time() - start) / n)
        base = statistics.median(times["fast"])
        wins = "  ".join(f"{e} {100 * (statistics.median(times[e]) / base - 1):+.0f}%" for e in entries)
        print(f"{system:11s} {case:9s} fast {base * 1e6:9.1f} us   win of: {wins}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", choices=sorted(GROUPS))
    args = parser.parse_args()
    for name, groups in GROUPS.items():
        if args.only and name != args.only:
            continue
        for system, entries, cases in groups:
            run_group(system, entries, cases, args.repeats)


if __name__ == "__main__":
    main()
