"""Sampling as RLlib 1.11 does it, exercised by 1.x-style client code (plain ``Policy``
subclasses written as 1.x users write them, old gym envs, old mapping functions):
list actions, one-hot Discrete observations, horizons, reward clipping, observation
filters, ``training_enabled``, infos at inference, struct actions, ``get_global_worker``.

Every expected batch below is worked out by hand from the env's definition."""

import os
import warnings

import gymnasium as gym
import numpy as np
import pytest
from sampling_envs import CountingEnv, TwoTeamEnv
from sampling_policies import ActOnlyPolicy, RandomPolicy

from rlpolicy.evaluation.rollout_worker import RolloutWorker, get_global_worker
from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch
from rlpolicy.policy.view_requirement import ViewRequirement


# ---------------------------------------------------------------------- 1.x-style policies
class RecordingPolicy(ActOnlyPolicy):
    """Acts 0 (Tuple spaces: (1, 2)) and records every input dict it is given."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.inputs = []

    def compute_actions_from_input_dict(
        self, input_dict, explore=None, timestep=None, episodes=None, **kwargs
    ):
        self.inputs.append({k: input_dict[k] for k in input_dict.keys()})
        n = len(input_dict[SampleBatch.OBS])
        if isinstance(self.action_space, gym.spaces.Tuple):
            return (np.full(n, 1, np.int64), np.full(n, 2, np.int64)), [], {}
        return np.zeros(n, np.int64), [], {}

    def compute_actions(self, obs_batch, *args, **kwargs):
        return np.zeros(len(obs_batch), np.int64), [], {}


def _worker(env_creator, policy_spec=RecordingPolicy, **kwargs):
    kwargs.setdefault("rollout_fragment_length", 6)
    return RolloutWorker(env_creator=env_creator, policy_spec=policy_spec, **kwargs)


# ---------------------------------------------------------------------- actions
def test_list_returning_random_policy_is_sampled():
    worker = _worker(lambda: CountingEnv(length=4), RandomPolicy, rollout_fragment_length=10, seed=3)
    batch = worker.sample()
    actions = batch[SampleBatch.ACTIONS]
    assert isinstance(actions, np.ndarray) and actions.shape == (10,)
    assert set(actions.tolist()) <= {0, 1}
    # obs[1] of the next step is the action taken (CountingEnv), so the env got exactly these.
    not_last = ~batch[SampleBatch.DONES]
    np.testing.assert_array_equal(batch[SampleBatch.NEXT_OBS][:, 1], actions.astype(np.float32))
    assert not_last.sum() < 10


def test_struct_actions_are_stored_flat_as_rllib_stores_them():
    class TupleEnv(CountingEnv):
        action_space = gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)])

        def step(self, action):
            self.got = action
            return super().step(action[0])

    envs = []

    def make():
        envs.append(TupleEnv(length=3))
        return envs[-1]

    worker = _worker(make, rollout_fragment_length=4)
    batch = worker.sample()
    actions = batch[SampleBatch.ACTIONS]
    # A 1.11 autoregressive distribution reads actions[:, 0] and actions[:, 1].
    assert actions.shape == (4, 2) and actions.dtype == np.int64
    np.testing.assert_array_equal(actions[:, 0], 1)
    np.testing.assert_array_equal(actions[:, 1], 2)
    assert tuple(int(a) for a in envs[0].got) == (1, 2)  # the env still gets the tuple
    # prev_actions follows the same layout, zeros before the first step.
    np.testing.assert_array_equal(batch[SampleBatch.PREV_ACTIONS][0], [0, 0])
    np.testing.assert_array_equal(batch[SampleBatch.PREV_ACTIONS][1], [1, 2])
    nested = _worker(make, rollout_fragment_length=2, policy_config={"_disable_action_flattening": True})
    kept = nested.sample()[SampleBatch.ACTIONS]
    assert isinstance(kept, tuple) and kept[1].tolist() == [2, 2]


# ---------------------------------------------------------------------- observations
class DiscreteEnv(gym.Env):
    """Discrete(4) observations: obs = t % 4."""

    observation_space = gym.spaces.Discrete(4)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return self.t % 4, 1.0, self.t >= 6, False, {}


def test_plain_policy_on_discrete_obs_gets_one_hot():
    worker = _worker(DiscreteEnv, rollout_fragment_length=6)
    policy = worker.get_policy()
    assert isinstance(policy.observation_space, gym.spaces.Box) and policy.observation_space.shape == (4,)
    assert policy.observation_space.original_space == gym.spaces.Discrete(4)
    batch = worker.sample()
    eye = np.eye(4, dtype=np.float32)
    np.testing.assert_array_equal(batch[SampleBatch.OBS], eye[[0, 1, 2, 3, 0, 1]])
    np.testing.assert_array_equal(batch[SampleBatch.NEXT_OBS], eye[[1, 2, 3, 0, 1, 2]])
    np.testing.assert_array_equal(policy.inputs[2][SampleBatch.OBS], eye[[2]])
    raw = _worker(DiscreteEnv, policy_config={"_disable_preprocessor_api": True})
    assert raw.get_policy().observation_space == gym.spaces.Discrete(4)
    np.testing.assert_array_equal(raw.sample()[SampleBatch.OBS], [0, 1, 2, 3, 0, 1])
    # A ready policy keeps its own space: raw ints on Discrete(4), one-hot on the worker's space.
    from rlpolicy.evaluation.rollout_worker import worker_observation_space

    ready = RecordingPolicy(DiscreteEnv.observation_space, DiscreteEnv.action_space, {})
    np.testing.assert_array_equal(_worker(DiscreteEnv, ready).sample()[SampleBatch.OBS], [0, 1, 2, 3, 0, 1])
    space = worker_observation_space(DiscreteEnv.observation_space)
    assert space == policy.observation_space and space.original_space == gym.spaces.Discrete(4)
    ready = RecordingPolicy(space, DiscreteEnv.action_space, {})
    np.testing.assert_array_equal(
        _worker(DiscreteEnv, ready).sample()[SampleBatch.OBS], eye[[0, 1, 2, 3, 0, 1]]
    )


def test_infos_reach_compute_actions_when_a_view_requirement_asks():
    class InfoPolicy(RecordingPolicy):
        def __init__(self, *args):
            super().__init__(*args)
            self.view_requirements[SampleBatch.INFOS] = ViewRequirement(used_for_compute_actions=True)

    worker = _worker(lambda: CountingEnv(length=3), InfoPolicy, rollout_fragment_length=4)
    worker.sample()
    infos = [list(d[SampleBatch.INFOS]) for d in worker.get_policy().inputs]
    # The info that came with each current observation: {} after a reset, then {"t": t}.
    assert infos == [[{}], [{"t": 1}], [{"t": 2}], [{}]]

    class NoInfoPolicy(RecordingPolicy):
        def __init__(self, *args):
            super().__init__(*args)
            self.view_requirements[SampleBatch.INFOS] = ViewRequirement(used_for_compute_actions=False)

    quiet = _worker(lambda: CountingEnv(length=3), NoInfoPolicy, rollout_fragment_length=2)
    quiet.sample()
    assert SampleBatch.INFOS not in quiet.get_policy().inputs[0]


def test_shifted_state_in_without_initial_state_gets_zeros_of_its_space():
    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)

    class MemoryPolicy(RecordingPolicy):
        def __init__(self, *args):
            super().__init__(*args)
            self.view_requirements["state_in_0"] = ViewRequirement(
                "state_out_0", shift=-1, space=space, used_for_compute_actions=True
            )

        def get_initial_state(self):
            return []

        def compute_actions_from_input_dict(self, input_dict, **kwargs):
            actions, _, _ = super().compute_actions_from_input_dict(input_dict, **kwargs)
            t = input_dict[SampleBatch.OBS][:, 0]
            return actions, [np.stack([t, t + 1, t + 2], axis=1).astype(np.float32)], {}

    worker = _worker(lambda: CountingEnv(length=10), MemoryPolicy, rollout_fragment_length=3)
    batch = worker.sample()
    np.testing.assert_array_equal(worker.get_policy().inputs[0]["state_in_0"], np.zeros((1, 3)))
    np.testing.assert_array_equal(batch["state_in_0"], [[0, 0, 0], [0, 1, 2], [1, 2, 3]])
    np.testing.assert_array_equal(batch["state_out_0"], [[0, 1, 2], [1, 2, 3], [2, 3, 4]])


def test_training_enabled_false_keeps_steps_out_of_the_batch():
    class PartlyEnv(CountingEnv):
        def step(self, action):
            obs, r, term, trunc, info = super().step(action)
            return obs, r, term, trunc, {**info, "training_enabled": self.t != 2}

    batch = _worker(lambda: PartlyEnv(length=5), rollout_fragment_length=5).sample()
    # Row k carries the info of step k+1: the row whose step reported t=2 (row 1) is left out.
    np.testing.assert_array_equal(batch[SampleBatch.T], [0, 2, 3, 4])
    np.testing.assert_array_equal(batch[SampleBatch.REWARDS], [1, 3, 4, 5])
    np.testing.assert_array_equal(batch[SampleBatch.OBS][:, 0], [0, 2, 3, 4])


# ---------------------------------------------------------------------- horizon / dones / rewards
def test_episode_horizon_truncates_and_resets():
    worker = _worker(lambda: CountingEnv(length=100), episode_horizon=3)
    batch = worker.sample()
    np.testing.assert_array_equal(batch[SampleBatch.T], [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(batch[SampleBatch.REWARDS], [1, 2, 3, 1, 2, 3])  # env was reset
    np.testing.assert_array_equal(batch[SampleBatch.TRUNCATEDS], [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(batch[SampleBatch.TERMINATEDS], [0] * 6)
    np.testing.assert_array_equal(batch[SampleBatch.DONES], [0, 0, 1, 0, 0, 1])
    assert [m.episode_length for m in worker.get_metrics()] == [3, 3]


def test_soft_horizon_ends_episodes_without_reset():
    worker = _worker(lambda: CountingEnv(length=100), episode_horizon=3, soft_horizon=True)
    batch = worker.sample()
    np.testing.assert_array_equal(batch[SampleBatch.T], [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(batch[SampleBatch.REWARDS], [1, 2, 3, 4, 5, 6])  # env continues
    np.testing.assert_array_equal(batch[SampleBatch.OBS][:, 0], [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(batch[SampleBatch.DONES], [0] * 6)
    eps = batch[SampleBatch.EPS_ID]
    assert eps[0] == eps[2] != eps[3] == eps[5]
    metrics = worker.get_metrics()
    assert [(m.episode_length, m.episode_reward) for m in metrics] == [(3, 6.0), (3, 15.0)]


def test_no_done_at_end_records_no_done():
    worker = _worker(lambda: CountingEnv(length=3), no_done_at_end=True)
    batch = worker.sample()
    np.testing.assert_array_equal(batch[SampleBatch.DONES], [0] * 6)
    np.testing.assert_array_equal(batch[SampleBatch.TERMINATEDS], [0] * 6)
    np.testing.assert_array_equal(batch[SampleBatch.OBS][:, 0], [0, 1, 2, 0, 1, 2])  # env reset
    assert len(set(batch[SampleBatch.EPS_ID].tolist())) == 2


def test_no_done_at_end_multi_agent_agents_stop_acting_when_done():
    # red_1 is terminated after 2 steps; it must not act again, though no done is recorded.
    worker = RolloutWorker(
        env_creator=lambda: TwoTeamEnv({"length": 4}),
        policy_spec=RecordingPolicy,
        rollout_fragment_length=4,
        no_done_at_end=True,
    )
    batch = worker.sample()
    assert isinstance(batch, SampleBatch)
    red_1 = batch[SampleBatch.AGENT_INDEX] == 1
    np.testing.assert_array_equal(batch[SampleBatch.T][red_1], [0, 1])
    assert not batch[SampleBatch.DONES].any()


@pytest.mark.parametrize(
    "clip, expect", [(True, [1, 1, 1, 1, 1, 1]), (2.0, [1, 2, 2, 1, 2, 2]), (None, [1, 2, 3, 1, 2, 3])]
)
def test_clip_rewards(clip, expect):
    worker = _worker(lambda: CountingEnv(length=3), clip_rewards=clip)
    batch = worker.sample()
    np.testing.assert_array_equal(batch[SampleBatch.REWARDS], expect)
    assert [m.episode_reward for m in worker.get_metrics()] == [6.0, 6.0]  # metrics unclipped


# ---------------------------------------------------------------------- mapping fns, envs
def test_old_signature_policy_mapping_fns():
    class ActsOne(RecordingPolicy):
        def compute_actions_from_input_dict(self, input_dict, **kwargs):
            actions, state, extra = super().compute_actions_from_input_dict(input_dict, **kwargs)
            return actions + 1, state, extra

    specs = {"red": (ActsOne, None, None, {}), "blue": (RecordingPolicy, None, None, {})}
    for fn in (
        lambda agent_id: agent_id.split("_")[0],  # RLlib < 1.4
        lambda agent_id, episode: agent_id.split("_")[0],  # RLlib 1.4
        lambda agent_id, episode, **kw: agent_id.split("_")[0],
    ):  # RLlib 1.11
        worker = RolloutWorker(
            env_creator=lambda: TwoTeamEnv({"length": 3}),
            policy_spec=specs,
            policy_mapping_fn=fn,
            rollout_fragment_length=3,
        )
        batch = worker.sample()
        assert isinstance(batch, MultiAgentBatch)
        np.testing.assert_array_equal(batch.policy_batches["red"][SampleBatch.ACTIONS], 1)
        np.testing.assert_array_equal(batch.policy_batches["blue"][SampleBatch.ACTIONS], 0)
        assert batch.policy_batches["blue"].count == 3 and batch.policy_batches["red"].count == 5


def test_type_error_inside_mapping_fn_is_not_swallowed():
    def buggy(agent_id, episode, worker=None, **kwargs):
        return len(agent_id) + "x"  # the user's own TypeError

    worker = RolloutWorker(
        env_creator=lambda: TwoTeamEnv(),
        policy_spec={"red": (RecordingPolicy, None, None, {})},
        policy_mapping_fn=buggy,
        rollout_fragment_length=2,
    )
    with pytest.raises(TypeError, match="unsupported operand"):
        worker.sample()


class OldGymEnv:
    """The pre-0.26 gym API: reset() -> obs, step() -> (obs, reward, done, info)."""

    observation_space = CountingEnv.observation_space
    action_space = CountingEnv.action_space

    def __init__(self, time_limit=False):
        self.time_limit = time_limit

    def reset(self):
        self.t = 0
        return np.zeros(2, np.float32)

    def step(self, action):
        self.t += 1
        done = self.t >= 3
        info = {"TimeLimit.truncated": True} if done and self.time_limit else {}
        return np.array([self.t, action], np.float32), float(self.t), done, info


@pytest.mark.parametrize("time_limit", [False, True])
def test_old_gym_api_env_is_adapted_with_a_warning(time_limit):
    worker = _worker(lambda: OldGymEnv(time_limit))
    with pytest.warns(
        UserWarning,
        match=r"old gym API .*gymnasium API: reset\(\*, seed=None, options=None\)"
        r" -> \(obs, info\).*shimmy",
    ):
        batch = worker.sample()
    np.testing.assert_array_equal(batch[SampleBatch.OBS][:, 0], [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(batch[SampleBatch.TERMINATEDS], [0, 0, not time_limit] * 2)
    np.testing.assert_array_equal(batch[SampleBatch.TRUNCATEDS], [0, 0, time_limit] * 2)


def test_old_api_multi_agent_env_error_names_the_gymnasium_api():
    class OldMA(TwoTeamEnv):
        def step(self, action_dict):
            obs, rew, terms, _, infos = super().step(action_dict)
            return obs, rew, terms, infos

    worker = RolloutWorker(
        env_creator=lambda: OldMA(), policy_spec=RecordingPolicy, rollout_fragment_length=2
    )
    with pytest.raises(ValueError, match=r"got a tuple of 4 values: MultiAgentEnv follows the gymnasium API"):
        worker.sample()


# ---------------------------------------------------------------------- filters and options
def test_mean_std_filter_normalizes_observations_and_get_sync_filters():
    worker = _worker(lambda: CountingEnv(length=3), observation_filter="MeanStdFilter")
    batch = worker.sample()
    # The filter saw obs t = 0,1,2,3 | 0,1,2,3 | 0 (reset after the last step), action part all 0.
    seen = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0], np.float64)
    f = worker.filters["default_policy"]
    assert f.rs.n == 9 and f.buffer.n == 9
    np.testing.assert_allclose(f.rs.mean, [seen.mean(), 0.0], atol=1e-6)
    np.testing.assert_allclose(f.rs.std[0], seen.std(ddof=1), atol=1e-6)
    # obs row 3 is the second reset (the 5th observation seen): filtered with the first 5 values.
    first5 = seen[:5]
    np.testing.assert_allclose(
        batch[SampleBatch.OBS][3, 0], (0 - first5.mean()) / (first5.std(ddof=1) + 1e-6), atol=1e-5
    )
    snap = worker.get_filters(flush_after=True)
    assert snap["default_policy"].rs.n == 9 and f.buffer.n == 0 and f.rs.n == 9
    other = _worker(lambda: CountingEnv(length=3), observation_filter="MeanStdFilter")
    other.sync_filters(snap)
    np.testing.assert_allclose(other.filters["default_policy"].rs.mean, f.rs.mean)
    with pytest.raises(KeyError, match=r"no filter for policy id\(s\) \['default_policy'\]"):
        other.sync_filters({})


def test_worker_options_errors_and_environs():
    os.environ.pop("RLPOLICY_TEST_ENVIRON", None)
    w = _worker(lambda: CountingEnv(), extra_python_environs={"RLPOLICY_TEST_ENVIRON": 7})
    assert os.environ.pop("RLPOLICY_TEST_ENVIRON") == "7"
    assert get_global_worker() is w
    cases = [
        (
            {"sample_async": True, "observation_filter": "MeanStdFilter"},
            r"sample_async=True needs concurrent observation filters.*\['default_policy'\].*ConcurrentMeanStdFilter",
        ),
        ({"record_env": True}, "record_env is not supported .* gymnasium.wrappers.RecordVideo"),
        ({"remote_worker_envs": True}, "remote_worker_envs=True .* remote workers"),
        ({"episode_horizon": 0}, "episode_horizon must be an int >= 1 or None, got 0"),
        ({"clip_rewards": -1.0}, "clip_rewards must be None, a bool or a number > 0, got -1.0"),
        ({"observation_filter": "Bogus"}, "Unknown observation_filter: 'Bogus'"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            _worker(lambda: CountingEnv(), **kwargs)


# ---------------------------------------------------------------------- TF graph policies in a PolicyMap
@pytest.mark.tf
def test_tf_graph_policy_hooks_build_inside_the_policy_graph():
    """A 1.x TF policy whose before_init makes tf variables (a target-net mixin, as DDPG/TD3
    do) builds under the worker: the PolicyMap enters the policy's own graph and session."""
    pytest.importorskip("tensorflow")
    from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf()

    class TauMixin:
        def __init__(self, config):
            self.tau_var = tf1.get_variable("tau", initializer=0.5, trainable=False)
            self.tau_times_two = self.tau_var * 2.0

    def before_init(policy, obs_space, action_space, config):
        TauMixin.__init__(policy, config)

    def loss(policy, model, dist_class, train_batch):
        base = PGTFPolicy._hooks.loss_fn(policy, model, dist_class, train_batch)
        return base * policy.tau_times_two

    TauPG = PGTFPolicy.with_updates(name="TauPG", before_init=before_init, loss_fn=loss, mixins=[TauMixin])
    worker = _worker(
        lambda: CountingEnv(length=3),
        TauPG,
        rollout_fragment_length=4,
        policy_config={"framework": "tf", "model": {"fcnet_hiddens": [4]}},
    )
    policy = worker.get_policy()
    assert policy.tau_var.graph is policy.get_session().graph
    assert tf.executing_eagerly() == tf1.executing_eagerly()  # the process mode is untouched
    assert policy.get_session().run(policy.tau_times_two) == 1.0
    out = worker.learn_on_batch(worker.sample())
    assert "default_policy" in out


