"""DQNTFPolicy (graph "tf" and eager "tf2"): loss pieces against numpy / hand-worked
values (run eagerly on stand-in models), and the built policies act, learn and
update their target network."""

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("tensorflow")

from rlpolicy.agents.dqn.dqn_common import PRIO_WEIGHTS  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

_, tf, _ = try_import_tf()
OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
SMALL = {"model": {"fcnet_hiddens": [8]}, "hiddens": [8]}


class TableModel:
    """Stand-in Q-model: Q = obs * scale; dueling value from a fixed array."""

    def __init__(self, scale=1.0, value=None):
        self.scale, self.value = scale, value

    def __call__(self, input_dict, state, seq_lens):
        return tf.convert_to_tensor(input_dict["obs"], tf.float32), []

    def get_q_value_distributions(self, out):
        ones = tf.expand_dims(tf.ones_like(out), -1)
        return out * self.scale, ones, ones

    def get_state_value(self, out):
        return tf.reshape(tf.constant(self.value, tf.float32), (-1, 1))

    def variables(self):
        return []


class StubPolicy:
    def __init__(self, **config):
        self.config = {
            "num_atoms": 1,
            "dueling": False,
            "double_q": True,
            "gamma": 0.9,
            "n_step": 1,
            "v_min": -10.0,
            "v_max": 10.0,
            **config,
        }
        self.action_space = ACT


@pytest.mark.tf
@pytest.mark.tf_eager_code
@pytest.mark.parametrize("double_q", [True, False])
def test_double_q_td_error_and_huber_loss_match_numpy(double_q):
    from rlpolicy.agents.dqn.dqn_tf_policy import build_q_losses

    obs = np.array([[1.0, 2.0, 0.0], [0.0, 0.5, 3.0]], np.float32)
    next_obs = np.array([[3.0, 1.0, 2.0], [1.0, 4.0, 0.5]], np.float32)
    target_scale = np.array([[0.1, 1.0, 5.0]], np.float32)
    policy = StubPolicy(double_q=double_q)
    policy.target_model = TableModel(scale=target_scale)
    rewards, weights = np.array([1.0, -0.5], np.float32), np.array([1.0, 0.5], np.float32)
    batch = {
        SampleBatch.OBS: obs,
        SampleBatch.NEXT_OBS: next_obs,
        SampleBatch.ACTIONS: np.array([1, 2]),
        SampleBatch.REWARDS: rewards,
        SampleBatch.DONES: np.array([False, True]),
        SampleBatch.TERMINATEDS: np.array([False, True]),
        PRIO_WEIGHTS: weights,
    }
    loss = build_q_losses(policy, TableModel(), None, batch)
    q_next = next_obs * target_scale
    best = np.argmax(next_obs if double_q else q_next, axis=1)
    target = rewards + 0.9 * np.array([1.0, 0.0]) * q_next[np.arange(2), best]
    td = obs[np.arange(2), [1, 2]] - target
    np.testing.assert_allclose(policy.q_loss.td_error.numpy(), td, rtol=1e-5, atol=1e-5)
    huber = np.where(np.abs(td) < 1, 0.5 * td**2, np.abs(td) - 0.5)
    np.testing.assert_allclose(float(loss), np.mean(weights * huber), rtol=1e-5, atol=1e-6)


@pytest.mark.tf
@pytest.mark.tf_eager_code
def test_dueling_combination_matches_numpy():
    from rlpolicy.agents.dqn.dqn_tf_policy import compute_q_values

    adv = np.array([[1.0, 2.0, 6.0], [-1.0, 0.0, 4.0]], np.float32)
    value = np.array([10.0, -3.0], np.float32)
    q = compute_q_values(StubPolicy(dueling=True), TableModel(value=value), {"obs": adv})[0]
    np.testing.assert_allclose(
        q.numpy(), value[:, None] + adv - adv.mean(1, keepdims=True), rtol=1e-5, atol=1e-5
    )


