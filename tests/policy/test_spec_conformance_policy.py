"""Spec conformance of the ``Policy`` base class (RLlib 1.11's policy listing).

Pins the base-class defaults that tests/policy/test_policy.py leaves open:
default view requirements, ``action_space_struct``, the pass-through of
``compute_actions_from_input_dict`` (state column order, infos, episodes,
extra kwargs), ``compute_single_action``'s ``input_dict`` path, the default
``learn_on_batch``/``get_state``/``set_state``/``on_global_var_update``, and
``_create_exploration`` (worker index/count reach the exploration).
Expectations are hand-written.
"""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.policy.policy import Policy
from rlpolicy.policy.sample_batch import SampleBatch

OBS = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
ACT = gym.spaces.Discrete(3)


class Recording(Policy):
    """Records compute_actions calls; echoes state_in + 1 as state_out."""

    def __init__(self, observation_space=OBS, action_space=ACT, config=None):
        super().__init__(observation_space, action_space, config or {})
        self.calls = []
        self.weights = {"w": np.zeros(2, np.float32)}

    def compute_actions(
        self,
        obs_batch,
        state_batches=None,
        prev_action_batch=None,
        prev_reward_batch=None,
        info_batch=None,
        episodes=None,
        explore=None,
        timestep=None,
        **kwargs,
    ):
        self.calls.append(
            dict(
                obs=obs_batch,
                state=state_batches,
                prev_action=prev_action_batch,
                prev_reward=prev_reward_batch,
                info=info_batch,
                episodes=episodes,
                explore=explore,
                timestep=timestep,
                kwargs=kwargs,
            )
        )
        n = len(obs_batch)
        return (np.arange(n), [np.asarray(s) + 1 for s in (state_batches or [])], {"row": np.arange(n) * 10})

    def get_weights(self):
        return {k: v.copy() for k, v in self.weights.items()}

    def set_weights(self, weights):
        self.weights = {k: np.array(v) for k, v in weights.items()}


def test_default_view_requirements_layout():
    vr = Recording().view_requirements
    assert set(vr) == {
        "obs",
        "new_obs",
        "actions",
        "prev_actions",
        "rewards",
        "prev_rewards",
        "dones",
        "terminateds",
        "truncateds",
        "infos",
        "eps_id",
        "unroll_id",
        "agent_index",
        "t",
    }
    assert vr["obs"].space == OBS and vr["obs"].shift == 0
    assert vr["new_obs"].data_col == "obs" and vr["new_obs"].shift == 1
    assert vr["new_obs"].space == OBS
    assert vr["actions"].space == ACT and vr["actions"].used_for_compute_actions is False
    assert vr["prev_actions"].data_col == "actions" and vr["prev_actions"].shift == -1
    assert vr["prev_actions"].space == ACT
    assert vr["prev_rewards"].data_col == "rewards" and vr["prev_rewards"].shift == -1


def test_base_attributes_and_action_space_struct():
    space = gym.spaces.Dict(
        {
            "a": gym.spaces.Discrete(2),
            "b": gym.spaces.Tuple([gym.spaces.Discrete(4), gym.spaces.Box(0, 1, (2,))]),
        }
    )
    p = Recording(OBS, space, {"framework": "torch"})
    assert p.observation_space is OBS and p.action_space is space
    assert set(p.action_space_struct) == {"a", "b"}
    assert p.action_space_struct["a"] == gym.spaces.Discrete(2)
    assert isinstance(p.action_space_struct["b"], tuple) and len(p.action_space_struct["b"]) == 2
    assert p.action_space_struct["b"][0] == gym.spaces.Discrete(4)
    assert Recording().action_space_struct == ACT
    assert p.framework == "torch" and p.global_timestep == 0 and p.dist_class is None
    assert p.get_session() is None


def test_default_recurrence_and_postprocessing():
    p = Recording()
    assert p.is_recurrent() is False and p.num_state_tensors() == 0
    assert p.get_initial_state() == []
    batch = SampleBatch({"obs": np.zeros((2, 2), np.float32)})
    assert p.postprocess_trajectory(batch) is batch
    assert p.postprocess_trajectory(batch, {"other": None}, object()) is batch


def test_compute_actions_from_input_dict_passes_everything_through():
    p = Recording()
    episodes = [object(), object()]
    input_dict = SampleBatch(
        {
            "obs": np.zeros((2, 2), np.float32),
            "state_in_1": np.full((2, 1), 1.0),
            "state_in_0": np.full((2, 3), 0.0),
            "prev_actions": np.array([2, 1]),
            "prev_rewards": np.array([0.5, -0.5]),
            "infos": np.array([{"i": 0}, {"i": 1}]),
        }
    )
    out = p.compute_actions_from_input_dict(
        input_dict, explore=False, timestep=11, episodes=episodes, custom=7
    )
    call = p.calls[-1]
    assert call["explore"] is False and call["timestep"] == 11
    assert call["episodes"] is episodes and call["kwargs"] == {"custom": 7}
    # The state list follows the dict's (state_in_*) key order.
    assert [s.shape for s in call["state"]] == [(2, 1), (2, 3)]
    np.testing.assert_array_equal(call["prev_action"], [2, 1])
    np.testing.assert_array_equal(call["prev_reward"], [0.5, -0.5])
    assert [d["i"] for d in call["info"]] == [0, 1]
    np.testing.assert_array_equal(out[0], [0, 1])


