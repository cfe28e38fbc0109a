"""rlpolicy.policy.policy_template.build_policy_class (torch)."""

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy._core.defaults import MODEL_DEFAULTS  # noqa: E402
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.policy.policy import Policy  # noqa: E402
from rlpolicy.policy.policy_template import build_policy_class  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)
SMALL = {"model": {"fcnet_hiddens": [8]}, "seed": 0}


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    dist = dist_class(logits, model)
    return -torch.mean(dist.logp(train_batch[SampleBatch.ACTIONS]) * train_batch["advantages"])


def centred_advantages(policy, batch, other_agent_batches=None, episode=None):
    rewards = np.asarray(batch[SampleBatch.REWARDS], np.float32)
    batch["advantages"] = rewards - rewards.mean()
    return batch


def pg_stats(policy, train_batch):
    return {"mean_adv": torch.mean(torch.as_tensor(train_batch["advantages"]))}


# Module level, so checkpoints can name it by import path.
PGPolicy = build_policy_class(
    "PGPolicy", "torch", loss_fn=pg_loss, postprocess_fn=centred_advantages, stats_fn=pg_stats
)


# ------------------------------------------------------------------ class identity
def test_built_class_identity():
    assert PGPolicy.__name__ == "PGPolicy" and PGPolicy.__qualname__ == "PGPolicy"
    assert PGPolicy.__module__ == __name__
    assert PGPolicy.__mro__[1] is TorchPolicy and issubclass(PGPolicy, Policy)
    assert PGPolicy._hooks.loss_fn is pg_loss and PGPolicy._hooks.framework == "torch"


