"""TF policies' export_model(..., pipeline=True): the whole action pipeline as one
SavedModel / ONNX artifact (graph "tf" and eager "tf2", traced or not), loaded here
by its real consumers (tf.saved_model.load, TF1's loader into a session in graph
mode, onnxruntime.InferenceSession) and checked against the policy and numpy
formulas. The file also runs in a TF1-mode process (RLPOLICY_TF_V1=1); one test
runs a graph export in such a process itself."""

import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _pipeline_checks import (  # noqa: E402
    BOX4,
    BOX_ACT,
    DICT_ACT,
    IMAGE,
    NOISE_ACT,
    TUPLE_ACT,
    TUPLE_OBS,
    UNBOUNDED,
    check_cli_exports,
    check_mismatch_refused_and_not_written,
    check_noise_samples,
    check_squashed_samples,
    check_step,
    check_unbounded_normalized_refused,
    load_pipeline,
    train_cartpole_pg,
)

from rlpolicy._core.pipeline_contract import PipelineContract, sample_observations  # noqa: E402
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.models.tf import tf_action_dist  # noqa: E402
from rlpolicy.models.tf.tf_beta_dirichlet import Beta  # noqa: E402
from rlpolicy.policy.eager_tf_policy import build_eager_tf_policy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.tf_policy_template import build_tf_policy  # noqa: E402

DICT_OBS = gym.spaces.Dict(
    {
        "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        "mode": gym.spaces.Discrete(3),
        "grid": gym.spaces.MultiDiscrete([2, 3]),
    }
)
LSTM = {"use_lstm": True, "lstm_cell_size": 4, "fcnet_hiddens": [8]}

ModelCatalog.register_custom_action_dist("pipe_tf_squashed", tf_action_dist.SquashedGaussian)
ModelCatalog.register_custom_action_dist("pipe_tf_deterministic", tf_action_dist.Deterministic)
ModelCatalog.register_custom_action_dist("pipe_tf_beta", Beta)


def _loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    return -tf.reduce_mean(dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS]))


def _squared_loss(policy, model, dist_class, train_batch):
    # (For a Deterministic distribution, whose logp is constant: a graph policy refuses a
    # loss without gradients.)
    out, _ = model(train_batch)
    return tf.reduce_mean(tf.square(out - train_batch[SampleBatch.ACTIONS]))


GraphPolicy = build_tf_policy("PipeGraphPolicy", loss_fn=_loss)
EagerPolicy = build_eager_tf_policy("PipeEagerPolicy", loss_fn=_loss)
SquaredLossGraphPolicy = build_tf_policy("PipeSquaredGraphPolicy", loss_fn=_squared_loss)
FLAVOURS = {
    "tf": (GraphPolicy, {}),
    "tf2": (EagerPolicy, {"framework": "tf2"}),
    "traced": (EagerPolicy, {"framework": "tf2", "eager_tracing": True}),
}


def _policy(flavour, obs_space, act_space, config, scale=1.0, seed=0, cls=None):
    flavour_cls, extra = FLAVOURS[flavour]
    cls = cls or flavour_cls
    model = {"fcnet_hiddens": [16], **config.pop("model", {})}
    policy = cls(obs_space, act_space, {**extra, **config, "model": model})
    rng = np.random.default_rng(seed)
    weights = policy.get_weights()
    if isinstance(weights, dict):
        policy.set_weights(
            {k: (rng.normal(0.0, 0.5, np.shape(v)) * scale).astype(np.float32) for k, v in weights.items()}
        )
    return policy


