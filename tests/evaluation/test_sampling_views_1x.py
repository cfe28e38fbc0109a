"""View requirements on the sampler's bookkeeping columns (``t``, ``eps_id``,
``env_id``, ``agent_index``), as RLlib 1.11's trajectory-view tests and its
episode-env-aware example policies request them.

RLlib 1.11's collector stores these beside the observations: the first obs of an
episode has ``t=-1``, so ``compute_actions`` at the k-th obs sees ``t = k - 1``
(shifts read earlier steps, floored at the initial -1); the training batch holds
``t = 0, 1, ...`` per row (row i is the step that took action i). Expected values
are worked out by hand from CountingEnv (episodes of 4 steps).
"""

import numpy as np
from sampling_envs import CountingEnv
from sampling_policies import ActOnlyPolicy

from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.view_requirement import ViewRequirement


class EpisodeEnvAwarePolicy(ActOnlyPolicy):
    """1.x-style: asks for t, the previous t, eps_id and env_id in its views."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.view_requirements.update(
            {
                SampleBatch.T: ViewRequirement(SampleBatch.T),
                "prev_t": ViewRequirement(data_col=SampleBatch.T, shift=-1),
                SampleBatch.EPS_ID: ViewRequirement(SampleBatch.EPS_ID),
                SampleBatch.ENV_ID: ViewRequirement(SampleBatch.ENV_ID),
                "last_two_t": ViewRequirement(data_col=SampleBatch.T, shift="-1:0"),
            }
        )
        self.seen = []

    def compute_actions_from_input_dict(
        self, input_dict, explore=None, timestep=None, episodes=None, **kwargs
    ):
        self.seen.append(
            {
                "t": np.asarray(input_dict[SampleBatch.T]).tolist(),
                "prev_t": np.asarray(input_dict["prev_t"]).tolist(),
                "eps_id": np.asarray(input_dict[SampleBatch.EPS_ID]).tolist(),
                "env_id": np.asarray(input_dict[SampleBatch.ENV_ID]).tolist(),
                "last_two_t": np.asarray(input_dict["last_two_t"]).tolist(),
            }
        )
        return np.zeros(len(input_dict[SampleBatch.OBS]), np.int64), [], {}

    def compute_actions(self, obs_batch, *args, **kwargs):
        raise AssertionError("the sampler acts through compute_actions_from_input_dict")


def test_t_and_episode_columns_reach_acting_and_training():
    worker = RolloutWorker(
        env_creator=lambda: CountingEnv(length=4),
        policy_spec=EpisodeEnvAwarePolicy,
        rollout_fragment_length=6,
    )
    batch = worker.sample()
    seen = worker.get_policy().seen
    # Acting: obs k of an episode has t = k - 1 (1.11's initial t=-1), prev_t floored at -1.
    assert [s["t"] for s in seen] == [[-1], [0], [1], [2], [-1], [0]]
    assert [s["prev_t"] for s in seen] == [[-1], [-1], [0], [1], [-1], [-1]]
    assert [s["last_two_t"] for s in seen] == [
        [[-1, -1]],
        [[-1, 0]],
        [[0, 1]],
        [[1, 2]],
        [[-1, -1]],
        [[-1, 0]],
    ]
    assert [s["env_id"] for s in seen] == [[0]] * 6
    eps = [s["eps_id"][0] for s in seen]
    assert eps[:4] == [eps[0]] * 4 and eps[4:] == [eps[4]] * 2 and eps[0] != eps[4]
    # Training: row i has t = i within its episode; prev_t is the row before (-1 first).
    np.testing.assert_array_equal(batch[SampleBatch.T], [0, 1, 2, 3, 0, 1])
    np.testing.assert_array_equal(batch["prev_t"], [-1, 0, 1, 2, -1, 0])
    np.testing.assert_array_equal(batch["last_two_t"], [[-1, 0], [0, 1], [1, 2], [2, 3], [-1, 0], [0, 1]])
    np.testing.assert_array_equal(batch[SampleBatch.EPS_ID], [eps[0]] * 4 + [eps[4]] * 2)
    np.testing.assert_array_equal(batch[SampleBatch.ENV_ID], [0] * 6)
