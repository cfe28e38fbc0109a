"""Bad caller input at the public entry points of the PPO policies.

For torch (PPOTorchPolicy), tf graph (PPOTFPolicy) and tf2 eager
(PPOTFPolicy.as_eager()): every bad call raises an error naming the problem,
and leaves weights, global_timestep and optimizer state exactly as before.
A wrong number of state batches is named by our check for torch/tf2 and by
the feed check (listing the state placeholders) for the tf graph policy.
"""

import gymnasium as gym
import numpy as np
import pytest
import tree

from rlpolicy.policy.sample_batch import SampleBatch

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
FRAMEWORKS = ["torch", "tf", "tf2"]


def _make(framework, **extra):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    from rlpolicy.agents.ppo import PPOTFPolicy, PPOTorchPolicy

    config = {"framework": framework, "seed": 0, "model": {"fcnet_hiddens": [8]}, **extra}
    if framework == "torch":
        return PPOTorchPolicy(OBS, ACT, config)
    return (PPOTFPolicy if framework == "tf" else PPOTFPolicy.as_eager())(OBS, ACT, config)


def _train_batch(policy, n=8):
    obs = np.random.default_rng(0).uniform(-1, 1, (n, 4)).astype(np.float32)
    actions, _, extra = policy.compute_actions(obs)
    return SampleBatch(
        {
            "obs": obs,
            "actions": actions,
            "rewards": np.ones(n, np.float32),
            "dones": np.zeros(n, bool),
            "advantages": np.linspace(-1, 1, n).astype(np.float32),
            "value_targets": np.ones(n, np.float32),
            **extra,
        }
    )


@pytest.fixture(scope="module", params=FRAMEWORKS)
def trained(request):
    """A policy after one learn step (so the optimizer has state) and a good batch."""
    policy = _make(request.param)
    batch = _train_batch(policy)
    policy.learn_on_batch(batch.copy())
    return policy, batch


def _keyed_weights(policy):
    """The state's weights as a dict (eager TF states hold RLlib 1.11's list)."""
    w = policy.get_state()["weights"]
    return w if isinstance(w, dict) else policy.get_weights(as_dict=True)


def _snapshot(policy):
    state = policy.get_state()
    opt = [np.array(x, copy=True) for x in tree.flatten(state.get("_optimizer_variables", []))]
    return (
        {k: np.array(v, copy=True) for k, v in _keyed_weights(policy).items()},
        int(policy.global_timestep),
        opt,
    )


def _assert_unchanged(policy, before):
    weights, timestep, opt = _snapshot(policy)
    assert timestep == before[1]
    assert sorted(weights) == sorted(before[0])
    for k in weights:
        np.testing.assert_array_equal(weights[k], before[0][k])
    assert len(opt) == len(before[2]) and len(opt) > 0
    for a, b in zip(opt, before[2]):
        np.testing.assert_array_equal(a, b)


def _drop(batch, *cols):
    out = batch.copy()
    for c in cols:
        del out[c]
    return out


def _weights_without_first(p):
    w = _keyed_weights(p)
    return {k: v for k, v in list(w.items())[1:]}


def _weights_with_bad_shape(p):
    w = _keyed_weights(p)
    first = next(iter(w))
    return {**w, first: np.zeros((1, 1), np.float32)}


def _other_state(p):
    """p's state with every optimizer array changed and another timestep."""
    state = p.get_state()
    state["_optimizer_variables"] = tree.map_structure(
        lambda x: x + 1 if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x,
        state["_optimizer_variables"],
    )
    state["global_timestep"] = int(state["global_timestep"]) + 7
    return state


