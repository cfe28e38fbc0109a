"""Every action distribution gives the same numbers in torch, TF graph mode and TF eager.

For each of the eight distribution pairs (torch class, tf class) the same
inputs go through all three modes; logp / entropy / kl / deterministic_sample
must agree across modes and, where a closed form is simple, with numpy/scipy.
Sampling is checked by statistics: each mode's sample mean lies near the
others' (and near the known mean where there is one), and in every mode
``sampled_action_logp()`` equals ``logp(sample())``.
"""

import numpy as np
import pytest
from scipy import special, stats

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")
gym = pytest.importorskip("gymnasium")

from rlpolicy.utils.framework import try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()

from rlpolicy.models.tf import tf_action_dist as tfd  # noqa: E402

pytestmark = pytest.mark.tf

td = pytest.importorskip("rlpolicy.models.torch.torch_action_dist")

RNG = np.random.default_rng(7)
B = 4
TUPLE_SPACE = gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)])


def _f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def _log_softmax(z):
    return z - special.logsumexp(z, axis=-1, keepdims=True)


def _ref_categorical(inputs, x):
    return {
        "logp": _log_softmax(inputs)[np.arange(len(x)), x],
        "entropy": stats.entropy(special.softmax(inputs, -1), axis=-1),
        "deterministic_sample": inputs.argmax(-1),
    }


def _ref_multicat(inputs, x):
    parts = np.split(inputs, [2], axis=1)
    return {
        "logp": sum(_log_softmax(p)[np.arange(len(x)), x[:, i]] for i, p in enumerate(parts)),
        "entropy": sum(stats.entropy(special.softmax(p, -1), axis=-1) for p in parts),
        "deterministic_sample": np.stack([p.argmax(-1) for p in parts], 1),
    }


def _ref_gauss(inputs, x):
    mean, log_std = np.split(inputs, 2, axis=1)
    return {
        "logp": stats.norm.logpdf(x, mean, np.exp(log_std)).sum(1),
        "entropy": stats.norm.entropy(mean, np.exp(log_std)).sum(1),
        "deterministic_sample": mean,
    }


def _ref_beta(inputs, x, low=-1.0, high=2.0):
    conc = np.log1p(np.exp(inputs)) + 1.0
    a, b = np.split(conc, 2, axis=1)
    return {
        "logp": stats.beta.logpdf((x - low) / (high - low), a, b).sum(1),
        "entropy": stats.beta.entropy(a, b).sum(1),
        "deterministic_sample": low + (high - low) * a / (a + b),
    }


def _ref_dirichlet(inputs, x):
    conc = np.exp(inputs.astype(np.float64))
    return {
        "logp": np.array([stats.dirichlet.logpdf(xi / xi.sum(), ci) for xi, ci in zip(x, conc)]),
        "entropy": np.array([stats.dirichlet.entropy(ci) for ci in conc]),
    }


def _ref_multi(inputs, x):
    cat = _ref_categorical(inputs[:, :3], x[:, 0].astype(np.int64))
    gauss = _ref_gauss(inputs[:, 3:], x[:, 1:])
    return {"logp": cat["logp"] + gauss["logp"], "entropy": cat["entropy"] + gauss["entropy"]}


_MULTI_KW = dict(input_lens=[3, 4], action_space=TUPLE_SPACE)