def test_builder_has_the_reference_signature():
    import inspect

    params = inspect.signature(build_policy_class).parameters
    assert list(params)[:2] == ["name", "framework"]
    assert params["loss_fn"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["loss_fn"].default is inspect.Parameter.empty
    assert all(p.default is None for n, p in params.items() if n not in ("name", "framework", "loss_fn"))
    # The parameter list of the reference's signature line, verbatim.
    reference = (
        "name, framework, *, loss_fn, get_default_config=None, stats_fn=None, postprocess_fn=None, "
        "extra_action_out_fn=None, extra_grad_process_fn=None, extra_learn_fetches_fn=None, "
        "optimizer_fn=None, validate_spaces=None, before_init=None, before_loss_init=None, "
        "after_init=None, _after_loss_init=None, action_sampler_fn=None, action_distribution_fn=None, "
        "make_model=None, make_model_and_action_dist=None, compute_gradients_fn=None, "
        "apply_gradients_fn=None, mixins=None, get_batch_divisibility_req=None"
    )
    names = [part.split("=")[0] for part in reference.split(", ") if part != "*"]
    assert list(params) == names


# ------------------------------------------------------------------ hook order and arguments
class Recorder:
    def __init__(self):
        self.calls = []

    def hook(self, name, result=None):
        def fn(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return result(*args, **kwargs) if callable(result) else result

        return fn

    def names(self):
        return [c[0] for c in self.calls]

    def args(self, name):
        return next(c[1] for c in self.calls if c[0] == name)


def _recorded_class(rec, **overrides):
    def make_model(policy, obs_space, action_space, config):
        rec.calls.append(("make_model", (policy, obs_space, action_space, config), {}))
        _, n = ModelCatalog.get_action_dist(action_space, config["model"], framework="torch")
        return ModelCatalog.get_model_v2(obs_space, action_space, n, config["model"], framework="torch")

    def loss(policy, model, dist_class, train_batch):
        rec.calls.append(("loss_fn", (policy, model, dist_class, train_batch), {}))
        return pg_loss(policy, model, dist_class, train_batch)

    def post(policy, batch, other_agent_batches=None, episode=None):
        rec.calls.append(
            (
                "postprocess_fn",
                (policy, batch, other_agent_batches, episode),
                {"grad_enabled": torch.is_grad_enabled()},
            )
        )
        return centred_advantages(policy, batch)

    kwargs = dict(
        loss_fn=loss,
        postprocess_fn=post,
        make_model=make_model,
        get_default_config=rec.hook("get_default_config", lambda: {"lr": 0.01, "my_key": 1}),
        stats_fn=rec.hook("stats_fn", {"s": 1.0}),
        extra_action_out_fn=rec.hook(
            "extra_action_out_fn", lambda *a: {"extra": torch.zeros(len(a[1]["obs"]))}
        ),
        extra_grad_process_fn=rec.hook("extra_grad_process_fn", {"gp": 2.0}),
        extra_learn_fetches_fn=rec.hook("extra_learn_fetches_fn", {"fetch": torch.tensor(3.0)}),
        optimizer_fn=rec.hook("optimizer_fn", lambda p, c: torch.optim.SGD(p.model.parameters(), lr=c["lr"])),
        validate_spaces=rec.hook("validate_spaces"),
        before_init=rec.hook("before_init"),
        before_loss_init=rec.hook("before_loss_init"),
        _after_loss_init=rec.hook("_after_loss_init"),
        get_batch_divisibility_req=rec.hook("get_batch_divisibility_req", 1),
    )
    kwargs.update(overrides)
    return build_policy_class("Recorded", "torch", **kwargs)


INIT_ORDER = [
    "get_default_config",
    "validate_spaces",
    "before_init",
    "make_model",
    "optimizer_fn",
    "get_batch_divisibility_req",
    "before_loss_init",
    "extra_action_out_fn",
    "postprocess_fn",
    "loss_fn",
    "stats_fn",
    "_after_loss_init",
]


def test_init_calls_every_hook_in_reference_order_with_reference_arguments():
    rec = Recorder()
    cls = _recorded_class(rec)
    given = {"my_key": 2, **SMALL}
    p = cls(OBS, ACT, given)
    assert rec.names() == INIT_ORDER
    # (policy, obs_space, action_space, config) hooks get the policy's own config dict.
    for name in ("validate_spaces", "before_init", "make_model", "before_loss_init", "_after_loss_init"):
        args = rec.args(name)
        assert args[0] is p and args[1] is OBS and args[2] is ACT and args[3] is p.config, name
    assert rec.args("optimizer_fn") == (p, p.config)
    assert rec.args("get_batch_divisibility_req") == (p,)
    pol, model, dist_class, train_batch = rec.args("loss_fn")
    assert pol is p and model is p.model and dist_class is p.dist_class
    assert isinstance(train_batch, SampleBatch) and train_batch.is_training and train_batch.count == 32
    assert rec.args("stats_fn") == (p, train_batch)
    pol, batch, others, episode = rec.args("postprocess_fn")
    assert pol is p and isinstance(batch, SampleBatch) and others is None and episode is None
    assert rec.calls[INIT_ORDER.index("postprocess_fn")][2] == {"grad_enabled": False}  # under no_grad
    pol, input_dict, state_batches, model, action_dist = rec.args("extra_action_out_fn")
    assert pol is p and "obs" in input_dict and state_batches == [] and model is p.model
    assert isinstance(action_dist, p.dist_class)
    # Config: defaults updated by the caller's dict, completed, framework written in.
    assert p.config["lr"] == 0.01 and p.config["my_key"] == 2
    assert p.config["framework"] == "torch" and p.framework == "torch"
    assert p.config["model"]["fcnet_hiddens"] == [8]
    assert p.config["model"]["max_seq_len"] == MODEL_DEFAULTS["max_seq_len"]
    assert p.global_timestep == 0 and given == {"my_key": 2, **SMALL}


def test_learn_on_batch_hook_order_and_results():
    rec = Recorder()
    p = _recorded_class(rec)(OBS, ACT, dict(SMALL))
    batch = _bandit_batch(p, 8)
    assert rec.names()[-1] == "extra_action_out_fn"  # acting calls it
    rec.calls.clear()
    out = p.learn_on_batch(p.postprocess_trajectory(batch))
    assert rec.names() == [
        "postprocess_fn",
        "loss_fn",
        "extra_grad_process_fn",
        "stats_fn",
        "extra_learn_fetches_fn",
    ]
    assert rec.args("extra_grad_process_fn")[0] is p
    assert isinstance(rec.args("extra_grad_process_fn")[1], torch.optim.SGD)
    assert torch.is_tensor(rec.args("extra_grad_process_fn")[2])  # the loss
    assert out["fetch"] == 3.0 and not torch.is_tensor(out["fetch"])  # converted to numpy
    assert out[LEARNER_STATS_KEY]["s"] == 1.0 and out[LEARNER_STATS_KEY]["gp"] == 2.0


def test_compute_and_apply_gradients_hooks_replace_the_parent_methods():
    rec = Recorder()
    cls = _recorded_class(
        rec,
        compute_gradients_fn=rec.hook("compute_gradients_fn", (["g"], {"i": 1})),
        apply_gradients_fn=rec.hook("apply_gradients_fn"),
    )
    p = cls(OBS, ACT, dict(SMALL))
    assert p.compute_gradients("batch") == (["g"], {"i": 1})
    p.apply_gradients(["g"])
    assert rec.args("compute_gradients_fn") == (p, "batch") and rec.args("apply_gradients_fn") == (p, ["g"])


def test_after_init_is_the_deprecated_before_loss_init():
    rec = Recorder()
    cls = _recorded_class(rec, before_loss_init=None, after_init=rec.hook("after_init"))
    cls(OBS, ACT, dict(SMALL))
    names = rec.names()
    assert (
        names.index("get_batch_divisibility_req") < names.index("after_init") < names.index("postprocess_fn")
    )


def test_make_model_and_action_dist_hook():
    from rlpolicy.models.torch.torch_action_dist import TorchCategorical

    class MyDist(TorchCategorical):
        pass

    def make(policy, obs_space, action_space, config):
        return ModelCatalog.get_model_v2(
            obs_space, action_space, 2, config["model"], framework="torch"
        ), MyDist

    p = build_policy_class(
        "WithDist",
        "torch",
        loss_fn=pg_loss,
        postprocess_fn=centred_advantages,
        make_model_and_action_dist=make,
    )(OBS, ACT, dict(SMALL))
    assert p.dist_class is MyDist


def test_in_evaluation_skips_loss_and_stats():
    rec = Recorder()
    p = _recorded_class(rec)(OBS, ACT, {**SMALL, "in_evaluation": True})
    assert "loss_fn" not in rec.names() and "stats_fn" not in rec.names()
    assert "postprocess_fn" in rec.names() and "_after_loss_init" in rec.names()
    assert p._loss is None


def test_global_timestep_reset_after_init():
    def bump(policy, *args):
        policy.global_timestep = 99

    p = build_policy_class(
        "Bump", "torch", loss_fn=pg_loss, postprocess_fn=centred_advantages, _after_loss_init=bump
    )(OBS, ACT, dict(SMALL))
    assert p.global_timestep == 0


# ------------------------------------------------------------------ with_updates and mixins
def test_with_updates_overrides_exactly_what_it_is_given():
    def other_stats(policy, batch):
        return {}

    new_cls = PGPolicy.with_updates(name="PGPolicy2", stats_fn=other_stats)
    assert new_cls.__name__ == "PGPolicy2" and new_cls.__module__ == __name__
    old, new = PGPolicy._hooks.as_kwargs(), new_cls._hooks.as_kwargs()
    changed = {k for k in old if old[k] is not new[k] and old[k] != new[k]}
    assert changed == {"name", "stats_fn"}
    assert PGPolicy._hooks.stats_fn is pg_stats and PGPolicy.__name__ == "PGPolicy"  # original untouched
    assert new_cls(OBS, ACT, dict(SMALL)).extra_grad_info(SampleBatch({"advantages": np.zeros(2)})) == {}


def test_with_updates_rejects_unknown_arguments():
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['loss_function'\]"):
        PGPolicy.with_updates(loss_function=pg_loss)


class MixinA:
    def who(self):
        return "A"

    def optimizer(self):
        self.mixin_optimizer_called = True
        return torch.optim.SGD(self.model.parameters(), lr=0.5)


class MixinB:
    def who(self):
        return "B"

    def what(self):
        return "B"


def test_mixins_take_precedence_in_order():
    cls = build_policy_class(
        "Mixed", "torch", loss_fn=pg_loss, postprocess_fn=centred_advantages, mixins=[MixinA, MixinB]
    )
    assert cls.__mro__[:4] == (cls, MixinA, MixinB, TorchPolicy)
    p = cls(OBS, ACT, dict(SMALL))
    assert p.who() == "A" and p.what() == "B"
    # Without an optimizer_fn the mixin's optimizer() wins over TorchPolicy's.
    assert p.mixin_optimizer_called and isinstance(p._optimizers[0], torch.optim.SGD)


def test_hook_beats_mixin():
    cls = build_policy_class(
        "HookWins",
        "torch",
        loss_fn=pg_loss,
        postprocess_fn=centred_advantages,
        mixins=[MixinA],
        optimizer_fn=lambda p, c: torch.optim.Adam(p.model.parameters()),
    )
    p = cls(OBS, ACT, dict(SMALL))
    assert isinstance(p._optimizers[0], torch.optim.Adam) and not hasattr(p, "mixin_optimizer_called")


def test_built_class_as_mixin_of_another_built_class():
    def second_post(policy, batch, other_agent_batches=None, episode=None):
        batch["advantages"] = batch["advantages"] + 10.0
        return batch

    outer = build_policy_class(
        "Outer", "torch", loss_fn=pg_loss, postprocess_fn=second_post, mixins=[PGPolicy]
    )
    p = outer(OBS, ACT, dict(SMALL))
    batch = p.postprocess_trajectory(
        SampleBatch({"obs": np.zeros((2, 3), np.float32), "rewards": np.array([1.0, 3.0], np.float32)})
    )
    np.testing.assert_allclose(
        batch["advantages"], [9.0, 11.0], rtol=1e-6, atol=1e-6
    )  # inner (centring) first, then outer
    assert p.extra_grad_info(SampleBatch({"advantages": np.array([1.0, 3.0])}))["mean_adv"] == 2.0


def test_hooks_are_resolved_once_when_the_class_is_made(monkeypatch):
    from rlpolicy.policy import policy_template

    def own_stats(policy, train_batch):
        return {"own": torch.tensor(1.0)}

    mixed = build_policy_class(
        "Mixed2", "torch", loss_fn=pg_loss, postprocess_fn=centred_advantages, mixins=[MixinA]
    )
    hooked = mixed.with_updates(stats_fn=own_stats)

    class Sub(hooked):  # a user subclass gets its own table, made at its creation
        def extra_grad_info(self, train_batch):
            return {**super().extra_grad_info(train_batch), "sub": 1}

    assert mixed._dispatch["optimizer"] == (None, MixinA.optimizer)
    assert mixed._dispatch["extra_grad_info"] == (None, TorchPolicy.extra_grad_info)
    assert hooked._dispatch["extra_grad_info"] == (own_stats, None)
    assert Sub._dispatch["extra_grad_info"] == (own_stats, None) and "_dispatch" in vars(Sub)
    assert mixed._dispatch["postprocess_trajectory"] == (Policy.postprocess_trajectory, (centred_advantages,))

    def no_walk(*args, **kwargs):
        raise AssertionError("MRO walked after class creation")

    monkeypatch.setattr(policy_template, "_next_impl", no_walk)
    monkeypatch.setattr(policy_template, "_postprocess_chain", no_walk)
    p = Sub(OBS, ACT, dict(SMALL))
    assert p.mixin_optimizer_called
    p.compute_actions(np.zeros((2, 3), np.float32))
    out = p.learn_on_batch(p.postprocess_trajectory(_bandit_batch(p, 8)))
    assert out[LEARNER_STATS_KEY]["own"] == 1.0 and out[LEARNER_STATS_KEY]["sub"] == 1


# ------------------------------------------------------------------ errors
def _bad_model(policy, obs_space, action_space, config):
    return torch.nn.Linear(3, 2)


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        (("P", "jax"), {}, ValueError, "framework='jax' needs a JAX policy"),
        (("P", "tf"), {}, ValueError, r"framework='tf' is not supported; supported: \['torch'\]"),
        (
            ("P", "torch"),
            {"make_model": _bad_model, "make_model_and_action_dist": _bad_model},
            ValueError,
            "pass make_model or make_model_and_action_dist, not both",
        ),
        (("my policy", "torch"), {}, TypeError, "name must be a class name"),
        (("P", "torch"), {"mixins": ["notaclass"]}, TypeError, "mixins must be classes"),
    ],
)
def test_build_errors(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        build_policy_class(*args, loss_fn=pg_loss, **kwargs)


def test_model_factory_must_return_torch_modelv2():
    cls = build_policy_class("BadModel", "torch", loss_fn=pg_loss, make_model=_bad_model)
    with pytest.raises(TypeError, match="BadModel: the model factory returned Linear"):
        cls(OBS, ACT, dict(SMALL))


# ------------------------------------------------------------------ learning (CPU and fake GPUs)
BANDIT_OBS = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)


