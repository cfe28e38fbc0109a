"""Names 1.x client code imports, at their RLlib 1.11 paths (``ray.rllib`` -> ``rlpolicy``).

Each list is written out from RLlib 1.11's modules: the names the module defines plus the
RLlib names it imports at the top (1.x code often imports those from there, e.g. the torch
mixins from ``policy.torch_policy`` or ``TensorType`` from ``utils.framework``). Left out:
standard-library and typing names, ``ray`` itself, Ray-internal helpers (``log_once`` from
``ray.util.debug``), JAX (``JAXModelV2``, ``jax``) and ``BaseEnv`` / ``MultiAgentEnvWrapper``
(Ray's sampler env abstraction).
"""

import importlib
import warnings

import pytest

NAMES = {
    "rlpolicy.policy.torch_policy": [
        "TorchPolicy",
        "LearningRateSchedule",
        "EntropyCoeffSchedule",
        "DirectStepOptimizer",
        "ModelCatalog",
        "ModelV2",
        "TorchDistributionWrapper",
        "TorchModelV2",
        "Policy",
        "pad_batch_to_sequences_of_same_size",
        "SampleBatch",
        "force_list",
        "NullContextManager",
        "DeveloperAPI",
        "override",
        "try_import_torch",
        "LEARNER_STATS_KEY",
        "convert_to_numpy",
        "PiecewiseSchedule",
        "normalize_action",
        "with_lock",
        "convert_to_torch_tensor",
        "GradInfoDict",
        "ModelGradients",
        "ModelWeights",
        "TensorType",
        "TensorStructType",
        "TrainerConfigDict",
        "torch",
        "nn",
    ],
    "rlpolicy.policy.tf_policy": [
        "TFPolicy",
        "LearningRateSchedule",
        "EntropyCoeffSchedule",
        "Policy",
        "pad_batch_to_sequences_of_same_size",
        "SampleBatch",
        "ModelV2",
        "force_list",
        "DeveloperAPI",
        "override",
        "summarize",
        "Deprecated",
        "deprecation_warning",
        "try_import_tf",
        "get_variable",
        "LEARNER_STATS_KEY",
        "PiecewiseSchedule",
        "normalize_action",
        "get_gpu_devices",
        "TFRunBuilder",
        "LocalOptimizer",
        "ModelGradients",
        "TensorType",
        "TrainerConfigDict",
        "tf1",
        "tf",
        "tfv",
    ],
    "rlpolicy.policy.policy": [
        "Policy",
        "PolicySpec",
        "ActionDistribution",
        "ModelCatalog",
        "ModelV2",
        "SampleBatch",
        "ViewRequirement",
        "DeveloperAPI",
        "ExperimentalAPI",
        "OverrideToImplementCustomLogic",
        "Deprecated",
        "Exploration",
        "try_import_tf",
        "try_import_torch",
        "from_config",
        "get_base_struct_from_space",
        "get_dummy_batch_for_space",
        "unbatch",
        "AgentID",
        "ModelGradients",
        "ModelWeights",
        "T",
        "TensorType",
        "TensorStructType",
        "TrainerConfigDict",
        "Box",
        "tf1",
        "tf",
        "tfv",
        "torch",
    ],
    "rlpolicy.policy.policy_template": [
        "build_policy_class",
        "ModelCatalog",
        "ModelV2",
        "TorchDistributionWrapper",
        "TorchModelV2",
        "Policy",
        "SampleBatch",
        "TorchPolicy",
        "add_mixins",
        "NullContextManager",
        "override",
        "DeveloperAPI",
        "try_import_torch",
        "try_import_jax",
        "LEARNER_STATS_KEY",
        "convert_to_numpy",
        "ModelGradients",
        "TensorType",
        "TrainerConfigDict",
        "torch",
    ],
    "rlpolicy.policy.tf_policy_template": [
        "build_tf_policy",
        "TFActionDistribution",
        "ModelV2",
        "DynamicTFPolicy",
        "eager_tf_policy",
        "Policy",
        "SampleBatch",
        "TFPolicy",
        "add_mixins",
        "force_list",
        "override",
        "DeveloperAPI",
        "deprecation_warning",
        "DEPRECATED_VALUE",
        "try_import_tf",
        "LEARNER_STATS_KEY",
        "AgentID",
        "ModelGradients",
        "TensorType",
        "TrainerConfigDict",
        "tf1",
        "tf",
        "tfv",
    ],
    "rlpolicy.policy.torch_policy_template": [
        "build_torch_policy",
        "ModelV2",
        "TorchDistributionWrapper",
        "Policy",
        "build_policy_class",
        "SampleBatch",
        "TorchPolicy",
        "Deprecated",
        "try_import_torch",
        "ModelGradients",
        "TensorType",
        "TrainerConfigDict",
        "torch",
    ],
    "rlpolicy.policy.sample_batch": [
        "SampleBatch",
        "MultiAgentBatch",
        "DEFAULT_POLICY_ID",
        "DeveloperAPI",
        "ExperimentalAPI",
        "PublicAPI",
        "pack",
        "unpack",
        "is_compressed",
        "Deprecated",
        "deprecation_warning",
        "try_import_tf",
        "try_import_torch",
        "concat_aligned",
        "PolicyID",
        "TensorType",
        "ViewRequirementsDict",
        "tf1",
        "tf",
        "tfv",
        "torch",
    ],
    "rlpolicy.utils.framework": [
        "try_import_jax",
        "try_import_tf",
        "tf_function",
        "try_import_tfp",
        "NNStub",
        "ModuleStub",
        "try_import_torch",
        "get_variable",
        "get_activation_fn",
        "Deprecated",
        "TensorShape",
        "TensorType",
    ],
    "rlpolicy.utils": [
        "override",
        "PublicAPI",
        "DeveloperAPI",
        "try_import_tf",
        "try_import_tfp",
        "try_import_torch",
        "deprecation_warning",
        "FilterManager",
        "Filter",
        "check_env",
        "sigmoid",
        "softmax",
        "relu",
        "one_hot",
        "fc",
        "lstm",
        "SMALL_NUMBER",
        "LARGE_INTEGER",
        "MIN_LOG_NN_OUTPUT",
        "MAX_LOG_NN_OUTPUT",
        "LinearSchedule",
        "PiecewiseSchedule",
        "PolynomialSchedule",
        "ExponentialSchedule",
        "ConstantSchedule",
        "check",
        "check_compute_single_action",
        "check_train_results",
        "framework_iterator",
        "merge_dicts",
        "deep_update",
        "add_mixins",
        "force_list",
        "NullContextManager",
        "force_tuple",
    ],
    "rlpolicy.utils.annotations": [
        "override",
        "PublicAPI",
        "DeveloperAPI",
        "ExperimentalAPI",
        "OverrideToImplementCustomLogic",
        "OverrideToImplementCustomLogic_CallToSuperRecommended",
        "Deprecated",
    ],
    "rlpolicy.utils.typing": [
        "TensorType",
        "TensorStructType",
        "TensorShape",
        "TrainerConfigDict",
        "PartialTrainerConfigDict",
        "ModelConfigDict",
        "FromConfigSpec",
        "EnvConfigDict",
        "EnvID",
        "EnvType",
        "EnvCreator",
        "AgentID",
        "PolicyID",
        "MultiAgentPolicyConfigDict",
        "PolicyState",
        "EpisodeID",
        "UnrollID",
        "MultiAgentDict",
        "MultiEnvDict",
        "EnvObsType",
        "EnvActionType",
        "EnvInfoDict",
        "FileType",
        "ViewRequirementsDict",
        "ResultDict",
        "LocalOptimizer",
        "GradInfoDict",
        "LearnerStatsDict",
        "ModelGradients",
        "ModelWeights",
        "ModelInputDict",
        "SampleBatchType",
        "SpaceStruct",
        "T",
    ],
    "rlpolicy.utils.from_config": ["from_config", "from_file", "lookup_type", "force_list", "merge_dicts"],
    "rlpolicy.utils.compression": [
        "compression_supported",
        "pack",
        "pack_if_needed",
        "unpack",
        "unpack_if_needed",
        "is_compressed",
        "LZ4_ENABLED",
        "DeveloperAPI",
    ],
    "rlpolicy.env.multi_agent_env": [
        "ENV_STATE",
        "MultiAgentEnv",
        "make_multi_agent",
        "ExperimentalAPI",
        "override",
        "PublicAPI",
        "DeveloperAPI",
        "AgentID",
        "EnvCreator",
        "EnvID",
        "EnvType",
        "MultiAgentDict",
        "MultiEnvDict",
    ],
    "rlpolicy.evaluation.postprocessing": ["adjust_nstep"],
    "rlpolicy.utils.filter": [
        "Filter",
        "NoFilter",
        "MeanStdFilter",
        "ConcurrentMeanStdFilter",
        "RunningStat",
        "get_filter",
    ],
    "rlpolicy.utils.filter_manager": ["FilterManager"],
    "rlpolicy.evaluation.rollout_worker": ["RolloutWorker", "get_global_worker"],
    "rlpolicy.evaluation.sample_batch_builder": [
        "SampleBatchBuilder",
        "MultiAgentSampleBatchBuilder",
        "to_float_array",
    ],
    "rlpolicy.evaluation": [
        "RolloutWorker",
        "WorkerSet",
        "SampleBatchBuilder",
        "MultiAgentSampleBatchBuilder",
        "Episode",
        "MultiAgentEpisode",
    ],
    "rlpolicy.utils.debug": ["summarize", "update_global_seed_if_necessary"],
    "rlpolicy.utils.pre_checks.env": [
        "check_env",
        "check_gym_environments",
        "check_multiagent_environments",
        "EnvType",
    ],
}

