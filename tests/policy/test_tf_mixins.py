"""TF policy mixins in graph mode (own tf1.Graph + Session) and eagerly.

The hosts are small stand-ins for a TF policy (``get_session()``, ``config``,
``model``, ``on_global_var_update``), so each mixin is checked in isolation:
schedule values against hand-computed piecewise values, the KL rule against
hand-worked numbers, ``_value`` against a numpy forward pass, and
``update_target(tau)`` against ``tau * model + (1 - tau) * target``.
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy._core.defaults import MODEL_DEFAULTS  # noqa: E402
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.policy.tf_mixins import (  # noqa: E402
    EntropyCoeffSchedule,
    KLCoeffMixin,
    LearningRateSchedule,
    TargetNetworkMixin,
    ValueNetworkMixin,
)
from rlpolicy.utils.framework import get_keras, try_import_tf  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
MODEL = dict(MODEL_DEFAULTS, fcnet_hiddens=[4], fcnet_activation="tanh", vf_share_layers=False)
MODES = ("graph", pytest.param("eager", marks=pytest.mark.tf_eager_code))


class _Host:
    """The bits of a TF policy the mixins use."""

    def __init__(self, mode, config):
        self.config = dict(config)
        self.global_timestep = 0
        self._sess = None
        if mode == "graph":
            self._sess = tf1.Session(graph=tf1.Graph())
        self.framework = "tf" if mode == "graph" else "tf2"

    def get_session(self):
        return self._sess

    def on_global_var_update(self, global_vars):
        self.global_timestep = global_vars["timestep"]

    def get_state(self):
        return {"global_timestep": self.global_timestep}

    def set_state(self, state):
        self.global_timestep = state["global_timestep"]

    def variables(self):
        return self.model.variables()

    def read(self, var):
        return float(self._sess.run(var)) if self._sess is not None else float(var.numpy())

    def build_models(self, *names):
        def build():
            return [
                ModelCatalog.get_model_v2(OBS, ACT, 2, dict(MODEL), framework="tf", name=n) for n in names
            ]

        if self._sess is None:
            return build()
        with self._sess.graph.as_default():
            models = build()
            self._sess.run(tf1.global_variables_initializer())
        return models

    def weights(self, model):
        vs = model.variables()
        vals = self._sess.run(vs) if self._sess is not None else [v.numpy() for v in vs]
        # Keyed by "<layer>/<kernel|bias>:0" (the scope prefix differs by mode).
        return {"/".join(v.name.split("/")[-2:]): np.asarray(x) for v, x in zip(vs, vals)}


class Sched(LearningRateSchedule, EntropyCoeffSchedule, _Host):
    def __init__(self, mode, config, lr_schedule=None, ent_schedule=None):
        _Host.__init__(self, mode, config)
        LearningRateSchedule.__init__(self, config["lr"], lr_schedule)
        EntropyCoeffSchedule.__init__(self, config["entropy_coeff"], ent_schedule)


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


# ------------------------------------------------------------------ schedules


@pytest.mark.parametrize("timestep, lr", [(0, 1.0), (50, 0.55), (100, 0.1), (10_000, 0.1)])
def test_learning_rate_schedule_piecewise(mode, timestep, lr):
    host = Sched(mode, {"lr": 0.5, "entropy_coeff": 0.0}, lr_schedule=[[0, 1.0], [100, 0.1]])
    assert host.read(host.cur_lr) == pytest.approx(1.0, abs=1e-7)
    host.on_global_var_update({"timestep": timestep})
    assert host.global_timestep == timestep  # the base class still runs
    assert host.read(host.cur_lr) == pytest.approx(lr, rel=1e-6, abs=1e-7)


def test_constant_lr_and_entropy_coeff_without_schedules(mode):
    host = Sched(mode, {"lr": 0.25, "entropy_coeff": 0.3})
    host.on_global_var_update({"timestep": 1000})
    assert host.read(host.cur_lr) == pytest.approx(0.25, abs=1e-7)
    assert host.read(host.entropy_coeff) == pytest.approx(0.3, abs=1e-7)
    assert not host.cur_lr.trainable and host.cur_lr.dtype.base_dtype == tf.float32


@pytest.mark.parametrize(
    "schedule, timestep, expected",
    [
        ([[0, 0.5], [10, 0.1]], 5, 0.3),
        ([[0, 0.5], [10, 0.1]], 99, 0.1),  # outside: the last value
        (100, 25, 0.3),  # the older int form: 0.4 decays linearly to 0 at t=100
        (100, 500, 0.0),
    ],
)
def test_entropy_coeff_schedule(mode, schedule, timestep, expected):
    host = Sched(mode, {"lr": 0.1, "entropy_coeff": 0.4}, ent_schedule=schedule)
    assert host.read(host.entropy_coeff) == pytest.approx(0.4 if isinstance(schedule, int) else 0.5, abs=1e-7)
    host.on_global_var_update({"timestep": timestep})
    assert host.read(host.entropy_coeff) == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_graph_schedule_feeds_the_graph_and_the_default_optimizer():
    host = Sched("graph", {"lr": 0.5, "entropy_coeff": 0.0}, lr_schedule=[[0, 0.2], [10, 0.0]])
    with host.get_session().graph.as_default():
        doubled = host.cur_lr * 2.0  # an op built once, before the update
        opt = host.optimizer()
    assert isinstance(opt, tf1.train.AdamOptimizer)
    host.on_global_var_update({"timestep": 5})
    assert host.get_session().run(doubled) == pytest.approx(0.2, rel=1e-6, abs=1e-6)
    assert host.cur_lr.graph is host.get_session().graph


@pytest.mark.tf_eager_code
def test_eager_schedule_updates_the_optimizers_learning_rate():
    host = Sched("eager", {"lr": 0.5, "entropy_coeff": 0.0}, lr_schedule=[[0, 0.2], [10, 0.0]])
    host._optimizers = [get_keras().optimizers.SGD(learning_rate=0.2)]
    host.on_global_var_update({"timestep": 5})
    assert float(host._optimizers[0].learning_rate.numpy()) == pytest.approx(0.1, rel=1e-6, abs=1e-6)
    assert float(host.optimizer().learning_rate.numpy()) == pytest.approx(0.1, rel=1e-6, abs=1e-6)


def test_tower_copies_in_one_graph_share_the_schedule_variable():
    main = Sched("graph", {"lr": 0.5, "entropy_coeff": 0.0}, lr_schedule=[[0, 0.2], [10, 0.0]])
    main.on_global_var_update({"timestep": 5})
    tower = _Host("graph", {})
    tower._sess = main.get_session()
    LearningRateSchedule.__init__(tower, 0.2, [[0, 0.2], [10, 0.0]])
    assert tower.cur_lr is main.cur_lr
    assert main.read(main.cur_lr) == pytest.approx(0.1, rel=1e-6, abs=1e-6)  # not re-initialised


# ------------------------------------------------------------------ KL coefficient


class KL(KLCoeffMixin, _Host):
    def __init__(self, mode, config):
        _Host.__init__(self, mode, config)
        KLCoeffMixin.__init__(self, config)


@pytest.mark.parametrize(
    "sampled_kl, expected",
    [(0.05, 0.3), (0.0201, 0.3), (0.02, 0.2), (0.01, 0.2), (0.005, 0.2), (0.0049, 0.1)],
)
def test_kl_coeff_update_rule(mode, sampled_kl, expected):
    host = KL(mode, {"kl_coeff": 0.2, "kl_target": 0.01})
    assert host.update_kl(sampled_kl) == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert host.kl_coeff_val == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert host.read(host.kl_coeff) == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_kl_coeff_compounds_and_round_trips_through_state(mode):
    host = KL(mode, {"kl_coeff": 0.2, "kl_target": 0.01})
    for kl in (0.1, 0.1, 0.001):  # x1.5, x1.5, x0.5
        host.update_kl(kl)
    assert host.read(host.kl_coeff) == pytest.approx(0.2 * 1.5 * 1.5 * 0.5, rel=1e-6, abs=1e-6)
    state = host.get_state()
    assert state["current_kl_coeff"] == pytest.approx(0.225, rel=1e-6, abs=1e-6)
    other = KL(mode, {"kl_coeff": 0.2, "kl_target": 0.01})
    other.set_state(state)
    assert other.read(other.kl_coeff) == pytest.approx(0.225, rel=1e-6, abs=1e-6)
    assert "current_kl_coeff" in state  # set_state does not consume the caller's dict
    other.set_state({"global_timestep": 3})  # missing: back to config["kl_coeff"]
    assert other.kl_coeff_val == 0.2 and other.global_timestep == 3


def test_kl_coeff_set_state_changes_nothing_on_a_refused_state(mode):
    host = KL(mode, {"kl_coeff": 0.2, "kl_target": 0.01})
    host.update_kl(0.1)  # 0.3
    host.global_timestep = 7
    with pytest.raises(TypeError, match="current_kl_coeff"):
        host.set_state({"global_timestep": 9, "current_kl_coeff": "big"})
    with pytest.raises(TypeError, match="current_kl_coeff"):
        host.set_state({"global_timestep": 9, "current_kl_coeff": float("nan")})
    # The base refuses (the host's set_state needs "global_timestep"): the coefficient stays.
    with pytest.raises(KeyError):
        host.set_state({"current_kl_coeff": 0.9})
    assert host.global_timestep == 7 and host.kl_coeff_val == pytest.approx(0.3)
    assert host.read(host.kl_coeff) == pytest.approx(0.3, rel=1e-6)


# ------------------------------------------------------------------ value network


class Value(ValueNetworkMixin, _Host):
    __init__ = _Host.__init__


def _numpy_value(w, obs):
    hidden = np.tanh(obs @ w["fc_value_1/kernel:0"] + w["fc_value_1/bias:0"])
    return (hidden @ w["value_out/kernel:0"] + w["value_out/bias:0"])[:, 0]


@pytest.mark.parametrize("signature", ["rllib-tf", "torch-style"])
def test_value_matches_numpy_forward_pass(mode, signature):
    host = Value(mode, {"use_gae": True})
    (host.model,) = host.build_models("value_model")
    if signature == "rllib-tf":
        ValueNetworkMixin.__init__(host, OBS, ACT, host.config)
    else:
        ValueNetworkMixin.__init__(host, host.config)
    w = host.weights(host.model)
    for obs in (np.array([[0.1, -0.5, 0.9]], np.float32), np.array([[-1.0, 0.0, 0.3]], np.float32)):
        value = host._value(obs=obs)
        assert isinstance(value, float)
        assert value == pytest.approx(float(_numpy_value(w, obs.astype(np.float64))[0]), rel=1e-5, abs=1e-6)


def test_value_is_zero_without_gae(mode):
    host = Value(mode, {"use_gae": False})
    ValueNetworkMixin.__init__(host, host.config)
    assert host._value(obs=np.zeros((1, 3), np.float32)) == 0.0


def test_value_mixin_rejects_a_bad_signature():
    with pytest.raises(TypeError, match=r"ValueNetworkMixin.__init__ takes \(config\)"):
        ValueNetworkMixin.__init__(Value("eager", {}), OBS, {"use_gae": True})


# ------------------------------------------------------------------ target network


class Target(TargetNetworkMixin, _Host):
    __init__ = _Host.__init__


def _perturb(host, model, seed):
    rng = np.random.default_rng(seed)
    for v in model.variables():
        value = rng.normal(size=tuple(v.shape)).astype(np.float32)
        if host.get_session() is None:
            v.assign(value)
        else:
            with host.get_session().graph.as_default():
                v.load(value, host.get_session())


def test_update_target_soft_update_matches_formula(mode):
    host = Target(mode, {"tau": 0.25})
    host.model, host.target_model = host.build_models("main", "target")
    _perturb(host, host.target_model, 1)

    def values(model):  # in variables() order; graph mode uniquifies the layer names
        return list(host.weights(model).values())

    TargetNetworkMixin.__init__(host)  # hard sync
    old_target = values(host.model)
    for t, m in zip(values(host.target_model), old_target, strict=True):
        np.testing.assert_array_equal(t, m)
    _perturb(host, host.model, 2)
    new_main = values(host.model)
    host.update_target(0.3)
    mid = values(host.target_model)
    for t, m, o in zip(mid, new_main, old_target, strict=True):
        np.testing.assert_allclose(t, 0.3 * m + 0.7 * o, rtol=1e-6, atol=1e-7)
    host.update_target()  # config["tau"] = 0.25
    for t, m, o in zip(values(host.target_model), new_main, mid, strict=True):
        np.testing.assert_allclose(t, 0.25 * m + 0.75 * o, rtol=1e-6, atol=1e-7)
    names = {v.name for v in host.variables()}
    assert {v.name for v in host.target_model.variables()} <= names  # weights carry the target


def test_graph_update_target_before_variable_init_initialises_then_syncs():
    # As from before_loss_init: the policy has not initialised the variables yet.
    host = Target("graph", {})
    with host.get_session().graph.as_default():
        host.model = ModelCatalog.get_model_v2(OBS, ACT, 2, dict(MODEL), framework="tf", name="a")
        host.target_model = ModelCatalog.get_model_v2(OBS, ACT, 2, dict(MODEL), framework="tf", name="b")
    TargetNetworkMixin.__init__(host)
    for t, m in zip(host.weights(host.target_model).values(), host.weights(host.model).values(), strict=True):
        np.testing.assert_array_equal(t, m)


def test_update_target_errors():
    host = Target("eager", {})
    (host.model,) = host.build_models("only")
    with pytest.raises(ValueError, match="has no target_model"):
        host.update_target()
    small = dict(MODEL, fcnet_hiddens=[3])
    host.target_model = ModelCatalog.get_model_v2(OBS, ACT, 2, small, framework="tf", name="small")
    with pytest.raises(ValueError, match="has shape"):
        host.update_target()
