"""``TorchPolicy.compute_actions_from_input_dict`` takes ``episodes`` as the spec (and
RLlib 1.11) has it: ``(input_dict, explore=None, timestep=None, episodes=None, **kwargs)``.

Client code here calls it as 1.x samplers and policies do: positionally and by keyword.
"""

import inspect

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")

from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402


def test_signature_has_episodes():
    params = list(inspect.signature(TorchPolicy.compute_actions_from_input_dict).parameters)
    assert params[:5] == ["self", "input_dict", "explore", "timestep", "episodes"]
    assert (
        inspect.signature(TorchPolicy.compute_actions_from_input_dict).parameters["episodes"].default is None
    )


def test_episodes_passed_by_keyword_and_position():
    policy = PGTorchPolicy(
        gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        gym.spaces.Discrete(2),
        {"framework": "torch", "model": {"fcnet_hiddens": [4]}},
    )
    obs = np.array([[0.1, 0.2, 0.3], [-0.3, 0.0, 0.5]], np.float32)
    by_kw = policy.compute_actions_from_input_dict(SampleBatch({"obs": obs}), explore=False, episodes=None)
    by_pos = policy.compute_actions_from_input_dict(SampleBatch({"obs": obs}), False, 7, [None, None])
    np.testing.assert_allclose(by_kw[2]["action_dist_inputs"], by_pos[2]["action_dist_inputs"], atol=1e-6)
    assert by_kw[0].shape == (2,)