# ---------------------------------------------------------------------- 1.x warnings stay quiet
def test_gymnasium_env_triggers_no_old_api_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        _worker(lambda: CountingEnv()).sample()


# ---------------------------------------------------------------------- sample_async
def test_sample_async_collects_fragments_in_a_thread():
    worker = _worker(
        lambda: CountingEnv(length=3), sample_async=True, observation_filter="ConcurrentMeanStdFilter"
    )
    try:
        first, second = worker.sample(), worker.sample()
        assert first.count == second.count == 6
        # Consecutive fragments of one env: 2 episodes of 3 steps each, t = 0, 1, 2.
        np.testing.assert_array_equal(first[SampleBatch.T], [0, 1, 2, 0, 1, 2])
        np.testing.assert_array_equal(second[SampleBatch.T], [0, 1, 2, 0, 1, 2])
        assert set(first[SampleBatch.EPS_ID].tolist()).isdisjoint(second[SampleBatch.EPS_ID].tolist())
        assert worker.total_env_steps >= 12 and len(worker.get_metrics()) >= 4
        # The filter saw at least the 4 resets + 12 step observations of the two fragments
        # (the thread may already be further on: more is fine).
        assert worker.filters["default_policy"].rs.n >= 16
    finally:
        worker.stop()
    assert not worker.sampler._thread.is_alive()


