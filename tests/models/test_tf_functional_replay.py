"""The eager replay of the catalog's Keras models (``models/tf/functional_replay.py``).

The reference is always the Keras call itself (``keras_model(inputs)``, with the
replay switched off by ``replay_disabled()``), on the same model and weights:
outputs, value estimates, recurrent state, and the gradients of a loss w.r.t.
every trainable variable agree to float32 precision, for the FC, vision and
LSTM catalog models; then through an eager PPO policy (actions and logp with
explore off and, seeded, on; gradients), traced and untraced. Models the
replay cannot reproduce (custom layers, layer subclasses, subclassed models,
training-dependent layers) and inputs Keras would treat specially are called
through Keras, with the same results. A spy on the plan's ``run`` shows when
the replay really ran (eagerly) and when it did not (``tf.function``, graph
mode).
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy._core.defaults import MODEL_DEFAULTS  # noqa: E402
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.models.tf import functional_replay  # noqa: E402
from rlpolicy.models.tf.functional_replay import KerasReplay, replay_disabled, replayable  # noqa: E402
from rlpolicy.models.tf.tf_modelv2 import TFModelV2  # noqa: E402
from rlpolicy.models.tf.visionnet import VisionNetwork  # noqa: E402
from rlpolicy.utils.framework import get_keras, try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()

# Every test's own code runs eagerly (with RLPOLICY_TF_V1: in TF's eager context).
pytestmark = [pytest.mark.tf, pytest.mark.tf_eager_code]

ATOL = 1e-5
BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMG = gym.spaces.Box(0.0, 1.0, (10, 10, 3), np.float32)
SMALL_FILTERS = [[4, [3, 3], 2], [8, [5, 5], 1]]  # 10x10 -> 5x5 -> 1x1
LSTM_CFG = dict(
    fcnet_hiddens=[6],
    use_lstm=True,
    lstm_cell_size=5,
    max_seq_len=3,
    lstm_use_prev_action=True,
    lstm_use_prev_reward=True,
)


def cfg(**overrides):
    return dict(MODEL_DEFAULTS, **overrides)


@pytest.fixture
def replays(monkeypatch):
    """Counts the plan runs that produced the outputs (not those left to Keras)."""
    count = {"n": 0}
    run = functional_replay._Plan.run

    def counting_run(self, inputs):
        out = run(self, inputs)
        count["n"] += out is not functional_replay._FALL_BACK
        return out

    monkeypatch.setattr(functional_replay._Plan, "run", counting_run)
    return count


def randomize(model, seed=0, scale=0.5):
    """Non-trivial weights (biases included), so that every path shows in the outputs."""
    rng = np.random.default_rng(seed)
    for v in model.variables():
        v.assign((rng.normal(size=v.shape) * scale).astype(v.dtype.as_numpy_dtype))


def close(a, b, what=""):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=ATOL, err_msg=what)


def run_model(model, inputs, state, seq_lens, seed=1):
    """(outputs, grads): forward outputs, value, state out; d loss / d every trainable variable."""
    variables = model.trainable_variables()
    with tf.GradientTape() as tape:
        out, state_out = model(dict(inputs), list(state), seq_lens)
        value = model.value_function()
        flat = [out, value] + list(state_out)
        rng = np.random.default_rng(seed)
        # A loss that weighs every output element differently (and non-linearly).
        loss = tf.add_n(
            [tf.reduce_sum(tf.tanh(t) * rng.normal(size=t.shape).astype(np.float32)) for t in flat]
        )
    grads = tape.gradient(loss, variables)
    return [t.numpy() for t in flat], [None if g is None else g.numpy() for g in grads]


def assert_replay_matches_keras(model, inputs, state=(), seq_lens=None, replays=None):
    before = replays["n"]
    outs, grads = run_model(model, inputs, state, seq_lens)
    after_on = replays["n"]
    assert after_on > before, "the replay did not run"
    with replay_disabled():
        ref_outs, ref_grads = run_model(model, inputs, state, seq_lens)
    assert replays["n"] == after_on  # the reference ran through Keras only
    for i, (a, b) in enumerate(zip(outs, ref_outs)):
        assert a.shape == b.shape
        close(a, b, f"output {i}")
    names = [v.name for v in model.trainable_variables()]
    used = [name for name, ref in zip(names, ref_grads) if ref is not None]
    # Every variable gets a gradient, except the wrapped FC net's unused value head
    # under an LSTM wrapper (its value comes from the LSTM's own "values" layer).
    assert [n for n in names if n not in used] == (
        [] if not hasattr(model, "_rnn_model") else [n for n in names if n.split("/")[0] == "value_out"]
    )
    for name, g, ref in zip(names, grads, ref_grads):
        assert (g is None) == (ref is None), name
        if ref is not None:
            assert np.abs(ref).max() > 0, f"{name}: the reference gradient is zero"
            close(g, ref, name)
    return after_on


FC_CASES = {
    "separate-vf": (BOX4, gym.spaces.Discrete(3), cfg(fcnet_hiddens=[8, 6], vf_share_layers=False)),
    "shared-vf": (BOX4, gym.spaces.Discrete(3), cfg(fcnet_hiddens=[8, 6], vf_share_layers=True)),
    "no-final-linear": (BOX4, gym.spaces.Discrete(3), cfg(fcnet_hiddens=[8, 6], no_final_linear=True)),
    "free-log-std": (
        BOX4,
        gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        cfg(fcnet_hiddens=[8], free_log_std=True, fcnet_activation="relu"),
    ),
    # (an activation Dense's fast path has no op for: the function itself is called)
    "elu": (BOX4, gym.spaces.Discrete(3), cfg(fcnet_hiddens=[8], fcnet_activation="elu")),
}
VISION_CASES = {
    "separate-vf": cfg(conv_filters=SMALL_FILTERS, vf_share_layers=False),
    "shared-vf": cfg(conv_filters=SMALL_FILTERS, vf_share_layers=True),
    "post-fcnet": cfg(conv_filters=SMALL_FILTERS, post_fcnet_hiddens=[5], vf_share_layers=True),
    "no-final-linear": cfg(conv_filters=[[4, [3, 3], 2], [3, [5, 5], 1]], no_final_linear=True),
}


def catalog_model(obs_space, action_space, model_config, name="m"):
    _, n = ModelCatalog.get_action_dist(action_space, model_config, framework="tf2")
    model = ModelCatalog.get_model_v2(obs_space, action_space, n, model_config, framework="tf2", name=name)
    randomize(model)
    return model


@pytest.mark.parametrize("case", list(FC_CASES))
def test_fc_outputs_and_gradients_match_keras(case, replays):
    obs_space, action_space, model_config = FC_CASES[case]
    model = catalog_model(obs_space, action_space, model_config)
    assert replayable(model.base_model) == (True, None)
    obs = np.random.default_rng(2).uniform(-1, 1, (5, 4)).astype(np.float32)
    assert_replay_matches_keras(model, {"obs": tf.constant(obs)}, replays=replays)


def test_fc_replay_matches_a_numpy_mlp(replays):
    model = catalog_model(*FC_CASES["separate-vf"])
    w = {v.name.split(":")[0]: v.numpy().astype(np.float64) for v in model.variables()}
    obs = np.random.default_rng(3).uniform(-1, 1, (4, 4)).astype(np.float32)
    out, _ = model({"obs": tf.constant(obs)}, [], None)
    value = model.value_function()
    assert replays["n"] == 1

    def dense(x, name, act):
        y = x @ w[f"{name}/kernel"] + w[f"{name}/bias"]
        return np.tanh(y) if act else y

    h = dense(dense(obs.astype(np.float64), "fc_1", True), "fc_2", True)
    v = dense(dense(obs.astype(np.float64), "fc_value_1", True), "fc_value_2", True)
    close(out, dense(h, "fc_out", False))
    close(value, dense(v, "value_out", False)[:, 0])


@pytest.mark.parametrize("case", list(VISION_CASES))
def test_vision_outputs_and_gradients_match_keras(case, replays):
    model = catalog_model(IMG, gym.spaces.Discrete(3), VISION_CASES[case])
    assert isinstance(model, VisionNetwork)
    obs = np.random.default_rng(4).uniform(0, 1, (3, 10, 10, 3)).astype(np.float32)
    assert_replay_matches_keras(model, {"obs": tf.constant(obs)}, replays=replays)


def test_vision_without_outputs_flattens_and_matches_keras(replays):
    model = VisionNetwork(IMG, gym.spaces.Discrete(3), 0, cfg(conv_filters=SMALL_FILTERS), "v")
    randomize(model)
    assert model.last_layer_is_flattened
    obs = np.random.default_rng(5).uniform(0, 1, (2, 10, 10, 3)).astype(np.float32)
    assert_replay_matches_keras(model, {"obs": tf.constant(obs)}, replays=replays)


def lstm_inputs(B=3, T=3, seed=6):
    rng = np.random.default_rng(seed)
    inputs = {
        "obs": tf.constant(rng.uniform(-1, 1, (B * T, 4)).astype(np.float32)),
        "prev_actions": tf.constant(rng.integers(0, 3, B * T)),
        "prev_rewards": tf.constant(rng.normal(size=B * T).astype(np.float32)),
    }
    state = [tf.constant(rng.normal(size=(B, 5)).astype(np.float32)) for _ in range(2)]
    return inputs, state


@pytest.mark.parametrize("seq_lens", [[3, 1, 2], [3, 3, 3]])
def test_lstm_outputs_state_and_gradients_match_keras(seq_lens, replays):
    model = catalog_model(BOX4, gym.spaces.Discrete(3), cfg(**LSTM_CFG))
    assert type(model).__name__ == "FullyConnectedNetwork_as_LSTMWrapper"
    assert replayable(model._rnn_model) == (True, None)
    inputs, state = lstm_inputs()
    lens = tf.constant(seq_lens, tf.int32)
    assert_replay_matches_keras(model, inputs, state, lens, replays=replays)
    # Both Keras models (the wrapped FC trunk and the LSTM) were replayed.
    assert replays["n"] >= 2


def test_lstm_single_step_carries_state_like_the_sequence(replays):
    """Acting step by step (T=1, the replay) ends in the state of one T=3 sequence (Keras)."""
    model = catalog_model(BOX4, gym.spaces.Discrete(3), cfg(**LSTM_CFG))
    inputs, state = lstm_inputs(B=2, T=3)
    with replay_disabled():
        seq_out, seq_state = model(dict(inputs), list(state), tf.constant([3, 3]))
    steps = []
    for t in range(3):
        step = {k: tf.gather(v, [t, 3 + t]) for k, v in inputs.items()}  # row b*T + t
        out, state = model(step, state, tf.constant([1, 1]))
        steps.append(out.numpy())
    assert replays["n"] > 0
    close(np.stack(steps, 1), seq_out.numpy().reshape(2, 3, 3))
    for a, b in zip(state, seq_state):
        close(a, b)


# ----------------------------------------------------------------- what falls back


class Scale(get_keras().layers.Layer if tf is not None else object):
    """A custom layer (a trainable per-feature scale)."""

    def build(self, input_shape):
        self.scale = self.add_weight("scale", shape=(int(input_shape[-1]),), initializer="ones")

    def call(self, x):
        return x * self.scale


class CustomLayerModel(TFModelV2):
    """A custom model whose Keras model has a custom layer: called through Keras."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        keras = get_keras()
        inp = keras.layers.Input(shape=(4,))
        hidden = Scale(name="scale")(keras.layers.Dense(6, activation="tanh", name="h")(inp))
        self.base_model = keras.Model(
            inp,
            [keras.layers.Dense(num_outputs, name="out")(hidden), keras.layers.Dense(1, name="v")(hidden)],
        )
        self._replay = KerasReplay()

    def forward(self, input_dict, state, seq_lens):
        out, self._v = self._replay(self.base_model, input_dict["obs_flat"])
        return out, state

    def value_function(self):
        return tf.reshape(self._v, [-1])


