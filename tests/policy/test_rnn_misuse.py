"""Recurrent policies called the wrong way get one error that names the fix.

1.x-style client code: a PG policy with ``use_lstm`` and ``lstm_use_prev_action``
(torch, graph-mode tf, tf2), called as a user who forgot the state, passed a
state of the wrong size or left out the previous action would call it. RLlib
1.11 itself passes no state when ``state`` is None (``Policy.compute_single_action``
and ``Trainer.compute_single_action`` both), so the call fails inside the model
("needs seq_lens", an IndexError, a placeholder dump); rlpolicy keeps 1.11's
rule (no state is filled in) and raises a ValueError naming the argument.
"""

import gymnasium as gym
import numpy as np
import pytest

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
CELL = 4
MODEL = {"use_lstm": True, "lstm_cell_size": CELL, "fcnet_hiddens": [8], "max_seq_len": 4}


def _make(framework, **model):
    if framework == "torch":
        pytest.importorskip("torch")
        from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy as cls
    else:
        pytest.importorskip("tensorflow")
        from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy as cls

        if framework == "tf2":
            cls = cls.as_eager()
    return cls(OBS, ACT, {"framework": framework, "seed": 0, "model": {**MODEL, **model}})


@pytest.fixture(scope="module", params=["torch", "tf", "tf2"])
def lstm_policy(request):
    """(framework, policy) with use_lstm and lstm_use_prev_action."""
    return request.param, _make(request.param, lstm_use_prev_action=True)


def _weights(policy):
    w = policy.get_weights()
    return {str(k): np.array(v) for k, v in (w.items() if isinstance(w, dict) else enumerate(w))}


def _unchanged(policy, before):
    after = _weights(policy)
    assert after.keys() == before.keys()
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


OBS1 = np.array([0.1, -0.2, 0.3], np.float32)


def test_correct_call_works(lstm_policy):
    _, policy = lstm_policy
    state = policy.get_initial_state()
    assert [np.shape(s) for s in state] == [(CELL,), (CELL,)]
    action, state_out, _ = policy.compute_single_action(OBS1, state, prev_action=0, explore=False)
    assert ACT.contains(int(action))
    assert [np.shape(s) for s in state_out] == [(CELL,), (CELL,)]
    # The returned state feeds the next step.
    policy.compute_single_action(OBS1, state_out, prev_action=int(action), explore=False)


def test_single_action_without_state_names_get_initial_state(lstm_policy):
    _, policy = lstm_policy
    before = _weights(policy)
    with pytest.raises(
        ValueError,
        match=r"compute_single_action: this policy's model is recurrent and "
        r"takes 2 state input\(s\).*none were given; pass "
        r"state=policy.get_initial_state\(\)",
    ):
        policy.compute_single_action(OBS1, prev_action=0)
    _unchanged(policy, before)


def test_batch_without_state_names_get_initial_state(lstm_policy):
    _, policy = lstm_policy
    with pytest.raises(
        ValueError,
        match=r"compute_actions: this policy's model is recurrent.*"
        r"policy.get_initial_state\(\)",
    ):
        policy.compute_actions(np.stack([OBS1, OBS1]), prev_action_batch=np.zeros(2, np.int64))


def test_state_of_wrong_size_names_index_and_shapes(lstm_policy):
    _, policy = lstm_policy
    h, _ = policy.get_initial_state()
    with pytest.raises(
        ValueError,
        match=r"compute_single_action: state\[1\] has shape \(5,\), but the "
        r"model's state 1 has shape \(4,\)",
    ):
        policy.compute_single_action(OBS1, [h, np.zeros(5, np.float32)], prev_action=0)
    batch = [np.zeros((2, CELL), np.float32), np.zeros((2, CELL + 3), np.float32)]
    with pytest.raises(
        ValueError,
        match=r"compute_actions: state_batches\[1\] has shape \(2, 7\).*"
        r"state 1 has shape \(4,\)",
    ):
        policy.compute_actions(np.stack([OBS1, OBS1]), batch, prev_action_batch=np.zeros(2, np.int64))


def test_wrong_number_of_states(lstm_policy):
    _, policy = lstm_policy
    h, _ = policy.get_initial_state()
    with pytest.raises(ValueError, match=r"got 1 state batch\(es\), but this policy's model takes 2"):
        policy.compute_single_action(OBS1, [h], prev_action=0)


def test_missing_prev_action_names_the_argument_and_model_option(lstm_policy):
    _, policy = lstm_policy
    before = _weights(policy)
    state = policy.get_initial_state()
    with pytest.raises(
        ValueError,
        match=r"compute_single_action: the model reads the previous action "
        r"\(model option lstm_use_prev_action=True\), but no "
        r"prev_action was given; pass prev_action=",
    ):
        policy.compute_single_action(OBS1, state)
    with pytest.raises(ValueError, match=r"compute_actions: .*lstm_use_prev_action=True.*prev_action_batch="):
        policy.compute_actions(np.stack([OBS1]), [s[None] for s in state])
    with pytest.raises(ValueError, match=r"lstm_use_prev_action=True.*'prev_actions' input-dict column"):
        policy.compute_actions_from_input_dict(
            {
                "obs": np.stack([OBS1]),
                "state_in_0": state[0][None],
                "state_in_1": state[1][None],
                "seq_lens": np.ones(1, np.int32),
            }
        )
    _unchanged(policy, before)


@pytest.mark.parametrize("framework", ["torch", "tf2"])
def test_lstm_without_prev_action_option_needs_none(framework):
    policy = _make(framework)
    action, _, _ = policy.compute_single_action(OBS1, policy.get_initial_state(), explore=False)
    assert ACT.contains(int(action))
    # The model option is what asks for the previous reward, named in the error.
    rewards = _make(framework, lstm_use_prev_reward=True)
    with pytest.raises(
        ValueError,
        match=r"previous reward \(model option lstm_use_prev_reward=True\).*"
        r"prev_reward=",
    ):
        rewards.compute_single_action(OBS1, rewards.get_initial_state())


def test_feed_forward_policy_takes_no_state():
    pytest.importorskip("torch")
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

    policy = PGTorchPolicy(OBS, ACT, {"model": {"fcnet_hiddens": [8]}})
    assert ACT.contains(int(policy.compute_single_action(OBS1)[0]))
    with pytest.raises(ValueError, match="not recurrent and takes 0"):
        policy.compute_single_action(OBS1, [np.zeros(4, np.float32)])
