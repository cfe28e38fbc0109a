"""rlpolicy.utils.test_utils, used as RLlib 1.11's own unit tests use ray.rllib.utils.test_utils.

Expected outcomes are hand-worked (which comparisons must pass or fail, which
frameworks a loop must visit, which actions are outside a space).
"""

import copy
import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.policy.policy import Policy
from rlpolicy.utils.test_utils import (
    check,
    check_compute_single_action,
    check_learning_achieved,
    check_train_results,
    framework_iterator,
)

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX_ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
DISCRETE_ACT = gym.spaces.Discrete(3)
SMALL_MODEL = {"fcnet_hiddens": [8]}
LSTM_MODEL = {
    "fcnet_hiddens": [8],
    "use_lstm": True,
    "lstm_cell_size": 4,
    "max_seq_len": 4,
    "lstm_use_prev_action": True,
    "lstm_use_prev_reward": True,
}


# ----------------------------------------------------------------------------------------
# check
# ----------------------------------------------------------------------------------------

NESTED = {
    "a": [1, 2.5, np.array([0.1, 0.2], np.float32)],
    "b": (None, "x", True),
    "c": {"d": np.zeros((2, 2)), "e": np.array(["u", "v"])},
}


def _nested_copy(eps=0.0):
    return {
        "a": [1, 2.5 + eps, np.array([0.1, 0.2], np.float64)],
        "b": (None, "x", True),
        "c": {"d": np.zeros((2, 2)) + eps, "e": np.array(["u", "v"])},
    }


def test_check_nested_structures_pass_and_fail():
    check(NESTED, _nested_copy())
    check(NESTED, _nested_copy(eps=1e-7))  # below 5 decimals
    with pytest.raises(AssertionError, match=r"x\['a'\]\[1\] and y\['a'\]\[1\] differ"):
        check(NESTED, _nested_copy(eps=1e-3))


@pytest.mark.parametrize(
    "x, y, match",
    [
        ({"a": 1}, {"a": 1, "b": 2}, r"y has key\(s\) \['b'\] that x lacks"),
        ({"a": 1, "b": 2}, {"a": 1}, r"y lacks x's key\(s\) \['b'\]"),
        ({"a": {"b": 1}}, {"a": [1]}, r"x\['a'\] is a dict but y\['a'\] is a list"),
        ([1, 2], [1, 2, 3], r"x has length 2 but y has length 3"),
        ([1, 2], np.array([1, 2]), r"x is a list but y is a ndarray"),
        ((1, "s"), (1, "t"), r"x\[1\] \('s'\) is not the same as y\[1\] \('t'\)"),
        ({"k": [True]}, {"k": [False]}, r"x\['k'\]\[0\] \(True\) is not the same as"),
        (3, 4, r"x \(3\) is not the same as y \(4\)"),
        (None, 0.0, r"x \(None\) is not the same as y \(0.0\)"),
        (np.array(["a", "b"]), np.array(["a", "c"]), r"x and y differ"),
    ],
)
def test_check_mismatches_name_where(x, y, match):
    with pytest.raises(AssertionError, match=match):
        check(x, y)


def test_check_decimals_vs_atol_rtol():
    # assert_almost_equal's rule: |x - y| < 1.5 * 10**-decimals.
    check(1.0, 1.000001)
    with pytest.raises(AssertionError):
        check(1.0, 1.0001)
    check(1.0, 1.0001, decimals=3)
    with pytest.raises(AssertionError):
        check(1.0, 1.02, decimals=2)
    # atol/rtol replace decimals.
    check(1.0, 1.05, decimals=5, atol=0.1)
    with pytest.raises(AssertionError):
        check(1.0, 1.05, atol=0.01)
    check(100.0, 101.0, rtol=0.02)
    with pytest.raises(AssertionError):
        check(100.0, 101.0, rtol=0.001)
    # atol alone: rtol defaults to 1e-7, so 1e6 vs 1e6+1 needs atol >= ~0.9.
    with pytest.raises(AssertionError):
        check(1e6, 1e6 + 1, atol=0.5)
    check(np.array([1e6]), np.array([1e6 + 1]), atol=0.95)


