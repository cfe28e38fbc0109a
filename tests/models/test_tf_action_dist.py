"""TF action distributions, in TF graph mode (one shared tf1.Graph + Session) and eagerly.

Expected values come from scipy / numpy (scipy.stats densities, entropies,
numerical integration for KL) and from sample statistics over many draws.
"""

import numpy as np
import pytest
from scipy import integrate, special, stats

tf = pytest.importorskip("tensorflow")
gym = pytest.importorskip("gymnasium")

from rlpolicy.utils.framework import try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()

from rlpolicy.models.tf.tf_action_dist import (  # noqa: E402
    Beta,
    Categorical,
    Deterministic,
    DiagGaussian,
    Dirichlet,
    MultiActionDistribution,
    MultiCategorical,
    SquashedGaussian,
    get_categorical_class_with_temperature,
)

pytestmark = pytest.mark.tf

N_DRAWS = 20000
RNG = np.random.default_rng(42)


@pytest.fixture(scope="module")
def graph_session():
    graph = tf1.Graph()
    graph.seed = 1
    with graph.as_default():
        sess = tf1.Session(graph=graph)
    yield graph, sess
    sess.close()


@pytest.fixture(params=["graph", pytest.param("eager", marks=pytest.mark.tf_eager_code)])
def run(request, graph_session):
    """``run(build)``: calls ``build()`` (which creates tensors) and returns numpy values."""
    if request.param == "eager":
        tf.random.set_seed(1)

        def _run_eager(build):
            return tf.nest.map_structure(lambda t: np.asarray(t), build())

        return _run_eager
    graph, sess = graph_session

    def _run_graph(build):
        with graph.as_default():
            ops = build()
        return sess.run(ops)

    return _run_graph


def c(x):
    return tf.constant(np.asarray(x, np.float32))


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------- Categorical

LOGITS = RNG.normal(size=(5, 4)).astype(np.float32)
LOGITS2 = RNG.normal(size=(5, 4)).astype(np.float32)


