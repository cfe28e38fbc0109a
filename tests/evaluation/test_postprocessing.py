"""rlpolicy.evaluation.postprocessing against direct python loops and hand-worked cases."""

import numpy as np
import pytest

from rlpolicy.evaluation.postprocessing import (
    Postprocessing,
    adjust_nstep,
    compute_advantages,
    compute_gae_for_sample_batch,
    discount_cumsum,
)
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.view_requirement import ViewRequirement


def _loop_discount(x, gamma):
    """sum_k gamma^k x[t+k], as a double loop."""
    return np.array([sum(gamma**k * x[t + k] for k in range(len(x) - t)) for t in range(len(x))])


def _loop_gae(rewards, values, last_r, gamma, lam):
    """GAE written directly from the paper's definition (double loop over deltas)."""
    v = list(values) + [last_r]
    deltas = [rewards[t] + gamma * v[t + 1] - v[t] for t in range(len(rewards))]
    return np.array(
        [sum((gamma * lam) ** k * deltas[t + k] for k in range(len(deltas) - t)) for t in range(len(deltas))]
    )


def _batch(rewards, vf_preds=None, **extra):
    n = len(rewards)
    data = {
        "obs": np.arange(n, dtype=np.float32)[:, None],
        "new_obs": np.arange(1, n + 1, dtype=np.float32)[:, None],
        "actions": np.zeros(n, np.int64),
        "rewards": np.asarray(rewards, np.float32),
    }
    if vf_preds is not None:
        data["vf_preds"] = np.asarray(vf_preds, np.float32)
    data.update(extra)
    return SampleBatch(data)


def test_postprocessing_names():
    assert Postprocessing.ADVANTAGES == "advantages"
    assert Postprocessing.VALUE_TARGETS == "value_targets"


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.9, 0.99, 1.0])
def test_discount_cumsum_vs_loop(gamma):
    x = np.random.default_rng(0).normal(size=17)
    np.testing.assert_allclose(discount_cumsum(x, gamma), _loop_discount(x, gamma), rtol=1e-10, atol=1e-12)


def test_discount_cumsum_hand_worked_and_2d():
    np.testing.assert_allclose(
        discount_cumsum(np.array([1.0, 2.0, 3.0]), 0.5), [2.75, 3.5, 3.0], rtol=1e-6, atol=1e-6
    )
    x = np.array([[1.0, 0.0], [1.0, 2.0]])
    np.testing.assert_allclose(discount_cumsum(x, 0.5), [[1.5, 1.0], [1.0, 2.0]], rtol=1e-6, atol=1e-6)
    assert discount_cumsum(np.array([]), 0.9).shape == (0,)


@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0), (1.0, 0.7)])
def test_gae_vs_loop(gamma, lam):
    rng = np.random.default_rng(int(gamma * 100 + lam * 10))
    rewards, values = rng.normal(size=12), rng.normal(size=12)
    last_r = float(rng.normal())
    batch = compute_advantages(_batch(rewards, values), last_r, gamma, lam, use_gae=True)
    values32 = values.astype(np.float32).astype(np.float64)
    expected = _loop_gae(rewards.astype(np.float32), values32, last_r, gamma, lam)
    np.testing.assert_allclose(batch[Postprocessing.ADVANTAGES], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch[Postprocessing.VALUE_TARGETS], expected + values32, rtol=1e-5, atol=1e-5)
    assert batch[Postprocessing.ADVANTAGES].dtype == np.float32
    assert batch[Postprocessing.VALUE_TARGETS].dtype == np.float32


