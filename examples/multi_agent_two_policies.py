"""A multi-agent env with two policies: one learns, the other stays frozen.

``make_multi_agent("CartPole-v1")`` builds a ``MultiAgentEnv`` whose agents 0
and 1 each balance their own pole (observations, actions, rewards and dones
are dicts keyed by agent id; the episode ends when both are done). A
``RolloutWorker`` maps agent 0 to policy ``"learner"`` and agent 1 to
``"frozen"`` with ``policy_mapping_fn``, and ``sample()`` returns a
``MultiAgentBatch`` with one ``SampleBatch`` per policy. Only
``policies_to_train=["learner"]`` is updated by ``worker.learn_on_batch``.

Run:  python examples/multi_agent_two_policies.py [--iters N]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
from rlpolicy.env.multi_agent_env import make_multi_agent
from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.policy.policy import PolicySpec

TwoCartPoles = make_multi_agent("CartPole-v1")


def policy_mapping_fn(agent_id, episode, worker=None, **kwargs):
    return "learner" if agent_id == 0 else "frozen"


def main():
    quick = os.environ.get("RLPOLICY_EXAMPLE_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=8 if quick else 25)
    args = parser.parse_args()

    worker = RolloutWorker(
        env_creator=lambda env_context: TwoCartPoles({"num_agents": 2}),
        policy_spec={
            "learner": PolicySpec(PGTorchPolicy, config={"lr": 1e-2}),
            "frozen": PolicySpec(PGTorchPolicy),
        },
        policy_mapping_fn=policy_mapping_fn,
        policies_to_train=["learner"],
        policy_config={"framework": "torch", "model": {"fcnet_hiddens": [32]}},
        num_envs=4,
        rollout_fragment_length=250,
        seed=0,
    )
    frozen_before = worker.get_policy("frozen").get_weights()
    for i in range(args.iters):
        batch = worker.sample()
        worker.learn_on_batch(batch)
        per_policy = {pid: [] for pid in ("learner", "frozen")}
        for m in worker.get_metrics():
            for (_agent_id, pid), reward in m.agent_rewards.items():
                per_policy[pid].append(reward)
        counts = {pid: b.count for pid, b in sorted(batch.policy_batches.items())}
        print(
            f"iter {i}: env_steps={batch.env_steps()} agent_steps={counts} "
            f"learner_return={np.mean(per_policy['learner'] or [np.nan]):.1f} "
            f"frozen_return={np.mean(per_policy['frozen'] or [np.nan]):.1f}"
        )
    frozen_after = worker.get_policy("frozen").get_weights()
    unchanged = all(np.array_equal(frozen_before[k], frozen_after[k]) for k in frozen_before)
    print(f"frozen policy weights unchanged: {unchanged}")
    worker.stop()


if __name__ == "__main__":
    main()
