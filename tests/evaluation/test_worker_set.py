"""WorkerSet: exact step counts, weight/global-var sync through Ray, recreation of dead
workers, multi-agent and TF policies inside actors. Ray tests share the session's
``ray_session`` fixture (tests/conftest.py) and one module-scoped WorkerSet."""

import logging
import sys

import numpy as np
import pytest
import sampling_envs
from sampling_envs import CountingEnv, CrashingEnv, TwoTeamEnv, team_mapping_fn

from rlpolicy.policy.policy import PolicySpec
from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch

torch = pytest.importorskip("torch")

OBS = np.array([[0.5, 1.0], [2.0, 0.0], [3.0, 1.0]], np.float32)


def _config(**extra):
    return {
        "framework": "torch",
        "model": {"fcnet_hiddens": [8]},
        "rollout_fragment_length": 10,
        "num_envs_per_worker": 2,
        "seed": 0,
        "num_cpus_per_worker": 1,
        **extra,
    }


def _logits(worker, policy_id="default_policy"):
    out = worker.get_policy(policy_id).compute_actions(OBS, explore=False)
    return np.asarray(out[2][SampleBatch.ACTION_DIST_INPUTS])


def _started(ws, ray, timeout=180):
    """Waits for the remote workers to exist: fails (instead of hanging) when Ray cannot place them."""
    ray.get([w.get_host.remote() for w in ws.remote_workers()], timeout=timeout)
    return ws


def _pg_torch():
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

    return PGTorchPolicy


# ---------------------------------------------------------------------- no Ray (num_workers=0)
def _discounted(rewards, gamma):
    return [sum(gamma**k * r for k, r in enumerate(rewards[i:])) for i in range(len(rewards))]


def test_local_only_sample_is_cut_to_exactly_the_requested_steps():
    from rlpolicy.evaluation.worker_set import WorkerSet

    def make():
        return WorkerSet(
            env_creator=lambda ctx: CountingEnv(4),
            policy_class=_pg_torch(),
            trainer_config=_config(gamma=0.5),
            num_workers=0,
        )

    ws = make()
    assert ws.remote_workers() == [] and ws.local_worker().num_envs == 2
    batch = ws.sample(25)  # fragments of 20 steps: 2 fragments, cut at 25
    assert batch.count == 25 and ws.num_env_steps_sampled == 25
    # Same seed (re-seeded globally), uncut: the cut rows keep the values postprocessed
    # over whole pieces.
    full = make().sample(40)
    assert full.count == 40
    for key in (SampleBatch.OBS, SampleBatch.ACTIONS, "advantages"):
        np.testing.assert_array_equal(batch[key], full[key][:25])
    # PG advantages: discounted returns within each piece (episode end or fragment end).
    for unroll in np.unique(full[SampleBatch.UNROLL_ID]):
        rows = full[SampleBatch.UNROLL_ID] == unroll
        np.testing.assert_allclose(
            full["advantages"][rows], _discounted(full[SampleBatch.REWARDS][rows], 0.5), rtol=1e-6, atol=1e-6
        )
    assert ws.sample().count == 20  # one round = one fragment of the local worker
    m = ws.metrics()
    assert m["episodes_total"] >= 8 and m["episode_reward_mean"] == 10.0
    ws.stop()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_workers": -1}, ValueError, "num_workers must be an int >= 0"),
        ({"policy_class": None}, ValueError, "give policy_class"),
    ],
)
def test_worker_set_bad_arguments(kwargs, error, match):
    from rlpolicy.evaluation.worker_set import WorkerSet

    kwargs = {
        "env_creator": lambda ctx: CountingEnv(),
        "policy_class": _pg_torch(),
        "trainer_config": _config(),
        **kwargs,
    }
    with pytest.raises(error, match=match):
        WorkerSet(**kwargs)


def test_sample_limit_errors():
    from rlpolicy.execution.rollout_ops import synchronous_parallel_sample

    with pytest.raises(ValueError, match="not both"):
        synchronous_parallel_sample(object(), max_env_steps=3, max_agent_steps=3)
    with pytest.raises(ValueError, match="must be an int >= 1, got 0"):
        synchronous_parallel_sample(object(), max_env_steps=0)


# ---------------------------------------------------------------------- Ray
@pytest.fixture(scope="module")
def ray_modules(ray_session):
    # Workers cannot import the test modules: ship them (envs, lambdas) by value.
    ray_session.cloudpickle.register_pickle_by_value(sampling_envs)
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_session


@pytest.fixture(scope="module")
def ws2(ray_modules, tmp_path_factory):
    """Two remote torch workers; their envs crash on demand (see CrashingEnv)."""
    from rlpolicy.evaluation.worker_set import WorkerSet

    files = tmp_path_factory.mktemp("crash")
    env_config = {
        "length": 5,
        "crash_worker": 2,
        "arm_file": str(files / "arm"),
        "done_file": str(files / "done"),
    }
    # Half a CPU each: the session's Ray has 2 CPUs and other tests' workers need room.
    ws = WorkerSet(
        env_creator=lambda ctx: CrashingEnv(ctx),
        policy_class=_pg_torch(),
        trainer_config=_config(env_config=env_config, num_cpus_per_worker=0.5),
        num_workers=2,
    )
    ws.files = env_config
    _started(ws, ray_modules)
    yield ws
    ws.stop()