# name: (tf class, torch class, tf kwargs, torch kwargs, input width, action maker, numpy reference or None)
CASES = {
    "Categorical": (
        tfd.Categorical,
        td.TorchCategorical,
        {},
        {},
        5,
        lambda: RNG.integers(0, 5, B),
        _ref_categorical,
    ),
    "MultiCategorical": (
        tfd.MultiCategorical,
        td.TorchMultiCategorical,
        {"input_lens": [2, 3]},
        {"input_lens": [2, 3]},
        5,
        lambda: np.stack([RNG.integers(0, 2, B), RNG.integers(0, 3, B)], 1),
        _ref_multicat,
    ),
    "DiagGaussian": (tfd.DiagGaussian, td.TorchDiagGaussian, {}, {}, 6, lambda: _f32(B, 3), _ref_gauss),
    "SquashedGaussian": (
        tfd.SquashedGaussian,
        td.TorchSquashedGaussian,
        {"low": -2.0, "high": 3.0},
        {"low": -2.0, "high": 3.0},
        4,
        lambda: RNG.uniform(-1.9, 2.9, (B, 2)).astype(np.float32),
        None,
    ),
    "Beta": (
        tfd.Beta,
        td.TorchBeta,
        {"low": -1.0, "high": 2.0},
        {"low": -1.0, "high": 2.0},
        4,
        lambda: RNG.uniform(-0.9, 1.9, (B, 2)).astype(np.float32),
        _ref_beta,
    ),
    "Deterministic": (tfd.Deterministic, td.TorchDeterministic, {}, {}, 2, lambda: _f32(B, 2), None),
    "Dirichlet": (
        tfd.Dirichlet,
        td.TorchDirichlet,
        {},
        {},
        3,
        lambda: RNG.dirichlet(np.ones(3), B).astype(np.float32),
        _ref_dirichlet,
    ),
    "MultiActionDistribution": (
        tfd.MultiActionDistribution,
        td.TorchMultiActionDistribution,
        dict(_MULTI_KW, child_distributions=[tfd.Categorical, tfd.DiagGaussian]),
        dict(_MULTI_KW, child_distributions=[td.TorchCategorical, td.TorchDiagGaussian]),
        7,
        lambda: np.concatenate([RNG.integers(0, 3, (B, 1)).astype(np.float32), _f32(B, 2)], 1),
        _ref_multi,
    ),
}
# Methods with a defined value per distribution (RLlib: no entropy/kl for SquashedGaussian,
# only samples for Deterministic; Dirichlet's deterministic_sample is checked in the tf tests).
METHODS = {
    "SquashedGaussian": ("logp", "deterministic_sample"),
    "Deterministic": ("deterministic_sample", "sample"),
    "MultiActionDistribution": ("logp", "entropy", "kl", "deterministic_sample"),
}
ALL_METHODS = ("logp", "entropy", "kl", "deterministic_sample")


@pytest.fixture(scope="module")
def graph_session():
    graph = tf1.Graph()
    with graph.as_default():
        sess = tf1.Session(graph=graph)
    yield graph, sess
    sess.close()


def _ops(dist, other, x, methods, to_tensor):
    out = {}
    for method in methods:
        if method == "logp":
            out[method] = dist.logp(to_tensor(x))
        elif method == "kl":
            out[method] = dist.kl(other)
        else:
            out[method] = getattr(dist, method)()
    return out


def _numpy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().numpy()
    return tf.nest.map_structure(np.asarray, value)


def _flat(value):
    """Tuple actions (multi-action deterministic samples) -> one [B, n] array."""
    if isinstance(value, (tuple, list)):
        return np.concatenate([np.reshape(v, (len(v), -1)).astype(np.float64) for v in value], 1)
    return np.asarray(value, np.float64)


def _all_modes(name, inputs, inputs2, x, graph_session):
    tf_cls, t_cls, tf_kw, t_kw, _, _, _ = CASES[name]
    methods = METHODS.get(name, ALL_METHODS)
    res = {}
    t = torch.from_numpy
    res["torch"] = _ops(t_cls(t(inputs), None, **t_kw), t_cls(t(inputs2), None, **t_kw), x, methods, t)
    c = tf.constant
    res["eager"] = _ops(tf_cls(c(inputs), None, **tf_kw), tf_cls(c(inputs2), None, **tf_kw), x, methods, c)
    graph, sess = graph_session
    with graph.as_default():
        ops = _ops(tf_cls(c(inputs), None, **tf_kw), tf_cls(c(inputs2), None, **tf_kw), x, methods, c)
    res["graph"] = sess.run(ops)
    return {mode: {k: _flat(_numpy(v)) for k, v in values.items()} for mode, values in res.items()}