def _savedmodel_runner(path, in_names, out_names):
    if tf.executing_eagerly():
        signature = tf.saved_model.load(path).signatures["serving_default"]
        assert sorted(signature.structured_outputs) == sorted(out_names)

        def run(feeds):
            got = signature(**{k: tf.constant(feeds[k]) for k in in_names})
            return {k: v.numpy() for k, v in got.items()}

        return run
    # a TF1-mode process: the SavedModel loaded into a session
    graph = tf.Graph()
    sess = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
        sig = tf.compat.v1.saved_model.load(sess, ["serve"], path).signature_def["serving_default"]

    def run(feeds):
        return sess.run(
            {k: v.name for k, v in sig.outputs.items()}, {sig.inputs[k].name: feeds[k] for k in in_names}
        )

    return run


def _load(export_dir):
    """(contract, run) for an export, in tf.saved_model.load (TF1's loader into a
    session in a TF1-mode process) or onnxruntime."""
    return load_pipeline(export_dir, _savedmodel_runner)


CASES = {
    # name: (flavour, format, observation space, action space, config)
    "tf-fc-discrete": ("tf", "savedmodel", BOX4, gym.spaces.Discrete(3), {}),
    "tf2-fc-discrete": ("tf2", "onnx", BOX4, gym.spaces.Discrete(3), {}),
    "tf-multidiscrete": ("tf", "onnx", BOX4, gym.spaces.MultiDiscrete([2, 3, 4]), {}),
    "traced-multidiscrete": ("traced", "savedmodel", BOX4, gym.spaces.MultiDiscrete([2, 3, 4]), {}),
    "tf-box-normalized": ("tf", "savedmodel", BOX4, BOX_ACT, {"normalize_actions": True}),
    "tf2-box-clipped": (
        "tf2",
        "savedmodel",
        BOX4,
        BOX_ACT,
        {"normalize_actions": False, "clip_actions": True},
    ),
    "tf-box-raw": ("tf", "onnx", BOX4, BOX_ACT, {"normalize_actions": False}),
    "tf2-dict-actions": ("tf2", "onnx", BOX4, DICT_ACT, {}),
    "tf-tuple-actions": ("tf", "savedmodel", BOX4, TUPLE_ACT, {}),
    "tf-dict-obs": ("tf", "onnx", DICT_OBS, gym.spaces.Discrete(2), {}),
    "traced-tuple-obs": ("traced", "onnx", TUPLE_OBS, BOX_ACT, {}),
    "tf-conv": ("tf", "savedmodel", IMAGE, gym.spaces.Discrete(4), {}),
    "tf2-conv": ("tf2", "onnx", IMAGE, gym.spaces.Discrete(4), {}),
    "tf-lstm-box": ("tf", "onnx", BOX4, BOX_ACT, {"model": LSTM}),
    "tf2-lstm-dict-obs": ("tf2", "savedmodel", DICT_OBS, gym.spaces.MultiDiscrete([3, 2]), {"model": LSTM}),
    "traced-lstm": ("traced", "onnx", BOX4, gym.spaces.Discrete(3), {"model": LSTM}),
}


@pytest.mark.tf
@pytest.mark.parametrize("case", list(CASES))
def test_pipeline_reproduces_compute_actions(case, tmp_path):
    flavour, fmt, obs_space, act_space, config = CASES[case]
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("tf2onnx")
    policy = _policy(flavour, obs_space, act_space, dict(config))
    timestep = policy.global_timestep
    policy.export_model(str(tmp_path), onnx=13 if fmt == "onnx" else None, pipeline=True)
    assert policy.global_timestep == timestep  # the checks' compute_actions calls leave it
    artifact = "pipeline.onnx" if fmt == "onnx" else "pipeline_savedmodel"
    assert sorted(os.listdir(tmp_path)) == sorted(["pipeline.json", artifact])
    contract, run = _load(str(tmp_path))
    assert contract.format == fmt and contract.framework == ("tf" if flavour == "tf" else "tf2")
    normalize = bool(policy.config.get("normalize_actions", True))
    clip = bool(policy.config.get("clip_actions", False))
    state = None
    for step, n in enumerate((5, 5, 2)):
        obs = sample_observations(obs_space, n, seed=11 + step)
        if step == 2:
            state = None  # a new batch size: from the initial state again
        feeds = contract.feeds(obs, state)
        got = run(feeds)
        states = [feeds[k] for k in contract.names("state")]
        want, want_state, extra = policy.compute_actions(obs, state_batches=states or None, explore=False)
        check_step(got, contract, want, want_state, extra, act_space, normalize, clip, rtol=1e-7)
        state = [got[k] for k in contract.names("state", outputs=True)] or None


