"""Spec conformance of ``TorchPolicy`` (RLlib 1.11's torch_policy listing).

Audits what the other TorchPolicy test files leave open: the exact call
arguments of the three action paths, ``explore``/``timestep`` defaults, the
learn_on_batch call order and result layout, the offset/minibatch rules of
``learn_on_loaded_batch`` on 1 CPU and on 2 fake GPUs, the recurrent buffer
split, state/weights round trips and bad input. Every expectation is worked
out by hand or with numpy, never with the code under test.
"""

import copy

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_pg_policies import ACT, OBS, PG, SGDPG, log_softmax, pg_batch  # noqa: E402

from rlpolicy.agents.callbacks import DefaultCallbacks  # noqa: E402
from rlpolicy.models.torch.torch_action_dist import TorchCategorical  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.torch_policy import _directStepOptimizerSingleton  # noqa: E402
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY  # noqa: E402

BASE = {"lr": 0.05, "model": {"fcnet_hiddens": [8]}, "seed": 0}
FAKE2 = {"num_gpus": 2, "_fake_gpus": True}


def make(cls=PG, seed=0, **config):
    torch.manual_seed(seed)
    return cls(OBS, ACT, {**BASE, **config})


def params_np(policy):
    return [p.detach().cpu().numpy().copy() for p in policy.model.parameters()]


