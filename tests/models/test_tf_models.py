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

from rlpolicy.models.tf import tf_modelv2 as tf_modelv2_module  # noqa: E402
from rlpolicy.models.tf.complex_input_net import ComplexInputNetwork  # noqa: E402
from rlpolicy.models.tf.fcnet import FullyConnectedNetwork  # noqa: E402
from rlpolicy.models.tf.recurrent_net import LSTMWrapper  # noqa: E402
from rlpolicy.models.tf.visionnet import VisionNetwork  # noqa: E402

pytestmark = pytest.mark.tf

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
            out, st = model(
                tf.nest.map_structure(tf.constant, inputs),
                [tf.constant(s) for s in state or []],
                None if seq_lens is None else tf.constant(seq_lens),
            )
            return out.numpy(), [s.numpy() for s in st], _value_or_none(model)
        feed = {}

        def ph(x):
            p = tf1.placeholder(tf.as_dtype(x.dtype), [None] + list(x.shape[1:]))
            feed[p] = x
            return p

        with self.graph.as_default():
            out, st = model(
                tf.nest.map_structure(ph, inputs),
                [ph(s) for s in state or []],
                None if seq_lens is None else ph(seq_lens),
            )
            value = _value_or_none(model)
        fetches = [out, st] + ([value] if value is not None else [])
        res = self.sess.run(fetches, feed)
        return res[0], res[1], (res[2] if value is not None else None)


def _value_or_none(model):
    try:
        return model.value_function()
    except ValueError:
        return None


@pytest.fixture(params=["graph", pytest.param("eager", marks=pytest.mark.tf_eager_code)])
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


@pytest.mark.parametrize(
    "action_space, num_outputs",
    [
        (gym.spaces.Discrete(3), 3),
        (gym.spaces.MultiDiscrete([2, 3]), 5),
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), 4),
        (gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (3,), np.float32)]), 8),
    ],
)
def test_fcnet_output_shapes_per_action_space(rt, action_space, num_outputs):
    model = rt.model(FullyConnectedNetwork, OBS4, action_space, num_outputs, cfg(fcnet_hiddens=[8]), "m")
    out, state, value = rt.call(model, {"obs": np.ones((5, 4), np.float32)})
    assert out.shape == (5, num_outputs) and value.shape == (5,) and state == []


@pytest.mark.parametrize(
    "obs_space",
    [
        gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32),
        gym.spaces.Box(-1.0, 1.0, (6,), np.float64),
    ],
)
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
        ("default_policy/fc_1/kernel:0", (4, 5)),
        ("default_policy/fc_1/bias:0", (5,)),
        ("default_policy/fc_2/kernel:0", (5, 6)),
        ("default_policy/fc_2/bias:0", (6,)),
        ("default_policy/fc_value_1/kernel:0", (4, 5)),
        ("default_policy/fc_value_1/bias:0", (5,)),
        ("default_policy/fc_out/kernel:0", (6, 2)),
        ("default_policy/fc_out/bias:0", (2,)),
        ("default_policy/fc_value_2/kernel:0", (5, 6)),
        ("default_policy/fc_value_2/bias:0", (6,)),
        ("default_policy/value_out/kernel:0", (6, 1)),
        ("default_policy/value_out/bias:0", (1,)),
    ]
    assert list(model.variables(as_dict=True))[:3] == [
        "log_std_var",
        "base_model.default_policy.fc_1.kernel:0",
        "base_model.default_policy.fc_1.bias:0",
    ]