def test_two_workers_return_exactly_the_configured_steps(ws2):
    assert len(ws2.remote_workers()) == 2
    assert ws2.sample(55).count == 55  # 20-step fragments: 3 fragments, cut at 55
    one_round = ws2.sample()
    assert one_round.count == 40  # one fragment from each worker
    assert len(np.unique(one_round[SampleBatch.EPS_ID])) >= 2 * 2 * 2  # 2 workers x 2 envs x >=2 episodes


def test_weight_sync_makes_remote_actions_equal_the_drivers(ws2):
    local = _logits(ws2.local_worker())
    remote = ws2.foreach_worker(_logits)[1:]
    assert any(not np.allclose(r, local) for r in remote)  # seeds differ per worker
    ws2.sync_weights(global_vars={"timestep": 1234})
    assert ws2.foreach_policy(lambda p, pid: p.global_timestep) == [1234, 1234, 1234]
    for r in ws2.foreach_worker(_logits)[1:]:
        np.testing.assert_allclose(r, local, rtol=1e-6, atol=1e-6)


def test_actors_build_their_policies_as_ray_workers(ws2):
    from rlpolicy._core.devices import detect_ray_context

    info = ws2.foreach_worker(
        lambda w: (
            detect_ray_context(),
            w.worker_index,
            w.get_policy().config["worker_index"],
            str(w.get_policy().device),
        )
    )
    assert info[0] == (("driver", None), 0, 0, "cpu")
    assert info[1:] == [(("worker", []), 1, 1, "cpu"), (("worker", []), 2, 2, "cpu")]


def test_killed_worker_is_recreated_and_loses_no_steps(ws2, ray_modules, caplog):
    before = list(ws2.recreated_workers)
    ws2.sync_weights()
    ray_modules.kill(ws2.remote_workers()[0])
    with caplog.at_level(logging.WARNING, logger="rlpolicy.evaluation.worker_set"):
        batch = ws2.sample(60)
    assert batch.count == 60
    assert ws2.recreated_workers == before + [1]
    assert "remote worker 1 died" in caplog.text
    # The new actor got the driver's weights.
    np.testing.assert_allclose(
        ws2.foreach_worker(_logits)[1], _logits(ws2.local_worker()), rtol=1e-6, atol=1e-6
    )


def test_worker_dying_mid_sample_has_its_fragment_resampled(ws2):
    before = list(ws2.recreated_workers)
    open(ws2.files["arm_file"], "w").close()  # worker 2's env now exits inside step()
    fragments = ws2.sample_fragments()  # one round: one fragment per worker
    assert ws2.recreated_workers == before + [2]
    # Worker 2's fragment was sampled again by its new actor within the same round.
    assert [f.count for f in fragments] == [20, 20]
    assert ws2.sample(40).count == 40


@pytest.mark.tf
def test_multi_agent_tf_graph_and_eager_policies_in_an_actor(ray_modules):
    pytest.importorskip("tensorflow")
    from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy
    from rlpolicy.evaluation.worker_set import WorkerSet

    config = _config(
        framework="tf",
        rollout_fragment_length=6,
        num_envs_per_worker=1,
        multiagent={
            "policies": {
                "red": PolicySpec(PGTFPolicy),
                "blue": PolicySpec(PGTFPolicy.as_eager(), config={"framework": "tf2"}),
            },
            "policy_mapping_fn": team_mapping_fn,
            "policies_to_train": ["blue"],
        },
    )
    ws = WorkerSet(env_creator=lambda ctx: TwoTeamEnv(ctx), trainer_config=config, num_workers=1)
    try:
        _started(ws, ray_modules)
        batch = ws.sample(6)
        assert isinstance(batch, MultiAgentBatch) and batch.env_steps() == 6
        assert set(batch.policy_batches["red"][SampleBatch.OBS][:, 0]) == {1.0}
        assert set(batch.policy_batches["blue"][SampleBatch.OBS][:, 0]) == {2.0}
        assert set(ws.local_worker().learn_on_batch(batch)) == {"blue"}
        ws.sync_weights()
        for pid in ("red", "blue"):
            local = _logits(ws.local_worker(), pid)
            remote = ws.foreach_worker(lambda w, pid=pid: _logits(w, pid))[1]
            np.testing.assert_allclose(remote, local, rtol=1e-5, atol=1e-6)
        frameworks = ws.foreach_policy(lambda p, pid: (pid, p.framework))
        assert sorted(set(frameworks)) == [("blue", "tf2"), ("red", "tf")]
    finally:
        ws.stop()


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({}, {"num_cpus": 1, "num_gpus": 0, "resources": None}),
        (
            {
                "num_cpus_per_worker": 0.5,
                "num_gpus_per_worker": 0.25,
                "custom_resources_per_worker": {"x": 1},
            },
            {"num_cpus": 0.5, "num_gpus": 0.25, "resources": {"x": 1}},
        ),
        ({"num_gpus_per_worker": 1, "_fake_gpus": True}, {"num_cpus": 1, "num_gpus": 0, "resources": None}),
    ],
)
def test_remote_worker_resources_come_from_the_config(extra, expected):
    from rlpolicy.evaluation.worker_set import WorkerSet

    ws = WorkerSet(trainer_config=_config(**extra), _setup=False)
    assert ws._remote_resources() == expected
