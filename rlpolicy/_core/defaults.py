"""The default config dicts (RLlib 1.11's ``MODEL_DEFAULTS`` and the policy-relevant
part of the trainer's ``COMMON_CONFIG``). Public names are re-exported from
``rlpolicy.models.catalog`` and ``rlpolicy.agents.trainer``."""

from __future__ import annotations

from rlpolicy.utils.deprecation import DEPRECATED_VALUE

MODEL_DEFAULTS: dict = {
    # Internal switches kept for config compatibility.
    "_use_default_native_models": False,
    "_disable_preprocessor_api": False,
    "_disable_action_flattening": False,
    # Fully connected nets.
    "fcnet_hiddens": [256, 256],
    "fcnet_activation": "tanh",
    # Conv nets; None -> picked from the observation shape.
    "conv_filters": None,
    "conv_activation": "relu",
    # Layers after the conv/complex-input trunk.
    "post_fcnet_hiddens": [],
    "post_fcnet_activation": "relu",
    "free_log_std": False,
    "no_final_linear": False,
    "vf_share_layers": True,
    # LSTM wrapper.
    "use_lstm": False,
    "max_seq_len": 20,
    "lstm_cell_size": 256,
    "lstm_use_prev_action": False,
    "lstm_use_prev_reward": False,
    "_time_major": False,
    # Attention wrapper (GTrXL) keys; accepted, not implemented as a model.
    "use_attention": False,
    "attention_num_transformer_units": 1,
    "attention_dim": 64,
    "attention_num_heads": 1,
    "attention_head_dim": 32,
    "attention_memory_inference": 50,
    "attention_memory_training": 50,
    "attention_position_wise_mlp_dim": 32,
    "attention_init_gru_gate_bias": 2.0,
    "attention_use_n_prev_actions": 0,
    "attention_use_n_prev_rewards": 0,
    # Atari-style preprocessing.
    "framestack": True,
    "dim": 84,
    "grayscale": False,
    "zero_mean": True,
    # Custom components.
    "custom_model": None,
    "custom_model_config": {},
    "custom_action_dist": None,
    "custom_preprocessor": None,
    # Deprecated.
    "lstm_use_prev_action_reward": DEPRECATED_VALUE,
}

COMMON_CONFIG: dict = {
    # Rollout (read by samplers and postprocessing).
    "num_workers": 2,
    "num_envs_per_worker": 1,
    "rollout_fragment_length": 200,
    "batch_mode": "truncate_episodes",
    "horizon": None,
    "soft_horizon": False,
    "no_done_at_end": False,
    "env": None,
    "env_config": {},
    # Training.
    "gamma": 0.99,
    "lr": 0.0001,
    "train_batch_size": 200,
    # Not set: minibatch SGD on a loaded buffer then uses train_batch_size, as RLlib 1.11's
    # TorchPolicy does with `config.get("sgd_minibatch_size", train_batch_size)`.
    "sgd_minibatch_size": None,
    "num_sgd_iter": 1,
    "shuffle_sequences": True,
    "model": MODEL_DEFAULTS,
    "optimizer": {},
    "grad_clip": None,
    # Framework.
    "framework": "tf",
    "eager_tracing": False,
    "eager_max_retraces": 20,
    # Former rlpolicy addition, now ignored ("jit" logs a warning; docs/porting.md).
    "torch_compile_acting": False,
    # rlpolicy addition: with True, compute_actions/learn_on_batch raise a
    # ValueError on NaN/inf observations; False passes them through (RLlib).
    "_check_finite_obs": False,
    # rlpolicy addition: with True, sampling raises NonFiniteSampleError (naming the
    # env and the column) when an env returns a NaN/inf observation or reward.
    "_check_finite_samples": False,
    "tf_session_args": {
        "intra_op_parallelism_threads": 2,
        "inter_op_parallelism_threads": 2,
        "gpu_options": {"allow_growth": True},
        "log_device_placement": False,
        "device_count": {"CPU": 1},
        "allow_soft_placement": True,
    },
    "local_tf_session_args": {
        "intra_op_parallelism_threads": 8,
        "inter_op_parallelism_threads": 8,
    },
    # Exploration.
    "explore": True,
    "exploration_config": {"type": "StochasticSampling"},
    # Evaluation.
    "in_evaluation": False,
    "evaluation_interval": None,
    "evaluation_config": {},
    # Actions.
    "normalize_actions": True,
    "clip_rewards": None,
    "clip_actions": False,
    "preprocessor_pref": "deepmind",
    # Callbacks: a DefaultCallbacks subclass, or None for the default.
    "callbacks": None,
    # Devices.
    "num_gpus": 0,
    "_fake_gpus": False,
    "num_cpus_per_worker": 1,
    "num_gpus_per_worker": 0,
    "num_cpus_for_driver": 1,
    "custom_resources_per_worker": {},
    "worker_index": 0,
    "num_multi_gpu_tower_stacks": 1,
    # rlpolicy addition: True (4) or K fixed chunks per minibatch make buffered SGD
    # bitwise-reproducible across tower counts (docs/devices.md); False: RLlib's mode.
    "_deterministic_towers": False,
    # Multi-agent.
    "multiagent": {
        "policies": {},
        "policy_map_capacity": 100,
        "policy_map_cache": None,
        "policy_mapping_fn": None,
        "policies_to_train": None,
        "observation_fn": None,
        "replay_mode": "independent",
        "count_steps_by": "env_steps",
    },
    # Misc.
    "seed": None,
    "log_level": "WARN",
    "simple_optimizer": DEPRECATED_VALUE,
    "_tf_policy_handles_more_than_one_loss": False,
    "_disable_preprocessor_api": False,
    "_disable_action_flattening": False,
    "_disable_execution_plan_api": False,
    "compress_observations": False,
    "observation_filter": "NoFilter",
    "synchronize_filters": True,
    "input": "sampler",
    "output": None,
    "create_env_on_driver": False,
    "remote_worker_envs": False,
    "min_iter_time_s": 0,
}

