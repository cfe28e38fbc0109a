"""Policy.from_checkpoint(dir) rebuilds the policy that saved, whatever made its class.

1.x-style client code: hand-written Policy subclasses that build their model with
``ModelCatalog.get_model_v2`` from the partial ``config["model"]`` they were given,
factory-built classes (``build_policy_class``, ``build_tf_policy``, ``.as_eager()``
with and without tracing, ``with_updates`` at module level and inside a function),
and the shipped PG/PPO/DQN policies. Each is trained one step, saved, restored
with ``Policy.from_checkpoint`` and compared with the original: greedy actions,
every weight, and the result of the next ``learn_on_batch`` on the same batch
(which also needs the optimizer state back).
"""

import json
import logging

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.agents.dqn.dqn_tf_policy import DQNTFPolicy
from rlpolicy.agents.dqn.dqn_torch_policy import DQNTorchPolicy
from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy
from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy
from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy
from rlpolicy.evaluation.postprocessing import Postprocessing, compute_advantages
from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy
from rlpolicy.policy.policy import Policy
from rlpolicy.policy.policy_template import build_policy_class
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.tf_policy_template import build_tf_policy
from rlpolicy.policy.torch_policy import TorchPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
# A partial model config: fcnet_hiddens given, the rest (activation, vf_share_layers...)
# comes from MODEL_DEFAULTS only where the policy completes it.
USER_CONFIG = {"lr": 0.01, "seed": 1, "model": {"fcnet_hiddens": [8]}}


def reinforce_postprocess(policy, batch, other_agent_batches=None, episode=None):
    return compute_advantages(batch, 0.0, 0.9, use_gae=False, use_critic=False)


def torch_pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    return -(logp * train_batch[Postprocessing.ADVANTAGES]).mean()


def tf_pg_loss(policy, model, dist_class, train_batch):
    import tensorflow as tf

    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    return -tf.reduce_mean(logp * train_batch[Postprocessing.ADVANTAGES])


# ---------------------------------------------------------------- 1.x-style classes
class GivenModelTorchPolicy(TorchPolicy):
    """Builds its model from the config dict it gets, as much 1.x code does."""

    def __init__(self, observation_space, action_space, config):
        dist_class, num_outputs = ModelCatalog.get_action_dist(
            action_space, config["model"], framework="torch"
        )
        model = ModelCatalog.get_model_v2(
            observation_space,
            action_space,
            num_outputs,
            config["model"],
            framework="torch",
            name="given_model",
        )
        super().__init__(
            observation_space, action_space, config, model=model, action_distribution_class=dist_class
        )

    def loss(self, model, dist_class, train_batch):
        return torch_pg_loss(self, model, dist_class, train_batch)

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        return reinforce_postprocess(self, sample_batch)


class GivenModelTFPolicy(DynamicTFPolicy):
    """A DynamicTFPolicy whose make_model reads the partial model config it was given."""

    def __init__(self, obs_space, action_space, config):
        given_model = dict(config["model"])

        def make_model(policy, obs_space, action_space, _full_config):
            _, num_outputs = ModelCatalog.get_action_dist(action_space, given_model, framework="tf")
            return ModelCatalog.get_model_v2(
                obs_space, action_space, num_outputs, given_model, framework="tf", name="given_model"
            )

        super().__init__(obs_space, action_space, config, tf_pg_loss, make_model=make_model)

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        return reinforce_postprocess(self, sample_batch)


def model_from_given_config(policy, obs_space, action_space, config):
    # The model options the constructor was given (stashed by the subclass below).
    given = policy.given_model_config
    _, num_outputs = ModelCatalog.get_action_dist(action_space, given, framework=config["framework"])
    return ModelCatalog.get_model_v2(
        obs_space, action_space, num_outputs, given, framework=config["framework"], name="given_model"
    )


MyTorchPolicy = build_policy_class(
    "MyTorchPolicy", "torch", loss_fn=torch_pg_loss, postprocess_fn=reinforce_postprocess
)
RenamedTorchPolicy = MyTorchPolicy.with_updates(name="SomeOtherName")  # importable as this module's global
MyTFPolicy = build_tf_policy("MyTFPolicy", loss_fn=tf_pg_loss, postprocess_fn=reinforce_postprocess)
GivenModelBase = build_tf_policy(
    "GivenModelBase",
    loss_fn=tf_pg_loss,
    postprocess_fn=reinforce_postprocess,
    make_model=model_from_given_config,
)


class GivenModelEagerPolicy(GivenModelBase.as_eager()):
    def __init__(self, obs_space, action_space, config):
        self.given_model_config = dict(config["model"])
        super().__init__(obs_space, action_space, config)