def test_categorical_logp_entropy_kl_match_scipy(run):
    actions = np.array([0, 3, 1, 2, 3])
    logp, ent, kl, det = run(
        lambda: (
            Categorical(c(LOGITS)).logp(tf.constant(actions)),
            Categorical(c(LOGITS)).entropy(),
            Categorical(c(LOGITS)).kl(Categorical(c(LOGITS2))),
            Categorical(c(LOGITS)).deterministic_sample(),
        )
    )
    p, q = special.softmax(LOGITS, axis=1), special.softmax(LOGITS2, axis=1)
    np.testing.assert_allclose(logp, np.log(p[np.arange(5), actions]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ent, stats.entropy(p, axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kl, stats.entropy(p, q, axis=1), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(det, LOGITS.argmax(axis=1))


def test_categorical_temperature_divides_logits(run):
    actions = np.array([1, 1, 0, 2, 3])
    logp, logp_cls = run(
        lambda: (
            Categorical(c(LOGITS), temperature=2.0).logp(tf.constant(actions)),
            get_categorical_class_with_temperature(2.0)(c(LOGITS)).logp(tf.constant(actions)),
        )
    )
    expected = log_softmax(LOGITS / 2.0)[np.arange(5), actions]
    np.testing.assert_allclose(logp, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp_cls, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_categorical_rejects_non_positive_temperature(temperature):
    with pytest.raises(ValueError, match="temperature must be > 0.0"):
        Categorical(c(LOGITS), temperature=temperature)


def test_categorical_sample_frequencies_and_sampled_logp(run):
    logits = np.tile(np.array([[0.0, 1.0, -1.0, 0.5]], np.float32), (N_DRAWS, 1))
    sample, sampled_logp = run(
        lambda: (lambda d: (d.sample(), d.sampled_action_logp()))(Categorical(c(logits)))
    )
    p = special.softmax(logits[0])
    freq = np.bincount(sample, minlength=4) / N_DRAWS
    np.testing.assert_allclose(freq, p, atol=5 * np.sqrt(p * (1 - p) / N_DRAWS).max())
    # The sampled logp belongs to the very same draw.
    np.testing.assert_allclose(sampled_logp, np.log(p[sample]), rtol=1e-5, atol=1e-6)


def test_categorical_required_model_output_shape():
    assert Categorical.required_model_output_shape(gym.spaces.Discrete(7), {}) == 7


# ----------------------------------------------------------- MultiCategorical

MC_LOGITS = RNG.normal(size=(3, 5)).astype(np.float32)
MC_LOGITS2 = RNG.normal(size=(3, 5)).astype(np.float32)


def test_multicategorical_matches_per_component_scipy(run):
    actions = np.array([[0, 2], [1, 0], [1, 1]])
    logp, ent, kl, multi_ent = run(
        lambda: (
            MultiCategorical(c(MC_LOGITS), None, [2, 3]).logp(tf.constant(actions)),
            MultiCategorical(c(MC_LOGITS), None, [2, 3]).entropy(),
            MultiCategorical(c(MC_LOGITS), None, [2, 3]).kl(MultiCategorical(c(MC_LOGITS2), None, [2, 3])),
            MultiCategorical(c(MC_LOGITS), None, [2, 3]).multi_entropy(),
        )
    )
    p_a, p_b = special.softmax(MC_LOGITS[:, :2], 1), special.softmax(MC_LOGITS[:, 2:], 1)
    q_a, q_b = special.softmax(MC_LOGITS2[:, :2], 1), special.softmax(MC_LOGITS2[:, 2:], 1)
    rows = np.arange(3)
    np.testing.assert_allclose(
        logp, np.log(p_a[rows, actions[:, 0]] * p_b[rows, actions[:, 1]]), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        multi_ent, np.stack([stats.entropy(p_a, axis=1), stats.entropy(p_b, axis=1)], 1), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        ent, stats.entropy(p_a, axis=1) + stats.entropy(p_b, axis=1), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        kl, stats.entropy(p_a, q_a, axis=1) + stats.entropy(p_b, q_b, axis=1), rtol=1e-4, atol=1e-6
    )


def test_multicategorical_numpy_actions_and_samples(run):
    actions = np.array([[1, 2], [0, 0], [1, 1]])
    logp_np, logp_list, sample, det = run(
        lambda: (
            MultiCategorical(c(MC_LOGITS), None, [2, 3]).logp(actions),
            MultiCategorical(c(MC_LOGITS), None, [2, 3]).logp(
                [tf.constant(actions[:, 0]), tf.constant(actions[:, 1])]
            ),
            MultiCategorical(c(MC_LOGITS), None, [2, 3]).sample(),
            MultiCategorical(c(MC_LOGITS), None, [2, 3]).deterministic_sample(),
        )
    )
    rows = np.arange(3)
    expected = (
        log_softmax(MC_LOGITS[:, :2])[rows, actions[:, 0]]
        + log_softmax(MC_LOGITS[:, 2:])[rows, actions[:, 1]]
    )
    np.testing.assert_allclose(logp_np, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp_list, expected, rtol=1e-5, atol=1e-6)
    assert sample.shape == (3, 2) and (sample[:, 0] < 2).all() and (sample[:, 1] < 3).all()
    np.testing.assert_array_equal(det, np.stack([MC_LOGITS[:, :2].argmax(1), MC_LOGITS[:, 2:].argmax(1)], 1))


def test_multicategorical_int_box_space_reshapes_samples(run):
    space = gym.spaces.Box(0, 2, shape=(2, 2), dtype=np.int32)
    logits = RNG.normal(size=(4, 12)).astype(np.float32)
    sample, det = run(
        lambda: (
            MultiCategorical(c(logits), None, [3] * 4, action_space=space).sample(),
            MultiCategorical(c(logits), None, [3] * 4, action_space=space).deterministic_sample(),
        )
    )
    assert sample.shape == (4, 2, 2) and sample.dtype == np.int32
    np.testing.assert_array_equal(det.reshape(4, 4), logits.reshape(4, 4, 3).argmax(-1))


@pytest.mark.parametrize(
    "space, expected",
    [
        (gym.spaces.MultiDiscrete([2, 3, 4]), 9),
        (gym.spaces.Box(0, 2, shape=(2,), dtype=np.int64), 6),
    ],
)
def test_multicategorical_required_model_output_shape(space, expected):
    assert MultiCategorical.required_model_output_shape(space, {}) == expected


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(0.0, 2.0, shape=(2,), dtype=np.float32),
        gym.spaces.Box(np.array([0, 0]), np.array([1, 2]), dtype=np.int64),
    ],
)
def test_multicategorical_rejects_unsuitable_box(space):
    with pytest.raises(ValueError, match="integer-typed with the same low/high"):
        MultiCategorical.required_model_output_shape(space, {})


# ----------------------------------------------------------------- DiagGaussian

MEAN = RNG.normal(size=(4, 3)).astype(np.float32)
LOG_STD = RNG.uniform(-1, 0.5, size=(4, 3)).astype(np.float32)
MEAN2 = RNG.normal(size=(4, 3)).astype(np.float32)
LOG_STD2 = RNG.uniform(-1, 0.5, size=(4, 3)).astype(np.float32)
GAUSS_IN = np.concatenate([MEAN, LOG_STD], 1)
GAUSS_IN2 = np.concatenate([MEAN2, LOG_STD2], 1)


def _kl_by_quadrature(p, q, lo, hi):
    """KL(p || q) = integral of p(x) (log p(x) - log q(x)) (Simpson's rule on a fine grid).

    ``p`` and ``q`` are frozen scipy distributions broadcast over [..., 1].
    """
    x = np.linspace(lo, hi, 20001)
    integrand = p.pdf(x) * (p.logpdf(x) - q.logpdf(x))
    return integrate.simpson(integrand, x=x, axis=-1)


def test_diag_gaussian_logp_entropy_kl(run):
    x = RNG.normal(size=(4, 3)).astype(np.float32)
    logp, ent, kl, det = run(
        lambda: (
            DiagGaussian(c(GAUSS_IN), None).logp(c(x)),
            DiagGaussian(c(GAUSS_IN), None).entropy(),
            DiagGaussian(c(GAUSS_IN), None).kl(DiagGaussian(c(GAUSS_IN2), None)),
            DiagGaussian(c(GAUSS_IN), None).deterministic_sample(),
        )
    )
    std, std2 = np.exp(LOG_STD), np.exp(LOG_STD2)
    np.testing.assert_allclose(logp, stats.norm.logpdf(x, MEAN, std).sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ent, stats.norm.entropy(MEAN, std).sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(det, MEAN, rtol=1e-6, atol=1e-6)
    lo, hi = (MEAN - 15 * std)[..., None], (MEAN + 15 * std)[..., None]
    grid = lo + (hi - lo) * np.linspace(0.0, 1.0, 20001)
    p, q = stats.norm(MEAN[..., None], std[..., None]), stats.norm(MEAN2[..., None], std2[..., None])
    kl_ref = integrate.simpson(p.pdf(grid) * (p.logpdf(grid) - q.logpdf(grid)), x=grid, axis=-1).sum(1)
    np.testing.assert_allclose(kl, kl_ref, rtol=1e-4, atol=1e-6)


def test_diag_gaussian_sample_statistics(run):
    inputs = np.tile(np.array([[1.0, -2.0, np.log(0.5), np.log(2.0)]], np.float32), (N_DRAWS, 1))
    sample, sampled_logp = run(
        lambda: (lambda d: (d.sample(), d.sampled_action_logp()))(DiagGaussian(c(inputs), None))
    )
    np.testing.assert_allclose(sample.mean(0), [1.0, -2.0], atol=5 * 2.0 / np.sqrt(N_DRAWS))
    np.testing.assert_allclose(sample.std(0), [0.5, 2.0], rtol=0.03, atol=1e-4)
    ref = stats.norm.logpdf(sample, [1.0, -2.0], [0.5, 2.0]).sum(1)
    np.testing.assert_allclose(sampled_logp, ref, rtol=1e-4, atol=1e-5)


def test_diag_gaussian_scalar_box_squeezes_sample(run):
    inputs = np.array([[0.3, -0.2], [1.0, 0.1]], np.float32)
    space = gym.spaces.Box(-1.0, 1.0, shape=(), dtype=np.float32)
    sample, logp = run(
        lambda: (
            DiagGaussian(c(inputs), None, action_space=space).sample(),
            DiagGaussian(c(inputs), None, action_space=space).logp(c([0.0, 0.5])),
        )
    )
    assert sample.shape == (2,)
    np.testing.assert_allclose(
        logp, stats.norm.logpdf([0.0, 0.5], [0.3, 1.0], np.exp([-0.2, 0.1])), rtol=1e-5, atol=1e-6
    )


def test_diag_gaussian_kl_rejects_other_types():
    with pytest.raises(ValueError, match="other must be a DiagGaussian"):
        DiagGaussian(c(GAUSS_IN), None).kl(Categorical(c(LOGITS[:4])))


# ------------------------------------------------------------- SquashedGaussian


def test_squashed_gaussian_logp_is_tanh_normal_density(run):
    # Default bounds [-1, 1]: y = tanh(z), p(y) = N(atanh(y)) / (1 - y^2).
    y = np.array([[0.2, -0.7, 0.9], [0.0, 0.5, -0.95], [0.3, 0.3, 0.3], [-0.1, 0.8, 0.6]], np.float32)
    logp = run(lambda: SquashedGaussian(c(GAUSS_IN), None).logp(c(y)))
    z = np.arctanh(y.astype(np.float64))
    ref = (stats.norm.logpdf(z, MEAN, np.exp(LOG_STD)) - np.log(1 - y.astype(np.float64) ** 2)).sum(1)
    np.testing.assert_allclose(logp, ref, rtol=1e-4, atol=1e-4)


def test_squashed_gaussian_bounds_samples_and_mean(run):
    low, high = np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32)
    inputs = np.tile(np.array([[0.5, -0.3, np.log(0.8), np.log(1.5)]], np.float32), (N_DRAWS, 1))
    sample, det = run(
        lambda: (
            SquashedGaussian(c(inputs), None, low=low, high=high).sample(),
            SquashedGaussian(c(inputs[:1]), None, low=low, high=high).deterministic_sample(),
        )
    )
    assert (sample >= low).all() and (sample <= high).all()
    np.testing.assert_allclose(
        det[0], low + (np.tanh([0.5, -0.3]) + 1) / 2 * (high - low), rtol=1e-5, atol=1e-6
    )
    # E[low + (tanh(z) + 1) / 2 * (high - low)], z ~ N(mu, sigma), by quadrature.
    for j, (mu, sigma) in enumerate([(0.5, 0.8), (-0.3, 1.5)]):
        e_tanh = integrate.quad(
            lambda z, mu=mu, sigma=sigma: np.tanh(z) * stats.norm.pdf(z, mu, sigma), -40, 40
        )[0]
        expected = low[j] + (e_tanh + 1) / 2 * (high[j] - low[j])
        assert abs(sample[:, j].mean() - expected) < 5 * sample[:, j].std() / np.sqrt(N_DRAWS)


def test_squashed_gaussian_clips_log_std(run):
    y = np.array([[0.1, 0.2]], np.float32)
    big, clipped = run(
        lambda: (
            SquashedGaussian(c([[0.0, 0.0, 10.0, -10.0]]), None).logp(c(y)),
            SquashedGaussian(c([[0.0, 0.0, 2.0, -5.0]]), None).logp(c(y)),
        )
    )
    np.testing.assert_allclose(big, clipped, rtol=1e-6, atol=1e-6)


def test_squashed_gaussian_sample_logp_matches_logp_of_action(run):
    inputs = np.array([[0.1, -0.2, np.log(0.3), np.log(0.4)]] * 64, np.float32)

    def build():
        dist = SquashedGaussian(c(inputs), None)
        action, logp = dist.sample_logp()
        return action, logp

    action, logp = run(build)
    a = action.astype(np.float64)
    ref = (stats.norm.logpdf(np.arctanh(a), [0.1, -0.2], [0.3, 0.4]) - np.log(1 - a**2 + 1e-6)).sum(1)
    np.testing.assert_allclose(logp, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "method, match", [("entropy", "no closed-form entropy"), ("kl", "no closed-form KL")]
)
def test_squashed_gaussian_has_no_entropy_or_kl(method, match):
    dist = SquashedGaussian(c(GAUSS_IN), None)
    with pytest.raises(ValueError, match=match):
        getattr(dist, method)(*([dist] if method == "kl" else []))


def test_squashed_gaussian_rejects_bad_bounds():
    with pytest.raises(ValueError, match="low must be < high"):
        SquashedGaussian(c(GAUSS_IN), None, low=1.0, high=1.0)


# ------------------------------------------------------------------------ Beta

BETA_RAW = RNG.normal(size=(3, 4)).astype(np.float32)
BETA_RAW2 = RNG.normal(size=(3, 4)).astype(np.float32)


def _beta_params(raw):
    conc = np.log1p(np.exp(raw.astype(np.float64))) + 1.0
    return conc[:, :2], conc[:, 2:]


def test_beta_logp_entropy_kl_match_scipy(run):
    low, high = -2.0, 2.0
    u = RNG.uniform(0.05, 0.95, size=(3, 2))
    x = (low + u * (high - low)).astype(np.float32)
    logp, ent, kl, det = run(
        lambda: (
            Beta(c(BETA_RAW), None, low=low, high=high).logp(c(x)),
            Beta(c(BETA_RAW), None).entropy(),
            Beta(c(BETA_RAW), None).kl(Beta(c(BETA_RAW2), None)),
            Beta(c(BETA_RAW), None, low=low, high=high).deterministic_sample(),
        )
    )
    a, b = _beta_params(BETA_RAW)
    a2, b2 = _beta_params(BETA_RAW2)
    np.testing.assert_allclose(logp, stats.beta.logpdf(u, a, b).sum(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ent, stats.beta.entropy(a, b).sum(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(det, low + stats.beta.mean(a, b) * (high - low), rtol=1e-5, atol=1e-6)
    p, q = stats.beta(a[..., None], b[..., None]), stats.beta(a2[..., None], b2[..., None])
    kl_ref = _kl_by_quadrature(p, q, 1e-9, 1 - 1e-9).sum(1)
    np.testing.assert_allclose(kl, kl_ref, rtol=1e-3, atol=1e-5)


def test_beta_sample_statistics(run):
    raw = np.tile(np.array([[1.5, -0.5, 0.0, 2.0]], np.float32), (N_DRAWS, 1))
    sample, sampled_logp = run(
        lambda: (lambda d: (d.sample(), d.sampled_action_logp()))(Beta(c(raw), None, low=1.0, high=3.0))
    )
    a, b = _beta_params(raw[:1])
    assert ((sample > 1.0) & (sample < 3.0)).all()
    np.testing.assert_allclose(sample.mean(0), 1.0 + 2.0 * stats.beta.mean(a, b)[0], atol=0.02)
    np.testing.assert_allclose(sample.var(0), 4.0 * stats.beta.var(a, b)[0], rtol=0.05, atol=1e-4)
    ref = stats.beta.logpdf((sample - 1.0) / 2.0, a, b).sum(1)
    np.testing.assert_allclose(sampled_logp, ref, rtol=1e-3, atol=1e-3)


# --------------------------------------------------------------- Deterministic


def test_deterministic_returns_inputs(run):
    x = RNG.normal(size=(3, 2)).astype(np.float32)
    sample, det, logp, sampled_logp = run(
        lambda: (lambda d: (d.sample(), d.deterministic_sample(), d.logp(c(x)), d.sampled_action_logp()))(
            Deterministic(c(x), None)
        )
    )
    np.testing.assert_array_equal(sample, x)
    np.testing.assert_array_equal(det, x)
    # One zero per row (RLlib 1.11's TF class gave zeros shaped like the inputs).
    np.testing.assert_array_equal(logp, np.zeros(3, np.float32))
    np.testing.assert_array_equal(sampled_logp, np.zeros(3, np.float32))
    assert logp.shape == sampled_logp.shape == (3,)
    assert Deterministic.required_model_output_shape(gym.spaces.Box(-1, 1, (2, 3)), {}) == 6


# ------------------------------------------------------------------- Dirichlet

DIR_RAW = RNG.normal(size=(3, 4)).astype(np.float32)
DIR_RAW2 = RNG.normal(size=(3, 4)).astype(np.float32)


def test_dirichlet_logp_entropy_match_scipy(run):
    alpha = np.exp(DIR_RAW.astype(np.float64)) + 1e-7
    x = RNG.dirichlet(np.ones(4), size=3)
    logp, ent, det = run(
        lambda: (
            Dirichlet(c(DIR_RAW), None).logp(c(x)),
            Dirichlet(c(DIR_RAW), None).entropy(),
            Dirichlet(c(DIR_RAW), None).deterministic_sample(),
        )
    )
    x32 = x.astype(np.float32).astype(np.float64)
    x32 /= x32.sum(1, keepdims=True)
    np.testing.assert_allclose(
        logp, [stats.dirichlet.logpdf(x32[i], alpha[i]) for i in range(3)], rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(
        ent, [stats.dirichlet.entropy(alpha[i]) for i in range(3)], rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(det, special.softmax(alpha, axis=1), rtol=1e-5, atol=1e-6)


def test_dirichlet_kl_matches_monte_carlo(run):
    kl = run(lambda: Dirichlet(c(DIR_RAW), None).kl(Dirichlet(c(DIR_RAW2), None)))
    alpha, beta = np.exp(DIR_RAW.astype(np.float64)), np.exp(DIR_RAW2.astype(np.float64))
    rng = np.random.default_rng(0)
    for i in range(3):
        xs = np.clip(rng.dirichlet(alpha[i], size=N_DRAWS), 1e-300, None)
        xs /= xs.sum(1, keepdims=True)
        diff = stats.dirichlet.logpdf(xs.T, alpha[i]) - stats.dirichlet.logpdf(xs.T, beta[i])
        assert abs(kl[i] - diff.mean()) < 5 * diff.std() / np.sqrt(N_DRAWS) + 1e-3


def test_dirichlet_samples_on_simplex_with_right_mean(run):
    raw = np.tile(np.log(np.array([[2.0, 3.0, 5.0]], np.float32)), (N_DRAWS, 1))
    sample = run(lambda: Dirichlet(c(raw), None).sample())
    np.testing.assert_allclose(sample.sum(1), 1.0, rtol=1e-5, atol=1e-6)
    assert (sample >= 0).all()
    np.testing.assert_allclose(sample.mean(0), [0.2, 0.3, 0.5], atol=0.01)
    np.testing.assert_allclose(sample.var(0), stats.dirichlet.var([2.0, 3.0, 5.0]), rtol=0.05, atol=1e-4)


# ---------------------------------------------------- MultiActionDistribution


def _multi(inputs, action_space):
    return MultiActionDistribution(
        inputs,
        None,
        child_distributions=[Categorical, DiagGaussian],
        input_lens=[3, 4],
        action_space=action_space,
    )


MULTI_IN = RNG.normal(size=(4, 7)).astype(np.float32)
MULTI_IN2 = RNG.normal(size=(4, 7)).astype(np.float32)
TUPLE_SPACE = gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)])


def _multi_refs(inputs, cat_a, box_a):
    mean, std = inputs[:, 3:5], np.exp(inputs[:, 5:7])
    logp = log_softmax(inputs[:, :3])[np.arange(len(cat_a)), cat_a] + stats.norm.logpdf(box_a, mean, std).sum(
        1
    )
    ent = stats.entropy(special.softmax(inputs[:, :3], 1), axis=1) + stats.norm.entropy(mean, std).sum(1)
    return logp, ent


def test_multi_action_logp_entropy_kl(run):
    cat_a, box_a = np.array([0, 2, 1, 1]), RNG.normal(size=(4, 2)).astype(np.float32)
    flat_x = np.concatenate([cat_a[:, None].astype(np.float32), box_a], 1)
    logp_flat, logp_struct, ent, kl, kl_parts = run(
        lambda: (
            _multi(c(MULTI_IN), TUPLE_SPACE).logp(c(flat_x)),
            _multi(c(MULTI_IN), TUPLE_SPACE).logp((tf.constant(cat_a), c(box_a))),
            _multi(c(MULTI_IN), TUPLE_SPACE).entropy(),
            _multi(c(MULTI_IN), TUPLE_SPACE).kl(_multi(c(MULTI_IN2), TUPLE_SPACE)),
            Categorical(c(MULTI_IN[:, :3])).kl(Categorical(c(MULTI_IN2[:, :3])))
            + DiagGaussian(c(MULTI_IN[:, 3:]), None).kl(DiagGaussian(c(MULTI_IN2[:, 3:]), None)),
        )
    )
    logp_ref, ent_ref = _multi_refs(MULTI_IN, cat_a, box_a)
    np.testing.assert_allclose(logp_flat, logp_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp_struct, logp_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ent, ent_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kl, kl_parts, rtol=1e-6, atol=1e-6)
    kl_cat = stats.entropy(special.softmax(MULTI_IN[:, :3], 1), special.softmax(MULTI_IN2[:, :3], 1), axis=1)
    assert (kl > kl_cat - 1e-6).all()  # Gaussian KL part is non-negative.


def test_multi_action_samples_follow_space_structure(run):
    def build():
        dist = _multi(c(MULTI_IN), TUPLE_SPACE)
        return dist.sample(), dist.sampled_action_logp(), dist.deterministic_sample()

    (cat_s, box_s), sampled_logp, (cat_d, box_d) = run(build)
    assert cat_s.shape == (4,) and box_s.shape == (4, 2)
    np.testing.assert_allclose(sampled_logp, _multi_refs(MULTI_IN, cat_s, box_s)[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(cat_d, MULTI_IN[:, :3].argmax(1))
    np.testing.assert_allclose(box_d, MULTI_IN[:, 3:5], rtol=1e-6, atol=1e-6)
    assert _multi(c(MULTI_IN), TUPLE_SPACE).required_model_output_shape(TUPLE_SPACE, {}) == 7


@pytest.mark.tf_eager_code
def test_multi_action_dict_space():
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
    sample = _multi(c(MULTI_IN), space).deterministic_sample()
    assert set(sample) == {"a", "b"}
    np.testing.assert_array_equal(sample["a"].numpy(), MULTI_IN[:, :3].argmax(1))


# --------------------------------------------------------- graph == eager


@pytest.mark.tf_eager_code
@pytest.mark.parametrize(
    "make, x",
    [
        (lambda: Categorical(c(LOGITS)), np.array([1, 0, 3, 2, 2])),
        (lambda: DiagGaussian(c(GAUSS_IN), None), MEAN2),
        (lambda: Beta(c(BETA_RAW), None), np.full((3, 2), 0.25, np.float32)),
        (lambda: Dirichlet(c(DIR_RAW), None), np.full((3, 4), 0.25, np.float32)),
    ],
)
def test_graph_and_eager_give_identical_numbers(graph_session, make, x):
    graph, sess = graph_session

    def build():
        dist = make()
        return dist.logp(tf.constant(x)), dist.entropy(), dist.deterministic_sample()

    eager = [t.numpy() for t in build()]
    with graph.as_default():
        ops = build()
    for g, e in zip(sess.run(ops), eager):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)
