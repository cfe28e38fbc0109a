"""Graph-TF loss initialisation as RLlib 1.11's DynamicTFPolicy does it, for 1.x client
code built with ``build_tf_policy``:

* construction runs no ``compute_actions_from_input_dict`` (torch's does, 1.11's TF doesn't);
* a placeholder put into ``policy._loss_input_dict`` by ``before_loss_init`` (MAML's
  ``split``) is a loss input, fed from the train batch column of that name;
* ``LearningRateSchedule.__init__`` works in ``before_init``, before the session exists (R2D2).
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_mixins import LearningRateSchedule  # noqa: E402
from rlpolicy.policy.tf_policy_template import build_tf_policy  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
CONFIG = {"framework": "tf", "model": {"fcnet_hiddens": [4]}, "seed": 0}


def batch(n=6, **extra):
    r = np.random.default_rng(5)
    cols = {
        SampleBatch.OBS: r.uniform(-1, 1, (n, 3)).astype(np.float32),
        SampleBatch.ACTIONS: np.arange(n) % 2,
        SampleBatch.REWARDS: np.linspace(-1, 1, n).astype(np.float32),
    }
    cols.update(extra)
    return SampleBatch(cols)


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    policy.pg_loss = -tf.reduce_mean(
        dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS]) * train_batch[SampleBatch.REWARDS]
    )
    return policy.pg_loss


# ------------------------------------------------------------------ no acting at construction
class CountActs:
    """A 1.x mixin that watches compute_actions_from_input_dict."""

    def compute_actions_from_input_dict(self, *args, **kwargs):
        self.__dict__["acts"] = self.__dict__.get("acts", 0) + 1
        return super().compute_actions_from_input_dict(*args, **kwargs)


def vf_and_dynamic_fetches(policy):
    logits = policy.model.last_output()
    # A per-row shape TF cannot know statically ([None, None]): evaluated on the dummy batch.
    dynamic = tf.reshape(logits, tf.stack([tf.shape(logits)[0], -1]))
    return {"vf_preds": policy.model.value_function(), "dyn_logits": dynamic}


POST_SEEN = []


def read_vf_preds(policy, sample_batch, other_agent_batches=None, episode=None):
    POST_SEEN.append(
        (np.asarray(sample_batch["vf_preds"]).shape, np.asarray(sample_batch["dyn_logits"]).shape)
    )
    return sample_batch


def test_construction_runs_no_compute_actions():
    cls = build_tf_policy(
        "NoActPolicy",
        loss_fn=pg_loss,
        mixins=[CountActs],
        extra_action_out_fn=vf_and_dynamic_fetches,
        postprocess_fn=read_vf_preds,
    )
    POST_SEEN.clear()
    policy = cls(OBS, ACT, dict(CONFIG))
    assert policy.__dict__.get("acts", 0) == 0
    assert policy.global_timestep == 0
    # The extra action outputs still became dummy columns / view requirements.
    assert POST_SEEN == [((32,), (32, 2))]
    assert policy.view_requirements["vf_preds"].space.shape == ()
    assert policy.view_requirements["dyn_logits"].space.shape == (2,)
    _, _, extra = policy.compute_actions_from_input_dict(
        SampleBatch({SampleBatch.OBS: batch()[SampleBatch.OBS]})
    )
    assert policy.__dict__["acts"] == 1 and extra["dyn_logits"].shape == (6, 2)


# ------------------------------------------------------------------ _loss_input_dict additions
def add_row_weights(policy, obs_space, action_space, config):
    # As MAML's setup_mixins adds its "split" placeholder.
    policy._loss_input_dict["row_weights"] = tf1.placeholder(tf.float32, [None], name="row_weights")


def weighted_pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    policy.weighted_loss = -tf.reduce_mean(
        logp * train_batch[SampleBatch.REWARDS] * train_batch["row_weights"]
    )
    return policy.weighted_loss


def weighted_stats(policy, train_batch):
    return {"loss": policy.weighted_loss}


WeightedPG = build_tf_policy(
    "WeightedPG",
    loss_fn=weighted_pg_loss,
    stats_fn=weighted_stats,
    before_loss_init=add_row_weights,
    optimizer_fn=lambda policy, config: tf1.train.GradientDescentOptimizer(0.1),
)


def test_placeholders_added_to_loss_input_dict_are_fed():
    a, b = WeightedPG(OBS, ACT, dict(CONFIG)), WeightedPG(OBS, ACT, dict(CONFIG))
    b.set_weights(dict(zip(b.get_weights(), a.get_weights().values())))
    assert "row_weights" in a._loss_input_dict
    n = 6
    # Positive rewards: -mean(logp * r * w) cannot cancel to ~0 (logp < 0 for 2 actions).
    rewards = {SampleBatch.REWARDS: np.linspace(0.5, 1.5, n).astype(np.float32)}
    one = a.learn_on_batch(batch(n, row_weights=np.ones(n, np.float32), **rewards))
    two = b.learn_on_batch(batch(n, row_weights=np.full(n, 2.0, np.float32), **rewards))
    # Same start weights: the fed column scales the loss exactly.
    assert float(one["learner_stats"]["loss"]) > 0.1
    np.testing.assert_allclose(
        two["learner_stats"]["loss"], 2 * one["learner_stats"]["loss"], rtol=1e-5, atol=1e-6
    )
    # Zero weights: zero loss and gradient; the weights do not move.
    before = {k: v.copy() for k, v in a.get_weights().items()}
    zero = a.learn_on_batch(batch(n, row_weights=np.zeros(n, np.float32)))
    assert float(zero["learner_stats"]["loss"]) == 0.0
    for k, v in a.get_weights().items():
        np.testing.assert_array_equal(v, before[k])
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['row_weights'\]"):
        a.learn_on_batch(batch(n))


# ------------------------------------------------------------------ mixins in before_init (R2D2)
def setup_early_mixins(policy, obs_space, action_space, config):
    LearningRateSchedule.__init__(policy, config["lr"], config["lr_schedule"])


R2D2Like = build_tf_policy(
    "R2D2LikeTFPolicy", loss_fn=pg_loss, before_init=setup_early_mixins, mixins=[LearningRateSchedule]
)


def test_learning_rate_schedule_set_up_in_before_init():
    policy = R2D2Like(OBS, ACT, dict(CONFIG, lr=0.1, lr_schedule=[[0, 0.1], [100, 0.01]]))
    sess = policy.get_session()
    assert policy.cur_lr.graph is policy.graph  # created in the policy's own graph
    assert sess.run(policy.cur_lr) == pytest.approx(0.1)
    policy.on_global_var_update({"timestep": 50})
    assert sess.run(policy.cur_lr) == pytest.approx(0.055)
    # The default optimizer of the mixin reads the variable; learning works.
    before = {k: v.copy() for k, v in policy.get_weights().items()}
    policy.learn_on_batch(batch())
    assert any(not np.allclose(v, before[k]) for k, v in policy.get_weights().items())


def test_learning_rate_schedule_in_before_init_without_schedule():
    policy = R2D2Like(OBS, ACT, dict(CONFIG, lr=0.02, lr_schedule=None))
    assert policy.get_session().run(policy.cur_lr) == pytest.approx(0.02)
    with pytest.raises(ValueError, match=r"config\['lr'\]=None is invalid"):
        R2D2Like(OBS, ACT, dict(CONFIG, lr=None, lr_schedule=None))
