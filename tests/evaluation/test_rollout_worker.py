"""RolloutWorker: trajectories cut at episode ends and fragment ends, postprocessed once each."""
import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.policy.sample_batch import SampleBatch

torch = pytest.importorskip("torch")


class CountingEnv(gym.Env):
    """obs = [t]; reward = t + 1; terminates after `length` steps (or truncates, see flag)."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length=5, truncate=False):
        self.length, self.truncate = length, truncate

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        obs = np.array([float(self.t)], np.float32)
        return obs, float(self.t), end and not self.truncate, end and self.truncate, {}


@pytest.fixture(scope="module")
def pg_policy():
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

    return PGTorchPolicy(CountingEnv.observation_space, CountingEnv.action_space,
                         {"framework": "torch", "gamma": 0.5, "model": {"fcnet_hiddens": [8]}})


def test_sample_shapes_and_episode_bookkeeping(pg_policy):
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    calls = []
    orig = pg_policy.postprocess_trajectory

    def spy(batch, *a, **k):
        calls.append(len(batch))
        return orig(batch, *a, **k)

    pg_policy.postprocess_trajectory = spy
    try:
        worker = RolloutWorker(lambda: CountingEnv(5), pg_policy, num_envs=2, rollout_fragment_length=7)
        batch = worker.sample()
    finally:
        del pg_policy.postprocess_trajectory
    assert batch.count == 14
    # Per env: one full episode (5 steps) + a cut fragment (2 steps) => 4 trajectories.
    assert sorted(calls) == [2, 2, 5, 5]
    for eps in np.unique(batch[SampleBatch.EPS_ID]):
        rows = batch[SampleBatch.EPS_ID] == eps
        t = batch[SampleBatch.T][rows]
        np.testing.assert_array_equal(t, np.arange(len(t)))
        np.testing.assert_array_equal(batch[SampleBatch.OBS][rows, 0], t)
        np.testing.assert_array_equal(batch[SampleBatch.NEXT_OBS][rows, 0], t + 1)
        np.testing.assert_array_equal(batch[SampleBatch.REWARDS][rows], t + 1)
        dones = batch[SampleBatch.DONES][rows]
        assert dones[-1] == (len(t) == 5) and not dones[:-1].any()
    m = worker.metrics()
    assert m["episodes_total"] == 2 and m["episode_reward_mean"] == 15.0
    assert m["timesteps_total"] == 14


def test_pg_advantages_are_discounted_returns(pg_policy):
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    worker = RolloutWorker(lambda: CountingEnv(4), pg_policy, num_envs=1, rollout_fragment_length=4)
    batch = worker.sample()
    # rewards 1,2,3,4 with gamma 0.5, worked by hand:
    expected = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4, 2 + 0.5 * 3 + 0.25 * 4, 3 + 0.5 * 4, 4.0]
    np.testing.assert_allclose(batch["advantages"], expected, rtol=1e-6, atol=1e-6)


def test_prev_actions_and_rewards_shift_within_episode(pg_policy):
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    worker = RolloutWorker(lambda: CountingEnv(3, truncate=True), pg_policy, num_envs=1,
                           rollout_fragment_length=3)
    b = worker.sample()
    np.testing.assert_array_equal(b[SampleBatch.PREV_REWARDS], [0, 1, 2])
    np.testing.assert_array_equal(b[SampleBatch.PREV_ACTIONS][1:], b[SampleBatch.ACTIONS][:-1])
    assert b[SampleBatch.PREV_ACTIONS][0] == 0
    np.testing.assert_array_equal(b[SampleBatch.TRUNCATEDS], [False, False, True])
    np.testing.assert_array_equal(b[SampleBatch.TERMINATEDS], [False, False, False])


def test_bad_arguments():
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    with pytest.raises(ValueError, match="num_envs"):
        RolloutWorker(lambda: CountingEnv(), object(), num_envs=0)
