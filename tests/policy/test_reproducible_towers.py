"""config["_deterministic_towers"]: buffered minibatch SGD whose weights do not depend
on the number of (fake-GPU) towers.

Invariants checked:
- the chunk plan (``plan_exact_chunks``) against hand-worked layouts, the same
  chunks whatever the device count;
- torch, graph TF and eager TF (tf2), FC and LSTM (padded sequences of unequal length): 1, 2
  and 4 towers give bitwise-equal weights after several buffered SGD steps;
- the exact mode computes the mean-loss step: it matches single-device
  ``learn_on_batch`` on the same minibatches (an independent code path) to
  float32 tolerance;
- the default mode keeps its guarantee (one step on all rows: towers equal to
  float32 tolerance);
- bad values raise naming the key.
"""

import numpy as np
import pytest

from rlpolicy._core.tower_buffers import (
    ChunkedSlice,
    TowerBuffers,
    exact_chunk_count,
    plan_exact_chunks,
)
from rlpolicy.policy.sample_batch import SampleBatch

N = 64
MINIBATCH = 32
# Unequal sequences (sum 64); several cross the minibatch boundary at row 32.
SEQ_LENS = np.array([5, 3, 8, 2, 6, 4, 7, 1, 5, 3, 8, 2, 4, 6], np.int32)
CELL = 8


# ---------------------------------------------------------------- the chunk plan


def _rows(chunk):
    return chunk.batch["obs"].tolist()


