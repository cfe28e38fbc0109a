"""RolloutWorker (no Ray): fragments, bootstrapping, view columns, RNN state, seeds,
multi-agent batches, callbacks, weights/gradients and argument errors."""

import gymnasium as gym
import numpy as np
import pytest
from sampling_envs import CountingEnv, NoisyEnv, TwoTeamEnv, team_mapping_fn

from rlpolicy.agents.callbacks import DefaultCallbacks
from rlpolicy.policy.policy import PolicySpec
from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch

torch = pytest.importorskip("torch")

TINY = {"framework": "torch", "model": {"fcnet_hiddens": [8]}}


def _where(batch, mask):
    """The rows of ``batch`` where ``mask`` holds (every column is an array here)."""
    return SampleBatch({k: v[mask] for k, v in batch.items()})


def _worker(env_creator, policy_spec=None, **kwargs):
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    kwargs.setdefault("policy_config", TINY)
    return RolloutWorker(env_creator=env_creator, policy_spec=policy_spec or PGTorchPolicy, **kwargs)


def _ppo_class():
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

    return PPOTorchPolicy


@pytest.fixture(scope="module")
def pg_policy():
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

    return PGTorchPolicy(CountingEnv.observation_space, CountingEnv.action_space, {**TINY, "gamma": 0.5})


