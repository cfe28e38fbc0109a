"""Policies built directly on raw Dict/Tuple observation spaces (torch, tf, tf2).

Expected values come from a numpy one-hot/flatten written here by hand (the
layout RLlib 1.11's preprocessors give: Dict keys in the space's order,
Discrete as ``n`` one-hot slots, MultiDiscrete as ``sum(nvec)``, Box and
MultiBinary flattened row-major), never from the code under test.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple

from rlpolicy.models.preprocessors import get_preprocessor
from rlpolicy.policy.sample_batch import SampleBatch

ATOL = 1e-5

# The failing examples.
TUPLE_SPACE = Tuple((Discrete(3), MultiDiscrete([2, 4, 3])))
DICT_SPACE = Dict({"a": Box(-1.0, 1.0, (2, 3)), "b": MultiBinary(4), "c": Discrete(5)})
NESTED_SPACE = Dict({"x": Tuple((Discrete(2), Box(0.0, 1.0, (3,)))), "y": MultiDiscrete([3, 3])})


def np_flatten(obs, space):
    """Hand-written reference preprocessing of one raw observation."""
    if isinstance(space, Dict):
        return np.concatenate([np_flatten(obs[k], s) for k, s in space.spaces.items()])
    if isinstance(space, Tuple):
        return np.concatenate([np_flatten(o, s) for o, s in zip(obs, space.spaces)])
    if isinstance(space, Discrete):
        out = np.zeros(space.n, np.float32)
        out[int(obs) - int(space.start)] = 1.0
        return out
    if isinstance(space, MultiDiscrete):
        parts = []
        for v, n, s in zip(np.ravel(obs), np.ravel(space.nvec), np.ravel(space.start)):
            part = np.zeros(int(n), np.float32)
            part[int(v) - int(s)] = 1.0
            parts.append(part)
        return np.concatenate(parts)
    return np.asarray(obs, np.float32).ravel()


# ---------------------------------------------------------------- preprocessors


def test_hand_worked_tuple_one_hot():
    prep = get_preprocessor(TUPLE_SPACE)(TUPLE_SPACE)
    want = [0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1]
    obs = (1, np.array([0, 3, 2]))
    np.testing.assert_array_equal(prep.transform(obs), want)
    batch = (np.array([1, 2]), np.array([[0, 3, 2], [1, 0, 0]]))
    np.testing.assert_array_equal(prep.transform_batch(batch), [want, [0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 0, 0]])


def test_discrete_and_multidiscrete_start_offsets():
    space = Tuple((Discrete(3, start=5), MultiDiscrete([2, 3], start=[-1, 10])))
    prep = get_preprocessor(space)(space)
    want = [0, 0, 1, 1, 0, 0, 1, 0]  # 7 -> slot 2; -1 -> slot 0; 11 -> slot 1
    np.testing.assert_array_equal(prep.transform((7, np.array([-1, 11]))), want)
    np.testing.assert_array_equal(prep.transform_batch((np.array([7]), np.array([[-1, 11]]))), [want])


@pytest.mark.parametrize(
    "space", [TUPLE_SPACE, DICT_SPACE, NESTED_SPACE, Dict({"img": Box(0, 1, (4, 4, 2)), "d": Discrete(2)})]
)
def test_batch_transform_matches_reference_and_rows(space):
    space.seed(3)
    rows = [space.sample() for _ in range(6)]
    prep = get_preprocessor(space)(space)
    from rlpolicy.policy._obs_prep import stack_rows

    batch = prep.transform_batch(stack_rows(rows, space))
    assert batch.shape == (6, prep.size) and batch.dtype == np.float32
    for i, row in enumerate(rows):
        np.testing.assert_allclose(batch[i], np_flatten(row, space), atol=0)
        np.testing.assert_allclose(batch[i], prep.transform(row), atol=0)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"a": np.zeros((1, 2, 3)), "b": np.zeros((1, 4))}, r"missing \['c'\]"),
        (
            {"a": np.zeros((1, 3, 2)), "b": np.zeros((1, 4)), "c": np.zeros(1)},
            r"observation\['a'\]: expected shape \(1, 2, 3\)",
        ),
        (
            {"a": np.zeros((1, 2, 3)), "b": np.zeros((1, 4)), "c": np.array([7])},
            r"observation\['c'\]: row 0 holds \[7\], outside Discrete\(5\)",
        ),
        (
            {"a": np.zeros((1, 2, 3)), "b": np.zeros((1, 4)), "c": np.array([1.5])},
            r"observation\['c'\]: values of Discrete\(5\) must be integers",
        ),
    ],
)
def test_batch_transform_errors_name_the_path(bad, match):
    prep = get_preprocessor(DICT_SPACE)(DICT_SPACE)
    with pytest.raises(ValueError, match=match):
        prep.transform_batch(bad)


# ---------------------------------------------------------------- policies


def _make(framework, obs_space, action_space=Discrete(3), config=None):
    cfg = {
        "model": {"fcnet_hiddens": [16]},
        "train_batch_size": 8,
        "sgd_minibatch_size": 8,
        "num_sgd_iter": 1,
        **(config or {}),
    }
    if framework == "torch":
        from rlpolicy.agents.ppo import PPOTorchPolicy

        return PPOTorchPolicy(obs_space, action_space, cfg)
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

    if framework == "tf":
        return PPOTFPolicy(obs_space, action_space, {**cfg, "framework": "tf"})
    return PPOTFPolicy.as_eager()(obs_space, action_space, {**cfg, "framework": "tf2"})


FRAMEWORKS = ["torch", "tf", "tf2"]
SPACES = {"tuple": TUPLE_SPACE, "dict": DICT_SPACE, "nested": NESTED_SPACE}


@pytest.fixture(scope="module")
def policies():
    cache = {}

    def get(framework, name):
        if (framework, name) not in cache:
            cache[(framework, name)] = _make(framework, SPACES[name])
        return cache[(framework, name)]

    return get


def _samples(space, n, seed=0):
    space.seed(seed)
    return [space.sample() for _ in range(n)]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", list(SPACES))
def test_raw_nested_obs_act_like_flat_reference(policies, framework, name):
    space = SPACES[name]
    policy = policies(framework, name)
    width = len(np_flatten(space.sample(), space))
    assert isinstance(policy.observation_space, Box)
    assert policy.observation_space.shape == (width,)
    assert policy.observation_space.original_space is space
    rows = _samples(space, 7)
    flat = np.stack([np_flatten(r, space) for r in rows])
    want, _, fetch = policy.compute_actions(flat, explore=False)
    # A list of raw observations, and the stacked structure, give the same actions.
    got, _, fetch_list = policy.compute_actions(rows, explore=False)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(fetch_list["action_dist_inputs"], fetch["action_dist_inputs"], atol=ATOL)
    from rlpolicy.policy._obs_prep import stack_rows

    got, _, _ = policy.compute_actions(stack_rows(rows, space), explore=False)
    np.testing.assert_array_equal(got, want)
    for i in (0, 6):
        action, _, _ = policy.compute_single_action(rows[i], explore=False)
        assert int(action) == int(want[i])
        action, _, _ = policy.compute_single_action(rows[i], explore=True)
        assert policy.action_space.contains(np.int64(action))
    logp_raw = policy.compute_log_likelihoods(want, rows)
    logp_flat = policy.compute_log_likelihoods(want, flat)
    np.testing.assert_allclose(logp_raw, logp_flat, atol=ATOL)


def _train_batch(policy, rows, space):
    actions, _, fetch = policy.compute_actions(rows, explore=True)
    n = len(rows)
    return SampleBatch(
        {
            "obs": rows,
            "new_obs": rows,
            "actions": actions,
            "rewards": np.ones(n, np.float32),
            "dones": np.zeros(n, bool),
            "action_logp": fetch["action_logp"],
            "action_dist_inputs": fetch["action_dist_inputs"],
            "vf_preds": fetch["vf_preds"],
            "advantages": np.linspace(-1, 1, n).astype(np.float32),
            "value_targets": np.ones(n, np.float32),
        }
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_learn_on_raw_nested_batch_equals_flat_batch(framework):
    space = DICT_SPACE
    a, b = _make(framework, space), _make(framework, space)
    b.set_weights(a.get_weights())
    rows = _samples(space, 8, seed=1)
    flat = np.stack([np_flatten(r, space) for r in rows]).astype(np.float32)
    from rlpolicy.policy._obs_prep import stack_rows

    raw_batch = _train_batch(a, rows, space)
    raw_batch["obs"] = raw_batch["new_obs"] = stack_rows(rows, space)
    flat_batch = SampleBatch({**{k: raw_batch[k] for k in raw_batch.keys()}, "obs": flat, "new_obs": flat})
    stats_a = a.learn_on_batch(raw_batch)["learner_stats"]
    stats_b = b.learn_on_batch(flat_batch)["learner_stats"]
    assert np.isfinite(stats_a["total_loss"])
    np.testing.assert_allclose(stats_a["total_loss"], stats_b["total_loss"], rtol=1e-5, atol=1e-5)
    for wa, wb in zip(_flat_weights(a), _flat_weights(b)):
        np.testing.assert_allclose(wa, wb, rtol=1e-5, atol=1e-6)


def _flat_weights(policy):
    import tree

    w = policy.get_weights()
    return [np.asarray(x) for x in tree.flatten(w)]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bad_nested_obs_named_and_state_unchanged(policies, framework):
    policy = policies(framework, "dict")
    before = copy.deepcopy(_flat_weights(policy))
    step = policy.global_timestep
    good = DICT_SPACE.sample()
    with pytest.raises(ValueError, match=r"keys \['a', 'b'\] do not match"):
        policy.compute_single_action({"a": good["a"], "b": good["b"]})
    with pytest.raises(ValueError, match=r"observation\['a'\]: expected shape \(1, 2, 3\)"):
        policy.compute_single_action({**good, "a": np.zeros((3, 2), np.float32)})
    with pytest.raises(ValueError, match=r"outside Discrete\(5\)"):
        policy.compute_actions([{**good, "c": 9}])
    assert policy.global_timestep == step
    for w0, w1 in zip(before, _flat_weights(policy)):
        np.testing.assert_array_equal(w0, w1)


def test_image_part_goes_through_complex_input_net():
    pytest.importorskip("torch")
    space = Dict({"img": Box(0.0, 1.0, (10, 10, 3)), "d": Discrete(4)})
    policy = _make(
        "torch", space, config={"model": {"conv_filters": [[4, [3, 3], 2]], "post_fcnet_hiddens": [8]}}
    )
    assert type(policy.model).__name__ == "ComplexInputNetwork"
    rows = _samples(space, 3)
    flat = np.stack([np_flatten(r, space) for r in rows])
    want, _, _ = policy.compute_actions(flat, explore=False)
    got, _, _ = policy.compute_actions(rows, explore=False)
    np.testing.assert_array_equal(got, want)


def test_disable_preprocessor_api_keeps_raw_space():
    pytest.importorskip("torch")
    policy = _make(
        "torch",
        Dict({"a": Box(-1.0, 1.0, (3,)), "c": Discrete(5)}),
        config={"_disable_preprocessor_api": True},
    )
    assert isinstance(policy.observation_space, Dict)
    assert not hasattr(policy.observation_space, "original_space")


# ---------------------------------------------------------------- RolloutWorker agreement


class _LoggingDictEnv(gym.Env):
    observation_space = NESTED_SPACE
    action_space = Discrete(3)

    def __init__(self):
        self.seen = []
        self.observation_space.seed(0)

    def _obs(self):
        obs = self.observation_space.sample()
        self.seen.append(obs)
        return obs

    def reset(self, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(action)
        self.t += 1
        return self._obs(), 1.0, self.t >= 4, False, {}


@pytest.mark.parametrize("framework", ["torch", "tf2"])
def test_rollout_worker_preprocessing_agrees_with_the_policy(framework):
    from rlpolicy.evaluation.rollout_worker import RolloutWorker

    policy_cls = type(_make(framework, Discrete(2)))

    envs = []

    def creator(_):
        envs.append(_LoggingDictEnv())
        return envs[-1]

    worker = RolloutWorker(
        env_creator=creator,
        policy_spec=policy_cls,
        rollout_fragment_length=8,
        batch_mode="complete_episodes",
        policy_config={
            "model": {"fcnet_hiddens": [16]},
            "train_batch_size": 8,
            "sgd_minibatch_size": 8,
            "framework": framework,
        },
    )
    batch = worker.sample()
    env = envs[-1]
    # Every observation of the batch is the hand-flattened raw env observation.
    ref = [np_flatten(o, NESTED_SPACE) for o in env.seen]
    obs = np.asarray(batch["obs"])
    episode_starts = [0] + [i + 1 for i in np.nonzero(np.asarray(batch["dones"]))[0][:-1]]
    k, j = 0, 0
    for row in range(len(obs)):
        if row in episode_starts and row:
            k += 1  # skip the final observation of the previous episode
        np.testing.assert_allclose(obs[row], ref[row + k], atol=0)
        j = row
    assert j == len(obs) - 1
    # A policy built directly on the raw space is the worker's policy: same space and model.
    worker_policy = worker.get_policy()
    direct = _make(framework, NESTED_SPACE)
    assert direct.observation_space.shape == worker_policy.observation_space.shape
    assert type(direct.model) is type(worker_policy.model)
    direct.set_weights(worker_policy.get_weights())
    rows = _samples(NESTED_SPACE, 5, seed=7)
    a1, _, f1 = direct.compute_actions(rows, explore=False)
    a2, _, f2 = worker_policy.compute_actions(
        np.stack([np_flatten(r, NESTED_SPACE) for r in rows]), explore=False
    )
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(f1["vf_preds"], f2["vf_preds"], atol=ATOL)
    stats = worker_policy.learn_on_batch(batch)["learner_stats"]
    assert np.isfinite(stats["total_loss"])


def test_checkpoint_keeps_the_nested_space_and_its_key_order(tmp_path):
    pytest.importorskip("torch")
    import collections

    from rlpolicy.policy.policy import Policy

    # Keys deliberately out of sorted order: the flat layout follows the space's order.
    space = Dict(collections.OrderedDict([("z", Discrete(3)), ("a", Box(-1.0, 1.0, (2, 2)))]))
    policy = _make("torch", space)
    policy.export_checkpoint(str(tmp_path))
    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert list(restored.observation_space.original_space.spaces) == ["z", "a"]
    assert type(restored.model) is type(policy.model)
    rows = _samples(space, 4, seed=2)
    np.testing.assert_allclose(np_flatten(rows[0], space)[:3], np.eye(3)[rows[0]["z"]], atol=0)
    a1, _, f1 = policy.compute_actions(rows, explore=False)
    a2, _, f2 = restored.compute_actions(rows, explore=False)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(f1["vf_preds"], f2["vf_preds"], atol=ATOL)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_discrete_obs_start_offsets_match_zero_based_space(framework):
    # Same weights: Discrete(3, start=5) observations 5..7 act like Discrete(3)'s 0..2.
    shifted = _make(framework, Tuple((Discrete(3, start=5), MultiDiscrete([2, 3], start=[-1, 4]))))
    plain = _make(framework, Tuple((Discrete(3), MultiDiscrete([2, 3]))))
    plain.set_weights(shifted.get_weights()) if framework in ("torch", "tf2") else None  # (eager: a list)
    if framework == "tf":  # graph weight names carry the policy's own scope
        plain.set_weights(dict(zip(plain.get_state()["weights"], shifted.get_state()["weights"].values())))
    rows = [(5, np.array([-1, 4])), (7, np.array([0, 6])), (6, np.array([0, 5]))]
    zero = [(0, np.array([0, 0])), (2, np.array([1, 2])), (1, np.array([1, 1]))]
    _, _, f1 = shifted.compute_actions(rows, explore=False)
    _, _, f2 = plain.compute_actions(zero, explore=False)
    np.testing.assert_allclose(f1["action_dist_inputs"], f2["action_dist_inputs"], atol=ATOL)
    top = _make(framework, Discrete(4, start=-2))
    _, _, f3 = top.compute_actions(np.array([-2, 1]), explore=False)
    assert np.all(np.isfinite(f3["action_dist_inputs"]))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_postprocess_raw_nested_batch_equals_flat(policies, framework):
    from rlpolicy.policy._obs_prep import stack_rows

    policy = policies(framework, "nested")
    rows = _samples(NESTED_SPACE, 5, seed=9)
    flat = np.stack([np_flatten(r, NESTED_SPACE) for r in rows]).astype(np.float32)
    actions, _, fetch = policy.compute_actions(flat, explore=False)
    common = {
        "actions": actions,
        "rewards": np.arange(5, dtype=np.float32),
        "dones": np.array([0, 0, 0, 0, 0], bool),
        "vf_preds": fetch["vf_preds"],
        "action_logp": fetch["action_logp"],
        "action_dist_inputs": fetch["action_dist_inputs"],
    }
    raw = policy.postprocess_trajectory(
        SampleBatch(
            {**common, "obs": stack_rows(rows, NESTED_SPACE), "new_obs": stack_rows(rows, NESTED_SPACE)}
        )
    )
    ref = policy.postprocess_trajectory(SampleBatch({**common, "obs": flat, "new_obs": flat}))
    np.testing.assert_allclose(np.asarray(raw["obs"]), flat, atol=0)
    np.testing.assert_allclose(raw["advantages"], ref["advantages"], atol=ATOL)
    np.testing.assert_allclose(raw["value_targets"], ref["value_targets"], atol=ATOL)
