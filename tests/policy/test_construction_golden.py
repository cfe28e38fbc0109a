"""Construction is unchanged by speed work: a fixed torch seed gives the initial weights,
state-dict names, view requirements and RNG use recorded from the tree before issue 26k
(commit c5f4b65, torch 2.13; PPO torch, fcnet 2x16). Torch's CPU random streams are
not promised across releases, so on another torch minor version the test is skipped."""

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy  # noqa: E402

RECORDED_WITH = "2.13"
if ".".join(torch.__version__.split("+")[0].split(".")[:2]) != RECORDED_WITH:
    pytest.skip(
        f"values recorded with torch {RECORDED_WITH}, running {torch.__version__}", allow_module_level=True
    )

# name: (shape, first three entries, sum of all entries)
RECORDED = {
    "discrete": {
        "view_requirements": [
            "action_dist_inputs",
            "action_logp",
            "actions",
            "advantages",
            "agent_index",
            "dones",
            "eps_id",
            "infos",
            "new_obs",
            "obs",
            "rewards",
            "terminateds",
            "truncateds",
            "unroll_id",
            "value_targets",
            "vf_preds",
        ],
        "next_uniform": 0.141563,
        "params": {
            "_logits._model.0.weight": ((2, 16), [-0.005291, 0.000896, -9.3e-05], 0.00025),
            "_logits._model.0.bias": ((2,), [0.0, 0.0], 0.0),
            "_hidden_layers.0._model.0.weight": ((16, 4), [-0.434375, 0.209542, 0.476097], -4.11476),
            "_hidden_layers.0._model.0.bias": ((16,), [0.0, 0.0, 0.0], 0.0),
            "_hidden_layers.1._model.0.weight": ((16, 16), [0.040427, 0.055388, -0.156149], -0.49648),
            "_hidden_layers.1._model.0.bias": ((16,), [0.0, 0.0, 0.0], 0.0),
            "_value_branch_separate.0._model.0.weight": ((16, 4), [0.462065, -0.823911, 0.068601], -2.17405),
            "_value_branch_separate.0._model.0.bias": ((16,), [0.0, 0.0, 0.0], 0.0),
            "_value_branch_separate.1._model.0.weight": ((16, 16), [-0.030326, 0.014482, 0.446472], 5.95495),
            "_value_branch_separate.1._model.0.bias": ((16,), [0.0, 0.0, 0.0], 0.0),
            "_value_branch._model.0.weight": ((1, 16), [0.001675, 0.002829, -0.00343], -0.01673),
            "_value_branch._model.0.bias": ((1,), [0.0], 0.0),
        },
    },
    "box": {
        "view_requirements": [
            "action_dist_inputs",
            "action_logp",
            "actions",
            "advantages",
            "agent_index",
            "dones",
            "eps_id",
            "infos",
            "new_obs",
            "obs",
            "rewards",
            "terminateds",
            "truncateds",
            "unroll_id",
            "value_targets",
            "vf_preds",
        ],
        "next_uniform": 0.171396,
        "params": {
            "_logits._model.0.weight": ((4, 16), [-0.005291, 0.000896, -9.3e-05], -0.00777),
            "_logits._model.0.bias": ((4,), [0.0, 0.0, 0.0], 0.0),
            "_hidden_layers.0._model.0.weight": ((16, 4), [-0.434375, 0.209542, 0.476097], -4.11476),
            "_hidden_layers.0._model.0.bias": ((16,), [0.0, 0.0, 0.0], 0.0),
            "_hidden_layers.1._model.0.weight": ((16, 16), [0.040427, 0.055388, -0.156149], -0.49648),
            "_hidden_layers.1._model.0.bias": ((16,), [0.0, 0.0, 0.0], 0.0),
            "_value_branch_separate.0._model.0.weight": ((16, 4), [0.243115, -0.002167, 0.488125], 4.96947),
            "_value_branch_separate.0._model.0.bias": ((16,), [0.0, 0.0, 0.0], 0.0),
            "_value_branch_separate.1._model.0.weight": (
                (16, 16),
                [-0.089582, -0.327601, 0.141252],
                -0.25653,
            ),
            "_value_branch_separate.1._model.0.bias": ((16,), [0.0, 0.0, 0.0], 0.0),
            "_value_branch._model.0.weight": ((1, 16), [0.000197, -0.001143, 0.005078], 0.01326),
            "_value_branch._model.0.bias": ((1,), [0.0], 0.0),
        },
    },
}

ACTION_SPACES = {
    "discrete": lambda: gym.spaces.Discrete(2),
    "box": lambda: gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
}


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_seeded_construction_matches_recording(case):
    rec = RECORDED[case]
    obs = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    torch.manual_seed(7)
    policy = PPOTorchPolicy(obs, ACTION_SPACES[case](), {"model": {"fcnet_hiddens": [16, 16]}})
    # Construction draws as many random numbers as before (model init + dummy-batch probe).
    next_uniform = float(torch.rand(1))
    state = policy.model.state_dict()
    assert list(state) == list(rec["params"])
    for name, (shape, first, total) in rec["params"].items():
        values = state[name].numpy()
        assert values.shape == shape, name
        np.testing.assert_allclose(values.ravel()[:3], first, atol=2e-6, err_msg=name)
        np.testing.assert_allclose(values.sum(), total, atol=1e-4, err_msg=name)
    assert sorted(policy.view_requirements) == rec["view_requirements"]
    assert next_uniform == pytest.approx(rec["next_uniform"], abs=1e-6)
