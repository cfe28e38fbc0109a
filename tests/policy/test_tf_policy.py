"""TFPolicy built by hand from a session and graph tensors (as the spec allows).

Expectations come from numpy (log-softmax of the fetched logits, weights
read back), invariants (graph size, state round trips, compute+apply ==
learn) and real consumers (tf1 Saver in a fresh graph, tf.saved_model.load in
a fresh process, onnxruntime).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")
gym = pytest.importorskip("gymnasium")

from rlpolicy.agents.callbacks import DefaultCallbacks  # noqa: E402
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.models.tf.tf_action_dist import Categorical  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_policy import TFPolicy  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
MODEL = {"fcnet_hiddens": [8]}


class MarkingCallbacks(DefaultCallbacks):
    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
        result["rows_seen"] = len(train_batch)


def build_policy(cls=TFPolicy, losses=1, **config):
    """A hand-built PG policy: placeholders, FC model, Categorical, loss -mean(logp * adv)."""
    graph = tf1.Graph()
    graph.seed = 0
    sess = tf1.Session(graph=graph)
    cfg = {"model": MODEL, "lr": 0.05, "callbacks": MarkingCallbacks, **config}
    with graph.as_default():
        model = ModelCatalog.get_model_v2(OBS, ACT, 3, dict(MODEL), framework="tf")
        obs = tf1.placeholder(tf.float32, [None, 4], name="obs")
        act = tf1.placeholder(tf.int64, [None], name="actions")
        adv = tf1.placeholder(tf.float32, [None], name="advantages")
        logits, _ = model({"obs": obs})
        dist = Categorical(logits, model)
        loss = -tf.reduce_mean(dist.logp(act) * adv)
        if losses == 2:
            loss = [loss, tf.reduce_mean(tf.square(model.value_function() - adv))]
    return cls(
        OBS,
        ACT,
        cfg,
        sess,
        obs,
        dist.sample(),
        loss,
        [("obs", obs), ("actions", act), ("advantages", adv)],
        model=model,
        sampled_action_logp=dist.sampled_action_logp(),
        action_input=act,
        dist_inputs=logits,
        dist_class=Categorical,
    )


def batch(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            "obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
            "actions": rng.integers(0, 3, n),
            "advantages": rng.normal(size=n).astype(np.float32),
        }
    )


@pytest.fixture(scope="module")
def policy():
    return build_policy()


def test_compute_actions_outputs_and_timestep(policy):
    obs = batch(5)["obs"]
    before = policy.global_timestep
    actions, states, extra = policy.compute_actions(obs)
    assert actions.shape == (5,) and states == []
    assert set(extra) == {"action_prob", "action_logp", "action_dist_inputs"}
    np.testing.assert_allclose(extra["action_prob"], np.exp(extra["action_logp"]), rtol=1e-5, atol=1e-6)
    policy.compute_actions(list(obs[:2]))
    policy.compute_actions_from_input_dict(SampleBatch({"obs": obs[:3]}))
    assert policy.global_timestep == before + 5 + 2 + 3


def test_compute_log_likelihoods_is_the_log_softmax(policy):
    obs, acts = batch(6)["obs"], np.array([0, 1, 2, 2, 1, 0])
    _, _, extra = policy.compute_actions(obs)
    logits = extra["action_dist_inputs"].astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(
        policy.compute_log_likelihoods(acts, obs), logp[np.arange(6), acts], rtol=1e-5, atol=1e-6
    )


def test_learn_on_batch_runs_callbacks_and_returns_stats(policy):
    out = policy.learn_on_batch(batch(6, seed=1))
    assert out["custom_metrics"] == {"rows_seen": 6}
    assert "learner_stats" in out


def test_compute_plus_apply_gradients_equals_learn_on_batch():
    a, b = build_policy(), build_policy()
    b.set_weights(a.get_weights())
    data = batch(6, seed=2)
    grads, info = a.compute_gradients(data.copy())
    assert len(grads) == len(a._grads) and "learner_stats" in info
    a.apply_gradients(grads)
    b.learn_on_batch(data.copy())
    for k, v in a.get_weights().items():
        np.testing.assert_allclose(v, b.get_weights()[k], rtol=1e-5, atol=1e-6, err_msg=k)
    with pytest.raises(ValueError, match="apply_gradients got 1 gradients"):
        a.apply_gradients(grads[:1])


def test_get_set_weights_do_not_grow_the_graph(policy):
    weights = policy.get_weights()
    assert list(weights) == [
        "fc_1/kernel",
        "fc_1/bias",
        "fc_value_1/kernel",
        "fc_value_1/bias",
        "fc_out/kernel",
        "fc_out/bias",
        "value_out/kernel",
        "value_out/bias",
    ]
    n_ops = len(policy.graph.get_operations())
    for _ in range(1000):
        policy.set_weights(policy.get_weights())
    assert len(policy.graph.get_operations()) == n_ops
    changed = {k: v + 1.0 for k, v in weights.items()}
    policy.set_weights(changed)
    np.testing.assert_allclose(policy.get_weights()["fc_out/bias"], weights["fc_out/bias"] + 1.0)
    policy.set_weights(weights)


@pytest.mark.parametrize(
    "weights,match",
    [
        (
            lambda w: {**w, "fc_1/kernel": np.zeros((2, 2), np.float32)},
            r"'fc_1/kernel' has shape \(2, 2\), the model's is \(4, 8\)",
        ),
        (lambda w: {"fc_1/kernel": w["fc_1/kernel"]}, r"missing keys \['fc_1/bias', "),
        (lambda w: {"nope": np.zeros(1)}, "none of the keys"),
        (lambda w: [np.zeros(1)], "list of 1 values for 8 variables"),
    ],
)
def test_set_weights_rejects_bad_input(policy, weights, match):
    before = policy.get_weights()
    with pytest.raises(ValueError, match=match):
        policy.set_weights(weights(before))
    np.testing.assert_array_equal(policy.get_weights()["fc_1/kernel"], before["fc_1/kernel"])


def test_set_state_restores_optimizer_state_so_the_next_step_is_identical():
    pol = build_policy()
    pol.learn_on_batch(batch(6, seed=3))
    pol.global_timestep = 17
    state = pol.get_state()
    assert set(state) == {"weights", "global_timestep", "_optimizer_variables", "_exploration_state"}
    pol.learn_on_batch(batch(6, seed=4))
    expected = pol.get_weights()
    for seed in (5, 6):  # move weights and Adam moments elsewhere
        pol.learn_on_batch(batch(6, seed=seed))
    pol.global_timestep = 99
    pol.set_weights(state["weights"])  # weights alone do not reproduce the step
    pol.learn_on_batch(batch(6, seed=4))
    assert not np.allclose(pol.get_weights()["fc_out/bias"], expected["fc_out/bias"], atol=1e-7)
    pol.set_state(state)
    assert pol.global_timestep == 17
    pol.learn_on_batch(batch(6, seed=4))
    for k, v in expected.items():
        np.testing.assert_allclose(pol.get_weights()[k], v, rtol=1e-6, atol=1e-7, err_msg=k)


def test_single_cpu_buffer_slices_and_learns(policy):
    fresh = build_policy(train_batch_size=8, sgd_minibatch_size=4)
    with pytest.raises(ValueError, match="Must call Policy.load_batch_into_buffer"):
        fresh.learn_on_loaded_batch()
    assert fresh.load_batch_into_buffer(batch(8, seed=7)) == 8
    assert fresh.get_num_samples_loaded_into_buffer() == 8
    out = fresh.learn_on_loaded_batch(offset=4)
    assert out["custom_metrics"] == {"rows_seen": 4}
    with pytest.raises(IndexError, match="buffer_index=1 is out of range"):
        fresh.get_num_samples_loaded_into_buffer(1)


class TwoOptimizerPolicy(TFPolicy):
    def optimizer(self):
        return [tf1.train.AdamOptimizer(0.01), tf1.train.GradientDescentOptimizer(0.01)]


def test_more_than_one_loss_gives_one_gradient_group_per_optimizer():
    pol = build_policy(TwoOptimizerPolicy, losses=2, _tf_policy_handles_more_than_one_loss=True)
    assert len(pol._optimizers) == 2 and len(pol._losses) == 2
    grads, _ = pol.compute_gradients(batch(6, seed=8))
    assert len(grads) == 2 and len(grads[0]) == 4 and len(grads[1]) == 4
    before = pol.get_weights()
    pol.apply_gradients(grads)
    assert not np.allclose(pol.get_weights()["value_out/bias"], before["value_out/bias"], atol=1e-6)
    assert "learner_stats" in pol.learn_on_batch(batch(6, seed=9))


def test_get_placeholder_and_loss_initialized(policy):
    assert policy.loss_initialized()
    assert policy.get_placeholder("obs") is policy._obs_input
    assert policy.get_placeholder("advantages").name == "advantages:0"
    with pytest.raises(KeyError, match="no loss input 'nope'"):
        policy.get_placeholder("nope")
    assert policy.get_session().graph is policy.graph
    assert len(policy.variables()) == 8


def test_errors_of_the_constructor_and_compute_methods():
    graph = tf1.Graph()
    sess = tf1.Session(graph=graph)
    with graph.as_default():
        obs = tf1.placeholder(tf.float32, [None, 4], name="obs")
        h = tf1.placeholder(tf.float32, [None, 2], name="h_in")
        seq = tf1.placeholder(tf.int32, [None], name="seq_lens")
        action = tf.argmax(tf.concat([obs[:, :2] + h, obs[:, 2:]], axis=1), axis=1)
    with pytest.raises(ValueError, match="seq_lens tensor must be given"):
        TFPolicy(OBS, ACT, {}, sess, obs, action, [], [], state_inputs=[h], state_outputs=[h])
    with pytest.raises(ValueError, match="ModelV2|tf.keras.Model"):
        TFPolicy(OBS, ACT, {}, sess, obs, action, [], [], model="not a model")
    pol = TFPolicy(OBS, ACT, {}, sess, obs, action, [], [], state_inputs=[h], state_outputs=[h], seq_lens=seq)
    assert pol.is_recurrent() and pol.num_state_tensors() == 1 and not pol.loss_initialized()
    o = np.zeros((2, 4), np.float32)
    acts, states, _ = pol.compute_actions(o, state_batches=[np.ones((2, 2), np.float32)])
    assert acts.tolist() == [0, 0] and states[0].shape == (2, 2)
    with pytest.raises(
        ValueError,
        match=r"compute_actions: this policy's model is recurrent and takes 1 "
        r"state input\(s\).*none were given",
    ):
        pol.compute_actions(o)
    with pytest.raises(ValueError, match="w/o a self._log_likelihood op"):
        pol.compute_log_likelihoods(np.zeros(2), o)
    with pytest.raises(ValueError, match="has no loss"):
        pol.learn_on_batch(SampleBatch({"obs": o}))
    with pytest.raises(NotImplementedError):
        pol.copy([])


def test_wrong_number_of_state_batches_for_log_likelihoods_names_placeholders():
    graph = tf1.Graph()
    sess = tf1.Session(graph=graph)
    with graph.as_default():
        obs = tf1.placeholder(tf.float32, [None, 4], name="obs")
        h = tf1.placeholder(tf.float32, [None, 3], name="state_h")
        seq = tf1.placeholder(tf.int32, [None], name="seq_lens")
        act = tf1.placeholder(tf.int64, [None], name="act")
        logits = obs[:, :3] + h
        dist = Categorical(logits, None)
    pol = TFPolicy(
        OBS,
        ACT,
        {},
        sess,
        obs,
        dist.sample(),
        [],
        [],
        action_input=act,
        dist_inputs=logits,
        dist_class=Categorical,
        state_inputs=[h],
        state_outputs=[h],
        seq_lens=seq,
    )
    o = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match=r"placeholders \['state_h:0'\], got 2"):
        pol.compute_log_likelihoods(np.zeros(2), o, state_batches=[o, o])
    logp = pol.compute_log_likelihoods(np.array([0, 2]), o, state_batches=[np.zeros((2, 3))])
    np.testing.assert_allclose(logp, np.log([1 / 3, 1 / 3]), rtol=1e-5, atol=1e-6)


def test_export_checkpoint_restores_with_saver_into_a_fresh_graph(policy, tmp_path):
    policy.export_checkpoint(str(tmp_path), filename_prefix="ckpt")
    assert (tmp_path / "ckpt.index").exists() and (tmp_path / "ckpt.meta").exists()
    expected = policy.get_weights()
    graph = tf1.Graph()
    with graph.as_default(), tf1.Session(graph=graph) as sess:
        saver = tf1.train.import_meta_graph(str(tmp_path / "ckpt.meta"))
        saver.restore(sess, str(tmp_path / "ckpt"))
        restored = {v.op.name: v for v in tf1.global_variables()}
        for name, value in expected.items():
            np.testing.assert_array_equal(sess.run(restored[name]), value)


_LOAD_SCRIPT = """
import json, sys, numpy as np, tensorflow as tf
m = tf.saved_model.load(sys.argv[1])
f = m.signatures["serving_default"]
obs = np.array(json.loads(sys.argv[2]), np.float32)
out = f(observations=tf.constant(obs), is_training=tf.constant(False),
        timestep=tf.constant(0, tf.int64))
