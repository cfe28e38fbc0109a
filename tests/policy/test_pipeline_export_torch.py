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

from rlpolicy._core.pipeline_contract import (  # noqa: E402
    PipelineContract,
    PipelineMismatchError,
    sample_observations,
)
from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.models.torch.torch_action_dist import (  # noqa: E402
    TorchBeta,
    TorchDeterministic,
    TorchSquashedGaussian,
)
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2  # noqa: E402
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
BOX_ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
DICT_OBS = gym.spaces.Dict(
    {
        "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        "mode": gym.spaces.Discrete(3),
        "grid": gym.spaces.MultiDiscrete([2, 4]),
    }
)
TUPLE_OBS = gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.Box(-2.0, 2.0, (3,), np.float32)))
DICT_ACT = gym.spaces.Dict({"move": BOX_ACT, "pick": gym.spaces.Discrete(3)})
TUPLE_ACT = gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]), BOX_ACT))
IMAGE = gym.spaces.Box(0.0, 1.0, (42, 42, 3), np.float32)
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


def _load(export_dir):
    """(contract, run) for an export: ``run(feeds) -> {output name: array}`` in
    the artifact's consumer, reading nothing but the two files."""
    with open(os.path.join(export_dir, "pipeline.json"), encoding="utf-8") as f:
        meta = json.load(f)
    contract = PipelineContract.from_json(meta)
    path = os.path.join(export_dir, meta["artifact"])
    in_names = [i["name"] for i in meta["inputs"]]
    out_names = [o["name"] for o in meta["outputs"]]
    if meta["format"] == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == in_names
        assert [o.name for o in session.get_outputs()] == out_names

        def run(feeds):
            return dict(zip(out_names, session.run(None, {k: feeds[k] for k in in_names})))
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch>=2.9 flags jit.load
            module = torch.jit.load(path)

        def run(feeds):
            with torch.no_grad():
                outs = module(*[torch.from_numpy(feeds[k]) for k in in_names])
            return {k: v.numpy() for k, v in zip(out_names, outs)}

    return contract, run


def _flat(actions):
    """Leaves of a (nested) batched action in tree order (sorted Dict keys)."""
    if isinstance(actions, dict):
        return [leaf for k in sorted(actions) for leaf in _flat(actions[k])]
    if isinstance(actions, tuple):
        return [leaf for a in actions for leaf in _flat(a)]
    return [np.asarray(actions)]


def _flat_spaces(space):
    if isinstance(space, gym.spaces.Dict):
        return [leaf for k in sorted(space.spaces) for leaf in _flat_spaces(space[k])]
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for s in space.spaces for leaf in _flat_spaces(s)]
    return [space]


def _to_env(action, space, normalize, clip):
    """RLlib 1.11's mapping of a float Box action to the env, by its formula."""
    if not (isinstance(space, gym.spaces.Box) and space.dtype == np.float32):
        return action
    if normalize:
        return np.clip(space.low + (action + 1.0) * (space.high - space.low) / 2.0, space.low, space.high)
    return np.clip(action, space.low, space.high) if clip else action


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
    leaf_spaces = _flat_spaces(act_space)
    for n in (1, 5):  # neither is the batch size the artifact was traced at
        state = [np.repeat(s[None], n, axis=0) for s in policy.get_initial_state()]
        for step in range(3):
            obs = sample_observations(_raw_space(policy), n, seed=10 * n + step)
            feeds = contract.feeds(obs, state)
            got = run(feeds)
            actions, state_out, extra = policy.compute_actions(
                obs, state_batches=state or None, explore=False
            )
            want = [_to_env(a, s, normalize, clip) for a, s in zip(_flat(actions), leaf_spaces)]
            names = contract.names("action", outputs=True)
            assert len(names) == len(want)
            for name, w, s in zip(names, want, leaf_spaces):
                if isinstance(s, gym.spaces.Box):
                    assert got[name].dtype == np.float32
                    np.testing.assert_allclose(got[name], w, atol=1e-4, rtol=1e-4)
                else:
                    assert got[name].dtype == np.int64
                    np.testing.assert_array_equal(got[name], w)
                assert got[name].shape[0] == n
            np.testing.assert_allclose(
                got["action_dist_inputs"], extra["action_dist_inputs"], atol=1e-4, rtol=1e-4
            )
            assert len(state_out) == len(contract.names("state", outputs=True))
            for name, s in zip(contract.names("state", outputs=True), state_out):
                np.testing.assert_allclose(got[name], s, atol=1e-4, rtol=1e-4)
            # Sampled actions: the deterministic ones' shapes and dtypes, inside the
            # space wherever the mapping bounds them (or the space is discrete).
            for det, smp, s in zip(names, contract.names("sampled_action", outputs=True), leaf_spaces):
                assert got[smp].shape == got[det].shape and got[smp].dtype == got[det].dtype
                if not isinstance(s, gym.spaces.Box) or normalize or clip:
                    assert all(s.contains(np.asarray(a, s.dtype)) for a in got[smp])
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


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _inverse_cdf(probs, u):
    """Index of the first cumulative probability above u (numpy, row by row)."""
    out = np.empty(len(u), np.int64)
    for i, (p, v) in enumerate(zip(probs, u)):
        c = np.cumsum(p)
        out[i] = min(int(np.searchsorted(c, v, side="right")), len(p) - 1)
    return out


