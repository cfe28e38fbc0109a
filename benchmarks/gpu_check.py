"""The python half of ``benchmarks/gpu_check.sh``: checks and timings on one real CUDA device.

Subcommands:

``has-cuda``
    Exit 0 if torch sees a CUDA device, 3 if torch is importable but sees none, 4 without
    torch (the shell script turns 3 and 4 into a clean skip).
``towers [--device cuda:0]``
    The main job's policy (PPO torch, the CartPole-v1 training defaults of ``rlpolicy
    train``) built on ``--device``'s GPU (``num_gpus=1``) and on the CPU with the same
    weights: greedy actions and value estimates for the same observations, then a loaded
    batch and SGD minibatch steps (``load_batch_into_buffer`` + ``learn_on_loaded_batch``,
    the Adam steps ``rlpolicy train`` takes) must agree within float32 tolerance. With
    ``--device cpu`` the "GPU" policy is a second CPU policy (the plumbing runs, nothing
    about CUDA is shown; used by the tests on machines without CUDA).
``checkpoint-write DIR`` / ``checkpoint-load DIR``
    Writes a checkpoint of a PPO policy trained a few steps on the GPU (its Adam state on
    the GPU too), with the greedy actions and weights it should restore to; then (in a
    process that sees no CUDA device) rebuilds it with ``Policy.from_checkpoint`` on the CPU
    and checks weights, actions and the next SGD step.
``bench [policy_bench args]``
    The shared policy bench (``../shared/bench/policy_bench.py``) with rlpolicy's policies
    built with ``num_gpus=1`` (their towers on the GPU; ``raw`` stays plain CPU torch, so its
    ratios read GPU rlpolicy / CPU raw).

Each check prints ``OK <what>`` or raises (non-zero exit).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ATOL, RTOL = 1e-4, 1e-4  # float32 after a few Adam steps on different devices


def _ppo_policy(device: str, seed: int = 0) -> Any:
    import gymnasium as gym
    import torch

    from rlpolicy.cli.algorithms import config_defaults, get_algorithm

    torch.manual_seed(seed)
    config = dict(
        config_defaults("ppo", "CartPole-v1"),
        framework="torch",
        seed=seed,
        num_gpus=0 if device == "cpu" else 1,
    )
    env = gym.make("CartPole-v1")
    try:
        return get_algorithm("ppo").policy_class("torch")(env.observation_space, env.action_space, config)
    finally:
        env.close()


def _ppo_batch(policy: Any, n: int, seed: int) -> Any:
    """A PPO training batch: CartPole-like observations, the policy's own sampled
    actions/logp/value estimates, made-up advantages and value targets."""
    from rlpolicy.evaluation.postprocessing import Postprocessing
    from rlpolicy.policy.sample_batch import SampleBatch

    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1.0, 1.0, (n, 4)).astype(np.float32)
    actions, _, extra = policy.compute_actions(obs, explore=True)
    cols: Dict[str, Any] = {
        SampleBatch.OBS: obs,
        SampleBatch.ACTIONS: np.asarray(actions),
        **{k: np.asarray(v) for k, v in extra.items()},
    }
    cols[Postprocessing.ADVANTAGES] = rng.normal(size=n).astype(np.float32)
    cols[Postprocessing.VALUE_TARGETS] = rng.normal(size=n).astype(np.float32)
    return SampleBatch(cols)


def _assert_close(what: str, a: Any, b: Any, atol: float = ATOL, rtol: float = RTOL) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise AssertionError(f"{what}: shapes differ, {a.shape} vs {b.shape}")
    np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=what)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def _weights_close(
    what: str, a: Dict[str, np.ndarray], b: Dict[str, np.ndarray], atol: float = ATOL
) -> float:
    if a.keys() != b.keys():
        raise AssertionError(f"{what}: weight names differ: {sorted(set(a) ^ set(b))}")
    return max(_assert_close(f"{what}: {k}", a[k], b[k], atol=atol) for k in a)


def _learn_minibatches(policy: Any, batch: Any, epochs: int, minibatch: int) -> List[float]:
    """The minibatch SGD ``rlpolicy train`` does (fixed offsets, no shuffling)."""
    loaded = policy.load_batch_into_buffer(batch.copy(), buffer_index=0)
    losses = []
    for _ in range(epochs):
        for offset in range(0, loaded - minibatch + 1, minibatch):
            out = policy.learn_on_loaded_batch(offset, buffer_index=0)
            losses.append(float(out["learner_stats"]["total_loss"]))
    return losses


def check_towers(device: str) -> None:
    """The GPU policy computes and learns what the CPU policy does."""
    cpu, gpu = _ppo_policy("cpu", seed=0), _ppo_policy(device, seed=1)
    if device != "cpu":
        if [str(d) for d in gpu.devices] != ["cuda:0"]:
            raise AssertionError(f"num_gpus=1: towers on {gpu.devices}, expected [cuda:0]")
        on = {p.device.type for p in gpu.model.parameters()}
        if on != {"cuda"}:
            raise AssertionError(f"num_gpus=1: model parameters on {on}, expected cuda")
    gpu.set_state(cpu.get_state())
    obs = np.random.default_rng(7).uniform(-1, 1, (64, 4)).astype(np.float32)
    a_cpu, _, x_cpu = cpu.compute_actions(obs, explore=False)
    a_gpu, _, x_gpu = gpu.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(a_cpu, a_gpu, err_msg="greedy actions")
    d_vf = _assert_close("vf_preds", x_cpu["vf_preds"], x_gpu["vf_preds"])
    d_logits = _assert_close("action_dist_inputs", x_cpu["action_dist_inputs"], x_gpu["action_dist_inputs"])
    print(
        f"OK towers: greedy actions equal, |vf| diff {d_vf:.2e}, |logits| diff {d_logits:.2e} "
        f"({device} vs cpu, 64 observations)"
    )
    batch = _ppo_batch(cpu, 1024, seed=3)
    mb = int(cpu.config["sgd_minibatch_size"])
    l_cpu = _learn_minibatches(cpu, batch, epochs=2, minibatch=mb)
    l_gpu = _learn_minibatches(gpu, batch, epochs=2, minibatch=mb)
    d_loss = _assert_close("total_loss per minibatch", l_cpu, l_gpu, atol=1e-3)
    d_w = _weights_close("weights after SGD", cpu.get_weights(), gpu.get_weights())
    print(
        f"OK towers: {len(l_cpu)} SGD minibatch steps of {mb}: losses within {d_loss:.2e}, "
        f"weights within {d_w:.2e} ({device} vs cpu)"
    )


def checkpoint_write(directory: str, device: str) -> None:
    """A GPU-trained PPO checkpoint plus what it should restore to."""
    policy = _ppo_policy(device, seed=2)
    batch = _ppo_batch(policy, 512, seed=5)
    _learn_minibatches(policy, batch, epochs=1, minibatch=int(policy.config["sgd_minibatch_size"]))
    os.makedirs(directory, exist_ok=True)
    policy.export_checkpoint(os.path.join(directory, "policy"))
    obs = np.random.default_rng(11).uniform(-1, 1, (32, 4)).astype(np.float32)
    actions, _, extra = policy.compute_actions(obs, explore=False)
    after = _ppo_batch(policy, 512, seed=6)
    _learn_minibatches(policy, after, epochs=1, minibatch=int(policy.config["sgd_minibatch_size"]))
    np.savez(
        os.path.join(directory, "expected.npz"),
        obs=obs,
        actions=np.asarray(actions),
        vf_preds=np.asarray(extra["vf_preds"]),
        **{f"after/{k}": v for k, v in policy.get_weights().items()},
        **{f"batch/{k}": np.asarray(after[k]) for k in after.keys()},
    )
    print(f"OK checkpoint: written on {policy.device} into {directory}/policy")


def checkpoint_load(directory: str) -> None:
    """Rebuilds the checkpoint on the CPU; the next SGD step matches the GPU's."""
    import torch

    from rlpolicy.policy.policy import Policy
    from rlpolicy.policy.sample_batch import SampleBatch

    restored = Policy.from_checkpoint(os.path.join(directory, "policy"), {"num_gpus": 0})
    if str(restored.device) != "cpu" or any(p.device.type != "cpu" for p in restored.model.parameters()):
        raise AssertionError(f"restored policy not on the CPU: {restored.device}")
    expected = np.load(os.path.join(directory, "expected.npz"))
    actions, _, extra = restored.compute_actions(expected["obs"], explore=False)
    np.testing.assert_array_equal(actions, expected["actions"], err_msg="greedy actions after restore")
    d_vf = _assert_close("vf_preds after restore", extra["vf_preds"], expected["vf_preds"])
    batch = SampleBatch({k[len("batch/") :]: expected[k] for k in expected.files if k.startswith("batch/")})
    _learn_minibatches(restored, batch, epochs=1, minibatch=int(restored.config["sgd_minibatch_size"]))
    after = {k[len("after/") :]: expected[k] for k in expected.files if k.startswith("after/")}
    d_w = _weights_close(
        "weights after the next SGD steps (Adam state restored)", after, restored.get_weights()
    )
    print(
        f"OK checkpoint: loaded on the CPU (CUDA visible: {torch.cuda.is_available()}), greedy "
        f"actions equal, |vf| diff {d_vf:.2e}; next SGD steps agree within {d_w:.2e}"
    )


