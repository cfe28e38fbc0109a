"""Parallel sampling with two Ray rollout workers (``WorkerSet``), learning on the driver.

A ``WorkerSet`` holds a local ``RolloutWorker`` (its policy is the one that
learns) and ``num_workers`` remote ones, each a Ray actor with its own envs
and its own copy of the policy. Every iteration:

1. ``workers.sample(n)`` asks the remote workers for rollout fragments in
   parallel and returns exactly ``n`` postprocessed env steps;
2. the local policy learns on them (``learn_on_batch``);
3. ``workers.sync_weights()`` sends the new weights to the remote workers
   (put into Ray's object store once), so the next samples are on-policy.

Run:  python examples/ray_workers_sampling.py [--iters N]
(``RLPOLICY_EXAMPLE_QUICK=1`` runs a short version, as the test suite does).
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym
import numpy as np

from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
from rlpolicy.evaluation.worker_set import WorkerSet


def make_env(env_context):
    """Called once per sub-env on every worker, with its worker_index / vector_index."""
    return gym.make("CartPole-v1")


def main():
    quick = os.environ.get("RLPOLICY_EXAMPLE_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=4 if quick else 20)
    parser.add_argument("--steps", type=int, default=1500, help="env steps per iteration")
    args = parser.parse_args()

    config = {
        "framework": "torch",
        "lr": 4e-3,
        "num_envs_per_worker": 4,
        "rollout_fragment_length": 100,
        "model": {"fcnet_hiddens": [32]},
        "seed": 0,
        "num_cpus_per_worker": 0.5,
    }
    workers = WorkerSet(
        env_creator=make_env, policy_class=PGTorchPolicy, trainer_config=config, num_workers=2
    )
    try:
        policy = workers.local_worker().policy
        print(
            f"remote workers: {len(workers.remote_workers())}, fragment per worker: "
            f"{config['num_envs_per_worker'] * config['rollout_fragment_length']} steps"
        )
        for i in range(args.iters):
            batch = workers.sample(args.steps)
            stats = policy.learn_on_batch(batch)["learner_stats"]
            workers.sync_weights(global_vars={"timestep": workers.num_env_steps_sampled})
            m = workers.metrics()
            print(
                f"iter {i}: batch={batch.count} total={workers.num_env_steps_sampled} "
                f"mean_return={m['episode_reward_mean']:.1f} policy_loss={float(stats['policy_loss']):.3f}"
            )
        steps = workers.foreach_worker(lambda w: w.total_env_steps)
        print(f"env steps per worker (local first): {steps}")
        local = policy.get_weights()
        remote = workers.foreach_worker(lambda w: w.policy.get_weights())[1:]
        same = all(np.array_equal(local[k], w[k]) for w in remote for k in local)
        print(f"remote weights equal local after sync: {same}")
    finally:
        workers.stop()


if __name__ == "__main__":
    main()