def reference_grads(model, batch):
    """PG-loss gradients on an independent deep copy of ``model`` (plain torch)."""
    model = copy.deepcopy(model)
    logits = model({SampleBatch.OBS: torch.as_tensor(np.asarray(batch[SampleBatch.OBS]))})[0]
    logp = torch.log_softmax(logits, -1)[
        torch.arange(len(logits)), torch.as_tensor(np.asarray(batch[SampleBatch.ACTIONS]))
    ]
    loss = -(logp * torch.as_tensor(np.asarray(batch[SampleBatch.REWARDS]))).mean()
    params = list(model.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [np.zeros(p.shape, np.float32) if g is None else g.numpy() for p, g in zip(params, grads)]


class Spy:
    """Wraps a bound method, recording the keyword arguments of each call."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, *args, **kwargs):
        self.calls.append(kwargs)
        return self.fn(*args, **kwargs)


# ------------------------------------------------------------------ acting


@pytest.mark.parametrize("config_explore", [True, False])
def test_explore_none_means_config_explore(config_explore):
    policy = make(explore=config_explore)
    before = Spy(policy.exploration.before_compute_actions)
    get = Spy(policy.exploration.get_exploration_action)
    policy.exploration.before_compute_actions = before
    policy.exploration.get_exploration_action = get
    obs = pg_batch(64)[SampleBatch.OBS]
    actions, _, extra = policy.compute_actions(obs)  # explore=None
    assert before.calls[-1]["explore"] is config_explore
    assert get.calls[-1]["explore"] is config_explore
    greedy = extra[SampleBatch.ACTION_DIST_INPUTS].argmax(-1)
    if config_explore:
        # Sampling from a near-uniform 3-way softmax: not all 64 are greedy.
        assert (actions != greedy).any()
    else:
        np.testing.assert_array_equal(actions, greedy)
        np.testing.assert_array_equal(extra[SampleBatch.ACTION_LOGP], np.zeros(64))
    # An explicit flag overrides the config.
    policy.compute_actions(obs, explore=not config_explore)
    assert get.calls[-1]["explore"] is (not config_explore)


def test_timestep_defaults_to_global_timestep_and_batch_size_increments_it():
    policy = make()
    get = Spy(policy.exploration.get_exploration_action)
    before = Spy(policy.exploration.before_compute_actions)
    policy.exploration.get_exploration_action = get
    policy.exploration.before_compute_actions = before
    policy.compute_actions(np.zeros((3, 4), np.float32))
    policy.compute_actions(np.zeros((5, 4), np.float32))
    assert [c["timestep"] for c in get.calls] == [0, 3]
    assert [c["timestep"] for c in before.calls] == [0, 3]
    assert policy.global_timestep == 8
    # An explicit timestep is passed through; the counter still grows by B.
    policy.compute_actions(np.zeros((2, 4), np.float32), timestep=1234)
    assert get.calls[-1]["timestep"] == 1234 and before.calls[-1]["timestep"] == 1234
    assert policy.global_timestep == 10
    # compute_actions_from_input_dict and compute_single_action count as well.
    policy.compute_actions_from_input_dict({SampleBatch.OBS: np.zeros((4, 4), np.float32)})
    policy.compute_single_action(np.zeros(4, np.float32))
    assert get.calls[-2]["timestep"] == 10 and get.calls[-1]["timestep"] == 14
    assert policy.global_timestep == 15


EPS = {"type": "EpsilonGreedy", "initial_epsilon": 1.0, "final_epsilon": 0.0, "epsilon_timesteps": 100}


def test_epsilon_greedy_follows_the_given_timestep():
    policy = make(exploration_config=dict(EPS))
    obs = pg_batch(600, seed=1)[SampleBatch.OBS]
    greedy = policy.compute_actions(obs, explore=False)[2][SampleBatch.ACTION_DIST_INPUTS].argmax(-1)
    # timestep past epsilon_timesteps: epsilon 0 -> all greedy.
    late, _, _ = policy.compute_actions(obs, explore=True, timestep=10_000)
    np.testing.assert_array_equal(late, greedy)
    # timestep 0: epsilon 1 -> uniform random actions, ~1/3 agree with greedy.
    early, _, _ = policy.compute_actions(obs, explore=True, timestep=0)
    assert 0.2 < (early == greedy).mean() < 0.47
    # timestep 50: epsilon 0.5 -> P(greedy) = 0.5 + 0.5/3 = 2/3.
    mid, _, _ = policy.compute_actions(obs, explore=True, timestep=50)
    assert 0.56 < (mid == greedy).mean() < 0.77


def test_get_state_keys_and_exploration_state_round_trip():
    policy = make(exploration_config=dict(EPS))
    policy.compute_actions(np.zeros((3, 4), np.float32), explore=True, timestep=40)
    state = policy.get_state()
    assert set(state) == {"weights", "global_timestep", "_optimizer_variables", "_exploration_state"}
    assert state["global_timestep"] == 3
    assert state["_exploration_state"]["last_timestep"] == 40
    assert state["_exploration_state"]["cur_epsilon"] == pytest.approx(0.6, abs=1e-6)
    assert policy.get_exploration_state() == state["_exploration_state"]
    assert isinstance(state["weights"], dict)
    assert all(isinstance(v, np.ndarray) for v in state["weights"].values())
    fresh = make(seed=5, exploration_config=dict(EPS))
    fresh.set_state(state)
    assert fresh.global_timestep == 3
    assert fresh.get_exploration_state()["last_timestep"] == 40
    assert fresh.get_exploration_state()["cur_epsilon"] == pytest.approx(0.6, abs=1e-6)
    for k, v in state["weights"].items():
        np.testing.assert_array_equal(fresh.get_weights()[k], v)


def test_optimizer_state_is_numpy_restores_hyperparams_and_is_not_aliased():
    policy = make(lr=0.05)
    policy.learn_on_batch(pg_batch(8))
    state = policy.get_state()
    (opt_state,) = state["_optimizer_variables"]
    assert set(opt_state) == {"state", "param_groups"}
    leaves = [v for s in opt_state["state"].values() for v in s.values()]
    assert leaves and all(not torch.is_tensor(v) for v in leaves)
    assert all(isinstance(s["exp_avg"], np.ndarray) for s in opt_state["state"].values())
    snapshot = copy.deepcopy(opt_state)
    other = make(seed=2, lr=0.5)
    other.set_state(state)
    assert other._optimizers[0].param_groups[0]["lr"] == 0.05  # hyper-params come back too
    other.learn_on_batch(pg_batch(8, seed=1))
    policy.learn_on_batch(pg_batch(8, seed=1))
    for i, s in opt_state["state"].items():  # the state dict was not updated in place
        np.testing.assert_array_equal(s["exp_avg"], snapshot["state"][i]["exp_avg"])
    for k, v in policy.get_weights().items():
        np.testing.assert_allclose(other.get_weights()[k], v, rtol=1e-6, atol=1e-7)


def test_on_global_var_update_sets_global_timestep():
    policy = make()
    policy.on_global_var_update({"timestep": 777})
    assert policy.global_timestep == 777
    get = Spy(policy.exploration.get_exploration_action)
    policy.exploration.get_exploration_action = get
    policy.compute_actions(np.zeros((2, 4), np.float32))
    assert get.calls[-1]["timestep"] == 777 and policy.global_timestep == 779


def test_prev_action_reward_and_is_training_reach_the_forward_pass():
    seen = {}

    def dist_fn(policy, model, input_dict, *, state_batches, seq_lens, explore, timestep, is_training):
        seen["keys"] = set(input_dict.keys())
        seen["prev_a"] = input_dict[SampleBatch.PREV_ACTIONS].numpy()
        seen["prev_r"] = input_dict[SampleBatch.PREV_REWARDS].numpy()
        seen["is_training"] = is_training
        seen["seq_lens"] = seq_lens
        seen["state_batches"] = state_batches
        return torch.zeros(len(input_dict[SampleBatch.OBS]), 3), TorchCategorical, []

    torch.manual_seed(0)
    policy = PG(OBS, ACT, dict(BASE), action_distribution_fn=dist_fn)
    policy.compute_actions(
        np.zeros((2, 4), np.float32), prev_action_batch=[1, 2], prev_reward_batch=[0.5, -1.0], explore=False
    )
    np.testing.assert_array_equal(seen["prev_a"], [1, 2])
    np.testing.assert_allclose(seen["prev_r"], [0.5, -1.0], rtol=1e-6, atol=1e-6)
    assert seen["is_training"] is False and seen["state_batches"] == []
    np.testing.assert_array_equal(np.asarray(seen["seq_lens"]), [1, 1])


def test_input_dict_state_columns_become_state_batches():
    seen = {}

    def sampler(policy, model, input_dict, state_batches, explore, timestep):
        seen["states"] = [s.numpy().copy() for s in state_batches]
        n = len(input_dict[SampleBatch.OBS])
        return torch.zeros(n, dtype=torch.int64), torch.zeros(n), [s + 1 for s in state_batches]

    torch.manual_seed(0)
    policy = PG(OBS, ACT, dict(BASE), action_sampler_fn=sampler)
    s0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    s1 = -np.ones((2, 2), np.float32)
    _, state_out, _ = policy.compute_actions_from_input_dict(
        {SampleBatch.OBS: np.zeros((2, 4), np.float32), "state_in_0": s0, "state_in_1": s1}
    )
    np.testing.assert_array_equal(seen["states"][0], s0)
    np.testing.assert_array_equal(seen["states"][1], s1)
    np.testing.assert_array_equal(state_out[0], s0 + 1)
    assert isinstance(state_out[0], np.ndarray)


def test_action_sampler_fn_four_outputs_and_spec_arguments():
    calls = []

    def sampler(policy, model, input_dict, state_batches, explore, timestep):
        calls.append(
            dict(policy=policy, model=model, explore=explore, timestep=timestep, state_batches=state_batches)
        )
        n = len(input_dict[SampleBatch.OBS])
        logp = torch.log(torch.full((n,), 0.25))
        dist_inputs = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
        return torch.full((n,), 1), logp, dist_inputs, []

    torch.manual_seed(0)
    policy = PG(OBS, ACT, {**BASE, "explore": False}, action_sampler_fn=sampler)
    actions, state_out, extra = policy.compute_actions(np.zeros((2, 4), np.float32))
    assert calls[0]["policy"] is policy and calls[0]["model"] is policy.model
    assert calls[0]["explore"] is False and calls[0]["timestep"] == 0
    assert calls[0]["state_batches"] == [] and state_out == []
    np.testing.assert_array_equal(actions, [1, 1])
    np.testing.assert_allclose(extra[SampleBatch.ACTION_PROB], [0.25, 0.25], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(extra[SampleBatch.ACTION_LOGP], np.log([0.25, 0.25]), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(
        extra[SampleBatch.ACTION_DIST_INPUTS], np.arange(6, dtype=np.float32).reshape(2, 3)
    )
    assert policy.global_timestep == 2


def test_action_distribution_fn_old_obs_signature_still_works():
    seen = {}

    def old_fn(policy, model, obs_batch, *, explore, timestep, is_training):
        seen.update(obs=obs_batch.numpy().copy(), explore=explore, timestep=timestep, is_training=is_training)
        return torch.tensor([[0.0, 0.0, 9.0]]).repeat(len(obs_batch), 1), TorchCategorical, []

    torch.manual_seed(0)
    policy = PG(OBS, ACT, dict(BASE), action_distribution_fn=old_fn)
    obs = pg_batch(3)[SampleBatch.OBS]
    actions, _, extra = policy.compute_actions(obs, explore=False, timestep=9)
    np.testing.assert_array_equal(actions, [2, 2, 2])
    np.testing.assert_array_equal(seen["obs"], obs)
    assert seen["explore"] is False and seen["timestep"] == 9 and seen["is_training"] is False
    np.testing.assert_allclose(extra[SampleBatch.ACTION_DIST_INPUTS], [[0, 0, 9]] * 3, rtol=1e-6, atol=1e-6)


def test_compute_actions_numpy_outputs_and_probs_match_softmax():
    policy = make()
    obs = pg_batch(50, seed=2)[SampleBatch.OBS]
    actions, state_out, extra = policy.compute_actions(obs, explore=True)
    assert isinstance(actions, np.ndarray) and state_out == []
    assert {SampleBatch.ACTION_DIST_INPUTS, SampleBatch.ACTION_LOGP, SampleBatch.ACTION_PROB} <= set(extra)
    assert all(isinstance(v, np.ndarray) for v in extra.values())
    lp = log_softmax(extra[SampleBatch.ACTION_DIST_INPUTS].astype(np.float64))
    np.testing.assert_allclose(
        extra[SampleBatch.ACTION_LOGP], lp[np.arange(50), actions], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        extra[SampleBatch.ACTION_PROB], np.exp(extra[SampleBatch.ACTION_LOGP]), rtol=1e-6, atol=1e-6
    )
    assert extra[SampleBatch.ACTION_PROB].dtype == np.float32


@pytest.mark.parametrize(
    "bad",
    [np.zeros((2, 5), np.float32), np.zeros((2,), np.float32)],
    ids=["wrong-feature-dim", "missing-batch-dim"],
)
def test_obs_of_wrong_shape_names_both_shapes_and_changes_nothing(bad):
    policy = make()
    with pytest.raises(ValueError) as info:
        policy.compute_actions(bad)
    msg = str(info.value)
    assert str(tuple(bad.shape)) in msg and "(4,)" in msg
    assert policy.global_timestep == 0


# ------------------------------------------------------------------ log likelihoods


def test_log_likelihoods_gaussian_unnormalized_actions_vs_numpy():
    box = gym.spaces.Box(np.array([-3.0], np.float32), np.array([1.0], np.float32))
    torch.manual_seed(1)
    policy = PG(OBS, box, {**BASE, "normalize_actions": True})
    obs = pg_batch(4, seed=3)[SampleBatch.OBS]
    dist_in = policy.compute_actions(obs, explore=False)[2][SampleBatch.ACTION_DIST_INPUTS]
    mean, log_std = dist_in[:, :1].astype(np.float64), dist_in[:, 1:].astype(np.float64)
    env_a = np.array([[-3.0], [-1.0], [0.0], [1.0]], np.float32)
    # [-3, 1] -> [-1, 1]: x = (a + 3) / 4 * 2 - 1.
    unsquashed = (env_a + 3.0) / 2.0 - 1.0

    def gauss(x):
        return (-0.5 * ((x - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)

    got = policy.compute_log_likelihoods(env_a, obs, actions_normalized=False)
    np.testing.assert_allclose(np.asarray(got), gauss(unsquashed), rtol=1e-4, atol=1e-5)
    got = policy.compute_log_likelihoods(env_a, obs, actions_normalized=True)
    np.testing.assert_allclose(np.asarray(got), gauss(env_a), rtol=1e-4, atol=1e-5)
    # normalize_actions=False: the flag has no effect.
    torch.manual_seed(1)
    raw = PG(OBS, box, {**BASE, "normalize_actions": False})
    raw.set_weights(policy.get_weights())
    got = raw.compute_log_likelihoods(env_a, obs, actions_normalized=False)
    np.testing.assert_allclose(np.asarray(got), gauss(env_a), rtol=1e-4, atol=1e-5)


def test_log_likelihoods_do_not_touch_exploration_or_timestep():
    policy = make(exploration_config=dict(EPS))
    before = Spy(policy.exploration.before_compute_actions)
    policy.exploration.before_compute_actions = before
    obs = pg_batch(5)[SampleBatch.OBS]
    logp = policy.compute_log_likelihoods(np.array([0, 1, 2, 0, 1]), obs)
    assert before.calls == [{"explore": False}]
    assert policy.global_timestep == 0
    assert tuple(logp.shape) == (5,)
    assert (np.asarray(logp) <= 0).all()


# ------------------------------------------------------------------ learn_on_batch


def test_learn_on_batch_call_order_and_result_objects():
    log = []

    class Recorder(DefaultCallbacks):
        def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
            log.append(("callback", policy, train_batch, result, policy.model.training))
            result["mine"] = 1

    class Recording(SGDPG):
        def compute_gradients(self, batch):
            log.append(("compute_gradients", batch))
            return super().compute_gradients(batch)

        def apply_gradients(self, gradients):
            log.append(("apply_gradients", gradients))
            return super().apply_gradients(gradients)

        def extra_compute_grad_fetches(self):
            return {LEARNER_STATS_KEY: {}, "extra_fetch": 7}

        def extra_grad_info(self, train_batch):
            return {"mean_reward": float(np.mean(np.asarray(train_batch[SampleBatch.REWARDS])))}

    policy = make(Recording, callbacks=Recorder)
    policy.model.eval()
    batch = pg_batch(10)
    fetches = policy.learn_on_batch(batch)
    assert [e[0] for e in log] == ["callback", "compute_gradients", "apply_gradients"]
    _, cb_policy, cb_batch, cb_result, training = log[0]
    assert cb_policy is policy and cb_batch is batch and training is True
    assert log[1][1] is batch
    assert log[2][1] is _directStepOptimizerSingleton
    assert fetches["custom_metrics"] is cb_result and cb_result == {"mine": 1}
    assert set(fetches) == {LEARNER_STATS_KEY, "extra_fetch", "model", "custom_metrics"}
    assert fetches["extra_fetch"] == 7 and fetches["model"] == {}
    stats = fetches[LEARNER_STATS_KEY]
    assert stats["allreduce_latency"] == 0.0
    assert stats["mean_reward"] == pytest.approx(float(np.mean(pg_batch(10)[SampleBatch.REWARDS])), abs=1e-6)


def test_compute_gradients_returns_grads_and_info_without_stepping():
    policy = make(SGDPG)
    batch = pg_batch(12)
    expected = reference_grads(policy.model, batch)
    before = params_np(policy)
    grads, info = policy.compute_gradients(batch)
    assert len(grads) == len(before)
    for g, e in zip(grads, expected):
        got = (
            np.zeros_like(e)
            if g is None
            else np.asarray(g.detach().cpu().numpy() if torch.is_tensor(g) else g)
        )
        np.testing.assert_allclose(got, e, rtol=1e-5, atol=1e-7)
    assert info[LEARNER_STATS_KEY] == {"allreduce_latency": 0.0}
    for p, w in zip(params_np(policy), before):  # no step taken
        np.testing.assert_array_equal(p, w)


def test_apply_gradients_numpy_equals_manual_sgd_step():
    policy = make(SGDPG)
    rng = np.random.default_rng(0)
    before = params_np(policy)
    grads = [rng.normal(size=w.shape).astype(np.float32) for w in before]
    policy.apply_gradients(grads)
    for p, w, g in zip(params_np(policy), before, grads):
        np.testing.assert_allclose(p, w - 0.05 * g, rtol=1e-6, atol=1e-7)


def test_compute_gradients_with_grad_clip_returns_clipped_grads():
    clip = 1e-3
    policy = make(SGDPG, grad_clip=clip)
    batch = pg_batch(16)
    ref = reference_grads(policy.model, batch)
    norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in ref))
    assert norm > clip * 10  # the clip is active
    grads, info = policy.compute_gradients(batch)
    got = [np.zeros_like(e) if g is None else g.detach().numpy() for g, e in zip(grads, ref)]
    got_norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in got))
    assert got_norm == pytest.approx(clip, rel=1e-3, abs=1e-6)
    for g, e in zip(got, ref):  # same direction
        np.testing.assert_allclose(g, e * clip / norm, rtol=1e-3, atol=1e-9)
    assert float(info[LEARNER_STATS_KEY]["grad_gnorm"]) == pytest.approx(norm, rel=1e-4, abs=1e-6)


def test_param_groups_of_one_optimizer_use_their_own_lr():
    class Groups(PG):
        def optimizer(self):
            ps = list(self.model.parameters())
            return torch.optim.SGD([{"params": ps[:2], "lr": 0.1}, {"params": ps[2:], "lr": 0.01}])

    policy = make(Groups)
    n = len(list(policy.model.parameters()))
    assert policy.multi_gpu_param_groups == [set(range(n))]
    batch = pg_batch(8)
    ref = reference_grads(policy.model, batch)
    before = params_np(policy)
    policy.learn_on_batch(batch)
    for i, (p, w, g) in enumerate(zip(params_np(policy), before, ref)):
        lr = 0.1 if i < 2 else 0.01
        np.testing.assert_allclose(p, w - lr * g, rtol=1e-5, atol=1e-7)


def test_optimizer_list_and_loss_list_pair_up_in_order():
    class Two(PG):
        def optimizer(self):
            ps = list(self.model.parameters())
            return [torch.optim.SGD(ps[:2], lr=0.1), torch.optim.SGD(ps[2:], lr=0.2)]

        def loss(self, model, dist_class, train_batch):
            pg = super().loss(model, dist_class, train_batch)
            return [0.0 * pg, pg]  # optimizer 0 gets a zero loss

    policy = make(Two)
    n = len(list(policy.model.parameters()))
    assert policy.multi_gpu_param_groups == [{0, 1}, set(range(2, n))]
    batch = pg_batch(8)
    ref = reference_grads(policy.model, batch)
    before = params_np(policy)
    policy.learn_on_batch(batch)
    after = params_np(policy)
    # Params 0,1: zero grad from loss 0, then loss 1's backward accumulates
    # into them (they are not zeroed for optimizer 1): one full PG grad, lr 0.1.
    for i in range(n):
        lr = 0.1 if i < 2 else 0.2
        np.testing.assert_allclose(after[i], before[i] - lr * ref[i], rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="2 optimizers"):

        class Bad(Two):
            def loss(self, model, dist_class, train_batch):
                return PG.loss(self, model, dist_class, train_batch)

        make(Bad).learn_on_batch(pg_batch(4))


# ------------------------------------------------------------------ weights


def test_get_weights_is_a_numpy_copy_and_round_trips():
    policy = make()
    w = policy.get_weights()
    assert set(w) == set(policy.model.state_dict())
    assert all(isinstance(v, np.ndarray) for v in w.values())
    key = next(iter(w))
    w[key] += 100.0  # mutating the copy leaves the model alone
    assert not np.allclose(policy.get_weights()[key], w[key], atol=1e-6)
    other = make(seed=3)
    other.set_weights(w)
    np.testing.assert_array_equal(other.get_weights()[key], w[key])
    out_a = other.compute_actions(np.ones((1, 4), np.float32), explore=False)[2]
    policy.set_weights(w)
    out_b = policy.compute_actions(np.ones((1, 4), np.float32), explore=False)[2]
    np.testing.assert_array_equal(
        out_a[SampleBatch.ACTION_DIST_INPUTS], out_b[SampleBatch.ACTION_DIST_INPUTS]
    )


def _bad_weights(kind, w):
    bad = {k: v + 1.0 for k, v in w.items()}
    key = sorted(bad)[-1]
    if kind == "extra-key":
        bad["bogus.weight"] = np.zeros(3, np.float32)
        return bad, "bogus.weight"
    if kind == "missing-key":
        del bad[key]
        return bad, key
    bad[key] = np.zeros((7, 7), np.float32)
    return bad, key


@pytest.mark.parametrize("kind", ["extra-key", "missing-key", "wrong-shape"])
def test_set_weights_with_bad_entries_names_the_key(kind):
    policy = make()
    bad, name = _bad_weights(kind, policy.get_weights())
    with pytest.raises((ValueError, RuntimeError), match=name.replace(".", r"\.")):
        policy.set_weights(bad)


SET_WEIGHTS_XFAIL = (
    "TorchPolicy.set_weights -> load_state_dict_fast falls back to torch's "
    "strict load_state_dict, which copies every matching tensor before raising "
    "on a missing/unexpected key or a wrong shape: a failed set_weights leaves "
    "the model half-overwritten"
)


@pytest.mark.parametrize("kind", ["extra-key", "missing-key", "wrong-shape"])
def test_failed_set_weights_changes_nothing(kind):
    policy = make()
    w = policy.get_weights()
    bad, _ = _bad_weights(kind, w)
    with pytest.raises((ValueError, RuntimeError)):
        policy.set_weights(bad)
    for k, v in policy.get_weights().items():
        np.testing.assert_array_equal(v, w[k], err_msg=k)


# ------------------------------------------------------------------ recurrence


LSTM_MODEL = {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 4, "max_seq_len": 10}


def test_fc_versus_lstm_recurrence_api():
    fc = make()
    assert fc.is_recurrent() is False and fc.num_state_tensors() == 0
    assert fc.get_initial_state() == []
    torch.manual_seed(0)
    rnn = PG(OBS, ACT, {**BASE, "model": dict(LSTM_MODEL)}, max_seq_len=10)
    assert rnn.is_recurrent() is True and rnn.num_state_tensors() == 2
    init = rnn.get_initial_state()
    assert len(init) == 2 and all(isinstance(s, np.ndarray) for s in init)
    assert [s.shape for s in init] == [(4,), (4,)] and all((s == 0).all() for s in init)
    vr = rnn.view_requirements
    for i in range(2):
        assert f"state_in_{i}" in vr and f"state_out_{i}" in vr
    assert rnn.max_seq_len == 10
    # Acting without state after acting with state keeps the model recurrent
    # in the API sense (num_state_tensors comes from the model).
    _, state_out, _ = rnn.compute_actions(np.zeros((2, 4), np.float32), [np.zeros((2, 4), np.float32)] * 2)
    assert [s.shape for s in state_out] == [(2, 4), (2, 4)]
    assert rnn.num_state_tensors() == 2


class SeenPG(PG):
    def loss(self, model, dist_class, train_batch):
        model.tower_stats["seq_lens"] = train_batch[SampleBatch.SEQ_LENS]
        return super().loss(model, dist_class, train_batch)


def _spec_28_batch():
    seq_lens = [4, 7, 4, 10, 3]
    n = 28
    obs = np.zeros((n, 4), np.float32)
    obs[:, 0] = np.arange(1, n + 1)  # row id (1-based, 0 marks padding)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: np.zeros(n, np.int64),
            SampleBatch.REWARDS: np.ones(n, np.float32),
            SampleBatch.EPS_ID: np.repeat(np.arange(5), seq_lens),
            SampleBatch.SEQ_LENS: np.array(seq_lens, np.int32),
            "state_in_0": np.zeros((5, 4), np.float32),
            "state_in_1": np.zeros((5, 4), np.float32),
        }
    ), seq_lens


def test_spec_28_step_rnn_batch_on_two_fake_gpus():
    torch.manual_seed(0)
    policy = SeenPG(OBS, ACT, {**BASE, "model": dict(LSTM_MODEL), **FAKE2}, max_seq_len=10)
    batch, seq_lens = _spec_28_batch()
    per_device = policy.load_batch_into_buffer(batch)
    slices = policy._tower_buffers.loaded(0)
    assert len(slices) == 2
    assert per_device == len(slices[0]) == policy.get_num_samples_loaded_into_buffer()
    # Every timestep lands on exactly one device, in order; each device's
    # data is its sequences right-zero-padded to the longest one it holds.
    all_ids = []
    for s in slices:
        lens = np.asarray(s[SampleBatch.SEQ_LENS]).tolist()
        rows = np.asarray(s[SampleBatch.OBS])[:, 0]
        width = max(lens)
        assert rows.shape == (len(lens) * width,)
        for j, ln in enumerate(lens):
            seq = rows[j * width : (j + 1) * width]
            assert (seq[ln:] == 0).all() and (seq[:ln] > 0).all()
            all_ids.extend(seq[:ln].astype(int).tolist())
        assert len(s) == sum(lens)  # count in (unpadded) timesteps
    assert all_ids == list(range(1, 29))
    assert sum(len(s) for s in slices) == 28
    # One SGD step on the loaded RNN data runs on both towers.
    policy.learn_on_loaded_batch(0)
    seen = [np.asarray(t.tower_stats["seq_lens"]).tolist() for t in policy.model_gpu_towers]
    assert seen == [np.asarray(s[SampleBatch.SEQ_LENS]).tolist() for s in slices]


# ------------------------------------------------------------------ loaded batches


def _obs_seen(policy):
    return [np.asarray(t.tower_stats["obs_seen"]) for t in policy.model_gpu_towers]


@pytest.mark.parametrize(
    "minibatch, offset, rows",
    [
        (64, 8, slice(0, 16)),  # minibatch >= loaded: whole buffer, offset ignored
        (16, 8, slice(0, 16)),  # exactly the loaded size: whole buffer
        (4, 8, slice(8, 12)),  # [offset:offset + 4]
        (4, 14, slice(14, 16)),  # runs past the end: truncated
    ],
)
def test_cpu_learn_on_loaded_batch_slicing(minibatch, offset, rows):
    policy = make(sgd_minibatch_size=minibatch)
    batch = pg_batch(16)
    obs = batch[SampleBatch.OBS].copy()
    assert policy.load_batch_into_buffer(batch) == 16
    policy.learn_on_loaded_batch(offset=offset)
    np.testing.assert_array_equal(_obs_seen(policy)[0], obs[rows])


@pytest.mark.parametrize(
    "minibatch, offset, rows",
    [
        # device_batch_size = minibatch // 2; whole buffers only if it is >= the
        # SUM of all devices' loaded rows (16), else [offset:offset + size].
        (32, 4, (slice(0, 8), slice(8, 16))),
        # size 12 < 16: sliced [4:16] on 8-row device batches, truncated to [4:8].
        (24, 4, (slice(4, 8), slice(12, 16))),
        (8, 4, (slice(4, 8), slice(12, 16))),
        (4, 2, (slice(2, 4), slice(10, 12))),
    ],
)
def test_fake_gpu_learn_on_loaded_batch_slicing(minibatch, offset, rows):
    policy = make(sgd_minibatch_size=minibatch, **FAKE2)
    batch = pg_batch(16)
    obs = batch[SampleBatch.OBS].copy()
    assert policy.load_batch_into_buffer(batch) == 8
    policy.learn_on_loaded_batch(offset=offset)
    seen = _obs_seen(policy)
    for d in range(2):
        np.testing.assert_array_equal(seen[d], obs[rows[d]])


def test_offset_outside_loaded_rows_is_an_error():
    policy = make(sgd_minibatch_size=4)
    policy.load_batch_into_buffer(pg_batch(16))
    with pytest.raises(ValueError, match="offset 16 is outside the 16 samples"):
        policy.learn_on_loaded_batch(offset=16)


def test_fake_gpu_per_tower_learner_stats():
    class Stats(SGDPG):
        def extra_grad_info(self, train_batch):
            return {"obs_mean": float(np.asarray(train_batch[SampleBatch.OBS]).mean())}

        def extra_compute_grad_fetches(self):
            return {LEARNER_STATS_KEY: {}, "top": 3}

    policy = make(Stats, sgd_minibatch_size=16, **FAKE2)
    batch = pg_batch(16)
    obs = batch[SampleBatch.OBS].copy()
    policy.load_batch_into_buffer(batch)
    fetches = policy.learn_on_loaded_batch(0)
    assert set(fetches) == {"tower_0", "tower_1", LEARNER_STATS_KEY, "top"}
    for i, part in enumerate((obs[:8], obs[8:])):
        assert set(fetches[f"tower_{i}"]) == {LEARNER_STATS_KEY}
        assert fetches[f"tower_{i}"][LEARNER_STATS_KEY]["obs_mean"] == pytest.approx(
            float(part.mean()), rel=1e-5, abs=1e-6
        )


def test_fake_gpu_step_is_mean_of_tower_grads():
    policy = make(SGDPG, sgd_minibatch_size=16, **FAKE2)
    batch = pg_batch(16, seed=8)
    g0 = reference_grads(policy.model, batch[:8])
    g1 = reference_grads(policy.model, batch[8:])
    before = params_np(policy)
    policy.load_batch_into_buffer(batch)
    policy.learn_on_loaded_batch(0)
    for p, w, a, b in zip(params_np(policy), before, g0, g1):
        np.testing.assert_allclose(p, w - 0.05 * (a + b) / 2, rtol=1e-5, atol=1e-7)
    # Tower 1 is not stepped; it is refreshed from tower 0 at the start of
    # the next step (spec: "Copy weights of main model (tower-0) to all other towers").
    assert policy.model_gpu_towers[0] is policy.model
    stale = [p.detach().numpy().copy() for p in policy.model_gpu_towers[1].parameters()]
    for s, w in zip(stale, before):
        np.testing.assert_array_equal(s, w)
    after_step1 = params_np(policy)
    policy.learn_on_loaded_batch(0)
    for t1, w in zip(policy.model_gpu_towers[1].parameters(), after_step1):
        np.testing.assert_array_equal(t1.detach().numpy(), w)


def test_loading_a_new_batch_replaces_the_buffer():
    policy = make(sgd_minibatch_size=64)
    policy.load_batch_into_buffer(pg_batch(16, seed=1))
    b2 = pg_batch(6, seed=2)
    obs2 = b2[SampleBatch.OBS].copy()
    assert policy.load_batch_into_buffer(b2) == 6
    assert policy.get_num_samples_loaded_into_buffer() == 6
    policy.learn_on_loaded_batch()
    np.testing.assert_array_equal(_obs_seen(policy)[0], obs2)


# ------------------------------------------------------------------ target models


def test_target_models_follow_tower_layout_on_fake_gpus():
    class WithTarget(PG):
        def __init__(self, obs_space, action_space, config):
            self.target_model = torch.nn.Linear(2, 2)
            super().__init__(obs_space, action_space, config)

    policy = WithTarget(OBS, ACT, {**BASE, **FAKE2})
    assert len(policy.model_gpu_towers) == 2 and policy.model_gpu_towers[0] is policy.model
    assert policy.model_gpu_towers[1] is not policy.model
    assert set(map(id, policy.target_models)) == set(map(id, policy.model_gpu_towers))
    assert not hasattr(make(), "target_models")


# ------------------------------------------------------------------ padding and RNN likelihoods


@pytest.mark.parametrize("req", [4, lambda policy: 4], ids=["int", "callable"])
def test_batch_divisibility_req_pads_the_train_batch(req):
    torch.manual_seed(0)
    policy = PG(OBS, ACT, dict(BASE), get_batch_divisibility_req=req)
    assert policy.batch_divisibility_req == 4
    n = 10
    obs = np.zeros((n, 4), np.float32)
    obs[:, 0] = np.arange(1, n + 1)
    batch = SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: np.zeros(n, np.int64),
            SampleBatch.REWARDS: np.ones(n, np.float32),
            SampleBatch.EPS_ID: np.zeros(n, np.int64),
            SampleBatch.AGENT_INDEX: np.zeros(n, np.int64),
        }
    )
    policy.learn_on_batch(batch)
    seen = np.asarray(policy.model.tower_stats["obs_seen"])[:, 0]
    # 10 rows of one episode -> chunks of 4, 4, 2, each padded to 4 rows.
    np.testing.assert_array_equal(seen, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0])
    assert len(seen) % 4 == 0


def test_lstm_log_likelihoods_use_the_given_state():
    torch.manual_seed(0)
    policy = PG(OBS, ACT, {**BASE, "model": dict(LSTM_MODEL)}, max_seq_len=10)
    r = np.random.default_rng(0)
    obs = r.uniform(-1, 1, (3, 4)).astype(np.float32)
    state = [r.normal(size=(3, 4)).astype(np.float32) for _ in range(2)]
    actions = np.array([0, 2, 1])
    _, _, extra = policy.compute_actions(obs, state, explore=False)
    expected = log_softmax(extra[SampleBatch.ACTION_DIST_INPUTS].astype(np.float64))
    got = policy.compute_log_likelihoods(actions, obs, state)
    np.testing.assert_allclose(np.asarray(got), expected[np.arange(3), actions], rtol=1e-5, atol=1e-6)
    # A different state gives different likelihoods (the state is used).
    other = policy.compute_log_likelihoods(actions, obs, [np.zeros((3, 4), np.float32)] * 2)
    assert not np.allclose(np.asarray(other), np.asarray(got), atol=1e-6)


def test_model_lock_is_held_while_acting_and_learning():
    owned = []

    class Locked(SGDPG):
        def loss(self, model, dist_class, train_batch):
            owned.append(("loss", self._lock._is_owned()))
            return super().loss(model, dist_class, train_batch)

    def dist_fn(policy, model, input_dict, **kwargs):
        owned.append(("act", policy._lock._is_owned()))
        return model(input_dict, kwargs["state_batches"], kwargs["seq_lens"])[0], TorchCategorical, []

    torch.manual_seed(0)
    policy = Locked(OBS, ACT, dict(BASE), action_distribution_fn=dist_fn)
    policy.compute_actions(np.zeros((2, 4), np.float32))
    policy.compute_log_likelihoods(np.array([0, 1]), np.zeros((2, 4), np.float32))
    policy.learn_on_batch(pg_batch(4))
    policy.load_batch_into_buffer(pg_batch(4))
    policy.learn_on_loaded_batch()
    assert owned == [("act", True), ("act", True), ("loss", True), ("loss", True)]
    assert not policy._lock._is_owned()


def test_minibatch_defaults_to_train_batch_size_when_not_configured():
    policy = make(train_batch_size=200)  # no sgd_minibatch_size given
    batch = pg_batch(150)
    obs = batch[SampleBatch.OBS].copy()
    policy.load_batch_into_buffer(batch)
    policy.learn_on_loaded_batch(0)
    # device_batch_size = 200 // 1 >= 150 loaded rows: the whole buffer.
    np.testing.assert_array_equal(_obs_seen(policy)[0], obs)


# ------------------------------------------------------------------ model hooks, Box actions


def _doubling_model():
    from rlpolicy._core.defaults import MODEL_DEFAULTS
    from rlpolicy.models.torch.fcnet import FullyConnectedNetwork
    from rlpolicy.policy.view_requirement import ViewRequirement

    class Doubling(FullyConnectedNetwork):
        def __init__(self, *args):
            super().__init__(*args)
            self.view_requirements["prev_rewards"] = ViewRequirement("rewards", shift=-1)

        def custom_loss(self, policy_loss, loss_inputs):
            self.custom_loss_inputs = loss_inputs
            return [2.0 * loss for loss in policy_loss]

        def metrics(self):
            return {"model_metric": 5}

    torch.manual_seed(0)
    return Doubling(OBS, ACT, 3, {**MODEL_DEFAULTS, "fcnet_hiddens": [8]}, "doubling")


def test_model_custom_loss_metrics_and_view_requirements_are_used():
    model = _doubling_model()
    policy = SGDPG(OBS, ACT, dict(BASE), model=model)
    assert policy.model is model and policy.dist_class is TorchCategorical
    assert "prev_rewards" in policy.view_requirements
    assert policy.view_requirements["prev_rewards"].shift == -1
    batch = pg_batch(8)
    ref = reference_grads(model, batch)
    before = params_np(policy)
    fetches = policy.learn_on_batch(batch)
    assert fetches["model"] == {"model_metric": 5}
    assert model.custom_loss_inputs is batch
    for p, w, g in zip(params_np(policy), before, ref):  # the doubled loss was stepped
        np.testing.assert_allclose(p, w - 0.05 * 2.0 * g, rtol=1e-5, atol=1e-7)


BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def test_box_actions_deterministic_and_sampled_logp_vs_numpy():
    torch.manual_seed(0)
    policy = PG(OBS, BOX, dict(BASE))
    obs = pg_batch(6, seed=4)[SampleBatch.OBS]
    actions, _, extra = policy.compute_actions(obs, explore=False)
    mean = extra[SampleBatch.ACTION_DIST_INPUTS][:, :2]
    np.testing.assert_allclose(actions, mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(extra[SampleBatch.ACTION_LOGP], np.zeros(6))
    np.testing.assert_array_equal(extra[SampleBatch.ACTION_PROB], np.ones(6))
    actions, _, extra = policy.compute_actions(obs, explore=True)
    mean, log_std = np.split(extra[SampleBatch.ACTION_DIST_INPUTS].astype(np.float64), 2, -1)
    expected = (-0.5 * ((actions - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    np.testing.assert_allclose(extra[SampleBatch.ACTION_LOGP], expected, rtol=1e-4, atol=1e-5)
    assert actions.shape == (6, 2)


def test_fake_gpu_towers_compute_in_separate_threads():
    import threading

    threads = {}

    class Where(SGDPG):
        def loss(self, model, dist_class, train_batch):
            idx = self.model_gpu_towers.index(model)
            threads[idx] = threading.get_ident()
            return super().loss(model, dist_class, train_batch)

    policy = make(Where, sgd_minibatch_size=16, **FAKE2)
    policy.load_batch_into_buffer(pg_batch(16))
    policy.learn_on_loaded_batch(0)
    assert set(threads) == {0, 1}
    assert threads[0] == threading.get_ident()  # tower 0 on the calling thread
    assert threads[1] != threads[0]


def test_spec_28_step_rnn_batch_on_cpu_loads_whole():
    torch.manual_seed(0)
    policy = SeenPG(OBS, ACT, {**BASE, "model": dict(LSTM_MODEL)}, max_seq_len=10)
    batch, seq_lens = _spec_28_batch()
    assert policy.load_batch_into_buffer(batch) == 28  # timesteps, not padded rows
    (loaded,) = policy._tower_buffers.loaded(0)
    rows = np.asarray(loaded[SampleBatch.OBS])[:, 0]
    assert rows.shape == (5 * 10,)  # dynamic max = 10 (the longest sequence)
    for j, ln in enumerate(seq_lens):
        seq = rows[j * 10 : (j + 1) * 10]
        start = sum(seq_lens[:j]) + 1
        np.testing.assert_array_equal(seq[:ln], np.arange(start, start + ln))
        assert (seq[ln:] == 0).all()
    policy.learn_on_loaded_batch(0)
    assert np.asarray(policy.model.tower_stats["seq_lens"]).tolist() == seq_lens