def _sharpen(policy, factor):
    """Scales every parameter so that the distributions are far from uniform."""
    with torch.no_grad():
        for p in policy.model.parameters():
            p.mul_(factor)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_sampled_actions_with_given_noise_match_numpy_formulas(fmt, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    space = gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2]), BOX_ACT))
    policy = _policy(BOX4, space, {"normalize_actions": True})
    _sharpen(policy, 3.0)
    policy.export_model(str(tmp_path), onnx=13 if fmt == "onnx" else None, pipeline=True)
    contract, run = _load(str(tmp_path))
    obs = sample_observations(BOX4, 64, seed=3)
    rng = np.random.default_rng(0)
    noise = contract.draw_noise(64, rng)
    assert noise.shape == (64, 1 + 2 + 2)
    got = run(contract.feeds(obs, noise=noise))
    _, _, extra = policy.compute_actions(obs, explore=False)
    logits = extra["action_dist_inputs"]  # [4 | 3, 2 | mean 2, log std 2]
    np.testing.assert_array_equal(
        got["sampled_actions_0"], _inverse_cdf(_softmax(logits[:, :4]), noise[:, 0])
    )
    np.testing.assert_array_equal(
        got["sampled_actions_1"],
        np.stack(
            [
                _inverse_cdf(_softmax(logits[:, 4:7]), noise[:, 1]),
                _inverse_cdf(_softmax(logits[:, 7:9]), noise[:, 2]),
            ],
            axis=1,
        ),
    )
    mean, log_std = logits[:, 9:11], logits[:, 11:13]
    raw = mean + np.exp(log_std) * noise[:, 3:5]
    np.testing.assert_allclose(got["sampled_actions_2"], _to_env(raw, BOX_ACT, True, False), atol=1e-5)
    # Zero normal draws give the mean: the deterministic action.
    zero = run(contract.feeds(obs, noise=np.zeros_like(noise)))
    np.testing.assert_allclose(zero["sampled_actions_2"], zero["actions_2"], atol=1e-6)


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
    mean, log_std = extra["action_dist_inputs"][:, :2], extra["action_dist_inputs"][:, 2:]
    std = np.exp(np.clip(log_std, -5.0, 2.0))  # RLlib 1.11 clips log stds to [-5, 2]
    want = np.clip((np.tanh(mean + std * noise) + 1.0) / 2.0 * 2.0 - 1.0, -1.0, 1.0)
    np.testing.assert_allclose(got["sampled_actions"], want, atol=1e-5)
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
    probs = _softmax(extra["action_dist_inputs"][0])
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
    (tmp_path / "keep.txt").write_text("mine")
    for onnx in (None, 13):
        with pytest.raises(
            PipelineMismatchError,
            match=r"batch size 1, step 0: output 'actions' "
            r"differs from compute_actions\(explore=False\)",
        ):
            policy.export_model(str(tmp_path), onnx=onnx, pipeline=True)
        assert sorted(os.listdir(tmp_path)) == ["keep.txt"]  # no artifact, no temporary file
    with pytest.raises(PipelineMismatchError):
        policy.export_model(str(tmp_path / "new"), pipeline=True)
    assert not (tmp_path / "new").exists()  # a directory made for the export goes again


def test_unexportable_policies_are_refused_naming_the_reason(tmp_path):
    unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(
        ValueError,
        match=r"normalize_actions=True unsquashes onto the bounds of "
        r"Box\(-inf, inf, \(2,\), float32\)",
    ):
        _policy(BOX4, unbounded, {"normalize_actions": True}).export_model(str(tmp_path), pipeline=True)
    beta = TorchPolicy(BOX4, BOX_ACT, {}, action_distribution_class=TorchBeta)
    with pytest.raises(ValueError, match="cannot sample TorchBeta from explicit noise"):
        beta.export_model(str(tmp_path), pipeline=True)
    assert os.listdir(tmp_path) == []
    # Without normalize_actions an unbounded Box exports (the actions are passed through).
    _policy(BOX4, unbounded, {"normalize_actions": False}).export_model(str(tmp_path), pipeline=True)
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


def _cli(argv, capsys):
    from rlpolicy.cli import commands

    try:
        code = commands.main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_export_pipeline(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    run = tmp_path / "run"
    code, out, err = _cli(
        [
            "train",
            "--algo",
            "pg",
            "--env",
            "CartPole-v1",
            "--stop-timesteps",
            "200",
            "--stop-reward",
            "1e9",
            "--eval-episodes",
            "1",
            "--out",
            str(run),
            "--progress-bar",
            "off",
            "--config",
            json.dumps({"train_batch_size": 200, "model": {"fcnet_hiddens": [8]}}),
        ],
        capsys,
    )
    assert code == 1, err  # the step budget ends the run
    for fmt, artifact, consumer in (
        ("torchscript", "pipeline.pt", "torch.jit.load"),
        ("onnx", "pipeline.onnx", "onnxruntime.InferenceSession"),
    ):
        code, out, err = _cli(["export", str(run), "--format", fmt, "--pipeline"], capsys)
        assert code == 0, err
        folder = run / f"export_{fmt}_pipeline"  # (CHECKPOINT is the run folder)
        assert (
            f"exported {fmt} pipeline to {folder / artifact}; verified: loaded back with "
            f"{consumer}, max |actions - compute_actions| = " in out
        )
        contract, run_artifact = _load(str(folder))
        obs = np.array([[0.01, -0.02, 0.03, 0.0], [0.1, 0.5, -0.1, -0.4]], np.float32)
        assert run_artifact(contract.feeds(obs))["actions"].dtype == np.int64
        assert set(np.asarray(run_artifact(contract.feeds(obs))["actions"])) <= {0, 1}
