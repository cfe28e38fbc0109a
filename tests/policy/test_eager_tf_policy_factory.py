"""``build_eager_tf_policy``: signature, hook order, deprecated arguments, mixins, errors."""

import inspect
import warnings

import gymnasium as gym
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.policy.eager_tf_policy import EagerTFPolicy, build_eager_tf_policy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.deprecation import DEPRECATED_VALUE  # noqa: E402
from rlpolicy.utils.framework import get_keras  # noqa: E402

pytestmark = pytest.mark.tf

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
CONFIG = {"model": {"fcnet_hiddens": [4]}, "lr": 0.1}

# RLlib 1.11's build_eager_tf_policy parameters, in order (= build_tf_policy's).
RLLIB_PARAMS = [
    "name",
    "loss_fn",
    "get_default_config",
    "postprocess_fn",
    "stats_fn",
    "optimizer_fn",
    "compute_gradients_fn",
    "apply_gradients_fn",
    "grad_stats_fn",
    "extra_learn_fetches_fn",
    "extra_action_out_fn",
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


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    return -tf.reduce_mean(logp * train_batch[SampleBatch.REWARDS])


def batch(n=4):
    r = np.random.default_rng(0)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: r.integers(0, 2, n),
            SampleBatch.REWARDS: r.normal(size=n).astype(np.float32),
        }
    )


def test_signature_is_rllibs():
    sig = inspect.signature(build_eager_tf_policy)
    assert list(sig.parameters) == RLLIB_PARAMS
    assert sig.parameters["obs_include_prev_action_reward"].default == DEPRECATED_VALUE
    assert all(
        p.default is None
        for n, p in sig.parameters.items()
        if n not in ("name", "loss_fn", "obs_include_prev_action_reward")
    )


def recording_hooks(calls):
    def rec(name, result=None):
        def hook(*args, **kwargs):
            calls.append(name)
            return result() if callable(result) else result

        return hook

    def make_model(policy, obs_space, action_space, config):
        calls.append("make_model")
        return ModelCatalog.get_model_v2(obs_space, action_space, 2, config["model"], framework="tf2")

    def loss(policy, model, dist_class, train_batch):
        calls.append("loss_fn")
        return pg_loss(policy, model, dist_class, train_batch)

    def compute_gradients(policy, optimizer, loss_):
        calls.append("compute_gradients_fn")
        return optimizer.compute_gradients(loss_, policy.model.trainable_variables())

    def apply_gradients(policy, optimizer, grads_and_vars):
        calls.append("apply_gradients_fn")
        optimizer.apply_gradients([(g, v) for g, v in grads_and_vars if g is not None])

    def postprocess(policy, sample_batch, other_agent_batches=None, episode=None):
        calls.append("postprocess_fn")
        return sample_batch

    return dict(
        loss_fn=loss,
        get_default_config=rec("get_default_config", lambda: {"gamma": 0.5}),
        postprocess_fn=postprocess,
        stats_fn=rec("stats_fn", lambda: {"s": tf.constant(1.0)}),
        optimizer_fn=rec("optimizer_fn", lambda: get_keras().optimizers.SGD(0.1)),
        compute_gradients_fn=compute_gradients,
        apply_gradients_fn=apply_gradients,
        grad_stats_fn=rec("grad_stats_fn", dict),
        extra_learn_fetches_fn=rec("extra_learn_fetches_fn", lambda: {"extra": 2}),
        extra_action_out_fn=rec("extra_action_out_fn", lambda: {"x": tf.zeros(1)}),
        validate_spaces=rec("validate_spaces"),
        before_init=rec("before_init"),
        before_loss_init=rec("before_loss_init"),
        after_init=rec("after_init"),
        make_model=make_model,
    )


def test_hooks_run_in_rllib_eager_order():
    calls = []
    cls = build_eager_tf_policy("Rec", **recording_hooks(calls))
    policy = cls(OBS, ACT, dict(CONFIG))
    # RLlib 1.11's eager order: the optimizer is made before the dummy-batch loss init.
    assert calls == [
        "get_default_config",
        "validate_spaces",
        "before_init",
        "make_model",
        "before_loss_init",
        "optimizer_fn",
        "extra_action_out_fn",
        "postprocess_fn",
        "loss_fn",
        "stats_fn",
        "after_init",
    ]
    assert policy.config["gamma"] == 0.5
    calls.clear()
    out = policy.learn_on_batch(batch())
    assert calls == [
        "loss_fn",
        "compute_gradients_fn",
        "stats_fn",
        "extra_learn_fetches_fn",
        "grad_stats_fn",
        "apply_gradients_fn",
    ]
    assert out["learner_stats"] == {"s": 1.0} and out["extra"] == 2
    calls.clear()
    _, _, extra = policy.compute_actions(np.zeros((2, 3), np.float32))
    assert calls == ["extra_action_out_fn"] and "x" in extra


