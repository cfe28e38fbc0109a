"""RLlib 2.x / duck-typed configs a WorkerSet is given: ``rollout_fragment_length="auto"``
and a callbacks class that is not a DefaultCallbacks subclass (RLlib 1.11 only calls it)."""

import gymnasium as gym
import numpy as np
import pytest
from sampling_policies import RandomPolicy

from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.evaluation.worker_set import WorkerSet


def _cartpole(ctx):
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("train_batch_size,num_envs,expected", [(200, 1, 200), (200, 3, 67), (10, 4, 3)])
def test_auto_fragment_length_makes_one_train_batch(train_batch_size, num_envs, expected):
    ws = WorkerSet(
        env_creator=_cartpole,
        policy_class=RandomPolicy,
        num_workers=0,
        trainer_config={
            "rollout_fragment_length": "auto",
            "train_batch_size": train_batch_size,
            "num_envs_per_worker": num_envs,
        },
    )
    try:
        worker = ws.local_worker()
        assert worker.rollout_fragment_length == expected  # ceil(train_batch_size / num_envs)
        assert worker.sample().count == expected * num_envs
    finally:
        ws.stop()


def test_auto_fragment_length_needs_a_train_batch_size():
    with pytest.raises(ValueError, match="train_batch_size"):
        WorkerSet(
            env_creator=_cartpole,
            policy_class=RandomPolicy,
            num_workers=0,
            trainer_config={"rollout_fragment_length": "auto", "train_batch_size": None},
        )


def test_rollout_worker_still_names_a_bad_fragment_length():
    with pytest.raises(ValueError, match="rollout_fragment_length"):
        RolloutWorker(env_creator=_cartpole, policy_spec=RandomPolicy, rollout_fragment_length="auto")


class EpisodeCounter:
    """A 1.x-style callbacks class that is not a DefaultCallbacks subclass and has
    only one hook."""

    ended = []

    def on_episode_end(self, *, worker, base_env, policies, episode, **kwargs):
        EpisodeCounter.ended.append(episode.length)


def test_duck_typed_callbacks_get_their_hooks_and_skip_the_rest():
    EpisodeCounter.ended = []
    worker = RolloutWorker(
        env_creator=_cartpole,
        policy_spec=RandomPolicy,
        callbacks=EpisodeCounter,
        batch_mode="complete_episodes",
        rollout_fragment_length=1,
    )
    batch = worker.sample()
    # One complete episode per sample() call with fragment length 1: the hook saw its length.
    assert EpisodeCounter.ended and sum(EpisodeCounter.ended) == batch.count
    assert isinstance(worker.callbacks.wrapped, EpisodeCounter)
    assert np.all(np.isfinite(batch["obs"]))
