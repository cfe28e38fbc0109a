"""``build_tf_policy``: hook order, hook outputs, config merging, mixins,
``with_updates``, ``as_eager`` and the deprecated arguments.

One recording class is built with every hook; each hook appends its name to a
log, so the construction order can be checked against the documented one.
Built policies are module-scoped (graph building is the slow part).
"""

import copy
import warnings

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("rlpolicy.policy.dynamic_tf_policy")

from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_policy_template import build_tf_policy  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY  # noqa: E402

tf1, tf, _ = try_import_tf()

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
DEFAULTS = {"lr": 0.05, "model": {"fcnet_hiddens": [4]}, "custom": {"nested": [1]}}
LOG = []
SEEN = {}


def record(name, result=None):
    def hook(*args, **kwargs):
        LOG.append(name)
        return result(*args, **kwargs) if result is not None else None

    hook.__name__ = name
    return hook


def _make_model(policy, obs_space, action_space, config):
    SEEN["make_model_config"] = config
    _, n = ModelCatalog.get_action_dist(action_space, config["model"], framework="tf")
    return ModelCatalog.get_model_v2(obs_space, action_space, n, config["model"], framework="tf")


def _validate(policy, obs_space, action_space, config):
    SEEN["validate_config"] = config


def _add_advantages(policy, batch, other_agent_batches=None, episode=None):
    batch["advantages"] = np.asarray(batch[SampleBatch.REWARDS], np.float32)
    return batch


def _pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    policy.rec_loss = -tf.reduce_mean(logp * train_batch["advantages"])
    return policy.rec_loss


def _after_init(policy, obs_space, action_space, config):
    policy.global_timestep = 99  # the factory resets it to 0 afterwards


HOOKS = dict(
    get_default_config=record("get_default_config", lambda: DEFAULTS),
    validate_spaces=record("validate_spaces", _validate),
    before_init=record("before_init"),
    make_model=record("make_model", _make_model),
    before_loss_init=record("before_loss_init"),
    extra_action_out_fn=record("extra_action_out_fn", lambda p: {"vf": p.model.value_function()}),
    postprocess_fn=record("postprocess_fn", _add_advantages),
    loss_fn=record("loss_fn", _pg_loss),
    stats_fn=record("stats_fn", lambda p, b: {"loss_copy": p.rec_loss}),
    optimizer_fn=record("optimizer_fn", lambda p, c: tf1.train.GradientDescentOptimizer(c["lr"])),
    compute_gradients_fn=record(
        "compute_gradients_fn", lambda p, o, loss: o.compute_gradients(loss, p.model.trainable_variables())
    ),
    apply_gradients_fn=record("apply_gradients_fn", lambda p, o, gv: o.apply_gradients(gv)),
    grad_stats_fn=record("grad_stats_fn", lambda p, b, g: {"num_grads": tf.constant(len(g))}),
    extra_learn_fetches_fn=record("extra_learn_fetches_fn", lambda p: {"extra": tf.constant(7.0)}),
    after_init=record("after_init", _after_init),
    get_batch_divisibility_req=record("get_batch_divisibility_req", lambda p: 1),
)


class GreetMixin:
    def greet(self):
        return f"hello from {type(self).__name__}"


Recording = build_tf_policy("Recording", mixins=[GreetMixin], **HOOKS)


def batch_of(n, seed=0):
    r = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: r.integers(0, 2, n),
            SampleBatch.REWARDS: r.normal(size=n).astype(np.float32),
        }
    )


@pytest.fixture(scope="module")
def built():
    """(policy, construction log, caller config before, caller config)."""
    LOG.clear()
    caller = {"lr": 0.1, "seed": 0}
    before = copy.deepcopy(caller)
    policy = Recording(OBS, ACT, caller)
    return policy, list(LOG), before, caller


# ------------------------------------------------------------------ construction