def test_custom_layer_model_falls_back_with_equal_results(replays):
    model = CustomLayerModel(BOX4, gym.spaces.Discrete(3), 3, cfg(), "custom")
    randomize(model)
    assert not model._replay.replays(model.base_model)
    assert "'scale' (Scale): no replay for this layer class" in model._replay.reason
    obs = tf.constant(np.random.default_rng(7).uniform(-1, 1, (4, 4)).astype(np.float32))
    outs, grads = run_model(model, {"obs": obs}, [], None)
    with replay_disabled():
        ref_outs, ref_grads = run_model(model, {"obs": obs}, [], None)
    assert replays["n"] == 0
    for a, b in zip(outs + grads, ref_outs + ref_grads):
        close(a, b)


def _functional(build):
    keras = get_keras()
    inp = keras.layers.Input(shape=(4,))
    return keras.Model(inp, build(keras, inp))


class MyDense(get_keras().layers.Dense if tf is not None else object):
    """A Dense subclass (it may change ``call``): not replayed."""


class Subclassed(get_keras().Model if tf is not None else object):
    def __init__(self):
        super().__init__()
        self.d = get_keras().layers.Dense(3)

    def call(self, x):
        return self.d(x) * 2.0


NOT_REPLAYED = {
    "dropout": (lambda k, x: k.layers.Dropout(0.5)(k.layers.Dense(3)(x)), "Dropout"),
    "dense-subclass": (lambda k, x: MyDense(3, name="mine")(x), "'mine' (MyDense)"),
    "lambda-with-training": (
        lambda k, x: k.layers.Lambda(lambda t, training=None: t * 2.0)(x),
        "training argument",
    ),
    "activity-regularizer": (
        lambda k, x: k.layers.Dense(3, activity_regularizer="l2")(x),
        "activity regularizer",
    ),
    "lstm-dropout": (lambda k, x: k.layers.LSTM(3, dropout=0.5)(k.layers.Reshape((2, 2))(x)), "dropout"),
}