def test_plan_rows_hand_worked_and_independent_of_device_count():
    batch = SampleBatch({"obs": np.arange(20)})
    layouts = {}
    for k in (1, 2, 4):
        shares = plan_exact_chunks(batch, minibatch_size=8, num_chunks=4, num_devices=k)
        assert len(shares) == k
        # Three minibatches: rows 0-7, 8-15 and the short 16-19 (4 rows, one per chunk).
        assert all(len(s.minibatches) == 3 for s in shares)
        assert all(len(s) == 3 * (8 // k) for s in shares)
        # Minibatch m of all devices together, in chunk order.
        layouts[k] = [
            [(c.position, _rows(c), c.num_samples, c.total_samples) for s in shares for c in s.minibatches[m]]
            for m in range(3)
        ]
    assert layouts[1][0] == [(0, [0, 1], 2, 8), (1, [2, 3], 2, 8), (2, [4, 5], 2, 8), (3, [6, 7], 2, 8)]
    assert layouts[1][2] == [(0, [16], 1, 4), (1, [17], 1, 4), (2, [18], 1, 4), (3, [19], 1, 4)]
    assert layouts[2] == layouts[1] and layouts[4] == layouts[1]
    # Device 1 of 2 holds chunks 2 and 3 of every minibatch.
    two = plan_exact_chunks(batch, 8, 4, 2)
    assert [c.position for c in two[1].minibatches[1]] == [2, 3]
    assert _rows(two[1].minibatches[1][0]) == [12, 13]


def test_plan_sequences_go_to_the_minibatch_of_their_last_row():
    # seq_lens [3, 2, 4, 1, 2, 3, 1]: ends at rows 3, 5, 9, 10, 12, 15, 16; with 8-row
    # minibatches the third sequence (rows 5-8) crosses row 8 and joins minibatch 1.
    lens = np.array([3, 2, 4, 1, 2, 3, 1], np.int32)
    batch = SampleBatch(
        {"obs": np.arange(16), "seq_lens": lens, "state_in_0": np.arange(7, dtype=np.float32)[:, None]}
    )
    (share,) = plan_exact_chunks(batch, minibatch_size=8, num_chunks=2, num_devices=1)
    mb0, mb1 = share.minibatches
    assert [_rows(c) for c in mb0] == [[0, 1, 2], [3, 4]]
    assert [c.num_samples for c in mb0] == [3, 2]
    # Minibatch 1: five sequences split 3 + 2: valid steps 4+1+2 = 7 and 3+1 = 4.
    assert [c.batch["seq_lens"].tolist() for c in mb1] == [[4, 1, 2], [3, 1]]
    assert [(c.num_samples, c.total_samples) for c in mb1] == [(7, 11), (4, 11)]
    assert mb1[0].weight == pytest.approx(7 / 11)
    # The state inputs follow their sequences.
    assert mb1[1].batch["state_in_0"][:, 0].tolist() == [5.0, 6.0]


def test_plan_errors_and_the_dropped_short_minibatch():
    batch = SampleBatch({"obs": np.arange(10)})
    with pytest.raises(ValueError, match="shared equally"):
        plan_exact_chunks(batch, 4, num_chunks=3, num_devices=2)
    # Rows 8-9 form a last minibatch of 2 rows < 4 chunks: dropped.
    (share,) = plan_exact_chunks(batch, 4, 4, 1)
    assert len(share.minibatches) == 2
    # A full minibatch smaller than K is an error naming the config key.
    with pytest.raises(ValueError, match="_deterministic_towers.*fewer than its 8 chunks"):
        plan_exact_chunks(SampleBatch({"obs": np.arange(12)}), 4, 8, 1)


def test_chunked_slice_offsets():
    shares = plan_exact_chunks(SampleBatch({"obs": np.arange(16)}), 8, 2, 2)
    buffers = TowerBuffers(1, 2)
    assert buffers.store(0, shares) == 8  # 2 minibatches x 4 rows per device
    second = buffers.minibatches(0, offset=4, device_batch_size=4)
    assert [[_rows(c) for c in chunks] for chunks in second] == [[[8, 9, 10, 11]], [[12, 13, 14, 15]]]
    with pytest.raises(ValueError, match="multiple of the per-device minibatch size 4"):
        buffers.minibatches(0, offset=2, device_batch_size=4)
    with pytest.raises(ValueError, match="offset 8 is outside the 8 samples"):
        buffers.minibatches(0, offset=8, device_batch_size=4)
    with pytest.raises(ValueError, match="changed from 4 to 2 rows"):
        buffers.minibatches(0, offset=0, device_batch_size=2)
    assert isinstance(shares[0].map_batches(lambda b: b), ChunkedSlice)


@pytest.mark.parametrize(
    "value, devices, expected",
    [(False, 2, 0), (None, 4, 0), (0, 1, 0), (True, 4, 4), (True, 2, 4), (8, 4, 8), (3, 1, 3)],
)
def test_exact_chunk_count(value, devices, expected):
    assert exact_chunk_count({"_deterministic_towers": value}, devices) == expected


@pytest.mark.parametrize(
    "value, devices, match",
    [
        (3, 2, "3 chunks, which 2 towers cannot share"),
        (True, 8, "4 chunks, which 8 towers"),
        ("yes", 1, "'yes' is invalid"),
        (-1, 1, "-1 is invalid"),
        (2.0, 1, "2.0 is invalid"),
    ],
)
def test_exact_chunk_count_rejects(value, devices, match):
    with pytest.raises(ValueError, match=r"_deterministic_towers.*" + match):
        exact_chunk_count({"_deterministic_towers": value}, devices)


# ---------------------------------------------------------------- policies


def _train_batch(lstm: bool) -> dict:
    rng = np.random.default_rng(3)
    cols = {
        "obs": rng.uniform(-1, 1, (N, 4)).astype(np.float32),
        "actions": rng.integers(0, 3, N),
        "advantages": rng.normal(size=N).astype(np.float32),
    }
    if lstm:
        cols["seq_lens"] = SEQ_LENS.copy()
        cols["state_in_0"] = rng.normal(size=(len(SEQ_LENS), CELL)).astype(np.float32)
        cols["state_in_1"] = rng.normal(size=(len(SEQ_LENS), CELL)).astype(np.float32)
    return cols


def _config(k: int, exact, lstm: bool, minibatch=MINIBATCH) -> dict:
    cfg = {
        "num_gpus": k,
        "_fake_gpus": True,
        "seed": 7,
        "train_batch_size": N,
        "sgd_minibatch_size": minibatch,
        "lr": 0.01,
        "_deterministic_towers": exact,
    }
    if lstm:
        cfg["model"] = {"use_lstm": True, "lstm_cell_size": CELL, "max_seq_len": 8, "fcnet_hiddens": [16]}
    else:
        cfg["model"] = {"fcnet_hiddens": [16, 16]}
    return cfg


def _buffered_sgd(policy, cols, epochs: int) -> dict:
    rows = policy.load_batch_into_buffer(SampleBatch({k: v.copy() for k, v in cols.items()}))
    step = policy.config["sgd_minibatch_size"] // len(policy.devices)
    for _ in range(epochs):
        for offset in range(0, rows, step):
            policy.learn_on_loaded_batch(offset=offset)
    return _weights(policy)


def _weights(policy) -> dict:
    """``get_weights()`` as a dict (eager TF returns a list, one array per variable)."""
    w = policy.get_weights()
    return w if isinstance(w, dict) else {str(i): a for i, a in enumerate(w)}


def _assert_bitwise(a: dict, b: dict, what: str):
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype
        assert np.array_equal(a[name], b[name]), (
            f"{what}: {name} differs by {np.abs(a[name] - b[name]).max()}"
        )


def _assert_close(a: dict, b: dict, atol: float):
    for name in a:
        np.testing.assert_allclose(a[name], b[name], atol=atol, rtol=0, err_msg=name)


def _reference_steps(policy, cols, epochs: int) -> dict:
    """learn_on_batch on the minibatches the exact mode uses (an independent path)."""
    batch = SampleBatch({k: v.copy() for k, v in cols.items()})
    for _ in range(epochs):
        for start in range(0, N, MINIBATCH):
            policy.learn_on_batch(batch[start : start + MINIBATCH])  # snaps to sequence starts
    return _weights(policy)


# ---- torch


def _torch_policy_class():
    torch = pytest.importorskip("torch")
    from rlpolicy.agents.pg import PGTorchPolicy
    from rlpolicy.utils.torch_utils import sequence_mask

    def masked_mean_loss(policy, model, dist_class, batch):
        # Mean over the valid time steps (padding masked out), as PPO's loss.
        logits, _ = model(batch)
        logp = dist_class(logits, model).logp(batch["actions"])
        if policy.is_recurrent():
            max_t = logp.shape[0] // len(batch["seq_lens"])
            mask = sequence_mask(batch["seq_lens"], max_t).reshape(-1).float()
            loss = -torch.sum(logp * batch["advantages"] * mask) / torch.sum(mask)
        else:
            loss = -torch.mean(logp * batch["advantages"])
        model.tower_stats["policy_loss"] = loss
        return loss

    return PGTorchPolicy.with_updates(name="MaskedPGTorchPolicy", loss_fn=masked_mean_loss)


def _make_torch(cls, cfg, weights=None):
    import gymnasium as gym

    from rlpolicy.utils.debug import update_global_seed_if_necessary

    update_global_seed_if_necessary("torch", cfg["seed"])
    policy = cls(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), cfg)
    if weights is not None:
        _assert_bitwise(policy.get_weights(), weights, "seeded initial weights")
        policy.set_weights(weights)
    return policy


@pytest.mark.parametrize("lstm", [False, True], ids=["fc", "lstm"])
def test_torch_towers_bitwise_equal(lstm):
    cls = _torch_policy_class()
    cols = _train_batch(lstm)
    one = _make_torch(cls, _config(1, True, lstm))
    start = one.get_weights()
    results = {1: _buffered_sgd(one, cols, epochs=3)}
    for k in (2, 4):
        policy = _make_torch(cls, _config(k, True, lstm), start)
        assert len(policy.model_gpu_towers) == k
        results[k] = _buffered_sgd(policy, cols, epochs=3)
    moved = max(np.abs(results[1][n] - start[n]).max() for n in start)
    assert moved > 1e-3  # the steps did train
    _assert_bitwise(results[1], results[2], "2 towers")
    _assert_bitwise(results[1], results[4], "4 towers")
    # The exact step is the mean-loss (valid-step weighted) step on each minibatch.
    reference = _make_torch(cls, _config(1, False, lstm), start)
    _assert_close(results[1], _reference_steps(reference, cols, epochs=3), atol=5e-5)


def test_torch_exact_fetches_and_grad_clip():
    cls = _torch_policy_class()
    cols = _train_batch(False)
    cfg = dict(_config(2, 4, False), grad_clip=0.05)
    policy = _make_torch(cls, cfg)
    start = policy.get_weights()
    policy.load_batch_into_buffer(SampleBatch(dict(cols)))
    fetches = policy.learn_on_loaded_batch(offset=0)
    assert set(fetches) >= {"tower_0", "tower_1"}
    # Clipped once, on the reduced gradient: same as one 1-device step on those rows.
    reference = _make_torch(cls, dict(cfg, num_gpus=0, _deterministic_towers=False), start)
    reference.learn_on_batch(SampleBatch(dict(cols))[0:MINIBATCH])
    _assert_close(policy.get_weights(), reference.get_weights(), atol=1e-5)


def test_torch_default_mode_keeps_its_float_tolerance():
    # Default mode, one step on all rows (the minibatch covers the batch): the towers'
    # mean of means equals the 1-device mean to float32 tolerance.
    cls = _torch_policy_class()
    cols = _train_batch(False)
    one = _make_torch(cls, _config(1, False, False, minibatch=N))
    start = one.get_weights()
    expected = _buffered_sgd(one, cols, epochs=1)
    for k in (2, 4):
        got = _buffered_sgd(_make_torch(cls, _config(k, False, False, minibatch=N), start), cols, epochs=1)
        _assert_close(expected, got, atol=1e-5)


def test_torch_bad_flag_is_rejected_at_construction():
    cls = _torch_policy_class()
    with pytest.raises(ValueError, match=r"_deterministic_towers'\]=3.*4 towers"):
        _make_torch(cls, _config(4, 3, False))
    with pytest.raises(ValueError, match="_deterministic_towers"):
        _make_torch(cls, _config(1, "yes", False))


# ---- graph TF


def _tf_policy_class():
    pytest.importorskip("tensorflow")
    from rlpolicy.agents.pg import PGTFPolicy
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()

    def masked_mean_loss(policy, model, dist_class, batch):
        logits, _ = model(batch)
        logp = dist_class(logits, model).logp(batch["actions"])
        adv = tf.cast(batch["advantages"], tf.float32)
        if policy.is_recurrent():
            max_t = tf.shape(logp)[0] // tf.shape(batch["seq_lens"])[0]
            mask = tf.reshape(tf.sequence_mask(batch["seq_lens"], max_t, dtype=tf.float32), [-1])
            loss = -tf.reduce_sum(logp * adv * mask) / tf.reduce_sum(mask)
        else:
            loss = -tf.reduce_mean(logp * adv)
        policy.policy_loss = loss
        return loss

    return PGTFPolicy.with_updates(name="MaskedPGTFPolicy", loss_fn=masked_mean_loss)


def _make_tf(cls, cfg, weights=None, framework="tf"):
    import gymnasium as gym

    if framework == "tf2":
        cls = cls.as_eager()
    policy = cls(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), dict(cfg, framework=framework))
    if weights is not None:
        policy.set_weights(weights if isinstance(policy.get_weights(), dict) else list(weights.values()))
    return policy