@pytest.mark.tf_eager_code
@pytest.mark.parametrize("name", list(CASES))
def test_same_numbers_in_torch_tf_graph_and_tf_eager(name, graph_session):
    width, make_x, ref = CASES[name][4], CASES[name][5], CASES[name][6]
    inputs, inputs2, x = _f32(B, width), _f32(B, width), make_x()
    res = _all_modes(name, inputs, inputs2, x, graph_session)
    for method, torch_value in res["torch"].items():
        for mode in ("eager", "graph"):
            np.testing.assert_allclose(
                res[mode][method],
                torch_value,
                rtol=1e-4,
                atol=1e-5,
                err_msg=f"{name}.{method}: {mode} != torch",
            )
    for method, expected in (ref(inputs, x) if ref else {}).items():
        np.testing.assert_allclose(
            res["torch"][method],
            _flat(expected),
            rtol=1e-4,
            atol=1e-5,
            err_msg=f"{name}.{method} != numpy/scipy",
        )
    if "kl" in res["torch"]:
        assert (res["torch"]["kl"] > -1e-5).all()
    if name == "Deterministic":
        np.testing.assert_array_equal(res["torch"]["sample"], inputs)


SAMPLED = {  # name: known mean of the samples per input row (None: compare the modes only)
    "Categorical": None,
    "DiagGaussian": lambda z: np.split(z, 2, -1)[0],
    "SquashedGaussian": None,
    "Beta": lambda z: _ref_beta(z[None], np.zeros((1, 2)))["deterministic_sample"][0],
    "Dirichlet": lambda z: np.exp(z) / np.exp(z).sum(),
    "MultiCategorical": None,
}
N = 6000


@pytest.mark.parametrize("name", list(SAMPLED))
@pytest.mark.tf_eager_code  # its eager half runs outside the graph_session graph
def test_sample_statistics_agree_and_sampled_logp_is_logp_of_sample(name, graph_session):
    tf_cls, t_cls, tf_kw, t_kw, width = CASES[name][:5]
    row = _f32(width) * 0.7
    inputs = np.tile(row, (N, 1))
    graph, sess = graph_session
    t_dist = t_cls(torch.from_numpy(inputs), None, **t_kw)
    t_s = t_dist.sample()
    samples = {"torch": (t_s.numpy(), t_dist.sampled_action_logp().numpy(), t_dist.logp(t_s).numpy())}
    e_dist = tf_cls(tf.constant(inputs), None, **tf_kw)
    e_s = e_dist.sample()
    samples["eager"] = (e_s.numpy(), e_dist.sampled_action_logp().numpy(), e_dist.logp(e_s).numpy())
    with graph.as_default():
        g_dist = tf_cls(tf.constant(inputs), None, **tf_kw)
        ops = (g_dist.sample(), g_dist.sampled_action_logp(), g_dist.logp(g_dist.sample()))
    samples["graph"] = tuple(sess.run(ops))
    if name in ("Categorical", "MultiCategorical"):
        sizes = [width] if name == "Categorical" else tf_kw["input_lens"]
        logits = np.split(row, np.cumsum(sizes)[:-1])
        expected = np.concatenate([special.softmax(z) for z in logits])
    else:
        expected = SAMPLED[name](row) if SAMPLED[name] else None
    means, tols = {}, {}
    for mode, (s, sampled_logp, logp_of_s) in samples.items():
        np.testing.assert_allclose(sampled_logp, logp_of_s, rtol=1e-4, atol=1e-4, err_msg=mode)
        s = s.reshape(N, -1)
        if name in ("Categorical", "MultiCategorical"):  # per-category frequencies
            s = np.concatenate([np.eye(k)[s[:, i].astype(int)] for i, k in enumerate(sizes)], 1)
        means[mode], tols[mode] = s.mean(0), 5 * s.std(0) / np.sqrt(N) + 1e-3  # 5 standard errors
        if expected is not None:
            assert (np.abs(means[mode] - expected) < tols[mode]).all(), (mode, means[mode], expected)
    for mode in ("eager", "graph"):
        assert (np.abs(means[mode] - means["torch"]) < np.sqrt(2) * tols[mode]).all(), (mode, means)