@pytest.mark.parametrize(
    "kwarg, new",
    [("extra_action_fetches_fn", "extra_action_out_fn"), ("gradients_fn", "compute_gradients_fn")],
)
def test_deprecated_hooks_warn_and_are_used(kwarg, new):
    calls = []

    def hook(policy, *args):
        calls.append(kwarg)
        if kwarg == "gradients_fn":
            optimizer, loss = args
            return optimizer.compute_gradients(loss)
        return {"deprecated_out": tf.ones(1)}

    with pytest.warns(DeprecationWarning, match=f"`{kwarg}` has been deprecated. Use `{new}`"):
        cls = build_eager_tf_policy("Dep", loss_fn=pg_loss, **{kwarg: hook})
    assert getattr(cls._hooks, new) is hook
    policy = cls(OBS, ACT, dict(CONFIG))
    calls.clear()
    if kwarg == "gradients_fn":
        policy.learn_on_batch(batch())
    else:
        assert "deprecated_out" in policy.compute_actions(np.zeros((1, 3), np.float32))[2]
    assert calls == [kwarg]


def test_obs_include_prev_action_reward_only_warns():
    with pytest.warns(DeprecationWarning, match="obs_include_prev_action_reward"):
        cls = build_eager_tf_policy("Dep", loss_fn=pg_loss, obs_include_prev_action_reward=True)
    # Recorded as "not set", so rebuilding the class does not warn again.
    from rlpolicy.utils.deprecation import DEPRECATED_VALUE

    assert cls._hooks.obs_include_prev_action_reward == DEPRECATED_VALUE
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        cls.with_updates(name="Dep2")


class CountingMixin:
    def __init__(self):
        self.counter = 0

    def bump(self):
        self.counter += 1
        return self.counter

    def optimizer(self):  # honoured when there is no optimizer_fn
        return get_keras().optimizers.SGD(0.5)


def init_mixin(policy, obs_space, action_space, config):
    CountingMixin.__init__(policy)


@pytest.mark.tf_eager_code
def test_mixins_come_first_and_with_updates_rebuilds():
    cls = build_eager_tf_policy("Mixed", loss_fn=pg_loss, mixins=[CountingMixin], before_loss_init=init_mixin)
    assert cls.__mro__[1:3] == (CountingMixin, EagerTFPolicy)
    policy = cls(OBS, ACT, dict(CONFIG))
    assert policy.bump() == 1 and isinstance(policy._optimizer, get_keras().optimizers.SGD)
    assert float(policy._optimizer.learning_rate.numpy()) == 0.5
    renamed = cls.with_updates(name="Renamed", optimizer_fn=lambda p, c: get_keras().optimizers.Adam(0.2))
    assert renamed.__name__ == "Renamed_eager" and renamed._hooks.mixins == (CountingMixin,)
    assert isinstance(renamed(OBS, ACT, dict(CONFIG))._optimizer, get_keras().optimizers.Adam)
    assert cls.with_tracing().with_updates(name="T").__name__ == "T_eager_traced"


@pytest.mark.parametrize(
    "build, exc, match",
    [
        (lambda: build_eager_tf_policy("bad name", loss_fn=pg_loss), TypeError, "name must be a class name"),
        (
            lambda: build_eager_tf_policy("M", loss_fn=pg_loss, mixins=[object()]),
            TypeError,
            "mixins must be classes",
        ),
        (
            lambda: build_eager_tf_policy("M", loss_fn=pg_loss).with_updates(lossfn=pg_loss),
            TypeError,
            r"unknown argument\(s\) \['lossfn'\]",
        ),
        (
            lambda: build_eager_tf_policy("M", loss_fn=pg_loss, action_sampler_fn=lambda *a, **k: None)(
                OBS, ACT, dict(CONFIG)
            ),
            ValueError,
            "`make_model` is required if `action_sampler_fn`",
        ),
        (
            lambda: build_eager_tf_policy("M", loss_fn=None)(OBS, ACT, dict(CONFIG)).learn_on_batch(batch()),
            ValueError,
            "M_eager has no loss",
        ),
        (
            lambda: build_eager_tf_policy("M", loss_fn=pg_loss, make_model=lambda *a: object())(
                OBS, ACT, dict(CONFIG)
            ),
            TypeError,
            "the model must be a TFModelV2",
        ),
    ],
)
def test_factory_and_construction_errors(build, exc, match):
    with pytest.raises(exc, match=match):
        build()


def test_framework_is_tf2_unless_tfe_and_callers_config_is_left_alone():
    cls = build_eager_tf_policy("F", loss_fn=pg_loss)
    graph_cfg = {"framework": "tf", **CONFIG}
    assert cls(OBS, ACT, graph_cfg).framework == "tf2" and graph_cfg["framework"] == "tf"
    assert cls(OBS, ACT, {"framework": "tfe", **CONFIG}).config["framework"] == "tfe"


