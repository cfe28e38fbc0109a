"""``rlpolicy`` command line: ``rlpolicy train`` trains a reference policy on a gymnasium env.

Example::

    rlpolicy train --algo ppo --env CartPole-v1 --stop-reward 195
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional


def _parse(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlpolicy", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a reference policy")
    train.add_argument("--algo", default="ppo", choices=["pg", "ppo"])
    train.add_argument("--env", default="CartPole-v1")
    train.add_argument("--framework", default="torch")
    train.add_argument("--stop-reward", type=float, default=195.0,
                       help="stop once the mean return of the last 100 episodes reaches this")
    train.add_argument("--max-timesteps", type=int, default=400_000)
    train.add_argument("--max-seconds", type=float, default=600.0)
    train.add_argument("--num-envs", type=int, default=8)
    train.add_argument("--num-gpus", type=float, default=0)
    train.add_argument("--fake-gpus", action="store_true", help="towers on CPU (fake GPUs)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--config", default="{}", help="JSON dict merged into the algorithm config")
    train.add_argument("--checkpoint-dir", default=None, help="write a policy checkpoint here at the end")
    return parser.parse_args(argv)


def _default_overrides(algo: str) -> dict:
    """Settings that train CartPole-sized problems quickly on a CPU."""
    if algo == "ppo":
        return {"lr": 3e-4, "train_batch_size": 2000, "sgd_minibatch_size": 256, "num_sgd_iter": 8,
                "lambda": 0.95, "vf_clip_param": 1e4, "vf_loss_coeff": 0.5, "entropy_coeff": 0.0,
                "rollout_fragment_length": 400,
                "model": {"fcnet_hiddens": [64, 64], "vf_share_layers": False}}
    return {"lr": 2e-3, "train_batch_size": 2000, "rollout_fragment_length": 400,
            "model": {"fcnet_hiddens": [64, 64]}}


def train(args: argparse.Namespace) -> int:
    import gymnasium as gym
    import torch

    from rlpolicy.agents.training import SimpleTrainer
    from rlpolicy.utils import merge_dicts

    torch.manual_seed(args.seed)
    import numpy as np

    np.random.seed(args.seed)
    config = merge_dicts(_default_overrides(args.algo), json.loads(args.config))
    config.update(framework=args.framework, num_gpus=args.num_gpus, _fake_gpus=args.fake_gpus,
                  seed=args.seed)
    trainer = SimpleTrainer(args.algo, lambda: gym.make(args.env), config,
                            num_envs=args.num_envs, seed=args.seed)
    print(f"training {type(trainer.policy).__name__} on {args.env} "
          f"(devices: {[str(d) for d in trainer.policy.devices]})", flush=True)
    while True:
        r = trainer.train()
        print(f"iter {r.iteration:3d}  steps {r.timesteps_total:7d}  episodes {r.episodes_total:5d}  "
              f"mean return {r.episode_reward_mean:7.1f}  time {r.time_s:6.1f}s", flush=True)
        if r.episode_reward_mean >= args.stop_reward:
            print(f"reached mean return {r.episode_reward_mean:.1f} >= {args.stop_reward} "
                  f"after {r.timesteps_total} steps", flush=True)
            status = 0
            break
        if r.timesteps_total >= args.max_timesteps or r.time_s >= args.max_seconds:
            print(f"stopped at mean return {r.episode_reward_mean:.1f} (< {args.stop_reward})", flush=True)
            status = 1
            break
    if args.checkpoint_dir:
        trainer.policy.export_checkpoint(os.path.abspath(args.checkpoint_dir))
        print(f"checkpoint written to {args.checkpoint_dir}")
    return status


def main(argv: Optional[List[str]] = None) -> int:
    args = _parse(argv)
    if args.command == "train":
        return train(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
