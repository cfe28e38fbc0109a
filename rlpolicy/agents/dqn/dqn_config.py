"""DQN's default config: RLlib 1.11's SimpleQ config with DQN's additions (Rainbow
options: dueling, double Q, noisy nets, n-step, distributional, prioritized replay),
restricted to what a policy and a local training loop use.

A leaf module: the DQN policies, ``dqn.py`` (which re-exports it at RLlib's path
``rlpolicy.agents.dqn.dqn.DEFAULT_CONFIG``) and the command line import it from here.
"""

from __future__ import annotations

from rlpolicy.agents.trainer import with_common_config
from rlpolicy.utils.deprecation import DEPRECATED_VALUE

DEFAULT_CONFIG: dict = with_common_config(
    {
        # === Model ===
        "num_atoms": 1,  # > 1: distributional Q-learning (C51)
        "v_min": -10.0,  # support of the return distribution
        "v_max": 10.0,
        "noisy": False,  # noisy nets in the Q heads
        "sigma0": 0.5,  # initial noise scale of the noisy nets
        "dueling": True,  # dueling architecture (V + centred A)
        "hiddens": [256],  # hidden layers of the Q heads
        "double_q": True,  # double Q-learning targets
        "n_step": 1,  # n-step Q-learning
        # === Exploration ===
        "exploration_config": {
            "type": "EpsilonGreedy",
            "initial_epsilon": 1.0,
            "final_epsilon": 0.02,
            "epsilon_timesteps": 10000,
        },
        "evaluation_config": {"explore": False},
        "timesteps_per_iteration": 1000,
        "target_network_update_freq": 500,  # sampled steps between target syncs
        # === Replay buffer ===
        "buffer_size": DEPRECATED_VALUE,
        "replay_buffer_config": {"type": "MultiAgentReplayBuffer", "capacity": 50000},
        "replay_sequence_length": 1,
        "store_buffer_in_checkpoints": False,
        "prioritized_replay": True,
        "prioritized_replay_alpha": 0.6,
        "prioritized_replay_beta": 0.4,
        "final_prioritized_replay_beta": 0.4,
        "prioritized_replay_beta_annealing_timesteps": 20000,
        "prioritized_replay_eps": 1e-6,
        "compress_observations": False,
        "training_intensity": None,  # None: one train step per sample step
        # === Optimization ===
        "lr": 5e-4,
        "lr_schedule": None,
        "adam_epsilon": 1e-8,
        "grad_clip": 40,
        "learning_starts": 1000,
        "rollout_fragment_length": 4,
        "train_batch_size": 32,
        # === Parallelism ===
        "num_workers": 0,
        "worker_side_prioritization": False,
        "min_time_s_per_reporting": 1,
        "before_learn_on_batch": None,
    }
)