def test_compute_actions_from_input_dict_missing_columns_pass_none():
    p = Recording()
    p.compute_actions_from_input_dict({"obs": np.zeros((1, 2), np.float32)})
    call = p.calls[-1]
    assert call["state"] == [] and call["prev_action"] is None and call["prev_reward"] is None
    assert call["info"] is None and call["episodes"] is None and call["explore"] is None
    assert call["timestep"] is None


def test_compute_single_action_input_dict_wins_and_outputs_are_unbatched():
    p = Recording()
    ep = object()
    action, state_out, info = p.compute_single_action(
        obs=np.full(2, 9.0),
        state=[np.zeros(5)],
        prev_action=1,
        input_dict={"obs": np.array([1.0, 2.0]), "state_in_0": np.array([3.0, 4.0])},
        episode=ep,
        explore=True,
        timestep=3,
    )
    call = p.calls[-1]
    np.testing.assert_array_equal(call["obs"], [[1.0, 2.0]])
    np.testing.assert_array_equal(call["state"][0], [[3.0, 4.0]])
    assert call["prev_action"] is None  # input_dict replaces the separate args
    assert call["episodes"] == [ep] and call["explore"] is True and call["timestep"] == 3
    assert action == 0
    np.testing.assert_array_equal(state_out[0], [4.0, 5.0])
    assert info == {"row": 0}


def test_default_learn_on_batch_returns_grad_info_of_compute_gradients():
    calls = []

    class Grad(Recording):
        def compute_gradients(self, batch):
            calls.append(("compute", batch))
            return [np.ones(2)], {"learner_stats": {"x": 1.0}}

        def apply_gradients(self, gradients):
            calls.append(("apply", gradients))
            self.weights["w"] = self.weights["w"] - 0.5 * gradients[0]

    p = Grad()
    batch = SampleBatch({"obs": np.zeros((2, 2), np.float32)})
    assert p.learn_on_batch(batch) == {"learner_stats": {"x": 1.0}}
    assert calls[0] == ("compute", batch) and calls[1][0] == "apply"
    np.testing.assert_array_equal(p.weights["w"], [-0.5, -0.5])


def test_base_state_round_trip_and_global_vars():
    p = Recording()
    p.weights["w"] = np.array([1.0, 2.0], np.float32)
    p.global_timestep = 5
    state = p.get_state()
    assert set(state) == {"weights", "global_timestep"} and state["global_timestep"] == 5
    q = Recording()
    q.set_state(state)
    np.testing.assert_array_equal(q.weights["w"], [1.0, 2.0])
    assert q.global_timestep == 5
    q.on_global_var_update({"timestep": 123})
    assert q.global_timestep == 123


def test_apply_calls_func_with_policy_first():
    p = Recording()
    assert p.apply(lambda pol, a, b=0: (pol, a, b), 1, b=2) == (p, 1, 2)


def test_get_exploration_state_is_the_explorations_state():
    torch = pytest.importorskip("torch")  # noqa: F841
    from rlpolicy.policy.torch_policy import TorchPolicy

    p = TorchPolicy(
        OBS,
        ACT,
        {
            "model": {"fcnet_hiddens": [4]},
            "exploration_config": {"type": "EpsilonGreedy", "epsilon_timesteps": 10},
        },
    )
    assert p.get_exploration_state() == p.exploration.get_state()
    assert p._create_exploration() is p.exploration  # existing one is re-used


@pytest.mark.parametrize(
    "worker_index, expected",
    [
        (0, 0.0),  # the local worker does not explore
        (1, 0.4),  # 0.4 ** (1 + 0/3 * 7)
        (2, 0.4 ** (1 + 1 / 3 * 7)),
        (4, 0.4**8),
    ],
)
def test_create_exploration_passes_worker_index_and_count(worker_index, expected):
    pytest.importorskip("torch")
    from rlpolicy.policy.torch_policy import TorchPolicy

    p = TorchPolicy(
        OBS,
        ACT,
        {
            "model": {"fcnet_hiddens": [4]},
            "num_workers": 4,
            "worker_index": worker_index,
            "exploration_config": {"type": "PerWorkerEpsilonGreedy"},
        },
    )
    assert type(p.exploration).__name__ == "PerWorkerEpsilonGreedy"
    assert float(p.exploration.epsilon_schedule(0)) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert float(p.exploration.epsilon_schedule(10**7)) == pytest.approx(expected, rel=1e-9, abs=1e-12)
