"""DQN on CartPole-v1: replay buffer, target network, epsilon-greedy exploration.

``SimpleDQNTrainer`` follows RLlib 1.11's DQN plan in one process: it samples
``rollout_fragment_length`` steps into a (prioritized) replay buffer, then
trains ``DQNTorchPolicy`` on ``train_batch_size`` replayed transitions, syncing
the target network every ``target_network_update_freq`` sampled steps.
Epsilon anneals from 1.0 to 0.02 over ``epsilon_timesteps``. Every few
thousand steps the greedy policy (``explore=False``) plays 10 episodes.

Run:  python examples/dqn_cartpole.py [--steps N]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does;
``rlpolicy train --algo dqn`` trains to a mean return of 475).
"""

from __future__ import annotations

import argparse
import os
import random

import gymnasium as gym
import numpy as np
import torch

from rlpolicy.agents.dqn.dqn import SimpleDQNTrainer
from rlpolicy.cli.training import evaluate_policy

CONFIG = {
    "model": {"fcnet_hiddens": [64]},
    "hiddens": [64],
    "lr": 1e-3,
    "n_step": 3,
    "learning_starts": 500,
    "target_network_update_freq": 250,
    "exploration_config": {
        "type": "EpsilonGreedy",
        "initial_epsilon": 1.0,
        "final_epsilon": 0.02,
        "epsilon_timesteps": 1500,
    },
}


def make_env():
    return gym.make("CartPole-v1")


def main():
    quick = os.environ.get("RLPOLICY_EXAMPLE_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000 if quick else 20000)
    parser.add_argument("--eval-every", type=int, default=2000 if quick else 2500)
    args = parser.parse_args()

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    trainer = SimpleDQNTrainer(make_env, CONFIG, seed=0)
    greedy = np.mean(evaluate_policy(trainer.policy, make_env, 10, seed=100))
    print(f"before training: greedy mean return={greedy:.1f}")
    next_eval = args.eval_every
    while trainer.steps_sampled < args.steps:
        trainer.step()
        if trainer.steps_sampled >= next_eval:
            next_eval += args.eval_every
            greedy = np.mean(evaluate_policy(trainer.policy, make_env, 10, seed=100))
            eps = trainer.policy.exploration.get_state()["cur_epsilon"]
            print(
                f"steps={trainer.steps_sampled} trained={trainer.steps_trained} "
                f"target_syncs={trainer.num_target_updates} epsilon={float(eps):.3f} "
                f"mean_q={trainer.learner_stats.get('mean_q', float('nan')):.2f} "
                f"greedy mean return={greedy:.1f}"
            )


if __name__ == "__main__":
    main()
