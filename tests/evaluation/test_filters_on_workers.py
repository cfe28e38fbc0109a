"""Observation filters across Ray workers, as an RLlib 1.x Trainer syncs them (ES/ARS,
MuJoCo PPO configs): each remote worker normalizes with its own MeanStdFilter, the
driver merges their buffers (FilterManager / WorkerSet.sync_filters) and pushes the
merged filter back. Expected statistics are numpy's over every observation the envs
emitted (each env logs them), not anything the filter code computes."""

import sys

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.filter_manager import FilterManager


class LoggingEnv(gym.Env):
    """obs = [t, t * worker_index + noise]; logs every observation it returns."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, ctx):
        self.k = float(getattr(ctx, "worker_index", 0) + 1)
        self.rng = np.random.default_rng(int(self.k))
        self.emitted = []

    def _obs(self):
        obs = np.array([self.t, self.t * self.k + self.rng.normal()], np.float32)
        self.emitted.append(obs)
        return obs

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= 4, False, {}


class ZeroPolicy(Policy):
    def compute_actions(self, obs_batch, *args, **kwargs):
        return np.zeros(len(obs_batch), np.int64), [], {}

    def learn_on_batch(self, samples):
        return {}

    def get_weights(self):
        return {}

    def set_weights(self, weights):
        pass


def _emitted(ws):
    per_worker = [np.stack(envs[0].emitted) for envs in ws.foreach_env(lambda e: e)[1:]]
    return np.concatenate(per_worker).astype(np.float64)


@pytest.fixture(scope="module")
def filter_ws(ray_session):
    from rlpolicy.evaluation.worker_set import WorkerSet

    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ws = WorkerSet(
        env_creator=LoggingEnv,
        policy_class=ZeroPolicy,
        num_workers=2,
        trainer_config={
            "observation_filter": "MeanStdFilter",
            "rollout_fragment_length": 6,
            "num_envs_per_worker": 1,
            "num_cpus_per_worker": 0.5,
        },
    )
    ray_session.get([w.get_host.remote() for w in ws.remote_workers()], timeout=180)
    yield ws
    ws.stop()


def test_mean_std_filter_synced_across_two_ray_workers(filter_ws):
    ws = filter_ws
    batches = [ws.sample() for _ in range(2)]  # two rounds: one fragment per worker each
    assert all(b.count == 12 for b in batches)
    ws.sync_filters()
    seen = _emitted(ws)
    local = ws.local_worker().filters["default_policy"]
    assert local.rs.n == len(seen)
    np.testing.assert_allclose(local.rs.mean, seen.mean(0), atol=1e-6)
    np.testing.assert_allclose(local.rs.std, seen.std(0, ddof=1), atol=1e-5)
    remote = [f["default_policy"] for f in ws.foreach_worker(lambda w: w.get_filters())[1:]]
    for f in remote:  # every worker now filters with the merged statistics, buffers empty
        assert f.rs.n == len(seen) and f.buffer.n == 0
        np.testing.assert_allclose(f.rs.mean, seen.mean(0), atol=1e-6)
    # A second sync after more sampling merges only the new observations.
    after = ws.sample()
    FilterManager.synchronize(ws.local_worker().filters, ws.remote_workers())
    seen2 = _emitted(ws)
    assert local.rs.n == len(seen2)
    np.testing.assert_allclose(local.rs.mean, seen2.mean(0), atol=1e-6)
    # What the policies were given is the filtered observation, not the raw one.
    assert np.abs(after[SampleBatch.OBS]).max() < np.abs(seen2).max()
