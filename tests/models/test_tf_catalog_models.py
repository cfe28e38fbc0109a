"""Default TF models built by ModelCatalog.get_model_v2, in TF graph mode and eagerly.

* output / value shapes for every observation-space family (Box, Discrete,
  MultiDiscrete, Dict, Tuple, image, Dict/Tuple with images), with the model
  class RLlib picks and the output width of the action distribution;
* graph-built and eagerly built models (fc, vision, complex, LSTM-wrapped) can
  be created and called in alternating order without breaking each other
  (tf_keras rewrites layer base classes per build mode);
* the LSTM wrapper built by the catalog carries its state across calls: one
  call on a T-step sequence equals T single-step calls feeding the state back.
"""

import numpy as np
import pytest

pytest.importorskip("tensorflow")
gym = pytest.importorskip("gymnasium")

from rlpolicy._core.defaults import MODEL_DEFAULTS  # noqa: E402
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMG = gym.spaces.Box(0.0, 1.0, (10, 10, 3), np.float32)
SMALL_FILTERS = [[4, [3, 3], 2], [8, [5, 5], 1]]  # 10x10 -> 5x5 -> 1x1


def cfg(**overrides):
    return dict(MODEL_DEFAULTS, **overrides)


class Mode:
    """Builds a catalog model and calls it, in a private tf1.Graph + Session or eagerly."""

    def __init__(self, mode):
        self.graph = tf1.Graph() if mode == "graph" else None
        self.sess = tf1.Session(graph=self.graph) if self.graph is not None else None
        self.framework = "tf" if self.graph is not None else "tf2"

    def model(self, obs_space, action_space, num_outputs, model_config, name="m"):
        if self.graph is None:
            return ModelCatalog.get_model_v2(
                obs_space, action_space, num_outputs, model_config, framework=self.framework, name=name
            )
        with self.graph.as_default():
            model = ModelCatalog.get_model_v2(
                obs_space, action_space, num_outputs, model_config, framework=self.framework, name=name
            )
            self.sess.run(tf1.variables_initializer(model.variables()))
        return model

    def call(self, model, obs, state=(), seq_lens=None):
        """Returns numpy (output, state_out, value)."""
        if self.graph is None:
            out, st = model(
                {"obs": tf.constant(obs)},
                [tf.constant(s) for s in state],
                None if seq_lens is None else tf.constant(seq_lens),
            )
            return out.numpy(), [s.numpy() for s in st], model.value_function().numpy()
        feed = {}

        def ph(x):
            p = tf1.placeholder(tf.as_dtype(x.dtype), [None] + list(x.shape[1:]))
            feed[p] = x
            return p

        with self.graph.as_default():
            out, st = model(
                {"obs": ph(obs)}, [ph(s) for s in state], None if seq_lens is None else ph(seq_lens)
            )
            value = model.value_function()
        out, st, value = self.sess.run([out, list(st), value], feed)
        return out, st, value

    def close(self):
        if self.sess is not None:
            self.sess.close()


@pytest.fixture(params=["graph", pytest.param("eager", marks=pytest.mark.tf_eager_code)])
def mode(request):
    m = Mode(request.param)
    yield m
    m.close()


def _obs_batch(space, n=3, seed=0):
    space.seed(seed)
    prep = ModelCatalog.get_preprocessor_for_space(space)
    return prep.observation_space, np.stack([prep.transform(space.sample()) for _ in range(n)])


SPACES = {
    "box": (BOX4, "FullyConnectedNetwork"),
    "discrete": (gym.spaces.Discrete(5), "FullyConnectedNetwork"),
    "multidiscrete": (gym.spaces.MultiDiscrete([2, 3]), "FullyConnectedNetwork"),
    "dict": (gym.spaces.Dict({"a": BOX4, "b": gym.spaces.Discrete(3)}), "FullyConnectedNetwork"),
    "tuple": (gym.spaces.Tuple([BOX4, gym.spaces.Discrete(3)]), "FullyConnectedNetwork"),
    "box-2d": (gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32), "ComplexInputNetwork"),  # RLlib: 2-D -> complex
    "image": (IMG, "VisionNetwork"),
    "dict-image": (gym.spaces.Dict({"img": IMG, "d": gym.spaces.Discrete(3)}), "ComplexInputNetwork"),
    "tuple-image": (gym.spaces.Tuple([IMG, BOX4, gym.spaces.MultiDiscrete([2, 2])]), "ComplexInputNetwork"),
}
ACTIONS = {
    "discrete": (gym.spaces.Discrete(2), 2),
    "box": (gym.spaces.Box(-1.0, 1.0, (3,), np.float32), 6),
    "multidiscrete": (gym.spaces.MultiDiscrete([3, 4]), 7),
}


