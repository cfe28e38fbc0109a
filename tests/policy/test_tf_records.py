"""policy._tf.records: the frozen tensor records of a graph-mode policy and their feeds.

Checked on hand-built tf1 graphs (no policy): which placeholder each feed entry
targets and with what value, the errors that name the bad column or
placeholders, and that assigning one of RLlib's attribute names on a TFPolicy
replaces its record instead of changing the old one.
"""

import dataclasses

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.policy._tf.records import (  # noqa: E402
    ActingGraph,
    LossGraph,
    columns_needed_by,
    with_stats,
)
from rlpolicy.policy._tf.variables import TFVariables  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()


@pytest.fixture()
def graph():
    g = tf1.Graph()
    with g.as_default():
        yield g


def _ph(name, shape=(None, 2), dtype=None):
    return tf1.placeholder(dtype or tf.float32, shape, name=name)


def test_acting_feed_of_a_hand_built_policy_maps_columns_and_adds_unit_seq_lens(graph):
    obs, state, seq, prev_a = (
        _ph("obs"),
        _ph("state_in_0", (None, 3)),
        tf1.placeholder(tf.int32, [None], name="seq_lens"),
        _ph("prev_a", (None,)),
    )
    acting = ActingGraph(obs=obs, state_inputs=[state], seq_lens=seq, prev_action=prev_a)
    o, s, p = np.zeros((4, 2)), np.ones((4, 3)), np.arange(4.0)
    feed = acting.feed({"obs": o, "state_in_0": s, "prev_actions": p, "infos": [None] * 4})
    assert set(feed) == {obs, state, seq, prev_a}
    assert feed[obs] is o and feed[state] is s and feed[prev_a] is p
    np.testing.assert_array_equal(feed[seq], [1, 1, 1, 1])
    assert feed[seq].dtype == np.int32
    given = np.array([2, 2])
    assert acting.feed({"obs": o, "state_in_0": s, "seq_lens": given})[seq] is given


def test_acting_feed_rejects_a_wrong_number_of_state_columns_naming_the_placeholders(graph):
    acting = ActingGraph(
        obs=_ph("obs"),
        state_inputs=[_ph("h", (None, 3)), _ph("c", (None, 3))],
        seq_lens=tf1.placeholder(tf.int32, [None], name="seq_lens"),
    )
    with pytest.raises(ValueError, match=r"placeholders \['h:0', 'c:0'\], got 1 state batch"):
        acting.feed({"obs": np.zeros((1, 2)), "state_in_0": np.zeros((1, 3))})
    with pytest.raises(ValueError, match="got 0 state batch"):
        acting.feed({"obs": np.zeros((1, 2))})


def test_acting_feed_with_placeholder_columns_feeds_only_the_needed_ones(graph):
    obs, rew, unused = _ph("obs"), _ph("rew", (None,)), _ph("unused")
    out = tf.reduce_sum(obs, axis=1) + rew
    placeholders = {"obs": obs, "rewards": rew, "other": unused}
    needed = columns_needed_by(placeholders, [out])
    assert needed == {"obs", "rewards"}
    o, r = np.ones((3, 2)), np.arange(3.0)
    feed = ActingGraph(obs=obs).feed({"obs": o, "rewards": r, "other": o}, placeholders, needed)
    assert set(feed) == {obs, rew}
    with tf1.Session(graph=graph) as sess:
        np.testing.assert_allclose(sess.run(out, feed), [2.0, 3.0, 4.0], atol=1e-6)


def test_flags_feed_feeds_a_placeholder_explore_but_not_a_python_bool(graph):
    explore = tf1.placeholder_with_default(True, (), name="is_exploring")
    step = tf1.placeholder_with_default(tf.zeros((), tf.int64), (), name="timestep")
    assert ActingGraph(is_exploring=explore, timestep=step).flags_feed(False, 7) == {explore: False, step: 7}
    assert ActingGraph(is_exploring=False, timestep=step).flags_feed(True, None) == {}
    assert ActingGraph(is_exploring=np.bool_(True), timestep=step).flags_feed(False, None) == {}
    assert ActingGraph(is_exploring=None).flags_feed(True, None) == {}


def test_loss_input_dicts_split_rnn_inputs_and_name_state_columns(graph):
    obs, adv = _ph("obs"), _ph("adv", (None,))
    h = _ph("h", (None, 3))
    seq = tf1.placeholder(tf.int32, [None], name="seq_lens")
    with_rnn, no_rnn = LossGraph.input_dicts([("obs", obs), ("advantages", adv), ("seq_lens", seq)], [h], seq)
    assert no_rnn == {"obs": obs, "advantages": adv}
    assert with_rnn == {"obs": obs, "advantages": adv, "seq_lens": seq, "state_in_0": h}
    loss = LossGraph(loss_input_dict=with_rnn, loss_input_dict_no_rnn=no_rnn, state_inputs=[h], seq_lens=seq)
    assert [n for n, _ in loss.tower_inputs()] == ["obs", "advantages", "state_in_0", "seq_lens"]
    assert [t for _, t in loss.tower_inputs()] == [obs, adv, h, seq]


