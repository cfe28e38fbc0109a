"""GaussianNoise, OrnsteinUhlenbeckNoise and their per-worker variants (torch, tf, tf2)."""

import gymnasium as gym
import numpy as np
import pytest
from exploration_harness import Driver, exploration_kwargs, fake_dist

from rlpolicy.utils.exploration import (
    GaussianNoise,
    OrnsteinUhlenbeckNoise,
    PerWorkerGaussianNoise,
    PerWorkerOrnsteinUhlenbeckNoise,
)
from rlpolicy.utils.schedules import ConstantSchedule


def _driver(framework, cls, space, **kw):
    dim = int(np.prod(space.shape))
    return Driver(
        framework,
        lambda: cls(**exploration_kwargs(space, framework, **kw)),
        fake_dist("deterministic", framework),
        dim,
    )


# ----------------------------------------------------------------------------
# GaussianNoise.
# ----------------------------------------------------------------------------
BOX10 = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
# Random phase until t=10; then the scale falls linearly from 1.0 to 0.2 at t=30.
GAUSS_KW = dict(random_timesteps=10, initial_scale=1.0, final_scale=0.2, scale_timesteps=20)
SCALE_EXPECTED = {3: 0.2, 10: 1.0, 15: 0.8, 20: 0.6, 29: 0.24, 30: 0.2, 500: 0.2}


@pytest.mark.parametrize("cls", [GaussianNoise, OrnsteinUhlenbeckNoise])
def test_noise_scale_follows_its_schedule(framework, cls):
    driver = _driver(framework, cls, BOX10, **GAUSS_KW)
    for t, scale in SCALE_EXPECTED.items():
        driver.act(np.zeros((1, 2)), timestep=t)
        state = driver.get_state()
        assert float(state["cur_scale"]) == pytest.approx(scale, abs=1e-6), t
        assert int(state["last_timestep"]) == t


@pytest.mark.parametrize("cls", [GaussianNoise, OrnsteinUhlenbeckNoise])
def test_random_phase_then_noise_around_the_deterministic_action(framework, cls):
    driver = _driver(framework, cls, BOX10, **GAUSS_KW)
    det = np.full((3000, 2), 4.0, np.float32)
    random_actions, logp = driver.act(det, timestep=9)
    # U(-10, 10): mean 0, std 20 / sqrt(12) = 5.77.
    np.testing.assert_allclose(random_actions.mean(axis=0), 0.0, atol=0.5)
    np.testing.assert_allclose(random_actions.std(axis=0), 20 / np.sqrt(12), rtol=0.06, atol=1e-4)
    np.testing.assert_array_equal(logp, np.zeros(3000))
    noisy, logp = driver.act(det, timestep=10)
    assert np.abs(noisy - 4.0).max() < 3.0  # Close to det (scale 1.0 x small noise).
    np.testing.assert_array_equal(logp, np.zeros(3000))
    exact, logp = driver.act(det, timestep=11, explore=False)
    np.testing.assert_array_equal(exact, det)
    assert int(driver.get_state()["last_timestep"]) == 11


def test_gaussian_noise_statistics(framework):
    space = gym.spaces.Box(-100.0, 100.0, (3,), np.float32)
    driver = _driver(framework, GaussianNoise, space, stddev=0.5, **GAUSS_KW)
    det = np.random.default_rng(0).uniform(-5, 5, size=(8000, 3)).astype(np.float32)
    actions, _ = driver.act(det, timestep=20)  # scale 0.6 -> noise ~ N(0, 0.3^2), i.i.d.
    noise = (actions - det).ravel()
    assert noise.mean() == pytest.approx(0.0, abs=4 * 0.3 / np.sqrt(noise.size))
    assert noise.std() == pytest.approx(0.3, rel=0.03, abs=1e-6)
    assert np.mean(np.abs(noise) < 0.3) == pytest.approx(0.6827, abs=0.015)
    assert abs(np.corrcoef(noise[:-1], noise[1:])[0, 1]) < 0.03


def test_gaussian_noise_is_clipped_to_the_box(framework):
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    driver = _driver(
        framework,
        GaussianNoise,
        space,
        stddev=1.0,
        random_timesteps=0,
        scale_schedule=ConstantSchedule(1.0, framework=framework),
    )
    actions, _ = driver.act(np.full((2000, 2), 0.95, np.float32), timestep=5)
    assert actions.min() >= -1.0 and actions.max() <= 1.0
    assert np.mean(actions == 1.0) == pytest.approx(0.48, abs=0.04)  # P(N(0,1) > 0.05)


@pytest.mark.parametrize("cls", [GaussianNoise, OrnsteinUhlenbeckNoise])
def test_noise_state_survives_get_set_state(framework, cls):
    source = _driver(framework, cls, BOX10, **GAUSS_KW)
    source.act(np.zeros((1, 2)), timestep=20)
    state = source.get_state()
    fresh = _driver(framework, cls, BOX10, **GAUSS_KW)
    fresh.set_state(state)
    restored = fresh.get_state()
    assert int(restored["last_timestep"]) == 20
    assert float(restored["cur_scale"]) == pytest.approx(0.6, abs=1e-6)
    if cls is OrnsteinUhlenbeckNoise:
        assert np.abs(state["ou_state"]).max() > 0  # One noise step was taken.
        np.testing.assert_allclose(restored["ou_state"], state["ou_state"], rtol=1e-6)
    fresh.act(np.zeros((1, 2)), timestep=None)  # Continues at t=21: scale 0.56.
    assert float(fresh.get_state()["cur_scale"]) == pytest.approx(0.56, abs=1e-6)


