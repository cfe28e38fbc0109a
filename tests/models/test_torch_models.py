"""Default torch models: parameter layout, numpy references, shapes, LSTM unrolling, errors."""

import copy

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from rlpolicy._core.defaults import MODEL_DEFAULTS  # noqa: E402
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.models.torch.complex_input_net import ComplexInputNetwork  # noqa: E402
from rlpolicy.models.torch.fcnet import FullyConnectedNetwork  # noqa: E402
from rlpolicy.models.torch.misc import AppendBiasLayer, SlimConv2d, SlimFC, normc_initializer, same_padding  # noqa: E402
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2  # noqa: E402
from rlpolicy.models.torch.visionnet import VisionNetwork  # noqa: E402

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMG = gym.spaces.Box(0.0, 1.0, (10, 10, 3), np.float32)
DISC2 = gym.spaces.Discrete(2)


def cfg(**kw):
    c = copy.deepcopy(MODEL_DEFAULTS)
    c.update(kw)
    return c


def layout(model):
    return [(k, tuple(v.shape)) for k, v in model.state_dict().items()]


# ------------------------------------------------------ RLlib parameter layout
FC_LAYOUT = [
    ("_logits._model.0.weight", (3, 6)),
    ("_logits._model.0.bias", (3,)),
    ("_hidden_layers.0._model.0.weight", (8, 4)),
    ("_hidden_layers.0._model.0.bias", (8,)),
    ("_hidden_layers.1._model.0.weight", (6, 8)),
    ("_hidden_layers.1._model.0.bias", (6,)),
    ("_value_branch._model.0.weight", (1, 6)),
    ("_value_branch._model.0.bias", (1,)),
]

FC_FREE_LOG_STD_SEPARATE_VF_LAYOUT = [
    ("_logits._model.0.weight", (2, 6)),
    ("_logits._model.0.bias", (2,)),
    ("_append_free_log_std.log_std", (2,)),
    ("_hidden_layers.0._model.0.weight", (8, 4)),
    ("_hidden_layers.0._model.0.bias", (8,)),
    ("_hidden_layers.1._model.0.weight", (6, 8)),
    ("_hidden_layers.1._model.0.bias", (6,)),
    ("_value_branch_separate.0._model.0.weight", (8, 4)),
    ("_value_branch_separate.0._model.0.bias", (8,)),
    ("_value_branch_separate.1._model.0.weight", (6, 8)),
    ("_value_branch_separate.1._model.0.bias", (6,)),
    ("_value_branch._model.0.weight", (1, 6)),
    ("_value_branch._model.0.bias", (1,)),
]

LSTM_LAYOUT = [
    ("_hidden_layers.0._model.0.weight", (8, 4)),
    ("_hidden_layers.0._model.0.bias", (8,)),
    ("_hidden_layers.1._model.0.weight", (6, 8)),
    ("_hidden_layers.1._model.0.bias", (6,)),
    ("_value_branch._model.0.weight", (1, 5)),
    ("_value_branch._model.0.bias", (1,)),
    ("lstm.weight_ih_l0", (20, 6)),
    ("lstm.weight_hh_l0", (20, 5)),
    ("lstm.bias_ih_l0", (20,)),
    ("lstm.bias_hh_l0", (20,)),
    ("_logits_branch._model.0.weight", (3, 5)),
    ("_logits_branch._model.0.bias", (3,)),
]

VISION_LAYOUT = [
    ("_logits._model.1.weight", (2, 32, 1, 1)),
    ("_logits._model.1.bias", (2,)),
    ("_convs.0._model.1.weight", (16, 3, 5, 5)),
    ("_convs.0._model.1.bias", (16,)),
    ("_convs.1._model.0.weight", (32, 16, 5, 5)),
    ("_convs.1._model.0.bias", (32,)),
    ("_value_branch._model.0.weight", (1, 32)),
    ("_value_branch._model.0.bias", (1,)),
]