@pytest.mark.parametrize(
    "x, y",
    [
        (1.0, 2.0),
        (np.array([1.0, 2.0]), np.array([1.0, 2.1])),
        (True, False),
        ("a", "b"),
        (None, 1),
        (3, 4),
        ({"a": [1.0]}, {"a": [1.5]}),
        (np.array(["a"]), np.array(["b"])),
    ],
)
def test_check_false_passes_on_different_values_and_fails_on_equal(x, y):
    check(x, y, false=True)
    with pytest.raises(AssertionError, match="is the same as"):
        check(x, x, false=True)


def test_check_int_against_array_compares_numerically():
    check(2, np.array([2.0, 2.0]))
    with pytest.raises(AssertionError):
        check(2, np.array([2.0, 2.1]))


def test_check_torch_tensors():
    torch = pytest.importorskip("torch")
    w = torch.tensor([0.5, -1.25], requires_grad=True)
    check(w * 2, np.array([1.0, -2.5]))
    check(np.array([1.0, -2.5]), w * 2)
    check({"w": [w]}, {"w": [torch.tensor([0.5, -1.25])]})
    check(w, np.array([0.5, -1.0]), false=True)
    with pytest.raises(AssertionError, match=r"x\['w'\]\[0\] and y\['w'\]\[0\] differ"):
        check({"w": [w]}, {"w": [np.array([0.5, -1.0])]})


@pytest.mark.tf
def test_check_tf_eager_tensors_and_variables(tf_modules):
    _, tf = tf_modules
    for _ in framework_iterator(frameworks="tf2"):
        v = tf.Variable([1.0, 2.0])
        check(v, np.array([1.0, 2.0]))
        check(tf.constant([[3.0]]) * 2, [[6.0]])
        check(np.array([1.0, 2.0]), v)  # an eager y is allowed
        with pytest.raises(AssertionError, match="differ"):
            check(v * 1.5, np.array([1.0, 2.0]))
        check(v * 1.5, np.array([1.0, 2.0]), false=True)


@pytest.mark.tf
def test_check_tf_graph_tensors_use_the_session(tf_modules):
    tf1, _ = tf_modules
    for _fw, sess in framework_iterator(frameworks="tf", session=True):
        var = tf1.get_variable("v", initializer=np.array([1.0, 2.0], np.float32))
        sess.run(tf1.global_variables_initializer())
        check(var * 3.0, np.array([3.0, 6.0]))  # runs in the default (initialised) session
        with pytest.raises(ValueError, match="must not be a TF graph tensor"):
            check(np.array([3.0, 6.0]), var * 3.0)
    for _ in framework_iterator(frameworks="tf"):  # no session: a new one on the graph
        check(tf1.constant([1.0, 2.0]) + 1.0, [2.0, 3.0])


# ----------------------------------------------------------------------------------------
# framework_iterator
# ----------------------------------------------------------------------------------------


def test_framework_iterator_default_order_and_config(tf_modules):
    pytest.importorskip("torch")
    config = {"num_gpus": 2, "_fake_gpus": True, "model": {"fcnet_hiddens": [4]}, "lr": 0.1}
    seen = []
    for fw in framework_iterator(config):
        assert config["framework"] == fw
        assert config["num_gpus"] == 2 and config["_fake_gpus"] is True
        seen.append(fw)
    # "tfe" is dropped in favour of "tf2" on TF 2 (1.11).
    assert seen == ["tf2", "tf", "torch"]
    # Untouched keys; "framework" keeps the last value (as 1.11).
    assert config == {
        "num_gpus": 2,
        "_fake_gpus": True,
        "model": {"fcnet_hiddens": [4]},
        "lr": 0.1,
        "framework": "torch",
    }


def test_framework_iterator_modes(tf_modules):
    _, tf = tf_modules
    before = tf.executing_eagerly()
    modes = {}
    for fw in framework_iterator(frameworks=("tf", "tfe", "tf2")):
        modes[fw] = tf.executing_eagerly()
    # tf2 is asked for too, so "tfe" is dropped.
    assert modes == {"tf": False, "tf2": True}
    assert tf.executing_eagerly() is before
    assert [fw for fw in framework_iterator(frameworks="tfe")] == ["tfe"]
    for _ in framework_iterator(frameworks=["tfe"]):
        assert tf.executing_eagerly()


