"""Eager TF weight keys stay unique when a user model has variables of the same name.

Eager TF does not uniquify variable names: a Keras layer that calls
``add_weight(name="w")`` twice holds two variables named ``".../w:0"``. Keys built from
names (``model.variables(as_dict=True)``, ``get_weights(as_dict=True)``, ``get_state``,
checkpoints) give the later one a ``_<n>`` suffix, so every variable round-trips
(RLlib 1.11's dict silently dropped one; see docs/porting.md).

Client code here is a 1.x-style tf2 policy module with a custom Keras model.
"""

import os

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.models import ModelCatalog  # noqa: E402
from rlpolicy.models.tf.tf_modelv2 import TFModelV2  # noqa: E402
from rlpolicy.policy._eager.export import make_tf_checkpoint  # noqa: E402
from rlpolicy.policy.policy import Policy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_policy_template import build_tf_policy  # noqa: E402
from rlpolicy.utils._variable_keys import unique_keys  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()
pytestmark = [pytest.mark.tf, pytest.mark.tf_eager_code]

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


class TwoW(tf.keras.layers.Layer):
    """logits = x @ w + x @ w' (two weights both named "w")."""

    def build(self, input_shape):
        self.w_a = self.add_weight(name="w", shape=(3, 2), initializer="glorot_uniform")
        self.w_b = self.add_weight(name="w", shape=(3, 2), initializer="glorot_uniform")

    def call(self, x):
        return tf.matmul(x, self.w_a) + tf.matmul(x, self.w_b)


class SameNameModel(TFModelV2):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        inp = tf.keras.layers.Input(shape=(3,))
        out = TwoW(name="two_w")(inp)
        value = tf.keras.layers.Dense(1, name="value")(inp)
        self.base_model = tf.keras.Model(inp, [out, value])

    def forward(self, input_dict, state, seq_lens):
        logits, self._value = self.base_model(input_dict["obs"])
        return logits, state

    def value_function(self):
        return tf.reshape(self._value, [-1])


ModelCatalog.register_custom_model("same_name_vars", SameNameModel)


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    return -tf.reduce_mean(
        dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS]) * train_batch[SampleBatch.REWARDS]
    )


SameNamePG = build_tf_policy("SameNamePG", loss_fn=pg_loss).as_eager()


@pytest.fixture(params=[False, True], ids=["tf2", "traced"])
def make(request):
    def _make(seed):
        return SameNamePG(
            OBS,
            ACT,
            {
                "framework": "tf2",
                "eager_tracing": request.param,
                "seed": seed,
                "lr": 0.1,
                "model": {"custom_model": "same_name_vars"},
            },
        )

    return _make


def _two_w(policy):
    layer = policy.model.base_model.get_layer("two_w")
    return layer.w_a, layer.w_b


def _set_distinct(policy):
    """w = 1s, w' = 2s: logits of obs x are 3 * sum(x) per action (a hand-worked value)."""
    w_a, w_b = _two_w(policy)
    w_a.assign(np.ones((3, 2), np.float32))
    w_b.assign(np.full((3, 2), 2.0, np.float32))


OBS_BATCH = np.array([[0.1, 0.2, 0.3], [-0.5, 0.25, 1.0]], np.float32)


def _logits(policy):
    return policy.compute_actions(OBS_BATCH, explore=False)[2]["action_dist_inputs"]


def test_unique_keys_suffixes_repeats_in_order_and_skips_taken_keys():
    a, b, c, d = object(), object(), object(), object()
    got = unique_keys([("w", a), ("w", b), ("w_1", c), ("w", d), ("w", a)])
    assert list(got.items()) == [("w", a), ("w_2", b), ("w_1", c), ("w_3", d)]


def test_same_named_variables_get_distinct_keys(make):
    policy = make(seed=1)
    w_a, w_b = _two_w(policy)
    assert w_a.name == w_b.name  # the premise: eager TF gave both the same name
    keyed = policy.model.variables(as_dict=True)
    assert len(keyed) == len(policy.model.variables()) == 4  # w, w', value kernel, bias
    base = "base_model." + w_a.name.replace("/", ".")
    assert keyed[base] is w_a and keyed[base + "_1"] is w_b
    weights = policy.get_weights(as_dict=True)
    assert len(weights) == 4 and set(weights) == set(keyed)


@pytest.mark.tf_eager_code
def test_get_state_set_state_restores_both_same_named_variables(make):
    src, dst = make(seed=1), make(seed=2)
    _set_distinct(src)
    dst.set_state(src.get_state())
    w_a, w_b = _two_w(dst)
    np.testing.assert_array_equal(w_a.numpy(), np.ones((3, 2), np.float32))
    np.testing.assert_array_equal(w_b.numpy(), np.full((3, 2), 2.0, np.float32))
    expected = np.repeat(3.0 * OBS_BATCH.sum(axis=1, keepdims=True), 2, axis=1)
    np.testing.assert_allclose(_logits(dst), expected, atol=1e-5)
    np.testing.assert_allclose(_logits(dst), _logits(src), atol=1e-6)


@pytest.mark.tf_eager_code
def test_checkpoint_round_trip_restores_both_same_named_variables(make, tmp_path):
    src = make(seed=1)
    _set_distinct(src)
    src.learn_on_batch(
        SampleBatch(
            {
                SampleBatch.OBS: OBS_BATCH,
                SampleBatch.ACTIONS: np.array([0, 1]),
                SampleBatch.REWARDS: np.array([1.0, -1.0], np.float32),
            }
        )
    )
    trained = [v.numpy() for v in _two_w(src)]
    assert not np.allclose(trained[0], trained[1])  # still distinct after a step
    src.export_checkpoint(str(tmp_path))

    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    for got, want in zip(_two_w(restored), trained):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_allclose(_logits(restored), _logits(src), atol=1e-6)

    # The tf.train.Checkpoint files hold both variables too.
    other = make(seed=2)
    make_tf_checkpoint(other.model, other._optimizers, 0).read(
        os.path.join(str(tmp_path), "model")
    ).expect_partial()
    for got, want in zip(_two_w(other), trained):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_allclose(_logits(other), _logits(src), atol=1e-6)