def test_fc_layout_is_rllibs():
    m = FullyConnectedNetwork(BOX4, DISC2, 3, cfg(fcnet_hiddens=[8, 6]), "fc")
    assert layout(m) == FC_LAYOUT


def test_fc_free_log_std_separate_vf_layout_is_rllibs():
    m = FullyConnectedNetwork(
        BOX4, DISC2, 4, cfg(fcnet_hiddens=[8, 6], free_log_std=True, vf_share_layers=False), "fc"
    )
    assert layout(m) == FC_FREE_LOG_STD_SEPARATE_VF_LAYOUT


def test_lstm_wrapped_fc_layout_is_rllibs():
    m = ModelCatalog.get_model_v2(
        BOX4, DISC2, 3, cfg(fcnet_hiddens=[8, 6], use_lstm=True, lstm_cell_size=5), framework="torch"
    )
    assert type(m).__name__ == "FullyConnectedNetwork_as_LSTMWrapper"
    assert layout(m) == LSTM_LAYOUT


def test_vision_layout_is_rllibs():
    m = VisionNetwork(IMG, DISC2, 2, cfg(), "vis")
    assert layout(m) == VISION_LAYOUT


def test_rllib_state_dict_loads_strictly():
    """A state dict with RLlib's names/shapes (e.g. saved by RLlib) loads unchanged."""
    m = FullyConnectedNetwork(BOX4, DISC2, 3, cfg(fcnet_hiddens=[8, 6]), "fc")
    rng = np.random.default_rng(0)
    sd = {k: torch.as_tensor(rng.normal(size=s).astype(np.float32)) for k, s in FC_LAYOUT}
    m.load_state_dict(sd, strict=True)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy())


# ------------------------------------------------------------ FC numerics
def test_fc_forward_and_value_match_numpy_mlp():
    m = FullyConnectedNetwork(BOX4, DISC2, 3, cfg(fcnet_hiddens=[8, 6]), "fc")
    p = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    h = np.tanh(x @ p["_hidden_layers.0._model.0.weight"].T + p["_hidden_layers.0._model.0.bias"])
    h = np.tanh(h @ p["_hidden_layers.1._model.0.weight"].T + p["_hidden_layers.1._model.0.bias"])
    logits = h @ p["_logits._model.0.weight"].T + p["_logits._model.0.bias"]
    value = h @ p["_value_branch._model.0.weight"].T + p["_value_branch._model.0.bias"]
    out, state = m({"obs": torch.from_numpy(x)})
    np.testing.assert_allclose(out.detach().numpy(), logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.value_function().detach().numpy(), value[:, 0], rtol=1e-5, atol=1e-6)
    assert state == []
    # float64 (and integer) observations are cast to float32 first, as .float() does
    for dtype in (torch.float64, torch.int64):
        cast_in = torch.from_numpy(x).to(dtype)
        out, _ = m({"obs": cast_in})
        assert out.dtype == torch.float32
        np.testing.assert_allclose(out.detach().numpy(), m({"obs": cast_in.float()})[0].detach().numpy())
    np.testing.assert_allclose(
        m({"obs": torch.from_numpy(x).double()})[0].detach().numpy(), logits, atol=1e-5
    )


