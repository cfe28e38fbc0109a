"""Default TF models (fcnet, visionnet, LSTM wrapper, complex input) in TF graph mode and eagerly.

Numbers are checked against plain-numpy re-computations (MLP, conv, LSTM)
from the models' own weights (set to random values first); variable
names/order are written out literally (RLlib 1.11's layout).
"""
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")
gym = pytest.importorskip("gymnasium")

from rlpolicy._core.defaults import MODEL_DEFAULTS  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()

from rlpolicy.models.tf.complex_input_net import ComplexInputNetwork  # noqa: E402
from rlpolicy.models.tf.fcnet import FullyConnectedNetwork  # noqa: E402
from rlpolicy.models.tf.recurrent_net import LSTMWrapper  # noqa: E402
from rlpolicy.models.tf import tf_modelv2 as tf_modelv2_module  # noqa: E402
from rlpolicy.models.tf.visionnet import VisionNetwork  # noqa: E402

OBS4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


class Runner:
    """Builds models and evaluates tensors in one TF mode ("graph": own tf1.Graph + Session)."""

    def __init__(self, mode):
        self.mode = mode
        self.graph = tf1.Graph() if mode == "graph" else None
        self.sess = tf1.Session(graph=self.graph) if mode == "graph" else None

    def build(self, fn):
        if self.graph is None:
            return fn()
        with self.graph.as_default():
            return fn()

    def model(self, cls, *args, **kwargs):
        model = self.build(lambda: cls(*args, **kwargs))
        if self.sess is not None:
            self.sess.run(self.build(lambda: tf1.variables_initializer(model.variables())))
        return model

    def get(self, variables):
        return self.sess.run(list(variables)) if self.sess is not None else [v.numpy() for v in variables]

    def randomize(self, model, seed=0, scale=0.5):
        """Sets every variable of ``model`` to random values; returns {name: value}."""
        rng = np.random.default_rng(seed)
        values = {v.name: (rng.normal(size=v.shape) * scale).astype(np.float32) for v in model.variables()}
        self.assign(model.variables(), [values[v.name] for v in model.variables()])
        return values

    def assign(self, variables, values):
        if self.sess is None:
            for v, x in zip(variables, values):
                v.assign(x)
        else:
            with self.graph.as_default():
                self.sess.run([tf1.assign(v, x) for v, x in zip(variables, values)])

    def call(self, model, inputs, state=None, seq_lens=None):
        """Calls the model (placeholders with a free batch dim in graph mode); returns numpy."""
        if self.sess is None:
            out, st = model({k: tf.constant(v) for k, v in inputs.items()},
                            [tf.constant(s) for s in state or []],
                            None if seq_lens is None else tf.constant(seq_lens))
            return out.numpy(), [s.numpy() for s in st], _value_or_none(model)
        feed = {}

        def ph(x):
            p = tf1.placeholder(tf.as_dtype(x.dtype), [None] + list(x.shape[1:]))
            feed[p] = x
            return p

        with self.graph.as_default():
            out, st = model({k: ph(v) for k, v in inputs.items()}, [ph(s) for s in state or []],
                            None if seq_lens is None else ph(seq_lens))
            value = _value_or_none(model)
        fetches = [out, st] + ([value] if value is not None else [])
        res = self.sess.run(fetches, feed)
        return res[0], res[1], (res[2] if value is not None else None)


def _value_or_none(model):
    try:
        return model.value_function()
    except ValueError:
        return None


@pytest.fixture(params=["graph", "eager"])
def rt(request):
    runner = Runner(request.param)
    yield runner
    if runner.sess is not None:
        runner.sess.close()


def cfg(**overrides):
    return dict(MODEL_DEFAULTS, **overrides)


def np_act(name):
    return {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0), None: lambda x: x}[name]


def dense(w, name, x, act=None):
    return np_act(act)(x @ w[name + "/kernel:0"] + w[name + "/bias:0"])


