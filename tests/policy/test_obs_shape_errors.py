"""Observation-shape errors report the real shape of what the caller passed (lists included)."""

import gymnasium as gym
import numpy as np
import pytest

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def _make(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    if framework == "torch":
        from rlpolicy.policy.policy_template import build_policy_class

        cls = build_policy_class(name="Box4Policy", framework="torch", loss_fn=None)
    else:
        from rlpolicy.policy.tf_policy_template import build_tf_policy

        cls = build_tf_policy(name="Box4TFPolicy", loss_fn=None)
        cls = cls.as_eager() if framework == "tf2" else cls
    return cls(BOX4, gym.spaces.Discrete(2), {"framework": framework, "seed": 0})


@pytest.fixture(scope="module", params=["torch", "tf", "tf2"])
def box4_policy(request):
    return _make(request.param)


def test_compute_actions_with_list_of_wrong_observations_names_real_shape(box4_policy):
    # torch/tf2: the model's check; tf (graph): the feed check. Both name (4, 3).
    with pytest.raises(
        ValueError, match=r"(observation batch has shape|Cannot feed value of shape) \(4, 3\)"
    ):
        box4_policy.compute_actions([[1, 2, 3]] * 4)


def test_compute_single_action_with_short_list_names_real_shape(box4_policy):
    # Previously the list was batched number by number and reported as shape (3, 1).
    with pytest.raises(
        ValueError, match=r"(observation batch has shape|Cannot feed value of shape) \(1, 3\)"
    ):
        box4_policy.compute_single_action([0.1, 0.2, 0.3])


def test_compute_single_action_accepts_a_list_observation(box4_policy):
    obs = [0.1, -0.2, 0.3, 0.4]
    from_list = box4_policy.compute_single_action(obs, explore=False)
    from_array = box4_policy.compute_single_action(np.array(obs, np.float32), explore=False)
    assert from_list[0] == from_array[0]
    np.testing.assert_allclose(
        from_list[2]["action_dist_inputs"], from_array[2]["action_dist_inputs"], rtol=1e-6, atol=1e-6
    )