@pytest.mark.parametrize(
    "vf_share_layers, expected",
    [
        (
            True,
            [
                "fc_1/kernel:0",
                "fc_1/bias:0",
                "fc_2/kernel:0",
                "fc_2/bias:0",
                "fc_out/kernel:0",
                "fc_out/bias:0",
                "value_out/kernel:0",
                "value_out/bias:0",
            ],
        ),
        (
            False,
            [
                "fc_1/kernel:0",
                "fc_1/bias:0",
                "fc_value_1/kernel:0",
                "fc_value_1/bias:0",
                "fc_2/kernel:0",
                "fc_2/bias:0",
                "fc_value_2/kernel:0",
                "fc_value_2/bias:0",
                "fc_out/kernel:0",
                "fc_out/bias:0",
                "value_out/kernel:0",
                "value_out/bias:0",
            ],
        ),
    ],
)
def test_fcnet_variable_order(rt, vf_share_layers, expected):
    c = cfg(fcnet_hiddens=[5, 6], vf_share_layers=vf_share_layers)
    model = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, c, "m")
    assert [v.name for v in model.variables()] == expected
    assert [v.name for v in model.trainable_variables()] == expected
    assert list(model.trainable_variables(as_dict=True)) == [
        "base_model." + n.replace("/", ".") for n in expected
    ]


def test_fcnet_without_num_outputs_exposes_last_hidden(rt):
    model = rt.model(
        FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), None, cfg(fcnet_hiddens=[5, 3]), "m"
    )
    assert model.num_outputs == 3
    w = rt.randomize(model)
    obs = np.ones((2, 4), np.float32)
    out, _, _ = rt.call(model, {"obs": obs})
    np.testing.assert_allclose(
        out, dense(w, "fc_2", dense(w, "fc_1", obs, "tanh"), "tanh"), rtol=1e-5, atol=1e-6
    )


@pytest.mark.tf_eager_code
def test_fcnet_initial_weights_are_normc():
    np.random.seed(0)
    model = FullyConnectedNetwork(OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[16]), "m")
    w = {v.name: v.numpy() for v in model.variables()}
    np.testing.assert_allclose(np.linalg.norm(w["fc_1/kernel:0"], axis=0), 1.0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(w["fc_out/kernel:0"], axis=0), 0.01, rtol=1e-5, atol=1e-7)
    assert not w["fc_1/bias:0"].any()


@pytest.mark.tf_eager_code
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
    np.testing.assert_allclose(g_out, e_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(g_val, e_val, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("num_outputs", [3, None])
def test_fcnet_free_log_std_needs_even_num_outputs(num_outputs):
    with pytest.raises(ValueError, match=f"even num_outputs .*got num_outputs={num_outputs}"):
        FullyConnectedNetwork(OBS4, gym.spaces.Box(-1, 1, (2,)), num_outputs, cfg(free_log_std=True), "m")


@pytest.mark.parametrize("bad_shape, shown", [((2, 5), r"\[2, 5\]"), ((2, 2, 2), r"\[2, 2, 2\]")])
def test_fcnet_rejects_wrong_observation_shape(bad_shape, shown):
    model = FullyConnectedNetwork(OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[3]), "m")
    expected = rf"flat observation has shape {shown} but the model expects \[batch\] \+ \[4\]"
    with pytest.raises(ValueError, match=expected):
        model.forward({"obs_flat": tf.zeros(bad_shape)}, [], None)
    with pytest.raises(ValueError, match="shape"):
        model({"obs": tf.zeros((2, 5))})


def test_fcnet_rejects_wrong_observation_shape_in_graph():
    rt = Runner("graph")
    model = rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[3]), "m")
    with (
        rt.graph.as_default(),
        pytest.raises(ValueError, match=r"has shape \['\?', 7\] .* \[batch\] \+ \[4\]"),
    ):
        model.forward({"obs_flat": tf1.placeholder(tf.float32, [None, 7])}, [], None)


# --------------------------------------------------------------- base class


@pytest.mark.tf_eager_code
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
    model = FullyConnectedNetwork(OBS4, gym.spaces.Discrete(2), 2, cfg(fcnet_hiddens=[3]), "m")
    model.extra_model = model.base_model
    with pytest.raises(NotImplementedError, match=r"holds 2 Keras models \(base_model, extra_model\)"):
        model.import_from_h5("x.h5")


def test_tf_package_import_is_light():
    code = "import sys, rlpolicy.models.tf; assert 'tensorflow' not in sys.modules; print('ok')"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "ok", res.stderr