def _local_with_updates(base):
    # A class made inside a function: no import path, rebuilt from its recipe.
    return base.with_updates(name=base.__name__ + "Local", postprocess_fn=reinforce_postprocess)


def _built_in_function(framework):
    # A factory called inside a function: rebuilt by calling the factory again.
    if framework == "torch":
        return build_policy_class(
            "InFunctionTorch", "torch", loss_fn=torch_pg_loss, postprocess_fn=reinforce_postprocess
        )
    return build_tf_policy("InFunctionTF", loss_fn=tf_pg_loss, postprocess_fn=reinforce_postprocess)


CASES = {
    # torch
    "torch-subclass": lambda: (GivenModelTorchPolicy, {}),
    "torch-build_policy_class": lambda: (MyTorchPolicy, {}),
    "torch-with_updates-module": lambda: (RenamedTorchPolicy, {}),
    "torch-with_updates-local": lambda: (_local_with_updates(MyTorchPolicy), {}),
    "torch-factory-in-function": lambda: (_built_in_function("torch"), {}),
    "torch-PG": lambda: (PGTorchPolicy, {}),
    "torch-PPO": lambda: (
        PPOTorchPolicy,
        {"num_sgd_iter": 1, "sgd_minibatch_size": 8, "train_batch_size": 8},
    ),
    "torch-DQN": lambda: (DQNTorchPolicy, {}),
    # tf (graph mode)
    "tf-subclass": lambda: (GivenModelTFPolicy, {"framework": "tf"}),
    "tf-build_tf_policy": lambda: (MyTFPolicy, {"framework": "tf"}),
    "tf-with_updates-local": lambda: (_local_with_updates(MyTFPolicy), {"framework": "tf"}),
    "tf-PG": lambda: (PGTFPolicy, {"framework": "tf"}),
    "tf-PPO": lambda: (
        PPOTFPolicy,
        {"framework": "tf", "num_sgd_iter": 1, "sgd_minibatch_size": 8, "train_batch_size": 8},
    ),
    "tf-DQN": lambda: (DQNTFPolicy, {"framework": "tf"}),
    # tf2 (eager)
    "tf2-subclass": lambda: (GivenModelEagerPolicy, {"framework": "tf2"}),
    "tf2-as_eager": lambda: (MyTFPolicy.as_eager(), {"framework": "tf2"}),
    "tf2-as_eager-traced": lambda: (MyTFPolicy.as_eager(), {"framework": "tf2", "eager_tracing": True}),
    "tf2-with_tracing": lambda: (MyTFPolicy.as_eager().with_tracing(), {"framework": "tf2"}),
    "tf2-with_updates-as_eager": lambda: (_local_with_updates(MyTFPolicy).as_eager(), {"framework": "tf2"}),
    "tf2-as_eager-of-factory-in-function": lambda: (
        _built_in_function("tf").as_eager(),
        {"framework": "tf2"},
    ),
    "tf2-PG": lambda: (PGTFPolicy.as_eager(), {"framework": "tf2"}),
    "tf2-PPO-traced": lambda: (
        PPOTFPolicy.as_eager(),
        {
            "framework": "tf2",
            "eager_tracing": True,
            "num_sgd_iter": 1,
            "sgd_minibatch_size": 8,
            "train_batch_size": 8,
        },
    ),
    "tf2-DQN": lambda: (DQNTFPolicy.as_eager(), {"framework": "tf2"}),
}


