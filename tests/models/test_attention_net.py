"""Attention nets (GTrXL, AttentionWrapper, TrXLNet) and the torch attention modules,
written as 1.x client code would use them (imports from the RLlib 1.11 paths).

Independent checks: numpy GRU gate and relative attention (plain loops over query/key
pairs, no shift trick), the GTrXL memory contract (a step with memory = the same steps
fed as one segment), causality, and the view requirements the nets declare.
"""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.models.catalog import MODEL_DEFAULTS

TOL = {"rtol": 1e-4, "atol": 1e-5}
OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
# Tiny sizes (attention_dim 8, one unit, memory 3).
SIZES = dict(
    num_transformer_units=1,
    attention_dim=8,
    num_heads=2,
    head_dim=4,
    memory_inference=3,
    memory_training=3,
    position_wise_mlp_dim=8,
    init_gru_gate_bias=2.0,
)


def _np(seed, *shape):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def np_gru_gate(h, x, w, u, bias_z):
    r = _sigmoid(x @ w["r"] + h @ u["r"])
    z = _sigmoid(x @ w["z"] + h @ u["z"] - bias_z)
    cand = np.tanh(x @ w["h"] + (r * h) @ u["h"])
    return (1 - z) * h + z * cand


def np_rel_attention(x, memory, w_qkv, w_out, w_pos, u, v, heads, d):
    """Transformer-XL attention by loops: query i (absolute position Tau + i) sees keys
    j <= Tau + i, with the sinusoid embedding of the distance Tau + i - j."""
    full = np.concatenate([memory, x], axis=1)
    b_size, m_len, _ = full.shape
    tau, t_len = memory.shape[1], x.shape[1]
    qkv = full @ w_qkv
    q, k, val = np.split(qkv, 3, axis=-1)
    dim = w_out.shape[1]
    inv = 1.0 / (10000.0 ** (np.arange(0, dim, 2.0) / dim))
    out = np.zeros((b_size, t_len, heads * d))
    for b in range(b_size):
        for i in range(t_len):
            qi = tau + i
            for h in range(heads):
                cols = slice(h * d, (h + 1) * d)
                logits = []
                for j in range(qi + 1):
                    dist = qi - j
                    emb = np.concatenate([np.sin(dist * inv), np.cos(dist * inv)])
                    r = (emb @ w_pos)[cols]
                    logits.append(
                        ((q[b, qi, cols] + u[h]) @ k[b, j, cols] + (q[b, qi, cols] + v[h]) @ r) / np.sqrt(d)
                    )
                w = _softmax(np.array(logits))
                out[b, i, cols] = sum(w[j] * val[b, j, cols] for j in range(qi + 1))
    return out @ w_out


def _config(**kw):
    return {**MODEL_DEFAULTS, "max_seq_len": 4, **kw}


# ------------------------------------------------------------------ torch modules


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_torch_gru_gate_matches_numpy(torch):
    from rlpolicy.models.torch.modules import GRUGate

    gate = GRUGate(4, init_bias=1.5)
    np.testing.assert_allclose(gate._bias_z.detach().numpy(), np.full(4, 1.5))
    h, x = _np(0, 2, 3, 4), _np(1, 2, 3, 4)
    w = {k: getattr(gate, f"_w_{k}").detach().numpy() for k in "rzh"}
    u = {k: getattr(gate, f"_u_{k}").detach().numpy() for k in "rzh"}
    got = gate((torch.from_numpy(h), torch.from_numpy(x))).detach().numpy()
    np.testing.assert_allclose(got, np_gru_gate(h, x, w, u, 1.5), **TOL)
    with pytest.raises(ValueError, match="last axis must be dim=4"):
        gate((torch.zeros(2, 4), torch.zeros(2, 5)))


def test_torch_skip_connection_adds_or_fans_in(torch):
    from rlpolicy.models.torch.modules import SkipConnection

    x = torch.arange(6.0).reshape(2, 3)
    double = torch.nn.Identity()
    np.testing.assert_allclose(SkipConnection(double)(x).numpy(), 2 * x.numpy())
    fan = SkipConnection(lambda t, scale: t * scale, fan_in_layer=lambda hx: hx[0] - hx[1])
    np.testing.assert_allclose(fan(x, scale=3.0).numpy(), -2 * x.numpy())