def strip_scope(values):
    return {k.split("/", 1)[1] if k.startswith("default_policy/") else k: v for k, v in values.items()}


# ------------------------------------------------------------------ fcnet


@pytest.mark.parametrize("action_space, num_outputs", [
    (gym.spaces.Discrete(3), 3),
    (gym.spaces.MultiDiscrete([2, 3]), 5),
    (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), 4),
    (gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (3,), np.float32)]), 8),
])
def test_fcnet_output_shapes_per_action_space(rt, action_space, num_outputs):
    model = rt.model(FullyConnectedNetwork, OBS4, action_space, num_outputs, cfg(fcnet_hiddens=[8]), "m")
    out, state, value = rt.call(model, {"obs": np.ones((5, 4), np.float32)})
    assert out.shape == (5, num_outputs) and value.shape == (5,) and state == []


@pytest.mark.parametrize("obs_space", [
    gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32),
    gym.spaces.Box(-1.0, 1.0, (6,), np.float64),
])
def test_fcnet_flattens_multi_dim_observations(rt, obs_space):
    model = rt.model(FullyConnectedNetwork, obs_space, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[4]), "m")
    w = rt.randomize(model)
    obs = np.random.default_rng(1).normal(size=(3,) + obs_space.shape).astype(np.float32)
    out, _, _ = rt.call(model, {"obs": obs})
    expected = dense(w, "fc_out", dense(w, "fc_1", obs.reshape(3, 6), "tanh"))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


FC_CONFIGS = {
    "shared": cfg(fcnet_hiddens=[5, 6], fcnet_activation="tanh", vf_share_layers=True),
    "separate-vf-relu": cfg(fcnet_hiddens=[5, 6], fcnet_activation="relu", vf_share_layers=False),
    "no-final-linear": cfg(fcnet_hiddens=[5, 6], no_final_linear=True, vf_share_layers=True),
    "free-log-std": cfg(fcnet_hiddens=[5], free_log_std=True, vf_share_layers=True),
    "post-fcnet-only": cfg(fcnet_hiddens=[], post_fcnet_hiddens=[7], post_fcnet_activation="relu"),
}


def fc_reference(w, c, obs):
    """numpy forward pass of RLlib's fcnet layout for config ``c``."""
    hiddens = list(c["fcnet_hiddens"]) + list(c.get("post_fcnet_hiddens", []))
    act = c["fcnet_activation"] if c["fcnet_hiddens"] else c["post_fcnet_activation"]
    x = obs
    for i in range(1, len(hiddens) + (0 if c.get("no_final_linear") else 1)):
        x = dense(w, f"fc_{i}", x, act)
    if c.get("no_final_linear"):
        logits, features = dense(w, "fc_out", x, act), x
    else:
        logits, features = dense(w, "fc_out", x), x
    if c.get("free_log_std"):
        logits = np.concatenate([logits, np.tile(w["log_std:0"], (len(obs), 1))], axis=1)
    if not c.get("vf_share_layers"):
        features = obs
        for i in range(1, len(hiddens) + 1):
            features = dense(w, f"fc_value_{i}", features, act)
    return logits, dense(w, "value_out", features)[:, 0]


@pytest.mark.parametrize("name", list(FC_CONFIGS))
def test_fcnet_matches_numpy_mlp(rt, name):
    c = FC_CONFIGS[name]
    model = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Box(-1, 1, (2,)), 4, dict(c), "m")
    w = rt.randomize(model)
    obs = np.random.default_rng(2).normal(size=(6, 4)).astype(np.float32)
    out, _, value = rt.call(model, {"obs": obs})
    ref_logits, ref_value = fc_reference(w, c, obs)
    np.testing.assert_allclose(out, ref_logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-6)


