"""The DQN training loop on CartPole-v1 against Stable-Baselines3's DQN (issue 26).

Three parts, each interleaved in one process (process CPU time, median of rounds, one
torch/TF thread):

* **loop**: env steps/s of whole training steps. rlpolicy's ``SimpleDQNTrainer`` as
  ``rlpolicy train --algo dqn`` runs it (shipped defaults: one env, fragments of 4 steps,
  one learn step on 32 replayed rows per fragment, 2x256 net with a 256 dueling head,
  double Q, prioritized replay, target sync every 500 steps, epsilon 1 -> 0.02 over 10k
  steps, 50k buffer, learning starts at 1000), torch and graph TF ("tf"), against
  ``DQN("MlpPolicy", train_freq=4, gradient_steps=1, batch_size=32, net_arch=[256, 256])``
  with the same buffer, learning_starts, lr, grad clip, target interval and epsilon
  schedule. SB3 has no dueling, double Q or prioritized replay, so its step does less
  work: "torch-sb3work" and "tf-sb3work" are rlpolicy's loop doing SB3's work (one 2x256
  ReLU Q-net, uniform replay).
  Every system first runs ``--warmup`` env steps (default 10k: past ``learning_starts``
  and the epsilon schedule; SB3 skips the Q-net forward on the steps it explores, rlpolicy
  always computes it), then each round runs ``--steps`` env steps of every system in turn.
* **learn**: µs per 32-row ``learn_on_batch`` (DQNTorchPolicy, defaults and SB3's work)
  against plain-torch updates doing the same math (dueling double-Q or SB3's one-net Huber
  loss with importance weights, Adam, global-norm clipping, TD errors out) and SB3's
  ``train(gradient_steps=1)``.
* **replay**: µs per loop turn of the replay buffer (add a 4-step fragment, sample 32 rows,
  update 32 priorities) of rlpolicy's ``LocalReplayBuffer`` (prioritized and uniform) against
  SB3's ``ReplayBuffer`` (add 4, sample 32).

    OMP_NUM_THREADS=1 PYTHONPATH=/path/to/sb3 .venv/bin/python benchmarks/bench_dqn_loop.py
        [--parts loop,learn,replay] [--rounds 5] [--steps 1000]
        [--systems torch,torch-sb3work,tf,tf-sb3work,sb3]

SB3 is optional (``pip install rlpolicy[bench]``); without it its rows are skipped.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any, Callable, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

LEARNING_STARTS = 1000
# rlpolicy's DQN doing SB3's work: one 2x256 ReLU Q-net (no dueling head, no double Q)
# and uniform replay.
SB3_WORK = {
    "hiddens": [],
    "dueling": False,
    "double_q": False,
    "prioritized_replay": False,
    "model": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"},
}


def have_sb3() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


# --- the loop ---------------------------------------------------------------------------


class RlpolicyLoop:
    """rlpolicy's SimpleDQNTrainer with the CLI's DQN defaults."""

    def __init__(self, system: str, seed: int = 0):
        from rlpolicy.agents.dqn.dqn import SimpleDQNTrainer
        from rlpolicy.cli.algorithms import config_defaults, loop_default

        random.seed(seed)
        np.random.seed(seed)
        framework, _, variant = system.partition("-")
        config = {**config_defaults("dqn"), "framework": framework}
        if variant == "sb3work":
            config.update(SB3_WORK)
        num_envs = loop_default("dqn", "CartPole-v1", "num_envs", 1)
        self.trainer = SimpleDQNTrainer(lambda: gym.make("CartPole-v1"), config, seed=seed, num_envs=num_envs)

    def run(self, steps: int) -> None:
        target = self.trainer.steps_sampled + steps
        while self.trainer.steps_sampled < target:
            self.trainer.step()

    @property
    def trained(self) -> int:
        return self.trainer.steps_trained // 32


class SB3Loop:
    """SB3's DQN with rlpolicy's DQN settings where SB3 has them."""

    def __init__(self, seed: int = 0):
        from stable_baselines3 import DQN

        self.model = DQN(
            "MlpPolicy",
            gym.make("CartPole-v1"),
            learning_rate=5e-4,
            buffer_size=50_000,
            learning_starts=LEARNING_STARTS,
            batch_size=32,
            gamma=0.99,
            train_freq=4,
            gradient_steps=1,
            target_update_interval=500,
            max_grad_norm=40,
            policy_kwargs=dict(net_arch=[256, 256]),
            seed=seed,
            device="cpu",
        )
        model = self.model
        # rlpolicy's schedule: epsilon 1.0 -> 0.02 over the first 10k env steps.
        model.exploration_schedule = lambda _progress: max(0.02, 1.0 - 0.98 * model.num_timesteps / 10_000)

    def run(self, steps: int) -> None:
        self.model.learn(steps, reset_num_timesteps=False, progress_bar=False)

    @property
    def trained(self) -> int:
        return int(self.model._n_updates)


def make_loop(system: str) -> Any:
    return SB3Loop() if system == "sb3" else RlpolicyLoop(system)


def time_loops(systems: List[str], rounds: int, steps: int, warmup: int) -> Dict[str, float]:
    """Median env steps/s (process CPU time) per system over interleaved rounds."""
    loops = {s: make_loop(s) for s in systems}
    for loop in loops.values():
        loop.run(max(warmup, LEARNING_STARTS + 200))  # past learning_starts: every round trains
    rates: Dict[str, List[float]] = {s: [] for s in systems}
    for _ in range(rounds):
        for system, loop in loops.items():
            t0 = time.process_time()
            loop.run(steps)
            rates[system].append(steps / (time.process_time() - t0))
    for system, loop in loops.items():
        print(f"  {system}: {loop.trained} learn steps in all", flush=True)
    return {s: statistics.median(r) for s, r in rates.items()}


# --- learn_on_batch at 32 rows -----------------------------------------------------------


def dqn_batch(rng: np.random.Generator, n: int = 32) -> Dict[str, np.ndarray]:
    return {
        "obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
        "new_obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, n),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "dones": np.zeros(n, bool),
        "terminateds": rng.random(n) < 0.05,
        "weights": rng.uniform(0.5, 1.0, n).astype(np.float32),
    }


class PlainTorchDQN:
    """The same update as DQNTorchPolicy's with the default config (dueling double Q,
    tanh torso), or with ``sb3work`` SB3's (one 2x256 ReLU Q-net, max-Q target), in
    plain torch; Adam as the policy builds it (fused where torch has it)."""

    def __init__(self, sb3work: bool = False) -> None:
        import torch
        from torch import nn

        def net() -> Any:
            if sb3work:
                layers = [nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2)]
                return nn.Sequential(*layers)
            base = nn.Sequential(nn.Linear(4, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh())
            adv = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))
            val = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
            return nn.ModuleList([base, adv, val])

        self.torch, self.sb3work = torch, sb3work
        self.q, self.target = net(), net()
        self.target.load_state_dict(self.q.state_dict())
        try:  # torch's fused CPU kernel, as rlpolicy's default Adam takes where torch has it
            self.opt = torch.optim.Adam(self.q.parameters(), lr=5e-4, eps=1e-8, fused=True)
        except (RuntimeError, TypeError, ValueError):
            self.opt = torch.optim.Adam(self.q.parameters(), lr=5e-4, eps=1e-8)

    def _q(self, model: Any, obs: Any) -> Any:
        if self.sb3work:
            return model(obs)
        h = model[0](obs)
        adv = model[1](h)
        return model[2](h) + adv - adv.mean(1, keepdim=True)

    def learn(self, b: Dict[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        obs, new_obs = torch.from_numpy(b["obs"]), torch.from_numpy(b["new_obs"])
        actions = torch.from_numpy(b["actions"])
        q_t = self._q(self.q, obs).gather(1, actions[:, None]).squeeze(1)
        with torch.no_grad():
            q_next = self._q(self.target, new_obs)
            best = (q_next if self.sb3work else self._q(self.q, new_obs)).argmax(1)
            q_tp1 = q_next.gather(1, best[:, None]).squeeze(1)
            done = torch.from_numpy(b["terminateds"]).float()
            target = torch.from_numpy(b["rewards"]) + 0.99 * (1.0 - done) * q_tp1
        td = q_t - target
        loss = (
            torch.from_numpy(b["weights"])
            * torch.nn.functional.huber_loss(td, torch.zeros_like(td), reduction="none")
        ).mean()
        self.opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.q.parameters(), 40.0)
        self.opt.step()
        return td.detach().numpy()


def _interleaved_us(systems: Dict[str, Callable[[int], Any]], rounds: int, calls: int) -> Dict[str, float]:
    """Median process CPU µs per call of each system: ``rounds`` rounds, each timing
    ``calls`` calls of every system in turn (load changes hit all alike)."""
    times: Dict[str, List[float]] = {s: [] for s in systems}
    for _ in range(rounds):
        for name, fn in systems.items():
            t0 = time.process_time()
            for i in range(calls):
                fn(i)
            times[name].append((time.process_time() - t0) / calls * 1e6)
    return {s: statistics.median(t) for s, t in times.items()}


def time_learn(rounds: int, calls: int, sb3: bool) -> Dict[str, float]:
    """Median µs per 32-row update: DQNTorchPolicy (defaults, and doing SB3's work), the
    defaults' update in plain torch, SB3's ``train()`` (its replay sample included)."""
    from rlpolicy.agents.dqn.dqn_torch_policy import DQNTorchPolicy
    from rlpolicy.cli.algorithms import config_defaults
    from rlpolicy.policy.sample_batch import SampleBatch

    rng = np.random.default_rng(0)
    batches = [dqn_batch(rng) for _ in range(8)]
    spaces = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
    policy = DQNTorchPolicy(*spaces, {**config_defaults("dqn"), "framework": "torch"})
    sb3work = DQNTorchPolicy(*spaces, {**config_defaults("dqn"), **SB3_WORK, "framework": "torch"})
    plain, plain_sb3work = PlainTorchDQN(), PlainTorchDQN(sb3work=True)
    systems: Dict[str, Callable[[int], Any]] = {
        "rlpolicy learn_on_batch": lambda i: policy.learn_on_batch(SampleBatch(dict(batches[i % 8]))),
        "plain torch": lambda i: plain.learn(batches[i % 8]),
        "rlpolicy learn_on_batch, SB3's work": lambda i: sb3work.learn_on_batch(
            SampleBatch(dict(batches[i % 8]))
        ),
        "plain torch, SB3's work": lambda i: plain_sb3work.learn(batches[i % 8]),
    }
    if sb3:
        model = SB3Loop().model
        model.learn(LEARNING_STARTS + 100, progress_bar=False)
        systems["SB3 train(1)"] = lambda i: model.train(gradient_steps=1, batch_size=32)
    for fn in systems.values():
        for i in range(20):
            fn(i)
    return _interleaved_us(systems, rounds, calls)


# --- replay ------------------------------------------------------------------------------


def time_replay(rounds: int, calls: int, sb3: bool) -> Dict[str, float]:
    """Median µs per loop turn: add 4 steps, sample 32 (and reprioritize them)."""
    from rlpolicy.execution.replay_buffer import BATCH_INDEXES, LocalReplayBuffer
    from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch

    rng = np.random.default_rng(0)
    frags = []
    for _ in range(16):
        b = dqn_batch(rng, 4)
        b.update(
            eps_id=np.full(4, 7, np.int64),
            t=np.arange(4),
            q_values=rng.standard_normal((4, 2)).astype(np.float32),
            action_prob=np.ones(4, np.float32),
            action_logp=np.zeros(4, np.float32),
            action_dist_inputs=rng.standard_normal((4, 2)).astype(np.float32),
            agent_index=np.zeros(4, np.int64),
            unroll_id=np.zeros(4, np.int64),
            truncateds=np.zeros(4, bool),
        )
        del b["weights"]
        frags.append(SampleBatch(b))

    def rl_turn(buf: Any, prio: bool) -> Callable[[int], None]:
        def turn(i: int) -> None:
            buf.add_batch(frags[i % 16].copy())
            out = buf.replay().policy_batches[DEFAULT_POLICY_ID]
            if prio:
                buf.update_priorities({DEFAULT_POLICY_ID: (out[BATCH_INDEXES], rng.random(32))})

        return turn

    systems: Dict[str, Callable[[int], None]] = {}
    for name, alpha in (("rlpolicy prioritized", 0.6), ("rlpolicy uniform", 0.0)):
        buf = LocalReplayBuffer(1, 0, 50_000, 32, alpha)
        for i in range(2000):
            buf.add_batch(frags[i % 16].copy())
        systems[name] = rl_turn(buf, alpha > 0)
    if sb3:
        from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer

        space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        sbuf = SB3Buffer(50_000, space, gym.spaces.Discrete(2), device="cpu")
        for i in range(8000):
            f = frags[i % 16]
            sbuf.add(f["obs"][:1], f["new_obs"][:1], f["actions"][:1], f["rewards"][:1], f["dones"][:1], [{}])

        def sb3_turn(i: int) -> None:
            f = frags[i % 16]
            for j in range(4):
                sbuf.add(
                    f["obs"][j : j + 1],
                    f["new_obs"][j : j + 1],
                    f["actions"][j : j + 1],
                    f["rewards"][j : j + 1],
                    f["dones"][j : j + 1],
                    [{}],
                )
            sbuf.sample(32)

        systems["SB3 ReplayBuffer"] = sb3_turn
    return _interleaved_us(systems, rounds, calls)


# --- report ------------------------------------------------------------------------------


def print_table(title: str, unit: str, results: Dict[str, float], ref: str, higher_better: bool) -> None:
    print(f"\n| {title} | {unit} | vs {ref} |")
    print("|---|---:|---:|")
    for name, value in results.items():
        ratio = value / results[ref] if ref in results else float("nan")
        print(f"| {name} | {value:,.0f} | {ratio:.2f}x |")
    print(flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="loop,learn,replay")
    ap.add_argument("--systems", default="torch,torch-sb3work,tf,tf-sb3work,sb3")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1000, help="env steps per system per loop round")
    ap.add_argument(
        "--warmup", type=int, default=10_000, help="env steps before timing (10k: epsilon at its final 0.02)"
    )
    ap.add_argument("--calls", type=int, default=200, help="calls per learn/replay round")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    sb3 = have_sb3()
    if not sb3:
        print("stable_baselines3 not importable: its rows are skipped (pip install rlpolicy[bench])")
    systems = [s for s in args.systems.split(",") if s != "sb3" or sb3]
    if any(s.startswith("tf") for s in systems):
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    parts = args.parts.split(",")
    if "loop" in parts:
        rates = time_loops(systems, args.rounds, args.steps, args.warmup)
        ref = "sb3" if "sb3" in rates else systems[0]
        print_table("DQN loop, CartPole-v1 (32 rows per 4 env steps)", "env steps/s", rates, ref, True)
    if "learn" in parts:
        us = time_learn(args.rounds, args.calls, sb3)
        print_table("DQN update, 32 rows", "µs/call", us, "plain torch", False)
    if "replay" in parts:
        us = time_replay(args.rounds, args.calls, sb3)
        ref = "SB3 ReplayBuffer" if sb3 else "rlpolicy uniform"
        print_table("replay turn (add 4, sample 32)", "µs/turn", us, ref, False)


if __name__ == "__main__":
    main()