@pytest.mark.parametrize("tau", [0, 2])
def test_torch_relative_attention_matches_numpy_loops(torch, tau):
    from rlpolicy.models.torch.modules import RelativeMultiHeadAttention

    torch.manual_seed(0)
    layer = RelativeMultiHeadAttention(in_dim=6, out_dim=6, num_heads=2, head_dim=3)
    x, memory = _np(2, 2, 4, 6), _np(3, 2, tau, 6)
    got = layer(torch.from_numpy(x), memory=torch.from_numpy(memory)).detach().numpy()
    params = {
        "w_qkv": layer._qkv_layer._model[0].weight.detach().numpy().T,
        "w_out": layer._linear_layer._model[0].weight.detach().numpy().T,
        "w_pos": layer._pos_proj._model[0].weight.detach().numpy().T,
        "u": layer._uvar.detach().numpy(),
        "v": layer._vvar.detach().numpy(),
    }
    np.testing.assert_allclose(got, np_rel_attention(x, memory, heads=2, d=3, **params), **TOL)
    if tau == 0:  # memory=None is a memory of length 0
        none = layer(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(none, got, **TOL)


def test_torch_multi_head_attention_is_causal(torch):
    from rlpolicy.models.torch.modules import MultiHeadAttention

    layer = MultiHeadAttention(in_dim=3, out_dim=2, num_heads=1, head_dim=3)
    x = _np(4, 1, 4, 3)
    x2 = x.copy()
    x2[:, 3] += 5.0
    a = layer(torch.from_numpy(x)).detach().numpy()
    b = layer(torch.from_numpy(x2)).detach().numpy()
    np.testing.assert_allclose(a[:, :3], b[:, :3], **TOL)
    assert np.abs(a[:, 3] - b[:, 3]).max() > 1e-4


# ------------------------------------------------------------------ GTrXLNet, both frameworks


class TorchRun:
    """Builds and calls a torch model; results as numpy."""

    name = "torch"

    def __init__(self):
        self.torch = pytest.importorskip("torch")

    def build(self, fn):
        self.torch.manual_seed(0)
        return fn()

    def forward(self, model, obs, state, seq_lens):
        t = self.torch
        out, mem = model(
            {"obs": t.from_numpy(obs)}, [t.from_numpy(s) for s in state], t.tensor(seq_lens, dtype=t.int32)
        )
        return (
            out.detach().numpy(),
            [m.detach().numpy() for m in mem],
            model.value_function().detach().numpy(),
        )


class TFRun:
    """Builds and calls a TF model eagerly, or in an own tf1.Graph + Session when eager
    execution is off (e.g. after tf.compat.v1.disable_v2_behavior())."""

    name = "tf"

    def __init__(self):
        pytest.importorskip("tensorflow")
        from rlpolicy.utils.framework import try_import_tf

        self.tf1, self.tf, _ = try_import_tf()
        self.eager = self.tf1.executing_eagerly()
        self.graph = None if self.eager else self.tf1.Graph()
        self.sess = None if self.eager else self.tf1.Session(graph=self.graph)

    def build(self, fn):
        if self.eager:
            return fn()
        with self.graph.as_default():
            model = fn()
            self.sess.run(self.tf1.global_variables_initializer())  # once: calls reuse the weights
        return model

    def forward(self, model, obs, state, seq_lens):
        tf = self.tf
        if self.eager:
            out, mem = model(
                {"obs": tf.constant(obs)}, [tf.constant(s) for s in state], tf.constant(seq_lens, tf.int32)
            )
            return out.numpy(), [m.numpy() for m in mem], model.value_function().numpy()
        with self.graph.as_default():
            out, mem = model(
                {"obs": tf.constant(obs)}, [tf.constant(s) for s in state], tf.constant(seq_lens, tf.int32)
            )
            value = model.value_function()
            out, mem, value = self.sess.run([out, mem, value])
        return out, mem, value


@pytest.fixture(params=["torch", "tf"])
def run(request):
    return TorchRun() if request.param == "torch" else TFRun()


def _gtrxl_cls(run):
    if run.name == "torch":
        from rlpolicy.models.torch.attention_net import GTrXLNet
    else:
        from rlpolicy.models.tf.attention_net import GTrXLNet
    return GTrXLNet


def test_gtrxl_shapes_memory_outputs_and_view_requirements(run):
    GTrXLNet = _gtrxl_cls(run)
    model = run.build(
        lambda: GTrXLNet(OBS, ACT, 2, _config(), "gtrxl", **dict(SIZES, num_transformer_units=2))
    )
    assert model.get_initial_state() == [] and model.num_outputs == 2
    vrs = model.view_requirements
    for i in (0, 1):
        req = vrs[f"state_in_{i}"]
        assert (req.data_col, req.shift_from, req.shift_to, req.batch_repeat_value) == (
            f"state_out_{i}",
            -3,
            -1,
            4,
        )
        assert req.space.shape == (8,)
        assert vrs[f"state_out_{i}"].used_for_training is False
    obs = _np(5, 2 * 4, 3)
    out, mem, value = run.forward(model, obs, [np.zeros((2, 3, 8), np.float32)] * 2, [4, 4])
    assert out.shape == (8, 2) and value.shape == (8,) and [m.shape for m in mem] == [(8, 8), (8, 8)]
    assert np.isfinite(out).all() and not np.allclose(mem[0], mem[1])


def test_gtrxl_step_with_memory_equals_the_same_steps_as_one_segment(run):
    """One unit: memory_0 is the input projection of the past observations, so a step
    fed with that memory sees exactly the keys of the window fed as one segment."""
    GTrXLNet = _gtrxl_cls(run)
    model = run.build(lambda: GTrXLNet(OBS, ACT, 2, _config(), "gtrxl", **SIZES))
    obs = _np(6, 1, 4, 3)  # one sequence of 4 steps
    seg_out, seg_mem, seg_val = run.forward(model, obs.reshape(4, 3), [np.zeros((1, 0, 8), np.float32)], [4])
    # The last step alone, with the first three steps' memory outputs as memory.
    memory = seg_mem[0][:3][None]
    step_out, step_mem, step_val = run.forward(model, obs[0, 3:], [memory], [1])
    np.testing.assert_allclose(step_out, seg_out[3:], **TOL)
    np.testing.assert_allclose(step_val, seg_val[3:], **TOL)
    np.testing.assert_allclose(step_mem[0], seg_mem[0][3:], **TOL)
    # A memory of zeros is attended to (RLlib 1.11): not the same as no memory.
    zero_out, _, _ = run.forward(model, obs[0, 3:], [np.zeros((1, 3, 8), np.float32)], [1])
    alone_out, _, _ = run.forward(model, obs[0, 3:], [np.zeros((1, 0, 8), np.float32)], [1])
    assert np.abs(zero_out - alone_out).max() > 1e-6


def test_gtrxl_is_causal_and_sequences_are_independent(run):
    GTrXLNet = _gtrxl_cls(run)
    model = run.build(lambda: GTrXLNet(OBS, ACT, 2, _config(), "gtrxl", **SIZES))
    obs = _np(7, 2 * 4, 3)
    memory = _np(8, 2, 3, 8)
    later = obs.copy()
    later[2:4] += 3.0  # steps 2, 3 of sequence 0
    # The value head (linear) rather than the logits (ReLU in 1.11's torch GTrXL, so zeros can hide changes).
    _, _, a = run.forward(model, obs, [memory], [4, 4])
    _, _, b = run.forward(model, later, [memory], [4, 4])
    np.testing.assert_allclose(a[:2], b[:2], **TOL)  # earlier steps of sequence 0
    np.testing.assert_allclose(a[4:], b[4:], **TOL)  # the other sequence
    assert (np.abs(a[2:4] - b[2:4]) > 1e-6).all()
    # Changing one sequence's memory changes every step of that sequence only.
    memory2 = memory.copy()
    memory2[1] += _np(10, 3, 8)
    _, _, c = run.forward(model, obs, [memory2], [4, 4])
    np.testing.assert_allclose(a[:4], c[:4], **TOL)
    assert (np.abs(a[4:] - c[4:]) > 1e-6).all()


def test_gtrxl_first_memory_is_the_input_projection_torch(torch):
    from rlpolicy.models.torch.attention_net import GTrXLNet

    model = GTrXLNet(OBS, ACT, None, _config(), "gtrxl", **SIZES)
    assert model.num_outputs == 8  # no heads: the features come out
    obs = _np(9, 5, 3)
    out, mem = model({"obs": torch.from_numpy(obs)}, [torch.zeros(5, 3, 8)], torch.ones(5, dtype=torch.int32))
    lin = model.linear_layer._model[0]
    expected = obs @ lin.weight.detach().numpy().T + lin.bias.detach().numpy()
    np.testing.assert_allclose(mem[0].detach().numpy(), expected, **TOL)
    assert out.shape == (5, 8)
    with pytest.raises(ValueError, match="value head"):
        model.value_function()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"attention_dim": 0}, "attention_dim must be an int >= 1"),
        ({"memory_inference": 2.5}, "memory_inference must be an int >= 1"),
        ({"num_heads": True}, "num_heads must be an int >= 1"),
    ],
)
def test_gtrxl_bad_sizes_name_the_argument(run, kwargs, match):
    GTrXLNet = _gtrxl_cls(run)
    with pytest.raises(ValueError, match=match):
        run.build(lambda: GTrXLNet(OBS, ACT, 2, _config(), "gtrxl", **dict(SIZES, **kwargs)))


