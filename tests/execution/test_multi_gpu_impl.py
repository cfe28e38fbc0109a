"""TF towers (TFMultiGPUTowerStack) on fake GPUs: equal to the single-device step.

The invariant checked: for a mean loss, one ``learn_on_loaded_batch`` step on
2 CPU towers (each with half the rows) gives the same weights as one
single-device ``learn_on_batch`` on all rows, for Adam and for SGD, with and
without ``grad_clip`` (the averaged gradient is clipped). SGD steps are also
checked against numpy.
"""

import os
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "policy"))

from tf_graph_policies import (  # noqa: E402
    ACT,
    OBS,
    PGGraphPolicy,
    SGDPGGraphPolicy,
    assert_weights_close,
    config,
    pg_batch,
    sgd_pg_step,
    tf,
    tf1,
)

from rlpolicy.execution.multi_gpu_impl import TFMultiGPUTowerStack  # noqa: E402
from rlpolicy.policy.dynamic_tf_policy import DynamicTFPolicy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch, concat_samples  # noqa: E402

FAKE2 = {"num_gpus": 2, "_fake_gpus": True}
LINEAR = {"fcnet_hiddens": []}


@pytest.fixture(scope="module")
def adam_pair():
    """(single-device, 2-tower) Adam PG policies with two buffers."""
    cfg = config(num_multi_gpu_tower_stacks=2)
    return PGGraphPolicy(OBS, ACT, cfg), PGGraphPolicy(OBS, ACT, dict(cfg, **FAKE2))


def _sync(single, towers):
    towers.set_state(single.get_state())
    assert_weights_close(single.get_weights(), towers.get_weights(), rtol=0, atol=0)


@pytest.mark.tf
def test_towers_are_built_once_for_all_buffers(adam_pair):
    _, towers = adam_pair
    assert towers.devices == ["/cpu:0", "/cpu:0"]
    stacks = towers.multi_gpu_tower_stacks
    assert len(stacks) == 2 and stacks[0] is stacks[1]
    copies = stacks[0].get_device_losses()
    assert len(copies) == 2 and all(c._is_tower and c.model is towers.model for c in copies)


@pytest.mark.tf
def test_adam_towers_equal_single_device(adam_pair):
    single, towers = adam_pair
    _sync(single, towers)
    data = pg_batch(8, seed=1)
    assert towers.load_batch_into_buffer(data.copy()) == 4
    out = towers.learn_on_loaded_batch(offset=0)
    single.learn_on_batch(data.copy())
    assert_weights_close(towers.get_weights(), single.get_weights())
    means = [out[f"tower_{i}"]["learner_stats"]["mean_reward"] for i in range(2)]
    np.testing.assert_allclose(
        means, [data["rewards"][:4].mean(), data["rewards"][4:].mean()], rtol=1e-5, atol=1e-6
    )


@pytest.mark.tf
def test_two_buffers_are_independent(adam_pair):
    single, towers = adam_pair
    _sync(single, towers)
    first, second = pg_batch(8, seed=2), pg_batch(6, seed=3)
    assert towers.load_batch_into_buffer(first.copy(), buffer_index=0) == 4
    assert towers.load_batch_into_buffer(second.copy(), buffer_index=1) == 3
    assert towers.get_num_samples_loaded_into_buffer(0) == 4
    assert towers.get_num_samples_loaded_into_buffer(1) == 3
    towers.learn_on_loaded_batch(offset=0, buffer_index=1)
    single.learn_on_batch(second.copy())
    assert_weights_close(towers.get_weights(), single.get_weights())
    towers.learn_on_loaded_batch(offset=0, buffer_index=0)
    single.learn_on_batch(first.copy())
    assert_weights_close(towers.get_weights(), single.get_weights())


def test_counts_are_per_device_and_excess_rows_are_dropped(adam_pair):
    _, towers = adam_pair
    assert towers.load_batch_into_buffer(pg_batch(9, seed=4)) == 4
    assert towers.get_num_samples_loaded_into_buffer() == 4


