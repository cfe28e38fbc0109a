"""rlpolicy.policy.policy: the framework-independent Policy base class."""

import copy

import gymnasium as gym
import numpy as np
import pytest
from numpy_policies import (
    LinearSoftmaxPolicy,
    StructuredActionPolicy,
    bandit_batch,
    make_linear_policy,
    softmax,
)

from rlpolicy._core.defaults import COMMON_CONFIG, MODEL_DEFAULTS
from rlpolicy.agents.callbacks import DefaultCallbacks
from rlpolicy.policy.policy import Policy, PolicySpec
from rlpolicy.policy.sample_batch import SampleBatch

OBS = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

ACTION_SPACES = {
    "box": gym.spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32),
    "discrete": gym.spaces.Discrete(4),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 5]),
    "dict": gym.spaces.Dict(
        {"move": gym.spaces.Discrete(3), "aim": gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)}
    ),
    "tuple": gym.spaces.Tuple(
        [
            gym.spaces.Discrete(2),
            gym.spaces.MultiDiscrete([2, 2]),
            gym.spaces.Dict({"x": gym.spaces.Box(0.0, 1.0, (1,), np.float32)}),
        ]
    ),
}


@pytest.fixture(params=list(ACTION_SPACES))
def action_space(request):
    return ACTION_SPACES[request.param]


# ------------------------------------------------------------------ construction
def test_policy_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        Policy(OBS, gym.spaces.Discrete(2), {})


def test_partial_config_is_completed_and_caller_dict_untouched():
    given = {"lr": 0.25, "model": {"fcnet_hiddens": [8]}}
    snapshot = copy.deepcopy(given)
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), given)
    assert given == snapshot
    assert set(COMMON_CONFIG) <= set(p.config)
    assert p.config["lr"] == 0.25 and p.config["gamma"] == COMMON_CONFIG["gamma"]
    assert p.config["model"]["fcnet_hiddens"] == [8]
    assert p.config["model"]["max_seq_len"] == MODEL_DEFAULTS["max_seq_len"]
    assert p.framework == COMMON_CONFIG["framework"]


def test_none_config_is_completed():
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), None)
    assert p.config["explore"] is True and p.config["model"] == MODEL_DEFAULTS


def test_complete_config_is_copied_not_shared():
    full = copy.deepcopy(COMMON_CONFIG)
    full["model"] = copy.deepcopy(MODEL_DEFAULTS)
    full["framework"] = "torch"
    snapshot = copy.deepcopy(full)
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), full)
    q = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), full)
    assert p.config == full and p.config is not full and p.framework == "torch"
    assert p.config["model"] is not full["model"] and p.config["model"] is not q.config["model"]
    p.config["model"]["fcnet_hiddens"].append(1)
    assert full == snapshot and q.config["model"]["fcnet_hiddens"] == [256, 256]


class _Opaque:
    """A config value that is not a plain container (deep-copied by copy.deepcopy)."""

    def __init__(self, items):
        self.items = items


def test_given_config_snapshot_is_deep_and_independent_of_the_caller():
    shared = [1, 2]
    given = {"lr": 0.25, "model": {"fcnet_hiddens": [8]}, "_a": shared, "_b": shared, "_opaque": _Opaque([3])}
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), given)
    snap = p._given_config
    assert set(snap) == set(given) and snap["lr"] == 0.25 and snap["model"] == {"fcnet_hiddens": [8]}
    assert snap["_a"] is snap["_b"] and snap["_a"] is not shared  # sharing kept, as by deepcopy
    assert type(snap["_opaque"]) is _Opaque and snap["_opaque"] is not given["_opaque"]
    assert snap["_opaque"].items == [3] and snap["_opaque"].items is not given["_opaque"].items
    given["model"]["fcnet_hiddens"].append(4)
    shared.append(3)
    given["_opaque"].items.append(5)
    assert snap["model"]["fcnet_hiddens"] == [8] and snap["_a"] == [1, 2] and snap["_opaque"].items == [3]
    # Neither the snapshot nor the caller's dict is the policy's config.
    assert p.config["model"] is not snap["model"] and p.config["_a"] is not snap["_a"]


