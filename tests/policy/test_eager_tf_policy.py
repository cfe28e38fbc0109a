"""Eager TF policies (``build_eager_tf_policy``): acting, learning, tracing, state, towers.

Expected values come from numpy forward/backward passes of the model's
weights (or a ``tf.GradientTape`` computation written here), never from the
policy code under test.
"""

import warnings

import gymnasium as gym
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rlpolicy.agents.callbacks import DefaultCallbacks  # noqa: E402
from rlpolicy.policy.eager_tf_policy import EagerTFPolicy, build_eager_tf_policy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.framework import get_keras  # noqa: E402

pytestmark = pytest.mark.tf

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
FC = {"fcnet_hiddens": [4]}  # one tanh layer, shared value branch
LSTM = {"fcnet_hiddens": [4], "use_lstm": True, "lstm_cell_size": 3, "max_seq_len": 4}
KEYS = (
    "base_model.fc_1.kernel:0",
    "base_model.fc_1.bias:0",
    "base_model.fc_out.kernel:0",
    "base_model.fc_out.bias:0",
)


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    return -tf.reduce_mean(logp * train_batch["advantages"])


def add_advantages(policy, batch, other_agent_batches=None, episode=None):
    batch["advantages"] = np.asarray(batch[SampleBatch.REWARDS], np.float32)
    return batch


def sgd(policy, config):
    return get_keras().optimizers.SGD(config["lr"])


PG = build_eager_tf_policy("PG", loss_fn=pg_loss, postprocess_fn=add_advantages)
SGDPG = PG.with_updates(optimizer_fn=sgd)


def make(cls=PG, model=FC, seed=0, **config):
    policy = cls(OBS, ACT, {"model": dict(model), "lr": 0.1, **config})
    r = np.random.default_rng(seed)
    policy.set_weights(
        {k: r.normal(0, 0.7, v.shape).astype(np.float32) for k, v in policy.get_weights(as_dict=True).items()}
    )
    return policy


def pg_batch(n, seed=1):
    r = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: r.integers(0, 3, n),
            "advantages": r.normal(size=n).astype(np.float32),
        }
    )


def np_forward(w, obs):
    h = np.tanh(obs @ w[KEYS[0]] + w[KEYS[1]])
    return h, h @ w[KEYS[2]] + w[KEYS[3]]


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_pg_grads(w, batch):
    """d/dw of -mean(logp(a) * adv) for the one-hidden-layer net (by hand)."""
    x, a, adv = batch[SampleBatch.OBS], batch[SampleBatch.ACTIONS], batch["advantages"]
    h, logits = np_forward(w, x)
    probs = np.exp(log_softmax(logits))
    d_logits = -(adv / len(x))[:, None] * (np.eye(3)[a] - probs)
    d_h = d_logits @ w[KEYS[2]].T * (1 - h**2)
    return {KEYS[0]: x.T @ d_h, KEYS[1]: d_h.sum(0), KEYS[2]: h.T @ d_logits, KEYS[3]: d_logits.sum(0)}