def test_sample_async_thread_error_reaches_sample():
    class Broken(CountingEnv):
        def step(self, action):
            if self.t == 2:
                raise KeyError("env broke at step 3")
            return super().step(action)

    worker = _worker(lambda: Broken(length=5), sample_async=True)
    with pytest.raises(RuntimeError, match="async sampling thread failed: KeyError: 'env broke at step 3'"):
        worker.sample()
    worker.stop()


def test_worker_set_passes_the_1x_trainer_keys_to_its_workers():
    from rlpolicy.evaluation.worker_set import WorkerSet

    os.environ.pop("RLPOLICY_DRIVER_ENV", None)
    ws = WorkerSet(
        env_creator=lambda ctx: CountingEnv(length=100),
        policy_class=RecordingPolicy,
        trainer_config={
            "horizon": 3,
            "clip_rewards": 2.0,
            "rollout_fragment_length": 6,
            "num_envs_per_worker": 1,
            "observation_filter": "MeanStdFilter",
            "extra_python_environs_for_driver": {"RLPOLICY_DRIVER_ENV": "on"},
        },
    )
    batch = ws.sample()
    np.testing.assert_array_equal(batch[SampleBatch.REWARDS], [1, 2, 2, 1, 2, 2])
    np.testing.assert_array_equal(batch[SampleBatch.TRUNCATEDS], [0, 0, 1, 0, 0, 1])
    local = ws.local_worker()
    assert os.environ.pop("RLPOLICY_DRIVER_ENV") == "on"
    assert local.filters["default_policy"].rs.n == 9  # obs t=0..3, 0..3 and the next reset
    ws.sync_filters()  # no remote workers: the local filter stays as it is
    assert local.filters["default_policy"].rs.n == 9
    ws.stop()


