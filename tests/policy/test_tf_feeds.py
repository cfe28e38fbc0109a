"""TFPolicy's feed dicts (policy._tf.feeds and the feed-building methods) and its
RLlib 1.11 attributes.

Checked on hand-built tf1 graphs: which placeholder each feed entry targets and
with what value, the errors that name the bad column or placeholders, and that
RLlib's attribute names are plain attributes the acting fetches follow.
"""

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.policy._tf.feeds import columns_needed_by, with_stats  # noqa: E402
from rlpolicy.policy._tf.variables import TFVariables  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_policy import TFPolicy  # noqa: E402
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


def _recurrent_policy(graph, explore=None):
    """A hand-built TFPolicy: obs [N, 2], one state input [N, 3], prev actions; the
    action is ``explore + timestep`` per row; loss -mean(sum(obs * w) * adv)."""
    gym = pytest.importorskip("gymnasium")
    obs, h, prev_a = _ph("obs"), _ph("h", (None, 3)), _ph("prev_a", (None,))
    seq = tf1.placeholder(tf.int32, [None], name="seq_lens")
    adv = _ph("adv", (None,))
    step = tf1.placeholder_with_default(tf.zeros((), tf.int64), (), name="timestep")
    explore = tf1.placeholder_with_default(True, (), name="is_exploring") if explore is None else explore
    flag = tf.cast(explore, tf.int64) if isinstance(explore, tf.Tensor) else tf.constant(0, tf.int64)
    action = tf.zeros_like(tf.cast(obs[:, 0], tf.int64)) + flag + step
    w = tf1.get_variable("w", (2,), initializer=tf1.zeros_initializer())
    loss = -tf.reduce_mean(tf.reduce_sum(obs * w, axis=1) * adv)
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    pol = TFPolicy(
        space,
        gym.spaces.Discrete(2),
        {},
        tf1.Session(graph=graph),
        obs,
        action,
        loss,
        [("obs", obs), ("advantages", adv), ("seq_lens", seq)],
        state_inputs=[h],
        state_outputs=[h],
        seq_lens=seq,
        prev_action_input=prev_a,
        explore=explore,
        timestep=step,
    )
    return pol, (obs, h, seq, prev_a, adv, explore, step)


def test_acting_feed_of_a_hand_built_policy_maps_columns_and_adds_unit_seq_lens(graph):
    pol, (obs, state, seq, prev_a, *_) = _recurrent_policy(graph)
    o, s, p = np.zeros((4, 2)), np.ones((4, 3)), np.arange(4.0)
    feed = pol._action_feed_dict({"obs": o, "state_in_0": s, "prev_actions": p, "infos": [None] * 4}, [])
    assert set(feed) == {obs, state, seq, prev_a}
    assert feed[obs] is o and feed[state] is s and feed[prev_a] is p
    np.testing.assert_array_equal(feed[seq], [1, 1, 1, 1])
    assert feed[seq].dtype == np.int32
    given = np.array([2, 2])
    assert pol._action_feed_dict({"obs": o, "state_in_0": s, "seq_lens": given}, [])[seq] is given


def test_acting_feed_rejects_a_wrong_number_of_state_columns_naming_the_placeholders(graph):
    pol, _ = _recurrent_policy(graph)
    two = {"obs": np.zeros((1, 2)), "state_in_0": np.zeros((1, 3)), "state_in_1": np.zeros((1, 3))}
    with pytest.raises(ValueError, match=r"placeholders \['h:0'\], got 2 state batch"):
        pol._action_feed_dict(two, [])
    with pytest.raises(ValueError, match="got 0 state batch"):
        pol._action_feed_dict({"obs": np.zeros((1, 2))}, [])


def test_acting_feed_with_placeholder_columns_feeds_only_the_needed_ones(graph):
    obs, rew, unused = _ph("obs"), _ph("rew", (None,)), _ph("unused")
    out = tf.reduce_sum(obs, axis=1) + rew
    placeholders = {"obs": obs, "rewards": rew, "other": unused}
    assert columns_needed_by(placeholders, [out]) == {"obs", "rewards"}
    from tf_graph_policies import ACT, OBS, PGGraphPolicy, config

    policy = PGGraphPolicy(OBS, ACT, config())
    o = np.ones((3, 3), np.float32)
    feed = policy._action_feed_dict({"obs": o, "rewards": np.arange(3.0)}, [policy._sampled_action])
    assert list(feed.values()) == [o] and list(feed) == [policy._obs_input]