@pytest.mark.parametrize(
    "obs_space, config, exc, match",
    [
        (OBS, {"gamma": 2.0}, ValueError, "gamma"),
        (OBS, {"framework": "mxnet"}, ValueError, "framework"),
        (OBS, {"model": {"max_seq_len": 0}}, ValueError, "model.max_seq_len"),
        (OBS, [("lr", 1)], TypeError, "config must be a dict"),
        ((2,), {}, TypeError, "observation_space must be a gymnasium"),
    ],
)
def test_bad_arguments(obs_space, config, exc, match):
    with pytest.raises(exc, match=match):
        StructuredActionPolicy(obs_space, gym.spaces.Discrete(2), config)


def test_bad_action_space():
    with pytest.raises(TypeError, match="action_space must be a gymnasium"):
        StructuredActionPolicy(OBS, 3, {})


class CountingCallbacks(DefaultCallbacks):
    instances = 0

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        CountingCallbacks.instances += 1


def test_callbacks_from_config():
    assert type(StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {}).callbacks) is DefaultCallbacks
    before = CountingCallbacks.instances
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {"callbacks": CountingCallbacks})
    assert isinstance(p.callbacks, CountingCallbacks) and CountingCallbacks.instances == before + 1


def test_initial_attributes():
    space = ACTION_SPACES["dict"]
    p = StructuredActionPolicy(OBS, space, {})
    assert p.global_timestep == 0 and p.dist_class is None
    assert p.action_space_struct == {"move": space["move"], "aim": space["aim"]}
    assert p._model_init_state_automatically_added is False
    assert "obs" in p.view_requirements and p.view_requirements["actions"].space == space


def test_existing_view_requirements_are_completed_not_replaced():
    from rlpolicy.policy.view_requirement import ViewRequirement

    class Pre(StructuredActionPolicy):
        def __init__(self, *args):
            self.view_requirements = {"obs": ViewRequirement("custom")}
            super().__init__(*args)

    p = Pre(OBS, gym.spaces.Discrete(2), {})
    assert p.view_requirements["obs"].data_col == "custom" and "new_obs" in p.view_requirements


def test_policy_spec_defaults():
    assert PolicySpec() == (None, None, None, None)
    spec = PolicySpec(LinearSoftmaxPolicy, config={"lr": 1})
    assert spec.policy_class is LinearSoftmaxPolicy and spec.config == {"lr": 1} and spec.action_space is None


# ------------------------------------------------------------------ compute_single_action
def _same_structure(value, space):
    if isinstance(space, gym.spaces.Dict):
        return (
            isinstance(value, dict)
            and list(value) == list(space.spaces)
            and all(_same_structure(value[k], s) for k, s in space.spaces.items())
        )
    if isinstance(space, gym.spaces.Tuple):
        return (
            isinstance(value, tuple)
            and len(value) == len(space.spaces)
            and all(_same_structure(v, s) for v, s in zip(value, space.spaces))
        )
    return np.shape(value) == space.shape


def test_compute_single_action_returns_one_action_of_the_space(action_space):
    p = StructuredActionPolicy(OBS, action_space, {})
    action, state_out, info = p.compute_single_action(np.array([0.1, 0.2], np.float32))
    assert action_space.contains(action)
    assert _same_structure(action, action_space)
    assert state_out == [] and info == {"row_id": 0}
    assert p.calls[-1]["obs"].shape == (1, 2)


def test_compute_single_action_batches_nested_obs():
    obs_space = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (3,)), "b": gym.spaces.Discrete(2)})
    p = StructuredActionPolicy(obs_space, gym.spaces.Discrete(2), {})
    p.compute_single_action({"a": np.zeros(3, np.float32), "b": 1})
    obs = p.calls[-1]["obs"]
    assert obs["a"].shape == (1, 3) and obs["b"].shape == (1,) and obs["b"][0] == 1


def test_compute_single_action_forwards_everything():
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {})
    episode = object()
    _, state_out, _ = p.compute_single_action(
        np.zeros(2, np.float32),
        [np.array([1.0, 2.0]), np.array([5.0])],
        prev_action=1,
        prev_reward=0.5,
        info={"x": 3},
        episode=episode,
        explore=False,
        timestep=42,
    )
    call = p.calls[-1]
    assert [s.shape for s in call["state"]] == [(1, 2), (1, 1)]
    np.testing.assert_array_equal(call["prev_action"], [1])
    np.testing.assert_array_equal(call["prev_reward"], [0.5])
    assert call["episodes"] == [episode] and call["explore"] is False and call["timestep"] == 42
    # state_out (= state_in + 1 in this policy) comes back unbatched.
    assert len(state_out) == 2
    np.testing.assert_array_equal(state_out[0], [2.0, 3.0])
    np.testing.assert_array_equal(state_out[1], [6.0])


