"""The sampler's columnar lean branch (``ColumnarRun``, ``EnvRunner._tick_lean``):
hand-checked columns on a deterministic env across fragment boundaries; the same
batches, metrics, callback calls and Episode state as the general per-agent path
(the branch switched off on the same seeds); leaving the branch mid-call (a new
episode mapped to another policy, observations changing dtype) and between calls;
and the cases that never take it."""

import gymnasium as gym
import numpy as np
import pytest
from golden_sampling_cases import RecordingCallbacks, assert_same_batches
from sampling_envs import CountingEnv

from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.policy.policy import PolicySpec
from rlpolicy.policy.sample_batch import SampleBatch

torch = pytest.importorskip("torch")


class EpisodeStateCallbacks(RecordingCallbacks):
    """Also records what on_episode_step and on_episode_end see of the Episode."""

    def _state(self, episode):
        outs = episode.last_extra_action_outs_for()
        return (
            episode.length,
            round(float(episode.total_reward), 4),
            np.asarray(episode.last_observation_for()).round(5).tolist(),
            np.asarray(episode.last_raw_obs_for()).round(5).tolist(),
            np.asarray(episode.last_action_for()).tolist(),
            np.asarray(episode.prev_action_for()).tolist(),
            float(episode.last_reward_for()),
            bool(episode.last_done_for()),
            sorted(episode.last_info_for() or {}),
            sorted(outs),
            [np.asarray(v).round(5).tolist() for _, v in sorted(outs.items())],
            episode.rnn_state_for(),
        )

    def on_episode_step(self, *, worker, base_env, policies=None, episode, env_index=None, **kwargs):
        super().on_episode_step(
            worker=worker, base_env=base_env, policies=policies, episode=episode, env_index=env_index
        )
        self.calls.append(("step_state", env_index, self._state(episode)))

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index=None, **kwargs):
        super().on_episode_end(
            worker=worker, base_env=base_env, policies=policies, episode=episode, env_index=env_index
        )
        self.calls.append(("end_state", env_index, self._state(episode)))


def _worker(lean, creator, calls=None, **kwargs):
    kwargs.setdefault("policy_spec", _ppo())
    kwargs.setdefault("policy_config", {"framework": "torch", "model": {"fcnet_hiddens": [16]}})
    worker = RolloutWorker(env_creator=creator, seed=5, callbacks=calls or EpisodeStateCallbacks(), **kwargs)
    ticks = {"lean": 0, "general": 0}
    runner = worker.sampler
    tick_lean, tick = runner._tick_lean, runner._tick

    def counted_lean():
        ticks["lean"] += 1
        return tick_lean()

    def counted():
        ticks["general"] += 1
        return tick()

    runner._tick_lean, runner._tick = counted_lean, counted
    if not lean:
        runner._columnar_run = lambda: None
    return worker, ticks


def _ppo():
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

    return PPOTorchPolicy


def _cartpole(ctx=None):
    return gym.make("CartPole-v1")


def _run_both(creator, calls_per_run=3, switch=None, **kwargs):
    out = {}
    for lean in (True, False):
        worker, ticks = _worker(lean, creator, **kwargs)
        batches = []
        for i in range(calls_per_run):
            if switch is not None:
                switch(worker, i)
            batches.append(worker.sample())
        stats = [(m.episode_length, m.episode_reward) for m in worker.get_metrics()]
        out[lean] = (batches, stats, worker.sampler.callbacks.calls, ticks)
        worker.stop()
    (la, ls, lc, lt), (ga, gs, gc, _) = out[True], out[False]
    assert ls == gs and len(ls) > 0
    assert lc == gc
    for a, b in zip(la, ga):
        assert_same_batches(a, b)
    return lt


