"""TorchPolicy (PPO via build_policy_class) against plain torch doing the same work.

Both sides use the same 2x256 tanh policy and value nets (with the same weights),
numpy in / numpy out, and PPO's clipped loss with Adam. The plain side is written
as lean as plain torch gets (log_softmax / multinomial / gather, no
``torch.distributions`` objects), like the raw baseline of the shared
``policy_bench.py``; it is the limit, not a peer. Each case runs interleaved
(plain, rlpolicy, then rlpolicy, plain, ...) in one process and reports the
median-time ratio rlpolicy / plain (lower is better) and, for throughput cases,
the throughput ratio rlpolicy / plain (= plain time / rlpolicy time; higher is better).

    .venv/bin/python benchmarks/bench_torch_policy.py [--repeats 7] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List, Tuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy
from rlpolicy.policy.sample_batch import SampleBatch

OBS_DIM, NUM_ACTIONS, HIDDEN = 8, 4, 256
CLIP, VF_CLIP, KL_COEFF, VF_COEFF, LR = 0.3, 10.0, 0.2, 1.0, 5e-5


def mlp(out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(OBS_DIM, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, out)
    )


class PlainPPO:
    """The hand-written baseline: two MLPs, Categorical sampling, PPO loss, Adam."""

    def __init__(self, num_towers: int = 1, fused_adam: bool = False):
        self.pi, self.vf = mlp(NUM_ACTIONS), mlp(1)
        self.params = list(self.pi.parameters()) + list(self.vf.parameters())
        # torch.optim.Adam's default (per-tensor) update, as the shared yardstick's
        # raw side; ``fused_adam`` gives the kernel rlpolicy's default Adam uses.
        self.opt = torch.optim.Adam(self.params, lr=LR, **({"fused": True} if fused_adam else {}))
        self.towers = [(self.pi, self.vf)] + [(mlp(NUM_ACTIONS), mlp(1)) for _ in range(num_towers - 1)]

    @torch.no_grad()
    def compute_actions(self, obs: np.ndarray) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        # Lean on purpose (no torch.distributions objects): the limit to compare with.
        x = torch.from_numpy(obs)
        logits = self.pi(x)
        logp_all = torch.log_softmax(logits, -1)
        a = torch.multinomial(logp_all.exp(), 1)
        logp = logp_all.gather(-1, a).squeeze(-1)
        v = self.vf(x).squeeze(-1)
        return a.squeeze(-1).numpy(), {
            "action_logp": logp.numpy(),
            "action_prob": logp.exp().numpy(),
            "action_dist_inputs": logits.numpy(),
            "vf_preds": v.numpy(),
        }

    @staticmethod
    def loss(pi: nn.Module, vf: nn.Module, b: Dict[str, torch.Tensor]) -> torch.Tensor:
        logp_all = torch.log_softmax(pi(b["obs"]), -1)
        prev_logp_all = torch.log_softmax(b["action_dist_inputs"], -1)
        logp = logp_all.gather(-1, b["actions"].long().unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(logp - b["action_logp"])
        adv = b["advantages"]
        surr = torch.min(adv * ratio, adv * torch.clamp(ratio, 1 - CLIP, 1 + CLIP))
        kl = (prev_logp_all.exp() * (prev_logp_all - logp_all)).sum(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        vf_err = torch.clamp((vf(b["obs"]).squeeze(-1) - b["value_targets"]) ** 2, 0, VF_CLIP)
        return torch.mean(-surr + KL_COEFF * kl + VF_COEFF * vf_err - 0.0 * entropy)

    def learn(self, batch: Dict[str, np.ndarray]) -> None:
        b = {k: torch.from_numpy(v) for k, v in batch.items()}
        self.opt.zero_grad()
        self.loss(self.pi, self.vf, b).backward()
        self.opt.step()

    def load(self, batch: Dict[str, np.ndarray]) -> int:
        n = len(self.towers)
        per = len(batch["obs"]) // n
        self.buffers = [
            {k: torch.from_numpy(v[i * per : (i + 1) * per]) for k, v in batch.items()} for i in range(n)
        ]
        return per

    def learn_loaded(self, offset: int, minibatch: int) -> None:
        per = minibatch // len(self.towers)
        if len(self.towers) == 1:
            self.learn({k: v[offset : offset + per].numpy() for k, v in self.buffers[0].items()})
            return
        pi_state, vf_state = self.pi.state_dict(), self.vf.state_dict()
        for pi, vf in self.towers[1:]:
            pi.load_state_dict(pi_state)
            vf.load_state_dict(vf_state)
        grads = []
        for (pi, vf), buf in zip(self.towers, self.buffers):
            params = list(pi.parameters()) + list(vf.parameters())
            loss = self.loss(pi, vf, {k: v[offset : offset + per] for k, v in buf.items()})
            grads.append(torch.autograd.grad(loss, params))
        for p, *gs in zip(self.params, *grads):
            p.grad = torch.mean(torch.stack(gs), dim=0)
        self.opt.step()


def make_policy(**extra) -> PPOTorchPolicy:
    cfg = {
        "framework": "torch",
        "lr": LR,
        "clip_param": CLIP,
        "vf_clip_param": VF_CLIP,
        "kl_coeff": KL_COEFF,
        "vf_loss_coeff": VF_COEFF,
        "sgd_minibatch_size": 128,
        "train_batch_size": 4000,
        "model": {"fcnet_hiddens": [HIDDEN, HIDDEN], "fcnet_activation": "tanh", "vf_share_layers": False},
    }
    cfg.update(extra)
    return PPOTorchPolicy(
        gym.spaces.Box(-1, 1, (OBS_DIM,), np.float32), gym.spaces.Discrete(NUM_ACTIONS), cfg
    )


def same_weights(plain: PlainPPO, pol: PPOTorchPolicy) -> PlainPPO:
    """Gives the plain nets the policy model's weights, so both sides do the same work.

    tanh's CPU kernel runs at a speed that depends on its input values, so the
    two sides must not differ in their (random) initial weights.
    """
    m = pol.model
    pairs = [
        (m._hidden_layers[0]._model[0], plain.pi[0]),
        (m._hidden_layers[1]._model[0], plain.pi[2]),
        (m._logits._model[0], plain.pi[4]),
        (m._value_branch_separate[0]._model[0], plain.vf[0]),
        (m._value_branch_separate[1]._model[0], plain.vf[2]),
        (m._value_branch._model[0], plain.vf[4]),
    ]
    with torch.no_grad():
        for src, dst in pairs:
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
    return plain


def make_batch(n: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
    logits = rng.normal(size=(n, NUM_ACTIONS)).astype(np.float32)
    actions = rng.integers(0, NUM_ACTIONS, n)
    logp = (logits - np.log(np.exp(logits).sum(-1, keepdims=True)))[np.arange(n), actions]
    return {
        "obs": rng.normal(size=(n, OBS_DIM)).astype(np.float32),
        "actions": actions,
        "action_dist_inputs": logits,
        "action_logp": logp.astype(np.float32),
        "advantages": rng.normal(size=n).astype(np.float32),
        "value_targets": rng.normal(size=n).astype(np.float32),
    }


def timed(fn: Callable[[], None], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def compare(
    name: str, plain: Callable[[], None], ours: Callable[[], None], *, inner: int, repeats: int, kind: str
) -> Dict[str, float]:
    plain(), ours()  # warm-up
    tp, to = [], []
    for r in range(repeats):
        # Alternate which side runs first: the second of a pair runs on caches
        # the first one just filled with its own data (a few % either way).
        if r % 2 == 0:
            tp.append(timed(plain, inner))
            to.append(timed(ours, inner))
        else:
            to.append(timed(ours, inner))
            tp.append(timed(plain, inner))
    p, o = statistics.median(tp), statistics.median(to)
    ratio = o / p if kind == "time" else p / o
    # time: ours_time / plain_time (lower is better); throughput: plain_time / ours_time,
    # i.e. ours_throughput / plain_throughput (higher is better).
    label = "time ratio (ours/plain)" if kind == "time" else "throughput ratio (ours/plain)"
    print(f"{name:42s} plain {p * 1e3:9.3f} ms  rlpolicy {o * 1e3:9.3f} ms  {label} {ratio:5.2f}", flush=True)
    return {"case": name, "plain_ms": p * 1e3, "ours_ms": o * 1e3, "ratio": ratio, "kind": kind}


def run(repeats: int, quick: bool) -> List[Dict[str, float]]:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    results = []
    pol = make_policy()
    plain = same_weights(PlainPPO(), pol)
    for bs, inner, kind in [(1, 200, "time"), (256, 40, "throughput"), (4096, 5, "throughput")]:
        obs = rng.normal(size=(bs, OBS_DIM)).astype(np.float32)
        results.append(
            compare(
                f"compute_actions batch={bs}",
                lambda obs=obs: plain.compute_actions(obs),
                lambda obs=obs: pol.compute_actions(obs),
                inner=inner // (4 if quick else 1) or 1,
                repeats=repeats,
                kind=kind,
            )
        )
    data = make_batch(4000, rng)
    sb = SampleBatch(dict(data))
    results.append(
        compare(
            "learn_on_batch 4000",
            lambda: plain.learn(data),
            lambda: pol.learn_on_batch(sb),
            inner=1 if quick else 2,
            repeats=repeats,
            kind="throughput",
        )
    )
    # The last row: plain torch with the same fused Adam kernel as rlpolicy's
    # default optimizer (what remains is the policy layer's own overhead).
    for towers, extra, fused in [
        (1, {}, False),
        (2, {"num_gpus": 2, "_fake_gpus": True}, False),
        (1, {}, True),
    ]:
        pol2 = make_policy(**extra)
        p2 = same_weights(PlainPPO(num_towers=towers, fused_adam=fused), pol2)

        def plain_sgd(p2=p2, towers=towers):
            per = p2.load(data)
            for i in range(30):
                p2.learn_loaded((i * (128 // towers)) % max(1, per - 128 // towers), 128)

        def ours_sgd(pol2=pol2, towers=towers):
            per = pol2.load_batch_into_buffer(SampleBatch(dict(data)), buffer_index=0)
            for i in range(30):
                pol2.learn_on_loaded_batch((i * (128 // towers)) % max(1, per - 128 // towers), 0)

        label = f"load 4000 + 30 SGD steps of 128 ({towers} dev{', plain fused Adam' if fused else ''})"
        results.append(compare(label, plain_sgd, ours_sgd, inner=1, repeats=repeats, kind="throughput"))
    results.append(
        compare(
            "construction", lambda: PlainPPO(), lambda: make_policy(), inner=1, repeats=repeats, kind="time"
        )
    )

    def snapshot(d: dict) -> dict:
        return {n: (t.detach().numpy().copy() if torch.is_tensor(t) else t) for n, t in d.items()}

    def plain_state():
        # A snapshot (numpy copies) of weights and optimizer state, as get_state returns;
        # state_dict() already hands out fresh param_group dicts.
        opt = plain.opt.state_dict()
        s = {
            "pi": snapshot(plain.pi.state_dict()),
            "vf": snapshot(plain.vf.state_dict()),
            "opt": {
                "state": {i: snapshot(st) for i, st in opt["state"].items()},
                "param_groups": opt["param_groups"],
            },
        }
        plain.pi.load_state_dict({n: torch.from_numpy(a) for n, a in s["pi"].items()})
        plain.vf.load_state_dict({n: torch.from_numpy(a) for n, a in s["vf"].items()})
        plain.opt.load_state_dict(
            {
                "state": {
                    i: {n: torch.from_numpy(a) if isinstance(a, np.ndarray) else a for n, a in st.items()}
                    for i, st in s["opt"]["state"].items()
                },
                "param_groups": s["opt"]["param_groups"],
            }
        )

    results.append(
        compare(
            "get_state + set_state",
            plain_state,
            lambda: pol.set_state(pol.get_state()),
            inner=10,
            repeats=repeats,
            kind="time",
        )
    )
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    run(args.repeats, args.quick)
