"""config["torch_compile_acting"]: accepted, ignored with one warning.

The compiled (``torch.jit.trace``) acting path won under 10% on the shared
bench (docs/porting.md) and was removed; old configs that set the key still
build and act exactly like configs that do not.
"""

import logging

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")

from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
ACT = gym.spaces.Discrete(3)
MODEL = {"fcnet_hiddens": [8]}


def _warnings(caplog):
    return [r for r in caplog.records if "torch_compile_acting" in r.getMessage()]


def test_jit_is_accepted_ignored_and_warned_once(caplog):
    plain = TorchPolicy(OBS, ACT, {"model": dict(MODEL)})
    with caplog.at_level(logging.WARNING, logger="rlpolicy"):
        jit = TorchPolicy(OBS, ACT, {"model": dict(MODEL), "torch_compile_acting": "jit"})
        jit.set_weights(plain.get_weights())
        obs = np.random.default_rng(0).uniform(-1, 1, (5, 6)).astype(np.float32)
        got = [jit.compute_actions(obs, explore=False) for _ in range(3)]
    (record,) = _warnings(caplog)
    assert record.levelno == logging.WARNING and "ignored" in record.getMessage()
    assert jit.config["torch_compile_acting"] == "jit"
    want = plain.compute_actions(obs, explore=False)
    for actions, state_out, extra in got:
        np.testing.assert_array_equal(actions, want[0])
        assert state_out == want[1] == []
        np.testing.assert_allclose(extra["action_dist_inputs"], want[2]["action_dist_inputs"], atol=1e-6)


@pytest.mark.parametrize("mode", [False, None])
def test_off_values_do_not_warn(caplog, mode):
    with caplog.at_level(logging.WARNING, logger="rlpolicy"):
        TorchPolicy(OBS, ACT, {"model": dict(MODEL), "torch_compile_acting": mode})
    assert not _warnings(caplog)


def test_bad_mode_is_rejected():
    with pytest.raises(ValueError, match="torch_compile_acting"):
        TorchPolicy(OBS, ACT, {"torch_compile_acting": "compile"})
