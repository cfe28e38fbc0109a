"""TorchPolicy on CPU and on two fake-GPU towers (device_config fixture)."""

import copy
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_pg_policies import ACT, OBS, PG, SGDPG, log_softmax, pg_batch  # noqa: E402

from rlpolicy.agents.callbacks import DefaultCallbacks  # noqa: E402
from rlpolicy.models.torch.torch_action_dist import TorchCategorical  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402

BASE = {"lr": 0.05, "model": {"fcnet_hiddens": [8]}, "seed": 0}


def make(cls=PG, seed=0, **config):
    torch.manual_seed(seed)
    return cls(OBS, ACT, {**BASE, **config})


def weights_of(policy):
    return {k: v.copy() for k, v in policy.get_weights().items()}


def assert_weights_close(a, b, rtol=1e-5, atol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def n_towers(device_config):
    return 2 if device_config.get("_fake_gpus") else 1


# ------------------------------------------------------------------ construction


def test_towers_and_devices(device_config):
    cfg = {**BASE, **device_config}
    policy = PG(OBS, ACT, cfg)
    n = n_towers(device_config)
    assert "framework" not in cfg and policy.config["framework"] == "torch"  # caller's dict untouched
    assert [d.type for d in policy.devices] == ["cpu"] * n and policy.device.type == "cpu"
    assert len(policy.model_gpu_towers) == n and policy.model_gpu_towers[0] is policy.model
    for tower in policy.model_gpu_towers[1:]:
        assert tower is not policy.model
        for a, b in zip(tower.parameters(), policy.model.parameters()):
            assert a is not b and torch.equal(a, b)
    assert policy.dist_class is TorchCategorical
    assert policy.multi_gpu_param_groups == [set(range(len(list(policy.model.parameters()))))]
    assert not policy.is_recurrent() and policy.num_state_tensors() == 0


def test_target_models_per_tower(device_config):
    class WithTarget(PG):
        def __init__(self, obs_space, action_space, config):
            self.target_model = torch.nn.Linear(2, 2)
            super().__init__(obs_space, action_space, config)

    policy = WithTarget(OBS, ACT, {**BASE, **device_config})
    assert list(policy.target_models) == policy.model_gpu_towers
    assert all(t is policy.target_model for t in policy.target_models.values())


@pytest.mark.parametrize(
    "config, match",
    [
        ({"num_multi_gpu_tower_stacks": 0}, r"config\['num_multi_gpu_tower_stacks'\]=0 is invalid"),
        ({"num_gpus": -2}, r"config\['num_gpus'\]=-2 is invalid"),
    ],
)
def test_config_errors(config, match):
    with pytest.raises(ValueError, match=match):
        make(**config)


def test_no_loss_cannot_learn():
    policy = TorchPolicy(OBS, ACT, dict(BASE))
    with pytest.raises(ValueError, match="TorchPolicy has no loss"):
        policy.learn_on_batch(pg_batch(4))


# ------------------------------------------------------------------ acting


def test_compute_actions_outputs(device_config):
    policy = make(**device_config)
    obs = pg_batch(5)[SampleBatch.OBS]
    actions, state, extra = policy.compute_actions(obs, explore=False)
    logits = extra[SampleBatch.ACTION_DIST_INPUTS]
    assert actions.shape == (5,) and state == [] and logits.shape == (5, 3)
    np.testing.assert_array_equal(actions, logits.argmax(-1))
    # Greedy (explore=False) actions are deterministic: logp 0, prob 1 (RLlib).
    np.testing.assert_array_equal(extra[SampleBatch.ACTION_LOGP], np.zeros(5))
    np.testing.assert_array_equal(extra[SampleBatch.ACTION_PROB], np.ones(5))
    assert policy.global_timestep == 5
    actions, _, extra = policy.compute_actions(obs[:2], explore=True)
    expected_logp = log_softmax(extra[SampleBatch.ACTION_DIST_INPUTS])[np.arange(2), actions]
    np.testing.assert_allclose(extra[SampleBatch.ACTION_LOGP], expected_logp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(extra[SampleBatch.ACTION_PROB], np.exp(expected_logp), rtol=1e-5, atol=1e-6)
    assert policy.global_timestep == 7
    assert not policy.model.training


def test_compute_single_action_and_input_dict(device_config):
    policy = make(**device_config)
    obs = pg_batch(3)[SampleBatch.OBS]
    batch_actions, _, batch_extra = policy.compute_actions(obs, explore=False)
    a, state, extra = policy.compute_single_action(obs[1], explore=False)
    assert int(a) == batch_actions[1] and state == []
    np.testing.assert_allclose(
        extra[SampleBatch.ACTION_DIST_INPUTS],
        batch_extra[SampleBatch.ACTION_DIST_INPUTS][1],
        rtol=1e-6,
        atol=1e-6,
    )
    acts, _, _ = policy.compute_actions_from_input_dict({SampleBatch.OBS: obs}, explore=False)
    np.testing.assert_array_equal(acts, batch_actions)


def test_compute_log_likelihoods(device_config):
    policy = make(**device_config)
    obs = pg_batch(6)[SampleBatch.OBS]
    _, _, extra = policy.compute_actions(obs, explore=False)
    actions = np.array([0, 1, 2, 2, 1, 0])
    logp = policy.compute_log_likelihoods(actions, obs)
    expected = log_softmax(extra[SampleBatch.ACTION_DIST_INPUTS])[np.arange(6), actions]
    np.testing.assert_allclose(logp.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("normalized", [True, False])
def test_compute_log_likelihoods_box_actions(normalized):
    box = gym.spaces.Box(np.array([0.0, -2.0], np.float32), np.array([4.0, 2.0], np.float32))
    torch.manual_seed(0)
    policy = PG(OBS, box, dict(BASE))
    obs = pg_batch(3)[SampleBatch.OBS]
    _, _, extra = policy.compute_actions(obs, explore=False)
    mean, log_std = np.split(extra[SampleBatch.ACTION_DIST_INPUTS], 2, axis=-1)
    env_actions = np.array([[1.0, 0.5], [3.0, -1.0], [2.0, 0.0]], np.float32)
    # normalize_actions=True (default): env-space actions map onto [-1, 1].
    scaled = (env_actions - box.low) / (box.high - box.low) * 2.0 - 1.0
    x = env_actions if normalized else scaled
    expected = (-0.5 * ((x - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    logp = policy.compute_log_likelihoods(env_actions, obs, actions_normalized=normalized)
    np.testing.assert_allclose(logp.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_export_checkpoint_round_trip(tmp_path, device_config):
    policy = make(**device_config)
    policy.learn_on_batch(pg_batch(8))
    policy.export_checkpoint(str(tmp_path))
    restored = PG.from_checkpoint(str(tmp_path), trusted="imported")
    assert_weights_close(policy.get_weights(), restored.get_weights(), rtol=0, atol=0)
    for p in (policy, restored):
        p.learn_on_batch(pg_batch(8, seed=1))
    assert_weights_close(policy.get_weights(), restored.get_weights(), rtol=1e-6, atol=1e-7)


def test_action_sampler_fn_path():
    calls = []

    def sampler(policy, model, input_dict, state_batches, explore, timestep):
        calls.append((explore, timestep))
        n = len(input_dict[SampleBatch.OBS])
        return torch.full((n,), 2), torch.zeros(n), []

    torch.manual_seed(0)
    policy = PG(OBS, ACT, dict(BASE), action_sampler_fn=sampler)
    actions, _, extra = policy.compute_actions(np.zeros((4, 4), np.float32), explore=True)
    np.testing.assert_array_equal(actions, [2, 2, 2, 2])
    np.testing.assert_array_equal(extra[SampleBatch.ACTION_PROB], np.ones(4))  # exp(logp=0)
    assert SampleBatch.ACTION_DIST_INPUTS not in extra and calls == [(True, 0)]
    with pytest.raises(ValueError, match="Cannot compute log-prob/likelihood w/o an"):
        policy.compute_log_likelihoods(np.zeros(4), np.zeros((4, 4), np.float32))


def test_action_distribution_fn_path_and_extra_action_out():
    seen = {}

    def dist_fn(policy, model, input_dict, *, state_batches, seq_lens, explore, timestep=None, is_training):
        seen.update(explore=explore, is_training=is_training)
        n = len(input_dict[SampleBatch.OBS])
        return torch.tensor([[0.0, 5.0, 0.0]]).repeat(n, 1), TorchCategorical, []

    class Extra(PG):
        def extra_action_out(self, input_dict, state_batches, model, action_dist):
            return {"sampled": input_dict[SampleBatch.ACTIONS] * 10}

    torch.manual_seed(0)
    policy = Extra(OBS, ACT, dict(BASE), action_distribution_fn=dist_fn)
    actions, _, extra = policy.compute_actions(np.zeros((2, 4), np.float32), explore=False)
    np.testing.assert_array_equal(actions, [1, 1])
    np.testing.assert_array_equal(extra["sampled"], [10, 10])
    assert seen == {"explore": False, "is_training": False}
    logp = policy.compute_log_likelihoods(np.array([1, 0]), np.zeros((2, 4), np.float32))
    np.testing.assert_allclose(
        logp.numpy(), log_softmax(np.array([[0.0, 5.0, 0.0]]))[0, [1, 0]], rtol=1e-5, atol=1e-6
    )


def test_bad_dist_class_from_distribution_fn():
    def dist_fn(policy, model, input_dict, **kw):
        return torch.zeros(1, 3), dict, []

    policy = PG(OBS, ACT, dict(BASE), action_distribution_fn=dist_fn)
    with pytest.raises(ValueError, match=r"`dist_class` \(dict\) not a TorchDistributionWrapper"):
        policy.compute_actions(np.zeros((1, 4), np.float32))


# ------------------------------------------------------------------ learning


def _reference_pg_grads(policy, batch):
    """Gradients of the PG loss on an independent copy of the model (plain torch)."""
    model = copy.deepcopy(policy.model)
    logits = model({SampleBatch.OBS: torch.as_tensor(batch[SampleBatch.OBS])})[0]
    logp = torch.log_softmax(logits, -1)[
        torch.arange(len(batch)), torch.as_tensor(batch[SampleBatch.ACTIONS])
    ]
    loss = -(logp * torch.as_tensor(batch[SampleBatch.REWARDS])).mean()
    params = list(model.parameters())
    # The value branch is not part of the loss: its gradient is zero.
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [np.zeros(p.shape, np.float32) if g is None else g.numpy() for p, g in zip(params, grads)]


def test_learn_on_batch_is_one_sgd_step(device_config):
    class Recorder(DefaultCallbacks):
        def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
            result["rows"] = len(train_batch)

    policy = make(SGDPG, callbacks=Recorder, **device_config)
    batch = pg_batch(16)
    before = [p.detach().numpy().copy() for p in policy.model.parameters()]
    grads = _reference_pg_grads(policy, batch)
    fetches = policy.learn_on_batch(batch)
    for p, w, g in zip(policy.model.parameters(), before, grads):
        np.testing.assert_allclose(p.detach().numpy(), w - 0.05 * g, rtol=1e-5, atol=1e-6)
    assert fetches["custom_metrics"] == {"rows": 16}
    assert fetches["learner_stats"] == {"allreduce_latency": 0.0} and fetches["model"] == {}
    assert policy.model.training


def test_default_optimizer_is_adam_and_its_first_step_is_lr_times_sign(device_config):
    # PG keeps TorchPolicy's default optimizer (SGDPG overrides it). Adam's first step
    # from zero moments is lr * g / (|g| + eps) (bias-corrected m = g, v = g**2).
    policy = make(PG, **device_config)
    (opt,) = policy._optimizers
    assert type(opt) is torch.optim.Adam and opt.param_groups[0]["lr"] == 0.05
    batch = pg_batch(16)
    before = [p.detach().numpy().copy() for p in policy.model.parameters()]
    grads = _reference_pg_grads(policy, batch)
    policy.learn_on_batch(batch)
    for p, w, g in zip(policy.model.parameters(), before, grads):
        np.testing.assert_allclose(
            p.detach().numpy(), w - 0.05 * g / (np.abs(g) + 1e-8), rtol=1e-5, atol=1e-6
        )


FUSED_ON_CPU = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 4)


def _numpy_adam(w, grads, lr, eps=1e-8, b1=0.9, b2=0.999):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return w


def test_default_adam_runs_fused_where_torch_can_and_follows_the_adam_formula():
    from rlpolicy.policy._torch.optimizers import default_adam

    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(3, 4)).astype(np.float32)
    grads = [rng.normal(size=(3, 4)).astype(np.float32) for _ in range(5)]
    param = torch.nn.Parameter(torch.tensor(w0))
    opt = default_adam([param], lr=0.01, eps=1e-6)
    assert type(opt) is torch.optim.Adam
    assert bool(opt.param_groups[0]["fused"]) is FUSED_ON_CPU
    for g in grads:
        param.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_allclose(
        param.detach().numpy(), _numpy_adam(w0, grads, 0.01, eps=1e-6), rtol=1e-5, atol=1e-6
    )
    # A device without a fused kernel gets the per-tensor Adam.
    meta = default_adam([torch.nn.Parameter(torch.empty(2, device="meta"))], lr=0.1)
    assert type(meta) is torch.optim.Adam and not meta.param_groups[0]["fused"]


def test_a_state_without_implementation_flags_keeps_the_fused_optimizer(device_config):
    # States written by RLlib / older torch carry no "fused" flag; loading one
    # restores the moments but keeps this policy's (fused) update kernel.
    original = make(**device_config)
    for i in range(2):
        original.learn_on_batch(pg_batch(8, seed=i))
    state = original.get_state()
    for opt_state in state["_optimizer_variables"]:
        for group in opt_state["param_groups"]:
            for key in ("fused", "foreach", "capturable", "differentiable"):
                group.pop(key, None)
    restored = make(seed=5, **device_config)
    restored.set_state(state)
    assert bool(restored._optimizers[0].param_groups[0]["fused"]) is FUSED_ON_CPU
    for p in (original, restored):
        p.learn_on_batch(pg_batch(8, seed=9))
    assert_weights_close(original.get_weights(), restored.get_weights(), rtol=1e-6, atol=1e-7)


def test_compute_then_apply_gradients(device_config):
    policy = make(SGDPG, **device_config)
    batch = pg_batch(8)
    expected = _reference_pg_grads(policy, batch)
    grads, fetches = policy.compute_gradients(batch)
    assert "learner_stats" in fetches
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(np.zeros_like(e) if g is None else g.numpy(), e, rtol=1e-5, atol=1e-7)
    other = make(SGDPG, seed=3, **device_config)
    other.set_weights(policy.get_weights())
    other.apply_gradients([None if g is None else g.numpy() for g in grads])  # numpy grads
    policy.apply_gradients(grads)
    assert_weights_close(other.get_weights(), policy.get_weights())
    with pytest.raises(ValueError, match="apply_gradients got 1 gradients for the model's"):
        policy.apply_gradients([grads[0]])


def test_grad_clip_limits_the_step():
    policy = make(SGDPG, grad_clip=1e-3)
    batch = pg_batch(16)
    norm = np.sqrt(sum((g**2).sum() for g in _reference_pg_grads(policy, batch)))
    before = np.concatenate([p.detach().numpy().ravel() for p in policy.model.parameters()])
    fetches = policy.learn_on_batch(batch)
    after = np.concatenate([p.detach().numpy().ravel() for p in policy.model.parameters()])
    assert float(fetches["learner_stats"]["grad_gnorm"]) == pytest.approx(norm, rel=1e-4, abs=1e-6)
    assert np.linalg.norm(after - before) == pytest.approx(0.05 * 1e-3, rel=1e-3, abs=1e-9)


def test_grad_clip_clips_the_averaged_tower_gradient():
    # The towers' raw gradients are averaged first; extra_grad_process (here:
    # clipping by global norm) then runs once on the average, so the 2-tower
    # step equals the single-device step on the whole batch.
    clip = 1e-3
    policy = make(SGDPG, grad_clip=clip, sgd_minibatch_size=16, num_gpus=2, _fake_gpus=True)
    batch = pg_batch(16)
    halves = [_reference_pg_grads(policy, half) for half in (batch[:8], batch[8:])]
    mean = [(a + b) / 2 for a, b in zip(*halves)]
    norm = np.sqrt(sum((g**2).sum() for g in mean))
    expected_grad = [g * min(1.0, clip / (norm + 1e-6)) for g in mean]
    before = [p.detach().numpy().copy() for p in policy.model.parameters()]
    policy.load_batch_into_buffer(batch)
    policy.learn_on_loaded_batch(0)
    for p, w, g in zip(policy.model.parameters(), before, expected_grad):
        np.testing.assert_allclose(p.detach().numpy(), w - 0.05 * g, rtol=1e-4, atol=1e-8)


class TwoOpt(PG):
    """Two optimizers: one for the hidden layer, one for the rest."""

    def optimizer(self):
        params = list(self.model.parameters())
        return [torch.optim.SGD(params[:2], lr=0.1), torch.optim.SGD(params[2:], lr=0.1)]

    def loss(self, model, dist_class, train_batch):
        pg = super().loss(model, dist_class, train_batch)
        return [pg, 2.0 * pg]


class SometimesVF(PG):
    """Adds a value loss only while ``use_vf`` is set."""

    use_vf = True

    def loss(self, model, dist_class, train_batch):
        pg = super().loss(model, dist_class, train_batch)
        return pg + model.value_function().pow(2).mean() if self.use_vf else pg


def test_gradient_of_a_parameter_the_loss_no_longer_reaches_is_zero():
    policy = make(SometimesVF, model={"fcnet_hiddens": [8], "vf_share_layers": False})
    names = [n for n, _ in policy.model.named_parameters()]
    vf = [i for i, n in enumerate(names) if n.startswith("_value_branch")]
    grads, _ = policy.compute_gradients(pg_batch(8))
    assert all(grads[i] is not None and float(grads[i].abs().sum()) > 0 for i in vf)
    policy.use_vf = False
    grads, _ = policy.compute_gradients(pg_batch(8, seed=1))
    for i in vf:  # zeros (as after zeroing in place), not None
        assert grads[i] is not None
        np.testing.assert_array_equal(grads[i].numpy(), np.zeros(tuple(grads[i].shape)))
    assert float(sum(g.abs().sum() for i, g in enumerate(grads) if i not in vf)) > 0


def test_multiple_optimizers(device_config):
    policy = make(TwoOpt, **device_config)
    n = len(list(policy.model.parameters()))
    assert policy.multi_gpu_param_groups == [{0, 1}, set(range(2, n))]
    batch = pg_batch(8)
    ref = _reference_pg_grads(policy, batch)
    before = [p.detach().numpy().copy() for p in policy.model.parameters()]
    policy.learn_on_batch(batch)
    after = [p.detach().numpy() for p in policy.model.parameters()]
    # Params 2.. get the 2x loss only (zeroed before its backward); params 0,1
    # keep their grad from loss 1 plus the accumulated one from loss 2 (RLlib).
    for i in range(n):
        factor = 3.0 if i < 2 else 2.0
        np.testing.assert_allclose(after[i], before[i] - 0.1 * factor * ref[i], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ buffers and towers


def test_load_batch_returns_per_device_count(device_config):
    policy = make(**device_config)
    n = n_towers(device_config)
    assert policy.get_num_samples_loaded_into_buffer() == 0
    assert policy.load_batch_into_buffer(pg_batch(16)) == 16 // n
    assert policy.get_num_samples_loaded_into_buffer(0) == 16 // n
    # 17 rows: with two towers one row is dropped so both get 8.
    assert policy.load_batch_into_buffer(pg_batch(17)) == (17 if n == 1 else 8)
    assert [len(b) for b in policy._tower_buffers.loaded(0)] == ([17] if n == 1 else [8, 8])


def test_learn_on_loaded_batch_errors(device_config):
    policy = make(**device_config)
    with pytest.raises(ValueError, match=r"Must call Policy.load_batch_into_buffer\(\) before"):
        policy.learn_on_loaded_batch()
    with pytest.raises(IndexError, match="buffer_index=1 is out of range; this policy has 1"):
        policy.load_batch_into_buffer(pg_batch(4), buffer_index=1)
    with pytest.raises(IndexError, match="buffer_index=-1 is out of range"):
        policy.learn_on_loaded_batch(buffer_index=-1)


@pytest.mark.parametrize("cls", [SGDPG, PG], ids=["sgd", "adam"])
def test_tower_step_equals_single_device_step(cls):
    batch = pg_batch(16, seed=4)
    single = make(cls, sgd_minibatch_size=16)
    towers = make(cls, seed=9, sgd_minibatch_size=16, num_gpus=2, _fake_gpus=True)
    towers.set_weights(single.get_weights())
    for _ in range(2):
        single.load_batch_into_buffer(batch.copy())
        towers.load_batch_into_buffer(batch.copy())
        single.learn_on_loaded_batch(0)
        fetches = towers.learn_on_loaded_batch(0)
        assert_weights_close(single.get_weights(), towers.get_weights())
    assert set(fetches) == {"tower_0", "tower_1", "learner_stats"}
    # Tower 1 saw the second half of the batch, tower 0 the first.
    seen = [t.tower_stats["obs_seen"].numpy() for t in towers.model_gpu_towers]
    np.testing.assert_array_equal(seen[0], batch[SampleBatch.OBS][:8])
    np.testing.assert_array_equal(seen[1], batch[SampleBatch.OBS][8:])


def test_offsets_walk_the_buffer(device_config):
    n = n_towers(device_config)
    policy = make(sgd_minibatch_size=4, **device_config)
    batch = pg_batch(16)
    obs = batch[SampleBatch.OBS]
    per_device = policy.load_batch_into_buffer(batch)
    size = 4 // n
    for offset in range(0, per_device, size):
        policy.learn_on_loaded_batch(offset=offset)
        seen = [t.tower_stats["obs_seen"].numpy() for t in policy.model_gpu_towers]
        for d in range(n):
            start = d * per_device + offset  # device d holds rows [d*per_device, ...)
            np.testing.assert_array_equal(seen[d], obs[start : start + size])


def test_get_tower_stats(device_config):
    policy = make(**device_config)
    with pytest.raises(AssertionError, match="Stats `pg_loss` not found in any of the towers"):
        policy.get_tower_stats("pg_loss")
    policy.load_batch_into_buffer(pg_batch(8))
    policy.learn_on_loaded_batch()
    stats = policy.get_tower_stats("pg_loss")
    assert len(stats) == n_towers(device_config)
    assert all(s.device == policy.device and s.ndim == 0 for s in stats)


def test_tower_stack_buffers_are_independent(device_config):
    b0, b1 = pg_batch(8, seed=1), pg_batch(8, seed=2)
    policy = make(SGDPG, num_multi_gpu_tower_stacks=2, sgd_minibatch_size=8, **device_config)
    reference = make(SGDPG, seed=5, sgd_minibatch_size=8, **device_config)
    reference.set_weights(policy.get_weights())
    policy.load_batch_into_buffer(b0.copy(), buffer_index=0)
    n1 = policy.load_batch_into_buffer(b1.copy(), buffer_index=1)
    assert policy.get_num_samples_loaded_into_buffer(1) == n1
    policy.learn_on_loaded_batch(buffer_index=1)
    reference.learn_on_batch(b1.copy())
    assert_weights_close(policy.get_weights(), reference.get_weights())
    # Buffer 0 still holds b0.
    seen_before = policy._tower_buffers.loaded(0)[0][SampleBatch.OBS]
    np.testing.assert_array_equal(np.asarray(seen_before)[:4], b0[SampleBatch.OBS][:4])


# ------------------------------------------------------------------ state


def test_state_round_trip_restores_adam(device_config):
    original = make(**device_config)
    for i in range(3):
        original.learn_on_batch(pg_batch(8, seed=i))
    original.compute_actions(np.zeros((2, 4), np.float32))
    state = original.get_state()
    assert len(state["_optimizer_variables"]) == 1 and "_exploration_state" in state
    snapshot = copy.deepcopy(state)

    restored = make(seed=7, **device_config)
    restored.set_state(state)
    weights_only = make(seed=7, **device_config)
    weights_only.set_weights(state["weights"])
    assert restored.global_timestep == original.global_timestep == 2
    for p in (original, restored, weights_only):
        p.learn_on_batch(pg_batch(8, seed=10))
    assert_weights_close(original.get_weights(), restored.get_weights(), rtol=1e-6, atol=1e-7)
    # Adam's moments matter: restoring only the weights gives different weights.
    diff = max(
        np.abs(original.get_weights()[k] - weights_only.get_weights()[k]).max() for k in state["weights"]
    )
    assert diff > 1e-4
    # get_state() is a snapshot: later learning did not change it.
    for k in state["weights"]:
        np.testing.assert_array_equal(state["weights"][k], snapshot["weights"][k])


def test_set_state_copies_the_optimizer_state(device_config):
    # Two policies restored from one state must not share Adam's moment
    # buffers with each other or with the state dict (Adam updates in place).
    original = make(**device_config)
    original.learn_on_batch(pg_batch(8))
    state = original.get_state()
    snapshot = copy.deepcopy(state)
    a, b = make(seed=3, **device_config), make(seed=4, **device_config)
    a.set_state(state)
    b.set_state(state)
    a.learn_on_batch(pg_batch(8, seed=1))
    for o, s in zip(state["_optimizer_variables"], snapshot["_optimizer_variables"]):
        for idx, per_param in s["state"].items():
            for name, value in per_param.items():
                np.testing.assert_array_equal(o["state"][idx][name], value)
    b_state = b.get_state()["_optimizer_variables"][0]["state"]
    for idx, per_param in snapshot["_optimizer_variables"][0]["state"].items():
        np.testing.assert_array_equal(b_state[idx]["exp_avg"], per_param["exp_avg"])


def test_set_weights_checks_names_and_shapes():
    policy = make()
    weights = policy.get_weights()
    name = next(iter(weights))
    with pytest.raises(ValueError, match=r"unknown keys \['extra.weight'\]"):
        policy.set_weights({**weights, "extra.weight": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match=rf"missing keys \['{name}'\]"):
        policy.set_weights({k: v for k, v in weights.items() if k != name})
    with pytest.raises(ValueError, match=rf"'{name}' has shape \(1, 1\)"):
        policy.set_weights({**weights, name: np.zeros((1, 1), np.float32)})
    # float64 arrays load too (as float32 values).
    policy.set_weights({k: v.astype(np.float64) + 1.0 for k, v in weights.items()})
    for k, v in policy.get_weights().items():
        assert v.dtype == np.float32
        np.testing.assert_allclose(v, weights[k] + 1.0, rtol=1e-6, atol=1e-6)


def test_set_state_optimizer_count_mismatch():
    state = make(TwoOpt).get_state()
    with pytest.raises(ValueError, match="holds 2 optimizer states but this policy has 1"):
        make().set_state(state)


# ------------------------------------------------------------------ threads


def test_concurrent_acting_and_learning(device_config):
    policy = make(SGDPG, **device_config)
    replay = make(SGDPG, seed=3, **device_config)
    replay.set_weights(policy.get_weights())
    batch = pg_batch(16)
    obs = pg_batch(4, seed=9)[SampleBatch.OBS]
    errors, counts = [], {"act": 0, "learn": 0}
    stop = time.monotonic() + 1.0

    def act():
        try:
            while time.monotonic() < stop:
                a, _, extra = policy.compute_actions(obs, explore=False)
                logits = extra[SampleBatch.ACTION_DIST_INPUTS]
                np.testing.assert_array_equal(a, logits.argmax(-1))
                counts["act"] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def learn():
        try:
            while time.monotonic() < stop:
                policy.learn_on_batch(batch.copy())
                counts["learn"] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=act), threading.Thread(target=learn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert counts["act"] > 0 and counts["learn"] > 0
    assert policy.global_timestep == 4 * counts["act"]  # no lost updates
    for _ in range(counts["learn"]):  # sequential replay of the learning steps
        replay.learn_on_batch(batch.copy())
    assert_weights_close(policy.get_weights(), replay.get_weights(), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ recurrent


def _lstm_policy(device_config, seed=0):
    torch.manual_seed(seed)
    model = {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 4, "max_seq_len": 4}
    return PG(OBS, ACT, {**BASE, "model": model, **device_config}, max_seq_len=4)


def test_lstm_state_round_trip(device_config):
    policy = _lstm_policy(device_config)
    assert policy.is_recurrent() and policy.num_state_tensors() == 2
    init = policy.get_initial_state()
    assert [s.shape for s in init] == [(4,), (4,)] and all((s == 0).all() for s in init)
    obs = pg_batch(3)[SampleBatch.OBS]
    state = init
    singles = []
    for t in range(3):
        a, state, extra = policy.compute_single_action(obs[t], state, explore=False)
        assert [s.shape for s in state] == [(4,), (4,)]
        singles.append(extra[SampleBatch.ACTION_DIST_INPUTS])
    # Same trajectory, batched one step at a time through compute_actions.
    bstate = [s[None] for s in init]
    for t in range(3):
        _, bstate, extra = policy.compute_actions(obs[t : t + 1], bstate, explore=False)
        np.testing.assert_allclose(extra[SampleBatch.ACTION_DIST_INPUTS][0], singles[t], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bstate[0][0], state[0], rtol=1e-5, atol=1e-6)
    # The state carries memory: a fresh state gives different logits at t=2.
    _, _, fresh = policy.compute_single_action(obs[2], init, explore=False)
    assert not np.allclose(fresh[SampleBatch.ACTION_DIST_INPUTS], singles[2], atol=1e-6)


def _lstm_batch(seq_lens=(3, 2, 4, 3)):
    n = sum(seq_lens)
    b = pg_batch(n, seed=3)
    b[SampleBatch.EPS_ID] = np.repeat(np.arange(len(seq_lens)), seq_lens)
    b[SampleBatch.SEQ_LENS] = np.array(seq_lens, np.int32)
    b["state_in_0"] = np.zeros((len(seq_lens), 4), np.float32)
    b["state_in_1"] = np.zeros((len(seq_lens), 4), np.float32)
    return b


def test_lstm_learn_on_batch_with_seq_lens(device_config):
    policy = _lstm_policy(device_config)
    before = weights_of(policy)
    fetches = policy.learn_on_batch(_lstm_batch())
    assert "learner_stats" in fetches
    after = policy.get_weights()
    assert all(np.isfinite(v).all() for v in after.values())
    assert any(not np.allclose(before[k], after[k], atol=1e-6) for k in before)


def test_lstm_buffered_sgd(device_config):
    policy = _lstm_policy(device_config)
    n = policy.load_batch_into_buffer(_lstm_batch())
    assert n > 0 and policy.get_num_samples_loaded_into_buffer() == n
    before = weights_of(policy)
    policy.learn_on_loaded_batch(0)
    after = policy.get_weights()
    assert all(np.isfinite(v).all() for v in after.values())
    assert any(not np.allclose(before[k], after[k], atol=1e-6) for k in before)


# ------------------------------------------------------------------ grad mode while acting
@pytest.mark.parametrize("grad_on", [True, False])
def test_compute_actions_runs_without_grad_and_restores_the_callers_mode(grad_on):
    policy = make()
    seen = []
    forward = policy.model.forward

    def spy(input_dict, state, seq_lens):
        seen.append(torch.is_grad_enabled())
        return forward(input_dict, state, seq_lens)

    policy.model.forward = spy
    obs = np.zeros((2, 4), np.float32)
    with torch.set_grad_enabled(grad_on):
        policy.compute_actions(obs)
        assert torch.is_grad_enabled() is grad_on
        policy.model.forward = lambda *a: (_ for _ in ()).throw(RuntimeError("model failed"))
        with pytest.raises(RuntimeError, match="model failed"):
            policy.compute_actions(obs)
        assert torch.is_grad_enabled() is grad_on  # restored after an error too
    assert seen == [False]


def test_learn_then_act_switches_the_model_between_train_and_eval_modes():
    policy = PG(OBS, ACT, {"model": {"fcnet_hiddens": [8, 8]}})
    modules = list(policy.model.modules())
    assert len(modules) > 3
    policy.learn_on_batch(pg_batch(8))
    assert all(m.training for m in modules)
    policy.compute_actions(np.zeros((2,) + OBS.shape, np.float32))
    assert not any(m.training for m in modules)
