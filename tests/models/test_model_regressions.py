"""Regressions found in audit: eager TF models fed numpy multi-dim observations; the torch
FC value head with no_final_linear and a separate value stack."""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.models.catalog import MODEL_DEFAULTS, ModelCatalog


@pytest.mark.tf
@pytest.mark.parametrize("shape", [(2, 3), (10, 10, 3)])
def test_eager_tf_model_accepts_numpy_multi_dim_obs(shape):
    pytest.importorskip("tensorflow")
    space = gym.spaces.Box(0.0, 1.0, shape, np.float32)
    config = dict(MODEL_DEFAULTS, conv_filters=[[4, [3, 3], 2], [8, [5, 5], 1]])
    model = ModelCatalog.get_model_v2(space, gym.spaces.Discrete(2), 2, config, framework="tf2")
    out, _ = model({"obs": np.zeros((4,) + shape, np.float32)})
    assert tuple(out.shape) == (4, 2)


def test_torch_no_final_linear_separate_vf_value_head_sized_by_last_hidden():
    torch = pytest.importorskip("torch")
    from rlpolicy.models.torch.fcnet import FullyConnectedNetwork

    config = dict(MODEL_DEFAULTS, fcnet_hiddens=[6, 5], no_final_linear=True, vf_share_layers=False)
    model = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), 3, config, "x")
    assert tuple(model.state_dict()["_value_branch._model.0.weight"].shape) == (1, 5)
    out, _ = model({"obs": torch.zeros(2, 4)})
    assert tuple(out.shape) == (2, 3)
    assert tuple(model.value_function().shape) == (2,)