def test_action_distribution_fn_sets_dist_class_and_log_likelihoods():
    from rlpolicy.models.tf.tf_action_dist import Categorical

    def make_model(policy, obs_space, action_space, config):
        return ModelCatalog.get_model_v2(obs_space, action_space, 2, config["model"], framework="tf2")

    def dist_fn(
        policy,
        model,
        input_dict,
        *,
        state_batches=None,
        seq_lens=None,
        explore=None,
        timestep=None,
        is_training=False,
    ):
        logits, state_out = model(input_dict, state_batches or [], seq_lens)
        return logits * 0.0 + tf.constant([0.0, np.log(3.0)], tf.float32), Categorical, state_out

    cls = build_eager_tf_policy("D", loss_fn=pg_loss, make_model=make_model, action_distribution_fn=dist_fn)
    policy = cls(OBS, ACT, dict(CONFIG))
    assert policy.dist_class is Categorical
    logp = policy.compute_log_likelihoods(np.array([0, 1]), np.zeros((2, 3), np.float32))
    np.testing.assert_allclose(np.asarray(logp), np.log([0.25, 0.75]), rtol=1e-5, atol=1e-6)


def test_action_sampler_fn_provides_actions_and_logp():
    def make_model(policy, obs_space, action_space, config):
        return ModelCatalog.get_model_v2(obs_space, action_space, 2, config["model"], framework="tf2")

    def sampler(policy, model, obs, *, explore, timestep, episodes=None):
        n = tf.shape(obs)[0]
        return tf.ones([n], tf.int64), tf.fill([n], -0.5)

    def mean_logits_loss(policy, model, dist_class, train_batch):  # no dist_class here
        return tf.reduce_mean(model(train_batch)[0])

    cls = build_eager_tf_policy(
        "S", loss_fn=mean_logits_loss, make_model=make_model, action_sampler_fn=sampler
    )
    actions, _, extra = cls(OBS, ACT, dict(CONFIG)).compute_actions(np.zeros((3, 3), np.float32))
    np.testing.assert_array_equal(actions, [1, 1, 1])
    np.testing.assert_allclose(extra["action_logp"], [-0.5] * 3, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="Cannot compute log-prob/likelihood"):
        cls(OBS, ACT, dict(CONFIG)).compute_log_likelihoods(np.zeros(1), np.zeros((1, 3)))


def test_build_tf_policy_as_eager_gives_a_working_eager_class():
    try:
        from rlpolicy.policy.tf_policy_template import build_tf_policy
    except ImportError as e:  # the graph-mode template is built elsewhere
        pytest.skip(f"build_tf_policy not importable: {e}")
    graph_cls = build_tf_policy("PGX", loss_fn=pg_loss)
    eager_cls = graph_cls.as_eager()
    assert issubclass(eager_cls, EagerTFPolicy) and eager_cls.__name__ == "PGX_eager"
    policy = eager_cls(OBS, ACT, {"framework": "tf2", **CONFIG})
    before = policy.get_weights(as_dict=True)
    policy.learn_on_batch(batch())
    assert any(not np.allclose(before[k], v, atol=1e-6) for k, v in policy.get_weights(as_dict=True).items())


@pytest.mark.tf_eager_code
def test_tf_mixins_work_on_eager_policies():
    try:
        from rlpolicy.policy.tf_mixins import EntropyCoeffSchedule, LearningRateSchedule, TargetNetworkMixin
    except ImportError as e:  # the TF mixins are built elsewhere
        pytest.skip(f"tf_mixins not importable: {e}")

    def make_model(policy, obs_space, action_space, config):
        policy.target_model = ModelCatalog.get_model_v2(
            obs_space, action_space, 2, config["model"], framework="tf2"
        )
        return ModelCatalog.get_model_v2(obs_space, action_space, 2, config["model"], framework="tf2")

    def setup(policy, obs_space, action_space, config):
        LearningRateSchedule.__init__(policy, config["lr"], [[0, 0.4], [10, 0.0]])
        EntropyCoeffSchedule.__init__(policy, 0.1, [[0, 0.1], [10, 0.0]])

    def sync(policy, obs_space, action_space, config):
        TargetNetworkMixin.__init__(policy)

    cls = build_eager_tf_policy(
        "WithMixins",
        loss_fn=pg_loss,
        make_model=make_model,
        before_loss_init=setup,
        after_init=sync,
        mixins=[LearningRateSchedule, EntropyCoeffSchedule, TargetNetworkMixin],
    )
    policy = cls(OBS, ACT, dict(CONFIG))
    np.testing.assert_allclose(float(policy._optimizer.learning_rate.numpy()), 0.4, rtol=1e-6)
    policy.on_global_var_update({"timestep": 5})
    assert policy.global_timestep == 5
    np.testing.assert_allclose(float(policy._optimizer.learning_rate.numpy()), 0.2, rtol=1e-6)
    weights = policy.get_weights(as_dict=True)
    target_keys = [k for k in weights if k.startswith("target_model.")]
    assert len(target_keys) == len(policy.model.variables())
    for k in target_keys:  # hard-synced by TargetNetworkMixin.__init__
        np.testing.assert_array_equal(weights[k], weights[k[len("target_model.") :]])
    policy.set_weights(weights)  # the target's keys round-trip
