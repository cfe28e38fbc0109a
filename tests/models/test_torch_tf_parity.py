"""Torch and TF (eager) versions agree: FC nets with the same weights, and action distributions.

Skips when torch, tensorflow or the torch classes are missing.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")
gym = pytest.importorskip("gymnasium")

from rlpolicy._core.defaults import MODEL_DEFAULTS  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()

from rlpolicy.models.tf import tf_action_dist as tfd  # noqa: E402
from rlpolicy.models.tf.fcnet import FullyConnectedNetwork as TFFCNet  # noqa: E402

torch_fcnet = pytest.importorskip("rlpolicy.models.torch.fcnet")
torch_dists = pytest.importorskip("rlpolicy.models.torch.torch_action_dist")

pytestmark = [pytest.mark.tf, pytest.mark.tf_eager_code]

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
RNG = np.random.default_rng(0)


# ------------------------------------------------------------------ FC nets


def torch_to_tf_name(torch_name, no_final_linear, n_hidden):
    """Maps a torch fcnet parameter name to the TF variable holding the same numbers."""
    parts = torch_name.split(".")
    kind = {"weight": "kernel", "bias": "bias"}.get(parts[-1])
    if parts[0] == "_append_free_log_std":
        return "log_std:0"
    if parts[0] == "_hidden_layers":
        i = int(parts[1])
        layer = "fc_out" if no_final_linear and i == n_hidden - 1 else f"fc_{i + 1}"
    elif parts[0] == "_value_branch_separate":
        layer = f"fc_value_{int(parts[1]) + 1}"
    else:
        layer = {"_logits": "fc_out", "_value_branch": "value_out"}[parts[0]]
    return f"{layer}/{kind}:0"


CONFIGS = {
    "shared": dict(fcnet_hiddens=[6, 5], vf_share_layers=True),
    "separate-vf": dict(fcnet_hiddens=[6, 5], vf_share_layers=False, fcnet_activation="relu"),
    "free-log-std": dict(fcnet_hiddens=[6], vf_share_layers=True, free_log_std=True),
    # RLlib's torch net sizes its value head by num_outputs here: keep hiddens[-1] == num_outputs.
    "no-final-linear": dict(fcnet_hiddens=[6, 4], vf_share_layers=False, no_final_linear=True),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_torch_and_tf_fcnets_with_same_weights_agree(name):
    config = dict(MODEL_DEFAULTS, **CONFIGS[name])
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    t_model = torch_fcnet.FullyConnectedNetwork(OBS, action_space, 4, dict(config), "torch")
    tf_model = TFFCNet(OBS, action_space, 4, dict(config), "tf")
    tf_vars = {v.name: v for v in tf_model.variables()}
    n_hidden = len(config["fcnet_hiddens"])
    mapped = set()
    with torch.no_grad():
        for t_name, param in t_model.state_dict().items():
            param.copy_(torch.from_numpy(RNG.normal(size=tuple(param.shape)).astype(np.float32) * 0.5))
            value = param.numpy()
            tf_name = torch_to_tf_name(t_name, config.get("no_final_linear"), n_hidden)
            # torch Linear weight is [out, in]; the TF kernel is [in, out].
            tf_vars[tf_name].assign(value.T if value.ndim == 2 else value)
            mapped.add(tf_name)
    assert mapped == set(tf_vars), "every TF variable has exactly one torch counterpart"
    obs = RNG.normal(size=(5, 4)).astype(np.float32)
    t_out, _ = t_model({"obs": torch.from_numpy(obs)})
    tf_out, _ = tf_model({"obs": tf.constant(obs)})
    np.testing.assert_allclose(tf_out.numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        tf_model.value_function().numpy(), t_model.value_function().detach().numpy(), rtol=1e-5, atol=1e-6
    )


# ------------------------------------------------------ action distributions


def both(tf_cls, torch_cls, inputs, **kwargs):
    return (tf_cls(tf.constant(inputs), None, **kwargs), torch_cls(torch.from_numpy(inputs), None, **kwargs))


def assert_close(tf_value, torch_value):
    np.testing.assert_allclose(np.asarray(tf_value), torch_value.detach().numpy(), rtol=1e-4, atol=1e-5)


LOGITS = RNG.normal(size=(4, 5)).astype(np.float32)
LOGITS2 = RNG.normal(size=(4, 5)).astype(np.float32)


def compare(tf_pair, other_pair, x, methods=("logp", "entropy", "kl", "deterministic_sample")):
    (tf_d, t_d), (tf_o, t_o) = tf_pair, other_pair
    for method in methods:
        if method == "logp":
            assert_close(tf_d.logp(tf.constant(x)), t_d.logp(torch.from_numpy(x)))
        elif method == "kl":
            assert_close(tf_d.kl(tf_o), t_d.kl(t_o))
        else:
            assert_close(getattr(tf_d, method)(), getattr(t_d, method)())


def test_categorical_parity():
    x = np.array([0, 4, 2, 1])
    compare(
        both(tfd.Categorical, torch_dists.TorchCategorical, LOGITS),
        both(tfd.Categorical, torch_dists.TorchCategorical, LOGITS2),
        x,
    )


def test_multicategorical_parity():
    x = np.array([[0, 1], [1, 2], [1, 0], [0, 2]])
    kw = {"input_lens": [2, 3]}
    compare(
        both(tfd.MultiCategorical, torch_dists.TorchMultiCategorical, LOGITS, **kw),
        both(tfd.MultiCategorical, torch_dists.TorchMultiCategorical, LOGITS2, **kw),
        x,
    )


def test_diag_gaussian_parity():
    inputs, inputs2 = RNG.normal(size=(4, 6)).astype(np.float32), RNG.normal(size=(4, 6)).astype(np.float32)
    compare(
        both(tfd.DiagGaussian, torch_dists.TorchDiagGaussian, inputs),
        both(tfd.DiagGaussian, torch_dists.TorchDiagGaussian, inputs2),
        RNG.normal(size=(4, 3)).astype(np.float32),
    )


def test_squashed_gaussian_parity():
    inputs = RNG.normal(size=(4, 4)).astype(np.float32)
    pair = both(tfd.SquashedGaussian, torch_dists.TorchSquashedGaussian, inputs, low=-2.0, high=3.0)
    compare(
        pair, pair, RNG.uniform(-1.9, 2.9, size=(4, 2)).astype(np.float32), ("logp", "deterministic_sample")
    )


def test_beta_parity():
    inputs, inputs2 = RNG.normal(size=(4, 4)).astype(np.float32), RNG.normal(size=(4, 4)).astype(np.float32)
    compare(
        both(tfd.Beta, torch_dists.TorchBeta, inputs, low=-1.0, high=2.0),
        both(tfd.Beta, torch_dists.TorchBeta, inputs2, low=-1.0, high=2.0),
        RNG.uniform(-0.9, 1.9, size=(4, 2)).astype(np.float32),
    )


def test_dirichlet_parity():
    inputs, inputs2 = RNG.normal(size=(4, 3)).astype(np.float32), RNG.normal(size=(4, 3)).astype(np.float32)
    compare(
        both(tfd.Dirichlet, torch_dists.TorchDirichlet, inputs),
        both(tfd.Dirichlet, torch_dists.TorchDirichlet, inputs2),
        RNG.dirichlet(np.ones(3), size=4).astype(np.float32),
    )


def test_deterministic_parity():
    inputs = RNG.normal(size=(4, 2)).astype(np.float32)
    tf_d, t_d = both(tfd.Deterministic, torch_dists.TorchDeterministic, inputs)
    assert_close(tf_d.deterministic_sample(), t_d.deterministic_sample())
    assert_close(tf_d.sample(), t_d.sample())


def test_multi_action_parity():
    space = gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)])
    kw = dict(child_distributions=[tfd.Categorical, tfd.DiagGaussian], input_lens=[3, 4], action_space=space)
    t_kw = dict(kw, child_distributions=[torch_dists.TorchCategorical, torch_dists.TorchDiagGaussian])
    inputs, inputs2 = RNG.normal(size=(4, 7)).astype(np.float32), RNG.normal(size=(4, 7)).astype(np.float32)
    pair = (
        tfd.MultiActionDistribution(tf.constant(inputs), None, **kw),
        torch_dists.TorchMultiActionDistribution(torch.from_numpy(inputs), None, **t_kw),
    )
    other = (
        tfd.MultiActionDistribution(tf.constant(inputs2), None, **kw),
        torch_dists.TorchMultiActionDistribution(torch.from_numpy(inputs2), None, **t_kw),
    )
    x = np.concatenate(
        [np.array([[0], [2], [1], [1]], np.float32), RNG.normal(size=(4, 2)).astype(np.float32)], 1
    )
    compare(pair, other, x, ("logp", "entropy", "kl"))


# ------------------------------------------------------------ LSTM wrapper


LSTM_ACTION_SPACES = {
    "discrete": (gym.spaces.Discrete(3), 3, lambda n: RNG.integers(0, 3, n)),
    "multidiscrete": (
        gym.spaces.MultiDiscrete([2, 3]),
        5,
        lambda n: np.stack([RNG.integers(0, 2, n), RNG.integers(0, 3, n)], 1),
    ),
    "box": (
        gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        2,
        lambda n: RNG.normal(size=(n, 2)).astype(np.float32),
    ),
}


@pytest.mark.parametrize("action_name", list(LSTM_ACTION_SPACES))
def test_torch_and_tf_lstm_wrappers_with_same_weights_agree(action_name):
    torch_rnn = pytest.importorskip("rlpolicy.models.torch.recurrent_net")
    from rlpolicy.models.tf.recurrent_net import LSTMWrapper

    def wrap(lstm_cls, base):
        return type("Wrapped", (lstm_cls, base), {"_wrapped_forward": base.forward})

    config = dict(
        MODEL_DEFAULTS,
        fcnet_hiddens=[5],
        lstm_cell_size=3,
        lstm_use_prev_action=True,
        lstm_use_prev_reward=True,
    )
    space, action_dim, make_actions = LSTM_ACTION_SPACES[action_name]
    t_model = wrap(torch_rnn.LSTMWrapper, torch_fcnet.FullyConnectedNetwork)(OBS, space, 2, dict(config), "t")
    tf_model = wrap(LSTMWrapper, TFFCNet)(OBS, space, 2, dict(config), "tf")
    tf_vars = {v.name: v for v in tf_model.variables()}
    sd = {
        k: RNG.normal(size=tuple(v.shape)).astype(np.float32) * 0.5 for k, v in t_model.state_dict().items()
    }
    t_model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    pairs = {
        "fc_1/kernel:0": sd["_hidden_layers.0._model.0.weight"].T,
        "fc_1/bias:0": sd["_hidden_layers.0._model.0.bias"],
        # torch and Keras share the gate order (i, f, g/c, o); torch has two biases.
        "lstm/lstm_cell/kernel:0": sd["lstm.weight_ih_l0"].T,
        "lstm/lstm_cell/recurrent_kernel:0": sd["lstm.weight_hh_l0"].T,
        "lstm/lstm_cell/bias:0": sd["lstm.bias_ih_l0"] + sd["lstm.bias_hh_l0"],
        "logits/kernel:0": sd["_logits_branch._model.0.weight"].T,
        "logits/bias:0": sd["_logits_branch._model.0.bias"],
        "values/kernel:0": sd["_value_branch._model.0.weight"].T,
        "values/bias:0": sd["_value_branch._model.0.bias"],
    }
    for name, value in pairs.items():
        tf_vars[name].assign(value)
    B, T = 2, 3
    obs = RNG.normal(size=(B * T, 4)).astype(np.float32)
    prev_a, prev_r = make_actions(B * T), RNG.normal(size=B * T).astype(np.float32)
    # LSTM input = [fc features (5), prev action (one-hot / raw, action_dim), prev reward (1)].
    assert tf_vars["lstm/lstm_cell/kernel:0"].shape == (5 + action_dim + 1, 12)
    h0, c0 = RNG.normal(size=(2, B, 3)).astype(np.float32)
    seq_lens = np.full(B, T, np.int32)  # torch's LSTM does not mask: compare full-length sequences
    t_out, t_state = t_model(
        {
            "obs": torch.from_numpy(obs),
            "prev_actions": torch.from_numpy(prev_a),
            "prev_rewards": torch.from_numpy(prev_r),
        },
        [torch.from_numpy(h0), torch.from_numpy(c0)],
        torch.from_numpy(seq_lens),
    )
    tf_out, tf_state = tf_model(
        {"obs": tf.constant(obs), "prev_actions": tf.constant(prev_a), "prev_rewards": tf.constant(prev_r)},
        [tf.constant(h0), tf.constant(c0)],
        tf.constant(seq_lens),
    )
    assert_close(tf_out, t_out)
    assert_close(tf_model.value_function(), t_model.value_function())
    for a, b in zip(tf_state, t_state):
        assert_close(a, b)


def test_tf_weights_load_into_torch_fcnet_with_multi_dim_obs():
    """The other direction (TF -> torch), with 2-D observations (flattened the same way)
    and post_fcnet_hiddens; checked against a numpy MLP as well."""
    obs_space = gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)
    config = dict(
        MODEL_DEFAULTS,
        fcnet_hiddens=[5],
        post_fcnet_hiddens=[4],
        fcnet_activation="relu",
        vf_share_layers=True,
    )
    action_space = gym.spaces.Discrete(3)
    t_model = torch_fcnet.FullyConnectedNetwork(obs_space, action_space, 3, dict(config), "torch")
    tf_model = TFFCNet(obs_space, action_space, 3, dict(config), "tf")
    rng = np.random.default_rng(11)
    w = {}
    for v in tf_model.variables():
        w[v.name] = (rng.normal(size=tuple(v.shape)) * 0.5).astype(np.float32)
        v.assign(w[v.name])
    t_sd = t_model.state_dict()
    new_sd = {}
    for t_name in t_sd:
        value = w[torch_to_tf_name(t_name, False, 2)]
        new_sd[t_name] = torch.from_numpy(np.ascontiguousarray(value.T if value.ndim == 2 else value))
    t_model.load_state_dict(new_sd, strict=True)
    obs = rng.normal(size=(4, 2, 3)).astype(np.float32)
    t_out, _ = t_model({"obs": torch.from_numpy(obs)})
    tf_out, _ = tf_model({"obs": tf.constant(obs)})
    relu = lambda x: np.maximum(x, 0.0)  # noqa: E731
    h = relu(
        relu(obs.reshape(4, 6) @ w["fc_1/kernel:0"] + w["fc_1/bias:0"]) @ w["fc_2/kernel:0"]
        + w["fc_2/bias:0"]
    )
    expected = h @ w["fc_out/kernel:0"] + w["fc_out/bias:0"]
    expected_v = (h @ w["value_out/kernel:0"] + w["value_out/bias:0"])[:, 0]
    np.testing.assert_allclose(t_out.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tf_out.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t_model.value_function().detach().numpy(), expected_v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tf_model.value_function().numpy(), expected_v, rtol=1e-5, atol=1e-6)
