"""``import_model_from_h5`` on crafted files: links, FIFOs, devices and garbage give a
CheckpointError before (or instead of) Keras reading them, and write nothing."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy._core.checkpoint import CheckpointError

pytestmark = pytest.mark.tf
pytest.importorskip("tensorflow")

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


@pytest.fixture(scope="module")
def policy():
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy

    return PPOTFPolicy(OBS, ACT, {"framework": "tf", "model": {"fcnet_hiddens": [8]}})


def _dev_zero(path):
    os.symlink("/dev/zero", path)


def _fifo(path):
    os.mkfifo(path)


def _garbage(path):
    with open(path, "wb") as f:
        f.write(b"\x80\x04\x95 not an h5 file")


def _folder(path):
    os.mkdir(path)


@pytest.mark.parametrize(
    "make, match",
    [
        (_dev_zero, "not a regular file"),
        (_fifo, "not a regular file"),
        (_folder, "not a regular file"),
        (_garbage, "cannot be loaded"),
    ],
)
def test_crafted_h5_files_are_refused(policy, tmp_path, make, match):
    path = tmp_path / "w.h5"
    make(path)
    before = policy.get_weights()
    with pytest.raises(CheckpointError, match=match):
        policy.import_model_from_h5(str(path))
    for k, v in policy.get_weights().items():
        np.testing.assert_array_equal(v, before[k])
    assert sorted(os.listdir(tmp_path)) == ["w.h5"]