def test_gtrxl_rejects_image_obs_and_wrong_memory_count(run):
    GTrXLNet = _gtrxl_cls(run)
    with pytest.raises(ValueError, match="must be 1-D"):
        run.build(lambda: GTrXLNet(gym.spaces.Box(0, 1, (2, 2)), ACT, 2, _config(), "g", **SIZES))
    model = run.build(lambda: GTrXLNet(OBS, ACT, 2, _config(), "g", **SIZES))
    with pytest.raises(ValueError, match="expected 1 memory tensors"):
        run.forward(model, _np(0, 2, 3), [], [1, 1])


# ------------------------------------------------------------------ AttentionWrapper via the catalog


def _wrapper_config(**kw):
    return _config(
        use_attention=True,
        fcnet_hiddens=[6],
        attention_dim=8,
        attention_num_heads=1,
        attention_head_dim=8,
        attention_memory_inference=3,
        attention_memory_training=3,
        attention_position_wise_mlp_dim=8,
        **kw,
    )


def _catalog_model(run, action_space, **kw):
    from rlpolicy.models.catalog import ModelCatalog

    fw = "torch" if run.name == "torch" else "tf"
    return run.build(
        lambda: ModelCatalog.get_model_v2(OBS, action_space, 4, _wrapper_config(**kw), framework=fw)
    )


