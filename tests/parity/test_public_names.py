"""Public names live at RLlib 1.11's module paths with `ray.rllib` replaced by `rlpolicy`
(../shared/DESIGN.md §1), for the parts built so far."""

import importlib

import pytest

PUBLIC = {
    "rlpolicy.policy.policy": ["Policy", "PolicySpec"],
    "rlpolicy.policy.torch_policy": ["TorchPolicy"],
    "rlpolicy.policy.policy_template": ["build_policy_class"],
    "rlpolicy.policy.sample_batch": ["SampleBatch", "MultiAgentBatch", "concat_samples", "DEFAULT_POLICY_ID"],
    "rlpolicy.policy.view_requirement": ["ViewRequirement"],
    "rlpolicy.policy.rnn_sequencing": [
        "pad_batch_to_sequences_of_same_size",
        "chop_into_sequences",
        "add_time_dimension",
    ],
    "rlpolicy.policy.tf_policy": ["TFPolicy", "LearningRateSchedule", "EntropyCoeffSchedule"],
    "rlpolicy.policy.dynamic_tf_policy": ["DynamicTFPolicy"],
    "rlpolicy.policy.eager_tf_policy": ["build_eager_tf_policy"],
    "rlpolicy.policy.tf_policy_template": ["build_tf_policy"],
    "rlpolicy.policy.tf_mixins": [
        "LearningRateSchedule",
        "EntropyCoeffSchedule",
        "KLCoeffMixin",
        "ValueNetworkMixin",
        "TargetNetworkMixin",
    ],
    "rlpolicy.execution.multi_gpu_impl": ["TFMultiGPUTowerStack"],
    "rlpolicy.agents.pg.pg_tf_policy": ["PGTFPolicy"],
    "rlpolicy.agents.ppo.ppo_tf_policy": ["PPOTFPolicy", "KLCoeffMixin", "ValueNetworkMixin"],
    "rlpolicy.models.tf.layers": [
        "NoisyLayer",
        "GRUGate",
        "RelativeMultiHeadAttention",
        "SkipConnection",
        "MultiHeadAttention",
    ],
    "rlpolicy.models.torch.modules.noisy_layer": ["NoisyLayer"],
    "rlpolicy.agents.dqn": ["DEFAULT_CONFIG", "DQNTorchPolicy", "DQNTFPolicy"],
    "rlpolicy.agents.dqn.dqn_torch_policy": ["DQNTorchPolicy"],
    "rlpolicy.agents.dqn.dqn_torch_model": ["DQNTorchModel"],
    "rlpolicy.agents.dqn.dqn_tf_policy": ["DQNTFPolicy"],
    "rlpolicy.agents.dqn.distributional_q_tf_model": ["DistributionalQTFModel"],
    "rlpolicy.execution.replay_buffer": ["ReplayBuffer", "PrioritizedReplayBuffer"],
    "rlpolicy.execution.segment_tree": ["SumSegmentTree", "MinSegmentTree"],
    "rlpolicy.utils.exploration.parameter_noise": ["ParameterNoise"],
    "rlpolicy.utils.spaces.simplex": ["Simplex"],
    "rlpolicy.utils.error": ["UnsupportedSpaceException"],
    "rlpolicy.policy.torch_mixins": [
        "LearningRateSchedule",
        "EntropyCoeffSchedule",
        "KLCoeffMixin",
        "ValueNetworkMixin",
        "TargetNetworkMixin",
    ],
    "rlpolicy.models.modelv2": ["ModelV2", "restore_original_dimensions", "flatten"],
    "rlpolicy.models.catalog": ["ModelCatalog", "MODEL_DEFAULTS"],
    "rlpolicy.models.action_dist": ["ActionDistribution"],
    "rlpolicy.models.preprocessors": [
        "get_preprocessor",
        "Preprocessor",
        "NoPreprocessor",
        "OneHotPreprocessor",
        "DictFlatteningPreprocessor",
        "TupleFlatteningPreprocessor",
    ],
    "rlpolicy.models.torch.torch_modelv2": ["TorchModelV2"],
    "rlpolicy.models.torch.fcnet": ["FullyConnectedNetwork"],
    "rlpolicy.models.torch.recurrent_net": ["RecurrentNetwork", "LSTMWrapper"],
    "rlpolicy.models.torch.visionnet": ["VisionNetwork"],
    "rlpolicy.models.torch.complex_input_net": ["ComplexInputNetwork"],
    "rlpolicy.models.torch.torch_action_dist": [
        "TorchDistributionWrapper",
        "TorchCategorical",
        "TorchMultiCategorical",
        "TorchDiagGaussian",
        "TorchSquashedGaussian",
        "TorchBeta",
        "TorchDeterministic",
        "TorchDirichlet",
        "TorchMultiActionDistribution",
    ],
    "rlpolicy.models.tf.tf_modelv2": ["TFModelV2"],
    "rlpolicy.models.tf.fcnet": ["FullyConnectedNetwork"],
    "rlpolicy.models.tf.recurrent_net": ["RecurrentNetwork", "LSTMWrapper"],
    "rlpolicy.models.tf.visionnet": ["VisionNetwork"],
    "rlpolicy.models.tf.complex_input_net": ["ComplexInputNetwork"],
    "rlpolicy.models.tf.tf_action_dist": [
        "TFActionDistribution",
        "Categorical",
        "MultiCategorical",
        "DiagGaussian",
        "SquashedGaussian",
        "Beta",
        "Deterministic",
        "Dirichlet",
        "MultiActionDistribution",
    ],
    "rlpolicy.utils.exploration": [
        "Exploration",
        "StochasticSampling",
        "EpsilonGreedy",
        "Random",
        "GaussianNoise",
        "OrnsteinUhlenbeckNoise",
        "PerWorkerEpsilonGreedy",
        "ParameterNoise",
    ],
    "rlpolicy.utils.annotations": [
        "override",
        "DeveloperAPI",
        "PublicAPI",
        "ExperimentalAPI",
        "OverrideToImplementCustomLogic",
    ],
    "rlpolicy.utils.framework": ["try_import_torch", "try_import_tf"],
    "rlpolicy.utils": ["force_list", "add_mixins", "NullContextManager", "override"],
    "rlpolicy.utils.deprecation": ["deprecation_warning", "DEPRECATED_VALUE"],
    "rlpolicy.utils.numpy": [
        "convert_to_numpy",
        "make_action_immutable",
        "one_hot",
        "fc",
        "lstm",
        "sigmoid",
        "softmax",
        "huber_loss",
        "l2_loss",
    ],
    "rlpolicy.utils.torch_utils": [
        "convert_to_torch_tensor",
        "convert_to_non_torch_type",
        "explained_variance",
        "global_norm",
        "huber_loss",
        "sequence_mask",
        "apply_grad_clipping",
    ],
    "rlpolicy.utils.tf_utils": [
        "get_gpu_devices",
        "make_tf_callable",
        "get_placeholder",
        "explained_variance",
        "huber_loss",
    ],
    "rlpolicy.utils.tf_run_builder": ["TFRunBuilder"],
    "rlpolicy.utils.spaces.space_utils": [
        "get_base_struct_from_space",
        "flatten_space",
        "unbatch",
        "normalize_action",
        "unsquash_action",
        "clip_action",
    ],
    "rlpolicy.utils.schedules": [
        "ConstantSchedule",
        "LinearSchedule",
        "PiecewiseSchedule",
        "ExponentialSchedule",
        "PolynomialSchedule",
    ],
    "rlpolicy.utils.typing": [
        "TensorType",
        "TensorStructType",
        "ModelWeights",
        "ModelGradients",
        "TrainerConfigDict",
    ],
    "rlpolicy.utils.metrics.learner_info": ["LEARNER_STATS_KEY"],
    "rlpolicy.evaluation.postprocessing": [
        "compute_advantages",
        "compute_gae_for_sample_batch",
        "Postprocessing",
        "discount_cumsum",
        "adjust_nstep",
    ],
    "rlpolicy.evaluation.episode": ["Episode"],
    "rlpolicy.agents.callbacks": ["DefaultCallbacks", "MultiCallbacks"],
    "rlpolicy.agents.trainer": ["COMMON_CONFIG", "with_common_config"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_exist(module):
    if ".torch" in module or module.endswith("torch_policy") or module.endswith("torch_mixins"):
        pytest.importorskip("torch")
    if ".tf." in module:
        pytest.importorskip("tensorflow")
    mod = importlib.import_module(module)
    missing = [n for n in PUBLIC[module] if not hasattr(mod, n)]
    assert not missing, f"{module} lacks {missing}"


def test_top_level_reexports():
    import rlpolicy

    for name in ["Policy", "SampleBatch", "ViewRequirement", "ModelCatalog", "COMMON_CONFIG"]:
        assert getattr(rlpolicy, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = rlpolicy.Nope