def test_flags_feed_a_placeholder_explore_and_the_timestep_but_not_a_python_bool(graph):
    pol, _ = _recurrent_policy(graph)
    o, h = np.zeros((2, 2), np.float32), [np.zeros((2, 3), np.float32)]
    assert pol.compute_actions(o, h, explore=True, timestep=5)[0].tolist() == [6, 6]
    assert pol.compute_actions(o, h, explore=False, timestep=7)[0].tolist() == [7, 7]
    with tf1.Graph().as_default() as g2:
        fixed, _ = _recurrent_policy(g2, explore=False)
        assert fixed._is_exploring is False and fixed.exploration is None
        assert fixed.compute_actions(o, h, explore=True, timestep=3)[0].tolist() == [3, 3]


def test_loss_input_dicts_split_rnn_inputs_and_name_state_columns(graph):
    pol, (obs, h, seq, _, adv, *_) = _recurrent_policy(graph)
    assert pol._loss_input_dict_no_rnn == {"obs": obs, "advantages": adv}
    assert pol._loss_input_dict == {"obs": obs, "advantages": adv, "seq_lens": seq, "state_in_0": h}
    assert [n for n, _ in pol._tower_inputs()] == ["obs", "advantages", "state_in_0", "seq_lens"]
    assert [t for _, t in pol._tower_inputs()] == [obs, adv, h, seq]


def test_loss_feed_maps_columns_and_names_a_missing_one(graph):
    pol, (obs, h, seq, _, adv, *_) = _recurrent_policy(graph)
    o, a, s, lens = np.zeros((2, 2)), np.ones(2), np.zeros((1, 3)), np.array([2])
    padded = {"_zero_padded": True, "_max_seq_len": 2}
    feed = pol._get_loss_inputs_dict(
        SampleBatch({"obs": o, "advantages": a, "state_in_0": s, "seq_lens": lens, "extra": a}, **padded),
        False,
    )
    assert set(feed) == {obs, adv, h, seq}
    assert feed[obs] is o and feed[adv] is a and feed[h] is s and feed[seq] is lens
    with pytest.raises(ValueError, match="no column 'advantages'"):
        pol._get_loss_inputs_dict(SampleBatch({"obs": o, "state_in_0": s, "seq_lens": lens}, **padded), False)
    with pytest.raises(ValueError, match="no column 'seq_lens'"):
        pol._get_loss_inputs_dict(SampleBatch({"obs": o, "advantages": a, "state_in_0": s}, **padded), False)


def test_with_stats_merges_stats_under_the_learner_stats_key():
    merged = with_stats({"learner_stats": {"a": 1}, "x": 2}, {"a": 0, "b": 3})
    assert merged == {"learner_stats": {"a": 1, "b": 3}, "x": 2}  # the extra fetches win
    with pytest.raises(ValueError, match="must return a 'learner_stats' entry"):
        with_stats({"x": 1}, {})


def test_tf_variables_check_names_the_bad_entry_and_assigns_nothing(graph):
    a = tf1.get_variable("a", shape=(2, 3), initializer=tf1.zeros_initializer())
    b = tf1.get_variable("b", shape=(4,), initializer=tf1.zeros_initializer())
    sess = tf1.Session(graph=graph)
    sess.run(tf1.global_variables_initializer())
    holder = TFVariables([a, b], sess)
    values = [np.ones((2, 3)), np.ones(4)]
    assert list(holder.checked(values)) == ["a", "b"]
    with pytest.raises(ValueError, match=r"^where got a list of 1 values for 2 variables"):
        holder.checked([np.ones((2, 3))], "where")
    with pytest.raises(ValueError, match=r"'b' has shape \(3,\), the model's is \(4,\)"):
        holder.set_weights([np.ones((2, 3)), np.ones(3)])
    with pytest.raises(ValueError, match=r"missing keys \['b'\], unknown keys \['z'\]"):
        holder.set_weights({"a": np.ones((2, 3)), "z": 1})
    with pytest.raises(ValueError, match="none of the keys"):
        holder.set_weights({"z": 1})
    np.testing.assert_array_equal(holder.get_weights()["a"], np.zeros((2, 3)))  # nothing assigned
    holder.set_weights({"a": np.ones((2, 3)), "b": np.full(4, 2.0)})
    np.testing.assert_array_equal(holder.get_weights()["b"], np.full(4, 2.0))


def test_rllib_attributes_are_plain_and_the_acting_fetches_follow_them():
    from tf_graph_policies import ACT, OBS, PGGraphPolicy, config

    policy = PGGraphPolicy(OBS, ACT, config())
    assert "_obs_input" in vars(policy) and "_loss_input_dict" in vars(policy)
    assert policy.get_placeholder("obs") is policy._obs_input
    policy._sampled_action_logp = None
    _, _, extra = policy.compute_actions(np.zeros((2, 3), np.float32))
    assert "action_logp" not in extra and "action_prob" not in extra
    assert extra["action_dist_inputs"].shape == (2, 2)
