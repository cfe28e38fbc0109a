"""`rlpolicy train`'s loop honours config["batch_mode"]: with "complete_episodes" (PG's
shipped CartPole default) a PG train batch holds whole episodes only, so each step's
advantage is its full discounted return-to-go; "truncate_episodes" cuts episodes."""

import numpy as np
import pytest

pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from rlpolicy.cli.algorithms import config_defaults  # noqa: E402
from rlpolicy.cli.training import SimpleTrainer  # noqa: E402
from rlpolicy.evaluation.postprocessing import Postprocessing  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402


def _episodes(batch):
    eps = np.asarray(batch[SampleBatch.EPS_ID])
    return [np.flatnonzero(eps == e) for e in np.unique(eps)]


def _collect(config):
    trainer = SimpleTrainer("pg", lambda: gym.make("CartPole-v1"), config, num_envs=4, seed=3)
    return trainer, trainer.collect()


def test_complete_episodes_gives_whole_episodes_and_full_returns():
    config = dict(config_defaults("pg", "CartPole-v1"), train_batch_size=300, rollout_fragment_length=40)
    assert config["batch_mode"] == "complete_episodes"  # the shipped PG default
    trainer, batch = _collect(config)
    gamma = trainer.config["gamma"]
    assert batch.count >= 300
    for rows in _episodes(batch):
        t = np.asarray(batch["t"])[rows]
        np.testing.assert_array_equal(t, np.arange(len(rows)))  # starts at 0, no gap
        done = (
            np.asarray(batch[SampleBatch.TERMINATEDS])[rows] | np.asarray(batch[SampleBatch.TRUNCATEDS])[rows]
        )
        assert done[-1] and not done[:-1].any()
        rewards = np.asarray(batch[SampleBatch.REWARDS])[rows]
        expected = np.array(
            [sum(gamma**k * r for k, r in enumerate(rewards[i:])) for i in range(len(rows))]
        )  # return-to-go, by hand
        np.testing.assert_allclose(batch[Postprocessing.ADVANTAGES][rows], expected, rtol=1e-5)


def test_truncate_episodes_cuts_fragments():
    config = dict(
        config_defaults("pg", "CartPole-v1"),
        train_batch_size=40,
        rollout_fragment_length=40,
        batch_mode="truncate_episodes",
    )
    _, batch = _collect(config)
    assert batch.count == 40  # 4 envs x 10 steps
    done = np.asarray(batch[SampleBatch.TERMINATEDS]) | np.asarray(batch[SampleBatch.TRUNCATEDS])
    # A random CartPole policy lasts ~20 steps: 10-step fragments from a fresh reset end unfinished.
    cut = [rows for rows in _episodes(batch) if not done[rows[-1]]]
    assert len(cut) == 4
    for rows in cut:  # the cut fragment's last step has no future return (PG does not bootstrap)
        assert batch[Postprocessing.ADVANTAGES][rows[-1]] == pytest.approx(
            batch[SampleBatch.REWARDS][rows[-1]]
        )