def _bandit_batch(policy, n, explore=True):
    obs = np.ones((n, policy.observation_space.shape[0]), np.float32)
    actions, _, _ = policy.compute_actions(obs, explore=explore)
    rewards = (np.asarray(actions) == 1).astype(np.float32)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: np.asarray(actions),
            SampleBatch.REWARDS: rewards,
            SampleBatch.DONES: np.ones(n, bool),
        }
    )


def _right_prob(policy):
    logits, _ = policy.model({"obs": torch.ones((1, 1))})
    return torch.softmax(logits, -1)[0, 1].item()


def _eval_loss(policy, eval_batch):
    with torch.no_grad():
        return pg_loss(
            policy, policy.model, policy.dist_class, policy._lazy_tensor_dict(eval_batch.copy())
        ).item()


def test_pg_policy_learns_bandit(device_config):
    torch.manual_seed(0)
    config = {"model": {"fcnet_hiddens": [16]}, "lr": 0.05, "seed": 0, **device_config}
    p = PGPolicy(BANDIT_OBS, ACT, config)
    assert len(p.devices) == max(1, device_config["num_gpus"])
    eval_batch = SampleBatch(
        {
            "obs": np.ones((2, 1), np.float32),
            "actions": np.array([0, 1]),
            "advantages": np.array([-1.0, 1.0], np.float32),
        }
    )
    start_p, start_loss = _right_prob(p), _eval_loss(p, eval_batch)
    assert abs(start_p - 0.5) < 0.1
    for _ in range(40):
        out = p.learn_on_batch(p.postprocess_trajectory(_bandit_batch(p, 64)))
    assert _right_prob(p) > 0.9 > start_p
    assert _eval_loss(p, eval_batch) < start_loss - 0.3
    assert "mean_adv" in out[LEARNER_STATS_KEY]


