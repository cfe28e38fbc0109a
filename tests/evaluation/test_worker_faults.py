"""Faults tried on purpose, 1.x style: a failed ``env.reset()`` does not brick a worker,
``ignore_worker_failures`` drops a failing remote worker and goes on (RLlib 1.11's
``test_ignore_worker_failure``: an env whose ``step`` raises on some worker indices),
``recreate_failed_workers`` replaces it, dead workers' episodes stay counted, and
NaN/inf from an env is named (``_check_finite_samples``)."""

import logging
import os
import sys

import gymnasium as gym
import numpy as np
import pytest
import sampling_envs
from sampling_envs import CountingEnv

from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.utils.error import EnvError, NonFiniteSampleError

torch = pytest.importorskip("torch")

TINY = {"framework": "torch", "model": {"fcnet_hiddens": [8]}}


def _worker(env_creator, **kwargs):
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    kwargs.setdefault("policy_config", TINY)
    return RolloutWorker(env_creator=env_creator, policy_spec=PGTorchPolicy, **kwargs)


class FlakyResetEnv(CountingEnv):
    """CountingEnv whose ``reset`` raises while ``broken`` is set (class-wide)."""

    broken = False
    resets = 0

    def reset(self, *, seed=None, options=None):
        type(self).resets += 1
        if type(self).broken:
            raise ConnectionError("simulator unreachable")
        return super().reset(seed=seed, options=options)


@pytest.fixture
def flaky():
    FlakyResetEnv.broken, FlakyResetEnv.resets = False, 0
    yield FlakyResetEnv
    FlakyResetEnv.broken = False


# ---------------------------------------------------------------------- a failed reset


def test_a_failed_first_reset_leaves_the_worker_able_to_reset(flaky):
    flaky.broken = True
    worker = _worker(lambda ctx: FlakyResetEnv(5), rollout_fragment_length=10)
    with pytest.raises(ConnectionError, match="simulator unreachable"):
        worker.sample()
    flaky.broken = False
    batch = worker.sample()
    assert batch.count == 10
    # Two whole episodes of 5 steps from a fresh reset: t runs 1..5 twice.
    np.testing.assert_array_equal(batch[SampleBatch.REWARDS], [1, 2, 3, 4, 5] * 2)


def test_a_reset_failing_between_episodes_does_not_brick_the_worker(flaky):
    worker = _worker(lambda ctx: FlakyResetEnv(5), rollout_fragment_length=10)
    assert worker.sample().count == 10
    flaky.broken = True  # the reset after the next episode's end fails
    with pytest.raises(ConnectionError):
        worker.sample()
    with pytest.raises(ConnectionError):  # still broken: the worker tries to reset again
        worker.sample()
    flaky.broken = False
    batch = worker.sample()
    # The next fragment starts a fresh episode (t from 1), not step({}) on a dead one.
    rewards = batch[SampleBatch.REWARDS]
    assert batch.count >= 10 and rewards[-10:].tolist() == [1, 2, 3, 4, 5] * 2
    assert worker.metrics()["episodes_total"] >= 4


# ---------------------------------------------------------------------- NaN/inf from the env


class NaNEnv(CountingEnv):
    """CountingEnv that returns a NaN reward (or observation) at step ``at``."""

    def __init__(self, column, at=3):
        super().__init__(length=5)
        self.column, self.at = column, at

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        if self.t == self.at:
            if self.column == "rewards":
                reward = float("nan")
            else:
                obs = np.array([np.inf, 0.0], np.float32)
        return obs, reward, term, trunc, info


@pytest.mark.parametrize("column", ["rewards", "new_obs"])
def test_check_finite_samples_names_the_env_and_the_column(column):
    worker = _worker(lambda ctx: NaNEnv(column), policy_config={**TINY, "_check_finite_samples": True})
    with pytest.raises(
        NonFiniteSampleError,
        match=rf"^env 'NaNEnv' \(sub-environment 0\) returned NaN/inf in column {column!r}",
    ):
        worker.sample()
    assert issubclass(NonFiniteSampleError, EnvError) and issubclass(NonFiniteSampleError, ValueError)


def test_without_the_switch_nan_rewards_pass_through_as_in_rllib():
    worker = _worker(lambda ctx: NaNEnv("rewards"), rollout_fragment_length=5)
    batch = worker.sample()
    assert (
        np.isnan(batch[SampleBatch.REWARDS][2])
        and np.isfinite(batch[SampleBatch.REWARDS][[0, 1, 3, 4]]).all()
    )


def test_check_finite_samples_is_a_checked_bool():
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

    with pytest.raises(ValueError, match="_check_finite_samples"):
        PGTorchPolicy(
            CountingEnv.observation_space, CountingEnv.action_space, {**TINY, "_check_finite_samples": "yes"}
        )


# ---------------------------------------------------------------------- Ray: failing workers


class FaultInjectEnv(CountingEnv):
    """RLlib 1.11's test env: ``step`` raises on the worker indices in ``bad_indices``."""

    def __init__(self, config):
        super().__init__(length=5)
        self.config = config

    def step(self, action):
        if self.config.worker_index in self.config["bad_indices"]:
            raise ValueError(f"This is a simulated error from worker-idx={self.config.worker_index}.")
        return super().step(action)


@pytest.fixture(scope="module")
def ray_modules(ray_session):
    ray_session.cloudpickle.register_pickle_by_value(sampling_envs)
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_session