# ---------------------------------------------------------------------- old call form
def test_policy_instance_form_cuts_at_episode_and_fragment_ends(pg_policy):
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
    assert worker.policy is pg_policy and batch.count == 14
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

    batch = RolloutWorker(lambda: CountingEnv(4), pg_policy, rollout_fragment_length=4).sample()
    # rewards 1,2,3,4 with gamma 0.5, worked by hand:
    expected = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4, 2 + 0.5 * 3 + 0.25 * 4, 3 + 0.5 * 4, 4.0]
    np.testing.assert_allclose(batch["advantages"], expected, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------- bootstrapping
def _numpy_gae(rewards, vf_preds, last_value, gamma, lam):
    values = np.append(vf_preds, last_value)
    deltas = rewards + gamma * values[1:] - values[:-1]
    adv = np.zeros_like(deltas)
    running = 0.0
    for i in reversed(range(len(deltas))):
        running = deltas[i] + gamma * lam * running
        adv[i] = running
    return adv


@pytest.mark.parametrize("truncate", [True, False], ids=["truncated", "terminated"])
def test_gae_bootstraps_truncated_and_cut_pieces_only(truncate):
    gamma, lam = 0.9, 0.8
    cfg = {**TINY, "gamma": gamma, "lambda": lam}
    worker = _worker(
        lambda: CountingEnv(3, truncate=truncate),
        _ppo_class(),
        policy_config=cfg,
        rollout_fragment_length=5,
        seed=0,
    )
    policy = worker.get_policy()
    batch = worker.sample()  # episode of 3 steps, then a piece of 2 cut by the fragment end
    for eps in np.unique(batch[SampleBatch.EPS_ID]):
        piece = _where(batch, batch[SampleBatch.EPS_ID] == eps)
        ended_by_termination = bool(piece[SampleBatch.TERMINATEDS][-1])
        assert ended_by_termination == (len(piece) == 3 and not truncate)
        if ended_by_termination:
            last_value = 0.0
        else:  # V(s_T): the value head's output for the observation after the last step
            _, _, extra = policy.compute_actions(piece[SampleBatch.NEXT_OBS][-1:], explore=False)
            last_value = float(extra[SampleBatch.VF_PREDS][0])
            assert last_value != 0.0
        expected = _numpy_gae(piece[SampleBatch.REWARDS], piece[SampleBatch.VF_PREDS], last_value, gamma, lam)
        np.testing.assert_allclose(piece["advantages"], expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            piece["value_targets"], expected + piece[SampleBatch.VF_PREDS], rtol=1e-5, atol=1e-5
        )


# ---------------------------------------------------------------------- batch modes
def test_truncate_episodes_returns_fixed_fragments():
    worker = _worker(lambda: CountingEnv(5), num_envs=2, rollout_fragment_length=7)
    for _ in range(3):
        batch = worker.sample()
        assert batch.count == 14  # 2 envs x 7 steps, whatever the episode boundaries
        for unroll in np.unique(batch[SampleBatch.UNROLL_ID]):
            piece = _where(batch, batch[SampleBatch.UNROLL_ID] == unroll)
            # A piece is one episode's contiguous steps; only a finished episode ends done.
            assert len(np.unique(piece[SampleBatch.EPS_ID])) == 1
            np.testing.assert_array_equal(np.diff(piece[SampleBatch.T]), 1)
            assert piece[SampleBatch.DONES][-1] == (piece[SampleBatch.T][-1] == 4)


def test_complete_episodes_returns_whole_episodes_only():
    worker = _worker(
        lambda: CountingEnv(5), num_envs=2, rollout_fragment_length=7, batch_mode="complete_episodes"
    )
    for _ in range(2):
        batch = worker.sample()
        # Both envs finish an episode after 5 lock-step ticks: 10 >= 7 steps, two episodes.
        assert batch.count == 10
        for eps in np.unique(batch[SampleBatch.EPS_ID]):
            piece = _where(batch, batch[SampleBatch.EPS_ID] == eps)
            np.testing.assert_array_equal(piece[SampleBatch.T], np.arange(5))
            assert piece[SampleBatch.DONES].tolist() == [False] * 4 + [True]


# ---------------------------------------------------------------------- view columns
def test_prev_actions_and_rewards_across_fragment_and_episode_boundaries():
    worker = _worker(lambda: CountingEnv(3), rollout_fragment_length=2)
    first, second = worker.sample(), worker.sample()
    # Worked by hand: episode 1 has t = 0, 1 | 2; episode 2 starts in the second fragment.
    np.testing.assert_array_equal(first[SampleBatch.T], [0, 1])
    np.testing.assert_array_equal(second[SampleBatch.T], [2, 0])
    np.testing.assert_array_equal(first[SampleBatch.PREV_REWARDS], [0.0, 1.0])
    np.testing.assert_array_equal(second[SampleBatch.PREV_REWARDS], [2.0, 0.0])
    a1, a2 = first[SampleBatch.ACTIONS], second[SampleBatch.ACTIONS]
    np.testing.assert_array_equal(first[SampleBatch.PREV_ACTIONS], [0, a1[0]])
    np.testing.assert_array_equal(second[SampleBatch.PREV_ACTIONS], [a1[1], 0])
    # The env echoes the action into the next observation.
    np.testing.assert_array_equal(first[SampleBatch.NEXT_OBS][:, 1], a1)
    np.testing.assert_array_equal(second[SampleBatch.OBS][0], [2.0, a1[1]])
    np.testing.assert_array_equal(second[SampleBatch.NEXT_OBS][:, 1], a2)
    np.testing.assert_array_equal(second[SampleBatch.TERMINATEDS], [True, False])


def test_lstm_state_in_is_previous_state_out():
    cfg = {
        **TINY,
        "model": {
            "fcnet_hiddens": [8],
            "use_lstm": True,
            "lstm_cell_size": 3,
            "lstm_use_prev_action": True,
            "lstm_use_prev_reward": True,
        },
    }
    worker = _worker(
        lambda: CountingEnv(4), _ppo_class(), policy_config=cfg, num_envs=2, rollout_fragment_length=3, seed=0
    )
    batches = [worker.sample() for _ in range(3)]  # pieces cut mid-episode, episodes restarting
    batch = batches[0].concat_samples(batches)
    seen_restart = seen_cut = False
    for eps in np.unique(batch[SampleBatch.EPS_ID]):
        ep = _where(batch, batch[SampleBatch.EPS_ID] == eps)
        order = np.argsort(ep[SampleBatch.T], kind="stable")
        for i in (0, 1):
            s_in, s_out = ep[f"state_in_{i}"][order], ep[f"state_out_{i}"][order]
            np.testing.assert_array_equal(s_in[1:], s_out[:-1])
            if ep[SampleBatch.T][order][0] == 0:
                np.testing.assert_array_equal(s_in[0], np.zeros(3, np.float32))
                seen_restart = True
        seen_cut |= len(np.unique(ep[SampleBatch.UNROLL_ID])) > 1
    assert seen_restart and seen_cut
    assert float(np.abs(batch["state_out_0"]).max()) > 0  # the LSTM state actually moves
    worker.learn_on_batch(batches[0])


def test_seed_makes_sampling_reproducible():
    def run(seed):
        worker = _worker(lambda: NoisyEnv(3), num_envs=2, rollout_fragment_length=4, seed=seed)
        return worker.sample()

    a, b, c = run(7), run(7), run(8)
    for key in (SampleBatch.OBS, SampleBatch.ACTIONS, SampleBatch.ACTION_LOGP):
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a[SampleBatch.OBS], c[SampleBatch.OBS])
    # Sub-environments get different seeds: their first observations differ.
    first = _where(a, a[SampleBatch.T] == 0)
    assert not np.array_equal(first[SampleBatch.OBS][0], first[SampleBatch.OBS][1])