@pytest.mark.parametrize("case", list(NOT_REPLAYED))
def test_models_it_cannot_reproduce_are_called_through_keras(case, replays):
    build, reason = NOT_REPLAYED[case]
    model = _functional(build)
    ok, why = replayable(model)
    assert not ok and reason in why
    x = tf.constant(np.random.default_rng(8).uniform(-1, 1, (2, 4)).astype(np.float32))
    replay = KerasReplay()
    close(replay(model, x), model(x))
    assert replays["n"] == 0 and replay.reason == why


def test_subclassed_keras_model_is_called_through_keras(replays):
    model = Subclassed()
    x = tf.constant(np.ones((2, 4), np.float32))
    ref = model(x)
    ok, why = replayable(model)
    assert not ok and "not a functional Keras model" in why
    close(KerasReplay()(model, x), ref)
    assert replays["n"] == 0


def _fc_keras_model():
    model = catalog_model(*FC_CASES["separate-vf"])
    return model.base_model


def test_inputs_keras_would_convert_are_converted_alike(replays):
    km = _fc_keras_model()
    replay = KerasReplay()
    x64 = np.random.default_rng(9).uniform(-1, 1, (3, 4))  # float64 numpy: cast to float32
    outs = replay(km, x64)
    assert replays["n"] == 1 and outs[0].dtype == tf.float32
    for a, b in zip(outs, km(x64)):
        close(a, b)


