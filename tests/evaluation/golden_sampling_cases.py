"""Fixed-seed sampling cases whose ``RolloutWorker.sample()`` output is pinned by
golden fixtures (``golden/sampling_<case>.npz``, written by
``golden/make_golden_sampling.py`` from the sampler as it was before the issue-26
speed work). ``test_sampling_golden.py`` compares every column, value and dtype and
the callback call sequence with them."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import gymnasium as gym
import numpy as np
from sampling_envs import TwoTeamEnv, team_mapping_fn

from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.policy._callbacks import DefaultCallbacks
from rlpolicy.policy.policy import PolicySpec
from rlpolicy.policy.sample_batch import MultiAgentBatch, SampleBatch


class RecordingCallbacks(DefaultCallbacks):
    """Records the sampler's callback calls as (name, env_index, length, agent, policy, rows)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: List[Tuple[Any, ...]] = []

    def on_episode_start(self, *, worker, base_env, policies, episode, env_index=None, **kwargs):
        self.calls.append(("episode_start", env_index, episode.length, "", "", -1))

    def on_episode_step(self, *, worker, base_env, policies=None, episode, env_index=None, **kwargs):
        self.calls.append(("episode_step", env_index, episode.length, "", "", -1))

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index=None, **kwargs):
        self.calls.append(("episode_end", env_index, episode.length, "", "", round(episode.total_reward, 3)))

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
        rows = postprocessed_batch.count
        self.calls.append(("postprocess", episode.env_id, episode.length, str(agent_id), policy_id, rows))


def _ppo():
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

    return PPOTorchPolicy


def _cartpole(ctx=None):
    return gym.make("CartPole-v1")


BASE = {"framework": "torch", "model": {"fcnet_hiddens": [64, 64]}}

# name -> (RolloutWorker kwargs, number of sample() calls)
CASES: Dict[str, Tuple[Dict[str, Any], int]] = {
    "ppo_1env": (dict(num_envs=1, rollout_fragment_length=200), 2),
    "ppo_8env": (dict(num_envs=8, rollout_fragment_length=50), 2),
    "lstm": (
        dict(
            num_envs=2,
            rollout_fragment_length=40,
            policy_config={
                "framework": "torch",
                "model": {
                    "fcnet_hiddens": [16],
                    "use_lstm": True,
                    "lstm_cell_size": 8,
                    "max_seq_len": 10,
                    "lstm_use_prev_action": True,
                    "lstm_use_prev_reward": True,
                },
            },
        ),
        2,
    ),
    "multiagent": (dict(num_envs=2, rollout_fragment_length=7, env="two_team"), 2),
    "complete_episodes": (dict(num_envs=2, rollout_fragment_length=60, batch_mode="complete_episodes"), 2),
    "mean_std_filter": (dict(num_envs=2, rollout_fragment_length=30, observation_filter="MeanStdFilter"), 2),
    "dqn_4steps": (dict(num_envs=1, rollout_fragment_length=4, algo="dqn"), 5),
}


def make_worker(name: str) -> Tuple[RolloutWorker, RecordingCallbacks, int]:
    kwargs, calls = CASES[name]
    kwargs = dict(kwargs)
    env = kwargs.pop("env", "cartpole")
    algo = kwargs.pop("algo", "ppo")
    kwargs.setdefault("policy_config", BASE)
    callbacks = RecordingCallbacks()
    if algo == "dqn":
        from rlpolicy.agents.dqn.dqn_torch_policy import DQNTorchPolicy

        spec: Any = DQNTorchPolicy
    else:
        spec = _ppo()
    if env == "two_team":
        creator = lambda ctx=None: TwoTeamEnv({"length": 5})  # noqa: E731
        spec = {"red": PolicySpec(_ppo()), "blue": PolicySpec(_ppo())}
        kwargs["policy_mapping_fn"] = team_mapping_fn
    else:
        creator = _cartpole
    worker = RolloutWorker(env_creator=creator, policy_spec=spec, seed=7, callbacks=callbacks, **kwargs)
    return worker, callbacks, calls


def _infos_text(infos: np.ndarray) -> np.ndarray:
    return np.array([json.dumps(i, sort_keys=True, default=str) for i in infos])


def run_case(name: str) -> Dict[str, np.ndarray]:
    """The case's sample() outputs as flat arrays: ``<call>/<policy>/<column>``, plus
    ``calls`` (the callback sequence as JSON text)."""
    worker, callbacks, n = make_worker(name)
    out: Dict[str, np.ndarray] = {}
    for i in range(n):
        batch = worker.sample()
        parts = batch.policy_batches if isinstance(batch, MultiAgentBatch) else {"default_policy": batch}
        out[f"{i}/count"] = np.array(batch.count)
        for pid, b in sorted(parts.items()):
            for col in b.keys():
                value = b[col]
                if col == SampleBatch.INFOS:
                    value = _infos_text(value)
                out[f"{i}/{pid}/{col}"] = np.asarray(value)
    out["calls"] = np.array([json.dumps(c) for c in callbacks.calls])
    worker.stop()
    return out


def assert_same_batches(a, b):
    """Two sampled batches are the same: columns (in order), dtypes, shapes and values;
    episode ids only as a grouping (they are random), infos as dicts."""
    if isinstance(a, MultiAgentBatch):
        assert isinstance(b, MultiAgentBatch) and sorted(a.policy_batches) == sorted(b.policy_batches)
        for pid in a.policy_batches:
            assert_same_batches(a.policy_batches[pid], b.policy_batches[pid])
        return
    assert list(a.keys()) == list(b.keys())  # same columns, same order
    for col in a.keys():
        if col == SampleBatch.EPS_ID:  # random per episode: only the grouping must agree
            _, ia = np.unique(a[col], return_inverse=True)
            _, ib = np.unique(b[col], return_inverse=True)
            assert (np.diff(ia) != 0).tolist() == (np.diff(ib) != 0).tolist()
            continue
        if col == SampleBatch.INFOS:
            assert [dict(i) for i in a[col]] == [dict(i) for i in b[col]]
            continue
        va, vb = np.asarray(a[col]), np.asarray(b[col])
        assert va.dtype == vb.dtype and va.shape == vb.shape, col
        np.testing.assert_allclose(va, vb, rtol=1e-6, atol=1e-6, err_msg=col)