def test_fc_normc_init_row_norms():
    torch.manual_seed(0)
    m = FullyConnectedNetwork(BOX4, DISC2, 3, cfg(fcnet_hiddens=[8, 6]), "fc")
    sd = m.state_dict()
    np.testing.assert_allclose(
        sd["_hidden_layers.0._model.0.weight"].norm(dim=1).numpy(), 1.0, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(sd["_logits._model.0.weight"].norm(dim=1).numpy(), 0.01, rtol=1e-5, atol=1e-7)
    assert float(sd["_hidden_layers.0._model.0.bias"].abs().sum()) == 0.0


def test_fc_free_log_std_appends_learned_log_std():
    m = FullyConnectedNetwork(BOX4, DISC2, 4, cfg(fcnet_hiddens=[8], free_log_std=True), "fc")
    with torch.no_grad():
        m._append_free_log_std.log_std.copy_(torch.tensor([0.5, -0.5]))
    out, _ = m({"obs": torch.zeros(3, 4)})
    np.testing.assert_allclose(out[:, 2:].detach().numpy(), [[0.5, -0.5]] * 3, rtol=1e-6, atol=1e-6)


def test_fc_no_final_linear_and_no_outputs():
    m = FullyConnectedNetwork(BOX4, DISC2, 3, cfg(fcnet_hiddens=[8, 6], no_final_linear=True), "fc")
    assert m._logits is None and m._hidden_layers[-1]._model[0].out_features == 3
    out, _ = m({"obs": torch.zeros(2, 4)})
    assert np.all(np.abs(out.detach().numpy()) <= 1.0)  # tanh on the last layer
    m2 = FullyConnectedNetwork(BOX4, DISC2, None, cfg(fcnet_hiddens=[8, 6]), "fc")
    assert m2.num_outputs == 6 and m2({"obs": torch.zeros(2, 4)})[0].shape == (2, 6)


def test_fc_separate_value_branch_uses_own_layers():
    m = FullyConnectedNetwork(BOX4, DISC2, 2, cfg(fcnet_hiddens=[8], vf_share_layers=False), "fc")
    x = torch.randn(3, 4)
    m({"obs": x})
    expected = m._value_branch(m._value_branch_separate(x)).squeeze(1)
    np.testing.assert_allclose(
        m.value_function().detach().numpy(), expected.detach().numpy(), rtol=1e-6, atol=1e-6
    )


def test_variables_tower_stats_and_trainable():
    m = FullyConnectedNetwork(BOX4, DISC2, 3, cfg(fcnet_hiddens=[8, 6]), "fc")
    assert m.tower_stats == {}
    assert list(m.variables(as_dict=True)) == [k for k, _ in FC_LAYOUT]
    assert len(m.variables()) == len(FC_LAYOUT)
    m._logits._model[0].weight.requires_grad_(False)
    assert "_logits._model.0.weight" not in m.trainable_variables(as_dict=True)
    assert len(m.trainable_variables()) == len(FC_LAYOUT) - 1


def test_torch_model_without_nn_module_is_rejected():
    class NotAModule(TorchModelV2):
        pass

    with pytest.raises(ValueError, match="not nn.Module"):
        NotAModule(BOX4, DISC2, 2, cfg(), "x")


# --------------------------------------------------- shapes per space family
def _obs_batch(space, n=3):
    prep = ModelCatalog.get_preprocessor_for_space(space)
    return prep.observation_space, np.stack([prep.transform(space.sample()) for _ in range(n)])


@pytest.mark.parametrize(
    "obs_space,cls_name",
    [
        (BOX4, "FullyConnectedNetwork"),
        (gym.spaces.Discrete(5), "FullyConnectedNetwork"),
        (gym.spaces.MultiDiscrete([2, 3]), "FullyConnectedNetwork"),
        (gym.spaces.Dict({"a": BOX4, "b": gym.spaces.Discrete(3)}), "FullyConnectedNetwork"),
        (gym.spaces.Tuple([BOX4, gym.spaces.Discrete(3)]), "FullyConnectedNetwork"),
        (IMG, "VisionNetwork"),
        (gym.spaces.Dict({"img": IMG, "d": gym.spaces.Discrete(3)}), "ComplexInputNetwork"),
        (gym.spaces.Tuple([IMG, BOX4, gym.spaces.MultiDiscrete([2, 2])]), "ComplexInputNetwork"),
    ],
)
@pytest.mark.parametrize("action_space", [DISC2, gym.spaces.Box(-1, 1, (2,), np.float32)])
def test_output_shapes_per_space(obs_space, cls_name, action_space):
    flat_space, obs = _obs_batch(obs_space)
    _, n = ModelCatalog.get_action_dist(action_space, cfg(), framework="torch")
    m = ModelCatalog.get_model_v2(
        flat_space, action_space, n, cfg(fcnet_hiddens=[16], post_fcnet_hiddens=[8]), framework="torch"
    )
    assert type(m).__name__ == cls_name
    out, state = m({"obs": torch.from_numpy(obs)})
    assert tuple(out.shape) == (3, n) and state == []
    assert tuple(m.value_function().shape) == (3,)


def test_complex_input_one_hot_from_ints_equals_float_one_hot():
    space = gym.spaces.Dict({"img": IMG, "d": gym.spaces.Discrete(3)})
    flat_space = ModelCatalog.get_preprocessor_for_space(space).observation_space
    m = ComplexInputNetwork(flat_space, DISC2, 2, cfg(), "cin")
    img = torch.rand(2, 10, 10, 3)
    a, _ = m.forward({"obs": {"d": torch.tensor([0, 2]), "img": img}, "obs_flat": None}, [], None)
    b, _ = m.forward(
        {"obs": {"d": torch.tensor([[1.0, 0, 0], [0, 0, 1.0]]), "img": img}, "obs_flat": None}, [], None
    )
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)
    assert [k for k in dict(m.named_children())] == ["cnn_1", "post_fc_stack", "logits_layer", "value_layer"]