def test_monte_carlo_hand_worked():
    # rewards [1, 0, 2], last_r 4, gamma 0.5:
    # G2 = 2 + 0.5*4 = 4; G1 = 0 + 0.5*4 = 2; G0 = 1 + 0.5*2 = 2.
    batch = compute_advantages(_batch([1.0, 0.0, 2.0], [0.5, 1.0, 1.5]), 4.0, gamma=0.5, use_gae=False)
    np.testing.assert_allclose(batch["value_targets"], [2.0, 2.0, 4.0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(batch["advantages"], [1.5, 1.0, 2.5], rtol=1e-6, atol=1e-6)


def test_no_critic_hand_worked():
    batch = compute_advantages(_batch([1.0, 0.0, 2.0]), 0.0, gamma=0.5, use_gae=False, use_critic=False)
    # G2 = 2; G1 = 1; G0 = 1.5.
    np.testing.assert_allclose(batch["advantages"], [1.5, 1.0, 2.0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(batch["value_targets"], [0.0, 0.0, 0.0])


def test_gae_lambda_one_equals_monte_carlo_advantage():
    rng = np.random.default_rng(3)
    r, v = rng.normal(size=9), rng.normal(size=9)
    gae = compute_advantages(_batch(r, v), 0.7, 0.9, 1.0, use_gae=True)["advantages"]
    mc = compute_advantages(_batch(r, v), 0.7, 0.9, use_gae=False)["advantages"]
    np.testing.assert_allclose(gae, mc, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(use_gae=True, use_critic=True), "vf_preds"),
        (dict(use_gae=False, use_critic=True), "vf_preds"),
    ],
)
def test_missing_vf_preds_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compute_advantages(_batch([1.0, 2.0]), 0.0, **kwargs)


def test_gae_without_critic_raises():
    with pytest.raises(ValueError, match="use_critic"):
        compute_advantages(_batch([1.0], [0.0]), 0.0, use_gae=True, use_critic=False)


def test_last_r_shape_checked():
    np.testing.assert_allclose(
        compute_advantages(_batch([1.0], [0.0]), np.array([2.0]), 0.5, use_gae=False)["value_targets"],
        [2.0],
        rtol=1e-6,
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="last_r"):
        compute_advantages(_batch([1.0], [0.0]), np.array([1.0, 2.0]), 0.5)


class _FakeModel:
    view_requirements = {
        "obs": ViewRequirement(),
        "prev_rewards": ViewRequirement("rewards", shift=-1),
    }


class _FakePolicy:
    """Exposes what compute_gae_for_sample_batch needs: config, model.view_requirements, _value."""

    def __init__(self, use_gae=True):
        self.config = {"gamma": 0.5, "lambda": 1.0, "use_gae": use_gae}
        self.model = _FakeModel()
        self.calls = []

    def _value(self, **input_dict):
        self.calls.append(input_dict)
        # V(s) = 10 * obs.
        return 10.0 * float(np.asarray(input_dict["obs"]).reshape(-1)[0])


def _trajectory(**done_cols):
    return _batch([1.0, 1.0], [0.0, 0.0], **done_cols)


def test_terminated_trajectory_not_bootstrapped():
    policy = _FakePolicy()
    batch = compute_gae_for_sample_batch(
        policy, _trajectory(terminateds=np.array([False, True]), truncateds=np.array([False, False]))
    )
    assert policy.calls == []
    # gamma 0.5, lambda 1, V=0: advantages = returns = [1.5, 1].
    np.testing.assert_allclose(batch["advantages"], [1.5, 1.0], rtol=1e-6, atol=1e-6)


def test_truncated_trajectory_bootstraps_from_last_next_obs():
    policy = _FakePolicy()
    batch = compute_gae_for_sample_batch(
        policy, _trajectory(terminateds=np.array([False, False]), truncateds=np.array([False, True]))
    )
    assert len(policy.calls) == 1
    call = policy.calls[0]
    # index="last": obs comes from the last new_obs (= 2.0), prev_rewards from the last reward.
    np.testing.assert_array_equal(np.asarray(call["obs"]).reshape(-1), [2.0])
    np.testing.assert_array_equal(np.asarray(call["prev_rewards"]).reshape(-1), [1.0])
    # last_r = V(2) = 20: G1 = 1 + 0.5*20 = 11, G0 = 1 + 0.5*11 = 6.5.
    np.testing.assert_allclose(batch["advantages"], [6.5, 11.0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(batch["value_targets"], [6.5, 11.0], rtol=1e-6, atol=1e-6)


def test_unfinished_fragment_bootstraps_and_old_style_dones():
    policy = _FakePolicy(use_gae=False)
    batch = compute_gae_for_sample_batch(policy, _trajectory(dones=np.array([False, False])))
    assert len(policy.calls) == 1
    np.testing.assert_allclose(batch["value_targets"], [6.5, 11.0], rtol=1e-6, atol=1e-6)
    policy = _FakePolicy()
    compute_gae_for_sample_batch(policy, _trajectory(dones=np.array([False, True])))
    assert policy.calls == []


def test_use_critic_default_true_from_config():
    policy = _FakePolicy()
    policy.config["use_critic"] = False
    policy.config["use_gae"] = False
    batch = compute_gae_for_sample_batch(policy, _batch([1.0, 1.0], dones=np.array([False, True])))
    np.testing.assert_allclose(batch["advantages"], [1.5, 1.0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(batch["value_targets"], [0.0, 0.0])


def test_adjust_nstep_hand_worked():
    batch = _batch([1.0, 2.0, 3.0, 4.0], dones=np.array([False, False, False, True]))
    rewards_ref = batch["rewards"]
    adjust_nstep(3, 0.5, batch)
    # r0 = 1 + .5*2 + .25*3 = 2.75; r1 = 2 + 1.5 + 1 = 4.5; r2 = 3 + 2 = 5; r3 = 4.
    np.testing.assert_allclose(batch["rewards"], [2.75, 4.5, 5.0, 4.0], rtol=1e-6, atol=1e-6)
    assert batch["rewards"] is rewards_ref  # changed in place
    # new_obs[i] = obs[i+3], else the last new_obs (= 4).
    np.testing.assert_array_equal(batch["new_obs"][:, 0], [3.0, 4.0, 4.0, 4.0])
    np.testing.assert_array_equal(batch["dones"], [False, True, True, True])


def test_adjust_nstep_shifts_terminateds_and_truncateds():
    batch = _batch(
        [1.0, 1.0, 1.0],
        terminateds=np.array([False, False, True]),
        truncateds=np.array([False, False, False]),
    )
    adjust_nstep(2, 1.0, batch)
    np.testing.assert_array_equal(batch["terminateds"], [False, True, True])
    np.testing.assert_array_equal(batch["truncateds"], [False, False, False])
    np.testing.assert_allclose(batch["rewards"], [2.0, 2.0, 1.0], rtol=1e-6, atol=1e-6)


def test_adjust_nstep_one_is_identity():
    batch = _batch([1.0, 2.0], dones=np.array([False, False]))
    adjust_nstep(1, 0.9, batch)
    np.testing.assert_allclose(batch["rewards"], [1.0, 2.0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(batch["new_obs"][:, 0], [1.0, 2.0])


@pytest.mark.parametrize(
    "n_step, dones, match",
    [
        (2, [False, True, False], "middle"),
        (0, [False, False, False], "n_step"),
    ],
)
def test_adjust_nstep_errors(n_step, dones, match):
    with pytest.raises(ValueError, match=match):
        adjust_nstep(n_step, 0.9, _batch([1.0, 1.0, 1.0], dones=np.array(dones)))