def assert_weights_close(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.fixture(params=[False, True], ids=["eager", "traced"])
def tracing(request):
    return request.param


# ------------------------------------------------------------------ acting


def test_class_layout_and_basics():
    assert PG.__name__ == "PG_eager" and issubclass(PG, EagerTFPolicy)
    policy = make()
    assert policy.framework == "tf2" and policy.config["framework"] == "tf2"
    assert policy.get_session() is None
    assert not policy.is_recurrent() and policy.num_state_tensors() == 0
    assert policy.get_initial_state() == []
    assert len(policy.variables()) == 6 and set(KEYS) <= set(policy.get_weights(as_dict=True))
    assert policy.loss_initialized() and policy.global_timestep == 0
    assert "advantages" in policy.view_requirements
    action, state_out, _ = policy.compute_single_action(np.zeros(3, np.float32), explore=False)
    assert np.shape(action) == () and state_out == [] and policy.global_timestep == 1


def test_compute_actions_explore_false_is_argmax_of_numpy_forward(tracing):
    policy = make(eager_tracing=tracing)
    obs = np.random.default_rng(3).uniform(-1, 1, (6, 3)).astype(np.float32)
    actions, state_out, extra = policy.compute_actions(obs, explore=False)
    _, logits = np_forward(policy.get_weights(as_dict=True), obs)
    np.testing.assert_array_equal(actions, logits.argmax(-1))
    np.testing.assert_allclose(extra[SampleBatch.ACTION_DIST_INPUTS], logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(extra[SampleBatch.ACTION_PROB], np.ones(6), atol=1e-6)
    assert state_out == [] and policy.global_timestep == 6


def test_explore_flag_alternates_correctly_across_calls(tracing):
    # (the explore constants are made once per value and reused)
    policy = make(eager_tracing=tracing)
    obs = np.random.default_rng(4).uniform(-1, 1, (64, 3)).astype(np.float32)
    _, logits = np_forward(policy.get_weights(as_dict=True), obs)
    for explore in (False, True, False, True, False):
        actions, _, extra = policy.compute_actions(obs, explore=explore)
        if explore:  # sampled: the log-probability of the drawn action
            logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            np.testing.assert_allclose(
                extra[SampleBatch.ACTION_LOGP], logp[np.arange(64), actions], atol=1e-5
            )
        else:
            np.testing.assert_array_equal(actions, logits.argmax(-1))
            np.testing.assert_allclose(extra[SampleBatch.ACTION_LOGP], np.zeros(64), atol=1e-6)


def test_compute_actions_from_input_dict_advances_timestep_by_batch_size():
    policy = make()
    batch = {SampleBatch.OBS: np.zeros((4, 3), np.float32)}
    actions, _, _ = policy.compute_actions_from_input_dict(batch, explore=True)
    assert actions.shape == (4,) and policy.global_timestep == 4
    policy.compute_actions_from_input_dict(SampleBatch({SampleBatch.OBS: np.zeros((2, 3))}))
    assert policy.global_timestep == 6


def test_compute_log_likelihoods_match_numpy_log_softmax():
    policy = make()
    batch = pg_batch(5)
    got = policy.compute_log_likelihoods(batch[SampleBatch.ACTIONS], batch[SampleBatch.OBS])
    _, logits = np_forward(policy.get_weights(as_dict=True), batch[SampleBatch.OBS])
    want = log_softmax(logits)[np.arange(5), batch[SampleBatch.ACTIONS]]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ learning


def test_learn_on_batch_sgd_step_equals_numpy_gradient(tracing):
    policy = make(SGDPG, eager_tracing=tracing)
    before, batch = policy.get_weights(as_dict=True), pg_batch(8)
    out = policy.learn_on_batch(batch.copy())
    grads = np_pg_grads(before, batch)
    want = {k: before[k] - 0.1 * grads[k] if k in grads else before[k] for k in before}
    assert_weights_close(policy.get_weights(as_dict=True), want)
    assert out["custom_metrics"] == {} and out["learner_stats"] == {}


def test_grad_clip_clips_by_global_norm():
    policy = make(SGDPG, grad_clip=0.05)
    before, batch = policy.get_weights(as_dict=True), pg_batch(8)
    policy.learn_on_batch(batch.copy())
    grads = np_pg_grads(before, batch)
    norm = np.sqrt(sum((g**2).sum() for g in grads.values()))
    assert norm > 0.05
    want = {k: before[k] - 0.1 * grads[k] * 0.05 / norm if k in grads else before[k] for k in before}
    assert_weights_close(policy.get_weights(as_dict=True), want)


def test_compute_then_apply_gradients_equals_learn_on_batch():
    a, b = make(SGDPG), make(SGDPG)
    batch = pg_batch(8)
    grads, info = a.compute_gradients(batch.copy())
    assert len(grads) == len(a.variables()) and info["learner_stats"] == {}
    a.apply_gradients(grads)
    b.learn_on_batch(batch.copy())
    assert_weights_close(a.get_weights(as_dict=True), b.get_weights(as_dict=True))
    with pytest.raises(ValueError, match="apply_gradients got 2 gradients for the model's 6"):
        a.apply_gradients(grads[:2])


def test_tracing_on_and_off_give_equal_results():
    eager, traced = make(), make(eager_tracing=True)
    for n in (8, 5, 8):  # Adam steps on batches of changing size
        batch = pg_batch(n, seed=n)
        eager.learn_on_batch(batch.copy())
        traced.learn_on_batch(batch.copy())
    assert_weights_close(eager.get_weights(as_dict=True), traced.get_weights(as_dict=True))
    obs = pg_batch(7)[SampleBatch.OBS]
    e_out, t_out = eager.compute_actions(obs, explore=False), traced.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(e_out[0], t_out[0])
    np.testing.assert_allclose(
        e_out[2]["action_dist_inputs"], t_out[2]["action_dist_inputs"], rtol=1e-5, atol=1e-6
    )
    g_e, _ = eager.compute_gradients(pg_batch(6))
    g_t, _ = traced.compute_gradients(pg_batch(6))
    for x, y in zip(g_e, g_t):
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    # Traced for real; batch sizes 8, 5, 8 cost at most two traces (TF generalises shapes).
    assert 1 <= traced.trace_counts["learn_on_batch"] <= 2
    assert traced.trace_counts["compute_actions"] >= 1 and eager.trace_counts == {}


def test_with_tracing_class_traces_without_config_flag():
    traced_cls = PG.with_tracing()
    assert traced_cls.__name__ == "PG_eager_traced" and traced_cls.with_tracing() is traced_cls
    policy = make(traced_cls)
    policy.compute_actions(np.zeros((2, 3), np.float32))
    assert policy.trace_counts == {"compute_actions": 1}


def test_retrace_warning_fires_only_past_the_limit():
    policy = make(eager_tracing=True, eager_max_retraces=2)

    def act(i):  # a new column name -> a new input structure -> a new trace
        policy.compute_actions_from_input_dict(
            {SampleBatch.OBS: np.zeros((2, 3), np.float32), f"extra_{i}": np.zeros(2)}
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            act(i)
    assert policy.trace_counts["compute_actions"] == 3
    assert not [w for w in caught if "retraced" in str(w.message)]
    match = r"'compute_actions' was retraced 3 times .*eager_max_retraces'\]=2"
    with pytest.warns(RuntimeWarning, match=match):
        act(3)
    with warnings.catch_warnings(record=True) as caught:  # warns once per function
        warnings.simplefilter("always")
        act(4)
    assert not [w for w in caught if "retraced" in str(w.message)]


def test_learn_on_batch_calls_callback_and_reports_custom_metrics():
    class RowCounter(DefaultCallbacks):
        def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
            result["rows"] = len(train_batch)

    out = make(callbacks=RowCounter).learn_on_batch(pg_batch(5))
    assert out["custom_metrics"] == {"rows": 5}


@pytest.mark.tf_eager_code
def test_multiple_optimizers_each_apply_their_own_loss():
    def two_losses(policy, model, dist_class, train_batch):
        logits, _ = model(train_batch)
        return [pg_loss(policy, model, dist_class, train_batch), tf.reduce_mean(logits**2)]

    def two_sgds(policy, config):
        keras = get_keras()
        return [keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.2)]

    cls = build_eager_tf_policy(
        "Two", loss_fn=two_losses, optimizer_fn=two_sgds, postprocess_fn=add_advantages
    )
    policy = make(cls, _tf_policy_handles_more_than_one_loss=True)
    before, batch = policy.get_weights(as_dict=True), pg_batch(6)
    # Independent gradients with a plain GradientTape on a copy of the weights.
    ws = {k: tf.Variable(before[k]) for k in KEYS}
    with tf.GradientTape(persistent=True) as tape:
        h = tf.tanh(tf.constant(batch["obs"]) @ ws[KEYS[0]] + ws[KEYS[1]])
        logits = h @ ws[KEYS[2]] + ws[KEYS[3]]
        logp = tf.nn.log_softmax(logits)
        logp_a = tf.gather(logp, batch["actions"], batch_dims=1)
        l1, l2 = -tf.reduce_mean(logp_a * batch["advantages"]), tf.reduce_mean(logits**2)
    g1, g2 = tape.gradient(l1, ws), tape.gradient(l2, ws)
    policy.learn_on_batch(batch.copy())
    want = {
        k: before[k] - 0.1 * g1[k].numpy() - 0.2 * g2[k].numpy() if k in ws else before[k] for k in before
    }
    assert_weights_close(policy.get_weights(as_dict=True), want)
    one_loss = cls.with_updates(loss_fn=pg_loss)
    with pytest.raises(ValueError, match="loss_fn returned 1 losses for 2 optimizers"):
        make(one_loss, _tf_policy_handles_more_than_one_loss=True).learn_on_batch(pg_batch(4))


# ------------------------------------------------------------------ state


def test_get_state_set_state_restores_adam_state_and_is_a_snapshot():
    a = make()
    for seed in (1, 2):
        a.learn_on_batch(pg_batch(6, seed))
    a.compute_actions(np.zeros((3, 3), np.float32))
    state = a.get_state()
    assert set(state) == {"weights", "global_timestep", "_optimizer_variables", "_exploration_state"}
    assert isinstance(state["weights"], list)  # RLlib 1.11: get_weights() in the state
    frozen = [np.copy(v) for v in state["weights"]]
    opt_frozen = [np.copy(v) for v in state["_optimizer_variables"]]
    a.learn_on_batch(pg_batch(6, 3))
    for x, y in zip(state["weights"], frozen):  # later steps leave the snapshot alone
        np.testing.assert_array_equal(x, y)
    for x, y in zip(state["_optimizer_variables"], opt_frozen):
        np.testing.assert_array_equal(x, y)

    b = make(seed=9)
    b.set_state(state)
    assert b.global_timestep == 3
    b.learn_on_batch(pg_batch(6, 3))
    assert_weights_close(b.get_weights(as_dict=True), a.get_weights(as_dict=True))
    fresh = make(seed=9)
    fresh.set_weights(state["weights"])  # same weights, fresh Adam: a different step
    fresh.learn_on_batch(pg_batch(6, 3))
    diff = max(
        np.abs(fresh.get_weights(as_dict=True)[k] - a.get_weights(as_dict=True)[k]).max() for k in KEYS
    )
    assert diff > 1e-4


def test_set_state_with_bad_optimizer_state_changes_nothing():
    a, b = make(), make(seed=5)
    state = a.get_state()
    state["_optimizer_variables"] = state["_optimizer_variables"][:-1]
    before = b.get_weights(as_dict=True)
    with pytest.raises(ValueError, match=r"holds 12 arrays but this policy's optimizers have 13"):
        b.set_state(state)
    assert_weights_close(b.get_weights(as_dict=True), before)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (
            lambda w: {k: v for k, v in w.items() if k != KEYS[0]},
            r"missing keys \['base_model.fc_1.kernel:0'\], unknown keys \[\]",
        ),
        (lambda w: {**w, "bogus": np.zeros(1)}, r"missing keys \[\], unknown keys \['bogus'\]"),
        (
            lambda w: {**w, KEYS[3]: np.zeros((9, 9))},
            r"'base_model.fc_out.bias:0' has shape \(9, 9\), the model's is \(3,\)",
        ),
        (lambda w: [np.zeros(1)], r"set_weights got 1 arrays for the model's 6 variables"),
    ],
)
def test_set_weights_errors_change_nothing(mutate, match):
    policy = make()
    before = policy.get_weights(as_dict=True)
    bad = mutate({k: v + 1.0 for k, v in before.items()})
    with pytest.raises(ValueError, match=match):
        policy.set_weights(bad)
    assert_weights_close(policy.get_weights(as_dict=True), before)


