"""The algorithms ``rlpolicy train`` knows, and their training defaults per env.

Every place that needs something per algorithm (its policy class for a
framework, its ``DEFAULT_CONFIG``, its training loop, whether it samples with
Ray workers) asks :func:`get_algorithm`; nothing else branches on algorithm
names. Adding an algorithm is one :class:`Algorithm` entry here (and, if it
trains on CPU with other settings than its ``DEFAULT_CONFIG``, rows in
:data:`TRAINING_DEFAULTS`).

Classes and configs are named as ``"module:attribute"`` strings and imported on
first use, so importing this module loads no framework.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

# The frameworks `--framework` accepts: "torch" uses the torch class, "tf" the TF graph
# class and "tf2"/"tfe" its as_eager() version.
FRAMEWORKS = ("torch", "tf", "tf2", "tfe")


def _resolve(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of the command line.

    Attributes:
        name: The ``--algo`` value.
        torch_policy: ``"module:Class"`` of the torch policy.
        tf_policy: ``"module:Class"`` of the TF graph policy (tf2/tfe: its ``as_eager()``).
        default_config: ``"module:DEFAULT_CONFIG"`` (RLlib 1.11's values).
        trainer: ``"module:Class"`` of the training loop; called as
            ``cls(self, env_creator, config, num_envs=..., num_workers=..., seed=...)``
            when ``uses_workers``, else ``cls(env_creator, config, seed=..., num_envs=...)``.
        uses_workers: Whether the loop can sample with Ray workers (``--num-workers``).
        minibatch_sgd: For :class:`~rlpolicy.cli.training.SimpleTrainer`: buffered
            minibatch SGD epochs plus the KL update (PPO) instead of one
            ``learn_on_batch`` per batch (PG).
    """

    name: str
    torch_policy: str
    tf_policy: str
    default_config: str
    trainer: str
    uses_workers: bool = True
    minibatch_sgd: bool = False

    def policy_class(self, framework: str = "torch") -> type:
        """The policy class for ``framework`` (see :data:`FRAMEWORKS`).

        Raises:
            ValueError: For an unknown framework.
            ImportError: If the framework's package is missing.
        """
        if framework not in FRAMEWORKS:
            raise ValueError(
                f"algorithm {self.name!r}: framework={framework!r} not available; "
                f"supported: {', '.join(map(repr, FRAMEWORKS))}"
            )
        if framework == "torch":
            return _resolve(self.torch_policy)
        cls = _resolve(self.tf_policy)
        return cls if framework == "tf" else cls.as_eager()

    def config(self) -> dict:
        """The algorithm's ``DEFAULT_CONFIG`` (the module's own dict; not a copy)."""
        return _resolve(self.default_config)

    def make_trainer(
        self,
        env_creator: Any,
        config: Dict[str, Any],
        *,
        num_envs: Optional[int],
        num_workers: int,
        seed: Optional[int],
    ) -> Any:
        """A training loop for this algorithm.

        Raises:
            ValueError: ``num_workers > 0`` for a loop that samples in one process.
        """
        cls = _resolve(self.trainer)
        if not self.uses_workers:
            if num_workers:
                raise ValueError(
                    f"{self.name.upper()} trains in one process; num_workers={num_workers} "
                    f"is not supported for {self.name!r} (use num_workers=0)"
                )
            return cls(env_creator, config, seed=seed, num_envs=num_envs)
        return cls(self, env_creator, config, num_envs=num_envs or 8, num_workers=num_workers, seed=seed)


ALGORITHMS: Dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            "pg",
            "rlpolicy.agents.pg.pg_torch_policy:PGTorchPolicy",
            "rlpolicy.agents.pg.pg_tf_policy:PGTFPolicy",
            "rlpolicy.agents.pg.pg:DEFAULT_CONFIG",
            "rlpolicy.cli.training:SimpleTrainer",
        ),
        Algorithm(
            "ppo",
            "rlpolicy.agents.ppo.ppo_torch_policy:PPOTorchPolicy",
            "rlpolicy.agents.ppo.ppo_tf_policy:PPOTFPolicy",
            "rlpolicy.agents.ppo.ppo:DEFAULT_CONFIG",
            "rlpolicy.cli.training:SimpleTrainer",
            minibatch_sgd=True,
        ),
        Algorithm(
            "dqn",
            "rlpolicy.agents.dqn.dqn_torch_policy:DQNTorchPolicy",
            "rlpolicy.agents.dqn.dqn_tf_policy:DQNTFPolicy",
            "rlpolicy.agents.dqn.dqn_config:DEFAULT_CONFIG",
            "rlpolicy.agents.dqn.dqn:SimpleDQNTrainer",
            uses_workers=False,
        ),
    )
}


def get_algorithm(name: str) -> Algorithm:
    """The registry entry of ``name``.

    Raises:
        ValueError: For an unknown algorithm (naming the known ones).
    """
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None