def test_signature_is_the_specs():
    import inspect

    params = list(inspect.signature(build_tf_policy).parameters.values())
    assert [p.name for p in params] == [
        "name",
        "loss_fn",
        "get_default_config",
        "postprocess_fn",
        "stats_fn",
        "optimizer_fn",
        "compute_gradients_fn",
        "apply_gradients_fn",
        "grad_stats_fn",
        "extra_action_out_fn",
        "extra_learn_fetches_fn",
        "validate_spaces",
        "before_init",
        "before_loss_init",
        "after_init",
        "make_model",
        "action_sampler_fn",
        "action_distribution_fn",
        "mixins",
        "get_batch_divisibility_req",
        "obs_include_prev_action_reward",
        "extra_action_fetches_fn",
        "gradients_fn",
    ]
    assert params[0].kind is params[0].POSITIONAL_OR_KEYWORD
    assert all(p.kind is p.KEYWORD_ONLY for p in params[1:])
    assert params[1].default is params[1].empty  # loss_fn is required
    assert params[-3].default == -1 and all(p.default is None for p in params[2:-3] + params[-2:])


@pytest.mark.tf
def test_hooks_run_in_documented_order(built):
    _, log, _, _ = built
    first = {name: log.index(name) for name in dict.fromkeys(log)}
    chain = [
        "get_default_config",
        "validate_spaces",
        "before_init",
        "make_model",
        "before_loss_init",
        "extra_action_out_fn",
        "postprocess_fn",
        "loss_fn",
        "stats_fn",
        "compute_gradients_fn",
        "apply_gradients_fn",
        "grad_stats_fn",
        "after_init",
    ]
    missing = [name for name in chain if name not in first]
    assert not missing, f"hooks never called during construction: {missing}; log: {log}"
    assert [first[n] for n in chain] == sorted(first[n] for n in chain), log
    # The optimizer is made after before_loss_init and before any gradient.
    assert first["before_loss_init"] < first["optimizer_fn"] < first["compute_gradients_fn"]
    for once in (
        "get_default_config",
        "validate_spaces",
        "before_init",
        "make_model",
        "before_loss_init",
        "extra_action_out_fn",
        "after_init",
        "optimizer_fn",
    ):
        assert log.count(once) == 1, (once, log)
    assert log[-1] == "after_init"


def test_global_timestep_reset_after_after_init(built):
    policy, _, _, _ = built
    assert policy.global_timestep == 0


def test_config_merge_copies_defaults_and_leaves_caller_dict_alone(built):
    policy, _, before, caller = built
    assert caller == before
    assert policy.config is not caller
    assert policy.config["lr"] == 0.1  # the caller wins
    assert policy.config["model"]["fcnet_hiddens"] == [4]  # from the defaults
    assert policy.config["custom"] == {"nested": [1]}
    assert policy.config["custom"] is not DEFAULTS["custom"]
    assert policy.config["custom"]["nested"] is not DEFAULTS["custom"]["nested"]
    # Hooks get the policy's own (merged, completed) config.
    assert SEEN["validate_config"] is policy.config
    assert SEEN["make_model_config"] is policy.config
    assert policy.config["framework"] == "tf"


def test_class_layout(built):
    policy, _, _, _ = built
    assert Recording.__name__ == Recording.__qualname__ == "Recording"
    assert Recording.__module__ == __name__
    mro = Recording.__mro__
    assert mro.index(GreetMixin) < mro.index(DynamicTFPolicy)
    assert policy.greet() == "hello from Recording"


# ------------------------------------------------------------------ hook outputs


@pytest.mark.tf
def test_extra_action_out_fn_fetches_come_with_actions(built):
    policy, _, _, _ = built
    obs = batch_of(5)[SampleBatch.OBS]
    actions, _, extra = policy.compute_actions(obs, explore=False)
    assert actions.shape == (5,)
    assert extra["vf"].shape == (5,)
    assert SampleBatch.ACTION_DIST_INPUTS in extra  # the base fetches stay