def test_fcnet_variable_names_and_order_in_graph_scope():
    rt = Runner("graph")
    c = cfg(fcnet_hiddens=[5, 6], vf_share_layers=False, free_log_std=True)
    with rt.graph.as_default(), tf1.variable_scope("default_policy"):
        model = FullyConnectedNetwork(OBS4, gym.spaces.Box(-1, 1, (2,)), 4, c, "m")
    assert [(v.name, tuple(v.shape)) for v in model.variables()] == [
        ("default_policy/log_std:0", (2,)),
        ("default_policy/fc_1/kernel:0", (4, 5)), ("default_policy/fc_1/bias:0", (5,)),
        ("default_policy/fc_2/kernel:0", (5, 6)), ("default_policy/fc_2/bias:0", (6,)),
        ("default_policy/fc_value_1/kernel:0", (4, 5)), ("default_policy/fc_value_1/bias:0", (5,)),
        ("default_policy/fc_out/kernel:0", (6, 2)), ("default_policy/fc_out/bias:0", (2,)),
        ("default_policy/fc_value_2/kernel:0", (5, 6)), ("default_policy/fc_value_2/bias:0", (6,)),
        ("default_policy/value_out/kernel:0", (6, 1)), ("default_policy/value_out/bias:0", (1,)),
    ]
    assert list(model.variables(as_dict=True))[:3] == [
        "log_std_var", "base_model.default_policy.fc_1.kernel:0", "base_model.default_policy.fc_1.bias:0"]


@pytest.mark.parametrize("vf_share_layers, expected", [
    (True, ["fc_1/kernel:0", "fc_1/bias:0", "fc_2/kernel:0", "fc_2/bias:0", "fc_out/kernel:0", "fc_out/bias:0",
            "value_out/kernel:0", "value_out/bias:0"]),
    (False, ["fc_1/kernel:0", "fc_1/bias:0", "fc_value_1/kernel:0", "fc_value_1/bias:0", "fc_2/kernel:0",
             "fc_2/bias:0", "fc_value_2/kernel:0", "fc_value_2/bias:0", "fc_out/kernel:0", "fc_out/bias:0",
             "value_out/kernel:0", "value_out/bias:0"]),
])
def test_fcnet_variable_order(rt, vf_share_layers, expected):
    c = cfg(fcnet_hiddens=[5, 6], vf_share_layers=vf_share_layers)
    model = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, c, "m")
    assert [v.name for v in model.variables()] == expected
    assert [v.name for v in model.trainable_variables()] == expected
    assert list(model.trainable_variables(as_dict=True)) == ["base_model." + n.replace("/", ".") for n in expected]


def test_fcnet_without_num_outputs_exposes_last_hidden(rt):
    model = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), None, cfg(fcnet_hiddens=[5, 3]), "m")
    assert model.num_outputs == 3
    w = rt.randomize(model)
    obs = np.ones((2, 4), np.float32)
    out, _, _ = rt.call(model, {"obs": obs})
    np.testing.assert_allclose(out, dense(w, "fc_2", dense(w, "fc_1", obs, "tanh"), "tanh"), rtol=1e-5)


def test_fcnet_initial_weights_are_normc():
    np.random.seed(0)
    model = FullyConnectedNetwork(OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[16]), "m")
    w = {v.name: v.numpy() for v in model.variables()}
    np.testing.assert_allclose(np.linalg.norm(w["fc_1/kernel:0"], axis=0), 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(w["fc_out/kernel:0"], axis=0), 0.01, rtol=1e-5)
    assert not w["fc_1/bias:0"].any()


def test_graph_and_eager_fcnet_agree_with_same_weights():
    c = cfg(fcnet_hiddens=[5, 6], vf_share_layers=False)
    graph_rt, eager_rt = Runner("graph"), Runner("eager")
    g_model = graph_rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(3), 3, dict(c), "m")
    e_model = eager_rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(3), 3, dict(c), "m")
    graph_rt.randomize(g_model, seed=5)
    eager_rt.assign(e_model.variables(), graph_rt.get(g_model.variables()))
    obs = np.random.default_rng(3).normal(size=(4, 4)).astype(np.float32)
    g_out, _, g_val = graph_rt.call(g_model, {"obs": obs})
    e_out, _, e_val = eager_rt.call(e_model, {"obs": obs})
    np.testing.assert_allclose(g_out, e_out, rtol=1e-6)
    np.testing.assert_allclose(g_val, e_val, rtol=1e-6)


