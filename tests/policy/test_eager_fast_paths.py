"""The untraced eager policy's fast paths (issue 19).

* ``TFModelV2.variables()`` keeps its walk's result per model and redoes it
  when an attribute, a list/dict entry or a non-functional layer's variables
  change (checked against the variables actually created, by identity);
* ``tf_utils.minimize_and_clip`` clips all dense gradients in one traced
  call: each ``g * c / max(|g|, c)`` as numpy computes it, unused variables
  dropped;
* the Keras replay runs as one ``tf.function`` when no tape records (traced
  once per input signature, same outputs as the Keras call) and op by op under
  a tape (a variable only an unread output uses gets no gradient);
* a DQN policy learns the same untraced and traced (same start weights, same
  batches: same TD errors, stats and weights), and its TD error is the numpy
  one-step target ``r + gamma * Q_target(s', argmax_a Q(s', a)) - Q(s, a)``.
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.models.tf import functional_replay  # noqa: E402
from rlpolicy.models.tf.functional_replay import KerasReplay, replay_disabled  # noqa: E402
from rlpolicy.models.tf.tf_modelv2 import TFModelV2  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils import tf_utils as tfu  # noqa: E402
from rlpolicy.utils.framework import get_keras, try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()
pytestmark = [pytest.mark.tf, pytest.mark.tf_eager_code]

ATOL = 1e-5
BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


class _Model(TFModelV2):
    def __init__(self):
        super().__init__(BOX4, gym.spaces.Discrete(2), 2, {}, "m")
        keras = get_keras()
        inp = keras.layers.Input(shape=(4,))
        self.base = keras.Model(inp, keras.layers.Dense(3, name="d")(inp))
        self.extra = []

    def forward(self, input_dict, state, seq_lens):
        return self.base(input_dict["obs"]), state


def _ids(variables):
    return [id(v) for v in variables]


def test_variable_cache_follows_attributes_lists_and_lazily_built_layers():
    keras = get_keras()
    model = _Model()
    first = model.variables()
    assert len(first) == 2 and _ids(model.variables()) == _ids(first)
    # A new tf.Variable attribute, a list entry, a replaced attribute.
    model.scale = tf.Variable(1.0, name="scale")
    assert _ids(model.variables()) == _ids(first) + [id(model.scale)]
    v2 = tf.Variable(np.zeros(2, np.float32), name="listed")
    model.extra.append(v2)  # ("extra" comes before "scale" in attribute order)
    assert _ids(model.variables()) == _ids(first) + [id(v2), id(model.scale)]
    # A layer that creates its variables later (not a functional model).
    dense = keras.layers.Dense(5, name="late")
    model.late = dense
    before = len(model.variables())
    dense.build((None, 4))
    after = model.variables()
    assert len(after) == before + 2 and set(_ids(dense.variables)) <= set(_ids(after))
    model.base = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])
    keys = list(model.variables(as_dict=True))
    assert not any(k.startswith("base.d.") for k in keys) and any(k.startswith("base.") for k in keys)
    # Trainable filtering still reads each variable's flag.
    model.frozen = tf.Variable(2.0, trainable=False, name="frozen")
    assert id(model.frozen) in _ids(model.variables())
    assert id(model.frozen) not in _ids(model.trainable_variables())


def test_minimize_and_clip_clips_each_gradient_like_numpy():
    rng = np.random.default_rng(0)
    values = [
        rng.normal(size=s).astype(np.float32) * k for s, k in (((3, 4), 5.0), ((4,), 0.01), ((2, 2), 3.0))
    ]
    variables = [tf.Variable(v) for v in values] + [tf.Variable([1.0])]

    class Opt:
        pass

    opt = Opt()
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.reduce_sum(v * v) for v in variables[:3]])
    opt.tape = tape
    out = tfu.minimize_and_clip(opt, loss, variables, clip_val=2.0)
    assert [v for _, v in out] == variables[:3]  # the unused variable is dropped
    for (g, _), value in zip(out, values):
        grad = 2.0 * value
        expected = grad * 2.0 / max(np.sqrt(np.sum(grad * grad)), 2.0)
        np.testing.assert_allclose(g.numpy(), expected, rtol=0, atol=ATOL)
    assert np.sqrt(np.sum(out[0][0].numpy() ** 2)) == pytest.approx(2.0, abs=1e-4)


def _two_output_model():
    keras = get_keras()
    inp = keras.layers.Input(shape=(4,))
    hidden = keras.layers.Dense(6, activation="tanh", name="h")(inp)
    out = keras.layers.Dense(2, name="out")(hidden)
    value = keras.layers.Dense(1, name="value")(inp)
    return keras.Model(inp, [out, value])


def test_replay_without_a_tape_is_one_traced_call_per_signature():
    km = _two_output_model()
    replay = KerasReplay()
    rng = np.random.default_rng(1)
    x = tf.constant(rng.uniform(-1, 1, (3, 4)).astype(np.float32))
    got = replay(km, x)
    traced = replay._plan._traced.traced_function
    for _ in range(3):
        again = replay(km, tf.constant(rng.uniform(-1, 1, (3, 4)).astype(np.float32)))
    assert traced.experimental_get_tracing_count() == 1
    with replay_disabled():
        ref = km(x)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=ATOL)
    assert [t.shape for t in again] == [(3, 2), (3, 1)]
    # Weights are read at call time: an assignment shows in the next call.
    km.get_layer("out").bias.assign([5.0, -5.0])
    with replay_disabled():
        ref = km(x)
    np.testing.assert_allclose(replay(km, x)[0].numpy(), ref[0].numpy(), rtol=0, atol=ATOL)


def test_replay_under_a_tape_leaves_unread_outputs_without_gradients(monkeypatch):
    km = _two_output_model()
    replay = KerasReplay()
    x = tf.constant(np.random.default_rng(2).uniform(-1, 1, (5, 4)).astype(np.float32))
    replay(km, x)  # (traced, no tape)
    calls = {"n": 0}
    traced = replay._plan._traced

    def counting(*args):
        calls["n"] += 1
        return traced(*args)

    monkeypatch.setattr(replay._plan, "_traced", counting)
    with tf.GradientTape() as tape:
        logits, _ = replay(km, x)
        loss = tf.reduce_sum(tf.tanh(logits))
    grads = tape.gradient(loss, km.trainable_variables)
    assert calls["n"] == 0  # op by op under the tape
    with replay_disabled(), tf.GradientTape() as tape:
        ref_loss = tf.reduce_sum(tf.tanh(km(x)[0]))
    ref = tape.gradient(ref_loss, km.trainable_variables)
    names = [v.name for v in km.trainable_variables]
    for name, g, r in zip(names, grads, ref):
        assert (g is None) == (r is None) == name.startswith("value"), name
        if r is not None:
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=0, atol=ATOL)


def _dqn(tracing):
    from rlpolicy.agents.dqn.dqn_tf_policy import DQNTFPolicy

    cfg = {
        "framework": "tf2",
        "eager_tracing": tracing,
        "model": {"fcnet_hiddens": [8]},
        "hiddens": [6],
        "gamma": 0.9,
        "lr": 1e-2,
        "seed": 0,
    }
    return DQNTFPolicy.as_eager()(BOX4, gym.spaces.Discrete(2), cfg)


def _batch(seed, n=8):
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            "obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
            "new_obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, n),
            "rewards": rng.standard_normal(n).astype(np.float32),
            "dones": rng.uniform(size=n) < 0.3,
            "terminateds": np.zeros(n, bool),
            "weights": np.ones(n, np.float32),
        }
    )


def _q(policy, model, obs):
    from rlpolicy.agents.dqn.dqn_tf_policy import compute_q_values

    return compute_q_values(policy, model, SampleBatch({"obs": tf.constant(obs)}))[0].numpy()


def test_dqn_learns_the_same_untraced_and_traced_and_its_td_error_is_numpys():
    untraced, traced = _dqn(False), _dqn(True)
    traced.set_weights(untraced.get_weights())
    start = untraced.get_weights(as_dict=True)
    for seed in range(3):
        batch = _batch(seed)
        # The reference TD error, from the weights before this step (double Q; the
        # terminal flags the policy reads are the "terminateds" column).
        q_t = _q(untraced, untraced.model, batch["obs"])
        q_online = _q(untraced, untraced.model, batch["new_obs"])
        q_target = _q(untraced, untraced.target_model, batch["new_obs"])
        rows = np.arange(len(batch))
        best = q_target[rows, np.argmax(q_online, 1)]
        done = batch["terminateds"].astype(np.float32)
        expected_td = q_t[rows, batch["actions"]] - (batch["rewards"] + 0.9 * (1.0 - done) * best)
        a = untraced.learn_on_batch(batch.copy())
        b = traced.learn_on_batch(batch.copy())
        np.testing.assert_allclose(a["td_error"], expected_td, rtol=0, atol=1e-4)
        np.testing.assert_allclose(b["td_error"], a["td_error"], rtol=0, atol=ATOL)
        for k in ("mean_q", "mean_td_error"):
            np.testing.assert_allclose(b["learner_stats"][k], a["learner_stats"][k], rtol=0, atol=ATOL)
    wa, wb = untraced.get_weights(as_dict=True), traced.get_weights(as_dict=True)
    assert set(wa) == set(wb)
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-4, err_msg=k)
    assert sum(not np.allclose(start[k], wa[k]) for k in wa) > 0  # it did learn
    assert functional_replay.replayable(untraced.model.base_model)[0]
