"""SampleBatchBuilder / MultiAgentSampleBatchBuilder as RLlib 1.x offline writers and unit
tests use them: rows in, column batches out (hand-worked values)."""

import gymnasium as gym
import numpy as np
import pytest
from sampling_policies import ActOnlyPolicy

from rlpolicy.agents.callbacks import DefaultCallbacks
from rlpolicy.evaluation.sample_batch_builder import MultiAgentSampleBatchBuilder, SampleBatchBuilder
from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch

SPACE = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)


class DoublingPolicy(ActOnlyPolicy):
    """postprocess_trajectory adds ``advantages`` = 2 * rewards and records what it saw."""

    def __init__(self, *args):
        super().__init__(*args)
        self.others = []

    def compute_actions(self, obs_batch, *args, **kwargs):
        return np.zeros(len(obs_batch), np.int64), [], {}

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        self.others.append(sorted(other_agent_batches or {}))
        sample_batch["advantages"] = 2.0 * sample_batch[SampleBatch.REWARDS]
        return sample_batch


class Recorder(DefaultCallbacks):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_postprocess_trajectory(
        self,
        *,
        worker,
        episode,
        agent_id,
        policy_id,
        policies,
        postprocessed_batch,
        original_batches,
        **kwargs,
    ):
        self.seen.append((agent_id, policy_id, postprocessed_batch.count))


def test_sample_batch_builder_rows_to_columns():
    b = SampleBatchBuilder()
    for t in range(3):
        b.add_values(obs=[float(t), 1.0], actions=t % 2, rewards=0.5 * t, dones=t == 2)
    assert b.count == 3
    batch = b.build_and_reset()
    assert batch.count == 3 and b.count == 0 and not b.buffers
    assert batch[SampleBatch.OBS].dtype == np.float32 and batch[SampleBatch.OBS].shape == (3, 2)
    np.testing.assert_array_equal(batch[SampleBatch.REWARDS], [0.0, 0.5, 1.0])
    assert batch[SampleBatch.ACTIONS].dtype.kind == "i"
    assert batch[SampleBatch.DONES].tolist() == [False, False, True]
    unroll = batch[SampleBatch.UNROLL_ID]
    assert len(set(unroll.tolist())) == 1
    b.add_batch(batch)
    again = b.build_and_reset()
    assert again.count == 3 and again[SampleBatch.UNROLL_ID][0] == unroll[0]  # kept, not renumbered
    b.add_values(obs=[0.0, 0.0])
    nxt = b.build_and_reset()
    assert nxt[SampleBatch.UNROLL_ID][0] > unroll[0]
    b.add_values(obs=[0.0, 0.0], rewards=1.0)
    b.add_values(obs=[0.0, 0.0])
    with pytest.raises(ValueError, match=r"columns have different row counts \{'obs': 2, 'rewards': 1\}"):
        b.build_and_reset()


def _rows(builder, agent_id, policy_id, rewards, eps_id=7):
    for t, r in enumerate(rewards):
        builder.add_values(
            agent_id,
            policy_id,
            t=t,
            eps_id=eps_id,
            obs=np.zeros(2, np.float32),
            actions=0,
            rewards=r,
            dones=t == len(rewards) - 1,
        )


def test_multi_agent_builder_postprocesses_per_agent_and_groups_per_policy():
    policies = {
        "a": DoublingPolicy(SPACE, gym.spaces.Discrete(2), {}),
        "b": DoublingPolicy(SPACE, gym.spaces.Discrete(2), {}),
    }
    cb = Recorder()
    mb = MultiAgentSampleBatchBuilder(policies, clip_rewards=False, callbacks=cb)
    _rows(mb, "p0", "a", [1.0, -3.0])
    _rows(mb, "p1", "a", [0.5])
    _rows(mb, "p2", "b", [2.0, 2.0, 2.0])
    assert mb.total() == 6 and mb.has_pending_agent_data()
    mb.count = 3
    out = mb.build_and_reset()
    assert isinstance(out, MultiAgentBatch) and out.env_steps() == 3
    a, b = out.policy_batches["a"], out.policy_batches["b"]
    np.testing.assert_array_equal(a["advantages"], [2.0, -6.0, 1.0])
    np.testing.assert_array_equal(b["advantages"], [4.0, 4.0, 4.0])
    assert a["agent_id"].tolist() == ["p0", "p0", "p1"]
    assert policies["a"].others == [["p1", "p2"], ["p0", "p2"]]
    assert sorted(cb.seen) == [("p0", "a", 2), ("p1", "a", 1), ("p2", "b", 3)]
    assert not mb.has_pending_agent_data() and mb.count == 0


@pytest.mark.parametrize(
    "clip, expect", [(True, [1.0, -1.0, 0.0]), (2.0, [2.0, -2.0, 0.0]), (None, [5.0, -3.0, 0.0])]
)
def test_multi_agent_builder_clips_rewards_before_postprocessing(clip, expect):
    policies = {"default_policy": DoublingPolicy(SPACE, gym.spaces.Discrete(2), {})}
    mb = MultiAgentSampleBatchBuilder(policies, clip_rewards=clip, callbacks=DefaultCallbacks())
    _rows(mb, "agent0", "default_policy", [5.0, -3.0, 0.0])
    mb.count = 3
    out = mb.build_and_reset()
    assert isinstance(out, SampleBatch)  # only default_policy: a plain batch
    np.testing.assert_array_equal(out[SampleBatch.REWARDS], expect)
    np.testing.assert_array_equal(out["advantages"], 2 * np.array(expect))
    assert "agent_id" not in out  # the single-agent dummy id is not recorded


def test_multi_agent_builder_errors():
    policies = {"a": DoublingPolicy(SPACE, gym.spaces.Discrete(2), {})}
    mb = MultiAgentSampleBatchBuilder(policies, clip_rewards=False, callbacks=DefaultCallbacks())
    with pytest.raises(KeyError, match="unknown policy id 'zz'"):
        mb.add_values("x", "zz", rewards=1.0)
    for t, done in enumerate([True, False]):
        mb.add_values("x", "a", t=t, eps_id=1, rewards=1.0, dones=done)
    with pytest.raises(ValueError, match="no last observation for agent 'x'"):
        mb.check_missing_dones()
    with pytest.raises(ValueError, match="must come from a single trajectory"):
        mb.postprocess_batch_so_far()