def test_catalog_use_attention_wraps_the_default_model(run):
    model = _catalog_model(run, ACT, attention_use_n_prev_actions=2, attention_use_n_prev_rewards=1)
    assert type(model).__name__ == "FullyConnectedNetwork_as_AttentionWrapper"
    # GTrXL input: fcnet features (6) + 2 one-hot actions (2 * 2) + 1 reward.
    assert model.gtrxl.obs_dim == 6 + 4 + 1 and model.num_outputs == 4
    vrs = model.view_requirements
    assert (vrs["prev_actions"].data_col, vrs["prev_actions"].shift_from, vrs["prev_actions"].shift_to) == (
        "actions",
        -2,
        -1,
    )
    assert (vrs["prev_rewards"].data_col, vrs["prev_rewards"].shift_from) == ("rewards", -1)
    assert vrs["state_in_0"].shift_from == -3 and vrs["obs"].space == OBS
    b = 3
    obs, memory = _np(1, b, 3), _np(2, b, 3, 8)
    prev_a = np.array([[0, 1], [1, 1], [1, 0]], np.int64)
    prev_r = np.array([[0.5], [-1.0], [2.0]], np.float32)
    if run.name == "torch":
        t = run.torch
        batch = {
            "obs": t.from_numpy(obs),
            "obs_flat": t.from_numpy(obs),
            "prev_actions": t.from_numpy(prev_a),
            "prev_rewards": t.from_numpy(prev_r),
        }
        out, mem = model(batch, [t.from_numpy(memory)], t.ones(b, dtype=t.int32))
        out = out.detach().numpy()
        # Changing the older of the two previous actions changes the output.
        batch2 = dict(batch, prev_actions=t.from_numpy(prev_a[:, ::-1].copy()))
        out2 = model(batch2, [t.from_numpy(memory)], t.ones(b, dtype=t.int32))[0].detach().numpy()
        assert out.shape == (b, 4) and mem[0].shape == (b, 8)
        assert np.abs(out - out2)[[0, 2]].max() > 1e-6
        np.testing.assert_allclose(out[1], out2[1], **TOL)  # [1, 1] reversed is the same
    with pytest.raises(ValueError, match="only one of use_lstm and use_attention"):
        from rlpolicy.models.catalog import ModelCatalog

        ModelCatalog.get_model_v2(
            OBS, ACT, 4, _wrapper_config(use_lstm=True), framework="torch" if run.name == "torch" else "tf"
        )


