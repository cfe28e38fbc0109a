"""Multi-agent sampling as RLlib 1.11's own ``test_multi_agent_env`` cases exercise it,
rewritten here for gymnasium: round-robin agents, agents that finish early, custom
RNN state values fed back, ``remote_env_batch_wait_ms``, and extra trajectories
added through the sampler's ``sample_collector``.

Expected values are worked out by hand from the envs below (copies, in gymnasium's
API, of RLlib 1.11's example envs ``MockEnv``, ``MockEnv2``, ``BasicMultiAgent``,
``RoundRobinMultiAgent`` and ``EarlyDoneMultiAgent``).
"""

import gymnasium as gym
import numpy as np
import pytest
from sampling_policies import ActOnlyPolicy

from rlpolicy.env.multi_agent_env import MultiAgentEnv
from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.policy.policy import PolicySpec
from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch


class MockEnv:
    """obs 0 (or, with ``increment``, the step count), reward 1 (100); ends after ``length``."""

    def __init__(self, length, increment=False):
        self.length, self.increment, self.i = length, increment, 0

    def reset(self):
        self.i = 0
        return 0

    def step(self, action):
        self.i += 1
        return (
            (self.i if self.increment else 0),
            (100.0 if self.increment else 1.0),
            self.i >= self.length,
            {},
        )


class BasicMultiAgent(MultiAgentEnv):
    """``n`` agents of 25 steps, all acting every step."""

    def __init__(self, n):
        super().__init__()
        self.agents = [MockEnv(25) for _ in range(n)]
        self._agent_ids = set(range(n))
        self.observation_space = gym.spaces.Discrete(2)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.done = set()
        return {i: a.reset() for i, a in enumerate(self.agents)}, {}

    def step(self, action_dict):
        obs, rew, term, info = {}, {}, {}, {}
        for i, action in action_dict.items():
            obs[i], rew[i], term[i], info[i] = self.agents[i].step(action)
            if term[i]:
                self.done.add(i)
        term["__all__"] = len(self.done) == len(self.agents)
        return obs, rew, term, {"__all__": False}, info


class TakeTurnsMultiAgent(MultiAgentEnv):
    """One agent acts per step, in turn (1.11's RoundRobinMultiAgent for ``agents`` of
    ``MockEnv``; its EarlyDoneMultiAgent ends once all but one agent are done)."""

    def __init__(self, agents, end_when_one_left=False):
        super().__init__()
        self.agents, self.end_when_one_left = agents, end_when_one_left
        self._agent_ids = set(range(len(agents)))
        self.observation_space = gym.spaces.Discrete(10)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.done, self.i = set(), 0
        self.last = {i: (a.reset(), None, False, {}) for i, a in enumerate(self.agents)}
        return self._turn()[0], {}

    def _turn(self):
        i = self.i
        self.i = (self.i + 1) % len(self.agents)
        return ({i: self.last[i][0]}, i)

    def step(self, action_dict):
        for i, action in action_dict.items():
            self.last[i] = self.agents[i].step(action)
        obs, i = self._turn()
        _, rew, term, info = self.last[i]
        if term:
            rew = 0
            self.done.add(i)
        left = len(self.agents) - len(self.done)
        over = left == (1 if self.end_when_one_left else 0)
        return obs, {i: rew}, {i: term, "__all__": over}, {"__all__": False}, {i: info}


class MockPolicy(ActOnlyPolicy):
    """Acts 0 (1.11's test MockPolicy, without its exploration)."""

    def compute_actions(self, obs_batch, state_batches=None, *args, **kwargs):
        return np.zeros(len(obs_batch), np.int64), [], {}


TWO = {"p0": PolicySpec(policy_class=MockPolicy), "p1": PolicySpec(policy_class=MockPolicy)}


def test_multi_agent_sample_by_agent_parity():
    worker = RolloutWorker(
        env_creator=lambda _: BasicMultiAgent(5),
        policy_spec=TWO,
        policy_mapping_fn=lambda agent_id, episode, worker, **kwargs: f"p{agent_id % 2}",
        rollout_fragment_length=50,
        remote_env_batch_wait_ms=10,  # accepted (it tunes remote sub-envs only)
    )
    batch = worker.sample()
    assert batch.count == 50
    # 50 env steps = 2 episodes of 25: agents 0, 2, 4 -> p0 (150 rows), 1, 3 -> p1 (100).
    assert batch.policy_batches["p0"].count == 150 and batch.policy_batches["p1"].count == 100
    assert batch.policy_batches["p0"]["t"].tolist() == list(range(25)) * 6


def test_round_robin_agents():
    worker = RolloutWorker(
        env_creator=lambda _: TakeTurnsMultiAgent([MockEnv(5, increment=True) for _ in range(5)]),
        policy_spec={"p0": PolicySpec(policy_class=MockPolicy)},
        policy_mapping_fn=lambda agent_id, episode, **kwargs: "p0",
        rollout_fragment_length=50,
    )
    batch = worker.sample()
    assert batch.count == 50
    p0 = batch.policy_batches["p0"]
    # An episode is 4 + 5 * 5 = 29 env steps... of which each agent's 5 are transitions;
    # 1.11 counts 42 rows in 50 env steps (the steps introducing an agent are none).
    assert p0.count == 42
    eye = np.eye(10, dtype=np.float32)
    np.testing.assert_array_equal(p0["obs"][:10], eye[[0, 1, 2, 3, 4] * 2])
    np.testing.assert_array_equal(p0["new_obs"][:10], eye[[1, 2, 3, 4, 5] * 2])
    assert p0["rewards"].tolist()[:10] == [100, 100, 100, 100, 0] * 2
    assert p0["dones"].tolist()[:10] == [False, False, False, False, True] * 2
    assert p0["t"].tolist()[:10] == [4, 9, 14, 19, 24, 5, 10, 15, 20, 25]