@pytest.mark.tf_eager_code
def test_graph_and_eager_models_can_be_interleaved():
    # tf_keras rewrites layer base classes per build mode; calls must still work afterwards.
    c = cfg(fcnet_hiddens=[3])
    graph_rt, eager_rt = Runner("graph"), Runner("eager")
    g1 = graph_rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, dict(c), "g1")
    e1 = eager_rt.model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, dict(c), "e1")
    obs = np.ones((2, 4), np.float32)
    w_g, w_e = graph_rt.randomize(g1), eager_rt.randomize(e1, seed=1)
    np.testing.assert_allclose(
        graph_rt.call(g1, {"obs": obs})[0], fc_reference(w_g, c, obs)[0], rtol=1e-5, atol=1e-6
    )
    Runner("graph").model(FullyConnectedNetwork, OBS4, gym.spaces.Discrete(2), 2, dict(c), "g2")
    np.testing.assert_allclose(
        eager_rt.call(e1, {"obs": obs})[0], fc_reference(w_e, c, obs)[0], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        graph_rt.call(g1, {"obs": obs})[0], fc_reference(w_g, c, obs)[0], rtol=1e-5, atol=1e-6
    )


# --------------------------------------------------------------- visionnet

SMALL_FILTERS = [[4, [3, 3], 1], [2, [4, 4], 1]]
IMG = gym.spaces.Box(0.0, 1.0, (4, 4, 2), np.float32)


def conv_ref(x, k, b, padding):
    """Stride-1 NHWC convolution (odd kernels for "same")."""
    kh, kw = k.shape[:2]
    if padding == "same":
        x = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    out_h, out_w = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], out_h, out_w, k.shape[3]))
    for i in range(out_h):
        for j in range(out_w):
            out[:, i, j] = np.einsum("bhwc,hwco->bo", x[:, i : i + kh, j : j + kw], k)
    return out + b


def vision_reference(w, img, prefix=""):
    relu = np_act("relu")
    h = relu(conv_ref(img, w[prefix + "conv1/kernel:0"], w[prefix + "conv1/bias:0"], "same"))
    return relu(conv_ref(h, w[prefix + "conv2/kernel:0"], w[prefix + "conv2/bias:0"], "valid"))