@pytest.mark.tf
def test_framework_iterator_graph_mode_uses_a_fresh_graph(tf_modules):
    tf1, tf = tf_modules
    outer = tf1.get_default_graph()
    graphs = []
    for _ in range(2):
        for _fw in framework_iterator(frameworks="tf"):
            assert not tf.executing_eagerly()
            graphs.append(tf1.get_default_graph())
            tf1.placeholder(tf.float32, [None, 2], name="obs")  # graph-only op works
    assert graphs[0] is not graphs[1] and outer not in graphs
    assert tf1.get_default_graph() is outer


@pytest.mark.tf
def test_framework_iterator_session(tf_modules):
    tf1, tf = tf_modules
    pytest.importorskip("torch")
    out = []
    for fw, sess in framework_iterator(frameworks=("tf", "tf2", "torch"), session=True):
        out.append((fw, sess is None))
        if fw == "tf":
            assert isinstance(sess, tf1.Session)
            assert tf1.get_default_session() is sess
            assert sess.graph is tf1.get_default_graph()
            assert sess.graph.seed == 42
            x = tf1.placeholder(tf.float32, [None])
            np.testing.assert_allclose(sess.run(x * 3.0, {x: [1.0, 2.0]}), [3.0, 6.0])
    assert out == [("tf", False), ("tf2", True), ("torch", True)]
    assert tf1.get_default_session() is None


def test_framework_iterator_eager_tracing_and_timing(tf_modules):
    pytest.importorskip("torch")
    config = {"eager_tracing": True}
    seen, times = [], {}
    for fw in framework_iterator(
        config, frameworks=("tf2", "tf", "torch"), with_eager_tracing=True, time_iterations=times
    ):
        seen.append((fw, config["eager_tracing"]))
    # 1.11: traced first, then untraced; tf and torch leave the key as it is.
    assert seen == [("tf2", True), ("tf2", False), ("tf", False), ("torch", False)]
    assert set(times) == {"tf2+tracing", "tf2", "tf", "torch"}
    assert all(t >= 0.0 for t in times.values())
    # Without the flag, the caller's eager_tracing stays as given.
    config = {"eager_tracing": True}
    assert [(fw, config["eager_tracing"]) for fw in framework_iterator(config, "tf2")] == [("tf2", True)]


def test_framework_iterator_context_exited_when_body_raises_or_breaks(tf_modules):
    tf1, tf = tf_modules
    outer, before = tf1.get_default_graph(), tf.executing_eagerly()
    with pytest.raises(RuntimeError, match="boom"):
        for _ in framework_iterator(frameworks="tf", session=True):
            raise RuntimeError("boom")
    assert tf1.get_default_graph() is outer and tf1.get_default_session() is None
    assert tf.executing_eagerly() is before
    for _fw in framework_iterator(frameworks=("tf", "tf2")):
        break  # leaving the loop early closes the generator, and with it the graph
    assert tf1.get_default_graph() is outer and tf.executing_eagerly() is before


def test_framework_iterator_skips_missing_and_rejects_unknown(monkeypatch, caplog):
    import rlpolicy.utils.test_utils as tu

    monkeypatch.setattr(tu, "try_import_torch", lambda error=False: (None, None))
    monkeypatch.setattr(tu, "try_import_tf", lambda error=False: (None, None, None))
    config = {}
    with caplog.at_level("WARNING", logger="rlpolicy.utils.test_utils"):
        assert list(framework_iterator(config)) == []
    assert "skipping torch" in caplog.text and "skipping tf" in caplog.text
    assert "framework" not in config
    with pytest.raises(ValueError, match=r"unknown framework\(s\) \['pytorch'\]"):
        list(framework_iterator(frameworks=("torch", "pytorch")))


# ----------------------------------------------------------------------------------------
# check_compute_single_action
# ----------------------------------------------------------------------------------------


def _pg_class(fw):
    if fw == "torch":
        from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy

        return PGTorchPolicy
    from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy

    return PGTFPolicy if fw == "tf" else PGTFPolicy.as_eager()


def _seed(fw):
    if fw == "torch":
        import torch

        torch.manual_seed(0)
    else:
        import tensorflow as tf

        tf.random.set_seed(0)