def test_box_actions_are_unsquashed_for_the_env_only():
    received = []

    class BoxEnv(CountingEnv):
        action_space = gym.spaces.Box(0.0, 10.0, (1,), np.float32)

        def step(self, action):
            received.append(np.array(action, dtype=np.float32))
            return super().step(0)

    worker = _worker(lambda: BoxEnv(3), rollout_fragment_length=6, seed=0)
    batch = worker.sample()
    raw = batch[SampleBatch.ACTIONS]
    expected = np.clip(0.0 + (raw + 1.0) * 10.0 / 2.0, 0.0, 10.0)
    np.testing.assert_allclose(np.stack(received), expected, rtol=1e-6, atol=1e-5)


# ---------------------------------------------------------------------- multi-agent
@pytest.fixture
def team_worker():
    specs = {"red": PolicySpec(_pg_class()), "blue": PolicySpec(_pg_class())}
    return _worker(
        lambda ctx: TwoTeamEnv(ctx),
        specs,
        policy_mapping_fn=team_mapping_fn,
        policies_to_train=["red"],
        rollout_fragment_length=6,
        env_config={"length": 4},
    )


def _pg_class():
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

    return PGTorchPolicy


def test_multi_agent_batch_holds_each_policys_agents(team_worker):
    batch = team_worker.sample()
    assert isinstance(batch, MultiAgentBatch) and batch.env_steps() == 6
    red, blue = batch.policy_batches["red"], batch.policy_batches["blue"]
    assert set(red[SampleBatch.OBS][:, 0]) == {1.0} and set(blue[SampleBatch.OBS][:, 0]) == {2.0}
    assert set(red[SampleBatch.REWARDS]) == {1.0} and set(blue[SampleBatch.REWARDS]) == {2.0}
    # Steps by hand: episode 1 (4 env steps): red_0 4 rows, red_1 2 rows (terminated), blue_0 4;
    # episode 2 (2 env steps so far): red_0 2, red_1 2, blue_0 2.
    assert red.count == 4 + 2 + 2 + 2 and blue.count == 4 + 2
    assert batch.agent_steps() == 16
    red_1 = _where(red, red[SampleBatch.AGENT_INDEX] == 1)
    ep1 = _where(red_1, red_1[SampleBatch.EPS_ID] == red_1[SampleBatch.EPS_ID][0])
    assert ep1[SampleBatch.TERMINATEDS].tolist() == [False, True]


def test_learn_on_batch_trains_only_policies_to_train(team_worker):
    batch = team_worker.sample()
    before = team_worker.get_weights()
    info = team_worker.learn_on_batch(batch)
    after = team_worker.get_weights()
    assert set(info) == {"red"}
    assert any(not np.array_equal(before["red"][k], after["red"][k]) for k in before["red"])
    for k in before["blue"]:
        np.testing.assert_array_equal(before["blue"][k], after["blue"][k])
    grads, ginfo = team_worker.compute_gradients(batch)
    assert set(grads) == {"red"} and ginfo["batch_count"] == batch.count
    team_worker.apply_gradients({"red": grads["red"], "blue": grads["red"]})  # blue is skipped
    for k in before["blue"]:
        np.testing.assert_array_equal(team_worker.get_weights(["blue"])["blue"][k], before["blue"][k])


