"""``rlpolicy`` command line: ``rlpolicy train`` trains a reference policy on a gymnasium env.

Example::

    rlpolicy train --algo ppo --env CartPole-v1

Bad arguments (an unknown env, framework or config key, invalid JSON or
config values) end in one ``rlpolicy train: error: ...`` line and exit code 2,
as argparse does for its own errors.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, List, Optional, Tuple

from rlpolicy import __version__

ALGORITHMS = ("pg", "ppo")
# The frameworks `--framework` accepts. Each (algo, framework) pair is resolved by
# rlpolicy.agents.training.get_policy_class: that is where TF policy classes plug in;
# a framework whose policy class or package is missing is reported as an argument error.
FRAMEWORKS = ("torch", "tf", "tf2", "tfe")


def _number(kind: Callable[[str], Any], low: float, strict: bool = False) -> Callable[[str], Any]:
    """An argparse ``type``: ``kind(text)`` that must be >= low (> low if strict)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {low}, got {text}")
        return value
    return parse


def _build_parser() -> Tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``rlpolicy`` parser and its ``train`` sub-parser."""
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(prog="rlpolicy", description=__doc__.splitlines()[0],
                                     formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a reference policy", formatter_class=fmt,
                           description="Train a reference policy (built with build_policy_class) "
                                       "until the mean return of the last 100 episodes reaches "
                                       "--stop-reward.")
    train.add_argument("--algo", default="ppo", choices=ALGORITHMS, help="algorithm")
    train.add_argument("--env", default="CartPole-v1", help="registered gymnasium env id")
    train.add_argument("--framework", default="torch", choices=FRAMEWORKS, help="deep-learning framework")
    train.add_argument("--stop-reward", type=float, default=None,
                       help="stop once the mean return of the last 100 episodes reaches this "
                            "(None: the env's reward_threshold, 475 for CartPole-v1)")
    train.add_argument("--max-timesteps", type=_number(int, 1), default=400_000,
                       help="give up after this many env steps")
    train.add_argument("--max-seconds", type=_number(float, 0, strict=True), default=600.0,
                       help="give up after this many seconds")
    train.add_argument("--num-envs", type=_number(int, 1), default=8, help="envs sampled in parallel")
    train.add_argument("--num-gpus", type=_number(float, 0), default=0, help="config['num_gpus']")
    train.add_argument("--fake-gpus", action="store_true", help="towers on CPU (fake GPUs)")
    train.add_argument("--seed", type=_number(int, 0), default=0, help="random seed")
    train.add_argument("--config", default="{}", help="JSON dict merged into the algorithm config")
    train.add_argument("--checkpoint-dir", default=None, help="write a policy checkpoint here at the end")
    return parser, train


def _default_overrides(algo: str) -> dict:
    """Settings that train CartPole-sized problems quickly on a CPU."""
    if algo == "ppo":
        return {"lr": 3e-4, "train_batch_size": 2000, "sgd_minibatch_size": 256, "num_sgd_iter": 8,
                "lambda": 0.95, "vf_clip_param": 1e4, "vf_loss_coeff": 0.5, "entropy_coeff": 0.0,
                "rollout_fragment_length": 400,
                "model": {"fcnet_hiddens": [64, 64], "vf_share_layers": False}}
    return {"lr": 2e-3, "train_batch_size": 2000, "rollout_fragment_length": 400,
            "model": {"fcnet_hiddens": [64, 64]}}


def _algo_defaults(algo: str) -> dict:
    if algo == "ppo":
        from rlpolicy.agents.ppo.ppo import DEFAULT_CONFIG
    else:
        from rlpolicy.agents.pg.pg import DEFAULT_CONFIG
    return DEFAULT_CONFIG


def _env_and_stop_reward(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Tuple[Any, float]:
    """Checks ``--env`` (registered, constructible) and resolves ``--stop-reward``."""
    import gymnasium as gym

    try:
        spec = gym.spec(args.env)
        gym.make(args.env).close()
    except (gym.error.Error, ImportError) as e:
        parser.error(f"argument --env: {args.env!r}: {e}")
    stop = args.stop_reward if args.stop_reward is not None else spec.reward_threshold
    if stop is None:
        parser.error(f"argument --stop-reward: env {args.env!r} has no reward_threshold; "
                     "give --stop-reward")
    return spec, float(stop)


def _checked_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """The algorithm config: defaults for CPU training, then ``--config``, then the flags.

    Invalid JSON, a non-dict, an unknown key or an invalid value is an argument error.
    """
    from rlpolicy._core.config import complete_config, unknown_keys, validate_config
    from rlpolicy.utils import merge_dicts

    try:
        user = json.loads(args.config)
    except json.JSONDecodeError as e:
        parser.error(f"argument --config: not valid JSON ({e}): {args.config!r}")
    if not isinstance(user, dict):
        parser.error(f"argument --config: must be a JSON object of config keys, got "
                     f"{type(user).__name__} {args.config!r}")
    defaults = _algo_defaults(args.algo)
    for key, close in unknown_keys(user, defaults):
        hint = f"; did you mean {close!r}?" if close else ""
        parser.error(f"argument --config: unknown config key {key!r} for --algo {args.algo}{hint}")
    config = merge_dicts(_default_overrides(args.algo), user)
    config.update(framework=args.framework, num_gpus=args.num_gpus, _fake_gpus=args.fake_gpus,
                  seed=args.seed)
    if args.framework in ("tf2", "tfe"):  # untraced eager steps are several times slower
        config.setdefault("eager_tracing", True)
    try:
        validate_config(complete_config(config, defaults))
    except ValueError as e:
        parser.error(f"argument --config: {e}")
    return config


def _policy_class(parser: argparse.ArgumentParser, args: argparse.Namespace) -> type:
    from rlpolicy._core.framework_check import require_framework
    from rlpolicy.agents.training import get_policy_class

    try:
        cls = get_policy_class(args.algo, args.framework)
        require_framework(args.framework, cls.__name__)
        return cls
    except (ValueError, ImportError) as e:
        parser.error(f"argument --framework: {args.framework!r} cannot be used for "
                     f"{args.algo!r}: {e}")


def _seed_frameworks(framework: str, seed: int) -> None:
    import numpy as np

    np.random.seed(seed)
    if framework == "torch":
        import torch

        torch.manual_seed(seed)


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Tuple[float, dict]:
    """All argument checks, before anything is trained; returns (stop reward, config)."""
    _, stop = _env_and_stop_reward(parser, args)
    config = _checked_config(parser, args)
    _policy_class(parser, args)
    return stop, config


def train(args: argparse.Namespace, parser: Optional[argparse.ArgumentParser] = None) -> int:
    """Runs ``rlpolicy train``; returns 0 if ``--stop-reward`` was reached, else 1."""
    import gymnasium as gym

    from rlpolicy.agents.training import SimpleTrainer

    stop_reward, config = _check(parser or _build_parser()[1], args)
    _seed_frameworks(args.framework, args.seed)
    trainer = SimpleTrainer(args.algo, lambda: gym.make(args.env), config,
                            num_envs=args.num_envs, seed=args.seed)
    devices = [str(d) for d in getattr(trainer.policy, "devices", [])]
    print(f"training {type(trainer.policy).__name__} on {args.env} until mean return "
          f">= {stop_reward:g} (devices: {devices})", flush=True)
    status = _train_loop(trainer, args, stop_reward)
    if args.checkpoint_dir:
        trainer.policy.export_checkpoint(os.path.abspath(args.checkpoint_dir))
        print(f"checkpoint written to {args.checkpoint_dir}")
    return status


def _train_loop(trainer: Any, args: argparse.Namespace, stop_reward: float) -> int:
    while True:
        r = trainer.train()
        print(f"iter {r.iteration:3d}  steps {r.timesteps_total:7d}  episodes {r.episodes_total:5d}  "
              f"mean return {r.episode_reward_mean:7.1f}  time {r.time_s:6.1f}s", flush=True)
        if r.episode_reward_mean >= stop_reward:
            print(f"reached mean return {r.episode_reward_mean:.1f} >= {stop_reward:g} "
                  f"after {r.timesteps_total} steps", flush=True)
            return 0
        if r.timesteps_total >= args.max_timesteps or r.time_s >= args.max_seconds:
            print(f"stopped at mean return {r.episode_reward_mean:.1f} (< {stop_reward:g})", flush=True)
            return 1


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``rlpolicy`` command; returns the exit status.

    Argument errors raise ``SystemExit(2)`` after printing one error line.
    """
    parser, train_parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "train":
        return train(args, train_parser)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