@pytest.mark.tf
def test_minibatch_offsets_slice_every_device(adam_pair):
    single, towers = adam_pair
    _sync(single, towers)
    data = pg_batch(8, seed=5)
    towers.config["sgd_minibatch_size"] = 4  # 2 rows per device and step
    try:
        towers.load_batch_into_buffer(data.copy())
        towers.learn_on_loaded_batch(offset=2)
    finally:
        towers.config["sgd_minibatch_size"] = None
    # Device 0 holds rows 0-3, device 1 rows 4-7; offset 2 takes rows 2-3 and 6-7.
    single.learn_on_batch(concat_samples([data[2:4], data[6:8]]))
    assert_weights_close(towers.get_weights(), single.get_weights())


@pytest.mark.tf
@pytest.mark.parametrize("clip", [None, 0.02])
def test_sgd_towers_equal_single_device_and_numpy(clip):
    cfg = config(model=LINEAR, lr=0.5, grad_clip=clip)
    single = SGDPGGraphPolicy(OBS, ACT, cfg)
    towers = SGDPGGraphPolicy(OBS, ACT, dict(cfg, **FAKE2))
    _sync(single, towers)
    w0 = single.get_weights()
    data = pg_batch(8, seed=6)
    towers.load_batch_into_buffer(data.copy())
    towers.learn_on_loaded_batch()
    single.learn_on_batch(data.copy())
    assert_weights_close(towers.get_weights(), single.get_weights())
    w, b = sgd_pg_step(w0["fc_out/kernel"], w0["fc_out/bias"], data, 0.5, clip)
    np.testing.assert_allclose(towers.get_weights()["fc_out/kernel"], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(towers.get_weights()["fc_out/bias"], b, rtol=1e-5, atol=1e-6)
    if clip:  # the clip is active: the unclipped step would differ
        w_free, _ = sgd_pg_step(w0["fc_out/kernel"], w0["fc_out/bias"], data, 0.5, None)
        assert not np.allclose(w, w_free, atol=1e-4)


@pytest.mark.parametrize("devices", [{}, FAKE2], ids=["cpu", "fake-gpu-x2"])
def test_learning_before_loading_raises_on_every_layout(adam_pair, devices):
    single, towers = adam_pair
    pol = towers if devices else single
    fresh_index = 1
    pol._tower_buffers.clear(fresh_index)
    with pytest.raises(ValueError, match=r"Must call Policy.load_batch_into_buffer\(\) before"):
        pol.learn_on_loaded_batch(offset=0, buffer_index=fresh_index)
    with pytest.raises(IndexError, match="buffer_index=2 is out of range"):
        pol.learn_on_loaded_batch(offset=0, buffer_index=2)


def test_stack_needs_a_policy():
    with pytest.raises(ValueError, match="pass policy="):
        TFMultiGPUTowerStack(optimizer=None, devices=["/cpu:0"])


def two_losses(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    rewards = train_batch[SampleBatch.REWARDS]
    return [-tf.reduce_mean(logp * rewards), tf.reduce_mean(tf.square(model.value_function() - rewards))]


class TwoLossPolicy(DynamicTFPolicy):
    def __init__(self, obs_space, action_space, config, existing_inputs=None, existing_model=None):
        DynamicTFPolicy.__init__(
            self,
            obs_space,
            action_space,
            config,
            two_losses,
            existing_inputs=existing_inputs,
            existing_model=existing_model,
        )

    def optimizer(self):
        return [tf1.train.GradientDescentOptimizer(0.3), tf1.train.AdamOptimizer(0.01)]


@pytest.mark.tf
def test_two_losses_and_optimizers_on_towers_equal_single_device():
    cfg = config(_tf_policy_handles_more_than_one_loss=True, grad_clip=0.1)
    single = TwoLossPolicy(OBS, ACT, cfg)
    towers = TwoLossPolicy(OBS, ACT, dict(cfg, **FAKE2))
    assert len(towers._optimizers) == 2 and len(towers._grads_and_vars) == 2
    _sync(single, towers)
    w0 = single.get_weights()
    data = pg_batch(8, seed=8)
    towers.load_batch_into_buffer(data.copy())
    towers.learn_on_loaded_batch()
    single.learn_on_batch(data.copy())
    assert_weights_close(towers.get_weights(), single.get_weights())
    for key in ("fc_out/bias", "value_out/bias"):  # each loss moved its own head
        assert not np.allclose(single.get_weights()[key], w0[key], atol=1e-6)
