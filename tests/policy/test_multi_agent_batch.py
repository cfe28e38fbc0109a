"""MultiAgentBatch: counts, wrapping, concat, lockstep timeslices, copies, compression."""

import numpy as np
import pytest

from rlpolicy.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch, concat_samples


def _agent_batch(eps, ts, agent, values):
    n = len(ts)
    return SampleBatch(
        {
            "eps_id": np.full(n, eps),
            "t": np.array(ts),
            "agent_index": np.full(n, agent),
            "obs": np.array(values, dtype=np.float32),
        }
    )


@pytest.fixture
def three_agents():
    # agent1 acts at t=1,2,3; agent2 at t=1,3; agent3 only at t=3 (all in episode 0)
    return MultiAgentBatch(
        {
            "p1": _agent_batch(0, [1, 2, 3], 0, [11, 12, 13]),
            "p2": concat_samples([_agent_batch(0, [1, 3], 1, [21, 23]), _agent_batch(0, [3], 2, [33])]),
        },
        env_steps=3,
    )


def test_counts(three_agents):
    assert three_agents.env_steps() == 3 == three_agents.count == len(three_agents)
    assert three_agents.agent_steps() == 6
    assert three_agents["p1"] is three_agents.policy_batches["p1"]


def test_constructor_rejects_non_sample_batch():
    with pytest.raises(ValueError, match=r"policy_batches\['p'\] is a dict, expected a SampleBatch"):
        MultiAgentBatch({"p": {"obs": np.zeros(2)}}, env_steps=2)


def test_wrap_as_needed():
    b = SampleBatch({"a": np.zeros(2)})
    assert MultiAgentBatch.wrap_as_needed({DEFAULT_POLICY_ID: b}, 2) is b
    wrapped = MultiAgentBatch.wrap_as_needed({"other": b}, 2)
    assert isinstance(wrapped, MultiAgentBatch) and wrapped.env_steps() == 2
    two = MultiAgentBatch.wrap_as_needed({DEFAULT_POLICY_ID: b, "x": b}, 5)
    assert isinstance(two, MultiAgentBatch)


def test_timeslices_lockstep(three_agents):
    ones = three_agents.timeslices(1)
    assert [s.env_steps() for s in ones] == [1, 1, 1]
    assert ones[0]["p1"]["obs"].tolist() == [11] and ones[0]["p2"]["obs"].tolist() == [21]
    assert list(ones[1].policy_batches) == ["p1"] and ones[1]["p1"]["obs"].tolist() == [12]
    assert ones[2]["p1"]["obs"].tolist() == [13] and ones[2]["p2"]["obs"].tolist() == [23, 33]
    twos = three_agents.timeslices(2)
    assert [s.env_steps() for s in twos] == [2, 1]
    assert twos[0]["p1"]["obs"].tolist() == [11, 12] and twos[0]["p2"]["obs"].tolist() == [21]
    assert twos[1].agent_steps() == 3
    with pytest.raises(ValueError, match=r"k must be an int >= 1"):
        three_agents.timeslices(0)
    with pytest.raises(ValueError, match=r"lacks columns \['eps_id', 't', 'agent_index'\]"):
        MultiAgentBatch({"p": SampleBatch({"obs": np.zeros(2)})}, 2).timeslices(1)


def test_concat_samples(three_agents):
    both = MultiAgentBatch.concat_samples([three_agents, three_agents])
    assert both.env_steps() == 6 and both.agent_steps() == 12
    assert both["p1"]["obs"].tolist() == [11, 12, 13, 11, 12, 13]
    via_module = concat_samples([three_agents, SampleBatch({"obs": np.array([1.0])})])
    assert set(via_module.policy_batches) == {"p1", "p2", DEFAULT_POLICY_ID}
    with pytest.raises(ValueError, match=r"can only concat SampleBatch\|MultiAgentBatch objects, not int"):
        MultiAgentBatch.concat_samples([three_agents, 3])


def test_copy_is_deep(three_agents):
    c = three_agents.copy()
    c["p1"]["obs"][0] = -1
    assert three_agents["p1"]["obs"][0] == 11 and c.env_steps() == 3


def test_size_bytes_and_compress(three_agents):
    assert three_agents.size_bytes() == sum(b.size_bytes() for b in three_agents.policy_batches.values())
    expected = three_agents["p2"]["obs"].copy()
    three_agents.compress(bulk=True, columns={"obs"})
    assert isinstance(dict.__getitem__(three_agents["p2"], "obs"), bytes)
    three_agents.decompress_if_needed(columns={"obs"})
    np.testing.assert_array_equal(three_agents["p2"]["obs"], expected)
    assert three_agents.as_multi_agent() is three_agents


def test_repr(three_agents):
    assert repr(three_agents).startswith("MultiAgentBatch({'p1': SampleBatch(3:")
    assert repr(three_agents).endswith("env_steps=3)")


def test_pickle_round_trip(three_agents):
    import pickle

    back = pickle.loads(pickle.dumps(three_agents))
    assert isinstance(back, MultiAgentBatch) and back.env_steps() == 3
    assert back["p2"]["obs"].tolist() == [21, 23, 33]


def test_timeslices_add_a_fresh_unroll_id_per_built_batch(three_agents):
    first = three_agents.timeslices(1)
    second = three_agents.timeslices(2)
    ids = []
    for ma in first + second:
        for pid, batch in ma.policy_batches.items():
            col = batch["unroll_id"]
            assert col.shape == (len(batch),) and col.dtype == np.int64, pid
            assert len(set(col.tolist())) == 1  # one id for all rows of a built batch
            ids.append(int(col[0]))
    # 3 slices (2 + 1 + 2 policy batches) and 2 slices (2 + 2): every batch has its own id,
    # also across the two calls.
    assert len(ids) == 9 and len(set(ids)) == 9


def test_timeslices_keep_existing_unroll_ids(three_agents):
    for pid, batch in three_agents.policy_batches.items():
        batch["unroll_id"] = np.full(len(batch), 7 if pid == "p1" else 8)
    ones = three_agents.timeslices(1)
    assert ones[0]["p1"]["unroll_id"].tolist() == [7] and ones[2]["p2"]["unroll_id"].tolist() == [8, 8]
