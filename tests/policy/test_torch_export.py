"""TorchPolicy.export_model: TorchScript and ONNX, each loaded by its real consumer
(torch.jit.load / onnxruntime) in a fresh Python process."""

import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy.policy._torch.export import select_export_inputs  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)

TORCHSCRIPT_CONSUMER = textwrap.dedent("""
    import os, sys, numpy as np, torch
    for d in sys.argv[1:]:
        m = torch.jit.load(d + "/model.pt")
        for name in sorted(f for f in os.listdir(d) if f.startswith("inputs_")):
            data = np.load(d + "/" + name)
            states = [torch.from_numpy(data[k]) for k in sorted(data) if k.startswith("state_in_")]
            with torch.no_grad():
                out, state_outs = m({"obs": torch.from_numpy(data["obs"])}, states,
                                    torch.from_numpy(data["seq_lens"]))
            np.savez(d + "/ts_out_" + name[len("inputs_"):], output=out.numpy(),
                     **{f"state_out_{i}": s.numpy() for i, s in enumerate(state_outs)})
""")

ONNX_CONSUMER = textwrap.dedent("""
    import os, sys, numpy as np, onnxruntime as ort
    assert "torch" not in sys.modules
    for d in sys.argv[1:]:
        sess = ort.InferenceSession(d + "/model.onnx", providers=["CPUExecutionProvider"])
        for name in sorted(f for f in os.listdir(d) if f.startswith("inputs_")):
            data = np.load(d + "/" + name)
            feed = {i.name: data[i.name] for i in sess.get_inputs()}
            outs = sess.run(None, feed)
            np.savez(d + "/onnx_out_" + name[len("inputs_"):],
                     **{o.name: v for o, v in zip(sess.get_outputs(), outs)},
                     input_names=np.array([i.name for i in sess.get_inputs()]))
""")

CASES = {
    # name: (model config, device config, batch sizes the exports are run at)
    "fcnet-cpu": ({}, {"num_gpus": 0}, (7,)),
    "fcnet-fake-gpu-x2": ({}, {"num_gpus": 2, "_fake_gpus": True}, (7,)),
    # Recurrent exports are traced at one step of one sequence (serving use), and
    # must also serve batches of other sizes (one step of each of 5 sequences).
    "lstm-cpu": ({"use_lstm": True, "lstm_cell_size": 4}, {"num_gpus": 0}, (1, 5)),
}
RUNS = [(case, n) for case, (_, _, sizes) in CASES.items() for n in sizes]


def _policy(model_config, device_config=None):
    torch.manual_seed(0)
    cfg = {"model": {"fcnet_hiddens": [8], **model_config}, **(device_config or {})}
    return TorchPolicy(OBS, ACT, cfg)


def _reference(policy, obs, states):
    """The policy model's own outputs (what the exports must reproduce)."""
    with torch.no_grad():
        out, state_outs = policy.model(
            {SampleBatch.OBS: torch.from_numpy(obs)},
            [torch.from_numpy(s) for s in states],
            torch.ones(len(obs), dtype=torch.int32),
        )
    return out.numpy(), [s.numpy() for s in state_outs]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Exports every case (TorchScript and ONNX opset 13), then loads all of
    them in two fresh interpreters (one torch, one onnxruntime without torch)."""
    rng = np.random.default_rng(0)
    cases = {}
    for name, (model_config, device_config, sizes) in CASES.items():
        d = tmp_path_factory.mktemp(name)
        policy = _policy(model_config, device_config)
        policy.export_model(str(d))
        policy.export_model(str(d), onnx=13)
        runs = {}
        for n in sizes:
            obs = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
            if policy.is_recurrent():
                states = [rng.normal(size=(n, 4)).astype(np.float32) for _ in range(2)]
                feed = {f"state_in_{i}": s for i, s in enumerate(states)}
            else:
                # Non-recurrent models get a dummy state: torch cannot trace an empty list.
                states, feed = [], {"state_in_0": np.ones(n, np.float32)}
            np.savez(d / f"inputs_{n}.npz", obs=obs, seq_lens=np.ones(n, np.int32), **feed)
            runs[n] = (obs, states)
        cases[name] = (d, policy, runs)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    dirs = [str(c[0]) for c in cases.values()]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, *dirs], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for code in (TORCHSCRIPT_CONSUMER, ONNX_CONSUMER)
    ]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err.decode()[-3000:]
    return cases


@pytest.mark.parametrize("case,n", RUNS)
def test_export_round_trip_in_fresh_process(exported, case, n):
    d, policy, runs = exported[case]
    obs, states = runs[n]
    assert sorted(f for f in os.listdir(d) if f.startswith("model")) == ["model.onnx", "model.pt"]
    expected, expected_states = _reference(policy, obs, states)
    assert expected.shape == (n, 3)
    ts, onnx_out = np.load(d / f"ts_out_{n}.npz"), np.load(d / f"onnx_out_{n}.npz")
    np.testing.assert_allclose(ts["output"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(onnx_out["output"], expected, rtol=1e-4, atol=1e-5)
    assert list(onnx_out["input_names"])[0] == "obs"
    for i, s in enumerate(expected_states if states else []):
        assert s.shape == (n, 4)
        np.testing.assert_allclose(ts[f"state_out_{i}"], s, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(onnx_out[f"state_out_{i}"], s, rtol=1e-4, atol=1e-5)


def test_export_does_not_change_training_mode_or_weights(tmp_path):
    policy = _policy({})
    policy.model.train()
    before = policy.get_weights()
    policy.export_model(str(tmp_path / "nested" / "dir"))
    assert policy.model.training
    assert os.path.exists(tmp_path / "nested" / "dir" / "model.pt")
    assert not [f for f in os.listdir(tmp_path / "nested" / "dir") if f.startswith(".tmp-")]
    for k, v in policy.get_weights().items():
        np.testing.assert_array_equal(v, before[k])


def test_select_export_inputs():
    vr_obs = type("VR", (), {"used_for_compute_actions": True})()
    vr_unused = type("VR", (), {"used_for_compute_actions": False})()
    batch = {
        "obs": np.zeros((3, 4)),
        "rewards": np.zeros(3),
        "state_in_0": np.ones((3, 2)),
        "infos": np.array([{}] * 3),
    }
    inputs, states, seq_lens = select_export_inputs(
        {"obs": vr_obs, "rewards": vr_unused, "state_in_0": vr_obs, "infos": vr_obs}, batch
    )
    assert list(inputs) == ["obs"] and len(states) == 1 and states[0].shape == (3, 2)
    np.testing.assert_array_equal(seq_lens, [1, 1, 1])
    inputs, states, seq_lens = select_export_inputs({"obs": vr_obs}, {"obs": np.zeros((2, 4))})
    np.testing.assert_array_equal(states[0], [1.0])
    np.testing.assert_array_equal(seq_lens, [1])