def test_visionnet_matches_numpy_convs(rt):
    model = rt.model(VisionNetwork, IMG, gym.spaces.Discrete(3), 3, cfg(conv_filters=SMALL_FILTERS), "v")
    w = rt.randomize(model)
    img = np.random.default_rng(4).uniform(size=(3, 4, 4, 2)).astype(np.float32)
    out, _, value = rt.call(model, {"obs": img})
    features = vision_reference(w, img)
    logits = conv_ref(features, w["conv_out/kernel:0"], w["conv_out/bias:0"], "valid")[:, 0, 0]
    np.testing.assert_allclose(out, logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, dense(w, "value_out", features[:, 0, 0])[:, 0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "vf_share_layers, expected",
    [
        (
            True,
            [
                "conv1/kernel:0",
                "conv1/bias:0",
                "conv2/kernel:0",
                "conv2/bias:0",
                "conv_out/kernel:0",
                "conv_out/bias:0",
                "value_out/kernel:0",
                "value_out/bias:0",
            ],
        ),
        (
            False,
            [
                "conv_value_1/kernel:0",
                "conv_value_1/bias:0",
                "conv1/kernel:0",
                "conv1/bias:0",
                "conv_value_2/kernel:0",
                "conv_value_2/bias:0",
                "conv2/kernel:0",
                "conv2/bias:0",
                "conv_value_out/kernel:0",
                "conv_value_out/bias:0",
                "conv_out/kernel:0",
                "conv_out/bias:0",
            ],
        ),
    ],
)
def test_visionnet_default_filters_layout_and_shapes(rt, vf_share_layers, expected):
    space = gym.spaces.Box(0.0, 1.0, (10, 10, 3), np.float32)
    model_config = cfg(conv_filters=None, vf_share_layers=vf_share_layers)
    model = rt.model(VisionNetwork, space, gym.spaces.Discrete(5), 5, model_config, "v")
    assert model_config["conv_filters"] == [[16, [5, 5], 2], [32, [5, 5], 2]]  # written back, as RLlib does
    assert [v.name for v in model.variables()] == expected
    out, _, value = rt.call(model, {"obs": np.zeros((2, 10, 10, 3), np.float32)})
    assert out.shape == (2, 5) and value.shape == (2,)


def test_visionnet_without_num_outputs_flattens(rt):
    model = rt.model(VisionNetwork, IMG, gym.spaces.Discrete(3), None, cfg(conv_filters=SMALL_FILTERS), "v")
    assert model.num_outputs == 2 and model.last_layer_is_flattened
    w = rt.randomize(model)
    img = np.random.default_rng(5).uniform(size=(2, 4, 4, 2)).astype(np.float32)
    out, _, _ = rt.call(model, {"obs": img})
    np.testing.assert_allclose(out, vision_reference(w, img)[:, 0, 0], rtol=1e-4, atol=1e-5)


def test_visionnet_errors():
    with pytest.raises(ValueError, match=r"into \[None, 3, 3, 3\], not \[B, 1, 1, 3\]"):
        VisionNetwork(IMG, gym.spaces.Discrete(3), 3, cfg(conv_filters=[[4, [3, 3], 1], [2, [2, 2], 1]]), "v")
    # No RLlib default for 7x7: a computed stack (models.utils.default_filter_config) is used.
    model = VisionNetwork(
        gym.spaces.Box(0, 1, (7, 7, 1)), gym.spaces.Discrete(3), 3, cfg(conv_filters=None), "v"
    )
    out, _ = model({"obs": np.zeros((2, 7, 7, 1), np.float32)})
    assert tuple(out.shape) == (2, 3)
    model = VisionNetwork(IMG, gym.spaces.Discrete(3), 3, cfg(conv_filters=SMALL_FILTERS), "v")
    with pytest.raises(
        ValueError, match=r"image observation has shape \[2, 4, 4, 3\] .* \[batch\] \+ \[4, 4, 2\]"
    ):
        model.forward({"obs": tf.zeros((2, 4, 4, 3))}, [], None)


# ------------------------------------------------------------ LSTM wrapper

CELL = 3
LSTM_CFG = dict(fcnet_hiddens=[5], lstm_cell_size=CELL, max_seq_len=4)


def lstm_class(base):
    """What the catalog builds for use_lstm=True."""
    cls = type(f"{base.__name__}_as_LSTMWrapper", (LSTMWrapper, base), {})
    cls._wrapped_forward = base.forward
    return cls


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_reference(w, x, h, c, seq_lens):
    """Keras LSTM (gates i, f, c, o) over x [B, T, n] with masking; returns (outputs, h, c)."""
    outs = np.zeros(x.shape[:2] + (h.shape[1],))
    for t in range(x.shape[1]):
        z = x[:, t] @ w["lstm/lstm_cell/kernel:0"] + h @ w["lstm/lstm_cell/recurrent_kernel:0"]
        i, f, g, o = np.split(z + w["lstm/lstm_cell/bias:0"], 4, axis=1)
        c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h_new = sigmoid(o) * np.tanh(c_new)
        valid = (t < seq_lens)[:, None]
        h, c = np.where(valid, h_new, h), np.where(valid, c_new, c)
        outs[:, t] = h_new
    return outs, h, c


@pytest.fixture(scope="module", params=["graph", pytest.param("eager", marks=pytest.mark.tf_eager_code)])
def lstm(request):
    """(runner, model): one LSTM-wrapped fcnet per mode (building a Keras LSTM is slow)."""
    runner = Runner(request.param)
    c = cfg(lstm_use_prev_action=True, lstm_use_prev_reward=True, **LSTM_CFG)
    yield runner, runner.model(lstm_class(FullyConnectedNetwork), OBS4, gym.spaces.Discrete(3), 2, c, "l")
    if runner.sess is not None:
        runner.sess.close()


def lstm_inputs(rng, n):
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "prev_actions": rng.integers(0, 3, n),
        "prev_rewards": rng.normal(size=n).astype(np.float32),
    }


