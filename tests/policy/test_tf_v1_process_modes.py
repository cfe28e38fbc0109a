"""TF policies in a process whose TF runs in TF1 mode, as TF1 code and RLlib's own
``try_import_tf`` leave it: ``tf1.disable_v2_behavior()``, only
``disable_v2_tensorshape()`` (Dimension objects everywhere) or only
``disable_eager_execution()``.

Each mode needs a fresh process: a 1.x-style client script (custom TFModelV2, a loss
through ``build_tf_policy``, SGD) builds graph ("tf"), eager ("tf2") and traced
policies there, calls them from the process's (graph) mode and checks against numpy:
greedy actions, logits, one SGD step of the PG loss, get_state/set_state,
export_checkpoint/from_checkpoint, SavedModel (loaded with the TF1 loader) and ONNX.

Also: constructing graph policies (batch-norm update ops included) leaves no
"changed by setting attribute after it was run by a session" warning.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("gymnasium")

ROOT = Path(__file__).resolve().parents[2]
# These tests start their own processes: the RLPOLICY_TF_V1 pass need not repeat them.
pytestmark = pytest.mark.skipif(
    os.environ.get("RLPOLICY_TF_V1", "") not in ("", "0", "false"),
    reason="runs its own fresh processes (normal pass)",
)

CLIENT = textwrap.dedent('''
    import os, sys, tempfile
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    MODE, KINDS = sys.argv[1], sys.argv[2].split(",")
    getattr(tf.compat.v1, MODE)()

    import gymnasium as gym
    import numpy as np
    from rlpolicy.models.catalog import ModelCatalog
    from rlpolicy.models.tf.tf_modelv2 import TFModelV2
    from rlpolicy.policy.sample_batch import SampleBatch
    from rlpolicy.policy.tf_policy_template import build_tf_policy
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf()
    W0 = np.array([[0.5, -0.5], [1.0, 0.0], [0.0, 2.0], [-1.0, 1.0]], np.float32)
    LR = 0.5


    class LinearModel(TFModelV2):
        """logits = obs @ W0 (+ zero bias); a separate zero value head."""

        def __init__(self, obs_space, action_space, num_outputs, model_config, name):
            super().__init__(obs_space, action_space, num_outputs, model_config, name)
            inp = tf.keras.layers.Input(shape=obs_space.shape, name="observations")
            logits = tf.keras.layers.Dense(
                num_outputs, name="logits", bias_initializer="zeros",
                kernel_initializer=tf.keras.initializers.Constant(W0))(inp)
            value = tf.keras.layers.Dense(1, name="value", kernel_initializer="zeros")(inp)
            self.base_model = tf.keras.Model(inp, [logits, value])

        def forward(self, input_dict, state, seq_lens):
            logits, self._value = self.base_model(input_dict["obs"])
            return logits, state

        def value_function(self):
            return tf.reshape(self._value, [-1])


    ModelCatalog.register_custom_model("v1_linear", LinearModel)


    def pg_loss(policy, model, dist_class, train_batch):
        logits, _ = model(train_batch)
        logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
        return -tf.reduce_mean(logp * train_batch[SampleBatch.REWARDS])


    def sgd(policy, config):
        if config["framework"] == "tf":
            return tf1.train.GradientDescentOptimizer(LR)
        return tf.keras.optimizers.SGD(LR)


    V1PG = build_tf_policy("V1PG", loss_fn=pg_loss, optimizer_fn=sgd)
    OBS_SPACE, ACT_SPACE = gym.spaces.Box(-2.0, 2.0, (4,), np.float32), gym.spaces.Discrete(2)
    rng = np.random.default_rng(0)
    OBS = rng.uniform(-2, 2, (6, 4)).astype(np.float32)
    ACTIONS = np.array([0, 1, 1, 0, 1, 0])
    REWARDS = np.array([1.0, -0.5, 2.0, 0.5, -1.0, 1.5], np.float32)


    def softmax(z):
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)


    # One SGD step on -mean(logp(a) * r), by hand.
    G = -(np.eye(2)[ACTIONS] - softmax(OBS @ W0)) * REWARDS[:, None] / len(OBS)
    W1, B1 = W0 - LR * OBS.T @ G, -LR * G.sum(0)


    def close(got, want, what):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5, err_msg=what)


    def kernel_and_bias(policy):
        weights = policy.get_weights()
        arrays = list(weights.values()) if isinstance(weights, dict) else list(weights)
        (kernel,) = [a for a in arrays if a.shape == (4, 2)]
        (bias,) = [a for a in arrays if a.shape == (2,)]
        return kernel, bias


    def make(kind):
        config = {"model": {"custom_model": "v1_linear"}, "seed": 0, "framework": "tf",
                  "explore": False}
        if kind == "tf":
            return V1PG, V1PG(OBS_SPACE, ACT_SPACE, config)
        cls = V1PG.as_eager()
        config.update(framework="tf2", eager_tracing=(kind == "traced"))
        return cls, cls(OBS_SPACE, ACT_SPACE, config)


    def logits_of(policy):
        return policy.compute_actions(OBS, explore=False)[2]["action_dist_inputs"]


    def check_saved_model(path, want, what):
        # The TF1 loader, in a graph of its own: works whatever mode the process is in.
        with tf1.Graph().as_default() as graph, tf1.Session(graph=graph) as sess:
            meta = tf1.saved_model.loader.load(sess, ["serve"], path)
            sig = meta.signature_def["serving_default"]
            (obs_key,) = [k for k in sig.inputs if "obs" in k]
            (out_key,) = [k for k in sig.outputs if k in ("action_dist_inputs", "output")]
            out = sess.run(sig.outputs[out_key].name, {sig.inputs[obs_key].name: OBS})
        close(out, want, what)


    def check_onnx(policy, kind, path, want):
        try:
            import onnxruntime as ort
            import tf2onnx  # noqa: F401
        except ImportError:
            return
        policy.export_model(path, onnx=13)
        if kind == "tf":
            sess = ort.InferenceSession(os.path.join(path, "saved_model.onnx"), providers=["CPUExecutionProvider"])
            (out,) = sess.run([policy._dist_inputs.name], {"obs:0": OBS})
        else:
            sess = ort.InferenceSession(os.path.join(path, "model.onnx"), providers=["CPUExecutionProvider"])
            out = sess.run(["output"], {"obs": OBS})[0]
        close(out, want, f"{kind}: ONNX logits")


    assert not tf.executing_eagerly() or MODE == "disable_v2_tensorshape"
    for kind in KINDS:
        cls, policy = make(kind)
        action, _, _ = policy.compute_single_action(OBS[0], explore=False)
        assert int(action) == int(np.argmax(OBS[0] @ W0)), (kind, action)
        close(logits_of(policy), OBS @ W0, f"{kind}: logits before learning")
        policy.learn_on_batch(SampleBatch({SampleBatch.OBS: OBS, SampleBatch.ACTIONS: ACTIONS,
                                           SampleBatch.REWARDS: REWARDS}))
        kernel, bias = kernel_and_bias(policy)
        close(kernel, W1, f"{kind}: kernel after one SGD step")
        close(bias, B1, f"{kind}: bias after one SGD step")
        want = OBS @ W1 + B1
        close(logits_of(policy), want, f"{kind}: logits after learning")

        _, fresh = make(kind)
        fresh.set_state(policy.get_state())
        close(logits_of(fresh), want, f"{kind}: set_state(get_state())")
        tmp = tempfile.mkdtemp()
        policy.export_checkpoint(os.path.join(tmp, "ckpt"))
        restored = cls.from_checkpoint(os.path.join(tmp, "ckpt"), trusted="imported")
        assert type(restored) is cls, (kind, type(restored))
        close(logits_of(restored), want, f"{kind}: from_checkpoint")
        policy.export_model(os.path.join(tmp, "sm"))
        check_saved_model(os.path.join(tmp, "sm"), want, f"{kind}: SavedModel")
        check_onnx(policy, kind, os.path.join(tmp, "onnx"), want)
    print("CLIENT OK", MODE, KINDS)
''')


def _run(code, *args, log_level="3", timeout=420):
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL=log_level,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.pop("RLPOLICY_TF_V1", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "mode, kinds",
    [
        # Every kind where TF1 code puts the process; two kinds for each single switch.
        ("disable_v2_behavior", "tf,tf2,traced"),
        ("disable_v2_tensorshape", "tf,traced"),
        ("disable_eager_execution", "tf,tf2"),
    ],
)
def test_policies_work_in_a_tf1_mode_process(mode, kinds):
    proc = _run(CLIENT, mode, kinds)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"CLIENT OK {mode}" in proc.stdout


WARNING_CLIENT = textwrap.dedent('''
    import os, sys
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    if sys.argv[1] != "v2":
        tf.compat.v1.disable_v2_behavior()
    import gymnasium as gym
    import numpy as np
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy
    from rlpolicy.models.catalog import ModelCatalog
    from rlpolicy.models.tf.tf_modelv2 import TFModelV2
    from rlpolicy.policy.sample_batch import SampleBatch
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf()


    class BatchNormModel(TFModelV2):
        """As RLlib 1.x's example: tf1.layers batch norm, its updates in UPDATE_OPS."""

        def forward(self, input_dict, state, seq_lens):
            with tf1.variable_scope("model", reuse=tf1.AUTO_REUSE):
                x = tf1.layers.dense(input_dict["obs"], 8, name="fc")
                x = tf1.layers.batch_normalization(x, training=input_dict["is_training"],
                                                   name="bn")
                out = tf1.layers.dense(tf.nn.tanh(x), self.num_outputs, name="out")
                self._value = tf.reshape(tf1.layers.dense(x, 1, name="vf"), [-1])
            return out, state

        def value_function(self):
            return self._value


    ModelCatalog.register_custom_model("bn_model", BatchNormModel)
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2)


    def mark(text):
        sys.stderr.flush()
        os.write(2, ("\\n=== " + text + "\\n").encode())


    mark("construct")
    policies = [
        PPOTFPolicy(obs_space, act_space, {"framework": "tf", "model": {"fcnet_hiddens": [8]}}),
        PPOTFPolicy(obs_space, act_space, {"framework": "tf",
                                           "model": {"custom_model": "bn_model"}}),
    ]
    obs = np.random.default_rng(0).uniform(-1, 1, (8, 4)).astype(np.float32)
    for policy in policies:
        actions, _, extra = policy.compute_actions(obs)
        batch = SampleBatch({"obs": obs, "actions": actions, "rewards": np.ones(8, np.float32),
                             "dones": np.arange(8) == 7, **extra})
        policy.learn_on_batch(policy.postprocess_trajectory(batch))
    # The batch-norm updates still run with each SGD step (moving mean starts at 0).
    bn = policies[1]
    with bn.get_session().graph.as_default():
        (mean,) = [v for v in tf1.global_variables() if v.op.name == "model/bn/moving_mean"]
    assert np.abs(bn.get_session().run(mean)).sum() > 0
    # The control: an op this session has seen, then marked by a control dependency.
    mark("control")
    graph = tf1.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, (), name="x")
        y = tf.identity(x, name="y")
        sess = tf1.Session(graph=graph)
        sess.run(y, {x: 1.0})
        with tf1.control_dependencies([y.op]):
            sess.run(tf.identity(x), {x: 2.0})
    mark("end")
''')

MUTATION = "was changed by setting attribute after it was run by a session"


@pytest.mark.parametrize("mode", ["v2", "v1"])
def test_graph_policy_construction_mutates_no_op_a_session_has_run(mode):
    proc = _run(WARNING_CLIENT, mode, log_level="0")
    assert proc.returncode == 0, proc.stderr[-4000:]
    policies, control = proc.stderr.split("=== construct", 1)[1].split("=== control", 1)
    assert MUTATION not in policies, [line for line in policies.splitlines() if MUTATION in line]
    # TF's C++ log reaches this stderr: the control mutation is reported.
    assert MUTATION in control.split("=== end", 1)[0]