def _episode(policy, n=8, seed=0):
    """One finished episode of ``n`` steps, acted by ``policy`` and postprocessed."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n + 1, 3)).astype(np.float32)
    actions, _, extra = policy.compute_actions(obs[:-1], explore=True)
    batch = SampleBatch(
        {
            SampleBatch.OBS: obs[:-1],
            SampleBatch.NEXT_OBS: obs[1:],
            SampleBatch.ACTIONS: np.asarray(actions),
            SampleBatch.REWARDS: rng.normal(size=n).astype(np.float32),
            SampleBatch.TERMINATEDS: np.arange(n) == n - 1,
            SampleBatch.TRUNCATEDS: np.zeros(n, bool),
            SampleBatch.EPS_ID: np.zeros(n, np.int64),
            SampleBatch.T: np.arange(n),
            SampleBatch.AGENT_INDEX: np.zeros(n, np.int64),
            **{k: np.asarray(v) for k, v in extra.items()},
        }
    )
    return policy.postprocess_trajectory(batch)


def _numbers(result, prefix=""):
    """{dotted key: float} of every numeric leaf of a learn_on_batch result."""
    out = {}
    for k, v in result.items():
        if isinstance(v, dict):
            out.update(_numbers(v, f"{prefix}{k}."))
        elif np.asarray(v).dtype.kind in "fiub" and np.asarray(v).size:
            out[prefix + k] = np.asarray(v, np.float64)
    return out


def _flat_weights(policy):
    w = policy.get_weights()
    items = w.items() if isinstance(w, dict) else enumerate(w)
    return {str(k): np.asarray(v) for k, v in items}


@pytest.mark.tf
@pytest.mark.parametrize("case", list(CASES))
def test_policy_from_checkpoint_restores_the_same_policy(case, tmp_path):
    if case.startswith("torch"):
        pytest.importorskip("torch")
    else:
        pytest.importorskip("tensorflow")
    cls, extra = CASES[case]()
    original = cls(OBS, ACT, {**USER_CONFIG, **extra})
    original.learn_on_batch(_episode(original, seed=1))  # non-trivial weights and optimizer state
    original.global_timestep = 77
    if hasattr(original, "update_target"):
        # As in RLlib 1.11, the target net is not part of the state: set_weights syncs it
        # from the restored model. Synced here too, the two policies learn alike.
        original.update_target()
    original.export_checkpoint(str(tmp_path))

    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert type(restored).__name__ == cls.__name__
    assert restored._hooks.as_kwargs() == cls._hooks.as_kwargs() if hasattr(cls, "_hooks") else True
    assert restored.global_timestep == 77
    assert restored.config["eager_tracing"] == original.config["eager_tracing"]
    w_orig, w_rest = _flat_weights(original), _flat_weights(restored)
    assert w_orig.keys() == w_rest.keys() and w_orig
    for k in w_orig:
        np.testing.assert_allclose(w_rest[k], w_orig[k], atol=1e-6, err_msg=k)

    obs = np.random.default_rng(5).uniform(-1, 1, (6, 3)).astype(np.float32)
    a_orig = original.compute_actions(obs, explore=False)[0]
    a_rest = restored.compute_actions(obs, explore=False)[0]
    np.testing.assert_array_equal(np.asarray(a_rest), np.asarray(a_orig))

    batch = _episode(original, seed=2)
    r_orig = _numbers(original.learn_on_batch(batch.copy()))
    r_rest = _numbers(restored.learn_on_batch(batch.copy()))
    assert r_orig.keys() == r_rest.keys()
    for k in r_orig:
        np.testing.assert_allclose(r_rest[k], r_orig[k], rtol=1e-4, atol=1e-5, err_msg=k)
    for k, v in _flat_weights(original).items():  # the same update from the same state
        np.testing.assert_allclose(_flat_weights(restored)[k], v, atol=1e-5, err_msg=k)


def test_partial_model_config_is_what_the_constructor_gets_back(tmp_path):
    pytest.importorskip("torch")
    policy = GivenModelTorchPolicy(OBS, ACT, USER_CONFIG)
    policy.export_checkpoint(str(tmp_path))
    meta = json.loads((tmp_path / "rlpolicy_checkpoint.json").read_text())
    assert meta["given_config"]["model"] == {"fcnet_hiddens": [8]}
    assert meta["config"]["model"]["fcnet_hiddens"] == [8]
    assert len(meta["config"]["model"]) > 10  # the completed one, kept for reading
    restored = Policy.from_checkpoint(str(tmp_path), config_overrides={"lr": 0.5}, trusted="imported")
    assert restored.config["lr"] == 0.5
    # Built from the partial dict again: the model has the original's layer layout.
    assert {k: v.shape for k, v in restored.get_weights().items()} == {
        k: v.shape for k, v in policy.get_weights().items()
    }


def test_complete_config_is_not_stored_twice(tmp_path):
    pytest.importorskip("torch")
    full = PGTorchPolicy(OBS, ACT, {}).config
    PGTorchPolicy(OBS, ACT, full).export_checkpoint(str(tmp_path))
    assert "given_config" not in json.loads((tmp_path / "rlpolicy_checkpoint.json").read_text())


@pytest.mark.tf
def test_derived_eager_classes_are_recorded_as_recipes(tmp_path):
    pytest.importorskip("tensorflow")
    eager = PPOTFPolicy.as_eager().with_tracing()
    eager(OBS, ACT, {"framework": "tf2"}).export_checkpoint(str(tmp_path))
    meta = json.loads((tmp_path / "rlpolicy_checkpoint.json").read_text())
    assert meta["policy_class_recipe"] == {
        "of": {
            "of": {"import": "rlpolicy.agents.ppo.ppo_tf_policy:PPOTFPolicy"},
            "call": "as_eager",
            "kwargs": {},
        },
        "call": "with_tracing",
        "kwargs": {},
    }
    assert (
        type(Policy.from_checkpoint(str(tmp_path), trusted="imported")).__name__ == "PPOTFPolicy_eager_traced"
    )


def test_module_level_with_updates_is_stored_by_its_global_name(tmp_path):
    pytest.importorskip("torch")
    RenamedTorchPolicy(OBS, ACT, {}).export_checkpoint(str(tmp_path))
    meta = json.loads((tmp_path / "rlpolicy_checkpoint.json").read_text())
    assert meta["policy_class"] == f"{__name__}:RenamedTorchPolicy"
    assert "policy_class_recipe" not in meta
    assert type(Policy.from_checkpoint(str(tmp_path), trusted="imported")) is RenamedTorchPolicy


def test_with_updates_arguments_are_stored_by_import_path(tmp_path):
    pytest.importorskip("torch")
    local = _local_with_updates(MyTorchPolicy)
    local(OBS, ACT, {}).export_checkpoint(str(tmp_path))
    recipe = json.loads((tmp_path / "rlpolicy_checkpoint.json").read_text())["policy_class_recipe"]
    assert recipe == {
        "of": {"import": f"{__name__}:MyTorchPolicy"},
        "call": "with_updates",
        "kwargs": {
            "name": "MyTorchPolicyLocal",
            "postprocess_fn": {"__import__": f"{__name__}:reinforce_postprocess"},
        },
    }


def test_factory_call_is_stored_with_its_arguments(tmp_path):
    pytest.importorskip("torch")
    _built_in_function("torch")(OBS, ACT, {}).export_checkpoint(str(tmp_path))
    recipe = json.loads((tmp_path / "rlpolicy_checkpoint.json").read_text())["policy_class_recipe"]
    assert recipe["factory"] == "rlpolicy.policy.policy_template:build_policy_class"
    kwargs = recipe["kwargs"]
    assert kwargs["name"] == "InFunctionTorch" and kwargs["framework"] == "torch"
    assert kwargs["loss_fn"] == {"__import__": f"{__name__}:torch_pg_loss"}
    assert kwargs["postprocess_fn"] == {"__import__": f"{__name__}:reinforce_postprocess"}
    assert kwargs["stats_fn"] is None


def test_unrebuildable_class_warns_at_save_and_names_the_fix_at_load(tmp_path, caplog):
    pytest.importorskip("torch")
    cls = MyTorchPolicy.with_updates(
        name="WithLambda", postprocess_fn=lambda p, b, o=None, e=None: reinforce_postprocess(p, b)
    )
    with caplog.at_level(logging.WARNING, logger="rlpolicy.policy.policy"):
        cls(OBS, ACT, {}).export_checkpoint(str(tmp_path))
    assert "WithLambda.from_checkpoint(dir)" in caplog.text
    with pytest.raises(ValueError, match=r"YourPolicyClass.from_checkpoint\(dir\)"):
        Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert type(cls.from_checkpoint(str(tmp_path))) is cls


@pytest.mark.parametrize(
    "recipe, match",
    [
        (
            {"of": {"import": f"{__name__}:MyTorchPolicy"}, "call": "__init_subclass__", "kwargs": {}},
            "one of",
        ),
        ({"call": "with_updates"}, "invalid policy class recipe"),
        (
            {
                "of": {"import": f"{__name__}:MyTorchPolicy"},
                "call": "with_updates",
                "kwargs": {"postprocess_fn": {"__import__": "os:system"}},
            },
            "only classes and Python functions",
        ),
        (
            {"of": {"import": "collections:OrderedDict"}, "call": "as_eager", "kwargs": {}},
            "not a Policy subclass",
        ),
        ("PPOTFPolicy", "invalid policy class recipe"),
        ({"factory": "os:system", "kwargs": {"command": "true"}}, "only classes and Python functions"),
        ({"factory": f"{__name__}:MyTorchPolicy", "kwargs": {}}, "which is not one"),
        (
            {"factory": "no_such_module_xyz:f", "kwargs": {}},
            "policy factory names 'no_such_module_xyz:f'.*does not trust",
        ),
    ],
)
def test_bad_recipe_is_refused(recipe, match, tmp_path):
    pytest.importorskip("torch")
    MyTorchPolicy(OBS, ACT, {}).export_checkpoint(str(tmp_path))
    path = tmp_path / "rlpolicy_checkpoint.json"
    meta = json.loads(path.read_text())
    meta["policy_class_recipe"] = recipe
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=match):
        Policy.from_checkpoint(str(tmp_path), trusted="imported")