def _worker_set(bad, **config):
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
    from rlpolicy.evaluation.worker_set import WorkerSet

    cfg = {
        **TINY,
        "rollout_fragment_length": 10,
        "num_envs_per_worker": 1,
        "num_cpus_per_worker": 0.5,
        "env_config": {"bad_indices": bad},
        **config,
    }
    return WorkerSet(
        env_creator=lambda ctx: FaultInjectEnv(ctx),
        policy_class=PGTorchPolicy,
        trainer_config=cfg,
        num_workers=2,
    )


def test_a_failing_worker_raises_without_ignore_worker_failures(ray_modules):
    ws = _worker_set([1])
    try:
        with pytest.raises(ValueError, match="simulated error from worker-idx=1"):
            ws.sample(20)
    finally:
        ws.stop()


def test_ignore_worker_failures_drops_the_failing_worker_and_goes_on(ray_modules, caplog):
    ws = _worker_set([1], ignore_worker_failures=True)
    try:
        with caplog.at_level(logging.WARNING, logger="rlpolicy.evaluation.worker_set"):
            batch = ws.sample(30)
        assert batch.count == 30  # exactly the steps asked for, all from worker 2
        assert ws.dropped_workers == [1] and len(ws.remote_workers()) == 1
        assert "remote worker 1 failed" in caplog.text and "dropping it" in caplog.text
        assert ws.sample(10).count == 10
        assert ws.metrics()["episodes_total"] == 40 // 5
    finally:
        ws.stop()


def test_ignore_worker_failures_raises_once_no_worker_is_left(ray_modules):
    ws = _worker_set([1, 2], ignore_worker_failures=True)
    try:
        with pytest.raises(RuntimeError, match="not enough healthy workers remain"):
            ws.sample(20)
        assert sorted(ws.dropped_workers) == [1, 2]
    finally:
        ws.stop()


def test_recreate_failed_workers_retries_then_gives_up_on_a_permanent_fault(ray_modules):
    ws = _worker_set([1], recreate_failed_workers=True)
    try:
        # Worker 1 fails on every try: recreation is bounded (3 * num_workers failures).
        with pytest.raises(RuntimeError, match=r"failed 7 times during one apply\(\) round"):
            ws.sample(20)
        assert ws.recreated_workers == [1] * 6
    finally:
        ws.stop()


class _FailAfter(CountingEnv):
    """Step raises from the second ``sample()`` on (marker file) on worker 1."""

    def __init__(self, config):
        super().__init__(length=5)
        self.config = config

    def step(self, action):
        if self.config.worker_index == 1 and os.path.exists(self.config["arm_file"]):
            raise ValueError("worker 1 broke")
        return super().step(action)


def test_a_dropped_workers_finished_episodes_stay_counted(ray_modules, tmp_path):
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
    from rlpolicy.evaluation.worker_set import WorkerSet

    arm = tmp_path / "arm"
    cfg = {
        **TINY,
        "rollout_fragment_length": 10,
        "num_cpus_per_worker": 0.5,
        "env_config": {"arm_file": str(arm)},
        "ignore_worker_failures": True,
    }
    ws = WorkerSet(
        env_creator=lambda ctx: _FailAfter(ctx), policy_class=PGTorchPolicy, trainer_config=cfg, num_workers=2
    )
    try:
        first = ws.sample(20)  # 10 steps from each worker: 2 whole episodes each
        ends = int(np.sum(first[SampleBatch.TERMINATEDS]))
        arm.write_text("")
        second = ws.sample(20)  # worker 1 fails and is dropped; worker 2 gives both fragments
        ends += int(np.sum(second[SampleBatch.TERMINATEDS]))
        assert ws.dropped_workers == [1]
        # Every episode end in the data is counted, worker 1's included (4 + 4).
        assert ws.metrics()["episodes_total"] == ends == 8
    finally:
        ws.stop()


def test_episodes_in_the_data_equal_episodes_counted_after_a_worker_is_killed(ray_modules):
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
    from rlpolicy.evaluation.worker_set import WorkerSet

    cfg = {**TINY, "rollout_fragment_length": 10, "num_cpus_per_worker": 0.5}
    ws = WorkerSet(
        env_creator=lambda ctx: CountingEnv(5), policy_class=PGTorchPolicy, trainer_config=cfg, num_workers=2
    )
    try:
        ends = int(np.sum(ws.sample(40)[SampleBatch.TERMINATEDS]))  # no metrics() call in between
        ray_modules.kill(ws.remote_workers()[0])
        ends += int(np.sum(ws.sample(40)[SampleBatch.TERMINATEDS]))
        assert ws.recreated_workers == [1]
        assert ws.metrics()["episodes_total"] == ends == 16
    finally:
        ws.stop()


def test_gym_env_spec_id_names_the_env():
    worker = _worker(
        lambda ctx: gym.make("CartPole-v1"),
        policy_config={**TINY, "_check_finite_samples": True},
        rollout_fragment_length=5,
    )
    env = worker.env.unwrapped
    original = type(env).step

    def nan_step(self, action):
        obs, r, term, trunc, info = original(self, action)
        return obs * np.nan, r, term, trunc, info

    type(env).step = nan_step
    try:
        with pytest.raises(NonFiniteSampleError, match=r"env 'CartPole-v1'.*'new_obs'"):
            worker.sample()
    finally:
        type(env).step = original