# ----------------------------------------------------------------------------
# OrnsteinUhlenbeckNoise.
# ----------------------------------------------------------------------------
N_DIMS = 2000  # Each action dimension carries its own, independent OU process.
WIDE = gym.spaces.Box(-50.0, 50.0, (N_DIMS,), np.float32)
# noise = scale * ou_base_scale * x * (high - low) = 0.5 * 0.1 * x * 100 = 5 * x.
OU_KW = dict(random_timesteps=0, ou_theta=0.15, ou_sigma=0.2, ou_base_scale=0.1)


def _ou_driver(framework, space=WIDE, scale=0.5, **kw):
    return _driver(
        framework,
        OrnsteinUhlenbeckNoise,
        space,
        scale_schedule=ConstantSchedule(scale, framework=framework),
        **{**OU_KW, **kw},
    )


def test_ou_process_follows_its_update_rule(framework):
    driver = _ou_driver(framework)
    driver.set_state({"last_timestep": 0, "ou_state": np.ones(N_DIMS, np.float32)})
    det = np.zeros((2, N_DIMS), np.float32)
    actions, _ = driver.act(det, timestep=1)
    np.testing.assert_array_equal(actions[0], actions[1])  # One process for the whole batch.
    x1 = actions[0] / 5.0
    np.testing.assert_allclose(driver.get_state()["ou_state"], x1, atol=1e-5)
    # x1 = x0 - theta * x0 + sigma * N(0, 1) with x0 = 1.
    tol = 4 * 0.2 / np.sqrt(N_DIMS)
    assert x1.mean() == pytest.approx(0.85, abs=tol)
    assert x1.std() == pytest.approx(0.2, rel=0.07, abs=1e-6)
    actions, _ = driver.act(det, timestep=2)
    increment = actions[0] / 5.0 - 0.85 * x1
    assert increment.mean() == pytest.approx(0.0, abs=tol)
    assert increment.std() == pytest.approx(0.2, rel=0.07, abs=1e-6)
    assert abs(np.corrcoef(increment, x1)[0, 1]) < 0.1


def test_ou_unbounded_dimensions_use_unit_range(framework):
    space = gym.spaces.Box(-np.inf, np.inf, (N_DIMS,), np.float32)
    driver = _ou_driver(framework, space=space, scale=1.0)
    actions, _ = driver.act(np.zeros((1, N_DIMS), np.float32), timestep=1)
    # From x0 = 0: x1 = 0.2 * N(0, 1); noise = 1.0 * 0.1 * x1 * 1 -> std 0.02.
    assert actions.std() == pytest.approx(0.02, rel=0.07, abs=1e-6)


def test_ou_state_only_moves_when_its_noise_is_used(framework):
    driver = _ou_driver(framework, random_timesteps=5)
    start = np.linspace(-1, 1, N_DIMS).astype(np.float32)
    driver.set_state({"last_timestep": 0, "ou_state": start})
    det = np.zeros((1, N_DIMS), np.float32)
    driver.act(det, timestep=2)  # Random phase.
    driver.act(det, timestep=7, explore=False)
    np.testing.assert_array_equal(driver.get_state()["ou_state"], start)
    driver.act(det, timestep=8)
    assert not np.allclose(driver.get_state()["ou_state"], start, atol=1e-6)


@pytest.mark.parametrize(
    "state, exc, match",
    [
        ({"last_timestep": 3}, KeyError, "no 'ou_state' key"),
        ({"last_timestep": 3, "ou_state": np.zeros(5)}, ValueError, r"'ou_state' has 5 values, expected 2"),
        ({"ou_state": np.zeros(2)}, KeyError, "no 'last_timestep' key"),
    ],
)
def test_ou_set_state_errors_change_nothing(framework, state, exc, match):
    driver = _driver(framework, OrnsteinUhlenbeckNoise, BOX10, **GAUSS_KW)
    with pytest.raises(exc, match=match):
        driver.set_state(state)
    after = driver.get_state()
    assert int(after["last_timestep"]) == 0
    np.testing.assert_array_equal(after["ou_state"], np.zeros(2))


# ----------------------------------------------------------------------------
# Per-worker scales.
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [PerWorkerGaussianNoise, PerWorkerOrnsteinUhlenbeckNoise])
@pytest.mark.parametrize(
    "num_workers, worker_index, expected",
    [
        (3, 0, 0.0),
        (3, 1, 0.4**4.5),
        (3, 2, 0.4**8),
        (1, 1, 0.4**8),
        (0, 0, 0.02),  # No remote workers: the regular schedule (final_scale after it ends).
    ],
)
def test_per_worker_noise_scale(framework, cls, num_workers, worker_index, expected):
    driver = Driver(
        framework,
        lambda: cls(
            **{
                **exploration_kwargs(BOX10, framework, random_timesteps=0, scale_timesteps=10),
                "num_workers": num_workers,
                "worker_index": worker_index,
            }
        ),
        fake_dist("deterministic", framework),
        2,
    )
    det = np.full((4, 2), 1.5, np.float32)
    actions, _ = driver.act(det, timestep=100)
    assert float(driver.get_state()["cur_scale"]) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    if expected == 0.0:  # The local worker acts greedily.
        np.testing.assert_array_equal(actions, det)
