"""TorchPolicy.export_model(..., pipeline=True): the whole action pipeline as one
TorchScript / ONNX artifact, loaded here by its real consumers (torch.jit.load,
onnxruntime.InferenceSession) and checked against the policy and numpy formulas."""

import json
import os
import warnings

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

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
    softmax,
    train_cartpole_pg,
)

from rlpolicy._core.pipeline_contract import PipelineContract, sample_observations  # noqa: E402
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.models.torch.torch_action_dist import (  # noqa: E402
    TorchBeta,
    TorchDeterministic,
    TorchSquashedGaussian,
)
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2  # noqa: E402
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402

DICT_OBS = gym.spaces.Dict(
    {
        "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        "mode": gym.spaces.Discrete(3),
        "grid": gym.spaces.MultiDiscrete([2, 4]),
    }
)
LSTM = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16]}


def _one_hot_box(raw):
    """The space a RolloutWorker gives a policy for a Discrete env: the one-hot
    Box, with the raw space as ``original_space``."""
    space = gym.spaces.Box(0.0, 1.0, (int(raw.n),), np.float32)
    space.original_space = raw
    return space


CASES = {
    # name: (observation space, action space, config)
    "fc-discrete": (BOX4, gym.spaces.Discrete(3), {}),
    "fc-multidiscrete": (BOX4, gym.spaces.MultiDiscrete([2, 3, 4]), {}),
    "fc-box-normalized": (BOX4, BOX_ACT, {"normalize_actions": True}),
    "fc-box-clipped": (BOX4, BOX_ACT, {"normalize_actions": False, "clip_actions": True}),
    "fc-box-raw": (BOX4, BOX_ACT, {"normalize_actions": False, "clip_actions": False}),
    "fc-dict-actions": (BOX4, DICT_ACT, {}),
    "fc-tuple-actions": (BOX4, TUPLE_ACT, {}),
    "dict-obs": (DICT_OBS, gym.spaces.Discrete(2), {}),
    "tuple-obs": (TUPLE_OBS, BOX_ACT, {}),
    "dict-atari-ram-obs": (
        gym.spaces.Dict({"ram": gym.spaces.Box(0, 255, (128,), np.uint8), "lives": gym.spaces.Discrete(4)}),
        gym.spaces.Discrete(3),
        {},
    ),
    "one-hot-obs": (_one_hot_box(gym.spaces.Discrete(6)), gym.spaces.Discrete(2), {}),
    "discrete-obs": (gym.spaces.Discrete(5), gym.spaces.Discrete(3), {}),
    "conv-discrete": (IMAGE, gym.spaces.Discrete(4), {}),
    "lstm-box": (BOX4, BOX_ACT, {"model": LSTM}),
    "lstm-dict-obs-multidiscrete": (DICT_OBS, gym.spaces.MultiDiscrete([3, 2]), {"model": LSTM}),
}


def _policy(obs_space, act_space, config, seed=0):
    torch.manual_seed(seed)
    return TorchPolicy(obs_space, act_space, {"seed": seed, **config})


def _torchscript_runner(path, in_names, out_names):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch>=2.9 flags jit.load
        module = torch.jit.load(path)

    def run(feeds):
        with torch.no_grad():
            outs = module(*[torch.from_numpy(feeds[k]) for k in in_names])
        return {k: v.numpy() for k, v in zip(out_names, outs)}

    return run


def _load(export_dir):
    """(contract, run) for an export, in torch.jit.load or onnxruntime."""
    return load_pipeline(export_dir, _torchscript_runner)


def _raw_space(policy):
    return getattr(policy.observation_space, "original_space", policy.observation_space)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("case", list(CASES))
def test_pipeline_reproduces_compute_actions(case, fmt, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    obs_space, act_space, config = CASES[case]
    policy = _policy(obs_space, act_space, config)
    ts = policy.global_timestep
    policy.export_model(str(tmp_path), onnx=13 if fmt == "onnx" else None, pipeline=True)
    assert policy.global_timestep == ts  # the export's checks leave the policy as it was
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["pipeline.json", "pipeline.onnx" if fmt == "onnx" else "pipeline.pt"]
    )
    contract, run = _load(str(tmp_path))
    normalize = policy.config["normalize_actions"]
    clip = policy.config["clip_actions"]
    assert (contract.normalize_actions, contract.clip_actions) == (normalize, clip)
    for n in (1, 5):  # neither is the batch size the artifact was traced at
        state = [np.repeat(s[None], n, axis=0) for s in policy.get_initial_state()]
        for step in range(3):
            obs = sample_observations(_raw_space(policy), n, seed=10 * n + step)
            feeds = contract.feeds(obs, state)
            got = run(feeds)
            actions, state_out, extra = policy.compute_actions(
                obs, state_batches=state or None, explore=False
            )
            check_step(got, contract, actions, state_out, extra, act_space, normalize, clip, rtol=1e-4)
            state = [got[name] for name in contract.names("state", outputs=True)]