def test_multi_agent_env_without_all_key_is_rejected():
    class Broken(TwoTeamEnv):
        def step(self, action_dict):
            obs, rew, terms, truncs, infos = super().step(action_dict)
            del terms["__all__"]
            return obs, rew, terms, truncs, infos

    worker = _worker(
        lambda: Broken(),
        {"red": PolicySpec(_pg_class()), "blue": PolicySpec(_pg_class())},
        policy_mapping_fn=team_mapping_fn,
        rollout_fragment_length=2,
    )
    with pytest.raises(ValueError, match="terminateds has no '__all__' key"):
        worker.sample()


# ---------------------------------------------------------------------- callbacks, vars, env context
class _Recorder(DefaultCallbacks):
    def __init__(self):
        super().__init__()
        self.events, self.lengths, self.totals, self.envs = [], [], [], []

    def on_sub_environment_created(self, *, worker, sub_environment, env_context, **kw):
        self.envs.append((env_context.worker_index, env_context.vector_index, env_context["length"]))

    def on_episode_start(self, *, episode, env_index=None, **kw):
        self.events.append("start")

    def on_episode_step(self, *, episode, **kw):
        self.events.append("step")

    def on_episode_end(self, *, episode, **kw):
        self.events.append("end")
        self.lengths.append(episode.length)
        self.totals.append(episode.total_reward)

    def on_postprocess_trajectory(self, *, postprocessed_batch, original_batches, agent_id, **kw):
        self.events.append(f"post{postprocessed_batch.count}")
        assert "advantages" not in original_batches[agent_id][1]

    def on_sample_end(self, *, samples, **kw):
        self.events.append(f"sample_end{samples.count}")


def test_callbacks_run_in_order_with_episode_data():
    rec = _Recorder()
    worker = _worker(
        lambda ctx: CountingEnv(ctx["length"]),
        rollout_fragment_length=4,
        callbacks=rec,
        env_config={"length": 3},
        worker_index=3,
        num_workers=4,
    )
    worker.sample()
    assert rec.envs == [(3, 0, 3)]
    assert rec.events == [
        "start",
        "step",
        "step",
        "step",
        "post3",
        "end",
        "start",
        "step",
        "post1",
        "sample_end4",
    ]
    assert rec.lengths == [3] and rec.totals == [6.0]
    assert worker.get_policy().config["worker_index"] == 3
    (m,) = worker.get_metrics()
    assert (m.episode_length, m.episode_reward) == (3, 6.0) and worker.get_metrics() == []


def test_weights_and_global_vars_round_trip():
    src, dst = _worker(lambda: CountingEnv(3), seed=1), _worker(lambda: CountingEnv(3), seed=2)
    obs = np.array([[0.5, 1.0], [2.0, 0.0]], np.float32)
    dst.set_weights(src.get_weights(), global_vars={"timestep": 77})
    assert dst.get_global_vars() == {"timestep": 77}
    assert dst.foreach_policy(lambda p, pid: (pid, p.global_timestep)) == [("default_policy", 77)]
    out_src = src.get_policy().compute_actions(obs, explore=False)[2][SampleBatch.ACTION_DIST_INPUTS]
    out_dst = dst.get_policy().compute_actions(obs, explore=False)[2][SampleBatch.ACTION_DIST_INPUTS]
    np.testing.assert_allclose(out_src, out_dst, rtol=1e-6, atol=1e-6)
    with pytest.raises(KeyError, match="unknown policy id"):
        dst.set_weights({"nope": {}})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_envs": 0}, "num_envs must be >= 1"),
        ({"rollout_fragment_length": 0}, "rollout_fragment_length must be >= 1"),
        ({"batch_mode": "episodes"}, "batch_mode='episodes' is unknown"),
        ({"count_steps_by": "steps"}, "count_steps_by='steps' is unknown"),
        ({"policy_spec": {"p": 3}}, "policy 'p': expected a PolicySpec"),
        ({"policy_spec": {"p": PolicySpec()}}, "policy 'p' has no policy_class"),
    ],
)
def test_bad_arguments(kwargs, match):
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    kwargs = {"policy_spec": _pg_class(), "policy_config": TINY, **kwargs}
    with pytest.raises(ValueError, match=match):
        RolloutWorker(env_creator=lambda: CountingEnv(), **kwargs)


def test_missing_spaces_are_reported():
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    with pytest.raises(ValueError, match="policy 'default_policy' has no observation/action space"):
        RolloutWorker(policy_spec=_pg_class(), policy_config=TINY)