def test_lstm_wrapper_matches_numpy_with_prev_action_reward_and_masking(lstm):
    rt, model = lstm
    w = rt.randomize(model)
    rng = np.random.default_rng(6)
    B, T = 2, 3
    inputs = lstm_inputs(rng, B * T)
    h0, c0 = rng.normal(size=(B, CELL)).astype(np.float32), rng.normal(size=(B, CELL)).astype(np.float32)
    seq_lens = np.array([3, 2], np.int32)
    out, (h, c_out), value = rt.call(model, inputs, [h0, c0], seq_lens)
    lstm_in = np.concatenate(
        [
            dense(w, "fc_1", inputs["obs"], "tanh"),
            np.eye(3)[inputs["prev_actions"]],
            inputs["prev_rewards"][:, None],
        ],
        1,
    )
    ref_out, ref_h, ref_c = lstm_reference(w, lstm_in.reshape(B, T, -1), h0, c0, seq_lens)
    valid = (np.arange(T)[None] < seq_lens[:, None]).reshape(-1)
    ref_out = ref_out.reshape(B * T, CELL)
    np.testing.assert_allclose(out[valid], dense(w, "logits", ref_out)[valid], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value[valid], dense(w, "values", ref_out)[valid, 0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h, ref_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c_out, ref_c, rtol=1e-4, atol=1e-5)


def test_lstm_whole_sequence_equals_step_by_step(lstm):
    rt, model = lstm
    rt.randomize(model, seed=3)
    B, T = 2, 3
    inputs = lstm_inputs(np.random.default_rng(7), B * T)
    state = [np.tile(s, (B, 1)) for s in model.get_initial_state()]
    whole, whole_state, _ = rt.call(model, inputs, state, np.full(B, T, np.int32))
    steps = []
    for t in range(T):
        step_inputs = {k: v.reshape((B, T) + v.shape[1:])[:, t] for k, v in inputs.items()}
        out, state, _ = rt.call(model, step_inputs, state, np.ones(B, np.int32))
        steps.append(out)
    np.testing.assert_allclose(whole.reshape(B, T, 2), np.stack(steps, 1), rtol=1e-5, atol=1e-6)
    for a, b in zip(whole_state, state):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_lstm_layout_initial_state_and_view_requirements(lstm):
    rt, model = lstm
    assert [(v.name, tuple(v.shape)) for v in model.variables()] == [
        ("fc_1/kernel:0", (4, 5)),
        ("fc_1/bias:0", (5,)),
        ("value_out/kernel:0", (5, 1)),
        ("value_out/bias:0", (1,)),
        ("lstm/lstm_cell/kernel:0", (5 + 3 + 1, 4 * CELL)),
        ("lstm/lstm_cell/recurrent_kernel:0", (CELL, 4 * CELL)),
        ("lstm/lstm_cell/bias:0", (4 * CELL,)),
        ("logits/kernel:0", (CELL, 2)),
        ("logits/bias:0", (2,)),
        ("values/kernel:0", (CELL, 1)),
        ("values/bias:0", (1,)),
    ]
    init = model.get_initial_state()
    assert len(init) == 2 and all(s.shape == (CELL,) and s.dtype == np.float32 and not s.any() for s in init)
    vr = model.view_requirements
    assert sorted(vr) == [
        "obs",
        "prev_actions",
        "prev_rewards",
        "state_in_0",
        "state_in_1",
        "state_out_0",
        "state_out_1",
    ]
    assert (vr["prev_actions"].data_col, vr["prev_actions"].shift) == ("actions", -1)
    assert (vr["prev_rewards"].data_col, vr["prev_rewards"].shift) == ("rewards", -1)
    assert (vr["state_in_1"].data_col, vr["state_in_1"].shift, vr["state_in_1"].batch_repeat_value) == (
        "state_out_1",
        -1,
        4,
    )
    assert vr["state_out_0"].space.shape == (CELL,)


def test_lstm_wrapper_errors(lstm):
    rt, model = lstm
    state = [np.zeros((1, CELL), np.float32)] * 2
    inputs = lstm_inputs(np.random.default_rng(0), 1)
    with pytest.raises(ValueError, match="seq_lens is required"):
        rt.build(lambda: model.forward(tf.nest.map_structure(tf.constant, inputs), state, None))
    del inputs["prev_rewards"]
    with pytest.raises(ValueError, match="input_dict has no 'prev_rewards' column"):
        rt.call(model, inputs, state, np.ones(1, np.int32))
    with pytest.raises(ValueError, match=r"expected 2 state tensors \[h, c\]"):
        rt.call(model, lstm_inputs(np.random.default_rng(0), 1), state[:1], np.ones(1, np.int32))


def test_lstm_wrapper_alone_feeds_observations_to_the_lstm():
    model = LSTMWrapper(OBS4, gym.spaces.Discrete(2), 2, cfg(**LSTM_CFG), "l")
    assert model._rnn_model.get_layer("lstm").get_weights()[0].shape == (4, 4 * CELL)
    out, state = model({"obs": tf.ones((2, 4))}, [tf.zeros((2, CELL))] * 2, tf.ones(2, tf.int32))
    assert out.shape == (2, 2) and state[0].shape == (2, CELL)


# ------------------------------------------------------- complex input net

DICT_SPACE = gym.spaces.Dict(
    {"img": IMG, "d": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
)


def test_complex_input_net_matches_numpy(rt):
    model = rt.model(
        ComplexInputNetwork, DICT_SPACE, gym.spaces.Discrete(2), 2, cfg(conv_filters=SMALL_FILTERS), "c"
    )
    keys = list(model.variables(as_dict=True))
    rt.randomize(model)
    rng = np.random.default_rng(8)
    obs = {
        "b": rng.normal(size=(3, 2)).astype(np.float32),
        "d": np.array([0, 2, 1]),
        "img": rng.uniform(size=(3, 4, 4, 2)).astype(np.float32),
    }
    out, state, value = rt.call(model, {"obs": obs})

    def layer_weights(keras_model, names):
        return {
            f"{n}/{kind}:0": v
            for n in names
            for kind, v in zip(("kernel", "bias"), rt.get(keras_model.get_layer(n).weights))
        }

    cnn_w = layer_weights(model.cnns[2].base_model, ["conv1", "conv2"])
    concat = np.concatenate([obs["b"], np.eye(3)[obs["d"]], vision_reference(cnn_w, obs["img"])[:, 0, 0]], 1)
    head = layer_weights(model.logits_and_value_model, ["logits", "value_out"])
    np.testing.assert_allclose(out, dense(head, "logits", concat), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, dense(head, "value_out", concat)[:, 0], rtol=1e-4, atol=1e-5)
    assert state == [] and model.num_outputs == 2
    assert keys[:2] == ["cnns_2.base_model.conv_value_1.kernel:0", "cnns_2.base_model.conv_value_1.bias:0"]
    suffix = "_1" if rt.mode == "graph" else ""  # graph mode uniquifies the second "value_out"
    assert keys[-6:] == [
        "post_fc_stack.base_model.value_out.kernel:0",
        "post_fc_stack.base_model.value_out.bias:0",
        "logits_and_value_model.logits.kernel:0",
        "logits_and_value_model.logits.bias:0",
        f"logits_and_value_model.value_out{suffix}.kernel:0",
        f"logits_and_value_model.value_out{suffix}.bias:0",
    ]


def test_complex_input_net_flat_preprocessed_obs_and_tuple_space(rt):
    from rlpolicy.models.preprocessors import get_preprocessor

    space = gym.spaces.Tuple([gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.MultiDiscrete([2, 2])])
    prep = get_preprocessor(space)(space)
    c = cfg(post_fcnet_hiddens=[4], post_fcnet_activation="relu")
    model = rt.model(ComplexInputNetwork, prep.observation_space, gym.spaces.Discrete(2), 2, c, "c")
    rng = np.random.default_rng(9)
    raw = [(rng.uniform(-1, 1, 3).astype(np.float32), rng.integers(0, 2, 2)) for _ in range(4)]
    flat = np.stack([prep.transform(o) for o in raw])
    structured = (np.stack([o[0] for o in raw]), np.stack([o[1] for o in raw]))
    flat_out, _, flat_value = rt.call(model, {"obs": flat})
    # The same weights in a model fed with the structured (unflattened) observation.
    rt2 = Runner(rt.mode)
    same = rt2.model(ComplexInputNetwork, space, gym.spaces.Discrete(2), 2, c, "c")
    rt2.assign(same.variables(), rt.get(model.variables()))
    out2, _, value2 = rt2.call(same, {"obs": structured})
    np.testing.assert_allclose(flat_out, out2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(flat_value, value2, rtol=1e-5, atol=1e-6)
    assert flat_out.shape == (4, 2) and flat_value.shape == (4,)
    assert model.post_fc_stack.num_outputs == 4


def test_complex_input_net_rejects_spaces_without_fixed_shape():
    with pytest.raises(ValueError, match=r"cannot encode observation \(sub-\)space Text\("):
        ComplexInputNetwork(
            gym.spaces.Tuple([OBS4, gym.spaces.Text(3)]), gym.spaces.Discrete(2), 2, cfg(), "c"
        )


@pytest.mark.parametrize(
    "space, obs, flat",
    [
        # A plain 2-D Box is one component, flattened row-major.
        (
            gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32),
            np.arange(12, dtype=np.float32).reshape(2, 2, 3) / 10,
            np.arange(12, dtype=np.float32).reshape(2, 6) / 10,
        ),
        # A raw Discrete observation (no preprocessor) is one-hot encoded.
        (gym.spaces.Discrete(3), np.array([2, 0]), np.array([[0, 0, 1], [1, 0, 0]], np.float32)),
    ],
)
def test_complex_input_net_plain_spaces(rt, space, obs, flat):
    model = rt.model(ComplexInputNetwork, space, gym.spaces.Discrete(2), 2, cfg(post_fcnet_hiddens=[3]), "c")
    variables = model.variables(as_dict=True)  # unique keys (two Keras layers are named value_out)
    rng = np.random.default_rng(5)
    w = {k: (rng.normal(size=v.shape) * 0.5).astype(np.float32) for k, v in variables.items()}
    rt.assign(list(variables.values()), list(w.values()))
    out, _, value = rt.call(model, {"obs": obs})
    fc, heads = "post_fc_stack.base_model.fc_1.", "logits_and_value_model."
    hidden = np.maximum(flat @ w[fc + "kernel:0"] + w[fc + "bias:0"], 0.0)  # post_fcnet_activation relu
    np.testing.assert_allclose(
        out, hidden @ w[heads + "logits.kernel:0"] + w[heads + "logits.bias:0"], rtol=1e-5, atol=1e-6
    )
    # In a graph the second "value_out" layer's variables get a "_1" suffix (Keras uniquifies names).
    vk, vb = (
        next(k for k in w if k.startswith(heads + "value_out") and k.endswith(s))
        for s in ("kernel:0", "bias:0")
    )
    expected_value = hidden @ w[vk] + w[vb]
    np.testing.assert_allclose(value, expected_value[:, 0], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------- misc


def test_misc_graph_helpers_match_numpy():
    from rlpolicy.models.tf.misc import conv2d, flatten, linear, one_hot_encode

    rt = Runner("graph")
    x = np.random.default_rng(10).normal(size=(2, 3, 3, 2)).astype(np.float32)

    def build():
        inp = tf.constant(x)
        conv = conv2d(inp, 4, "conv", filter_size=(3, 3), pad="SAME")
        dense_out = linear(flatten(inp), 5, "lin", bias_init=0.5)
        codes = one_hot_encode(tf.constant([[1, 0], [0, 2]]), gym.spaces.MultiDiscrete([2, 3]))
        return conv, dense_out, codes

    conv, dense_out, codes = rt.build(build)
    variables = rt.build(tf1.global_variables)
    assert [v.name for v in variables] == ["conv/W:0", "conv/b:0", "lin/w:0", "lin/b:0"]
    rt.sess.run(rt.build(tf1.global_variables_initializer))
    (c_out, d_out, oh), (k, b, w, lb) = rt.sess.run([[conv, dense_out, codes], variables])
    np.testing.assert_allclose(c_out, conv_ref(x, k, b.reshape(-1), "same"), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d_out, x.reshape(2, 18) @ w + 0.5, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(lb, np.full(5, 0.5))
    np.testing.assert_array_equal(oh, [[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]])
