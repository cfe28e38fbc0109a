"""The shared FrameworkPolicy, driven by a tiny numpy "framework" that supplies its steps.

The expected values are worked by hand (linear model, plain SGD with momentum),
independently of the template.
"""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.policy import _framework_policy as template
from rlpolicy.policy._framework_policy import FrameworkPolicy, as_sample_batch, state_in_columns
from rlpolicy.policy.sample_batch import SampleBatch


def _lock_held_elsewhere(policy) -> bool:
    """Whether another thread finds the policy's lock taken."""
    out = []

    def probe():
        got = policy._lock.acquire(blocking=False)
        if got:
            policy._lock.release()
        out.append(not got)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return out[0]


class NumpyTemplatePolicy(FrameworkPolicy):
    """y = obs @ w; loss 0.5 * mean((y - targets)^2); SGD with momentum 0.5, lr 0.1."""

    def __init__(self, num_devices=1, **config):
        super().__init__(
            gym.spaces.Box(-10, 10, (3,), np.float32), gym.spaces.Box(-100, 100, (1,), np.float32), config
        )
        self.w = np.zeros(3, np.float32)
        self.velocity = np.zeros(3, np.float32)
        self._loss_columns = ["obs", "targets"]
        self.events = []
        self.can_learn = True
        self._init_tower_buffers(num_devices)

    num_states = 0

    def num_state_tensors(self):
        return self.num_states

    def get_initial_state(self):
        return [np.zeros(1, np.float32) for _ in range(self.num_states)]

    # --- framework steps
    def _check_can_learn(self, what):
        self.events.append(("check_can_learn", what))
        if not self.can_learn:
            raise ValueError(f"{what}: no loss")

    def _compute_actions_step(self, input_dict, state_batches, explore, timestep, episodes):
        self.last_input = input_dict
        self.events.append(
            (
                "act",
                explore,
                timestep,
                [np.asarray(s).tolist() for s in state_batches],
                _lock_held_elsewhere(self),
            )
        )
        obs = np.asarray(input_dict[SampleBatch.OBS], np.float32)
        self.global_timestep += len(obs)
        return (obs @ self.w)[:, None], [np.asarray(s) + 1 for s in state_batches], {}

    def _log_likelihoods_step(
        self, actions, obs_batch, state_batches, prev_action_batch, prev_reward_batch, actions_normalized
    ):
        mean = np.asarray(obs_batch, np.float32) @ self.w
        return -0.5 * (np.asarray(actions)[:, 0] - mean) ** 2

    def _learn_step(self, batch):
        self.events.append(("learn_step", batch.is_training, len(batch), _lock_held_elsewhere(self)))
        obs = np.asarray(batch[SampleBatch.OBS], np.float32)
        err = obs @ self.w - np.asarray(batch["targets"], np.float32)
        grad = obs.T @ err / len(obs)
        self.velocity = 0.5 * self.velocity + grad
        self.w = self.w - 0.1 * self.velocity
        return {"loss": float(0.5 * np.mean(err**2))}

    def _device_slices(self, batch):
        n = len(batch) // self._tower_buffers.num_devices
        return [batch[i * n : (i + 1) * n] for i in range(self._tower_buffers.num_devices)]

    def _learn_on_device_batches(self, batches, buffer_index):
        self.events.append(
            ("device_batches", buffer_index, [np.asarray(b["targets"]).tolist() for b in batches])
        )
        return {"rows": [len(b) for b in batches]}

    def get_weights(self):
        return {"w": self.w.copy()}

    def set_weights(self, weights):
        if set(weights) != {"w"} or np.shape(weights["w"]) != (3,):
            raise ValueError(f"set_weights: expected key 'w' of shape (3,), got {weights!r}")
        self.w = np.asarray(weights["w"], np.float32).copy()

    def _optimizer_state(self):
        return [self.velocity.copy()]

    def _check_optimizer_state(self, values):
        if values is None:
            return None
        if len(values) != 1 or np.shape(values[0]) != (3,):
            raise ValueError("_optimizer_variables: expected one (3,) array")
        return np.asarray(values[0], np.float32)

    def _set_optimizer_state(self, checked):
        self.velocity = checked.copy()


class RecordingCallbacks:
    def __init__(self):
        self.seen = []

    def on_learn_on_batch(self, *, policy, train_batch, result):
        policy.events.append(("callback", train_batch.is_training, _lock_held_elsewhere(policy)))
        result["rows_seen"] = len(train_batch)