def test_catalog_complex_prev_actions_need_unflattened_actions(torch):
    from rlpolicy.models.catalog import ModelCatalog

    tuple_space = gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,))])
    cfg = _wrapper_config(attention_use_n_prev_actions=2)
    with pytest.raises(ValueError, match="needs _disable_action_flattening=True"):
        ModelCatalog.get_model_v2(OBS, tuple_space, 4, cfg, framework="torch")
    model = ModelCatalog.get_model_v2(
        OBS, tuple_space, 4, dict(cfg, _disable_action_flattening=True), framework="torch"
    )
    assert model.gtrxl.obs_dim == 6 + 2 * (2 + 2)  # one-hot Discrete + flat Box, per previous step
    prev = (torch.tensor([[1, 0]]), torch.tensor([[[0.5, -0.5], [1.0, 0.0]]]))
    from rlpolicy.models.torch.attention_net import encode_prev_actions

    np.testing.assert_array_equal(
        encode_prev_actions(prev, tuple_space, 2).numpy(), [[0, 1, 0.5, -0.5, 1, 0, 1.0, 0.0]]
    )


def test_torch_prev_actions_encoding_by_space(torch):
    from rlpolicy.models.torch.attention_net import encode_prev_actions

    disc = encode_prev_actions(torch.tensor([[1, 3]]), gym.spaces.Discrete(3, start=1), 2)
    np.testing.assert_array_equal(disc.numpy(), [[1, 0, 0, 0, 0, 1]])
    md = encode_prev_actions(torch.tensor([[[0, 2], [1, 0]]]), gym.spaces.MultiDiscrete([2, 3]), 2)
    np.testing.assert_array_equal(md.numpy(), [[1, 0, 0, 0, 1, 0, 1, 1, 0, 0]])
    box = encode_prev_actions(torch.tensor([[[0.5, -1.0], [2.0, 3.0]]]), gym.spaces.Box(-5, 5, (2,)), 2)
    np.testing.assert_array_equal(box.numpy(), [[0.5, -1.0, 2.0, 3.0]])


def test_attention_wrapper_requires_its_config_keys(torch):
    from rlpolicy.models.torch.attention_net import AttentionWrapper

    cfg = _wrapper_config()
    with pytest.raises(ValueError, match="attention_memory_inference must be an int >= 1"):
        AttentionWrapper(OBS, ACT, 4, dict(cfg, attention_memory_inference=0), "w")
    with pytest.raises(ValueError, match=r"lacks \['attention_dim'\]"):
        AttentionWrapper(OBS, ACT, 4, {k: v for k, v in cfg.items() if k != "attention_dim"}, "w")
    with pytest.raises(ValueError, match="attention_use_n_prev_rewards must be an int >= 0"):
        AttentionWrapper(OBS, ACT, 4, dict(cfg, attention_use_n_prev_rewards=-1), "w")