def test_compute_single_action_from_input_dict():
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {})
    p.compute_single_action(np.ones(2), input_dict={"obs": np.full(2, 7.0), "state_in_0": np.zeros(3)})
    assert p.calls[-1]["obs"].tolist() == [[7.0, 7.0]]
    assert p.calls[-1]["state"][0].shape == (1, 3)


def test_compute_single_action_with_linear_policy_matches_numpy():
    p = make_linear_policy({"explore": False})
    p.set_weights(
        {
            "W": np.array([[1.0, -1.0], [0.0, 2.0], [0.5, 0.5]], np.float32),
            "b": np.array([0.0, 0.1], np.float32),
        }
    )
    obs = np.array([0.2, 0.3, -0.4], np.float32)
    logits = obs @ p.W + p.b  # = [0.0, 0.5]
    action, _, info = p.compute_single_action(obs)
    assert action == 1
    np.testing.assert_allclose(info["action_prob"], softmax(logits)[1], rtol=1e-6, atol=1e-6)


class BareActionPolicy(StructuredActionPolicy):
    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.array([9])


class TwoRowPolicy(StructuredActionPolicy):
    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.zeros(2, np.int64), [], {}


def test_compute_single_action_bare_action_output():
    action, state, info = BareActionPolicy(OBS, gym.spaces.Discrete(2), {}).compute_single_action(np.zeros(2))
    np.testing.assert_array_equal(action, [9])
    assert state == [] and info == {}


def test_compute_single_action_rejects_multi_row_output():
    with pytest.raises(ValueError, match="2 rows"):
        TwoRowPolicy(OBS, gym.spaces.Discrete(2), {}).compute_single_action(np.zeros(2))


def test_compute_actions_from_input_dict_default_passes_columns():
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {})
    batch = SampleBatch(
        {
            "obs": np.zeros((3, 2)),
            "state_in_0": np.ones((3, 1)),
            "prev_actions": np.arange(3),
            "prev_rewards": np.ones(3),
        }
    )
    actions, _, _ = p.compute_actions_from_input_dict(batch, explore=True, timestep=5)
    call = p.calls[-1]
    assert len(actions) == 3 and call["explore"] is True and call["timestep"] == 5
    assert call["state"][0].shape == (3, 1) and call["prev_action"].tolist() == [0, 1, 2]
    assert call["info"] is None


# ------------------------------------------------------------------ learning and state
def test_learn_on_batch_is_compute_then_apply_gradients():
    p = make_linear_policy({"lr": 0.1, "seed": 0})
    order = []
    p.compute_gradients = lambda b: (order.append("compute"), (["g"], {"info": 1}))[1]
    p.apply_gradients = lambda g: order.append(("apply", g))
    assert p.learn_on_batch(SampleBatch({"obs": np.zeros((1, 3))})) == {"info": 1}
    assert order == ["compute", ("apply", ["g"])]


def test_numpy_gradient_matches_finite_differences():
    p = make_linear_policy({"seed": 1})
    rng = np.random.default_rng(1)
    p.set_weights({"W": rng.normal(size=(3, 2)).astype(np.float32), "b": np.zeros(2, np.float32)})
    batch = SampleBatch(
        {
            "obs": rng.normal(size=(5, 3)).astype(np.float32),
            "actions": np.array([0, 1, 1, 0, 1]),
            "advantages": rng.normal(size=5).astype(np.float32),
        }
    )
    (g_w, _), _ = p.compute_gradients(batch)
    eps, w0 = 1e-3, p.W.astype(np.float64).copy()
    for i, j in [(0, 0), (2, 1)]:

        def loss_at(delta, i=i, j=j):
            w = w0.copy()
            w[i, j] += delta
            p.W = w
            return p.loss(None, None, batch)

        num = (loss_at(eps) - loss_at(-eps)) / (2 * eps)
        np.testing.assert_allclose(g_w[i, j], num, rtol=1e-2, atol=1e-4)