def test_columns_hand_checked_across_fragments():
    """CountingEnv (obs = [t, last action], reward = t after the step, 5 steps): every
    column follows from the env's rules, across pieces cut at fragment ends."""
    worker, ticks = _worker(
        True, lambda ctx=None: CountingEnv(length=5), num_envs=2, rollout_fragment_length=7
    )
    batches = [worker.sample() for _ in range(3)]
    worker.stop()
    assert ticks == {"lean": 21, "general": 0}
    unrolls = []
    for batch in batches:
        for env in (0, 1):
            rows = np.nonzero(batch[SampleBatch.ENV_ID] == env)[0]
            assert len(rows) == 7
            obs, new_obs = batch[SampleBatch.OBS][rows], batch[SampleBatch.NEXT_OBS][rows]
            t, actions = batch[SampleBatch.T][rows], batch[SampleBatch.ACTIONS][rows]
            start = t == 0
            np.testing.assert_allclose(obs[:, 0], t)
            np.testing.assert_allclose(new_obs[:, 0], t + 1)
            np.testing.assert_allclose(new_obs[:, 1], actions)
            np.testing.assert_allclose(batch[SampleBatch.REWARDS][rows], t + 1)
            assert batch[SampleBatch.TERMINATEDS][rows].tolist() == (t == 4).tolist()
            assert not batch[SampleBatch.TRUNCATEDS][rows].any()
            assert batch[SampleBatch.DONES][rows].tolist() == (t == 4).tolist()
            # prev_actions: the action before, within the episode (0 at its start);
            # the observation's second entry is that same action.
            prev = batch[SampleBatch.PREV_ACTIONS][rows]
            np.testing.assert_allclose(prev, np.where(start, 0, obs[:, 1]))
            np.testing.assert_allclose(batch[SampleBatch.PREV_REWARDS][rows], np.where(start, 0.0, t))
            assert [i["t"] for i in batch[SampleBatch.INFOS][rows]] == (t + 1).tolist()
            # One eps_id per episode; a new unroll id per piece (episode end or fragment end).
            eps = batch[SampleBatch.EPS_ID][rows]
            assert ((np.diff(eps) != 0) == start[1:]).all()
            unrolls.extend(np.unique(batch[SampleBatch.UNROLL_ID][rows]).tolist())
            assert batch[SampleBatch.AGENT_INDEX][rows].tolist() == [0] * 7
            assert batch[SampleBatch.OBS].dtype == np.float32 and batch[SampleBatch.ACTIONS].dtype == np.int64
    assert len(unrolls) == len(set(unrolls))
    t_all = np.concatenate([b[SampleBatch.T][b[SampleBatch.ENV_ID] == 0] for b in batches])
    assert t_all.tolist() == [i % 5 for i in range(21)]  # episodes run on across sample() calls


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_envs=1, rollout_fragment_length=60),
        dict(num_envs=4, rollout_fragment_length=25),
        dict(num_envs=3, rollout_fragment_length=20, observation_filter="MeanStdFilter"),
        dict(num_envs=2, rollout_fragment_length=10, clip_rewards=0.5),
    ],
    ids=["1env", "4envs", "mean_std_filter", "clip_rewards"],
)
def test_lean_branch_matches_general_path(kwargs):
    ticks = _run_both(_cartpole, **kwargs)
    assert ticks["general"] == 0 and ticks["lean"] > 0


def test_dqn_extras_match_general_path():
    from rlpolicy.agents.dqn.dqn_torch_policy import DQNTorchPolicy

    ticks = _run_both(
        _cartpole, calls_per_run=6, num_envs=2, rollout_fragment_length=4, policy_spec=DQNTorchPolicy
    )
    assert ticks["general"] == 0


def test_branch_left_when_a_new_episode_maps_to_another_policy():
    """Two policies; each env's first episode maps to "a", later ones alternate: the
    branch runs while all envs act through "a", then hands its rows to the trajectories."""
    counter = {"n": 0}

    def mapping(agent_id, episode, worker=None, **kw):
        counter["n"] += 1
        return "a" if counter["n"] <= 3 or counter["n"] % 2 else "b"

    def run(lean):
        counter["n"] = 0
        worker, ticks = _worker(
            lean,
            lambda ctx=None: CountingEnv(length=4),
            num_envs=3,
            rollout_fragment_length=6,
            policy_spec={"a": PolicySpec(_ppo()), "b": PolicySpec(_ppo())},
            policy_mapping_fn=mapping,
        )
        batches = [worker.sample() for _ in range(3)]
        calls = worker.sampler.callbacks.calls
        worker.stop()
        return batches, calls, ticks

    lean, lean_calls, ticks = run(True)
    general, general_calls, _ = run(False)
    assert ticks["lean"] >= 1 and ticks["general"] > 0
    assert lean_calls == general_calls
    for a, b in zip(lean, general):
        assert_same_batches(a, b)