@pytest.mark.tf
def test_learn_on_batch_returns_stats_grad_stats_and_extra_fetches(built):
    policy, _, _, _ = built
    LOG.clear()
    batch = policy.postprocess_trajectory(batch_of(8))
    assert LOG == ["postprocess_fn"]
    np.testing.assert_array_equal(batch["advantages"], batch[SampleBatch.REWARDS])
    out = policy.learn_on_batch(batch)
    stats = out[LEARNER_STATS_KEY]
    assert np.isfinite(stats["loss_copy"])
    # fc_1 and fc_out kernels and biases; the value head (not in this loss)
    # has no gradient and is dropped, as in RLlib.
    assert len(policy.model.trainable_variables()) == 6
    assert int(stats["num_grads"]) == 4
    assert out["extra"] == pytest.approx(7.0, abs=1e-6)


@pytest.mark.tf
def test_optimizer_fn_result_is_the_policy_optimizer(built):
    policy, _, _, _ = built
    assert isinstance(policy._optimizer, tf1.train.GradientDescentOptimizer)
    assert isinstance(policy.optimizer(), tf1.train.GradientDescentOptimizer)


# ------------------------------------------------------------------ mixins, with_updates, as_eager


class SGDMixin:
    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.5)

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        sample_batch["from_mixin"] = np.ones(len(sample_batch), np.float32)
        return sample_batch


def _needs_mixin_column(policy, batch, other_agent_batches=None, episode=None):
    batch = _add_advantages(policy, batch)
    batch["advantages"] = batch["advantages"] * batch["from_mixin"]
    return batch


@pytest.fixture(scope="module")
def updated():
    cls = Recording.with_updates(
        name="Updated",
        optimizer_fn=None,
        mixins=[SGDMixin],
        postprocess_fn=_needs_mixin_column,
        get_default_config=None,
    )
    return cls, cls(OBS, ACT, {"model": {"fcnet_hiddens": [4]}})


def test_parents_are_resolved_when_the_class_is_made():
    from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy

    cls = Recording.with_updates(name="Resolved", optimizer_fn=None, mixins=[SGDMixin])
    assert cls._dispatch["optimizer"] is SGDMixin.optimizer
    assert cls._dispatch["postprocess_trajectory"] is SGDMixin.postprocess_trajectory
    assert cls._dispatch["gradients"] is DynamicTFPolicy.gradients
    assert Recording._dispatch["postprocess_trajectory"] is DynamicTFPolicy.postprocess_trajectory


@pytest.mark.tf
def test_with_updates_replaces_only_the_given_arguments(updated):
    cls, policy = updated
    assert cls.__name__ == "Updated" and cls is not Recording
    assert cls._hooks.loss_fn is Recording._hooks.loss_fn
    assert cls._hooks.optimizer_fn is None and Recording._hooks.optimizer_fn is not None
    assert Recording._hooks.mixins == (GreetMixin,)
    # No optimizer_fn: the mixin's optimizer() wins over DynamicTFPolicy's.
    assert isinstance(policy._optimizer, tf1.train.GradientDescentOptimizer)
    # The mixin's postprocess_trajectory runs before postprocess_fn.
    out = policy.postprocess_trajectory(batch_of(4))
    np.testing.assert_array_equal(out["from_mixin"], np.ones(4))
    # No get_default_config: only the caller's dict (completed).
    assert policy.config["lr"] != DEFAULTS["lr"]


