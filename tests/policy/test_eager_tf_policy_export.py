"""Eager TF policy export: SavedModel (loaded in a fresh process), ONNX, checkpoints."""

import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rlpolicy.policy._eager import export as eager_export  # noqa: E402
from rlpolicy.policy.eager_tf_policy import build_eager_tf_policy  # noqa: E402
from rlpolicy.policy.policy import Policy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402

pytestmark = pytest.mark.tf

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
FC = {"fcnet_hiddens": [4]}
LSTM = {"fcnet_hiddens": [4], "use_lstm": True, "lstm_cell_size": 3, "max_seq_len": 4}


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    return -tf.reduce_mean(logp * train_batch[SampleBatch.REWARDS])


PG = build_eager_tf_policy("ExportPG", loss_fn=pg_loss)


def make(model, seed=0):
    policy = PG(OBS, ACT, {"model": dict(model), "lr": 0.05})
    r = np.random.default_rng(seed)
    policy.set_weights(
        {k: r.normal(0, 0.7, v.shape).astype(np.float32) for k, v in policy.get_weights(as_dict=True).items()}
    )
    return policy


@pytest.fixture(scope="module")
def fc_policy():
    return make(FC)


@pytest.fixture(scope="module")
def lstm_policy():
    return make(LSTM, seed=1)


OBS_BATCH = np.random.default_rng(7).uniform(-1, 1, (5, 3)).astype(np.float32)
STATE = [np.random.default_rng(8).normal(size=(5, 3)).astype(np.float32) for _ in range(2)]

LOADER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    out = {}
    for name, d in json.loads(sys.argv[1]).items():
        sig = tf.saved_model.load(d).signatures["serving_default"]
        feeds = dict(np.load(d + "_inputs.npz"))
        res = sig(**{k: tf.constant(v) for k, v in feeds.items()})
        out[name] = {k: v.numpy().tolist() for k, v in res.items()}
    print("RESULT" + json.dumps(out))
""")


def test_saved_model_reproduces_outputs_in_a_fresh_process(fc_policy, lstm_policy, tmp_path):
    dirs = {"fc": str(tmp_path / "fc"), "lstm": str(tmp_path / "lstm")}
    fc_policy.export_model(dirs["fc"])
    lstm_policy.export_model(dirs["lstm"])
    np.savez(dirs["fc"] + "_inputs.npz", obs=OBS_BATCH)
    np.savez(
        dirs["lstm"] + "_inputs.npz",
        obs=OBS_BATCH,
        state_in_0=STATE[0],
        state_in_1=STATE[1],
        seq_lens=np.ones(5, np.int32),
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-c", LOADER, json.dumps(dirs)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.split("RESULT", 1)[1])
    _, _, fc_extra = fc_policy.compute_actions(OBS_BATCH, explore=False)
    np.testing.assert_allclose(got["fc"]["output"], fc_extra["action_dist_inputs"], rtol=1e-5, atol=1e-6)
    _, state_out, lstm_extra = lstm_policy.compute_actions(OBS_BATCH, STATE, explore=False)
    np.testing.assert_allclose(got["lstm"]["output"], lstm_extra["action_dist_inputs"], rtol=1e-5, atol=1e-6)
    for i in range(2):
        np.testing.assert_allclose(got["lstm"][f"state_out_{i}"], state_out[i], rtol=1e-5, atol=1e-6)


def test_onnx_export_runs_in_onnxruntime(lstm_policy, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    lstm_policy.export_model(str(tmp_path), onnx=13)
    sess = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["obs", "state_in_0", "state_in_1", "seq_lens"]
    assert [o.name for o in sess.get_outputs()] == ["output", "state_out_0", "state_out_1"]
    out, h, c = sess.run(
        None,
        {"obs": OBS_BATCH, "state_in_0": STATE[0], "state_in_1": STATE[1], "seq_lens": np.ones(5, np.int32)},
    )
    _, state_out, extra = lstm_policy.compute_actions(OBS_BATCH, STATE, explore=False)
    np.testing.assert_allclose(out, extra["action_dist_inputs"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, state_out[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c, state_out[1], rtol=1e-5, atol=1e-5)
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]


def test_onnx_without_tf2onnx_is_a_clear_error(fc_policy, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tf2onnx", None)
    with pytest.raises(RuntimeError, match="requires `tf2onnx` to be installed"):
        fc_policy.export_model(str(tmp_path), onnx=13)


@pytest.mark.tf_eager_code
def test_export_checkpoint_restores_with_tf_checkpoint_and_from_checkpoint(tmp_path):
    a = make(FC)
    batch = SampleBatch(
        {
            SampleBatch.OBS: OBS_BATCH,
            SampleBatch.ACTIONS: np.arange(5) % 3,
            SampleBatch.REWARDS: np.linspace(-1, 1, 5).astype(np.float32),
        }
    )
    a.learn_on_batch(batch.copy())
    a.compute_actions(OBS_BATCH)
    a.export_checkpoint(str(tmp_path), filename_prefix="ckpt")
    assert {"ckpt.index", "rlpolicy_checkpoint.json"} <= set(os.listdir(tmp_path))

    b = make(FC, seed=3)
    ckpt = eager_export.make_tf_checkpoint(b.model, b._optimizers, b.global_timestep)
    ckpt.read(str(tmp_path / "ckpt")).assert_existing_objects_matched()
    assert eager_export.restored_timestep(ckpt) == a.global_timestep == 5
    for k, v in a.get_weights(as_dict=True).items():
        np.testing.assert_allclose(b.get_weights(as_dict=True)[k], v, rtol=1e-6, atol=1e-7)
    for x, y in zip(a.get_state()["_optimizer_variables"], b.get_state()["_optimizer_variables"]):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)

    c = PG.from_checkpoint(str(tmp_path), trusted="imported")
    assert type(c) is PG and c.global_timestep == 5
    a.learn_on_batch(batch.copy())
    c.learn_on_batch(batch.copy())  # same Adam state -> same step
    for k, v in a.get_weights(as_dict=True).items():
        np.testing.assert_allclose(c.get_weights(as_dict=True)[k], v, rtol=1e-5, atol=1e-6)
    assert isinstance(c, Policy)