def test_complex_input_without_outputs_returns_concat():
    space = gym.spaces.Tuple([IMG, gym.spaces.Discrete(3), BOX4])
    flat_space = ModelCatalog.get_preprocessor_for_space(space).observation_space
    m = ComplexInputNetwork(flat_space, DISC2, None, cfg(), "cin")
    assert m.num_outputs == 32 + 3 + 4


# ---------------------------------------------------------------- vision
def test_vision_without_outputs_flattens_and_bad_filters_error():
    m = VisionNetwork(IMG, DISC2, None, cfg(), "vis")
    assert m.num_outputs == 32
    assert tuple(m({"obs": torch.zeros(2, 10, 10, 3)})[0].shape) == (2, 32)
    bad = VisionNetwork(IMG, DISC2, 2, cfg(conv_filters=[[4, [3, 3], 1]]), "vis")
    with pytest.raises(ValueError, match=r"expected \[B, 2, 1, 1\]"):
        bad({"obs": torch.zeros(1, 10, 10, 3)})


@pytest.mark.parametrize(
    "in_size,k,s,padding,out",
    [
        ((10, 10), 5, 2, (1, 2, 1, 2), (5, 5)),  # pad 3 -> 1 left/top, 2 right/bottom
        ((84, 84), [8, 8], 4, (2, 2, 2, 2), (21, 21)),
        ((7, 9), [3, 3], 1, (1, 1, 1, 1), (7, 9)),
        ((6, 6), 2, 2, (0, 0, 0, 0), (3, 3)),
    ],
)
def test_same_padding_matches_tf_rule(in_size, k, s, padding, out):
    assert same_padding(in_size, k, s) == (padding, out)
    x = torch.zeros(1, 1, *in_size)
    conv = SlimConv2d(1, 1, k, s, padding)
    assert tuple(conv(x).shape[2:]) == out


def test_slim_layers_and_append_bias():
    fc = SlimFC(3, 2, initializer=normc_initializer(2.0), activation_fn="relu")
    np.testing.assert_allclose(fc._model[0].weight.norm(dim=1).detach().numpy(), 2.0, rtol=1e-5, atol=1e-6)
    assert isinstance(fc._model[1], nn.ReLU)
    out = AppendBiasLayer(2)(torch.ones(4, 3))
    assert tuple(out.shape) == (4, 5) and float(out[:, 3:].detach().abs().sum()) == 0.0