@pytest.mark.tf
@pytest.mark.parametrize(
    "flavour,fmt",
    [
        ("tf", "savedmodel"),
        ("tf2", "onnx"),
        pytest.param("traced", "savedmodel", marks=pytest.mark.tf_eager_code),
    ],
)
def test_sampled_actions_with_given_noise_match_numpy_formulas(flavour, fmt, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    policy = _policy(flavour, BOX4, NOISE_ACT, {"normalize_actions": True}, scale=1.5)
    policy.export_model(str(tmp_path), onnx=13 if fmt == "onnx" else None, pipeline=True)
    contract, run = _load(str(tmp_path))
    assert [(s.kind, s.size, s.distribution) for s in contract.noise] == [
        ("uniform", 1, "Categorical"),
        ("uniform", 2, "MultiCategorical"),
        ("normal", 2, "DiagGaussian"),
    ]
    obs = sample_observations(BOX4, 64, seed=3)
    noise = contract.draw_noise(64, np.random.default_rng(0))
    assert noise.shape == (64, 5)
    got = run(contract.feeds(obs, noise=noise))
    _, _, extra = policy.compute_actions(obs, explore=False)
    zero = run(contract.feeds(obs, noise=np.zeros_like(noise)))  # normal draws 0: the mean
    check_noise_samples(got, zero, extra["action_dist_inputs"], noise, box_atol=1e-4)


@pytest.mark.parametrize("flavour", ["tf", "tf2"])
def test_squashed_gaussian_and_deterministic_distributions(flavour, tmp_path):
    act = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    squashed = _policy(flavour, BOX4, act, {"model": {"custom_action_dist": "pipe_tf_squashed"}})
    squashed.export_model(str(tmp_path / "sq"), pipeline=True)
    contract, run = _load(str(tmp_path / "sq"))
    assert [(s.kind, s.size) for s in contract.noise] == [("normal", 2)]
    obs = sample_observations(BOX4, 16, seed=2)
    noise = contract.draw_noise(16, np.random.default_rng(3))
    got = run(contract.feeds(obs, noise=noise))
    _, _, extra = squashed.compute_actions(obs, explore=False)
    check_squashed_samples(got["sampled_actions"], extra["action_dist_inputs"], noise)
    det_cls = SquaredLossGraphPolicy if flavour == "tf" else None
    det = _policy(flavour, BOX4, act, {"model": {"custom_action_dist": "pipe_tf_deterministic"}}, cls=det_cls)
    det.export_model(str(tmp_path / "det"), onnx=13, pipeline=True)
    contract, run = _load(str(tmp_path / "det"))  # (checks the ONNX input names)
    assert contract.noise == [] and contract.noise_dim == 1
    got = run(contract.feeds(obs))
    np.testing.assert_array_equal(got["sampled_actions"], got["actions"])
    _, _, extra = det.compute_actions(obs, explore=False)
    np.testing.assert_allclose(got["actions"], np.clip(extra["action_dist_inputs"], -1, 1), atol=1e-5)


def _off_by_one(cls):
    """A policy class whose compute_actions disagrees with its model's argmax."""

    class OffByOne(cls):
        def compute_actions(self, *args, **kwargs):
            actions, state, extra = super().compute_actions(*args, **kwargs)
            return (np.asarray(actions) + 1) % self.action_space.n, state, extra

    return OffByOne


@pytest.mark.parametrize("flavour", ["tf", "tf2"])
def test_a_pipeline_that_differs_from_the_policy_is_refused_and_not_written(flavour, tmp_path):
    cls, extra = FLAVOURS[flavour]
    policy = _off_by_one(cls)(BOX4, gym.spaces.Discrete(5), {**extra})
    check_mismatch_refused_and_not_written(policy, tmp_path)


@pytest.mark.parametrize("flavour", ["tf", "tf2"])
def test_unexportable_policies_are_refused_naming_the_reason(flavour, tmp_path):
    check_unbounded_normalized_refused(
        _policy(flavour, BOX4, UNBOUNDED, {"normalize_actions": True}), tmp_path
    )
    beta = _policy(flavour, BOX4, BOX_ACT, {"model": {"custom_action_dist": "pipe_tf_beta"}})
    with pytest.raises(ValueError, match="cannot sample Beta from explicit noise"):
        beta.export_model(str(tmp_path), pipeline=True)
    assert os.listdir(tmp_path) == []


def _sampler(policy, model, obs_batch, state_batches=None, explore=None, **kwargs):
    n = tf.shape(obs_batch)[0]
    return tf.zeros([n], tf.int64), tf.zeros([n])


def _model_loss(policy, model, dist_class, train_batch):
    return tf.reduce_mean(tf.square(model(train_batch)[0]))


def _make_model(policy, obs_space, action_space, config):
    return ModelCatalog.get_model_v2(
        obs_space, action_space, 3, config["model"], framework=config.get("framework", "tf")
    )


@pytest.mark.parametrize("flavour", ["tf", "tf2"])
def test_a_policy_with_an_action_sampler_fn_is_refused(flavour, tmp_path):
    builder = build_tf_policy if flavour == "tf" else build_eager_tf_policy
    cls = builder("PipeSampler", loss_fn=_model_loss, make_model=_make_model, action_sampler_fn=_sampler)
    policy = cls(BOX4, gym.spaces.Discrete(3), dict(FLAVOURS[flavour][1]))
    with pytest.raises(ValueError, match="action_sampler_fn"):
        policy.export_model(str(tmp_path), pipeline=True)
    assert os.listdir(tmp_path) == []


def _greedy_on_doubled_logits(policy, model, input_dict, state_batches=None, explore=None, **kwargs):
    out, state = model(input_dict, state_batches or [], None)
    return out * 2.0, tf_action_dist.Categorical, state


@pytest.mark.parametrize("flavour", ["tf", "tf2"])
def test_an_action_distribution_fn_is_part_of_the_pipeline(flavour, tmp_path):
    builder = build_tf_policy if flavour == "tf" else build_eager_tf_policy
    cls = builder(
        "PipeDistFn", loss_fn=_loss, make_model=_make_model, action_distribution_fn=_greedy_on_doubled_logits
    )
    policy = cls(BOX4, gym.spaces.Discrete(3), dict(FLAVOURS[flavour][1]))
    policy.export_model(str(tmp_path), pipeline=True)
    contract, run = _load(str(tmp_path))
    obs = sample_observations(BOX4, 8, seed=5)
    got = run(contract.feeds(obs))
    if flavour == "tf":
        with policy.graph.as_default():
            logits = policy.model({"obs": policy._obs_input}, [], None)[0]
        model_out = policy.get_session().run(logits, {policy._obs_input: obs})
    else:
        model_out = policy.model({"obs": tf.constant(obs)}, [], None)[0].numpy()
    np.testing.assert_allclose(got["action_dist_inputs"], 2.0 * model_out, atol=1e-5)
    np.testing.assert_array_equal(got["actions"], np.argmax(model_out, axis=1))


TF1_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, gymnasium as gym
    import tensorflow as tf
    tf.compat.v1.disable_v2_behavior()
    from rlpolicy.policy.tf_policy_template import build_tf_policy
    from rlpolicy.policy.sample_batch import SampleBatch
    from rlpolicy._core.pipeline_contract import PipelineContract

    def loss(policy, model, dist_class, batch):
        logits, _ = model(batch)
        return -tf.reduce_mean(dist_class(logits, model).logp(batch[SampleBatch.ACTIONS]))

    obs = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                           "mode": gym.spaces.Discrete(3)})
    act = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    policy = build_tf_policy("P", loss_fn=loss)(
        obs, act, {"model": {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 4}})
    assert not tf.executing_eagerly()
    out = {}
    for onnx in (None, 13):
        d = sys.argv[1] + str(onnx)
        policy.export_model(d, onnx=onnx, pipeline=True)
        out[str(onnx)] = PipelineContract.read(d).verified
    print("RESULT" + json.dumps(out))