@pytest.mark.tf
def test_check_compute_single_action_on_pg_policies(tf_modules):
    """As RLlib 1.11's algorithm tests: loop frameworks, build, check."""
    pytest.importorskip("torch")
    # Seeded: an exploring Gaussian action beyond 3 in normalized space fails the check.
    config = {"model": SMALL_MODEL, "num_gpus": 0, "seed": 0}
    built = []
    for fw in framework_iterator(config, frameworks=("torch", "tf2", "tf"), with_eager_tracing=True):
        _seed(fw)
        OBS.seed(0)
        policy = _pg_class(fw)(OBS, BOX_ACT, dict(config))
        check_compute_single_action(policy, include_prev_action_reward=True)
        built.append((fw, policy.config.get("eager_tracing", False)))
    assert built == [("torch", False), ("tf2", True), ("tf2", False), ("tf", False)]


@pytest.mark.parametrize("fw", ["torch", "tf2"])
def test_check_compute_single_action_lstm_with_state(fw):
    pytest.importorskip("torch" if fw == "torch" else "tensorflow")
    config = {"model": LSTM_MODEL}
    for fw_ in framework_iterator(config, frameworks=fw):
        _seed(fw_)
        policy = _pg_class(fw_)(OBS, DISCRETE_ACT, config)
        check_compute_single_action(policy, include_state=True, include_prev_action_reward=True)


class RecordingRandomPolicy(Policy):
    """A 1.x-style plain Policy (like RLlib's examples/policy/random_policy.py, but
    deterministic when not exploring) that records every compute_actions call."""

    def __init__(self, observation_space, action_space, config, bad_action=None):
        super().__init__(observation_space, action_space, config)
        self.calls = []
        self.bad_action = bad_action
        self.view_requirements["state_in_0"] = self._state_vr()

    def _state_vr(self):
        from rlpolicy.policy.view_requirement import ViewRequirement

        return ViewRequirement("state_out_0", shift=-1, space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32))

    def get_initial_state(self):
        return [np.zeros(2, np.float32)]

    def compute_actions(
        self,
        obs_batch,
        state_batches=None,
        prev_action_batch=None,
        prev_reward_batch=None,
        info_batch=None,
        episodes=None,
        explore=None,
        timestep=None,
        **kwargs,
    ):
        self.calls.append(
            {
                "explore": explore,
                "state": state_batches,
                "prev_action": prev_action_batch,
                "prev_reward": prev_reward_batch,
            }
        )
        n = len(obs_batch)
        if self.bad_action is not None:
            actions = [self.bad_action for _ in range(n)]
        elif explore is False:  # deterministic when exploiting
            space = copy.deepcopy(self.action_space)
            space.seed(0)
            actions = [space.sample() for _ in range(n)]
        else:
            actions = [self.action_space.sample() for _ in range(n)]
        state_out = [np.asarray(s) + 0.5 for s in state_batches or []]
        return actions, state_out, {}

    def get_weights(self):
        return {}

    def set_weights(self, weights):
        pass


def test_check_compute_single_action_exercises_every_combination():
    policy = RecordingRandomPolicy(OBS, DISCRETE_ACT, {})
    check_compute_single_action(policy, include_state=True, include_prev_action_reward=True)
    assert {c["explore"] for c in policy.calls} == {True, False}
    assert all(len(c["state"]) == 1 and np.shape(c["state"][0]) == (1, 2) for c in policy.calls)
    assert all(np.shape(c["prev_action"]) == (1,) for c in policy.calls)
    np.testing.assert_allclose([c["prev_reward"][0] for c in policy.calls], 1.0)
    # Per explore value: the input-dict pair plus 7 unsquash/clip settings.
    assert len(policy.calls) == 2 * (2 + 7)

    policy = RecordingRandomPolicy(OBS, DISCRETE_ACT, {})
    check_compute_single_action(policy)
    assert all(not c["state"] and c["prev_action"] is None for c in policy.calls)


@pytest.mark.parametrize(
    "act_space, bad_action, config, match",
    [
        (DISCRETE_ACT, 7, {}, r"action \S*7\S* of RecordingRandomPolicy is not in the action space"),
        (gym.spaces.MultiDiscrete([2, 2]), np.array([0, 2]), {}, "is not in the action space"),
        # A normalized Box action must stay near [-1, 1].
        (
            BOX_ACT,
            np.array([10.0, 0.0], np.float32),
            {"normalize_actions": True},
            "should be in normalized space",
        ),
    ],
)
def test_check_compute_single_action_fails_on_out_of_space_actions(act_space, bad_action, config, match):
    policy = RecordingRandomPolicy(OBS, act_space, config, bad_action=bad_action)
    with pytest.raises(ValueError, match=match):
        check_compute_single_action(policy)