def test_set_weights_accepts_rllib_list_in_variables_order():
    a, b = make(), make(seed=4)
    b.set_weights(list(a.get_weights(as_dict=True).values()))
    assert_weights_close(b.get_weights(as_dict=True), a.get_weights(as_dict=True))


# ------------------------------------------------------------------ recurrent


@pytest.mark.tf_eager_code
def test_lstm_acting_with_state_matches_model_on_the_whole_sequence(tracing):
    policy = make(model=LSTM, eager_tracing=tracing)
    assert policy.is_recurrent() and policy.num_state_tensors() == 2
    init = policy.get_initial_state()
    assert [s.shape for s in init] == [(3,), (3,)]
    obs = np.random.default_rng(5).uniform(-1, 1, (2, 3, 3)).astype(np.float32)  # [B, T, obs]
    state = [np.stack([s, s]) for s in init]
    step_logits = []
    for t in range(3):
        _, state, extra = policy.compute_actions(obs[:, t], state, explore=False)
        step_logits.append(extra["action_dist_inputs"])
    assert [s.shape for s in state] == [(2, 3), (2, 3)] and np.abs(state[0]).sum() > 0
    h0 = [tf.zeros((2, 3)), tf.zeros((2, 3))]
    logits, seq_state = policy.model({"obs": tf.constant(obs.reshape(6, 3))}, h0, tf.constant([3, 3]))
    np.testing.assert_allclose(
        np.stack(step_logits, 1), logits.numpy().reshape(2, 3, 3), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(state[0], seq_state[0].numpy(), rtol=1e-5, atol=1e-6)


def lstm_batch():
    r = np.random.default_rng(2)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (5, 3)).astype(np.float32),
            SampleBatch.ACTIONS: r.integers(0, 3, 5),
            "advantages": r.normal(size=5).astype(np.float32),
            "state_in_0": r.normal(size=(2, 3)).astype(np.float32),
            "state_in_1": r.normal(size=(2, 3)).astype(np.float32),
            SampleBatch.SEQ_LENS: np.array([3, 2], np.int32),
        }
    )