@pytest.mark.parametrize("num_outputs", [3, None])
def test_fcnet_free_log_std_needs_even_num_outputs(num_outputs):
    with pytest.raises(ValueError, match=f"even num_outputs .*got num_outputs={num_outputs}"):
        FullyConnectedNetwork(OBS4, gym.spaces.Box(-1, 1, (2,)), num_outputs, cfg(free_log_std=True), "m")


@pytest.mark.parametrize("bad_shape, shown", [((2, 5), r"\[2, 5\]"), ((2, 2, 2), r"\[2, 2, 2\]")])
def test_fcnet_rejects_wrong_observation_shape(bad_shape, shown):
    model = FullyConnectedNetwork(OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[3]), "m")
    with pytest.raises(ValueError, match=rf"flat observation has shape {shown} but the model expects \[batch\] \+ \[4\]"):
        model.forward({"obs_flat": tf.zeros(bad_shape)}, [], None)
    with pytest.raises(ValueError, match="shape"):
        model({"obs": tf.zeros((2, 5))})


def test_fcnet_rejects_wrong_observation_shape_in_graph():
    rt = Runner("graph")
    model = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[3]), "m")
    with rt.graph.as_default(), pytest.raises(ValueError, match=r"has shape \['\?', 7\] .* \[batch\] \+ \[4\]"):
        model.forward({"obs_flat": tf1.placeholder(tf.float32, [None, 7])}, [], None)


# --------------------------------------------------------------- base class


def test_context_variables_and_register_variables(monkeypatch):
    rt = Runner("graph")
    model = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[3]), "m")
    assert model.graph is rt.graph and model.update_ops() == []
    with model.context():
        assert tf1.get_default_graph() is rt.graph
    eager_model = FullyConnectedNetwork(OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[3]), "m")
    assert eager_model.graph is None
    extra = tf.Variable([1.0], name="extra")
    monkeypatch.setattr(tf_modelv2_module, "_warned_register_variables", False)
    with pytest.warns(DeprecationWarning, match="register_variables"):
        eager_model.register_variables([extra])
    assert eager_model.variables() == [extra] and eager_model.variables(as_dict=True) == {"extra:0": extra}


def test_import_from_h5_round_trip(rt, tmp_path):
    pytest.importorskip("h5py")
    c = cfg(fcnet_hiddens=[5])
    src = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, dict(c), "src")
    rt.randomize(src, seed=7)
    dst = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, dict(c), "dst")
    path = str(tmp_path / "weights.h5")
    if rt.sess is None:
        src.base_model.save_weights(path)
        dst.import_from_h5(path)
    else:
        with rt.graph.as_default(), rt.sess.as_default():
            src.base_model.save_weights(path)
            dst.import_from_h5(path)
    for a, b in zip(rt.get(src.variables()), rt.get(dst.variables())):
        np.testing.assert_array_equal(a, b)


def test_import_from_h5_needs_a_single_keras_model():
    model = LSTMWrapper(OBS4, gym.spaces.Discrete(2), 2, cfg(lstm_cell_size=3), "l")
    model.extra_model = model._rnn_model
    with pytest.raises(NotImplementedError, match=r"holds 2 Keras models \(_rnn_model, extra_model\)"):
        model.import_from_h5("x.h5")


def test_tf_package_import_is_light():
    code = "import sys, rlpolicy.models.tf; assert 'tensorflow' not in sys.modules; print('ok')"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "ok", res.stderr