@pytest.mark.parametrize("bad", ["list", "trailing-1", "wrong-width"])
def test_inputs_keras_treats_specially_go_to_keras(bad, replays):
    km = _fc_keras_model()
    replay = KerasReplay()
    x = np.random.default_rng(10).uniform(-1, 1, (3, 4)).astype(np.float32)
    errors = {
        "wrong-width": (tf.constant(x[:, :3]), "incompatible"),
        "list": (x.tolist(), "expects 1 input"),
    }  # (Keras: a list is 3 inputs)
    if bad in errors:
        given, match = errors[bad]
        with pytest.raises(ValueError, match=match):
            replay(km, given)
        with pytest.raises(ValueError, match=match):
            km(given)
    else:
        given = tf.constant(x[:, :, None])  # [3, 4, 1]: Keras squeezes the last axis
        for a, b in zip(replay(km, given), km(given)):
            close(a, b)
    assert replays["n"] == 0


def test_a_swapped_keras_model_is_replanned(replays):
    replay = KerasReplay()
    first, second = _fc_keras_model(), _fc_keras_model()
    x = tf.constant(np.ones((1, 4), np.float32))
    for km in (first, second, first):
        for a, b in zip(replay(km, x), km(x)):
            close(a, b)
    assert replays["n"] == 3


def test_not_used_inside_tf_function_or_graph_mode(replays):
    km = _fc_keras_model()
    replay = KerasReplay()
    x = tf.constant(np.random.default_rng(11).uniform(-1, 1, (2, 4)).astype(np.float32))
    eager = replay(km, x)
    assert replays["n"] == 1
    traced = tf.function(lambda t: replay(km, t))(x)
    assert replays["n"] == 1  # traced through Keras
    for a, b in zip(eager, traced):
        close(a, b)
    graph = tf1.Graph()
    with graph.as_default():
        model = ModelCatalog.get_model_v2(
            BOX4, gym.spaces.Discrete(3), 3, cfg(fcnet_hiddens=[4]), framework="tf", name="g"
        )
        out, _ = model({"obs": tf1.placeholder(tf.float32, [None, 4])}, [], None)
    assert replays["n"] == 1 and out.graph is graph


def test_replay_disabled_nests_and_restores():
    with replay_disabled():
        with replay_disabled():
            pass
        assert functional_replay._state.disabled
    assert not functional_replay._state.disabled


# ----------------------------------------------------------------- through an eager policy

PPO_CONFIG = {
    "lr": 1e-3,
    "seed": 0,
    "kl_coeff": 0.2,
    "entropy_coeff": 0.01,
    "model": {"fcnet_hiddens": [8], "fcnet_activation": "tanh", "vf_share_layers": False},
}