def test_mean_std_filter_on_raw_dict_observations():
    class DictEnv(CountingEnv):
        observation_space = gym.spaces.Dict(
            {"pos": gym.spaces.Box(-9.0, 9.0, (1,), np.float32), "id": gym.spaces.Discrete(3)}
        )

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return {"pos": np.array([0.0], np.float32), "id": 2}, {}

        def step(self, action):
            _, r, term, trunc, info = super().step(action)
            return {"pos": np.array([2.0 * self.t], np.float32), "id": self.t % 3}, r, term, trunc, info

    worker = _worker(
        lambda: DictEnv(length=3),
        observation_filter="MeanStdFilter",
        rollout_fragment_length=3,
        policy_config={"_disable_preprocessor_api": True},
    )
    batch = worker.sample()
    f = worker.filters["default_policy"]
    assert f.rs["id"] is None  # Discrete parts are not normalized
    seen = np.array([0.0, 2.0, 4.0, 6.0, 0.0])  # pos of obs t=0..3, then the next reset
    assert f.rs["pos"].n == 5
    np.testing.assert_allclose(f.rs["pos"].mean, [seen.mean()], atol=1e-6)
    np.testing.assert_array_equal(batch[SampleBatch.OBS]["id"], [2, 1, 2])
    first2 = seen[:2]
    np.testing.assert_allclose(
        batch[SampleBatch.OBS]["pos"][1], [(2.0 - first2.mean()) / (first2.std(ddof=1) + 1e-6)], atol=1e-5
    )