# The deprecated alias modules: every public torch_utils / tf_utils name, with a warning.
ALIASES = {
    "rlpolicy.utils.torch_ops": (
        "rlpolicy.utils.torch_utils",
        [
            "convert_to_torch_tensor",
            "explained_variance",
            "huber_loss",
            "sequence_mask",
            "global_norm",
            "apply_grad_clipping",
        ],
    ),
    "rlpolicy.utils.tf_ops": (
        "rlpolicy.utils.tf_utils",
        ["explained_variance", "huber_loss", "get_placeholder", "make_tf_callable", "minimize_and_clip"],
    ),
}


def _needs(module):
    if "torch" in module or module == "rlpolicy.policy.policy_template":
        pytest.importorskip("torch")
    if "tf_" in module.rsplit(".", 1)[-1]:
        pytest.importorskip("tensorflow")


@pytest.mark.parametrize("module", sorted(NAMES))
def test_rllib111_names_importable(module):
    _needs(module)
    mod = importlib.import_module(module)
    missing = [n for n in NAMES[module] if not hasattr(mod, n)]
    assert not missing, f"{module} lacks {missing}"
    for name in NAMES[module]:  # `from X import name`, as client code writes it
        namespace = {}
        exec(f"from {module} import {name}", namespace)
        assert namespace[name] is getattr(mod, name)