print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))
"""


def test_saved_model_loads_in_a_fresh_process_and_reproduces_outputs(policy, tmp_path):
    obs = batch(4, seed=11)["obs"]
    _, _, extra = policy.compute_actions(obs)
    policy.export_model(str(tmp_path / "sm"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_SCRIPT, str(tmp_path / "sm"), json.dumps(obs.tolist())],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out) == {"actions_0", "action_prob", "action_logp", "action_dist_inputs"}
    np.testing.assert_allclose(out["action_dist_inputs"], extra["action_dist_inputs"], rtol=1e-5, atol=1e-6)
    assert all(0 <= a < 3 for a in out["actions_0"])
    with pytest.raises(FileExistsError, match="not empty"):
        policy.export_model(str(tmp_path / "sm"))


def test_onnx_export_runs_in_onnxruntime(policy, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    obs = batch(5, seed=12)["obs"]
    _, _, extra = policy.compute_actions(obs)
    policy.export_model(str(tmp_path), onnx=13)
    sess = ort.InferenceSession(str(tmp_path / "saved_model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    logits_name = policy._dist_inputs.name
    assert logits_name in names
    (logits,) = sess.run([logits_name], {"obs:0": obs})
    np.testing.assert_allclose(logits, extra["action_dist_inputs"], rtol=1e-5, atol=1e-6)


def test_import_model_from_h5(policy, tmp_path):
    other = build_policy()
    other.set_weights({k: v + 0.5 for k, v in policy.get_weights().items()})
    path = str(tmp_path / "w.h5")
    with other.graph.as_default(), other.get_session().as_default():
        other.model.base_model.save_weights(path)
    target = build_policy()
    target.import_model_from_h5(path)
    for k, v in other.get_weights().items():
        np.testing.assert_allclose(target.get_weights()[k], v, err_msg=k)


def test_devices_are_cpu_per_fake_gpu_and_gpu_per_real_one(monkeypatch):
    from rlpolicy._core.config import complete_config
    from rlpolicy.policy._tf import graph

    def plan(gpus, **config):
        return graph.plan_tf_devices(complete_config(config), gpus)

    two = ["/physical_device:GPU:0", "/physical_device:GPU:1"]
    assert plan([], num_gpus=0) == ["/cpu:0"]
    assert plan([], num_gpus=2) == ["/cpu:0", "/cpu:0"]  # no GPU visible
    assert plan(two, num_gpus=3, _fake_gpus=True) == ["/cpu:0"] * 3
    assert plan(two, num_gpus=2) == ["/gpu:0", "/gpu:1"]
    assert plan(two, num_gpus=0.5) == ["/gpu:0"]
    monkeypatch.setattr(graph, "detect_ray_context", lambda: ("worker", []))
    with pytest.raises(ValueError, match="TFPolicy was not able to find enough GPU IDs"):
        plan(two, num_gpus=1)


def test_onnx_export_of_image_policy_takes_nchw_inputs(tmp_path):
    # RLlib 1.11 converts with inputs_as_nchw: a (B, H, W, C) observation is
    # fed to the ONNX model as (B, C, H, W).
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    import gymnasium as gym
    from tf_graph_policies import PGGraphPolicy

    obs_space = gym.spaces.Box(0.0, 1.0, (6, 6, 2), np.float32)
    policy = PGGraphPolicy(
        obs_space,
        gym.spaces.Discrete(3),
        {"model": {"conv_filters": [[4, [3, 3], 2], [3, [3, 3], 1]]}, "seed": 0},
    )
    obs = np.random.default_rng(3).uniform(0, 1, (2, 6, 6, 2)).astype(np.float32)
    _, _, extra = policy.compute_actions(obs, explore=False)
    policy.export_model(str(tmp_path), onnx=13)
    sess = ort.InferenceSession(str(tmp_path / "saved_model.onnx"), providers=["CPUExecutionProvider"])
    (inp,) = [i for i in sess.get_inputs() if i.name == "obs:0"]
    assert list(inp.shape)[1:] == [2, 6, 6]
    (logits,) = sess.run([policy._dist_inputs.name], {"obs:0": obs.transpose(0, 3, 1, 2)})
    np.testing.assert_allclose(logits, extra["action_dist_inputs"], rtol=1e-5, atol=1e-5)