class NewStylePG(TorchPolicy):
    """The new style: subclass TorchPolicy and override loss()."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self._initialize_loss_from_dummy_batch()

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        return centred_advantages(self, sample_batch)

    def loss(self, model, dist_class, train_batch):
        return pg_loss(self, model, dist_class, train_batch)


def test_new_style_subclass_learns_and_prunes_view_requirements():
    torch.manual_seed(0)
    p = NewStylePG(BANDIT_OBS, ACT, {"model": {"fcnet_hiddens": [16]}, "lr": 0.05})
    assert "advantages" in p.view_requirements and "new_obs" not in p.view_requirements
    for _ in range(40):
        p.learn_on_batch(p.postprocess_trajectory(_bandit_batch(p, 64)))
    assert _right_prob(p) > 0.9


def test_built_policy_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    p = PGPolicy(BANDIT_OBS, ACT, {"model": {"fcnet_hiddens": [4]}, "lr": 0.05})
    for _ in range(2):
        p.learn_on_batch(p.postprocess_trajectory(_bandit_batch(p, 16)))
    p.export_checkpoint(str(tmp_path))
    q = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert type(q) is PGPolicy
    for name, w in p.get_weights().items():
        np.testing.assert_array_equal(q.get_weights()[name], w)
    opt_p, opt_q = p._optimizers[0].state_dict(), q._optimizers[0].state_dict()
    assert opt_q["param_groups"] == opt_p["param_groups"]
    for k, s in opt_p["state"].items():
        for field, v in s.items():
            np.testing.assert_array_equal(np.asarray(opt_q["state"][k][field]), np.asarray(v))
    assert _right_prob(q) == pytest.approx(_right_prob(p), abs=1e-6)


ACTION_SPACES = {
    "box": gym.spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32),
    "discrete": gym.spaces.Discrete(4),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 5]),
    "dict": gym.spaces.Dict(
        {"move": gym.spaces.Discrete(3), "aim": gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)}
    ),
    "tuple": gym.spaces.Tuple(
        [
            gym.spaces.Discrete(2),
            gym.spaces.MultiDiscrete([2, 2]),
            gym.spaces.Dict({"x": gym.spaces.Box(0.0, 1.0, (1,), np.float32)}),
        ]
    ),
}


@pytest.fixture(params=list(ACTION_SPACES))
def action_space(request):
    return ACTION_SPACES[request.param]


def test_torch_compute_single_action_has_the_space_structure(action_space):
    from rlpolicy.utils.spaces.space_utils import clip_action

    p = PGPolicy(OBS, action_space, dict(SMALL))
    action, state_out, info = p.compute_single_action(np.zeros(3, np.float32), explore=True)
    # Gaussian samples are not clipped here (the sampler clips), so clip before checking bounds.
    assert action_space.contains(clip_action(action, p.action_space_struct))
    flat_space = [s.shape for s in _leaves(action_space)]
    assert [np.shape(a) for a in _leaf_values(action, action_space)] == flat_space
    assert state_out == [] and np.shape(info["action_logp"]) == ()


def _leaves(space):
    if isinstance(space, gym.spaces.Dict):
        return [leaf for s in space.spaces.values() for leaf in _leaves(s)]
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for s in space.spaces for leaf in _leaves(s)]
    return [space]


def _leaf_values(value, space):
    if isinstance(space, gym.spaces.Dict):
        assert isinstance(value, dict) and set(value) == set(space.spaces)
        return [leaf for k, s in space.spaces.items() for leaf in _leaf_values(value[k], s)]
    if isinstance(space, gym.spaces.Tuple):
        assert isinstance(value, tuple) and len(value) == len(space.spaces)
        return [leaf for v, s in zip(value, space.spaces) for leaf in _leaf_values(v, s)]
    return [value]


def test_class_built_in_a_function_survives_cloudpickle():
    cloudpickle = pytest.importorskip("cloudpickle")
    import pickle

    def make():
        return build_policy_class(
            "Local", "torch", loss_fn=pg_loss, postprocess_fn=centred_advantages, mixins=[MixinB]
        )

    cls = pickle.loads(cloudpickle.dumps(make()))
    p = cls(OBS, ACT, dict(SMALL))
    assert type(p).__name__ == "Local" and p.what() == "B"
    out = p.learn_on_batch(p.postprocess_trajectory(_bandit_batch(p, 8)))
    assert LEARNER_STATS_KEY in out


def test_action_distribution_fn_hook_drives_acting():
    calls = []

    def dist_fn(
        policy,
        model,
        input_dict=None,
        state_batches=None,
        seq_lens=None,
        explore=None,
        timestep=None,
        is_training=False,
    ):
        calls.append((policy, model, explore))
        logits = torch.tensor([[0.0, 50.0]]).repeat(len(input_dict["obs"]), 1)  # always action 1
        return logits, policy.dist_class, []

    cls = build_policy_class(
        "DistFn", "torch", loss_fn=pg_loss, postprocess_fn=centred_advantages, action_distribution_fn=dist_fn
    )
    p = cls(OBS, ACT, dict(SMALL))
    assert calls and calls[0][0] is p and calls[0][1] is p.model and calls[0][2] is False  # dummy run
    assert p.compute_single_action(np.zeros(3, np.float32), explore=True)[0] == 1


def test_action_sampler_fn_hook_drives_acting():
    calls = []

    def sampler(policy, model, input_dict, state_batches, explore=None, timestep=None, **kwargs):
        calls.append((policy, model))
        n = len(input_dict["obs"])
        return torch.zeros(n, dtype=torch.int64), torch.zeros(n), []

    cls = build_policy_class(
        "Sampler", "torch", loss_fn=pg_loss, postprocess_fn=centred_advantages, action_sampler_fn=sampler
    )
    p = cls(OBS, ACT, dict(SMALL))
    assert calls and calls[0] == (p, p.model)
    assert p.compute_single_action(np.zeros(3, np.float32))[0] == 0


# ------------------------------------------------------------------ acting without autograd
def test_extra_action_out_runs_without_grad_whether_or_not_the_caller_turned_it_off():
    seen = []

    def extra(policy, input_dict, state_batches, model, action_dist):
        seen.append(torch.is_grad_enabled())
        return {"vf": model.value_function(), "twice": 2.0 * input_dict["obs"][:, 0]}

    cls = build_policy_class(
        "ExtraGrad", "torch", loss_fn=pg_loss, postprocess_fn=centred_advantages, extra_action_out_fn=extra
    )
    policy = cls(OBS, ACT, SMALL)
    obs = np.array([[0.5, -0.25, 0.0], [1.0, 0.0, -1.0]], np.float32)
    outs = []
    for grad_off in (False, True):  # the context-entering branch, then the one that needs none
        batch = policy._lazy_tensor_dict(SampleBatch({"obs": obs}))
        policy.model(batch)
        with torch.set_grad_enabled(not grad_off):
            outs.append(policy.extra_action_out(batch, [], policy.model, None))
            assert torch.is_grad_enabled() is not grad_off  # the caller's mode is kept
    assert seen[-2:] == [False, False]
    for out in outs:
        assert type(out["vf"]) is np.ndarray and out["vf"].shape == (2,)
        np.testing.assert_allclose(out["twice"], [1.0, 2.0], atol=1e-6)
    np.testing.assert_allclose(outs[0]["vf"], outs[1]["vf"], atol=1e-6)