""")


def test_graph_policy_export_in_a_tf1_mode_process(tmp_path):
    pytest.importorskip("onnxruntime")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", TF1_SCRIPT, str(tmp_path / "x")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert got["None"]["consumer"] == "tf.compat.v1.saved_model.load (Session)"
    assert got["13"]["consumer"] == "onnxruntime.InferenceSession"
    for verified in got.values():
        assert verified["batch_sizes"] == [1, 3, 8] and verified["max_abs_diff"] < 1e-4
    assert sorted(os.listdir(tmp_path / "xNone")) == ["pipeline.json", "pipeline_savedmodel"]


@pytest.mark.tf
def test_metadata_and_a_second_export_replacing_the_first(tmp_path):
    policy = _policy("tf2", DICT_OBS, gym.spaces.MultiDiscrete([3, 2]), {"model": LSTM})
    policy.export_model(str(tmp_path), pipeline=True)
    with open(tmp_path / "pipeline.json", encoding="utf-8") as f:
        meta = json.load(f)
    assert [(i["name"], i["dtype"], i["shape"], i["path"]) for i in meta["inputs"]] == [
        ("obs_0", "int64", [None, 2], ["grid"]),
        ("obs_1", "int64", [None], ["mode"]),
        ("obs_2", "float32", [None, 2], ["pos"]),
        ("state_in_0", "float32", [None, 4], []),
        ("state_in_1", "float32", [None, 4], []),
        ("seq_lens", "int32", [None], []),
        ("noise", "float32", [None, 2], []),
    ]
    assert [(o["name"], o["dtype"], o["shape"]) for o in meta["outputs"]] == [
        ("actions", "int64", [None, 2]),
        ("sampled_actions", "int64", [None, 2]),
        ("action_dist_inputs", "float32", [None, 5]),
        ("state_out_0", "float32", [None, 4]),
        ("state_out_1", "float32", [None, 4]),
    ]
    assert meta["format"] == "savedmodel" and meta["artifact"] == "pipeline_savedmodel"
    assert meta["dist_class"] == "MultiCategorical" and meta["initial_state"] == [[0.0] * 4] * 2
    assert meta["verified"]["consumer"] == "tf.saved_model.load"
    policy.export_model(str(tmp_path), onnx=13, pipeline=True)
    assert sorted(os.listdir(tmp_path)) == ["pipeline.json", "pipeline.onnx"]
    assert PipelineContract.read(str(tmp_path)).format == "onnx"


@pytest.mark.parametrize("framework", ["tf", "tf2"])
def test_cli_export_pipeline(framework, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    run = tmp_path / "run"
    train_cartpole_pg(run, capsys, steps=100, framework=framework)
    consumer = (
        "tf.saved_model.load"
        if tf.executing_eagerly() or framework == "tf2"
        else "tf.compat.v1.saved_model.load (Session)"
    )
    exports = [
        ("savedmodel", "pipeline_savedmodel", consumer),
        ("onnx", "pipeline.onnx", "onnxruntime.InferenceSession"),
    ]
    check_cli_exports(run, exports, capsys, _savedmodel_runner)