def ppo(tracing=False, obs_space=BOX4, model=None):
    from rlpolicy.agents.ppo import PPOTFPolicy

    config = dict(PPO_CONFIG, framework="tf2", eager_tracing=tracing)
    if model is not None:
        config["model"] = model
    policy = PPOTFPolicy.as_eager()(obs_space, gym.spaces.Discrete(3), config)
    for v in policy.model.variables():
        v.assign(np.random.default_rng(12).normal(size=v.shape).astype(np.float32) * 0.5)
    return policy


def train_batch(n=12, seed=13):
    from rlpolicy.policy.sample_batch import SampleBatch

    r = np.random.default_rng(seed)
    logits = r.normal(size=(n, 3)).astype(np.float32)
    actions = r.integers(0, 3, n)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return SampleBatch(
        {
            "obs": r.uniform(-1, 1, (n, 4)).astype(np.float32),
            "actions": actions,
            "action_dist_inputs": logits,
            "action_logp": logp[np.arange(n), actions].astype(np.float32),
            "advantages": r.normal(size=n).astype(np.float32),
            "value_targets": r.normal(size=n).astype(np.float32),
            "vf_preds": r.normal(size=n).astype(np.float32),
        }
    )


def act(policy, obs, explore, **kwargs):
    tf.random.set_seed(21)
    actions, state, extra = policy.compute_actions(obs, explore=explore, **kwargs)
    return (
        [np.asarray(actions)] + [np.asarray(s) for s in state] + [np.asarray(extra[k]) for k in sorted(extra)]
    )


def assert_acting_matches(policy, obs, replays, **kwargs):
    for explore in (False, True):
        before = replays["n"]
        got = act(policy, obs, explore, **kwargs)
        assert replays["n"] > before
        with replay_disabled():
            ref = act(policy, obs, explore, **kwargs)
        assert len(got) == len(ref) >= 4
        for a, b in zip(got, ref):
            close(a, b)
    # Sampling really happened (a seeded explore differs from greedy somewhere).
    return got


def test_eager_policy_actions_logp_values_and_gradients_match_keras(replays):
    policy = ppo()
    obs = np.random.default_rng(14).uniform(-1, 1, (64, 4)).astype(np.float32)
    explored = assert_acting_matches(policy, obs, replays)
    greedy = act(policy, obs, False)
    assert not np.array_equal(explored[0], greedy[0])
    batch = train_batch()
    before = replays["n"]
    grads, _ = policy.compute_gradients(batch.copy())
    assert replays["n"] > before
    with replay_disabled():
        ref, _ = policy.compute_gradients(batch.copy())
    assert len(grads) == len(policy.model.trainable_variables()) == 8
    for g, r in zip(grads, ref):
        assert np.abs(np.asarray(r)).max() > 0
        close(g, r)


def test_traced_policy_computes_what_the_untraced_replay_does(replays):
    untraced, traced = ppo(), ppo(tracing=True)
    traced.set_weights(untraced.get_weights())
    obs = np.random.default_rng(15).uniform(-1, 1, (5, 4)).astype(np.float32)
    before = replays["n"]
    ref = act(untraced, obs, False)
    assert replays["n"] > before
    act(traced, obs, False)  # (traces)
    before = replays["n"]
    got = act(traced, obs, False)
    assert replays["n"] == before  # the traced step calls Keras inside its graph
    for a, b in zip(got, ref):
        close(a, b)
    batch = train_batch()
    r_stats = untraced.learn_on_batch(batch.copy())
    t_stats = traced.learn_on_batch(batch.copy())
    for k in ("total_loss", "policy_loss", "vf_loss"):
        close(t_stats["learner_stats"][k], r_stats["learner_stats"][k], k)
    weights = [untraced.get_weights(), traced.get_weights()]
    weights = [list(w.values()) if isinstance(w, dict) else w for w in weights]
    assert len(weights[0]) == len(weights[1]) == 8
    for a, b in zip(*weights):
        close(b, a)


def test_eager_lstm_policy_state_in_and_out_match_keras(replays):
    policy = ppo(model={"fcnet_hiddens": [6], "use_lstm": True, "lstm_cell_size": 5, "max_seq_len": 4})
    rng = np.random.default_rng(16)
    obs = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
    state = [rng.normal(size=(4, 5)).astype(np.float32) for _ in range(2)]
    got = assert_acting_matches(policy, obs, replays, state_batches=state)
    assert got[1].shape == (4, 5) and not np.allclose(got[1], state[0])


def test_eager_vision_policy_matches_keras(replays):
    policy = ppo(obs_space=IMG, model={"conv_filters": SMALL_FILTERS, "vf_share_layers": False})
    obs = np.random.default_rng(17).uniform(0, 1, (3, 10, 10, 3)).astype(np.float32)
    assert_acting_matches(policy, obs, replays)