def run_bench(argv: List[str]) -> None:
    """policy_bench.main() with rlpolicy's towers on the GPU (num_gpus=1)."""
    bench_dir = ROOT.parent / "shared" / "bench"
    if not (bench_dir / "policy_bench.py").exists():
        raise SystemExit(f"shared bench not found at {bench_dir}/policy_bench.py")
    sys.path.insert(0, str(bench_dir))
    import policy_bench

    policy_bench.COMMON_RLLIB_OVERRIDES["num_gpus"] = 1
    sys.argv = ["policy_bench.py", *argv]
    policy_bench.main()


def has_cuda() -> Tuple[int, str]:
    try:
        import torch
    except ImportError:
        return 4, "torch is not installed"
    if not torch.cuda.is_available():
        return 3, f"torch {torch.__version__} sees no CUDA device"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return 0, f"torch {torch.__version__}, CUDA {torch.version.cuda}: {', '.join(names)}"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("has-cuda")
    towers = sub.add_parser("towers")
    towers.add_argument("--device", default="cuda:0", choices=("cuda:0", "cpu"))
    write = sub.add_parser("checkpoint-write")
    write.add_argument("dir")
    write.add_argument("--device", default="cuda:0", choices=("cuda:0", "cpu"))
    load = sub.add_parser("checkpoint-load")
    load.add_argument("dir")
    sub.add_parser("bench", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.cmd == "bench":
        run_bench(rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.cmd == "has-cuda":
        code, text = has_cuda()
        print(json.dumps({"cuda": code == 0, "detail": text}))
        raise SystemExit(code)
    if args.cmd == "towers":
        check_towers(args.device)
    elif args.cmd == "checkpoint-write":
        checkpoint_write(args.dir, args.device)
    else:
        checkpoint_load(args.dir)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