#: RLlib 1.11 trainer-level config keys that the policy layer never reads. They are
#: known (a ported trainer config passes them without an unknown-key warning) but
#: have no default here.
TRAINER_ONLY_KEYS: frozenset = frozenset(
    {
        "observation_space",
        "action_space",
        "remote_env_batch_wait_ms",
        "env_task_fn",
        "render_env",
        "record_env",
        "ignore_worker_failures",
        "recreate_failed_workers",
        "log_sys_usage",
        "fake_sampler",
        "evaluation_duration",
        "evaluation_duration_unit",
        "evaluation_parallel_to_training",
        "evaluation_num_workers",
        "evaluation_num_episodes",
        "custom_eval_function",
        "always_attach_evaluation_results",
        "keep_per_episode_custom_metrics",
        "sample_async",
        "sample_collector",
        "metrics_episode_collection_timeout_s",
        "metrics_num_episodes_for_smoothing",
        "metrics_smoothing_episodes",
        "collect_metrics_timeout",
        "min_time_s_per_reporting",
        "min_train_timesteps_per_reporting",
        "min_sample_timesteps_per_reporting",
        "timesteps_per_iteration",
        "extra_python_environs_for_driver",
        "extra_python_environs_for_worker",
        "placement_strategy",
        "input_config",
        "actions_in_input_normalized",
        "input_evaluation",
        "postprocess_inputs",
        "shuffle_buffer_size",
        "output_config",
        "output_compress_columns",
        "output_max_file_size",
        "logger_config",
        "monitor",
    }
)

#: The keys of rlpolicy's algorithms' default configs (``agents.pg.pg``,
#: ``agents.ppo.ppo``, ``agents.dqn.dqn``) beyond ``COMMON_CONFIG``'s and the keys
#: rlpolicy validates or its mixins read: known to every policy, so an algorithm's
#: config handed to another policy raises no unknown-key warning. Kept as data here
#: (the floor imports no algorithm); tests/core/test_config.py checks it against
#: the algorithms' DEFAULT_CONFIGs.
ALGORITHM_KEYS: frozenset = frozenset(
    {
        "adam_epsilon",
        "before_learn_on_batch",
        "buffer_size",
        "clip_param",
        "double_q",
        "dueling",
        "final_prioritized_replay_beta",
        "hiddens",
        "learning_starts",
        "n_step",
        "noisy",
        "num_atoms",
        "prioritized_replay",
        "prioritized_replay_alpha",
        "prioritized_replay_beta",
        "prioritized_replay_beta_annealing_timesteps",
        "prioritized_replay_eps",
        "replay_buffer_config",
        "replay_sequence_length",
        "sigma0",
        "store_buffer_in_checkpoints",
        "target_network_update_freq",
        "training_intensity",
        "v_max",
        "v_min",
        "vf_clip_param",
        "vf_loss_coeff",
        "vf_share_layers",
        "worker_side_prioritization",
    }
)