# ------------------------------------------------------------------ training defaults
#
# THE table of `rlpolicy train`'s per-algorithm and per-env defaults: settings that train
# small gymnasium problems quickly on a CPU. Keys are (algorithm, env id or None); an env's
# row goes on top of the algorithm's None row, `--config` on top of both. "num_envs" and
# "eval_every" are the defaults of --num-envs and --eval-every (LOOP_KEYS), not config keys.
# The algorithms' own DEFAULT_CONFIGs stay RLlib 1.11's.

LOOP_KEYS = ("num_envs", "eval_every")

# PPO's lr 2e-3 (was 3e-4) solves CartPole-v1 (greedy evaluation >= 475) after 62k-76k steps
# over seeds 0-4, against 146k-174k, when it is evaluated only once the training mean (last
# 100 episodes) reaches 475. That mean lags far behind the greedy policy: with 8 envs and
# episodes near 500 steps, 100 episodes span ~50k steps, and the greedy policy first scores
# >= 475 long before (seed 1: after 18k steps, against 66k by the training-mean trigger;
# a greedy evaluation every iteration, i.e. every 2000 steps, on the same training run).
# So PPO evaluates every iteration ("eval_every": 1): an evaluation of a weak policy ends
# with its short episodes, and the full 20 x 500 steps are played only near the end.
# benchmarks/bench_training.py, torch seeds 0-4: 12k/18k/6k/14k/4k steps (median 12k; by the
# training-mean trigger 104k/66k/72k on seeds 0-2, 60k-104k over 0-4, median 72k), 4.4 s of
# CPU time for the median seed (evaluations included); tf seeds 0-2: 16k/10k/26k; SB3's PPO
# with RL Zoo's CartPole settings, same rule and cadence: 24k/24k/14k/20k/14k.
_PPO_CPU = {
    "lr": 2e-3,
    "train_batch_size": 2000,
    "sgd_minibatch_size": 256,
    "num_sgd_iter": 8,
    "lambda": 0.95,
    "vf_clip_param": 1e4,
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.0,
    "rollout_fragment_length": 400,
    "model": {"fcnet_hiddens": [64, 64], "vf_share_layers": False},
}

TRAINING_DEFAULTS: Dict[Tuple[str, Optional[str]], dict] = {
    ("ppo", None): {**_PPO_CPU, "num_envs": 8, "eval_every": 1},
    # From RLlib's tuned pendulum-ppo example (gamma 0.95, lambda 0.1, lr 3e-4, minibatch 64,
    # vf_clip_param 10, relu) with a 2048-step batch and 10 epochs: seeds 0/1/2 pass a greedy
    # evaluation of -400 after 119k/94k/78k steps (scored -148/-137/-203). Its 512-step
    # batch with 6 epochs reached a training mean of -317 while the greedy policy stayed
    # near -550 (400k steps).
    ("ppo", "Pendulum-v1"): {
        "gamma": 0.95,
        "lambda": 0.1,
        "lr": 3e-4,
        "train_batch_size": 2048,
        "sgd_minibatch_size": 64,
        "num_sgd_iter": 10,
        "vf_clip_param": 10.0,
        "vf_loss_coeff": 1.0,
        "entropy_coeff": 0.0,
        "rollout_fragment_length": 2048,
        "num_envs": 16,
        "eval_every": 0,
        "model": {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu", "vf_share_layers": False},
    },
    # PG's returns-to-go are not bootstrapped: with "truncate_episodes" every cut fragment
    # ends in a return of 0, the signal fades as episodes grow, and seeds 0 and 1 peaked near
    # 450 and collapsed (185-246 after 400k steps). Whole episodes solve seeds 0, 1, 2 after
    # 189k-287k (torch), 188k-364k (tf), 203k-334k (tf2) steps (benchmarks/bench_training.py).
    ("pg", None): {
        "lr": 2e-3,
        "train_batch_size": 2000,
        "rollout_fragment_length": 400,
        "batch_mode": "complete_episodes",
        "model": {"fcnet_hiddens": [64, 64]},
        "num_envs": 8,
    },
    # DQN's own defaults solve CartPole: torch seeds 0, 1, 2 after 55k, 10k, 50k steps
    # (benchmarks/bench_training.py). Its training mean lags behind (epsilon-greedy), so it
    # is also evaluated every 5000 steps; its greedy score swings between evaluations, and
    # a run that ends unsolved keeps the best one in checkpoint_best.
    ("dqn", None): {"num_envs": 1, "eval_every": 5},
}


def training_defaults(algo: str, env: str) -> dict:
    """The CPU training defaults of ``algo`` on ``env`` (a copy; env-specific rows win),
    loop keys included."""
    from rlpolicy._core.config import merge_configs

    return merge_configs(
        copy.deepcopy(TRAINING_DEFAULTS.get((algo, None), {})),
        copy.deepcopy(TRAINING_DEFAULTS.get((algo, env), {})),
    )


def config_defaults(algo: str, env: str = "CartPole-v1") -> dict:
    """The config part of :func:`training_defaults` (without the loop keys)."""
    return {k: v for k, v in training_defaults(algo, env).items() if k not in LOOP_KEYS}


def loop_default(algo: str, env: str, key: str, fallback: Any) -> Any:
    """The default of the loop setting ``key`` (one of :data:`LOOP_KEYS`)."""
    return training_defaults(algo, env).get(key, fallback)