@pytest.mark.tf
def test_tf_trxlnet_keeps_the_last_max_seq_len_observations(tf_modules):
    from rlpolicy.models.tf.attention_net import TrXLNet

    run = TFRun()
    model = run.build(
        lambda: TrXLNet(
            OBS,
            ACT,
            2,
            _config(max_seq_len=3),
            "trxl",
            num_transformer_units=1,
            attention_dim=8,
            num_heads=1,
            head_dim=4,
            position_wise_mlp_dim=8,
        )
    )
    init = model.get_initial_state()
    assert len(init) == 1 and init[0].shape == (3, 3) and not init[0].any()
    obs = _np(3, 2, 3)  # 2 sequences of 1 step
    state = np.stack([init[0], init[0]])
    if run.eager:
        out, (kept,) = model({"obs": run.tf.constant(obs)}, [run.tf.constant(state)], run.tf.constant([1, 1]))
        out, kept = out.numpy(), kept.numpy()
    else:
        with run.graph.as_default():
            out_t, (kept_t,) = model(
                {"obs": run.tf.constant(obs)}, [run.tf.constant(state)], run.tf.constant([1, 1])
            )
            out, kept = run.sess.run([out_t, kept_t])
    assert out.shape == (2, 2)
    np.testing.assert_allclose(kept[:, -1], obs, **TOL)  # newest last
    np.testing.assert_allclose(kept[:, :2], 0.0)


@pytest.mark.tf
def test_keras_attention_wrapper_on_a_native_keras_model(tf_modules):
    """RLlib 1.11's native-model path: a Keras model class wrapped by Keras_AttentionWrapper."""
    tf1, tf = tf_modules
    if not tf1.executing_eagerly():
        pytest.skip("native Keras models are eager-only here")
    from rlpolicy.models.tf.attention_net import Keras_AttentionWrapper
    from rlpolicy.utils.framework import get_keras

    keras = get_keras()

    class TinyKerasNet(keras.Model):
        def __init__(self, input_space, action_space, num_outputs, *, name, **kwargs):
            super().__init__(name=name)
            inp = keras.layers.Input(shape=input_space.shape)
            self.base = keras.Model(inp, keras.layers.Dense(5, activation="tanh")(inp))

        def call(self, input_dict):
            return self.base(input_dict["obs"]), [], {}

    model = Keras_AttentionWrapper(
        OBS,
        ACT,
        2,
        name="kw",
        wrapped_cls=TinyKerasNet,
        max_seq_len=4,
        attention_dim=8,
        attention_head_dim=4,
        attention_num_heads=2,
        attention_memory_inference=3,
        attention_position_wise_mlp_dim=8,
        attention_use_n_prev_rewards=1,
    )
    assert model.gtrxl.obs_dim == 5 + 1
    vrs = model.view_requirements
    assert (
        vrs["state_in_0"].shift_from == -3
        and vrs["prev_rewards"].shift_from == -1
        and vrs["obs"].space == OBS
    )
    obs, memory = _np(0, 6, 3), _np(1, 2, 3, 8)
    logits, mem, extra = model(
        {
            "obs": tf.constant(obs),
            "state_in_0": tf.constant(memory),
            "prev_rewards": tf.zeros((6, 1)),
            "seq_lens": tf.constant([3, 3]),
        }
    )
    assert logits.shape == (6, 2) and mem[0].shape == (6, 8) and extra["vf_preds"].shape == (6,)
    # The first memory stream is the projection of [features, prev reward] of each step.
    feats = np.concatenate([model.wrapped_keras_model.base(obs).numpy(), np.zeros((6, 1), np.float32)], 1)
    (proj,) = [layer for layer in model.gtrxl.trxl_model.layers if type(layer).__name__ == "Dense"]
    w, b = (v.numpy() for v in proj.weights)
    np.testing.assert_allclose(mem[0].numpy(), feats @ w + b, **TOL)
    with pytest.raises(ValueError, match="needs 'seq_lens'"):
        model({"obs": tf.constant(obs), "state_in_0": tf.constant(memory)})