def test_loss_feed_maps_columns_and_names_a_missing_one(graph):
    obs, adv = _ph("obs"), _ph("adv", (None,))
    loss = LossGraph(loss_input_dict={"obs": obs, "advantages": adv})
    o, a = np.zeros((2, 2)), np.ones(2)
    feed = loss.feed({"obs": o, "advantages": a, "extra": a})
    assert feed == {obs: o, adv: a}
    with pytest.raises(ValueError, match="no column 'advantages'"):
        loss.feed({"obs": o})
    h = _ph("h", (None, 3))
    seq = tf1.placeholder(tf.int32, [None], name="seq_lens")
    rnn = LossGraph(loss_input_dict={"obs": obs, "state_in_0": h}, state_inputs=[h], seq_lens=seq)
    with pytest.raises(ValueError, match="needs a 'seq_lens' column"):
        rnn.feed({"obs": o, "state_in_0": np.zeros((1, 3))})
    s = np.array([2])
    assert rnn.feed({"obs": o, "state_in_0": np.zeros((1, 3)), "seq_lens": s})[seq] is s


def test_with_stats_merges_stats_under_the_learner_stats_key():
    merged = with_stats({"learner_stats": {"a": 1}, "x": 2}, {"a": 0, "b": 3})
    assert merged == {"learner_stats": {"a": 1, "b": 3}, "x": 2}  # the extra fetches win
    with pytest.raises(ValueError, match="must return a 'learner_stats' entry"):
        with_stats({"x": 1}, {})


def test_records_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ActingGraph().obs = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        LossGraph().grads = []


def test_tf_variables_check_values_and_check_complete_name_the_bad_entry(graph):
    a = tf1.get_variable("a", shape=(2, 3), initializer=tf1.zeros_initializer())
    b = tf1.get_variable("b", shape=(4,), initializer=tf1.zeros_initializer())
    sess = tf1.Session(graph=graph)
    sess.run(tf1.global_variables_initializer())
    holder = TFVariables([a, b], sess)
    holder.check_values([np.ones((2, 3)), np.ones(4)])
    with pytest.raises(ValueError, match="got 1 values for 2 variables"):
        holder.check_values([np.ones((2, 3))])
    with pytest.raises(ValueError, match=r"'b' has shape \(3,\), the variable's is \(4,\)"):
        holder.check_values([np.ones((2, 3)), np.ones(3)])
    with pytest.raises(ValueError, match=r"missing keys \['b'\], unknown keys \['z'\]"):
        holder.check_complete({"a": np.ones((2, 3)), "z": 1})
    holder.check_complete({"a": np.ones((2, 3)), "b": np.ones(4)})
    np.testing.assert_array_equal(holder.get_weights()["a"], np.zeros((2, 3)))  # checks assign nothing


def test_assigning_an_rllib_attribute_replaces_the_policys_record():
    from tf_graph_policies import ACT, OBS, PGGraphPolicy, config

    policy = PGGraphPolicy(OBS, ACT, config())
    before = policy._acting
    obs = policy._obs_input
    assert obs is before.obs and policy.loss_graph.loss_input_dict is policy._loss_input_dict
    policy._sampled_action_logp = None
    assert policy._acting is not before and policy._acting.sampled_action_logp is None
    assert before.sampled_action_logp is not None  # the old record is unchanged
    assert policy._acting.obs is obs
    # the acting fetches follow the record: no logp/prob fetched any more
    _, _, extra = policy.compute_actions(np.zeros((2, 3), np.float32))
    assert "action_logp" not in extra and "action_prob" not in extra
    assert extra["action_dist_inputs"].shape == (2, 2)


def test_assigning_before_init_starts_a_record_of_its_own():
    # DynamicTFPolicy assigns _state_inputs / _seq_lens before TFPolicy.__init__ runs.
    from rlpolicy.policy.tf_policy import TFPolicy

    a, b = TFPolicy.__new__(TFPolicy), TFPolicy.__new__(TFPolicy)
    a._seq_lens = "seq"
    a._state_inputs.append("h")  # the list of a's own record, not the class default's
    assert a._state_inputs == ["h"] and a._seq_lens == "seq"
    assert b._state_inputs == [] and b._seq_lens is None and TFPolicy._acting.state_inputs == []
    a._apply_op = "op"
    a._optimizers.append("opt")
    assert b._optimizers == [] and TFPolicy._loss_graph.optimizers == []