@pytest.mark.tf
@pytest.mark.tf_eager_code
@pytest.mark.parametrize(
    "reward,done,expected",
    [(0.5, 0.0, [0.0, 0.35, 0.65]), (0.5, 1.0, [0.0, 0.5, 0.5]), (2.0, 0.0, [0.0, 0.0, 1.0])],
)
def test_c51_projection_hand_worked(reward, done, expected):
    from rlpolicy.agents.dqn.dqn_tf_policy import project_distribution

    z = np.array([-1.0, 0.0, 1.0], np.float32)
    r_tau = tf.constant([[reward]]) + 0.5 * (1 - done) * z[None]
    m = project_distribution(r_tau, tf.constant([[0.2, 0.3, 0.5]]), -1.0, 1.0, 3)
    np.testing.assert_allclose(m.numpy()[0], expected, rtol=1e-5, atol=1e-6)


@pytest.fixture(params=["tf", "tf2"])
def tf_policy(request):
    from rlpolicy.agents.dqn.dqn_tf_policy import DQNTFPolicy

    cls = DQNTFPolicy if request.param == "tf" else DQNTFPolicy.as_eager()
    tf.random.set_seed(0)
    return cls(OBS, ACT, dict(SMALL, framework=request.param))


def _batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.NEXT_OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: rng.integers(0, 3, n),
            SampleBatch.REWARDS: rng.normal(size=n).astype(np.float32),
            SampleBatch.DONES: rng.random(n) < 0.2,
            SampleBatch.TERMINATEDS: np.zeros(n, bool),
            PRIO_WEIGHTS: np.ones(n, np.float32),
        }
    )


def test_tf_policy_acts_learns_and_updates_target(tf_policy):
    actions, _, extra = tf_policy.compute_actions(np.zeros((4, 3), np.float32), explore=False)
    np.testing.assert_array_equal(actions, np.argmax(extra["q_values"], axis=1))
    info = tf_policy.learn_on_batch(_batch())
    assert info["td_error"].shape == (8,)
    assert {"mean_q", "cur_lr"} <= set(info["learner_stats"])
    # The target's variables are part of the weights.
    assert len(tf_policy.get_weights()) == 2 * len(tf_policy.model.variables())
    tf_policy.learn_on_batch(_batch(seed=1))
    sess = tf_policy.get_session()
    read = (lambda vs: sess.run(vs)) if sess is not None else (lambda vs: [v.numpy() for v in vs])
    model_vals = read(tf_policy.model.variables())
    target_before = read(tf_policy.target_model.variables())
    tf_policy.update_target(tau=0.25)
    for m, t_old, t_new in zip(model_vals, target_before, read(tf_policy.target_model.variables())):
        np.testing.assert_allclose(t_new, 0.25 * m + 0.75 * t_old, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("framework", ["tf", "tf2"])
def test_tf_worker_side_prioritization_sets_priorities(framework):
    from rlpolicy.agents.dqn.dqn_tf_policy import DQNTFPolicy

    cls = DQNTFPolicy if framework == "tf" else DQNTFPolicy.as_eager()
    # The dummy-batch postprocessing already runs compute_td_error at construction.
    tf_policy = cls(OBS, ACT, dict(SMALL, framework=framework, worker_side_prioritization=True))
    batch = _batch()
    del batch[PRIO_WEIGHTS]
    out = tf_policy.postprocess_trajectory(batch)
    td = tf_policy.compute_td_error(
        out[SampleBatch.OBS],
        out[SampleBatch.ACTIONS],
        out[SampleBatch.REWARDS],
        out[SampleBatch.NEXT_OBS],
        out[SampleBatch.TERMINATEDS],
        np.ones(8, np.float32),
    )
    np.testing.assert_allclose(out[PRIO_WEIGHTS], np.abs(np.asarray(td)) + 1e-6, rtol=1e-5, atol=1e-6)


def test_tf_box_action_space_is_rejected():
    from rlpolicy.agents.dqn.dqn_tf_policy import DQNTFPolicy
    from rlpolicy.utils.error import UnsupportedSpaceException

    with pytest.raises(UnsupportedSpaceException, match=r"Action space Box.* not supported for DQN"):
        DQNTFPolicy(OBS, gym.spaces.Box(-1, 1, (2,)), dict(SMALL, framework="tf"))
