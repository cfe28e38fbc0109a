"""rlpolicy.evaluation.episode.Episode: standalone use and the sampler-facing setters."""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.evaluation.episode import Episode, MultiAgentEpisode


class _Pol:
    def __init__(self, action_space, state=None):
        self.action_space = action_space
        self._state = state or []

    def get_initial_state(self):
        return list(self._state)


def test_standalone_defaults():
    ep = Episode()
    assert ep.length == 0 and ep.total_reward == 0.0
    assert 0 <= ep.episode_id < 2e9
    assert ep.user_data == {} and ep.custom_metrics == {} and ep.hist_data == {} and ep.media == {}
    assert ep.batch_builder is None and ep.env_id is None and ep.worker is None
    assert ep.last_observation_for() is None and ep.last_info_for() is None
    assert ep.last_done_for() is False and ep.last_extra_action_outs_for() == {}
    assert ep.prev_reward_for() == 0.0 and ep.last_reward_for() == 0.0
    with pytest.raises(KeyError, match="default_policy"):
        ep.policy_for()  # no policies given


def test_policy_mapping_cached_and_refresh():
    calls = []

    def mapping(agent_id, episode, worker=None, **kwargs):
        calls.append(agent_id)
        return "p1" if agent_id == "a1" else "p0"

    ep = Episode(
        {"p0": _Pol(gym.spaces.Discrete(2)), "p1": _Pol(gym.spaces.Discrete(2))},
        mapping,
        lambda: "builder",
        None,
        env_id=3,
        worker="w",
    )
    assert ep.batch_builder == "builder" and ep.env_id == 3 and ep.worker == "w"
    assert ep.policy_for("a1") == "p1" and ep.policy_for("a1") == "p1" and calls == ["a1"]
    ep.policy_for("a1", refresh=True)
    assert calls == ["a1", "a1"]
    bad = Episode({"p0": _Pol(gym.spaces.Discrete(2))}, lambda a, e, worker=None, **kw: "nope")
    with pytest.raises(KeyError, match="nope"):
        bad.policy_for("x")


def test_actions_rewards_and_soft_reset():
    space = gym.spaces.Box(-1, 1, (2,), dtype=np.float32)
    ep = Episode({"default_policy": _Pol(space, state=[np.zeros(3)])})
    first = ep.last_action_for()
    assert first.shape == (2,) and first.dtype == np.float32 and not first.any()
    assert ep.prev_action_for().shape == (2,) and not ep.prev_action_for().any()
    ep._set_last_action("agent0", np.array([0.5, -0.5]))
    ep._set_last_action("agent0", np.array([0.1, 0.2]))
    np.testing.assert_allclose(ep.last_action_for(), [0.1, 0.2])
    np.testing.assert_allclose(ep.prev_action_for(), [0.5, -0.5])
    ep._add_agent_rewards({"agent0": 1.0})
    ep._add_agent_rewards({"agent0": 2.5, "ghost": None})
    assert ep.total_reward == 3.5 and ep.last_reward_for() == 2.5 and ep.prev_reward_for() == 1.0
    assert ep.agent_rewards[("agent0", "default_policy")] == 3.5
    ep.length = 7
    ep.soft_reset()
    assert ep.length == 0 and ep.total_reward == 0.0 and ep.prev_reward_for() == 0.0
    np.testing.assert_allclose(ep.last_action_for(), [0.1, 0.2])  # agent data kept


def test_nested_action_flattened_and_rnn_state():
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(0, 1, (2,))})
    ep = Episode({"default_policy": _Pol(space, state=[np.ones(2)])})
    assert ep.last_action_for().shape == (3,)
    ep._set_last_action("agent0", {"a": 2, "b": np.array([0.3, 0.4])})
    np.testing.assert_allclose(ep.last_action_for(), [2.0, 0.3, 0.4])
    np.testing.assert_array_equal(ep.rnn_state_for()[0], [1.0, 1.0])
    ep._set_rnn_state("agent0", [np.zeros(2)])
    np.testing.assert_array_equal(ep.rnn_state_for()[0], [0.0, 0.0])


def test_setters_and_getters():
    ep = Episode()
    ep._set_last_observation("a", np.array([1.0]))
    ep._set_last_raw_obs("a", {"raw": 1})
    ep._set_last_info("a", {"i": 2})
    ep._set_last_done("a", True)
    ep._set_last_extra_action_outs("a", {"vf_preds": 0.5})
    assert ep.last_observation_for("a")[0] == 1.0 and ep.last_raw_obs_for("a") == {"raw": 1}
    assert ep.last_info_for("a") == {"i": 2} and ep.last_done_for("a") is True
    assert ep.last_pi_info_for("a") == {"vf_preds": 0.5} == ep.last_extra_action_outs_for("a")
    assert ep.get_agents() == ["a"]
    assert [ep._agent_index(x) for x in ("a", "b", "a")] == [0, 1, 0]


def test_multi_agent_episode_alias_warns():
    with pytest.warns(DeprecationWarning):
        ep = MultiAgentEpisode()
    assert isinstance(ep, Episode)


def test_mapping_fn_signatures_of_every_1x_release():
    pols = {"p": _Pol(gym.spaces.Discrete(2)), "q": _Pol(gym.spaces.Discrete(2))}
    worker = object()
    seen = {}

    def with_worker(agent_id, episode, worker):  # worker as a third positional parameter
        seen["worker"] = worker
        return "q"

    def with_kwargs(agent_id, episode, **kwargs):
        seen["kwargs"] = kwargs
        return "p"

    cases = [
        (lambda agent_id: "p", "p"),
        (lambda agent_id, episode: "q", "q"),
        (with_worker, "q"),
        (with_kwargs, "p"),
    ]
    for fn, expect in cases:
        ep = Episode(pols, fn, worker=worker)
        assert ep.policy_for("a0") == expect
    assert seen["worker"] is worker and seen["kwargs"] == {"worker": worker}
    ep = Episode(pols, lambda agent_id: "p")
    ep.policy_mapping_fn = lambda agent_id, episode: "q"  # replaced later: resolved again
    assert ep.policy_for("a1") == "q" and ep.policy_for("a0", refresh=True) == "q"