def _batch(n=4):
    obs = np.arange(n * 3, dtype=np.float32).reshape(n, 3) / 10
    return SampleBatch({"obs": obs, "targets": np.arange(n, dtype=np.float32)})


def test_learn_on_batch_runs_check_callback_step_in_order_under_the_lock():
    policy = NumpyTemplatePolicy(callbacks=RecordingCallbacks)
    batch = _batch(4)
    stats = policy.learn_on_batch(dict(batch))  # a plain dict is taken as a SampleBatch
    assert [e[0] for e in policy.events] == ["check_can_learn", "callback", "learn_step"]
    assert policy.events[0] == ("check_can_learn", "learn_on_batch")
    assert policy.events[1] == ("callback", True, True)
    assert policy.events[2] == ("learn_step", True, 4, True)
    assert stats["custom_metrics"] == {"rows_seen": 4}
    # Hand-worked step from w = 0: err = -targets, grad = -obs.T @ targets / 4.
    obs, targets = batch["obs"], batch["targets"]
    grad = -(obs.T @ targets) / 4
    np.testing.assert_allclose(policy.w, -0.1 * grad, atol=1e-6)
    assert stats["loss"] == pytest.approx(0.5 * np.mean(targets**2), abs=1e-5)


def test_learn_on_batch_rejects_before_callback_and_changes_nothing():
    policy = NumpyTemplatePolicy(callbacks=RecordingCallbacks)
    bad = SampleBatch({"obs": np.zeros((2, 3), np.float32)})
    with pytest.raises(ValueError, match=r"learn_on_batch: .*lacks column\(s\) \['targets'\]"):
        policy.learn_on_batch(bad)
    policy.can_learn = False
    with pytest.raises(ValueError, match="learn_on_batch: no loss"):
        policy.learn_on_batch(_batch())
    assert [e[0] for e in policy.events] == ["check_can_learn", "check_can_learn"]
    np.testing.assert_array_equal(policy.w, np.zeros(3))
    with pytest.raises(TypeError, match="SampleBatch or a dict"):
        as_sample_batch([1, 2])


def test_buffers_check_index_first_and_slice_minibatches_per_device():
    policy = NumpyTemplatePolicy(
        num_devices=2, num_multi_gpu_tower_stacks=2, train_batch_size=8, sgd_minibatch_size=4
    )
    with pytest.raises(IndexError, match="buffer_index=2 is out of range"):
        policy.load_batch_into_buffer(_batch(8), buffer_index=2)
    assert policy.events == []  # the index is checked before the batch is touched
    assert policy.load_batch_into_buffer(_batch(8), buffer_index=1) == 4
    assert policy.get_num_samples_loaded_into_buffer(1) == 4
    assert policy.get_num_samples_loaded_into_buffer(0) == 0
    # 4 rows per SGD step over 2 devices: 2 rows of each device's 4-row slice.
    out = policy.learn_on_loaded_batch(offset=2, buffer_index=1)
    assert out == {"rows": [2, 2]}
    assert policy.events[-1] == ("device_batches", 1, [[2.0, 3.0], [6.0, 7.0]])
    with pytest.raises(ValueError, match="load_batch_into_buffer"):
        policy.learn_on_loaded_batch(0, buffer_index=0)
    # One buffer attribute for all frameworks.
    assert [k for k in vars(policy) if "buffer" in k] == ["_tower_buffers"]


def test_get_state_round_trip_and_set_state_checks_everything_first():
    policy = NumpyTemplatePolicy()
    policy.learn_on_batch(_batch())
    policy.global_timestep = 7
    state = policy.get_state()
    assert sorted(state) == ["_optimizer_variables", "global_timestep", "weights"]
    other = NumpyTemplatePolicy()
    other.set_state(state)
    np.testing.assert_array_equal(other.w, policy.w)
    np.testing.assert_array_equal(other.velocity, policy.velocity)
    assert other.global_timestep == 7
    # Bad optimizer values: rejected before the (good) weights are assigned.
    fresh = NumpyTemplatePolicy()
    with pytest.raises(ValueError, match="_optimizer_variables"):
        fresh.set_state(dict(state, _optimizer_variables=[np.zeros(2)]))
    np.testing.assert_array_equal(fresh.w, np.zeros(3))
    assert fresh.global_timestep == 0
    # Bad weights: nothing assigned, the optimizer neither.
    with pytest.raises(ValueError, match="set_weights"):
        fresh.set_state(dict(state, weights={"w": np.zeros(4)}))
    np.testing.assert_array_equal(fresh.velocity, np.zeros(3))
    with pytest.raises(ValueError, match=r"lacks key\(s\) \['global_timestep'\]"):
        fresh.set_state({"weights": state["weights"]})
    with pytest.raises(ValueError, match=r"state\['global_timestep'\]='soon' is not an integer"):
        fresh.set_state(dict(state, global_timestep="soon"))
    np.testing.assert_array_equal(fresh.w, np.zeros(3))
    fresh.set_state(dict(state, global_timestep=np.int64(11)))
    assert type(fresh.global_timestep) is int and fresh.global_timestep == 11