def test_unknown_name_is_attribute_error():
    mod = importlib.import_module("rlpolicy.policy.sample_batch")
    with pytest.raises(AttributeError, match="'rlpolicy.policy.sample_batch' has no attribute 'Nope'"):
        _ = mod.Nope
    with pytest.raises(ImportError, match="Nope"):
        exec("from rlpolicy.utils import Nope", {})


def test_reexports_are_the_same_objects():
    from rlpolicy.env.multi_agent_env import ENV_STATE
    from rlpolicy.policy import sample_batch, tf_policy_template
    from rlpolicy.utils import compression, framework, schedules, typing

    assert ENV_STATE == "state"  # RLlib 1.11's value (QMIX's key for the global state)
    assert sample_batch.pack is compression.pack and sample_batch.PolicyID is typing.PolicyID
    assert framework.TensorType is typing.TensorType
    assert framework.TensorShape is typing.TensorShape
    import rlpolicy.utils as utils

    assert utils.PiecewiseSchedule is schedules.PiecewiseSchedule
    tf = pytest.importorskip("tensorflow")
    assert tf_policy_template.tf is tf and tf_policy_template.tf1 is tf.compat.v1
    assert tf_policy_template.tfv == 2
    from rlpolicy.policy.eager_tf_policy import build_eager_tf_policy

    assert tf_policy_template.eager_tf_policy.build_eager_tf_policy is build_eager_tf_policy


def test_torch_mixins_same_classes_at_both_paths():
    pytest.importorskip("torch")
    from rlpolicy.policy import torch_mixins, torch_policy

    assert torch_policy.LearningRateSchedule is torch_mixins.LearningRateSchedule
    assert torch_policy.EntropyCoeffSchedule is torch_mixins.EntropyCoeffSchedule


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_deprecated_ops_modules(alias):
    target, names = ALIASES[alias]
    _needs(target)
    import sys

    sys.modules.pop(alias, None)  # the warning comes with the (first) import
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(alias)
    assert any(issubclass(w.category, DeprecationWarning) and target in str(w.message) for w in caught)
    real = importlib.import_module(target)
    for name in names:
        assert getattr(mod, name) is getattr(real, name)


def test_framework_stubs():
    from rlpolicy.utils.framework import ModuleStub, NNStub

    nn = NNStub()
    assert nn.functional is None and nn.Module is ModuleStub

    class Net(nn.Module):  # a torch-less module can still define its torch classes
        pass

    with pytest.raises(ImportError, match="torch"):
        Net()


def test_tf_function_decorator_is_identity_without_tf_or_when_eager():
    from rlpolicy.utils.framework import tf_function

    def f(x):
        return x + 1

    assert tf_function(None)(f) is f
    tf = pytest.importorskip("tensorflow")
    if tf.executing_eagerly():
        assert tf_function(tf)(f) is f
    with tf.Graph().as_default():  # graph building: wrapped into a tf.function
        wrapped = tf_function(tf)(f)
        assert wrapped is not f and hasattr(wrapped, "get_concrete_function")


def test_deprecated_get_activation_fn_forwards():
    pytest.importorskip("torch")
    import torch.nn as nn

    from rlpolicy.utils.framework import get_activation_fn

    with pytest.warns(DeprecationWarning, match="models.utils.get_activation_fn"):
        assert get_activation_fn("relu", framework="torch") is nn.ReLU
    with pytest.warns(DeprecationWarning):
        assert get_activation_fn("linear", framework="torch") is None
