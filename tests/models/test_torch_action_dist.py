"""Torch action distributions against numpy/scipy reference formulas."""

import gymnasium as gym
import numpy as np
import pytest
from scipy import stats
from scipy.special import log_softmax, softmax

torch = pytest.importorskip("torch")

from rlpolicy.models.torch.torch_action_dist import (  # noqa: E402
    TorchBeta,
    TorchCategorical,
    TorchDeterministic,
    TorchDiagGaussian,
    TorchDirichlet,
    TorchMultiActionDistribution,
    TorchMultiCategorical,
    TorchSquashedGaussian,
    get_torch_categorical_class_with_temperature,
)

RNG = np.random.default_rng(0)
SMALL = 1e-6


def t(x):
    return torch.as_tensor(np.asarray(x, dtype=np.float32))


@pytest.fixture
def logits():
    return RNG.normal(size=(4, 3)).astype(np.float32)


# ---------------------------------------------------------------- Categorical
def test_categorical_logp_entropy_kl_match_numpy(logits):
    other = RNG.normal(size=(4, 3)).astype(np.float32)
    d, o = TorchCategorical(t(logits), None), TorchCategorical(t(other), None)
    acts = np.array([0, 2, 1, 2])
    lp = log_softmax(logits, axis=1)
    np.testing.assert_allclose(
        d.logp(torch.as_tensor(acts)).numpy(), lp[np.arange(4), acts], rtol=1e-5, atol=1e-6
    )
    p = softmax(logits, axis=1)
    np.testing.assert_allclose(d.entropy().numpy(), -(p * lp).sum(1), rtol=1e-5, atol=1e-6)
    kl_ref = (p * (lp - log_softmax(other, axis=1))).sum(1)
    np.testing.assert_allclose(d.kl(o).numpy(), kl_ref, rtol=1e-4, atol=1e-6)


def test_categorical_deterministic_sample_is_argmax(logits):
    d = TorchCategorical(t(logits), None)
    np.testing.assert_array_equal(d.deterministic_sample().numpy(), logits.argmax(1))
    np.testing.assert_allclose(
        d.sampled_action_logp().numpy(), log_softmax(logits, 1).max(1), rtol=1e-5, atol=1e-6
    )


def test_categorical_sample_frequencies_match_probs():
    torch.manual_seed(0)
    logit = np.array([[0.0, 1.0, -1.0]], dtype=np.float32)
    d = TorchCategorical(t(np.repeat(logit, 20000, axis=0)), None)
    counts = np.bincount(d.sample().numpy(), minlength=3) / 20000
    np.testing.assert_allclose(counts, softmax(logit[0]), atol=0.015)


def test_categorical_sample_draws_as_torch_multinomial_on_a_fixed_seed():
    """RLlib samples through torch.distributions.Categorical: multinomial(probs, 1, True)."""
    for n, batch in [(2, 1), (3, 5), (18, 64)]:
        logits = t(RNG.normal(size=(batch, n)) * 3).requires_grad_(True)
        probs = torch.as_tensor(softmax(logits.detach().numpy(), -1))
        for seed in range(20):
            torch.manual_seed(seed)
            got = TorchCategorical(logits).sample()
            torch.manual_seed(seed)
            expected = torch.multinomial(probs, 1, True).squeeze(1)
            np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_categorical_sample_rejects_nan_logits():
    with pytest.raises(ValueError, match="TorchCategorical: a row of action weights sums to 0 or NaN"):
        TorchCategorical(t([[0.0, 1.0], [np.nan, 0.0]])).sample()


def test_categorical_temperature_divides_logits(logits):
    d = TorchCategorical(t(logits), None, temperature=2.0)
    np.testing.assert_allclose(d.dist.probs.numpy(), softmax(logits / 2.0, axis=1), rtol=1e-5, atol=1e-6)
    cls = get_torch_categorical_class_with_temperature(0.5)
    np.testing.assert_allclose(
        cls(t(logits)).dist.probs.numpy(), softmax(logits / 0.5, 1), rtol=1e-5, atol=1e-6
    )