def test_lstm_learning_traced_equals_eager_and_changes_weights():
    eager, traced = make(model=LSTM), make(model=LSTM, eager_tracing=True)
    before = eager.get_weights(as_dict=True)
    for policy in (eager, traced):
        policy.learn_on_batch(lstm_batch())
        policy.learn_on_batch(lstm_batch())
    after = eager.get_weights(as_dict=True)
    assert_weights_close(after, traced.get_weights(as_dict=True))
    changed = [k for k in before if not np.allclose(before[k], after[k], atol=1e-6)]
    assert any("lstm" in k for k in changed) and any("logits" in k for k in changed)


# ------------------------------------------------------------------ towers


def test_fake_gpu_towers_step_equals_single_device_step_with_grad_clip():
    cfg = dict(train_batch_size=8, sgd_minibatch_size=4, grad_clip=0.05)
    towers = make(num_gpus=2, _fake_gpus=True, **cfg)
    single = make(**cfg)
    assert towers.devices == ["cpu", "cpu"] and single.devices == ["cpu"]
    batch = pg_batch(9)  # the odd row is dropped by the per-device split
    assert towers.load_batch_into_buffer(batch.copy()) == 4
    assert towers.get_num_samples_loaded_into_buffer() == 4
    out = towers.learn_on_loaded_batch(offset=0)
    assert set(out) == {"tower_0", "tower_1"}
    # Device 0 trained on rows 0-1 of its slice (rows 0-3), device 1 on rows 4-5.
    same_rows = SampleBatch({k: v[[0, 1, 4, 5]] for k, v in batch.items()})
    single.load_batch_into_buffer(same_rows)
    single.learn_on_loaded_batch(offset=0)
    assert_weights_close(towers.get_weights(as_dict=True), single.get_weights(as_dict=True))


def test_buffer_errors():
    policy = make(num_multi_gpu_tower_stacks=2)
    with pytest.raises(ValueError, match=r"Must call Policy.load_batch_into_buffer\(\)"):
        policy.learn_on_loaded_batch(0, buffer_index=1)
    with pytest.raises(IndexError, match=r"buffer_index=2 is out of range; this policy has 2"):
        policy.load_batch_into_buffer(pg_batch(4), buffer_index=2)
    assert policy.get_num_samples_loaded_into_buffer(1) == 0
    assert policy.load_batch_into_buffer(pg_batch(4), buffer_index=1) == 4
    assert "custom_metrics" in policy.learn_on_loaded_batch(0, buffer_index=1)