class DtypeSwitchEnv(CountingEnv):
    """CountingEnv whose observations become float64 from step 9 of the env's life on."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float64)

    def __init__(self):
        super().__init__(length=5)
        self.total = 0

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        self.total += 1
        return (obs.astype(np.float64) if self.total >= 9 else obs), r, term, trunc, info


def test_branch_left_when_observations_change_dtype():
    ticks = _run_both(
        lambda ctx=None: DtypeSwitchEnv(), calls_per_run=3, num_envs=2, rollout_fragment_length=6
    )
    assert ticks["lean"] >= 1 and ticks["general"] > 0


def test_general_path_after_lean_calls_continues_the_same_trajectories():
    """Lean, then general, then lean again (switched between sample() calls): the same
    as the general path throughout (the trajectories hold what the columns held)."""

    def switch(worker, i):
        runner = worker.sampler
        if i == 1:
            runner._columnar_run = lambda: None
        elif i == 2:
            del runner._columnar_run  # the class's method again

    worker_ticks = _run_both(
        lambda ctx=None: CountingEnv(length=6),
        calls_per_run=4,
        switch=switch,
        num_envs=2,
        rollout_fragment_length=4,
    )
    assert worker_ticks["lean"] == 3 * 4 and worker_ticks["general"] == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(batch_mode="complete_episodes"),
        dict(episode_horizon=9),
        dict(no_done_at_end=True),
        dict(
            policy_config={
                "framework": "torch",
                "model": {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 4},
            }
        ),
    ],
    ids=["complete_episodes", "horizon", "no_done_at_end", "lstm"],
)
def test_cases_that_keep_the_general_path(kwargs):
    worker, ticks = _worker(True, _cartpole, num_envs=2, rollout_fragment_length=10, **kwargs)
    worker.sample()
    worker.stop()
    assert ticks["lean"] == 0 and ticks["general"] > 0


def test_lean_condition_reads_the_policy_view_requirements():
    from rlpolicy.evaluation._columnar import lean_policy
    from rlpolicy.evaluation.agent_trajectory import view_plan
    from rlpolicy.policy.view_requirement import ViewRequirement

    worker, _ = _worker(True, _cartpole, num_envs=1, rollout_fragment_length=5)
    policy = worker.get_policy()
    reqs = policy.view_requirements
    original = dict(reqs)

    def lean(state=()):
        return lean_policy(policy, view_plan(reqs), list(state))

    try:
        assert lean()
        assert not lean([np.zeros(4)])  # an RNN state
        reqs["prev_obs_2"] = ViewRequirement(SampleBatch.OBS, shift=-2)  # a view reaching back 2
        assert not lean()
        del reqs["prev_obs_2"]
        reqs["my_t"] = ViewRequirement(SampleBatch.T)  # a renamed bookkeeping column
        assert not lean()
        del reqs["my_t"]
        reqs[SampleBatch.PREV_ACTIONS] = ViewRequirement(
            SampleBatch.ACTIONS, shift=-1, used_for_compute_actions=True
        )
        assert not lean()  # acting on more than the observation
        reqs[SampleBatch.PREV_ACTIONS] = ViewRequirement(
            SampleBatch.ACTIONS, shift=-1, used_for_compute_actions=False
        )
        assert lean()
        reqs["extra_col"] = ViewRequirement()  # a postprocessing column
        assert lean()
    finally:
        reqs.clear()
        reqs.update(original)
        worker.stop()