@pytest.mark.parametrize(
    "dqn_config", [{}, {"dueling": False}, {"num_atoms": 3, "v_min": -1.0, "v_max": 1.0}]
)
def test_dqn_pipeline_acts_greedily_on_the_q_values(dqn_config, tmp_path):
    # DQN's action_distribution_fn (Q-values as categorical inputs) is part of the pipeline.
    from rlpolicy.agents.dqn import DEFAULT_CONFIG
    from rlpolicy.agents.dqn.dqn_torch_policy import DQNTorchPolicy

    torch.manual_seed(0)
    policy = DQNTorchPolicy(BOX4, gym.spaces.Discrete(3), {**DEFAULT_CONFIG, **dqn_config})
    policy.export_model(str(tmp_path), onnx=13, pipeline=True)
    contract, run = _load(str(tmp_path))
    assert contract.exploration == "EpsilonGreedy"
    obs = sample_observations(BOX4, 6, seed=4)
    got = run(contract.feeds(obs))
    policy.compute_actions(obs, explore=False)
    q_values = policy.q_values.numpy()  # what DQN's distribution fn computed for these
    np.testing.assert_allclose(got["action_dist_inputs"], q_values, atol=1e-5)
    np.testing.assert_array_equal(got["actions"], q_values.argmax(axis=1))


def test_a_second_pipeline_export_replaces_the_first(tmp_path):
    policy = _policy(BOX4, gym.spaces.Discrete(3), {})
    policy.export_model(str(tmp_path), pipeline=True)
    policy.export_model(str(tmp_path), onnx=13, pipeline=True)
    assert sorted(os.listdir(tmp_path)) == ["pipeline.json", "pipeline.onnx"]
    policy.export_model(str(tmp_path), pipeline=True)
    assert sorted(os.listdir(tmp_path)) == ["pipeline.json", "pipeline.pt"]
    assert PipelineContract.read(str(tmp_path)).format == "torchscript"


def test_metadata_names_the_interface(tmp_path):
    policy = _policy(DICT_OBS, DICT_ACT, {"model": LSTM})
    policy.export_model(str(tmp_path), onnx=13, pipeline=True)
    meta = json.loads((tmp_path / "pipeline.json").read_text())
    assert (meta["format"], meta["artifact"], meta["framework"], meta["opset"]) == (
        "onnx",
        "pipeline.onnx",
        "torch",
        13,
    )
    inputs = {i["name"]: (i["dtype"], i["shape"], i["role"], i["path"]) for i in meta["inputs"]}
    # Dict observations: one input per leaf in the space's key order (gymnasium sorts).
    assert inputs == {
        "obs_0": ("int64", [None, 2], "obs", ["grid"]),
        "obs_1": ("int64", [None], "obs", ["mode"]),
        "obs_2": ("float32", [None, 2], "obs", ["pos"]),
        "state_in_0": ("float32", [None, 8], "state", []),
        "state_in_1": ("float32", [None, 8], "state", []),
        "seq_lens": ("int32", [None], "seq_lens", []),
        "noise": ("float32", [None, 3], "noise", []),
    }
    outputs = [(o["name"], o["dtype"], o["shape"], o["role"], o["path"]) for o in meta["outputs"]]
    assert outputs == [
        ("actions_0", "float32", [None, 2], "action", ["move"]),
        ("actions_1", "int64", [None], "action", ["pick"]),
        ("sampled_actions_0", "float32", [None, 2], "sampled_action", ["move"]),
        ("sampled_actions_1", "int64", [None], "sampled_action", ["pick"]),
        ("action_dist_inputs", "float32", [None, 7], "dist_inputs", []),
        ("state_out_0", "float32", [None, 8], "state", []),
        ("state_out_1", "float32", [None, 8], "state", []),
    ]
    # "move" (a Gaussian over 2 dims) takes 2 normal draws, "pick" one uniform.
    assert meta["noise"] == [
        {"start": 0, "size": 2, "kind": "normal", "action": "actions_0", "distribution": "TorchDiagGaussian"},
        {"start": 2, "size": 1, "kind": "uniform", "action": "actions_1", "distribution": "TorchCategorical"},
    ]
    assert meta["noise_dim"] == 3
    assert meta["initial_state"] == [[0.0] * 8, [0.0] * 8]
    assert meta["verified"]["batch_sizes"] == [1, 3, 8]
    assert meta["verified"]["consumer"] == "onnxruntime.InferenceSession"


