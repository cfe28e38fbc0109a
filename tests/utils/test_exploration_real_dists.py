"""Explorations driven by rlpolicy's real action distributions (torch, tf, tf2)."""

import functools

import gymnasium as gym
import numpy as np
import pytest
from exploration_harness import Driver, exploration_kwargs
from scipy.special import log_softmax
from scipy.stats import norm

from rlpolicy.utils.exploration import EpsilonGreedy, GaussianNoise, Random, StochasticSampling
from rlpolicy.utils.schedules import ConstantSchedule

DISCRETE4 = gym.spaces.Discrete(4)
BOX2 = gym.spaces.Box(-5.0, 5.0, (2,), np.float32)
DICT_SPACE = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Discrete(2)})


def dist_class(name, framework, **kwargs):
    """The real distribution class ``name`` for ``framework``, taking just ``inputs``."""
    if framework == "torch":
        from rlpolicy.models.torch import torch_action_dist as mod

        cls = getattr(
            mod,
            {
                "Categorical": "TorchCategorical",
                "DiagGaussian": "TorchDiagGaussian",
                "Deterministic": "TorchDeterministic",
                "MultiActionDistribution": "TorchMultiActionDistribution",
            }[name],
        )
    else:
        from rlpolicy.models.tf import tf_action_dist as mod

        cls = getattr(mod, name)
    return functools.partial(cls, model=None, **kwargs)


def multi_dist_class(framework):
    cat = dist_class("Categorical", framework).func
    return dist_class(
        "MultiActionDistribution",
        framework,
        child_distributions=[cat, cat],
        input_lens=[3, 2],
        action_space=DICT_SPACE,
    )


def test_stochastic_sampling_categorical(framework):
    driver = Driver(
        framework,
        lambda: StochasticSampling(**exploration_kwargs(DISCRETE4, framework, random_timesteps=2)),
        dist_class("Categorical", framework),
        4,
    )
    logits = np.random.default_rng(1).normal(size=(4000, 4)).astype(np.float32)
    greedy, logp = driver.act(logits, timestep=0, explore=False)
    np.testing.assert_array_equal(greedy, logits.argmax(axis=1))
    np.testing.assert_array_equal(logp, np.zeros(4000))
    # Random phase (t < 2): uniform over the 4 actions whatever the logits.
    random_actions, logp = driver.act(np.tile([[30.0, 0, 0, 0]], (4000, 1)), timestep=1)
    np.testing.assert_allclose(np.bincount(random_actions, minlength=4) / 4000, 0.25, atol=0.03)
    np.testing.assert_array_equal(logp, np.zeros(4000))
    actions, logp = driver.act(logits, timestep=2)
    np.testing.assert_allclose(
        logp, log_softmax(logits, axis=1)[np.arange(4000), actions], rtol=1e-4, atol=1e-5
    )


def test_stochastic_sampling_diag_gaussian(framework):
    kwargs = {} if framework == "torch" else {"action_space": BOX2}
    driver = Driver(
        framework,
        lambda: StochasticSampling(**exploration_kwargs(BOX2, framework)),
        dist_class("DiagGaussian", framework, **kwargs),
        4,
    )
    inputs = np.tile(np.array([[1.0, -2.0, np.log(0.5), np.log(2.0)]], np.float32), (6000, 1))
    mean, logp = driver.act(inputs, timestep=0, explore=False)
    np.testing.assert_allclose(mean, inputs[:, :2], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(logp, np.zeros(6000))
    samples, logp = driver.act(inputs, timestep=1)
    np.testing.assert_allclose(samples.mean(axis=0), [1.0, -2.0], atol=0.08)
    np.testing.assert_allclose(samples.std(axis=0), [0.5, 2.0], rtol=0.05, atol=1e-4)
    expected = norm.logpdf(samples, loc=[1.0, -2.0], scale=[0.5, 2.0]).sum(axis=1)
    np.testing.assert_allclose(logp, expected, rtol=1e-4, atol=1e-4)


def test_epsilon_greedy_categorical(framework):
    driver = Driver(
        framework,
        lambda: EpsilonGreedy(
            **exploration_kwargs(
                DISCRETE4, framework, epsilon_schedule=ConstantSchedule(0.4, framework=framework)
            )
        ),
        dist_class("Categorical", framework),
        4,
    )
    q = np.tile(np.array([[1.0, 3.0, 2.0, 0.0]], np.float32), (6000, 1))
    actions, _ = driver.act(q, timestep=0)
    # P(action != 1) = eps * 3 / 4.
    assert np.mean(actions != 1) == pytest.approx(0.3, abs=4 * np.sqrt(0.21 / 6000))


def test_gaussian_noise_deterministic_dist(framework):
    driver = Driver(
        framework,
        lambda: GaussianNoise(
            **exploration_kwargs(
                BOX2,
                framework,
                random_timesteps=0,
                stddev=0.2,
                scale_schedule=ConstantSchedule(0.5, framework=framework),
            )
        ),
        dist_class("Deterministic", framework),
        2,
    )
    det = np.tile(np.array([[0.5, -1.0]], np.float32), (6000, 1))
    actions, logp = driver.act(det, timestep=3)
    np.testing.assert_allclose((actions - det).std(axis=0), 0.1, rtol=0.05, atol=1e-4)
    np.testing.assert_allclose((actions - det).mean(axis=0), 0.0, atol=0.006)
    np.testing.assert_array_equal(logp, np.zeros(6000))


def test_random_with_multi_action_distribution(framework):
    driver = Driver(
        framework, lambda: Random(**exploration_kwargs(DICT_SPACE, framework)), multi_dist_class(framework), 5
    )
    actions, logp = driver.act(np.zeros((500, 5)), timestep=0)
    assert set(np.unique(actions["a"])) == {0, 1, 2} and set(np.unique(actions["b"])) == {0, 1}
    np.testing.assert_array_equal(logp, np.zeros(500))
    greedy, _ = driver.act(np.tile([[0, 0, 9.0, 9.0, 0]], (3, 1)), timestep=0, explore=False)
    np.testing.assert_array_equal(greedy["a"], [2, 2, 2])
    np.testing.assert_array_equal(greedy["b"], [0, 0, 0])


@pytest.mark.parametrize("eps", [0.0, 0.5, 1.0])
def test_torch_epsilon_greedy_nested_actions(eps):
    pytest.importorskip("torch")
    driver = Driver(
        "torch",
        lambda: EpsilonGreedy(
            **exploration_kwargs(DICT_SPACE, "torch", epsilon_schedule=ConstantSchedule(eps))
        ),
        multi_dist_class("torch"),
        5,
    )
    q = np.tile(np.array([[0, 0, 9.0, 9.0, 0]], np.float32), (6000, 1))
    actions, logp = driver.act(q, timestep=0)
    # A row is replaced by a uniform sample with prob eps: P(a != 2) = eps * 2/3.
    assert np.mean(actions["a"] != 2) == pytest.approx(eps * 2 / 3, abs=0.03)
    assert np.mean(actions["b"] != 0) == pytest.approx(eps / 2, abs=0.03)
    np.testing.assert_array_equal(logp, np.zeros(6000))