def test_with_updates_rejects_unknown_arguments():
    with pytest.raises(TypeError, match=r"with_updates: unknown argument\(s\) \['loss_function'\]"):
        Recording.with_updates(loss_function=None)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"name": "not a name"}, "name must be a class name"),
        ({"name": "Ok", "mixins": [object()]}, "mixins must be classes"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(TypeError, match=match):
        build_tf_policy(loss_fn=_pg_loss, **kwargs)


@pytest.mark.tf
def test_as_eager_gives_a_working_eager_class():
    pytest.importorskip("rlpolicy.policy.eager_tf_policy")
    eager_cls = Recording.with_updates(
        name="RecordingEager",
        optimizer_fn=None,
        compute_gradients_fn=None,
        apply_gradients_fn=None,
        grad_stats_fn=None,
        extra_learn_fetches_fn=None,
    ).as_eager()
    assert not issubclass(eager_cls, DynamicTFPolicy)
    policy = eager_cls(OBS, ACT, {"framework": "tf2", "lr": 0.1})
    assert policy.greet().startswith("hello from")
    obs = batch_of(5)[SampleBatch.OBS]
    actions, _, extra = policy.compute_actions(obs, explore=False)
    assert actions.shape == (5,) and extra["vf"].shape == (5,)
    out = policy.learn_on_batch(policy.postprocess_trajectory(batch_of(8)))
    assert np.isfinite(out[LEARNER_STATS_KEY]["loss_copy"])


# ------------------------------------------------------------------ deprecated arguments


@pytest.mark.tf
def test_deprecated_arguments_warn_and_map_onto_their_replacements():
    calls = []

    def old_fetches(policy):
        calls.append("extra_action_fetches_fn")
        return {"old_fetch": policy.model.value_function()}

    def old_gradients(policy, optimizer, loss):
        calls.append("gradients_fn")
        return optimizer.compute_gradients(loss, policy.model.trainable_variables())

    with pytest.warns(DeprecationWarning) as record_:
        cls = build_tf_policy(
            "OldStyle",
            loss_fn=_pg_loss,
            postprocess_fn=_add_advantages,
            get_default_config=lambda: DEFAULTS,
            extra_action_out_fn=lambda p: {"new_fetch": 1},
            obs_include_prev_action_reward=True,
            extra_action_fetches_fn=old_fetches,
            gradients_fn=old_gradients,
        )
    messages = " | ".join(str(w.message) for w in record_)
    assert "`obs_include_prev_action_reward` has been deprecated" in messages
    assert "`extra_action_fetches_fn` has been deprecated. Use `extra_action_out_fn`" in messages
    assert "`gradients_fn` has been deprecated. Use `compute_gradients_fn`" in messages
    # The record keeps the arguments as given (with_updates/as_eager pass them on).
    assert cls._hooks.extra_action_fetches_fn is old_fetches
    assert cls._hooks.action_out_fn is old_fetches and cls._hooks.gradients_hook is old_gradients
    policy = cls(OBS, ACT, {})
    assert calls == ["extra_action_fetches_fn", "gradients_fn"]
    _, _, extra = policy.compute_actions(batch_of(3)[SampleBatch.OBS])
    assert "old_fetch" in extra and "new_fetch" not in extra
    # as_eager() gets the arguments as given, so the eager factory maps them the same way.
    with pytest.warns(DeprecationWarning) as eager_record:
        eager_cls = cls.as_eager()
    assert len(eager_record) == 3  # the same three warnings
    assert eager_cls._hooks.extra_action_out_fn is old_fetches
    assert eager_cls._hooks.compute_gradients_fn is old_gradients


def test_no_deprecation_warning_without_deprecated_arguments():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        Recording.with_updates(name="Quiet")


# ------------------------------------------------------------------ towers


@pytest.mark.tf
def test_tower_copies_get_no_extra_action_fetches_and_learn():
    calls = []

    def fetches(policy):
        calls.append(policy._is_tower)
        return {"vf": policy.model.value_function()}

    cls = Recording.with_updates(name="TowerRec", extra_action_out_fn=fetches)
    policy = cls(
        OBS, ACT, {"num_gpus": 2, "_fake_gpus": True, "sgd_minibatch_size": 8, "train_batch_size": 16}
    )
    assert calls == [False]  # the main policy only; towers skip the hook
    towers = policy.multi_gpu_tower_stacks[0].get_device_losses()
    assert len(towers) == 2
    for tower in towers:
        assert tower._is_tower and tower._extra_action_fetches == {}
    assert "vf" in policy._extra_action_fetches
    batch = policy.postprocess_trajectory(batch_of(16))
    assert policy.load_batch_into_buffer(batch) == 8
    out = policy.learn_on_loaded_batch(0)
    assert np.isfinite(out["tower_0"][LEARNER_STATS_KEY]["loss_copy"])