Z = np.zeros
CASES = [
    (
        "obs_shape",
        lambda p, b: p.compute_actions(Z((2, 5), np.float32)),
        ValueError,
        r"(observation batch has shape|Cannot feed value of shape) \(2, 5\)",
    ),
    (
        "obs_no_batch_dim",
        lambda p, b: p.compute_actions(Z(4, np.float32)),
        ValueError,
        r"(observation batch has shape|Cannot feed value of shape) \(4,\)",
    ),
    (
        "single_obs_shape",
        lambda p, b: p.compute_single_action([0.1, 0.2, 0.3]),
        ValueError,
        r"(observation batch has shape|Cannot feed value of shape) \(1, 3\)",
    ),
    (
        "obs_dtype",
        lambda p, b: p.compute_actions(np.array([["a"] * 4] * 2)),
        ValueError,
        r"compute_actions: column 'obs' has dtype <U1, but the observation space Box",
    ),
    (
        "input_dict_obs_dtype",
        lambda p, b: p.compute_actions_from_input_dict(SampleBatch({"obs": np.array([["x"] * 4])})),
        ValueError,
        r"column 'obs' has dtype <U1",
    ),
    (
        "state_batches",
        lambda p, b: p.compute_actions(Z((2, 4), np.float32), state_batches=[Z((2, 3))]),
        ValueError,
        r"(compute_actions: got 1 state batch\(es\), but this policy's model is not recurrent and "
        r"takes 0|RNN state batches for placeholders \[\], got 1 state batch\(es\))",
    ),
    (
        "input_dict_state",
        lambda p, b: p.compute_actions_from_input_dict(
            SampleBatch({"obs": Z((2, 4), np.float32), "state_in_0": Z((2, 3), np.float32)})
        ),
        ValueError,
        r"(got 1 state batch\(es\).*takes 0|placeholders \[\], got 1 state batch\(es\))",
    ),
    (
        "learn_missing_advantages",
        lambda p, b: p.learn_on_batch(_drop(b, "advantages")),
        ValueError,
        r"learn_on_batch: the train batch lacks column\(s\) \['advantages'\] that the loss reads; "
        r"it has \['action_dist_inputs', 'action_logp', 'action_prob', 'actions', 'dones', 'obs', ",
    ),
    (
        "learn_missing_two",
        lambda p, b: p.learn_on_batch(_drop(b, "value_targets", "actions")),
        ValueError,
        r"lacks column\(s\) \['actions', 'value_targets'\]",
    ),
    (
        "learn_obs_dtype",
        lambda p, b: p.learn_on_batch(SampleBatch({**b, "obs": np.full((8, 4), "a")})),
        ValueError,
        r"learn_on_batch: column 'obs' has dtype <U1",
    ),
    (
        "set_weights_missing",
        lambda p, b: p.set_weights(_weights_without_first(p)),
        ValueError,
        r"set_weights: .*missing keys \['[^']+'\]",
    ),
    (
        "set_weights_extra",
        lambda p, b: p.set_weights({**_keyed_weights(p), "bogus": Z(3)}),
        ValueError,
        r"set_weights: .*(unexpected|unknown) keys \['bogus'\]",
    ),
    (
        "set_weights_shape",
        lambda p, b: p.set_weights(_weights_with_bad_shape(p)),
        ValueError,
        r"set_weights: '[^']+' has shape \(1, 1\)",
    ),
    (
        "set_state_bad_weights",
        lambda p, b: p.set_state({**_other_state(p), "weights": _weights_with_bad_shape(p)}),
        ValueError,
        r"has shape \(1, 1\)",
    ),
]


@pytest.mark.parametrize("name, call, exc, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_and_changes_nothing(trained, name, call, exc, match):
    policy, batch = trained
    before = _snapshot(policy)
    with pytest.raises(exc, match=match):
        call(policy, batch)
    _assert_unchanged(policy, before)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_obs_rejected_when_configured(trained, monkeypatch, bad):
    policy, batch = trained
    monkeypatch.setitem(policy.config, "_check_finite_obs", True)
    obs = np.zeros((3, 4), np.float32)
    obs[1, 2] = bad
    before = _snapshot(policy)
    with pytest.raises(
        ValueError,
        match=r"compute_actions: column 'obs' has NaN/inf values in "
        r"row\(s\) \[1\] "
        r"\(config _check_finite_obs=True\)",
    ):
        policy.compute_actions(obs, explore=False)
    train = SampleBatch({**batch, "obs": np.where(np.arange(8)[:, None] == 5, bad, batch["obs"])})
    with pytest.raises(
        ValueError,
        match=r"learn_on_batch: column 'obs' has NaN/inf values in "
        r"row\(s\) \[5\]",
    ):
        policy.learn_on_batch(train)
    _assert_unchanged(policy, before)


def test_non_finite_obs_pass_through_by_default(trained):
    # RLlib does not look at the values; neither does the default config.
    policy, _ = trained
    assert policy.config["_check_finite_obs"] is False
    obs = np.zeros((2, 4), np.float32)
    obs[0, 0] = np.inf
    actions, _, extra = policy.compute_actions(obs, explore=False)
    assert np.shape(actions) == (2,)
    assert np.all(np.isfinite(extra["action_dist_inputs"][1]))


def test_good_batch_still_learns(trained):
    policy, batch = trained
    before = _snapshot(policy)
    policy.learn_on_batch(batch.copy())
    after = _snapshot(policy)
    assert any(not np.array_equal(after[0][k], before[0][k]) for k in after[0])
