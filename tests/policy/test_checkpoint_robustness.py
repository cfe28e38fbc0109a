"""Checkpoint robustness beyond test_checkpoint.py.

* A writer process SIGKILLed at a random point of a save (a real kill, not an
  injected exception) leaves the previous checkpoint loadable and consistent.
* Bit-flipped (same length) array files and truncated metadata fail with a
  CheckpointError naming the file.
* Checkpoints are device-free: torch tensors are stored as numpy arrays and a
  loaded policy's weights live on the loading policy's device. (No GPU is
  available where these tests run; the real GPU-save/CPU-load case was not
  exercised, only the device-free format it relies on.)
"""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from numpy_policies import make_linear_policy

from rlpolicy._core import checkpoint as ckpt
from rlpolicy._core.checkpoint import CheckpointError
from rlpolicy.policy.policy import Policy

HERE = os.path.dirname(os.path.abspath(__file__))

# Saves a ~16 MB policy state over and over into the same directory; every
# save writes one "version" v into all weights and into global_timestep, so a
# checkpoint mixing two saves is detectable.
_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    import numpy as np
    from numpy_policies import make_linear_policy
    p = make_linear_policy({{"lr": 0.1}}, obs_dim=1000, n_actions=2000)
    v = 0
    while True:
        v += 1
        p.W[...] = v
        p.b[...] = v
        p.velocity = {{"W": np.full_like(p.W, v), "b": np.full_like(p.b, v)}}
        p.global_timestep = v
        p.export_checkpoint({d!r})
        print(v, flush=True)
""")


def _assert_consistent(policy):
    v = policy.global_timestep
    assert v >= 1
    np.testing.assert_array_equal(policy.W, np.full_like(policy.W, v))
    np.testing.assert_array_equal(policy.b, np.full_like(policy.b, v))
    np.testing.assert_array_equal(policy.velocity["W"], np.full_like(policy.W, v))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkilled_writer_leaves_previous_checkpoint_loadable(tmp_path, seed):
    d = str(tmp_path / "ckpt")
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER.format(here=HERE, d=d)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()  # blocks until one save has committed
        assert first.strip() == "1", proc.stderr.read()
        time.sleep(random.Random(seed).uniform(0.0, 0.4))  # lands mid-save most of the time
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    restored = Policy.from_checkpoint(d, trusted="imported")
    _assert_consistent(restored)
    # A new save into the same directory after the crash works and cleans up.
    restored.global_timestep += 1
    restored.W[...] = restored.b[...] = restored.global_timestep
    restored.velocity = {k: np.full_like(x, restored.global_timestep) for k, x in restored.velocity.items()}
    restored.export_checkpoint(d)
    _assert_consistent(Policy.from_checkpoint(d, trusted="imported"))


@pytest.fixture
def saved(tmp_path):
    p = make_linear_policy({"lr": 0.1})
    p.W[...] = 0.5
    p.export_checkpoint(str(tmp_path))
    return tmp_path


def test_bit_flip_in_array_file_is_caught_by_checksum(saved):
    npz = next(f for f in os.listdir(saved) if f.endswith(".npz"))
    data = bytearray((saved / npz).read_bytes())
    data[len(data) // 2] ^= 0x01  # same length, one bit different
    (saved / npz).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"{npz}.*SHA-256 does not match"):
        Policy.from_checkpoint(str(saved), trusted="imported")


def test_truncated_metadata_names_the_file(saved):
    meta = saved / ckpt.METADATA_FILE
    meta.write_bytes(meta.read_bytes()[:40])
    with pytest.raises(CheckpointError, match=rf"{ckpt.METADATA_FILE}.*corrupt: not valid JSON"):
        Policy.from_checkpoint(str(saved), trusted="imported")


def test_missing_checksum_is_reported(saved):
    meta = json.loads((saved / ckpt.METADATA_FILE).read_text())
    del meta["arrays_sha256"]
    (saved / ckpt.METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="SHA-256 does not match"):
        Policy.from_checkpoint(str(saved), trusted="imported")


def test_torch_checkpoint_is_device_free_and_loads_on_policy_device(tmp_path):
    torch = pytest.importorskip("torch")
    import gymnasium as gym

    from rlpolicy.agents.ppo import PPOTorchPolicy

    obs, act = gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Discrete(2)
    p = PPOTorchPolicy(obs, act, {"framework": "torch", "seed": 0, "model": {"fcnet_hiddens": [4]}})
    p.export_checkpoint(str(tmp_path))
    meta = json.loads((tmp_path / ckpt.METADATA_FILE).read_text())
    assert "cuda" not in json.dumps(meta["state"]) and "device" not in json.dumps(meta["state"])
    npz = next(f for f in os.listdir(tmp_path) if f.endswith(".npz"))
    with np.load(tmp_path / npz, allow_pickle=False) as arrays:  # plain numpy, no pickle
        assert all(isinstance(arrays[k], np.ndarray) for k in arrays.files)
    restored = Policy.from_checkpoint(str(tmp_path), trusted="imported")
    assert all(t.device == restored.device for t in restored.model.state_dict().values())
    for k, w in p.get_weights().items():
        np.testing.assert_allclose(restored.get_weights()[k], w, rtol=0, atol=0)
    assert isinstance(restored.device, torch.device)


def test_checkpoint_from_fake_gpu_towers_loads_on_one_cpu(tmp_path):
    pytest.importorskip("torch")
    import gymnasium as gym

    from rlpolicy.agents.ppo import PPOTorchPolicy
    from rlpolicy.policy.sample_batch import SampleBatch

    obs, act = gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Discrete(2)
    cfg = {
        "seed": 0,
        "model": {"fcnet_hiddens": [4]},
        "train_batch_size": 8,
        "sgd_minibatch_size": 8,
        "num_sgd_iter": 1,
    }
    towers = PPOTorchPolicy(obs, act, {**cfg, "num_gpus": 2, "_fake_gpus": True})
    rng = np.random.default_rng(0)
    o = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
    a, _, f = towers.compute_actions(o)
    batch = SampleBatch(
        {
            "obs": o,
            "new_obs": o,
            "actions": a,
            "rewards": np.ones(8, np.float32),
            "dones": np.zeros(8, bool),
            "action_logp": f["action_logp"],
            "action_dist_inputs": f["action_dist_inputs"],
            "vf_preds": f["vf_preds"],
            "advantages": np.linspace(-1, 1, 8).astype(np.float32),
            "value_targets": np.ones(8, np.float32),
        }
    )
    towers.learn_on_batch(batch.copy())
    towers.export_checkpoint(str(tmp_path))
    single = Policy.from_checkpoint(str(tmp_path), {"num_gpus": 0, "_fake_gpus": False}, trusted="imported")
    assert len(single.devices) == 1
    for k, w in towers.get_weights().items():
        np.testing.assert_array_equal(single.get_weights()[k], w)
    towers.learn_on_batch(batch.copy())
    single.learn_on_batch(batch.copy())
    for k, w in towers.get_weights().items():  # towers average = one device on the whole batch
        np.testing.assert_allclose(single.get_weights()[k], w, rtol=1e-5, atol=1e-6)