def test_check_compute_single_action_box_out_of_bounds_is_clipped_not_flagged():
    # 1.11: a raw Box action outside the bounds is fine unless clipping/unsquashing
    # was asked for, and those bring it inside.
    policy = RecordingRandomPolicy(
        OBS, BOX_ACT, {"normalize_actions": False}, bad_action=np.array([2.5, -2.5], np.float32)
    )
    check_compute_single_action(policy)


class MiniTrainer:
    """A trainer-like object as 1.11's Trainer presents itself to the check."""

    def __init__(self, policy, clip_ignored=False):
        self.policy_map = {"main": policy}
        self.workers = SimpleNamespace(local_worker=lambda: SimpleNamespace(policy_map=self.policy_map))
        self.clip_ignored = clip_ignored
        self.calls = []

    def get_policy(self, policy_id="default_policy"):
        return self.policy_map[policy_id]

    def compute_single_action(
        self,
        observation,
        state=None,
        *,
        prev_action=None,
        prev_reward=None,
        explore=None,
        timestep=None,
        unsquash_action=None,
        clip_action=None,
        policy_id="default_policy",
        full_fetch=False,
    ):
        from rlpolicy.utils.spaces.space_utils import clip_action as clip_fn
        from rlpolicy.utils.spaces.space_utils import unsquash_action as unsquash_fn

        policy = self.get_policy(policy_id)
        self.calls.append((policy_id, full_fetch, unsquash_action, clip_action))
        action, state_out, extra = policy.compute_single_action(
            observation,
            state,
            prev_action=prev_action,
            prev_reward=prev_reward,
            explore=explore,
            timestep=timestep,
        )
        unsquash = policy.config["normalize_actions"] if unsquash_action is None else unsquash_action
        clip = policy.config["clip_actions"] if clip_action is None else clip_action
        if unsquash:
            action = unsquash_fn(action, policy.action_space_struct)
        elif clip and not self.clip_ignored:
            action = clip_fn(action, policy.action_space_struct)
        return (action, state_out, extra) if state or full_fetch else action


def test_check_compute_single_action_with_a_trainer_like_object():
    policy = RecordingRandomPolicy(
        OBS, BOX_ACT, {"normalize_actions": False}, bad_action=np.array([2.5, 0.0], np.float32)
    )
    trainer = MiniTrainer(policy)
    check_compute_single_action(trainer, include_state=True)
    assert {c[0] for c in trainer.calls} == {"main"}
    assert {c[1] for c in trainer.calls} == {False, True}
    assert {(c[2], c[3]) for c in trainer.calls} == {
        (True, False),
        (False, True),
        (False, False),
        (False, None),
        (None, True),
        (None, False),
        (None, None),
    }
    with pytest.raises(ValueError, match="of MiniTrainer is not in the action space"):
        check_compute_single_action(MiniTrainer(policy, clip_ignored=True))


def test_check_compute_single_action_policy_attribute_and_bad_input():
    policy = RecordingRandomPolicy(OBS, DISCRETE_ACT, {})
    check_compute_single_action(SimpleNamespace(policy=policy))
    assert policy.calls
    with pytest.raises(ValueError, match="is not a Policy and has neither `get_policy"):
        check_compute_single_action(object())


# ----------------------------------------------------------------------------------------
# check_learning_achieved / check_train_results
# ----------------------------------------------------------------------------------------


def _trial(reward, eval_reward=None):
    result = {"episode_reward_mean": reward}
    if eval_reward is not None:
        result["evaluation"] = {"episode_reward_mean": eval_reward}
    return SimpleNamespace(last_result=result)


def test_check_learning_achieved_on_tune_style_results(capsys):
    results = SimpleNamespace(trials=[_trial(20.0, 10.0), _trial(160.0, 40.0)])
    check_learning_achieved(results, 150.0)  # the best trial counts
    assert "ok" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"^`stop-reward` of 161.0 not reached!$"):
        check_learning_achieved(results, 161.0)
    check_learning_achieved(results, 40.0, evaluation=True)
    with pytest.raises(ValueError, match="`stop-reward` of 41.0 not reached!"):
        check_learning_achieved(results, 41.0, evaluation=True)


