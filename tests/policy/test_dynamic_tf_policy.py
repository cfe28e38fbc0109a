"""DynamicTFPolicy: placeholders from view requirements, dummy-batch loss init, hooks, LSTM.

SGD steps are checked against numpy (linear logits, see tf_graph_policies);
view-requirement pruning against the columns the loss reads.
"""

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from tf_graph_policies import (  # noqa: E402
    ACT,
    OBS,
    PGGraphPolicy,
    SGDPGGraphPolicy,
    config,
    log_softmax,
    pg_batch,
    pg_loss,
    sgd_pg_step,
    tf,
    tf1,
)

from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.models.tf.tf_action_dist import Categorical  # noqa: E402
from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy  # noqa: E402
from rlpolicy.policy.policy import Policy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402

pytestmark = pytest.mark.tf


@pytest.fixture(scope="module")
def pg():
    return PGGraphPolicy(OBS, ACT, config())


@pytest.mark.tf_eager_code
def test_graph_isolation_and_eager_stays_on(pg):
    other = PGGraphPolicy(OBS, ACT, config())
    assert other.graph is not pg.graph and other.get_session() is not pg.get_session()
    assert tf.executing_eagerly()
    assert pg.global_timestep == 0 and pg.framework == "tf" and not pg._is_tower
    assert pg.devices == ["/cpu:0"] and pg.multi_gpu_tower_stacks == []


def test_loss_inputs_and_pruned_view_requirements(pg):
    assert sorted(pg._loss_input_dict) == ["actions", "obs", "rewards"]
    vrs = pg.view_requirements
    assert {"obs", "actions", "rewards"} <= set(vrs)
    # Columns nobody reads are dropped (sampler columns stay).
    for gone in ("new_obs", "prev_actions", "prev_rewards", "action_logp", "action_dist_inputs"):
        assert gone not in vrs, gone
    assert {"dones", "eps_id", "agent_index", "unroll_id", "infos"} <= set(vrs)
    assert vrs["obs"].used_for_compute_actions
    assert not vrs["actions"].used_for_compute_actions


def test_explore_false_takes_the_argmax(pg):
    obs = pg_batch(7)["obs"]
    actions, states, extra = pg.compute_actions(obs, explore=False)
    assert states == []
    np.testing.assert_array_equal(actions, extra["action_dist_inputs"].argmax(axis=1))
    np.testing.assert_allclose(extra["action_logp"], np.zeros(7), rtol=1e-6, atol=1e-6)
    logp = pg.compute_log_likelihoods(actions, obs)
    np.testing.assert_allclose(
        logp, log_softmax(extra["action_dist_inputs"])[np.arange(7), actions], rtol=1e-5, atol=1e-6
    )


def test_compute_single_action(pg):
    action, state, extra = pg.compute_single_action(np.zeros(3, np.float32), explore=False)
    assert action in (0, 1) and state == [] and extra["action_dist_inputs"].shape == (2,)