@pytest.mark.parametrize("lstm", [False, True], ids=["fc", "lstm"])
@pytest.mark.parametrize("framework", ["tf", "tf2"])
def test_tf_towers_bitwise_equal(framework, lstm):
    cls = _tf_policy_class()
    cols = _train_batch(lstm)
    one = _make_tf(cls, _config(1, True, lstm), framework=framework)
    start = _weights(one)
    epochs = 1 if lstm else 2
    results = {1: _buffered_sgd(one, cols, epochs=epochs)}
    for k in (2, 4):
        policy = _make_tf(cls, _config(k, True, lstm), start, framework)
        assert len(policy.devices) == k
        results[k] = _buffered_sgd(policy, cols, epochs=epochs)
    moved = max(np.abs(results[1][n] - start[n]).max() for n in start)
    assert moved > 1e-3
    _assert_bitwise(results[1], results[2], "2 towers")
    _assert_bitwise(results[1], results[4], "4 towers")
    if not lstm:  # (graph building is slow: the LSTM reference runs in torch only)
        reference = _make_tf(cls, _config(1, False, lstm), start, framework)
        _assert_close(results[1], _reference_steps(reference, cols, epochs=epochs), atol=5e-5)


def test_a_framework_class_without_the_mode_rejects_the_flag():
    import types

    from rlpolicy.policy._framework_policy import FrameworkPolicy

    holder = types.SimpleNamespace(config={"_deterministic_towers": True})
    with pytest.raises(ValueError, match="_deterministic_towers'] is not supported by"):
        FrameworkPolicy._init_tower_buffers(holder, 2)
    FrameworkPolicy._init_tower_buffers(holder, 2, exact_supported=True)
    assert holder._exact_chunks == 4