def test_check_learning_achieved_on_result_dicts():
    from rlpolicy.cli.training import IterationResult

    check_learning_achieved({"episode_reward_mean": 5.0}, 5.0)
    check_learning_achieved([{"episode_reward_mean": 1.0}, {"episode_reward_mean": 9.0}], 8.0)
    it = IterationResult(3, 600, 12.0, 4, {}, 0.1)
    check_learning_achieved([it], 12.0)
    with pytest.raises(ValueError, match="`stop-reward` of 12.5 not reached!"):
        check_learning_achieved([it, _trial(3.0)], 12.5)
    # NaN (no episode finished yet) never counts as reached (1.11 passed it).
    with pytest.raises(ValueError, match="not reached"):
        check_learning_achieved([{"episode_reward_mean": math.nan}], -1e9)
    with pytest.raises(ValueError, match="no results"):
        check_learning_achieved([], 0.0)
    with pytest.raises(KeyError, match=r"result 1 has no result\['episode_reward_mean'\]"):
        check_learning_achieved([{"episode_reward_mean": 1.0}, {"reward": 2.0}], 0.0)
    with pytest.raises(KeyError, match=r"result\['evaluation'\]"):
        check_learning_achieved({"episode_reward_mean": 1.0}, 0.0, evaluation=True)


def _pg_learner_info():
    pytest.importorskip("torch")
    from rlpolicy.policy.sample_batch import SampleBatch
    from rlpolicy.utils.metrics.learner_info import LearnerInfoBuilder

    policy = _pg_class("torch")(OBS, DISCRETE_ACT, {"model": SMALL_MODEL})
    n = 8
    batch = SampleBatch(
        {
            "obs": np.zeros((n, 3), np.float32),
            "actions": np.arange(n) % 3,
            "rewards": np.ones(n, np.float32),
            "dones": np.zeros(n, bool),
            "advantages": np.ones(n, np.float32),
        }
    )
    builder = LearnerInfoBuilder()
    builder.add_learn_on_batch_results(policy.learn_on_batch(batch))
    return builder.finalize()


def test_check_train_results_on_a_policys_learner_info():
    learner = _pg_learner_info()
    results = {"info": {"learner": learner}, "config": {"train_batch_size": 8}}
    assert check_train_results(results) is results
    learner["default_policy"]["learner_stats"]["max_q"] = np.array([1.0, 2.0])
    with pytest.raises(AssertionError, match=r"\['learner_stats'\]\['max_q'\] is not a scalar"):
        check_train_results(results)


@pytest.mark.parametrize(
    "results, match",
    [
        ({}, "no 'info' dict"),
        ({"info": {}}, r"'learner' not in train_results\['info'\]"),
        ({"info": {"learner": {"default_policy": {"loss": 1.0}}}}, "'learner_stats' not in"),
        (
            {"info": {"learner": {"p1": {"learner_stats": {}}}}, "config": {"multiagent": {}}},
            "'default_policy' not found",
        ),
        (
            {
                "info": {"learner": {"default_policy": {"learner_stats": {}, "td_error": np.zeros(4)}}},
                "config": {"train_batch_size": 32, "model": {"max_seq_len": 4}, "burn_in": 0},
            },
            r"\['td_error'\] has 4 rows",
        ),
    ],
)
def test_check_train_results_rejects_bad_layouts(results, match):
    with pytest.raises(AssertionError, match=match):
        check_train_results(results)


def test_check_train_results_multi_agent_and_r2d2_layouts():
    stats = {"learner_stats": {"min_q": 0.5}}
    check_train_results(
        {
            "info": {"learner": {"p1": stats, "p2": stats, "batch_count": 3}},
            "config": {"multiagent": {"policies": {"p1": None, "p2": None}}},
        }
    )
    # R2D2: one td-error per sequence of max_seq_len + burn_in steps (32 / 8 = 4).
    check_train_results(
        {
            "info": {"learner": {"default_policy": {**stats, "td_error": np.zeros(4)}}},
            "config": {"train_batch_size": 32, "model": {"max_seq_len": 6}, "burn_in": 2},
        }
    )
