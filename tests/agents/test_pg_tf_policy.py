"""PGTFPolicy (graph "tf") and PGTFPolicy.as_eager() ("tf2"): the REINFORCE
loss against numpy from the policy's own weights, the shared postprocessing
against hand-worked returns, and the stat names PGTorchPolicy reports."""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.agents.pg import PGTFPolicy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
CONFIG = {
    "lr": 0.01,
    "gamma": 0.5,
    "seed": 0,
    "model": {"fcnet_hiddens": [5], "fcnet_activation": "tanh", "vf_share_layers": True},
}


def tf_weights(policy):
    """The model's variables as ``{"<layer>/<kernel|bias>": float64 array}``."""
    vs = policy.model.variables()
    sess = policy.get_session()
    values = sess.run(vs) if sess is not None else [v.numpy() for v in vs]
    return {v.name.split(":")[0]: np.asarray(x, np.float64) for v, x in zip(vs, values)}


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def numpy_logits(w, obs):
    hidden = np.tanh(obs @ w["fc_1/kernel"] + w["fc_1/bias"])
    return hidden @ w["fc_out/kernel"] + w["fc_out/bias"]


@pytest.fixture(scope="module", params=["tf", "tf2"])
def policy(request):
    cls = PGTFPolicy if request.param == "tf" else PGTFPolicy.as_eager()
    return cls(OBS, ACT, {**CONFIG, "framework": request.param})


def _batch(n=12, seed=0):
    r = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 4)).astype(np.float32),
            SampleBatch.ACTIONS: r.integers(0, 3, n),
            SampleBatch.REWARDS: r.normal(size=n).astype(np.float32),
            "advantages": r.normal(size=n).astype(np.float32),
        }
    )


def test_loss_matches_numpy(policy):
    batch = _batch()
    w = tf_weights(policy)
    logp = log_softmax(numpy_logits(w, batch[SampleBatch.OBS].astype(np.float64)))
    expected = -np.mean(logp[np.arange(len(batch)), batch[SampleBatch.ACTIONS]] * batch["advantages"])
    stats = policy.learn_on_batch(batch)[LEARNER_STATS_KEY]
    assert {k for k in stats if k not in ("model", "allreduce_latency")} == {"policy_loss"}
    assert float(stats["policy_loss"]) == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_postprocessing_adds_discounted_returns(policy):
    batch = SampleBatch(
        {
            SampleBatch.OBS: np.zeros((3, 4), np.float32),
            SampleBatch.ACTIONS: np.zeros(3, np.int64),
            SampleBatch.REWARDS: np.array([1.0, 1.0, 1.0], np.float32),
            SampleBatch.DONES: np.array([False, False, True]),
        }
    )
    out = policy.postprocess_trajectory(batch)
    # gamma = 0.5: 1 + 0.5 * (1 + 0.5 * 1) = 1.75, 1 + 0.5 * 1 = 1.5, 1.
    np.testing.assert_allclose(out["advantages"], [1.75, 1.5, 1.0], rtol=1e-6, atol=1e-6)


def test_class_names_and_defaults(policy):
    assert type(policy).__name__ in ("PGTFPolicy", "PGTFPolicy_eager")
    assert policy.config["lr"] == 0.01  # the caller's value over PG's default 0.0004
    assert policy.config["train_batch_size"] == 200  # from PG's DEFAULT_CONFIG


def test_training_dispatch_picks_the_tf_classes():
    from rlpolicy.cli.training import get_policy_class
    from rlpolicy.policy.eager_tf_policy import EagerTFPolicy

    assert get_policy_class("pg", "tf") is PGTFPolicy
    eager = get_policy_class("pg", "tf2")
    assert eager.__name__ == "PGTFPolicy_eager" and issubclass(eager, EagerTFPolicy)
    assert get_policy_class("ppo", "tfe").__name__ == "PPOTFPolicy_eager"
    with pytest.raises(ValueError, match="framework='jax' not available; supported: 'torch', 'tf'"):
        get_policy_class("ppo", "jax")