# Each observation family once, cycling through the action-space families.
PAIRS = [(space_name, list(ACTIONS)[i % len(ACTIONS)]) for i, space_name in enumerate(SPACES)]


@pytest.mark.parametrize("space_name, action_name", PAIRS)
def test_output_shapes_per_space_family(mode, space_name, action_name):
    obs_space, cls_name = SPACES[space_name]
    action_space, expected_n = ACTIONS[action_name]
    _, n = ModelCatalog.get_action_dist(action_space, cfg(), framework=mode.framework)
    assert n == expected_n
    flat_space, obs = _obs_batch(obs_space)
    model = mode.model(
        flat_space,
        action_space,
        n,
        cfg(fcnet_hiddens=[16], post_fcnet_hiddens=[8], conv_filters=SMALL_FILTERS),
    )
    assert type(model).__name__ == cls_name
    out, state, value = mode.call(model, obs.astype(np.float32))
    assert out.shape == (3, n) and state == [] and value.shape == (3,)
    assert np.isfinite(out).all() and np.isfinite(value).all()


LSTM_CFG = dict(
    fcnet_hiddens=[6],
    use_lstm=True,
    lstm_cell_size=5,
    max_seq_len=4,
    lstm_use_prev_action=False,
    lstm_use_prev_reward=False,
)


def _lstm_model(mode, name="lstm"):
    return mode.model(BOX4, gym.spaces.Discrete(3), 3, cfg(**LSTM_CFG), name)


