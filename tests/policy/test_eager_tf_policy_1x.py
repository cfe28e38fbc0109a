"""Eager TF policies as RLlib 1.11's: ``get_weights()`` is a list (``as_dict=True`` the
dict), ``set_weights`` takes both, ``get_state``/checkpoints hold the list, and
``_get_is_training_placeholder()`` exists.

Client code here is a 1.x-style tf2 policy module (``build_tf_policy(...).as_eager()``).
"""

import os

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_policy_template import build_tf_policy  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()
pytestmark = [pytest.mark.tf, pytest.mark.tf_eager_code]

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
SEEN_TRAINING = []


def pg_loss(policy, model, dist_class, train_batch):
    # 1.x loss code that asks the policy whether it is training (as PPO/IMPALA helpers do).
    SEEN_TRAINING.append(
        bool(policy._get_is_training_placeholder().numpy()) if tf.executing_eagerly() else None
    )
    logits, _ = model(train_batch)
    return -tf.reduce_mean(
        dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS]) * train_batch[SampleBatch.REWARDS]
    )


PGEager = build_tf_policy("PG1x", loss_fn=pg_loss).as_eager()


def make(seed=0):
    return PGEager(OBS, ACT, {"framework": "tf2", "model": {"fcnet_hiddens": [4]}, "seed": seed})


def batch(n=6):
    r = np.random.default_rng(3)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: np.arange(n) % 2,
            SampleBatch.REWARDS: np.linspace(-1, 1, n).astype(np.float32),
        }
    )


@pytest.mark.tf_eager_code
def test_get_weights_is_a_list_in_variables_order():
    policy = make()
    weights = policy.get_weights()
    assert isinstance(weights, list)
    variables = policy.variables()
    assert len(weights) == len(variables)
    for w, v in zip(weights, variables):
        np.testing.assert_array_equal(w, v.numpy())
    keyed = policy.get_weights(as_dict=True)
    assert isinstance(keyed, dict) and len(keyed) == len(weights)
    for w, k in zip(weights, keyed.values()):
        np.testing.assert_array_equal(w, k)
    # Copies: changing a returned array leaves the policy alone.
    weights[0] += 1.0
    np.testing.assert_array_equal(policy.get_weights()[0], variables[0].numpy())


def test_set_weights_takes_the_list_and_the_dict():
    a, b = make(seed=1), make(seed=2)
    new = [np.full_like(w, 0.25 * (i + 1)) for i, w in enumerate(a.get_weights())]
    b.set_weights(new)  # RLlib 1.11's list
    for got, want in zip(b.get_weights(), new):
        np.testing.assert_array_equal(got, want)
    a.set_weights(b.get_weights(as_dict=True))
    obs = batch()[SampleBatch.OBS]
    np.testing.assert_allclose(
        a.compute_actions(obs, explore=False)[2]["action_dist_inputs"],
        b.compute_actions(obs, explore=False)[2]["action_dist_inputs"],
        rtol=1e-6,
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="set_weights got 1 arrays"):
        a.set_weights(new[:1])


def test_state_and_checkpoints_hold_the_list(tmp_path):
    a = make(seed=1)
    a.learn_on_batch(batch())
    state = a.get_state()
    assert isinstance(state["weights"], list)  # RLlib 1.11: get_weights() in the state
    b = make(seed=2)
    b.set_state(state)
    for x, y in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(x, y)
    a.export_checkpoint(str(tmp_path))
    c = PGEager.from_checkpoint(str(tmp_path), trusted="imported")
    assert isinstance(c.get_weights(), list)
    for x, y in zip(a.get_weights(), c.get_weights()):
        np.testing.assert_array_equal(x, y)
    assert os.listdir(tmp_path)


@pytest.mark.tf_eager_code
def test_is_training_placeholder_reflects_the_step():
    policy = make()
    assert policy._get_is_training_placeholder().dtype == tf.bool
    assert bool(policy._get_is_training_placeholder().numpy()) is False
    SEEN_TRAINING.clear()
    policy.learn_on_batch(batch())
    assert SEEN_TRAINING == [True]
    policy.compute_actions(batch()[SampleBatch.OBS])
    assert bool(policy._get_is_training_placeholder().numpy()) is False