def test_agents_that_finish_early():
    worker = RolloutWorker(
        env_creator=lambda _: TakeTurnsMultiAgent([MockEnv(3), MockEnv(5)], end_when_one_left=True),
        policy_spec=TWO,
        policy_mapping_fn=lambda aid, **kwargs: f"p{aid % 2}",
        batch_mode="complete_episodes",
        rollout_fragment_length=1,
    )
    batch = worker.sample()
    t0, t1 = batch.policy_batches["p0"]["t"], batch.policy_batches["p1"]["t"]
    # The agents alternate (their t differ by 1), except at the end, where both are done.
    assert np.all(np.abs(t0[:-1] - t1[:-1]) == 1) and t0[-1] == t1[-1]


H = {"some": {"arbitrary": "structure", "here": [1, 2, 3]}}


class StatefulPolicy(MockPolicy):
    """1.11's test: RNN state values that are arbitrary Python structures."""

    def compute_actions(self, obs_batch, state_batches=None, *args, **kwargs):
        self.seen_states = getattr(self, "seen_states", []) + [list(state_batches[0])]
        return [0] * len(obs_batch), [[H] * len(obs_batch)], {}

    def get_initial_state(self):
        return [{}]


class OneAgentEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


def test_custom_rnn_state_values_are_fed_back():
    worker = RolloutWorker(
        env_creator=lambda _: OneAgentEnv(), policy_spec=StatefulPolicy, rollout_fragment_length=5
    )
    batch = worker.sample()
    assert batch.count == 5
    assert batch["state_in_0"][0] == {} and batch["state_out_0"][0] == H
    assert batch["state_in_0"][1] == H and batch["state_out_0"][1] == H
    assert worker.get_policy().seen_states[:2] == [[{}], [H]]


def test_extra_rows_through_the_sample_collector():
    # As 1.11's model-based-rollouts test: a policy adds a made-up trajectory to
    # policy "p1" through the sampler's sample_collector on every step.
    from rlpolicy.evaluation.rollout_worker import get_global_worker

    class ModelBased(MockPolicy):
        def compute_actions_from_input_dict(
            self, input_dict, explore=None, timestep=None, episodes=None, **kw
        ):
            obs = input_dict["obs"]
            if episodes is not None:
                collector = get_global_worker().sampler.sample_collector
                rows = {
                    "obs": np.repeat(obs[:1], 4, axis=0),
                    "new_obs": np.repeat(obs[:1], 4, axis=0),
                    "actions": np.zeros(4, np.int64),
                    "rewards": np.zeros(4, np.float32),
                    "dones": np.arange(4) == 3,
                    "t": np.arange(4),
                }
                collector.add_extra_batch(SampleBatch(rows), policy_id="p1")
                # 1.11's other way: the episode's add_extra_batch, with a MultiAgentBatch.
                episodes[0].add_extra_batch(MultiAgentBatch({"p1": SampleBatch(rows)[:1]}, 0))
            return np.zeros(len(obs), np.int64), [], {}

    worker = RolloutWorker(
        env_creator=lambda _: BasicMultiAgent(2),
        policy_spec={"p0": PolicySpec(policy_class=ModelBased), "p1": PolicySpec(policy_class=ModelBased)},
        policy_mapping_fn=lambda agent_id, episode, **kwargs: "p0",
        rollout_fragment_length=5,
    )
    batch = worker.sample()
    assert batch.count == 5
    assert batch.policy_batches["p0"].count == 10  # 2 agents x 5 steps
    assert batch.policy_batches["p1"].count == 25  # 4 + 1 made-up rows per env step


# ---------------------------------------------------------------------- RolloutWorker arguments
def test_input_creator_and_preprocessor_pref_as_in_1x():
    def make(**kwargs):
        return RolloutWorker(env_creator=lambda _: OneAgentEnv(), policy_spec=MockPolicy, **kwargs)

    # 1.11's default input_creator, and both preprocessor preferences, are accepted.
    worker = make(input_creator=lambda ioctx: ioctx.default_sampler_input(), preprocessor_pref="rllib")
    assert worker.input_reader is worker.sampler
    assert make(preprocessor_pref=None).sample().count == 100
    with pytest.raises(ValueError, match=r"^RolloutWorker: input_creator returned a list, not io_context"):
        make(input_creator=lambda ioctx: [])
    with pytest.raises(
        ValueError, match=r"^RolloutWorker: preprocessor_pref must be 'deepmind', 'rllib' or None"
    ):
        make(preprocessor_pref="atari")


def test_unknown_sample_collector_api_says_what_to_use():
    worker = RolloutWorker(env_creator=lambda _: OneAgentEnv(), policy_spec=MockPolicy)
    with pytest.raises(NotImplementedError, match=r"sample_collector\.add_init_obs: .*add_extra_batch"):
        worker.sampler.sample_collector.add_init_obs(None, "a0", 0, "p0", -1, None)
    with pytest.raises(ValueError, match=r"unknown policy id\(s\) \['nope'\]"):
        worker.sampler.sample_collector.add_extra_batch(
            SampleBatch({"obs": np.zeros((1, 2))}), policy_id="nope"
        )