@pytest.mark.parametrize("activation", [None, "tanh", "relu", "swish", "linear", "elu"])
def test_slim_fc_matches_its_layers(activation):
    torch.manual_seed(0)
    fc = SlimFC(3, 4, initializer=normc_initializer(1.0), activation_fn=activation)
    x = torch.randn(5, 3)
    expected = x @ fc._model[0].weight.T + fc._model[0].bias
    act = {
        None: lambda t: t,
        "linear": lambda t: t,
        "tanh": torch.tanh,
        "relu": torch.relu,
        "swish": lambda t: t * torch.sigmoid(t),
        "elu": torch.nn.functional.elu,
    }[activation]
    np.testing.assert_allclose(fc(x).detach().numpy(), act(expected).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_slim_fc_runs_hooks_and_follows_replaced_layers():
    torch.manual_seed(0)
    fc = SlimFC(3, 4, activation_fn="tanh")
    x = torch.randn(2, 3)
    seen = []
    handle = fc._model[0].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    fc(x)
    assert seen == [torch.Size([2, 4])]
    handle.remove()
    handle = fc._model[1].register_forward_hook(lambda m, i, o: o * 0.0)
    assert float(fc(x).detach().abs().sum()) == 0.0  # the activation's hook replaced its output
    handle.remove()
    fc._model[1] = nn.ReLU()  # a swapped-in layer is used from then on
    assert float(fc(x).detach().min()) >= 0.0

    # A parametrized weight (here: doubled) is used as the parametrization says.
    class Double(nn.Module):
        def forward(self, w):
            return 2.0 * w

    plain_out = fc(x).detach()
    torch.nn.utils.parametrize.register_parametrization(fc._model[0], "weight", Double())
    lin = fc._model[0]
    np.testing.assert_allclose(
        fc(x).detach().numpy(),
        torch.relu(x @ (2.0 * lin.parametrizations.weight.original).T + lin.bias).detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    assert not torch.equal(fc(x).detach(), plain_out)
    torch.nn.utils.parametrize.remove_parametrizations(fc._model[0], "weight")
    # Deep copies (as made for towers) compute with their own weights.
    clone = copy.deepcopy(fc)
    with torch.no_grad():
        clone._model[0].weight.zero_()
        clone._model[0].bias.fill_(-1.0)
    np.testing.assert_array_equal(clone(x).detach().numpy(), np.zeros((2, 4), np.float32))
    assert float(fc(x).detach().abs().sum()) > 0.0


# ------------------------------------------------------------------- LSTM
@pytest.fixture
def lstm_model():
    torch.manual_seed(0)
    return ModelCatalog.get_model_v2(
        BOX4,
        DISC2,
        3,
        cfg(
            fcnet_hiddens=[8, 6],
            use_lstm=True,
            lstm_cell_size=5,
            lstm_use_prev_action=True,
            lstm_use_prev_reward=True,
        ),
        framework="torch",
    )


def _lstm_inputs(rows):
    rng = np.random.default_rng(2)
    return {
        "obs": torch.from_numpy(rng.normal(size=(rows, 4)).astype(np.float32)),
        "prev_actions": torch.from_numpy(rng.integers(0, 2, size=rows)),
        "prev_rewards": torch.from_numpy(rng.normal(size=rows).astype(np.float32)),
    }


def test_lstm_sequence_call_matches_step_by_step(lstm_model):
    m, B, T = lstm_model, 2, 4
    inp = _lstm_inputs(B * T)
    h0 = [s.unsqueeze(0).repeat(B, 1) for s in m.get_initial_state()]
    full, full_state = m(inp, h0, torch.tensor([T] * B))
    state, steps = h0, []
    for t in range(T):
        rows = [b * T + t for b in range(B)]
        step_in = {k: v[rows] for k, v in inp.items()}
        out, state = m(step_in, state, torch.ones(B, dtype=torch.int32))
        steps.append(out)
    stepped = torch.stack(steps, dim=1).reshape(B * T, 3)
    np.testing.assert_allclose(full.detach().numpy(), stepped.detach().numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(full_state, state):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_lstm_carries_state_across_calls(lstm_model):
    m = lstm_model
    inp = _lstm_inputs(2)
    zeros = [s.unsqueeze(0).repeat(2, 1) for s in m.get_initial_state()]
    _, s1 = m(inp, zeros, torch.ones(2, dtype=torch.int32))
    out_carried, s2 = m(inp, s1, torch.ones(2, dtype=torch.int32))
    out_fresh, _ = m(inp, zeros, torch.ones(2, dtype=torch.int32))
    assert not np.allclose(out_carried.detach().numpy(), out_fresh.detach().numpy(), atol=1e-6)
    assert [tuple(s.shape) for s in s2] == [(2, 5), (2, 5)]
    assert tuple(m.value_function().shape) == (2,)


def test_lstm_matches_numpy_lstm_step():
    torch.manual_seed(0)
    m = ModelCatalog.get_model_v2(
        BOX4, DISC2, 3, cfg(fcnet_hiddens=[6], use_lstm=True, lstm_cell_size=5), framework="torch"
    )
    p = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    x = np.random.default_rng(3).normal(size=(2, 4)).astype(np.float32)
    h = np.random.default_rng(4).normal(size=(2, 5)).astype(np.float32)
    c = np.random.default_rng(5).normal(size=(2, 5)).astype(np.float32)
    feat = np.tanh(x @ p["_hidden_layers.0._model.0.weight"].T + p["_hidden_layers.0._model.0.bias"])
    gates = (
        feat @ p["lstm.weight_ih_l0"].T
        + p["lstm.bias_ih_l0"]
        + h @ p["lstm.weight_hh_l0"].T
        + p["lstm.bias_hh_l0"]
    )
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    i, f, g, o = np.split(gates, 4, axis=1)  # torch gate order: input, forget, cell, output
    c_new = sig(f) * c + sig(i) * np.tanh(g)
    h_new = sig(o) * np.tanh(c_new)
    logits = h_new @ p["_logits_branch._model.0.weight"].T + p["_logits_branch._model.0.bias"]
    out, (h_out, c_out) = m(
        {"obs": torch.from_numpy(x)},
        [torch.from_numpy(h), torch.from_numpy(c)],
        torch.ones(2, dtype=torch.int32),
    )
    np.testing.assert_allclose(out.detach().numpy(), logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h_out.detach().numpy(), h_new, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c_out.detach().numpy(), c_new, rtol=1e-4, atol=1e-5)


def test_lstm_view_requirements_and_initial_state(lstm_model):
    vr = lstm_model.view_requirements
    assert vr["prev_actions"].data_col == "actions" and vr["prev_actions"].shift == -1
    assert vr["prev_rewards"].data_col == "rewards" and vr["prev_rewards"].shift == -1
    for i in range(2):
        assert vr[f"state_in_{i}"].data_col == f"state_out_{i}"
        assert vr[f"state_in_{i}"].shift == -1
        assert vr[f"state_in_{i}"].batch_repeat_value == 20
        assert vr[f"state_out_{i}"].space.shape == (5,)
    init = lstm_model.get_initial_state()
    assert [tuple(s.shape) for s in init] == [(5,), (5,)]
    assert all(float(s.abs().sum()) == 0.0 for s in init)


def test_lstm_needs_seq_lens(lstm_model):
    with pytest.raises(ValueError, match="needs seq_lens"):
        lstm_model.forward({"obs_flat": torch.zeros(2, 4)}, [], None)


# ------------------------------------------------ bad obs / bad output errors
class _WrongWidth(TorchModelV2, nn.Module):
    def __init__(self, *args):
        TorchModelV2.__init__(self, *args)
        nn.Module.__init__(self)

    def forward(self, input_dict, state, seq_lens):
        return torch.zeros(input_dict["obs"].shape[0], 5), state


def test_bad_obs_shape_names_expected_and_received():
    m = FullyConnectedNetwork(BOX4, DISC2, 3, cfg(fcnet_hiddens=[8]), "fc")
    with pytest.raises(ValueError, match=r"shape \(3, 5\).*expects \[BATCH, \*\(4,\)\]"):
        m({"obs": torch.zeros(3, 5)})
    v = VisionNetwork(IMG, DISC2, 2, cfg(), "vis")
    with pytest.raises(ValueError, match=r"shape \(2, 10, 10, 4\).*\(10, 10, 3\)"):
        v({"obs": torch.zeros(2, 10, 10, 4)})


def test_bad_output_size_names_expected_and_received():
    m = _WrongWidth(BOX4, DISC2, 3, cfg(), "wrong")
    with pytest.raises(ValueError, match=r"shape \(2, 5\) but expected \[BATCH, num_outputs=3\]"):
        m({"obs": torch.zeros(2, 4)})


# ------------------------------------------------------- models.utils helpers
def test_get_activation_fn_torch_and_errors():
    from rlpolicy.models.utils import get_activation_fn

    assert get_activation_fn("relu", "torch") is nn.ReLU
    assert get_activation_fn("tanh", "torch") is nn.Tanh
    assert get_activation_fn("swish", "torch") is nn.SiLU
    assert get_activation_fn("ELU", "torch") is nn.ELU
    assert get_activation_fn("linear", "torch") is None and get_activation_fn(None, "torch") is None
    with pytest.raises(ValueError, match="unknown activation 'bogus' for framework='torch'"):
        get_activation_fn("bogus", "torch")
    with pytest.raises(ValueError, match="unsupported framework 'caffe'"):
        get_activation_fn("relu", "caffe")


@pytest.mark.parametrize(
    "shape,first",
    [
        ((84, 84, 3), [16, [8, 8], 4]),
        ((3, 84, 84), [16, [8, 8], 4]),
        ((42, 42, 1), [16, [4, 4], 2]),
        ((10, 10, 3), [16, [5, 5], 2]),
        ((96, 96, 3), [16, [8, 8], 4]),
        ((480, 640, 3), [16, [24, 32], [14, 18]]),
    ],
)
def test_get_filter_config(shape, first):
    from rlpolicy.models.utils import get_filter_config

    assert get_filter_config(shape)[0] == first


def test_get_filter_config_unknown_and_initializer():
    from rlpolicy.models.utils import get_filter_config, get_initializer

    with pytest.raises(ValueError, match=r"no default conv_filters for observation shape \[11, 11, 3\]"):
        get_filter_config((11, 11, 3))
    assert get_initializer(None, "torch") is nn.init.xavier_uniform_
    assert get_initializer("xavier_normal", "torch") is nn.init.xavier_normal_
    with pytest.raises(ValueError, match="unknown initializer 'he'"):
        get_initializer("he", "torch")


@pytest.mark.parametrize(
    "shape, want",
    [
        # Hand-worked: 3x3 stride-2 "same" layers halve (rounding up) while a side is > 6,
        # at most 4 times; a last kernel covers the rest.
        ((2, 2, 1), [[128, [2, 2], 1]]),
        ((6, 5, 3), [[128, [6, 5], 1]]),
        ((7, 7, 1), [[16, [3, 3], 2], [128, [4, 4], 1]]),
        ((13, 30, 2), [[16, [3, 3], 2], [32, [3, 3], 2], [64, [3, 3], 2], [128, [2, 4], 1]]),
        (
            (200, 200, 3),
            [[16, [3, 3], 2], [32, [3, 3], 2], [64, [3, 3], 2], [128, [3, 3], 2], [128, [13, 13], 1]],
        ),
        ((84, 84, 3), [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 1]]),  # RLlib's default
    ],
)
def test_default_filter_config(shape, want):
    from rlpolicy.models.utils import default_filter_config

    assert default_filter_config(shape) == want


@pytest.mark.parametrize("shape", [(2, 2, 1), (7, 7, 1), (5, 9, 2), (13, 30, 2)])
def test_visionnet_builds_for_any_image_size(shape):
    model = VisionNetwork(
        gym.spaces.Box(0, 1, shape),
        gym.spaces.Discrete(3),
        3,
        {"conv_filters": None, "conv_activation": "relu"},
        "v",
    )
    out, _ = model({"obs": torch.zeros((2,) + shape)})
    assert tuple(out.shape) == (2, 3)
    assert tuple(model.value_function().shape) == (2,)