def test_subclassed_policy_learns_two_armed_bandit():
    p = make_linear_policy({"lr": 0.5, "seed": 0})
    rng = np.random.default_rng(0)
    obs = np.ones((1, 3), np.float32)

    def p_right():
        return softmax(obs @ p.W + p.b)[0, 1]

    start = p_right()
    assert start == pytest.approx(0.5, abs=1e-6)
    losses = [p.learn_on_batch(bandit_batch(p, 32, rng))["loss"] for _ in range(30)]
    assert p_right() > 0.9
    # The surrogate loss uses centred rewards, so track log pi(right) instead.
    assert np.log(p_right()) > np.log(start)
    assert all(np.isfinite(losses))


def test_get_state_set_state_and_global_vars():
    p = make_linear_policy()
    p.set_weights({"W": np.ones((3, 2), np.float32), "b": np.ones(2, np.float32)})
    p.on_global_var_update({"timestep": 17})
    state = p.get_state()
    assert state["global_timestep"] == 17 and set(state) >= {"weights", "global_timestep"}
    q = make_linear_policy()
    q.set_state(state)
    np.testing.assert_array_equal(q.W, np.ones((3, 2)))
    assert q.global_timestep == 17


def test_base_get_state_layout():
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {})
    assert Policy.get_state(p) == {"weights": {}, "global_timestep": 0}


def test_simple_defaults():
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {})
    assert p.is_recurrent() is False and p.num_state_tensors() == 0 and p.get_initial_state() == []
    assert p.get_session() is None and p.get_exploration_state() == {}
    assert p.postprocess_trajectory("batch") == "batch"
    assert p.apply(lambda pol, x, y=0: (pol, x + y), 1, y=2) == (p, 3)


@pytest.mark.parametrize(
    "method, args",
    [
        ("compute_log_likelihoods", (np.zeros(1), np.zeros((1, 2)))),
        ("loss", (None, None, None)),
        ("load_batch_into_buffer", (None,)),
        ("get_num_samples_loaded_into_buffer", ()),
        ("learn_on_loaded_batch", ()),
        ("compute_gradients", (None,)),
        ("apply_gradients", (None,)),
        ("export_model", ("/tmp/x",)),
        ("import_model_from_h5", ("/tmp/x.h5",)),
    ],
)
def test_unimplemented_base_methods(method, args):
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {})
    with pytest.raises(NotImplementedError):
        getattr(p, method)(*args)


def test_get_weights_and_set_weights_are_abstract_in_base():
    p = StructuredActionPolicy(OBS, gym.spaces.Discrete(2), {})
    with pytest.raises(NotImplementedError):
        Policy.get_weights(p)
    with pytest.raises(NotImplementedError):
        Policy.set_weights(p, {})


def test_create_exploration_from_config():
    p = StructuredActionPolicy(
        OBS,
        gym.spaces.Discrete(2),
        {"framework": "torch", "exploration_config": {"type": "EpsilonGreedy", "initial_epsilon": 0.7}},
    )
    p.exploration = p._create_exploration()
    assert type(p.exploration).__name__ == "EpsilonGreedy"
    assert p._create_exploration() is p.exploration  # built once
    assert float(p.get_exploration_state()["cur_epsilon"]) == pytest.approx(0.7, abs=1e-6)


# ------------------------------------------------------------------ view requirements after dummy init
def test_linear_policy_view_requirements_after_dummy_init():
    p = make_linear_policy()
    vrs = p.view_requirements
    # The loss reads obs/actions/advantages; postprocessing reads rewards, dones, action_prob.
    assert sorted(vrs) == sorted(
        [
            "obs",
            "actions",
            "advantages",
            "action_prob",
            "rewards",
            "dones",
            "terminateds",
            "truncateds",
            "infos",
            "eps_id",
            "unroll_id",
            "agent_index",
            # read by the default compute_actions_from_input_dict:
            "prev_actions",
            "prev_rewards",
        ]
    )
    for gone in ("new_obs", "t", "action_dist_inputs"):
        assert gone not in vrs
    assert vrs["action_prob"].used_for_training is False  # postprocessing only
    assert vrs["obs"].used_for_compute_actions and vrs["obs"].used_for_training
    assert not vrs["actions"].used_for_compute_actions and vrs["actions"].used_for_training
    assert not vrs["advantages"].used_for_compute_actions
    assert vrs["prev_actions"].used_for_compute_actions
    # The loss ran exactly once, on a 32-row training batch.
    assert len(p.loss_calls) == 1 and p.loss_calls[0].count == 32 and p.loss_calls[0].is_training