def test_compute_actions_goes_through_the_input_dict_path():
    policy = NumpyTemplatePolicy(explore=False)
    policy.w = np.array([1.0, 2.0, 3.0], np.float32)
    policy.global_timestep = 5
    obs = np.array([[1, 0, 0], [0, 0, 1]], np.float32)
    actions, states, extra = policy.compute_actions(obs)
    np.testing.assert_allclose(actions, [[1.0], [3.0]], atol=1e-6)
    # explore/timestep None: config["explore"] and global_timestep (then advanced by 2 rows).
    assert policy.events[-1] == ("act", False, 5, [], True)
    assert policy.global_timestep == 7
    assert isinstance(policy.last_input, SampleBatch) and len(policy.last_input) == 2
    assert policy.last_input.is_training is False
    policy.compute_actions(obs, explore=True, timestep=100)
    assert policy.events[-1][1:3] == (True, 100)
    # A list of rows (not an array) goes through SampleBatch's full constructor: same batch.
    policy.compute_actions([[1.0, 0.0, 0.0]], state_batches=None, info_batch=[{}])
    assert len(policy.last_input) == 1 and list(policy.last_input["infos"]) == [{}]
    with pytest.raises(ValueError, match="compute_actions: column 'obs' has dtype <U1"):
        policy.compute_actions(np.array([["a", "b", "c"]]))
    assert policy.global_timestep == 10  # 5 + 2 + 2 + 1 rows; the rejected call added none


def test_input_dict_path_checks_and_resolves_the_same_way():
    policy = NumpyTemplatePolicy(explore=True)
    policy.num_states = 2
    policy.global_timestep = 3
    policy.compute_actions_from_input_dict(
        {"obs": np.zeros((2, 3), np.float32), "state_in_1": np.ones((2, 1)), "state_in_0": np.zeros((2, 1))}
    )
    assert policy.events[-1][:4] == ("act", True, 3, [[[0.0], [0.0]], [[1.0], [1.0]]])
    with pytest.raises(ValueError, match="compute_actions_from_input_dict: column 'obs' has dtype"):
        policy.compute_actions_from_input_dict({"obs": np.array([["x", "y", "z"]])})


def test_state_in_columns_in_index_order():
    d = {"state_in_10": 10, "obs": 0, "state_in_2": 2, "state_in_0": 0}
    assert state_in_columns(d) == [0, 2, 10]


def test_log_likelihoods_use_the_flat_obs():
    policy = NumpyTemplatePolicy()
    policy.w = np.array([1.0, 0.0, 0.0], np.float32)
    logp = policy.compute_log_likelihoods(np.array([[3.0]]), np.array([[1.0, 5.0, 5.0]], np.float32))
    np.testing.assert_allclose(logp, [-0.5 * 4.0], atol=1e-6)


def test_with_lock_makes_one_reentrant_lock_lazily():
    class Box:
        @template.with_lock
        def outer(self):
            return self.inner()

        @template.with_lock
        def inner(self):
            return self.__dict__["_lock"]

    b = Box()
    assert "_lock" not in vars(b)
    lock = b.outer()  # re-entrant: inner takes the lock outer holds
    assert isinstance(lock, type(threading.RLock()))
    assert b.outer() is lock


def test_policy_lock_is_the_lock_with_lock_takes():
    class Box:
        @template.with_lock
        def held(self):
            return _lock_held_elsewhere(self)

    b = Box()
    lock = template.policy_lock(b)  # made on first use, then the same object
    assert template.policy_lock(b) is lock and vars(b)["_lock"] is lock
    assert b.held() is True  # with_lock holds the lock policy_lock returned
    with lock:
        assert _lock_held_elsewhere(b)
    assert not _lock_held_elsewhere(b)


def test_torch_policy_with_lock_is_the_same_decorator():
    pytest.importorskip("torch")
    from rlpolicy.policy import torch_policy  # (its RLlib 1.11 name)

    assert torch_policy.with_lock is template.with_lock