def test_catalog_lstm_carries_state_and_matches_step_by_step(mode):
    model = _lstm_model(mode)
    assert type(model).__name__ == "FullyConnectedNetwork_as_LSTMWrapper"
    init = model.get_initial_state()
    assert [s.shape for s in init] == [(5,), (5,)]
    rng = np.random.default_rng(3)
    B, T = 2, 3
    obs = rng.normal(size=(B, T, 4)).astype(np.float32)
    h0 = [np.stack([s] * B).astype(np.float32) for s in init]
    seq_out, seq_state, seq_value = mode.call(model, obs.reshape(B * T, 4), h0, np.full(B, T, np.int32))
    state, outs, values = h0, [], []
    for t in range(T):
        out, state, value = mode.call(model, obs[:, t], state, np.ones(B, np.int32))
        outs.append(out)
        values.append(value)
    # seq_out is batch-major [B*T, n]: row b*T + t.
    np.testing.assert_allclose(seq_out.reshape(B, T, 3), np.stack(outs, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seq_value.reshape(B, T), np.stack(values, 1), rtol=1e-5, atol=1e-6)
    for a, b in zip(seq_state, state):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The state really is carried: restarting from zeros at step 2 changes the output.
    restart, _, _ = mode.call(model, obs[:, 1], h0, np.ones(B, np.int32))
    assert not np.allclose(restart, outs[1], atol=1e-4)


INTERLEAVE = {
    "fc": (BOX4, cfg(fcnet_hiddens=[5])),
    "vision": (IMG, cfg(conv_filters=SMALL_FILTERS)),
    "complex": (SPACES["dict-image"][0], cfg(conv_filters=SMALL_FILTERS, fcnet_hiddens=[4])),
    "lstm": (BOX4, cfg(**LSTM_CFG)),
}


def _call_any(mode, model, obs_space, rng):
    flat_space, obs = _obs_batch(obs_space, n=2, seed=int(rng.integers(1 << 30)))
    state = [np.zeros((2, 5), np.float32)] * len(model.get_initial_state())
    seq_lens = np.ones(2, np.int32) if state else None
    return mode.call(model, obs.astype(np.float32), state, seq_lens)


@pytest.mark.tf_eager_code
def test_graph_and_eager_catalog_models_interleave():
    """Build and call graph and eager models alternately; earlier models keep working and
    keep returning the same numbers for the same input."""
    modes = {"graph": Mode("graph"), "eager": Mode("eager")}
    sequence = [
        ("fc", "graph"),
        ("fc", "eager"),
        ("lstm", "eager"),
        ("lstm", "graph"),
        ("vision", "graph"),
        ("vision", "eager"),
        ("complex", "eager"),
        ("complex", "graph"),
    ]
    built = []  # (mode, model, obs_space, seed, first result)
    try:
        for kind, mode_name in sequence:
            obs_space, model_config = INTERLEAVE[kind]
            mode = modes[mode_name]
            flat_space, _ = _obs_batch(obs_space)
            model = mode.model(
                flat_space, gym.spaces.Discrete(2), 2, dict(model_config), f"{kind}_{mode_name}"
            )
            first = _call_any(mode, model, obs_space, np.random.default_rng(len(built)))
            built.append((mode, model, obs_space, len(built), first))
            for m, mdl, space, seed, ref in built[:-1]:  # every earlier model still works, same numbers
                out, _, value = _call_any(m, mdl, space, np.random.default_rng(seed))
                np.testing.assert_allclose(out, ref[0], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(value, ref[2], rtol=1e-5, atol=1e-6)
    finally:
        for m in modes.values():
            m.close()


# ------------------------------------------------------------------ bad input

BAD_OBS = [
    (
        "fc",
        BOX4,
        cfg(fcnet_hiddens=[3]),
        np.zeros((2, 5), np.float32),
        r"observation batch has shape \((2|None), 5\) but the model's observation space .* expects "
        r"\[BATCH, \*\(4,\)\]",
    ),
    (
        "vision",
        IMG,
        cfg(conv_filters=SMALL_FILTERS),
        np.zeros((2, 10, 9, 3), np.float32),
        r"observation batch has shape \((2|None), 10, 9, 3\) .* expects \[BATCH, \*\(10, 10, 3\)\]",
    ),
]


@pytest.mark.parametrize("kind, space, model_config, obs, match", BAD_OBS, ids=[b[0] for b in BAD_OBS])
def test_wrong_observation_shape_names_expected_and_received(mode, kind, space, model_config, obs, match):
    model = mode.model(space, gym.spaces.Discrete(2), 2, model_config)
    with pytest.raises(ValueError, match=match):
        mode.call(model, obs)


def _wrong_width_model_cls():
    from rlpolicy.models.tf.tf_modelv2 import TFModelV2
    from rlpolicy.utils.framework import get_keras

    class WrongWidth(TFModelV2):
        """Claims num_outputs outputs but returns 3 columns."""

        def __init__(self, obs_space, action_space, num_outputs, model_config, name):
            super().__init__(obs_space, action_space, num_outputs, model_config, name)
            keras = get_keras()
            inp = keras.layers.Input(shape=(4,))
            self.base_model = keras.Model(inp, keras.layers.Dense(3, name="out")(inp))

        def forward(self, input_dict, state, seq_lens):
            return self.base_model(input_dict["obs_flat"]), state

    return WrongWidth


def test_wrong_model_output_width_names_expected_and_received(mode):
    model = mode.model(BOX4, gym.spaces.Discrete(5), 5, cfg(custom_model=_wrong_width_model_cls()))
    with pytest.raises(
        ValueError, match=r"output has shape \((2|None), 3\) but expected \[BATCH, num_outputs=5\]"
    ):
        mode.call(model, np.zeros((2, 4), np.float32))


RAW_SPACES = {  # observation spaces fed unpreprocessed (_disable_preprocessor_api=True)
    "dict": gym.spaces.Dict({"a": BOX4, "b": gym.spaces.Discrete(3)}),
    "tuple": gym.spaces.Tuple([BOX4, gym.spaces.MultiDiscrete([2, 3])]),
    "discrete": gym.spaces.Discrete(3),
    "box-2d": gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32),
}


@pytest.mark.parametrize("framework", ["torch", "tf2"])
@pytest.mark.parametrize("space_name", list(RAW_SPACES))
def test_unpreprocessed_spaces_get_the_complex_input_net(framework, space_name):
    """Raw Dict/Tuple/Discrete/2-D Box observations (as RLlib 1.11's catalog routes them):
    the model one-hot encodes / flattens the parts itself; the concatenated width is the
    hand-counted sum of the encoded parts."""
    import tree

    space = RAW_SPACES[space_name]
    space.seed(0)
    model = ModelCatalog.get_model_v2(
        space, gym.spaces.Discrete(2), 2, cfg(_disable_preprocessor_api=True), framework=framework
    )
    assert type(model).__name__ == "ComplexInputNetwork"
    samples = [space.sample() for _ in range(3)]
    obs = tree.map_structure(lambda *xs: np.stack([np.asarray(x) for x in xs]), *samples)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        out, _ = model({"obs": tree.map_structure(torch.from_numpy, obs)})
        out, value = out.detach().numpy(), model.value_function().detach().numpy()
    else:
        out, _ = model({"obs": tree.map_structure(tf.constant, obs)})
        out, value = out.numpy(), model.value_function().numpy()
    assert out.shape == (3, 2) and value.shape == (3,)
    assert np.isfinite(out).all()
    expected_width = {"dict": 4 + 3, "tuple": 4 + 5, "discrete": 3, "box-2d": 6}[space_name]
    assert model.post_fc_stack.obs_space.shape == (expected_width,)