def _sharpen(policy, factor):
    """Scales every parameter so that the distributions are far from uniform."""
    with torch.no_grad():
        for p in policy.model.parameters():
            p.mul_(factor)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_sampled_actions_with_given_noise_match_numpy_formulas(fmt, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    policy = _policy(BOX4, NOISE_ACT, {"normalize_actions": True})
    _sharpen(policy, 3.0)
    policy.export_model(str(tmp_path), onnx=13 if fmt == "onnx" else None, pipeline=True)
    contract, run = _load(str(tmp_path))
    obs = sample_observations(BOX4, 64, seed=3)
    rng = np.random.default_rng(0)
    noise = contract.draw_noise(64, rng)
    assert noise.shape == (64, 1 + 2 + 2)
    got = run(contract.feeds(obs, noise=noise))
    _, _, extra = policy.compute_actions(obs, explore=False)
    zero = run(contract.feeds(obs, noise=np.zeros_like(noise)))
    check_noise_samples(got, zero, extra["action_dist_inputs"], noise, box_atol=1e-5)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_squashed_gaussian_and_deterministic_distributions(fmt, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    onnx = 13 if fmt == "onnx" else None
    act = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    squashed = TorchPolicy(BOX4, act, {}, action_distribution_class=TorchSquashedGaussian)
    squashed.export_model(str(tmp_path / "sq"), onnx=onnx, pipeline=True)
    contract, run = _load(str(tmp_path / "sq"))
    assert [(s.kind, s.size) for s in contract.noise] == [("normal", 2)]
    obs = sample_observations(BOX4, 16, seed=2)
    noise = contract.draw_noise(16, np.random.default_rng(3))
    got = run(contract.feeds(obs, noise=noise))
    _, _, extra = squashed.compute_actions(obs, explore=False)
    check_squashed_samples(got["sampled_actions"], extra["action_dist_inputs"], noise)
    # Deterministic: no noise columns used; the one (ignored) column stays an input.
    model = ModelCatalog.get_model_v2(BOX4, act, 2, {"fcnet_hiddens": [8]}, framework="torch")
    det = TorchPolicy(BOX4, act, {}, model=model, action_distribution_class=TorchDeterministic)
    det.export_model(str(tmp_path / "det"), onnx=onnx, pipeline=True)
    contract, run = _load(str(tmp_path / "det"))  # (checks the graph's input names)
    assert contract.noise == [] and contract.noise_dim == 1
    got = run(contract.feeds(obs))
    np.testing.assert_array_equal(got["sampled_actions"], got["actions"])


def test_categorical_sample_frequencies_match_the_policy(tmp_path):
    policy = _policy(BOX4, gym.spaces.Discrete(4), {})
    _sharpen(policy, 8.0)
    policy.export_model(str(tmp_path), pipeline=True)
    contract, run = _load(str(tmp_path))
    n = 20000
    one = sample_observations(BOX4, 1, seed=5)
    obs = np.repeat(one, n, axis=0)
    got = run(contract.feeds(obs, noise=contract.draw_noise(n, np.random.default_rng(1))))
    _, _, extra = policy.compute_actions(one, explore=False)
    probs = softmax(extra["action_dist_inputs"][0])
    assert probs.max() < 0.9 and probs.min() > 0.01, probs  # a spread to test against
    freq = np.bincount(got["sampled_actions"], minlength=4) / n
    own, _, _ = policy.compute_actions(obs, explore=True)  # the policy's own sampler
    own_freq = np.bincount(own, minlength=4) / n
    tol = 5 * np.sqrt(probs * (1 - probs) / n)  # 5 sigma of a binomial frequency
    assert np.all(np.abs(freq - probs) <= tol), (freq, probs)
    assert np.all(np.abs(freq - own_freq) <= 2 * tol), (freq, own_freq)


def test_gaussian_sample_moments_match_the_model(tmp_path):
    policy = _policy(BOX4, BOX_ACT, {"normalize_actions": False, "clip_actions": False})
    _sharpen(policy, 4.0)
    policy.export_model(str(tmp_path), onnx=13, pipeline=True)
    contract, run = _load(str(tmp_path))
    n = 20000
    one = sample_observations(BOX4, 1, seed=7)
    got = run(
        contract.feeds(np.repeat(one, n, axis=0), noise=contract.draw_noise(n, np.random.default_rng(2)))
    )
    _, _, extra = policy.compute_actions(one, explore=False)
    mean, std = extra["action_dist_inputs"][0, :2], np.exp(extra["action_dist_inputs"][0, 2:])
    samples = got["sampled_actions"]
    assert np.all(np.abs(samples.mean(axis=0) - mean) <= 5 * std / np.sqrt(n)), (samples.mean(0), mean)
    np.testing.assert_allclose(samples.std(axis=0), std, rtol=0.05)
    own, _, _ = policy.compute_actions(np.repeat(one, n, axis=0), explore=True)
    np.testing.assert_allclose(own.std(axis=0), samples.std(axis=0), rtol=0.1)


class BranchyModel(TorchModelV2, torch.nn.Module):
    """Logits whose sign depends on the data through Python control flow: a
    trace bakes in the branch of its example input."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        torch.nn.Module.__init__(self)
        self.layer = torch.nn.Linear(int(np.prod(obs_space.shape)), num_outputs)

    def forward(self, input_dict, state, seq_lens):
        logits = self.layer(input_dict["obs_flat"])
        if float(input_dict["obs_flat"].sum()) > 0:
            logits = -3.0 * logits
        return logits, state

    def value_function(self):
        raise ValueError("no value head")


def test_a_pipeline_that_differs_from_the_policy_is_refused_and_not_written(tmp_path):
    space = gym.spaces.Box(0.5, 1.0, (4,), np.float32)  # observations sum > 0; the trace's zeros don't
    torch.manual_seed(0)
    model = BranchyModel(space, gym.spaces.Discrete(5), 5, {}, "branchy")
    policy = TorchPolicy(space, gym.spaces.Discrete(5), {}, model=model)
    check_mismatch_refused_and_not_written(policy, tmp_path)


def test_unexportable_policies_are_refused_naming_the_reason(tmp_path):
    check_unbounded_normalized_refused(_policy(BOX4, UNBOUNDED, {"normalize_actions": True}), tmp_path)
    beta = TorchPolicy(BOX4, BOX_ACT, {}, action_distribution_class=TorchBeta)
    with pytest.raises(ValueError, match="cannot sample TorchBeta from explicit noise"):
        beta.export_model(str(tmp_path), pipeline=True)
    assert os.listdir(tmp_path) == []
    # Without normalize_actions an unbounded Box exports (the actions are passed through).
    _policy(BOX4, UNBOUNDED, {"normalize_actions": False}).export_model(str(tmp_path), pipeline=True)
    assert sorted(os.listdir(tmp_path)) == ["pipeline.json", "pipeline.pt"]


def test_a_policy_with_an_action_sampler_fn_is_refused(tmp_path):
    def sampler(policy, model, input_dict, state_batches, explore=None, timestep=None):
        n = len(input_dict["obs"])
        return torch.zeros(n, dtype=torch.int64), torch.zeros(n), []

    policy = TorchPolicy(BOX4, gym.spaces.Discrete(3), {}, action_sampler_fn=sampler)
    with pytest.raises(ValueError, match="TorchPolicy computes actions with an action_sampler_fn"):
        policy.export_model(str(tmp_path), pipeline=True)
    assert os.listdir(tmp_path) == []


def test_feeds_name_bad_observation_batches(tmp_path):
    policy = _policy(DICT_OBS, gym.spaces.Discrete(2), {})
    policy.export_model(str(tmp_path), pipeline=True)
    contract, run = _load(str(tmp_path))
    obs = sample_observations(DICT_OBS, 3, seed=0)
    with pytest.raises(ValueError, match=r"observation\['pos'\]: missing"):
        contract.feeds({k: v for k, v in obs.items() if k != "pos"})
    with pytest.raises(ValueError, match=r"input 'obs_2' \(observation\['pos'\]\): shape \(3, 3\)"):
        contract.feeds({**obs, "pos": np.zeros((3, 3), np.float32)})
    with pytest.raises(ValueError, match=r"input 'noise': shape \(3, 2\), expected \(3, 1\)"):
        contract.feeds(obs, noise=np.zeros((3, 2), np.float32))
    assert run(contract.feeds(obs))["actions"].shape == (3,)


def test_unflatten_gives_the_action_structure(tmp_path):
    policy = _policy(BOX4, gym.spaces.Tuple((DICT_ACT, gym.spaces.Discrete(2))), {})
    policy.export_model(str(tmp_path), pipeline=True)
    contract, run = _load(str(tmp_path))
    obs = sample_observations(BOX4, 4, seed=1)
    actions = contract.unflatten(run(contract.feeds(obs)))
    assert isinstance(actions, tuple) and sorted(actions[0]) == ["move", "pick"]
    want, _, _ = policy.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(actions[0]["pick"], want[0]["pick"])
    np.testing.assert_array_equal(actions[1], want[1])


def test_cli_export_pipeline(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    run = tmp_path / "run"
    train_cartpole_pg(run, capsys, steps=200)
    exports = [
        ("torchscript", "pipeline.pt", "torch.jit.load"),
        ("onnx", "pipeline.onnx", "onnxruntime.InferenceSession"),
    ]
    check_cli_exports(run, exports, capsys, _torchscript_runner)
