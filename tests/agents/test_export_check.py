"""export_and_verify: each format is loaded back by its real consumer and compared with the
policy; a bad format, a foreign output folder or a mismatch is an error that leaves nothing
half-written."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from rlpolicy.cli import export_check  # noqa: E402
from rlpolicy.cli.export_check import export_and_verify, formats_for, sample_observations  # noqa: E402


@pytest.fixture(scope="module")
def policy():
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    return PPOTorchPolicy(env.observation_space, env.action_space, {"model": {"fcnet_hiddens": [8]}})


@pytest.fixture(scope="module")
def obs():
    return sample_observations(lambda: gym.make("CartPole-v1"), num=6, seed=3)


def test_sample_observations_are_real_states(obs):
    assert obs.shape == (6, 4) and obs.dtype == np.float32
    env = gym.make("CartPole-v1")
    first, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs[0], first)  # the walk starts at reset(seed)
    assert np.all(np.abs(obs[:, 2]) < 0.21)  # pole angles of live CartPole states


def test_formats_per_framework():
    assert formats_for("torch") == ("torchscript", "onnx")
    assert formats_for("tf") == formats_for("tf2") == ("savedmodel", "onnx")


@pytest.mark.parametrize("fmt, name", [("torchscript", "model.pt"), ("onnx", "model.onnx")])
def test_export_is_loaded_back_and_matches(policy, obs, tmp_path, fmt, name):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    out = tmp_path / "export"
    report = export_and_verify(policy, "torch", fmt, str(out), obs)
    assert report.path == str(out / name) and os.path.isfile(report.path)
    assert report.num_observations == 6 and report.max_abs_diff <= 1e-5
    # Exporting again replaces the earlier export (it is ours), leaving no temporary folder.
    export_and_verify(policy, "torch", fmt, str(out), obs)
    assert sorted(os.listdir(tmp_path)) == ["export"]


def test_errors(policy, obs, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown export format 'h5'; known: torchscript, onnx, savedmodel"):
        export_and_verify(policy, "torch", "h5", str(tmp_path / "a"), obs)
    with pytest.raises(
        ValueError,
        match="format 'savedmodel' needs a TensorFlow policy, but this checkpoint's framework is 'torch'",
    ):
        export_and_verify(policy, "torch", "savedmodel", str(tmp_path / "a"), obs)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="is not empty and was not written by rlpolicy export"):
        export_and_verify(policy, "torch", "torchscript", str(tmp_path / "mine"), obs)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    # A loaded model that disagrees with the policy fails, and nothing is left behind.
    real = export_check.reference_output
    monkeypatch.setattr(export_check, "reference_output", lambda p, fw, o: real(p, fw, o) + 0.5)
    with pytest.raises(RuntimeError, match=r"does not reproduce the policy: max \|difference\| 0.5 on 6 obs"):
        export_and_verify(policy, "torch", "torchscript", str(tmp_path / "bad"), obs)
    assert sorted(os.listdir(tmp_path)) == ["mine"]