def test_categorical_accepts_numpy_and_does_not_modify_inputs(logits):
    original = logits.copy()
    TorchCategorical(logits, None, temperature=3.0)
    np.testing.assert_array_equal(logits, original)


# ------------------------------------------------------------ MultiCategorical
def test_multicategorical_logp_entropy_kl_sum_of_parts():
    x = RNG.normal(size=(5, 5)).astype(np.float32)
    y = RNG.normal(size=(5, 5)).astype(np.float32)
    d = TorchMultiCategorical(t(x), None, input_lens=[2, 3])
    o = TorchMultiCategorical(t(y), None, input_lens=[2, 3])
    acts = np.array([[0, 2], [1, 0], [1, 1], [0, 0], [1, 2]])
    lp0, lp1 = log_softmax(x[:, :2], 1), log_softmax(x[:, 2:], 1)
    ref = lp0[np.arange(5), acts[:, 0]] + lp1[np.arange(5), acts[:, 1]]
    np.testing.assert_allclose(d.logp(torch.as_tensor(acts)).numpy(), ref, rtol=1e-5, atol=1e-6)
    ent = -(np.exp(lp0) * lp0).sum(1) - (np.exp(lp1) * lp1).sum(1)
    np.testing.assert_allclose(d.entropy().numpy(), ent, rtol=1e-5, atol=1e-6)
    assert d.multi_entropy().shape == (5, 2)
    q0, q1 = log_softmax(y[:, :2], 1), log_softmax(y[:, 2:], 1)
    kl = (np.exp(lp0) * (lp0 - q0)).sum(1) + (np.exp(lp1) * (lp1 - q1)).sum(1)
    np.testing.assert_allclose(d.kl(o).numpy(), kl, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(
        d.deterministic_sample().numpy(), np.stack([x[:, :2].argmax(1), x[:, 2:].argmax(1)], 1)
    )


def test_multicategorical_int_box_samples_have_box_shape():
    space = gym.spaces.Box(0, 2, (2, 2), np.int64)
    d = TorchMultiCategorical(torch.zeros(3, 12), None, input_lens=[3] * 4, action_space=space)
    s = d.sample()
    assert tuple(s.shape) == (3, 2, 2) and int(s.min()) >= 0 and int(s.max()) <= 2
    np.testing.assert_allclose(d.logp(s).numpy(), np.full(3, 4 * np.log(1 / 3)), rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------- DiagGaussian
def test_diag_gaussian_matches_scipy():
    mean, log_std = RNG.normal(size=(4, 2)), RNG.normal(size=(4, 2)) * 0.3
    mean2, log_std2 = RNG.normal(size=(4, 2)), RNG.normal(size=(4, 2)) * 0.3
    d = TorchDiagGaussian(t(np.concatenate([mean, log_std], 1)), None)
    o = TorchDiagGaussian(t(np.concatenate([mean2, log_std2], 1)), None)
    x = RNG.normal(size=(4, 2))
    ref = stats.norm.logpdf(x, mean, np.exp(log_std)).sum(1)
    np.testing.assert_allclose(d.logp(t(x)).numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        d.entropy().numpy(), stats.norm.entropy(mean, np.exp(log_std)).sum(1), rtol=1e-5, atol=1e-6
    )
    s1, s2 = np.exp(log_std), np.exp(log_std2)
    kl = (np.log(s2 / s1) + (s1**2 + (mean - mean2) ** 2) / (2 * s2**2) - 0.5).sum(1)
    np.testing.assert_allclose(d.kl(o).numpy(), kl, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d.deterministic_sample().numpy(), mean, rtol=1e-6, atol=1e-6)


def test_diag_gaussian_sample_statistics():
    torch.manual_seed(1)
    inp = np.tile([[1.0, -2.0, np.log(0.5), np.log(2.0)]], (40000, 1))
    s = TorchDiagGaussian(t(inp), None).sample().numpy()
    np.testing.assert_allclose(s.mean(0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(s.std(0), [0.5, 2.0], rtol=0.03, atol=1e-4)


def test_diag_gaussian_scalar_box_squeezes_sample():
    d = TorchDiagGaussian(torch.zeros(3, 2), None, action_space=gym.spaces.Box(-1, 1, ()))
    assert tuple(d.sample().shape) == (3,)


# ----------------------------------------------------------- SquashedGaussian
def test_squashed_gaussian_logp_matches_change_of_variables():
    low, high = -2.0, 3.0
    mean, log_std = RNG.normal(size=(5, 2)), RNG.normal(size=(5, 2)) * 0.3
    d = TorchSquashedGaussian(t(np.concatenate([mean, log_std], 1)), None, low=low, high=high)
    u = RNG.normal(size=(5, 2))
    x = (np.tanh(u) + 1) / 2 * (high - low) + low
    # RLlib's convention: Gaussian log density of u minus sum log(1 - tanh(u)^2 + eps).
    ref = (stats.norm.logpdf(u, mean, np.exp(log_std)) - np.log(1 - np.tanh(u) ** 2 + SMALL)).sum(1)
    np.testing.assert_allclose(d.logp(t(x)).numpy(), ref, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(
        d.deterministic_sample().numpy(), (np.tanh(mean) + 1) / 2 * (high - low) + low, rtol=1e-5, atol=1e-6
    )


def test_squashed_gaussian_samples_in_bounds_and_log_std_clipped():
    torch.manual_seed(2)
    inp = np.tile([[0.0, 50.0]], (2000, 1))  # log_std clipped to 2
    d = TorchSquashedGaussian(t(inp), None, low=0.0, high=1.0)
    s = d.sample().numpy()
    assert s.min() >= 0.0 and s.max() <= 1.0
    np.testing.assert_allclose(d.std.numpy(), np.exp(2.0), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="entropy is not defined"):
        d.entropy()
    with pytest.raises(ValueError, match="kl is not defined"):
        d.kl(d)


# --------------------------------------------------------------------- Beta
def test_beta_logp_matches_scipy():
    raw = RNG.normal(size=(4, 4))
    conc = np.log(np.exp(raw) + 1.0) + 1.0
    alpha, beta = conc[:, :2], conc[:, 2:]
    low, high = -1.0, 3.0
    d = TorchBeta(t(raw), None, low=low, high=high)
    y = RNG.uniform(0.05, 0.95, size=(4, 2))
    x = y * (high - low) + low
    np.testing.assert_allclose(
        d.logp(t(x)).numpy(), stats.beta.logpdf(y, alpha, beta).sum(1), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
        d.deterministic_sample().numpy(), alpha / (alpha + beta) * (high - low) + low, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        d.entropy().numpy(), stats.beta.entropy(alpha, beta).sum(1), rtol=1e-4, atol=1e-5
    )


def test_beta_sample_mean():
    torch.manual_seed(3)
    d = TorchBeta(t(np.tile([[1.0, 0.0]], (20000, 1))), None)
    a, b = np.log(np.e + 1) + 1, np.log(2.0) + 1
    assert abs(d.sample().numpy().mean() - a / (a + b)) < 0.01


# --------------------------------------------------------- Deterministic, Dirichlet
def test_deterministic():
    x = RNG.normal(size=(3, 2)).astype(np.float32)
    d = TorchDeterministic(t(x), None)
    np.testing.assert_array_equal(d.sample().numpy(), x)
    np.testing.assert_array_equal(d.sampled_action_logp().numpy(), np.zeros(3))


def test_dirichlet_logp_matches_scipy():
    raw = RNG.normal(size=(3, 3))
    conc = np.exp(raw) + 1e-7
    d = TorchDirichlet(t(raw), None)
    x = np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1]])
    ref = [stats.dirichlet.logpdf(xi, ci) for xi, ci in zip(x, conc)]
    np.testing.assert_allclose(d.logp(t(x)).numpy(), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        d.entropy().numpy(), [stats.dirichlet.entropy(c) for c in conc], rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(d.deterministic_sample().numpy().sum(1), 1.0, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------ MultiAction
@pytest.fixture
def multi():
    space = gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)])
    inputs = RNG.normal(size=(4, 7)).astype(np.float32)
    d = TorchMultiActionDistribution(
        t(inputs),
        None,
        child_distributions=[TorchCategorical, TorchDiagGaussian],
        input_lens=[3, 4],
        action_space=space,
    )
    return d, inputs


def test_multi_action_logp_is_sum_of_children(multi):
    d, x = multi
    cat = np.array([2, 0, 1, 1])
    box = RNG.normal(size=(4, 2))
    ref = log_softmax(x[:, :3], 1)[np.arange(4), cat] + stats.norm.logpdf(
        box, x[:, 3:5], np.exp(x[:, 5:7])
    ).sum(1)
    np.testing.assert_allclose(d.logp((torch.as_tensor(cat), t(box))).numpy(), ref, rtol=1e-5, atol=1e-6)
    flat = np.concatenate([cat[:, None], box], 1)
    np.testing.assert_allclose(d.logp(t(flat)).numpy(), ref, rtol=1e-5, atol=1e-6)


def test_multi_action_sample_structure_and_entropy(multi):
    d, x = multi
    s = d.sample()
    assert isinstance(s, tuple) and tuple(s[0].shape) == (4,) and tuple(s[1].shape) == (4, 2)
    np.testing.assert_allclose(d.sampled_action_logp().numpy(), d.logp(s).numpy(), rtol=1e-5, atol=1e-6)
    p = softmax(x[:, :3], 1)
    ent = -(p * np.log(p)).sum(1) + stats.norm.entropy(0, np.exp(x[:, 5:7])).sum(1)
    np.testing.assert_allclose(d.entropy().numpy(), ent, rtol=1e-5, atol=1e-6)
    assert d.required_model_output_shape(None, None) == 7


# ------------------------------------------------------ output shapes & errors
@pytest.mark.parametrize(
    "cls,space,expected",
    [
        (TorchCategorical, gym.spaces.Discrete(5), 5),
        (TorchMultiCategorical, gym.spaces.MultiDiscrete([2, 3]), 5),
        (TorchMultiCategorical, gym.spaces.Box(0, 3, (2,), np.int64), 8),
        (TorchDiagGaussian, gym.spaces.Box(-1, 1, (3,)), 6),
        (TorchSquashedGaussian, gym.spaces.Box(-1, 1, (3,)), 6),
        (TorchBeta, gym.spaces.Box(0, 1, (2,)), 4),
        (TorchDeterministic, gym.spaces.Box(-1, 1, (3,)), 3),
        (TorchDirichlet, gym.spaces.Box(0, 1, (4,)), 4),
    ],
)
def test_required_model_output_shape(cls, space, expected):
    assert int(cls.required_model_output_shape(space, {})) == expected


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: TorchCategorical(torch.zeros(2, 3), None, temperature=0.0), "temperature must be > 0"),
        (
            lambda: TorchMultiCategorical(torch.zeros(2, 4), None, input_lens=[2, 3]),
            "4 columns but input_lens",
        ),
        (lambda: TorchCategorical(torch.zeros(2, 3), None).sampled_action_logp(), "before sample"),
        (lambda: TorchSquashedGaussian(torch.zeros(2, 2), None, low=1.0, high=0.0), "low < high"),
        (lambda: TorchBeta(torch.zeros(2, 2), None, low=1.0, high=1.0), "low < high"),
    ],
)
def test_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()
