"""The cost of ``config["_deterministic_towers"]`` (exact towers) against the default.

For torch, graph-mode TF and eager TF (``--frameworks torch,tf,tf2``), a REINFORCE policy (a 2x256 tanh net, or an LSTM
with ``--lstm``) loads one train batch into the tower buffer and runs one epoch
of minibatch SGD (``learn_on_loaded_batch``) on 1, 2 and 4 fake-GPU (CPU)
towers, in the default mode and with ``_deterministic_towers`` (K = 4 chunks
per minibatch; tf2 with ``eager_tracing``). The two modes run interleaved;
reported: the median time of one epoch over the repeats (the load excluded),
and exact / default (lower is better).

    .venv/bin/python benchmarks/bench_deterministic_towers.py [--repeats 5] [--quick]
        [--frameworks torch,tf,tf2] [--lstm]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Dict, List

import gymnasium as gym
import numpy as np

from rlpolicy.policy.sample_batch import SampleBatch

OBS_DIM, NUM_ACTIONS = 8, 4


def _torch_cls():
    import torch

    from rlpolicy.agents.pg import PGTorchPolicy
    from rlpolicy.utils.torch_utils import sequence_mask

    def loss(policy, model, dist_class, batch):
        logits, _ = model(batch)
        logp = dist_class(logits, model).logp(batch["actions"])
        if policy.is_recurrent():
            mask = sequence_mask(batch["seq_lens"], logp.shape[0] // len(batch["seq_lens"]))
            mask = mask.reshape(-1).float()
            out = -torch.sum(logp * batch["advantages"] * mask) / torch.sum(mask)
        else:
            out = -torch.mean(logp * batch["advantages"])
        model.tower_stats["policy_loss"] = out
        return out

    return PGTorchPolicy.with_updates(name="BenchPGTorch", loss_fn=loss)


def _tf_cls():
    from rlpolicy.agents.pg import PGTFPolicy
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()

    def loss(policy, model, dist_class, batch):
        logits, _ = model(batch)
        logp = dist_class(logits, model).logp(batch["actions"])
        adv = tf.cast(batch["advantages"], tf.float32)
        if policy.is_recurrent():
            max_t = tf.shape(logp)[0] // tf.shape(batch["seq_lens"])[0]
            mask = tf.reshape(tf.sequence_mask(batch["seq_lens"], max_t, dtype=tf.float32), [-1])
            out = -tf.reduce_sum(logp * adv * mask) / tf.reduce_sum(mask)
        else:
            out = -tf.reduce_mean(logp * adv)
        policy.policy_loss = out
        return out

    return PGTFPolicy.with_updates(name="BenchPGTF", loss_fn=loss)


def _batch(n: int, lstm: bool, rng: np.random.Generator) -> Dict[str, np.ndarray]:
    cols = {
        "obs": rng.uniform(-1, 1, (n, OBS_DIM)).astype(np.float32),
        "actions": rng.integers(0, NUM_ACTIONS, n),
        "advantages": rng.normal(size=n).astype(np.float32),
    }
    if lstm:
        lens: List[int] = []
        while sum(lens) < n:
            lens.append(int(rng.integers(1, 21)))
        lens[-1] -= sum(lens) - n
        if lens[-1] == 0:
            lens.pop()
        cols["seq_lens"] = np.asarray(lens, np.int32)
        cols["state_in_0"] = np.zeros((len(lens), 64), np.float32)
        cols["state_in_1"] = np.zeros((len(lens), 64), np.float32)
    return cols


def _epoch_time(policy: Any, cols: Dict[str, np.ndarray], minibatch: int) -> float:
    rows = policy.load_batch_into_buffer(SampleBatch({k: v.copy() for k, v in cols.items()}))
    step = minibatch // len(policy.devices)
    t0 = time.perf_counter()
    for offset in range(0, rows, step):
        policy.learn_on_loaded_batch(offset=offset)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller batches, 2 repeats")
    parser.add_argument("--frameworks", default="torch,tf,tf2")
    parser.add_argument("--lstm", action="store_true", help="an LSTM (20-step sequences)")
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    n, minibatch = (1024, 128) if args.quick else (4096, 512)
    rng = np.random.default_rng(0)
    cols = _batch(n, args.lstm, rng)
    model = (
        {"use_lstm": True, "lstm_cell_size": 64, "max_seq_len": 20, "fcnet_hiddens": [64]}
        if args.lstm
        else {"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh"}
    )
    obs_space = gym.spaces.Box(-1, 1, (OBS_DIM,))
    act_space = gym.spaces.Discrete(NUM_ACTIONS)
    print(
        f"train batch {n}, minibatch {minibatch}, {'LSTM' if args.lstm else 'FC 2x256'}, "
        f"median of {repeats} epochs ({n // minibatch} SGD steps each)"
    )
    print(f"{'framework':<9} {'towers':>6} {'default s':>10} {'exact s':>9} {'exact/default':>14}")
    for fw in args.frameworks.split(","):
        cls = _torch_cls() if fw == "torch" else _tf_cls()
        if fw == "tf2":
            cls = cls.as_eager()
        for k in (1, 2, 4):
            policies = {}
            for exact in (False, 4):
                cfg = {
                    "framework": fw,
                    "num_gpus": k,
                    "_fake_gpus": True,
                    "seed": 0,
                    "train_batch_size": n,
                    "sgd_minibatch_size": minibatch,
                    "lr": 1e-3,
                    "model": model,
                    "_deterministic_towers": exact,
                    "eager_tracing": fw == "tf2",
                }
                policies[exact] = cls(obs_space, act_space, cfg)
                _epoch_time(policies[exact], cols, minibatch)  # warm-up (and tracing)
            # Interleaved (default, exact, default, ...) so that load drift hits both.
            runs: Dict[Any, List[float]] = {False: [], 4: []}
            for _ in range(repeats):
                for exact, policy in policies.items():
                    runs[exact].append(_epoch_time(policy, cols, minibatch))
            times = {exact: statistics.median(r) for exact, r in runs.items()}
            print(f"{fw:<9} {k:>6} {times[False]:>10.3f} {times[4]:>9.3f} {times[4] / times[False]:>14.2f}")


if __name__ == "__main__":
    main()
