"""DQNTorchPolicy: loss pieces against numpy / hand-worked values, postprocessing,
target networks (per tower), prioritized-replay fetches and config errors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from rlpolicy.agents.dqn.dqn_common import PRIO_WEIGHTS, postprocess_nstep_and_prio  # noqa: E402
from rlpolicy.agents.dqn.dqn_torch_policy import (  # noqa: E402
    DQNTorchPolicy,
    QLoss,
    build_q_losses,
    compute_q_values,
    project_distribution,
)
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.error import UnsupportedSpaceException  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
SMALL = {"model": {"fcnet_hiddens": [8]}, "hiddens": [8], "learning_starts": 0}


def np_huber(x, delta=1.0):
    return np.where(np.abs(x) < delta, 0.5 * x**2, delta * (np.abs(x) - 0.5 * delta))


class TableModel:
    """A stand-in Q-model: its 'features' are the observation; Q = obs * scale (+ dueling V)."""

    def __init__(self, scale=1.0, value=None):
        self.scale, self.value, self.tower_stats = scale, value, {}

    def __call__(self, input_dict, state, seq_lens):
        return torch.as_tensor(input_dict["obs"], dtype=torch.float32), []

    def get_q_value_distributions(self, out):
        ones = torch.ones_like(out).unsqueeze(-1)
        return out * self.scale, ones, ones

    def get_state_value(self, out):
        return torch.as_tensor(self.value, dtype=torch.float32).reshape(-1, 1).expand(out.shape[0], 1)


class StubPolicy:
    def __init__(self, **config):
        self.config = {
            "num_atoms": 1,
            "dueling": False,
            "double_q": True,
            "gamma": 0.9,
            "n_step": 1,
            "v_min": -10.0,
            "v_max": 10.0,
            **config,
        }
        self.action_space = ACT
        self.target_models = {}


def test_huber_loss_with_weights_matches_numpy():
    q_sel = torch.tensor([0.5, 3.0, -2.0])
    q_best = torch.tensor([0.0, 1.0, 4.0])
    rewards = torch.tensor([0.2, -1.0, 1.0])
    dones = torch.tensor([0.0, 0.0, 1.0])
    weights = torch.tensor([1.0, 0.5, 2.0])
    ones = torch.ones(3, 1)
    loss = QLoss(q_sel, ones, q_best, ones, weights, rewards, dones, gamma=0.9, n_step=2)
    target = rewards.numpy() + 0.81 * (1 - dones.numpy()) * q_best.numpy()
    td = q_sel.numpy() - target
    np.testing.assert_allclose(loss.td_error.numpy(), td, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        float(loss.loss), np.mean(weights.numpy() * np_huber(td)), rtol=1e-5, atol=1e-6
    )
    assert float(loss.stats["max_q"]) == pytest.approx(3.0)


@pytest.mark.parametrize("double_q", [True, False])
def test_double_q_target_matches_numpy(double_q):
    obs = np.array([[1.0, 2.0, 0.0], [0.0, 0.5, 3.0]], np.float32)
    next_obs = np.array([[3.0, 1.0, 2.0], [1.0, 4.0, 0.5]], np.float32)
    target_scale = np.array([[0.1, 1.0, 5.0]], np.float32)  # target ranks actions differently
    policy = StubPolicy(double_q=double_q)
    online = TableModel()
    target = TableModel(scale=torch.as_tensor(target_scale))
    policy.target_models = {online: target}
    batch = {
        SampleBatch.OBS: torch.as_tensor(obs),
        SampleBatch.NEXT_OBS: torch.as_tensor(next_obs),
        SampleBatch.ACTIONS: torch.tensor([1, 2]),
        SampleBatch.REWARDS: torch.tensor([1.0, -0.5]),
        SampleBatch.DONES: torch.tensor([False, False]),
        PRIO_WEIGHTS: torch.ones(2),
    }
    build_q_losses(policy, online, None, batch)
    q_target_next = next_obs * target_scale
    chooser = next_obs if double_q else q_target_next  # online net picks a* for double Q
    best = np.argmax(chooser, axis=1)
    expected_target = np.array([1.0, -0.5]) + 0.9 * q_target_next[np.arange(2), best]
    expected_td = obs[np.arange(2), [1, 2]] - expected_target
    np.testing.assert_allclose(online.tower_stats["td_error"].numpy(), expected_td, rtol=1e-5, atol=1e-5)


def test_masked_q_values_select_as_zero_with_one_hot_gradients():
    # Q(s, a) of the taken action; a masked (<= FLOAT_MIN) Q-value counts as 0 and gets no gradient.
    q = np.array([[1.5, -3.4e38, 2.0], [-np.inf, 0.25, -1.0], [4.0, 5.0, -3.4e38]], np.float32)
    obs = torch.tensor(q, requires_grad=True)
    policy = StubPolicy(double_q=False)
    online = TableModel()
    policy.target_models = {online: TableModel(scale=0.0)}  # next-state Q = 0: td = Q(s, a) - r
    batch = {
        SampleBatch.OBS: obs,
        SampleBatch.NEXT_OBS: torch.zeros(3, 3),
        SampleBatch.ACTIONS: torch.tensor([1, 1, 0]),
        SampleBatch.REWARDS: torch.tensor([0.5, 0.0, 1.0]),
        SampleBatch.DONES: torch.tensor([False, False, True]),
        PRIO_WEIGHTS: torch.tensor([1.0, 2.0, 0.5]),
    }
    build_q_losses(policy, online, None, batch).backward()
    expected_td = np.array([0.0 - 0.5, 0.25 - 0.0, 4.0 - 1.0])
    np.testing.assert_allclose(online.tower_stats["td_error"].detach().numpy(), expected_td, atol=1e-6)
    # d mean(w * huber(td)) / dQ(s, a) = w * clip(td, -1, 1) / B on the taken, unmasked action.
    expected_grad = np.zeros((3, 3), np.float32)
    expected_grad[1, 1] = 2.0 * 0.25 / 3
    expected_grad[2, 0] = 0.5 * 1.0 / 3
    np.testing.assert_allclose(obs.grad.numpy(), expected_grad, atol=1e-6)


def test_terminateds_stop_bootstrapping_but_truncation_does_not():
    policy = StubPolicy()
    online = TableModel()
    policy.target_models = {online: online}
    obs = torch.zeros(2, 3)
    next_obs = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    batch = {
        SampleBatch.OBS: obs,
        SampleBatch.NEXT_OBS: next_obs,
        SampleBatch.ACTIONS: torch.tensor([0, 0]),
        SampleBatch.REWARDS: torch.zeros(2),
        SampleBatch.DONES: torch.tensor([True, True]),
        SampleBatch.TERMINATEDS: torch.tensor([True, False]),
        PRIO_WEIGHTS: torch.ones(2),
    }
    build_q_losses(policy, online, None, batch)
    # Row 0 terminated: target 0. Row 1 only truncated: target 0.9 * max Q(s') = 2.7.
    np.testing.assert_allclose(online.tower_stats["td_error"].numpy(), [0.0, -2.7], atol=1e-5)


def test_dueling_combination_matches_numpy():
    adv = np.array([[1.0, 2.0, 6.0], [-1.0, 0.0, 4.0]], np.float32)
    value = np.array([10.0, -3.0], np.float32)
    policy = StubPolicy(dueling=True)
    model = TableModel(value=value)
    q = compute_q_values(policy, model, {"obs": torch.as_tensor(adv)})[0]
    expected = value[:, None] + adv - adv.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(q.numpy(), expected, rtol=1e-5, atol=1e-5)
    # -inf (masked) advantages are left out of the mean.
    adv_masked = np.array([[1.0, 3.0, -np.inf]], np.float32)
    q = compute_q_values(policy, TableModel(value=np.array([0.0])), {"obs": torch.as_tensor(adv_masked)})[0]
    np.testing.assert_allclose(q.numpy()[0, :2], [-1.0, 1.0], atol=1e-6)


@pytest.mark.parametrize(
    "reward,done,expected",
    [
        (0.5, 0.0, [0.0, 0.35, 0.65]),  # atoms 0, 0.5, 1 -> split 0.5 between neighbours
        (0.5, 1.0, [0.0, 0.5, 0.5]),  # terminal: all mass at r=0.5
        (2.0, 0.0, [0.0, 0.0, 1.0]),  # clipped to v_max
        (-3.0, 1.0, [1.0, 0.0, 0.0]),  # clipped to v_min
    ],
)
def test_c51_projection_hand_worked(reward, done, expected):
    z = torch.tensor([-1.0, 0.0, 1.0])
    probs = torch.tensor([[0.2, 0.3, 0.5]])
    r_tau = torch.tensor([[reward]]) + 0.5 * (1 - done) * z[None]
    m = project_distribution(r_tau, probs, -1.0, 1.0, 3)
    np.testing.assert_allclose(m.numpy()[0], expected, rtol=1e-5, atol=1e-6)


def _trajectory(n=4):
    return SampleBatch(
        {
            SampleBatch.OBS: np.arange(n, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32),
            SampleBatch.NEXT_OBS: np.arange(1, n + 1, dtype=np.float32)[:, None]
            * np.ones((1, 3), np.float32),
            SampleBatch.ACTIONS: np.zeros(n, np.int64),
            SampleBatch.REWARDS: np.array([1.0, 2.0, 3.0, 4.0][:n], np.float32),
            SampleBatch.DONES: np.array([False] * (n - 1) + [True]),
        }
    )


def test_nstep_postprocessing_hand_worked():
    policy = StubPolicy(n_step=2, gamma=0.9, worker_side_prioritization=False)
    out = postprocess_nstep_and_prio(policy, _trajectory())
    np.testing.assert_allclose(out[SampleBatch.REWARDS], [2.8, 4.7, 6.6, 4.0], rtol=1e-6)
    np.testing.assert_allclose(out[SampleBatch.NEXT_OBS][:, 0], [2.0, 3.0, 4.0, 4.0])
    np.testing.assert_array_equal(out[SampleBatch.DONES], [False, False, True, True])
    np.testing.assert_array_equal(out[PRIO_WEIGHTS], np.ones(4, np.float32))


def test_worker_side_prioritization_sets_priorities_from_td_errors():
    policy = StubPolicy(n_step=1, worker_side_prioritization=True, prioritized_replay_eps=0.01)
    policy.compute_td_error = lambda obs, act, rew, nobs, done, w: np.array([-1.0, 0.5, 0.0, 2.0])
    out = postprocess_nstep_and_prio(policy, _trajectory())
    np.testing.assert_allclose(out[PRIO_WEIGHTS], [1.01, 0.51, 0.01, 2.01], rtol=1e-6)


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return DQNTorchPolicy(OBS, ACT, dict(SMALL))


def _batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.NEXT_OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: rng.integers(0, 3, n),
            SampleBatch.REWARDS: rng.normal(size=n).astype(np.float32),
            SampleBatch.DONES: rng.random(n) < 0.2,
            PRIO_WEIGHTS: np.ones(n, np.float32),
        }
    )


def test_policy_acts_and_reports_q_values(policy):
    obs = np.zeros((4, 3), np.float32)
    actions, _, extra = policy.compute_actions(obs, explore=False)
    q = extra["q_values"]
    assert q.shape == (4, 3)
    np.testing.assert_array_equal(actions, np.argmax(q, axis=1))
    assert policy.exploration.__class__.__name__ == "EpsilonGreedy"


def test_learn_returns_td_errors_per_row(policy):
    info = policy.learn_on_batch(_batch())
    assert info["td_error"].shape == (8,)
    stats = info["learner_stats"]
    assert {"mean_q", "min_q", "max_q", "cur_lr"} <= set(stats)
    assert np.isclose(np.mean(info["td_error"]), info["mean_td_error"], atol=1e-5)


def test_update_target_with_tau_matches_numpy(policy):
    policy.learn_on_batch(_batch(seed=1))  # model and target now differ
    model = {k: v.detach().numpy().copy() for k, v in policy.model.state_dict().items()}
    target = {k: v.detach().numpy().copy() for k, v in policy.target_model.state_dict().items()}
    policy.update_target(tau=0.3)
    for k, v in policy.target_model.state_dict().items():
        np.testing.assert_allclose(v.numpy(), 0.3 * model[k] + 0.7 * target[k], rtol=1e-5, atol=1e-6)
    policy.update_target(tau=1.0)
    for k, v in policy.target_model.state_dict().items():
        np.testing.assert_allclose(v.numpy(), model[k], rtol=0, atol=0)


def test_fake_gpu_towers_share_one_target_and_match_single_device():
    torch.manual_seed(1)
    single = DQNTorchPolicy(OBS, ACT, dict(SMALL))
    towers = DQNTorchPolicy(OBS, ACT, dict(SMALL, num_gpus=2, _fake_gpus=True))
    towers.set_weights(single.get_weights())  # also re-syncs the targets
    assert len(towers.model_gpu_towers) == 2
    assert len({id(t) for t in towers.target_models.values()}) == 1
    batch = _batch(n=8, seed=3)
    info_1 = single.learn_on_batch(batch.copy())
    info_2 = towers.learn_on_batch(batch.copy())
    np.testing.assert_allclose(np.sort(info_2["td_error"]), np.sort(info_1["td_error"]), rtol=1e-4, atol=1e-5)
    for k, v in single.get_weights().items():
        np.testing.assert_allclose(towers.get_weights()[k], v, rtol=1e-4, atol=1e-5)


def test_distributional_and_noisy_variants_learn():
    torch.manual_seed(0)
    pol = DQNTorchPolicy(OBS, ACT, dict(SMALL, num_atoms=5, v_min=-2.0, v_max=2.0, noisy=True))
    info = pol.learn_on_batch(_batch())
    assert info["td_error"].shape == (8,) and np.all(info["td_error"] >= 0)  # cross entropies
    assert "mean_td_error" in info["learner_stats"]
    noisy_layers = [m for m in pol.model.modules() if type(m).__name__ == "NoisyLayer"]
    assert len(noisy_layers) == 4  # A and V heads: one hidden + one output each
    obs = torch.zeros(1, 3)
    q1 = compute_q_values(pol, pol.model, {"obs": obs})[0]
    q2 = compute_q_values(pol, pol.model, {"obs": obs})[0]
    assert not torch.allclose(q1, q2)  # fresh noise on every forward pass


def test_plain_variant_without_dueling_or_hiddens():
    pol = DQNTorchPolicy(OBS, ACT, dict(SMALL, hiddens=[], dueling=False, double_q=False))
    out, _ = pol.model({"obs": torch.zeros(2, 3)})
    assert out.shape == (2, 3)  # the base network outputs the Q-values
    assert pol.learn_on_batch(_batch())["td_error"].shape == (8,)


@pytest.mark.parametrize(
    "space,config,exc,match",
    [
        (
            gym.spaces.Box(-1, 1, (2,)),
            {},
            UnsupportedSpaceException,
            r"Action space Box.* not supported for DQN",
        ),
        (ACT, {"num_atoms": 0}, ValueError, r"num_atoms must be an int >= 1, got 0"),
        (ACT, {"num_atoms": 3, "v_min": 1.0, "v_max": 1.0}, ValueError, r"v_min \(1.0\) must be < v_max"),
    ],
)
def test_config_and_space_errors(space, config, exc, match):
    with pytest.raises(exc, match=match):
        DQNTorchPolicy(OBS, space, dict(SMALL, **config))


def test_real_worker_side_priorities_equal_the_learn_step_td_errors():
    torch.manual_seed(2)
    pol = DQNTorchPolicy(OBS, ACT, dict(SMALL, worker_side_prioritization=True, prioritized_replay_eps=0.1))
    batch = _batch(seed=4)
    del batch[PRIO_WEIGHTS]
    post = pol.postprocess_trajectory(batch)
    info = pol.learn_on_batch(post.copy())  # td errors of the weights before this step
    np.testing.assert_allclose(post[PRIO_WEIGHTS], np.abs(info["td_error"]) + 0.1, rtol=1e-5, atol=1e-5)


def test_learn_step_td_errors_and_gradients_match_an_independent_dueling_double_q():
    """Dueling double-Q on a fixed batch: TD errors against numpy, gradients against a
    plain-torch loss written here from the state dicts (only Q(s, a) carries gradient)."""
    cfg = {"model": {"fcnet_hiddens": [8, 8]}, "hiddens": [5], "gamma": 0.9, "grad_clip": None}
    policy = DQNTorchPolicy(OBS, gym.spaces.Discrete(2), cfg)
    torch.manual_seed(3)
    with torch.no_grad():  # a target net unlike the online one
        for p in policy.target_model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    rng = np.random.default_rng(0)
    n = 6
    batch = {
        "obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "new_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "actions": np.array([0, 1, 1, 0, 1, 0]),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "terminateds": np.array([False, False, True, False, False, True]),
        "weights": rng.uniform(0.5, 1.5, n).astype(np.float32),
    }
    online = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
    target = {k: v.detach().numpy().copy() for k, v in policy.target_model.state_dict().items()}

    def q_np(w, x):
        lin = lambda h, name: h @ w[name + "._model.0.weight"].T + w[name + "._model.0.bias"]  # noqa: E731
        h = np.tanh(lin(np.tanh(lin(x, "_hidden_layers.0")), "_hidden_layers.1"))
        a = lin(np.maximum(lin(h, "advantage_module.dueling_A_0"), 0), "advantage_module.A")
        v = lin(np.maximum(lin(h, "value_module.dueling_V_0"), 0), "value_module.V")
        return v + a - a.mean(1, keepdims=True)

    online_np = {k: v.numpy() for k, v in online.items()}
    best = q_np(online_np, batch["new_obs"]).argmax(1)
    q_tp1 = q_np(target, batch["new_obs"])[np.arange(n), best]
    y = batch["rewards"] + 0.9 * (1 - batch["terminateds"]) * q_tp1
    td = q_np(online_np, batch["obs"])[np.arange(n), batch["actions"]] - y

    params = {k: v.clone().requires_grad_(True) for k, v in online.items()}

    def q_torch(x):
        lin = lambda h, name: h @ params[name + "._model.0.weight"].T + params[name + "._model.0.bias"]  # noqa: E731
        h = torch.tanh(lin(torch.tanh(lin(x, "_hidden_layers.0")), "_hidden_layers.1"))
        a = lin(torch.relu(lin(h, "advantage_module.dueling_A_0")), "advantage_module.A")
        v = lin(torch.relu(lin(h, "value_module.dueling_V_0")), "value_module.V")
        return v + a - a.mean(1, keepdim=True)

    q_sel = q_torch(torch.from_numpy(batch["obs"]))[torch.arange(n), torch.from_numpy(batch["actions"])]
    td_t = q_sel - torch.from_numpy(y.astype(np.float32))
    huber = torch.where(td_t.abs() < 1.0, 0.5 * td_t**2, td_t.abs() - 0.5)
    (torch.from_numpy(batch["weights"]) * huber).mean().backward()

    grads, info = policy.compute_gradients(SampleBatch(dict(batch)))
    np.testing.assert_allclose(info["td_error"], td, rtol=1e-4, atol=1e-5)
    names = [name for name, _ in policy.model.named_parameters()]
    for name, grad in zip(names, grads):
        expected = params[name].grad
        if expected is None:  # the base model's unused value branch
            assert grad is None or not np.any(np.asarray(grad))
            continue
        np.testing.assert_allclose(np.asarray(grad), expected.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