@pytest.mark.parametrize("clip", [None, 0.05])
def test_sgd_step_matches_numpy(clip):
    pol = SGDPGGraphPolicy(OBS, ACT, config(model={"fcnet_hiddens": []}, lr=0.5, grad_clip=clip))
    w0 = pol.get_weights()
    data = pg_batch(8, seed=1)
    w, b = sgd_pg_step(w0["fc_out/kernel"], w0["fc_out/bias"], data, 0.5, clip)
    out = pol.learn_on_batch(data.copy())
    np.testing.assert_allclose(
        out["learner_stats"]["mean_reward"], data["rewards"].mean(), rtol=1e-5, atol=1e-6
    )
    w1 = pol.get_weights()
    np.testing.assert_allclose(w1["fc_out/kernel"], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w1["fc_out/bias"], b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(w1["value_out/kernel"], w0["value_out/kernel"])


def test_postprocessed_and_extra_action_columns_become_loss_inputs():
    def before_loss_init(policy, obs_space, action_space, cfg):
        policy._extra_action_fetches = {"vf_preds": policy.model.value_function()}

    class AdvantagePG(DynamicTFPolicy):
        def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
            sample_batch["advantages"] = sample_batch["rewards"] - sample_batch["vf_preds"]
            return sample_batch

    def loss(policy, model, dist_class, train_batch):
        logits, _ = model(train_batch)
        logp = dist_class(logits, model).logp(train_batch["actions"])
        return -tf.reduce_mean(logp * train_batch["advantages"])

    pol = AdvantagePG(OBS, ACT, config(), loss, before_loss_init=before_loss_init)
    assert sorted(pol._loss_input_dict) == ["actions", "advantages", "obs"]
    assert not pol.view_requirements["vf_preds"].used_for_training  # postprocessing only
    assert pol.view_requirements["advantages"].used_for_training
    _, _, extra = pol.compute_actions(pg_batch(3)["obs"])
    assert extra["vf_preds"].shape == (3,)
    data = pg_batch(6)
    data["vf_preds"] = np.zeros(6, np.float32)
    assert "learner_stats" in pol.learn_on_batch(pol.postprocess_trajectory(data))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['advantages'\] that the loss reads"):
        pol.learn_on_batch(pg_batch(4))


def test_action_sampler_fn_needs_make_model_and_has_no_log_likelihood():
    def sampler(policy, model, obs_batch, state_batches, **kwargs):
        logits, _ = model({"obs": obs_batch})
        return tf.argmax(logits, axis=1), tf.zeros(tf.shape(logits)[:1])

    with pytest.raises(ValueError, match="`make_model` is required"):
        DynamicTFPolicy(OBS, ACT, config(), pg_loss, action_sampler_fn=sampler)

    def make_model(policy, obs_space, action_space, cfg):
        return ModelCatalog.get_model_v2(obs_space, action_space, 2, cfg["model"], framework="tf")

    pol = DynamicTFPolicy(OBS, ACT, config(), None, action_sampler_fn=sampler, make_model=make_model)
    actions, _, extra = pol.compute_actions(pg_batch(4)["obs"])
    assert actions.shape == (4,) and "action_dist_inputs" not in extra
    assert not pol.loss_initialized()
    with pytest.raises(ValueError, match="w/o a self._log_likelihood op"):
        pol.compute_log_likelihoods(actions, pg_batch(4)["obs"])


def test_action_distribution_fn_with_new_and_old_signatures():
    def make_model(policy, obs_space, action_space, cfg):
        return ModelCatalog.get_model_v2(obs_space, action_space, 2, cfg["model"], framework="tf")

    def dist_fn_new(
        policy,
        model,
        input_dict,
        *,
        state_batches=None,
        seq_lens=None,
        explore=None,
        timestep=None,
        is_training=None,
    ):
        logits, state = model(input_dict)
        return logits * 2.0, Categorical, state

    def dist_fn_old(
        policy,
        model,
        obs_batch,
        *,
        state_batches=None,
        seq_lens=None,
        prev_action_batch=None,
        prev_reward_batch=None,
        explore=None,
        is_training=None,
    ):
        logits, state = model({"obs": obs_batch})
        return logits * 2.0, Categorical, state

    for fn in (dist_fn_new, dist_fn_old):
        pol = DynamicTFPolicy(OBS, ACT, config(), pg_loss, action_distribution_fn=fn, make_model=make_model)
        assert pol.dist_class is Categorical
        _, _, extra = pol.compute_actions(pg_batch(3)["obs"])
        assert extra["action_dist_inputs"].shape == (3, 2)


def test_action_distribution_fn_without_a_class_is_refused():
    def make_model(policy, obs_space, action_space, cfg):
        return ModelCatalog.get_model_v2(obs_space, action_space, 2, cfg["model"], framework="tf")

    def no_class(
        policy,
        model,
        input_dict,
        *,
        state_batches=None,
        seq_lens=None,
        explore=None,
        timestep=None,
        is_training=None,
    ):
        logits, state = model(input_dict)
        return logits, None, state

    with pytest.raises(ValueError, match="returned no action distribution class"):
        DynamicTFPolicy(OBS, ACT, config(), pg_loss, action_distribution_fn=no_class, make_model=make_model)


def test_deprecated_obs_include_prev_action_reward_and_divisibility_req():
    with pytest.warns(DeprecationWarning, match="obs_include_prev_action_reward"):
        pol = DynamicTFPolicy(
            OBS,
            ACT,
            config(),
            pg_loss,
            obs_include_prev_action_reward=True,
            get_batch_divisibility_req=lambda policy: 4,
        )
    assert pol.loss_initialized() and pol.batch_divisibility_req == 4


def test_copy_checks_its_inputs(pg):
    with pytest.raises(ValueError, match="copy\\(\\) got 1 input tensors for the 3 inputs"):
        pg.copy([pg._loss_input_dict["obs"]])
    with pg.graph.as_default():
        bad = [
            ("obs", tf1.placeholder(tf.float32, [None, 5])),
            ("actions", pg._loss_input_dict["actions"]),
            ("rewards", pg._loss_input_dict["rewards"]),
        ]
    with pytest.raises(ValueError, match=r"input 'obs' has shape \[None, 5\]"):
        pg.copy(bad)


def test_tower_copy_shares_variables_and_has_no_action_graph(pg):
    with pg.graph.as_default():
        inputs = [(k, tf1.placeholder(v.dtype, v.shape)) for k, v in pg._loss_input_dict.items()]
    n_vars = len(pg.graph.get_collection("variables"))
    tower = pg.copy(inputs)
    assert tower._is_tower and tower.exploration is None and tower.model is pg.model
    assert len(pg.graph.get_collection("variables")) == n_vars
    assert tower.loss_initialized() and tower._apply_op is None
    assert {v.ref() for _, v in tower._grads_and_vars} <= {v.ref() for v in pg.variables()}


def test_checkpoint_round_trip_rebuilds_the_class(pg, tmp_path):
    pg.learn_on_batch(pg_batch(8, seed=3))
    pg.export_checkpoint(str(tmp_path))
    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert type(restored).__name__ == "PGGraphPolicy"
    for k, v in pg.get_weights().items():
        np.testing.assert_array_equal(restored.get_weights()[k], v)
    obs = pg_batch(4)["obs"]
    np.testing.assert_allclose(
        restored.compute_actions(obs, explore=False)[2]["action_dist_inputs"],
        pg.compute_actions(obs, explore=False)[2]["action_dist_inputs"],
        rtol=1e-6,
        atol=1e-6,
    )


# ---------------------------------------------------------------------- LSTM

LSTM_MODEL = {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 4, "max_seq_len": 4}


@pytest.fixture(scope="module")
def lstm():
    # Two fake GPUs: the same policy covers acting, learn_on_batch and the towers.
    return PGGraphPolicy(OBS, ACT, config(model=LSTM_MODEL, lr=0.01, num_gpus=2, _fake_gpus=True))


def test_lstm_policy_computes_actions_with_state(lstm):
    assert lstm.is_recurrent() and lstm.num_state_tensors() == 2
    init = lstm.get_initial_state()
    assert [s.shape for s in init] == [(4,), (4,)]
    obs = pg_batch(3)["obs"]
    states = [np.stack([s] * 3) for s in init]
    actions, state_out, _ = lstm.compute_actions(obs, state_batches=states)
    assert actions.shape == (3,) and [s.shape for s in state_out] == [(3, 4), (3, 4)]
    assert not np.allclose(state_out[0], 0.0, atol=1e-6)
    _, state_out2, _ = lstm.compute_actions(obs, state_batches=state_out)
    assert not np.allclose(state_out2[0], state_out[0], atol=1e-6)
    with pytest.raises(ValueError, match=r"got 1 state batch\(es\), but this policy's model takes 2"):
        lstm.compute_actions(obs, state_batches=states[:1])


def _lstm_batch(seq_lens, seed):
    data = pg_batch(sum(seq_lens), seed=seed)
    data["state_in_0"] = np.zeros((len(seq_lens), 4), np.float32)
    data["state_in_1"] = np.zeros((len(seq_lens), 4), np.float32)
    data["seq_lens"] = np.array(seq_lens, np.int32)
    return SampleBatch(dict(data))


def test_lstm_policy_learns_on_one_device_and_on_towers(lstm):
    assert {"state_in_0", "state_in_1", "seq_lens"} <= set(lstm._loss_input_dict)
    before = lstm.get_weights()
    out = lstm.learn_on_batch(_lstm_batch([4, 3], seed=5))
    assert np.isfinite(out["learner_stats"]["mean_reward"])
    after = lstm.get_weights()
    assert any(not np.allclose(after[k], before[k], atol=1e-6) for k in before)
    assert lstm.load_batch_into_buffer(_lstm_batch([3, 3, 3, 3], seed=6)) > 0
    out = lstm.learn_on_loaded_batch()
    assert set(out) == {"tower_0", "tower_1"}
    assert any(not np.allclose(lstm.get_weights()[k], after[k], atol=1e-6) for k in after)


def _numpy_lstm_step(w, obs, h, c):
    """One LSTM step of the model (tanh FC 8 -> Keras LSTM, gates i, f, c, o -> logits)."""

    def sigmoid(x):
        return 1.0 / (1.0 + np.exp(-x))

    x = np.tanh(obs @ w["fc_1/kernel"] + w["fc_1/bias"])
    z = x @ w["lstm/lstm_cell/kernel"] + h @ w["lstm/lstm_cell/recurrent_kernel"] + w["lstm/lstm_cell/bias"]
    i, f, g, o = np.split(z, 4, axis=1)
    c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h_new = sigmoid(o) * np.tanh(c_new)
    return h_new @ w["logits/kernel"] + w["logits/bias"], h_new, c_new


def test_lstm_export_saved_model_and_onnx_in_onnxruntime(lstm, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    lstm.export_model(str(tmp_path / "sm"))
    assert (tmp_path / "sm" / "saved_model.pb").exists()
    lstm.export_model(str(tmp_path / "onnx"), onnx=13)
    sess = ort.InferenceSession(
        str(tmp_path / "onnx" / "saved_model.onnx"), providers=["CPUExecutionProvider"]
    )
    assert {i.name for i in sess.get_inputs()} == {"obs:0", "state_in_0:0", "state_in_1:0", "seq_lens:0"}
    fetch = [lstm._sampled_action.name, lstm._dist_inputs.name] + [s.name for s in lstm._state_outputs]
    weights = lstm.get_weights()
    rng = np.random.default_rng(3)
    for n in (1, 5):
        obs = pg_batch(n, seed=20 + n)["obs"]
        states = [rng.normal(0, 0.5, (n, 4)).astype(np.float32) for _ in range(2)]
        _, state_out, extra = lstm.compute_actions(obs, state_batches=states, explore=False)
        actions, logits, h, c = sess.run(
            fetch,
            {
                "obs:0": obs,
                "state_in_0:0": states[0],
                "state_in_1:0": states[1],
                "seq_lens:0": np.ones(n, np.int32),
            },
        )
        # The policy's session and an independent numpy LSTM step agree with onnxruntime.
        np.testing.assert_allclose(logits, extra["action_dist_inputs"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(h, state_out[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(c, state_out[1], rtol=1e-5, atol=1e-5)
        want_logits, want_h, want_c = _numpy_lstm_step(weights, obs, *states)
        np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(c, want_c, rtol=1e-5, atol=1e-5)
        assert actions.shape == (n,) and set(actions.tolist()) <= {0, 1}
    # One sequence of 5 steps: the ONNX loop runs 5 times (numpy unrolls it).
    obs = pg_batch(5, seed=30)["obs"]
    h, c = [rng.normal(0, 0.5, (1, 4)).astype(np.float32) for _ in range(2)]
    feed = {"obs:0": obs, "state_in_0:0": h, "state_in_1:0": c, "seq_lens:0": np.array([5], np.int32)}
    _, logits, h_out, c_out = sess.run(fetch, feed)
    for t in range(5):
        want, h, c = _numpy_lstm_step(weights, obs[t : t + 1], h, c)
        np.testing.assert_allclose(logits[t : t + 1], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h_out, h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c_out, c, rtol=1e-5, atol=1e-5)


@pytest.mark.tf_eager_code
def test_graph_policy_works_next_to_eager_tf_and_torch(pg):
    torch = pytest.importorskip("torch")
    eager_model = ModelCatalog.get_model_v2(OBS, ACT, 2, {"fcnet_hiddens": [8]}, framework="tf2")
    out, _ = eager_model({"obs": tf.zeros((2, 3))})
    assert out.shape == (2, 2) and tf.executing_eagerly()
    assert torch.ones(2).sum().item() == 2.0
    actions, _, _ = pg.compute_actions(pg_batch(4)["obs"])
    assert actions.shape == (4,)
    assert "learner_stats" in pg.learn_on_batch(pg_batch(8, seed=9))
    out2, _ = eager_model({"obs": tf.zeros((2, 3))})
    np.testing.assert_allclose(out2.numpy(), out.numpy())
