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

``--compare`` instead measures one process side by side (issue 26): a "raw" loop (N
``gym.make`` envs, one ``no_grad`` forward of both 2x64 nets per step for all envs at
once, multinomial sampling with log-prob, numpy buffers, numpy GAE), rlpolicy's
``RolloutWorker.sample()`` (PPO torch, GAE), and Stable-Baselines3's
``collect_rollouts`` (PPO, the same nets, ``DummyVecEnv``; skipped if SB3 is not
importable), each at ``--compare-envs`` sub-envs with ``--fragment`` steps per
sub-env per call. The systems take turns call by call (one torch thread); the table
shows the median process CPU time per call, env steps per CPU second and the ratio
to raw (higher is faster). ``--fragment 4 --compare-envs 1`` shows a small
fragment's fixed cost (what DQN pays per call).

    OMP_NUM_THREADS=1 PYTHONPATH=/path/to/sb3 .venv/bin/python benchmarks/bench_sampling.py \
        --compare [--compare-envs 1,8] [--fragment 200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Dict, List

import gymnasium as gym
import numpy as np


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
    parser.add_argument("--compare", action="store_true", help="raw loop vs rlpolicy vs SB3, one process")
    parser.add_argument("--compare-envs", default="1,8", help="sub-env counts for --compare")
    args = parser.parse_args()
    if args.compare:
        compare([int(n) for n in args.compare_envs.split(",")], args.fragment, args.rounds)
        return
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


# ---------------------------------------------------------------------- --compare (issue 26)
GAMMA, LAMBDA = 0.99, 0.95


class RawSampler:
    """The limit: N gym envs, one no_grad forward of both 2x64 nets per step for all
    envs, multinomial actions with log-probs, numpy buffers, numpy GAE."""

    def __init__(self, num_envs: int, fragment: int, seed: int = 0):
        import torch
        from torch import nn

        def mlp(out: int) -> "nn.Module":
            return nn.Sequential(
                nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out)
            )

        torch.manual_seed(seed)
        self.torch, self.pi, self.vf = torch, mlp(2), mlp(1)
        self.envs = [gym.make("CartPole-v1") for _ in range(num_envs)]
        self.obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(self.envs)]).astype(np.float32)
        self.fragment = fragment

    def sample(self) -> Dict[str, np.ndarray]:
        torch, T, n = self.torch, self.fragment, len(self.envs)
        obs = np.zeros((T, n, 4), np.float32)
        actions, logps, values = (
            np.zeros((T, n), np.int64),
            np.zeros((T, n), np.float32),
            np.zeros((T, n), np.float32),
        )
        rewards, dones = np.zeros((T, n), np.float32), np.zeros((T, n), bool)
        for t in range(T):
            obs[t] = self.obs
            with torch.no_grad():
                x = torch.from_numpy(self.obs)
                logits, value = self.pi(x), self.vf(x)[:, 0]
                logp_all = torch.log_softmax(logits, -1)
                action = torch.multinomial(logp_all.exp(), 1)[:, 0]
                logp = logp_all.gather(1, action[:, None])[:, 0]
            actions[t], logps[t], values[t] = action.numpy(), logp.numpy(), value.numpy()
            for i, env in enumerate(self.envs):
                o, r, term, trunc, _ = env.step(int(actions[t, i]))
                if term or trunc:
                    o, _ = env.reset()
                self.obs[i] = o
                rewards[t, i], dones[t, i] = r, term or trunc
        with torch.no_grad():
            last = self.vf(torch.from_numpy(self.obs))[:, 0].numpy()
        adv = np.zeros((T, n), np.float32)
        gae = np.zeros(n, np.float32)
        for t in reversed(range(T)):
            nxt = last if t == T - 1 else values[t + 1]
            live = 1.0 - dones[t]
            delta = rewards[t] + GAMMA * nxt * live - values[t]
            gae = delta + GAMMA * LAMBDA * live * gae
            adv[t] = gae
        return {
            "obs": obs,
            "actions": actions,
            "logp": logps,
            "rewards": rewards,
            "dones": dones,
            "advantages": adv,
            "value_targets": adv + values,
        }


class RlpolicySampler:
    """``RolloutWorker.sample()`` with PPOTorchPolicy (2x64, GAE)."""

    def __init__(self, num_envs: int, fragment: int, seed: int = 0):
        from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy
        from rlpolicy.evaluation.rollout_worker import RolloutWorker

        self.worker = RolloutWorker(
            env_creator=make_env,
            policy_spec=PPOTorchPolicy,
            policy_config={"framework": "torch", "model": {"fcnet_hiddens": [64, 64]}},
            num_envs=num_envs,
            rollout_fragment_length=fragment,
            seed=seed,
        )

    def sample(self) -> Any:
        return self.worker.sample()


class Sb3Sampler:
    """Stable-Baselines3's PPO ``collect_rollouts`` (DummyVecEnv, same nets, GAE)."""

    def __init__(self, num_envs: int, fragment: int, seed: int = 0):
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv
        from torch import nn

        env = make_vec_env("CartPole-v1", n_envs=num_envs, seed=seed, vec_env_cls=DummyVecEnv)
        kwargs = {"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": nn.Tanh}
        self.model = PPO(
            "MlpPolicy",
            env,
            n_steps=fragment,
            batch_size=fragment * num_envs,
            policy_kwargs=kwargs,
            seed=seed,
            device="cpu",
        )
        _, self.callback = self.model._setup_learn(total_timesteps=10**12, callback=None)
        self.callback.on_training_start(locals(), globals())

    def sample(self) -> Any:
        m = self.model
        assert m.collect_rollouts(m.env, self.callback, m.rollout_buffer, n_rollout_steps=m.n_steps)
        return m.rollout_buffer


def compare(env_counts: List[int], fragment: int, rounds: int) -> None:
    """Prints the side-by-side table (median process CPU time per call, ratio to raw)."""
    import torch

    torch.set_num_threads(1)
    systems: Dict[str, Any] = {"raw": RawSampler, "rlpolicy": RlpolicySampler, "SB3": Sb3Sampler}
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        del systems["SB3"]
        print("SB3 not importable: its rows are skipped (add it to PYTHONPATH or pip install '.[bench]')")
    samplers = {(name, n): cls(n, fragment) for n in env_counts for name, cls in systems.items()}
    for sampler in samplers.values():
        sampler.sample()  # warm-up
    cpu: Dict[Any, List[float]] = {key: [] for key in samplers}
    for _ in range(rounds):
        for key, sampler in samplers.items():
            start = time.process_time()
            sampler.sample()
            cpu[key].append(time.process_time() - start)
    print(
        f"{'system':>9} {'envs':>4} {'steps/call':>10} {'CPU ms/call':>11} {'steps/CPU s':>11} {'vs raw':>7}"
    )
    for n in env_counts:
        raw = statistics.median(cpu[("raw", n)])
        for name in systems:
            med = statistics.median(cpu[(name, n)])
            steps = n * fragment
            print(f"{name:>9} {n:>4} {steps:>10} {med * 1e3:>11.2f} {steps / med:>11.0f} {raw / med:>6.2f}x")
    print(f"median of {rounds} interleaved rounds, process CPU time, torch threads 1, fragment {fragment}")


if __name__ == "__main__":
    main()
