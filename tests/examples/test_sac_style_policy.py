"""examples/sac_style_policy.py: three optimizers, three losses, polyak targets, torch == TF.

Expectations are independent of the example's code: a hand-written float64 torch
reference of the SAC losses (plain tensors, autograd for the gradients) and a
numpy Adam step give the torch policy's first learn step; the TF policy (graph,
tf2 untraced, tf2 traced) started from the same weights (copied by hand: Dense
kernels are torch weights transposed) and fed the same reparameterisation noise
must land on the same losses and weights; the target after a step is
``tau * w + (1 - tau) * w_target`` in numpy; a zero learning rate on two
optimizers leaves everything but the third one's variables bit-for-bit alone.
"""

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")
import gymnasium as gym  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sac_style_policy", ROOT / "examples" / "sac_style_policy.py")
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)

from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()

OBS_DIM, ACT_DIM, N = 3, 2, 6
OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
ACT_SPACE = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
CONFIG = {
    "hiddens": [8, 8],
    "gamma": 0.9,
    "tau": 0.1,
    "initial_alpha": 0.5,
    "actor_lr": 1e-2,
    "critic_lr": 2e-2,
    "alpha_lr": 3e-2,
}
_noise_rng = np.random.default_rng(7)
# Enough rows for any dummy batch the policies build at init; a train batch uses the first N.
NOISE = {k: _noise_rng.standard_normal((4096, ACT_DIM)).astype(np.float32) for k in ("t", "tp1")}
HEADS = ("action_model", "q_net", "twin_q_net")


class FixedNoiseTorch(ex.SACStyleTorchPolicy):
    def sample_noise(self, dist_inputs, which):
        return torch.as_tensor(NOISE[which][: dist_inputs.shape[0]])


class FixedNoiseTF(ex.SACStyleTFPolicy):
    def sample_noise(self, dist_inputs, which):
        return tf.constant(NOISE[which])[: tf.shape(dist_inputs)[0]]


class FixedNoiseEager(ex.SACStyleTFPolicy.as_eager()):
    def sample_noise(self, dist_inputs, which):
        return tf.constant(NOISE[which])[: tf.shape(dist_inputs)[0]]


def make(mode, **overrides):
    config = dict(CONFIG, **overrides)
    if mode == "torch":
        return FixedNoiseTorch(OBS_SPACE, ACT_SPACE, dict(config, framework="torch"))
    if mode == "tf":
        return FixedNoiseTF(OBS_SPACE, ACT_SPACE, dict(config, framework="tf"))
    return FixedNoiseEager(
        OBS_SPACE, ACT_SPACE, dict(config, framework="tf2", eager_tracing=mode == "traced")
    )


def batch(seed=0):
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: rng.uniform(-1, 1, (N, OBS_DIM)).astype(np.float32),
            SampleBatch.NEXT_OBS: rng.uniform(-1, 1, (N, OBS_DIM)).astype(np.float32),
            SampleBatch.ACTIONS: rng.uniform(-0.9, 0.9, (N, ACT_DIM)).astype(np.float32),
            SampleBatch.REWARDS: rng.standard_normal(N).astype(np.float32),
            SampleBatch.TERMINATEDS: np.array([0, 1, 0, 0, 1, 0], bool),
            SampleBatch.DONES: np.array([0, 1, 0, 0, 1, 0], bool),
        }
    )


# ---------------------------------------------------------------- weights as plain numpy
# Layout: {"action_model": [(W [in, out], b), ...], "q_net": ..., "twin_q_net": ..., "log_alpha": float}


def torch_weights(model):
    out = {
        head: [
            (m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
            for m in getattr(model, head)
            if isinstance(m, torch.nn.Linear)
        ]
        for head in HEADS
    }
    out["log_alpha"] = float(model.log_alpha.detach())
    return out


def _dense(keras_model):
    return [layer for layer in keras_model.layers if layer.__class__.__name__ == "Dense"]


def _tf_read(policy, var):
    return policy.get_session().run(var) if policy.framework == "tf" else var.numpy()


def _tf_write(policy, var, value):
    if policy.framework == "tf":
        session = policy.get_session()
        with session.graph.as_default():
            session.run(var.assign(value))
    else:
        var.assign(value)


def tf_weights(policy, model):
    out = {
        head: [
            (_tf_read(policy, d.kernel).copy(), _tf_read(policy, d.bias).copy())
            for d in _dense(getattr(model, head))
        ]
        for head in HEADS
    }
    out["log_alpha"] = float(_tf_read(policy, model.log_alpha))
    return out


def weights_of(policy, target=False):
    model = policy.target_model if target else policy.model
    if policy.framework == "torch":
        return torch_weights(policy.target_models[policy.model] if target else model)
    return tf_weights(policy, model)


def load_weights(policy, weights):
    """Writes ``weights`` into the policy's model and hard-syncs its target."""
    if policy.framework == "torch":
        with torch.no_grad():
            for head in HEADS:
                layers = [m for m in getattr(policy.model, head) if isinstance(m, torch.nn.Linear)]
                for m, (w, b) in zip(layers, weights[head]):
                    m.weight.copy_(torch.as_tensor(w.T))
                    m.bias.copy_(torch.as_tensor(b))
            policy.model.log_alpha.fill_(weights["log_alpha"])
    else:
        for head in HEADS:
            for d, (w, b) in zip(_dense(getattr(policy.model, head)), weights[head]):
                _tf_write(policy, d.kernel, w)
                _tf_write(policy, d.bias, b)
        _tf_write(policy, policy.model.log_alpha, np.float32(weights["log_alpha"]))
    policy.update_target(tau=1.0)


def flat(weights):
    parts = [a.ravel() for head in HEADS for layer in weights[head] for a in layer]
    return np.concatenate(parts + [np.array([weights["log_alpha"]])])


def assert_weights_close(a, b, atol):
    for head in HEADS:
        for i, ((wa, ba), (wb, bb)) in enumerate(zip(a[head], b[head])):
            np.testing.assert_allclose(wa, wb, atol=atol, err_msg=f"{head} layer {i} kernel")
            np.testing.assert_allclose(ba, bb, atol=atol, err_msg=f"{head} layer {i} bias")
    assert a["log_alpha"] == pytest.approx(b["log_alpha"], abs=atol)


# ---------------------------------------------------------------- the reference


def reference_step(w0, data, cfg, noise_t, noise_tp1):
    """SAC's three losses in float64 torch from plain tensors, their gradients
    (autograd), one numpy Adam step per optimizer and the polyak target."""
    d = torch.float64

    def params(w):
        return {
            head: [
                (torch.tensor(k, dtype=d, requires_grad=True), torch.tensor(b, dtype=d, requires_grad=True))
                for k, b in w[head]
            ]
            for head in HEADS
        } | {"log_alpha": torch.tensor(w["log_alpha"], dtype=d, requires_grad=True)}

    def mlp(layers, x):
        for i, (k, b) in enumerate(layers):
            x = x @ k + b
            if i < len(layers) - 1:
                x = torch.relu(x)
        return x

    def sample(p, obs, eps):
        out = mlp(p["action_model"], obs)
        mean, log_std = out[:, :ACT_DIM], torch.clamp(out[:, ACT_DIM:], -20.0, 2.0)
        z = mean + torch.exp(log_std) * eps
        a = torch.tanh(z)
        # log N(z; mean, std) - log|d tanh(z)/dz|  (the 1e-6 as in the example and RLlib)
        logp = (-0.5 * eps**2 - log_std - 0.5 * math.log(2 * math.pi) - torch.log(1 - a**2 + 1e-6)).sum(-1)
        return a, logp

    def q(p, head, obs, act):
        return mlp(p[head], torch.cat([obs, act], -1))[:, 0]

    def huber(x):
        return torch.where(x.abs() < 1, 0.5 * x**2, x.abs() - 0.5)

    p, tgt = params(w0), params(w0)  # the target starts as a hard copy
    obs, nobs = (torch.tensor(data[k], dtype=d) for k in ("obs", "new_obs"))
    act, rew = torch.tensor(data["actions"], dtype=d), torch.tensor(data["rewards"], dtype=d)
    notdone = 1.0 - torch.tensor(data["terminateds"], dtype=d)
    eps_t, eps_tp1 = torch.tensor(noise_t, dtype=d), torch.tensor(noise_tp1, dtype=d)
    alpha = torch.exp(p["log_alpha"])
    a_t, logp_t = sample(p, obs, eps_t)
    a_tp1, logp_tp1 = sample(p, nobs, eps_tp1)
    q_next = torch.min(q(tgt, "q_net", nobs, a_tp1), q(tgt, "twin_q_net", nobs, a_tp1)) - alpha * logp_tp1
    y = (rew + cfg["gamma"] * notdone * q_next).detach()
    critic = huber(q(p, "q_net", obs, act) - y).mean() + huber(q(p, "twin_q_net", obs, act) - y).mean()
    q_pi = torch.min(q(p, "q_net", obs, a_t), q(p, "twin_q_net", obs, a_t))
    actor = (alpha.detach() * logp_t - q_pi).mean()
    alpha_loss = -(p["log_alpha"] * (logp_t - ACT_DIM).detach()).mean()  # target entropy "auto" = -ACT_DIM

    def adam1(value, grad, lr, eps=1e-8):
        # Adam's first step: m_hat = g, v_hat = g^2.
        return value - lr * grad / (np.abs(grad) + eps)

    new = {}
    groups = (
        (actor, ("action_model",), cfg["actor_lr"]),
        (critic, ("q_net", "twin_q_net"), cfg["critic_lr"]),
    )
    for loss, heads, lr in groups:
        tensors = [t for h in heads for layer in p[h] for t in layer]
        grads = iter(g.numpy() for g in torch.autograd.grad(loss, tensors, retain_graph=True))
        for h in heads:
            new[h] = [tuple(adam1(t.detach().numpy(), next(grads), lr) for t in layer) for layer in p[h]]
    (g_alpha,) = torch.autograd.grad(alpha_loss, [p["log_alpha"]])
    new["log_alpha"] = float(adam1(w0["log_alpha"], g_alpha.numpy(), cfg["alpha_lr"]))
    tau = cfg["tau"]
    target = {
        h: [(tau * k + (1 - tau) * k0, tau * b + (1 - tau) * b0) for (k, b), (k0, b0) in zip(new[h], w0[h])]
        for h in HEADS
    }
    target["log_alpha"] = tau * new["log_alpha"] + (1 - tau) * w0["log_alpha"]
    losses = {
        k: float(v.detach())
        for k, v in (("actor_loss", actor), ("critic_loss", critic), ("alpha_loss", alpha_loss))
    }
    return losses, new, target


def initial_weights(seed=3):
    """Random weights in the policy layout (scaled so no unit is dead or saturated)."""
    rng = np.random.default_rng(seed)
    h = CONFIG["hiddens"]
    sizes = {
        "action_model": [OBS_DIM, *h, 2 * ACT_DIM],
        "q_net": [OBS_DIM + ACT_DIM, *h, 1],
        "twin_q_net": [OBS_DIM + ACT_DIM, *h, 1],
    }
    w = {
        head: [
            (
                rng.normal(0, 1 / math.sqrt(a), (a, b)).astype(np.float32),
                rng.normal(0, 0.1, b).astype(np.float32),
            )
            for a, b in zip(s[:-1], s[1:])
        ]
        for head, s in sizes.items()
    }
    w["log_alpha"] = float(np.float32(math.log(CONFIG["initial_alpha"])))
    return w


def learn_stats(policy, data):
    stats = policy.learn_on_batch(data.copy())["learner_stats"]
    return {k: float(stats[k]) for k in ("actor_loss", "critic_loss", "alpha_loss", "alpha_value")}


# ---------------------------------------------------------------- tests


def test_torch_step_matches_reference():
    policy = make("torch")
    assert len(policy._optimizers) == 3
    w0, data = initial_weights(), batch()
    load_weights(policy, w0)
    losses, new, target = reference_step(w0, data, CONFIG, NOISE["t"][:N], NOISE["tp1"][:N])
    stats = learn_stats(policy, data)
    for k, v in losses.items():
        assert stats[k] == pytest.approx(v, abs=1e-5), k
    assert stats["alpha_value"] == pytest.approx(CONFIG["initial_alpha"], abs=1e-6)
    assert_weights_close(weights_of(policy), new, atol=1e-5)
    # Polyak: target = tau * w_new + (1 - tau) * w_target_old (= w0 after the hard sync).
    assert_weights_close(weights_of(policy, target=True), target, atol=1e-5)


@pytest.mark.tf
@pytest.mark.parametrize("mode", ["tf", "tf2", pytest.param("traced", marks=pytest.mark.tf_eager_code)])
def test_tf_step_matches_torch(mode):
    w0, data = initial_weights(), batch()
    # TF's Adams add epsilon to sqrt(v) before the bias correction (torch after it): at
    # step 1 TF's epsilon acts ~32x larger, which shows on gradients near 1e-6; a tiny
    # epsilon makes both the same Adam.
    torch_policy, tf_policy = make("torch", adam_epsilon=1e-12), make(mode, adam_epsilon=1e-12)
    assert len(tf_policy._optimizers) == 3
    for p in (torch_policy, tf_policy):
        load_weights(p, w0)
    np.testing.assert_allclose(flat(weights_of(tf_policy, target=True)), flat(w0), atol=0)  # hard sync
    expected = learn_stats(torch_policy, data)
    got = learn_stats(tf_policy, data)
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, abs=1e-5), k
    new = weights_of(tf_policy)
    assert_weights_close(new, weights_of(torch_policy), atol=1e-5)
    # The target moved by the polyak rule from w0 towards the new weights.
    tau = CONFIG["tau"]
    np.testing.assert_allclose(
        flat(weights_of(tf_policy, target=True)), tau * flat(new) + (1 - tau) * flat(w0), atol=1e-6
    )


@pytest.mark.tf
@pytest.mark.tf_eager_code
def test_traced_equals_untraced_over_steps():
    w0 = initial_weights(seed=5)
    traced, untraced = make("traced"), make("tf2")
    for p in (traced, untraced):
        load_weights(p, w0)
    for step in range(3):
        data = batch(seed=10 + step)
        a, b = learn_stats(traced, data), learn_stats(untraced, data)
        for k in a:
            assert a[k] == pytest.approx(b[k], abs=1e-6), (step, k)
    np.testing.assert_allclose(flat(weights_of(traced)), flat(weights_of(untraced)), atol=1e-6)
    np.testing.assert_allclose(
        flat(weights_of(traced, target=True)), flat(weights_of(untraced, target=True)), atol=1e-6
    )
    assert traced.trace_counts and all(n == 1 for n in traced.trace_counts.values()), traced.trace_counts


# Which variables each optimizer owns; the others get learning rate 0 in one learn step.
OWNERS = {"actor_lr": ("action_model",), "critic_lr": ("q_net", "twin_q_net"), "alpha_lr": ("log_alpha",)}


@pytest.mark.parametrize("mode", ["torch", "tf", "tf2"])
def test_each_optimizer_moves_only_its_variables(mode):
    w0, data = initial_weights(), batch()
    for lr_key, owned in OWNERS.items():
        policy = make(mode, **{k: (CONFIG[k] if k == lr_key else 0.0) for k in OWNERS})
        load_weights(policy, w0)
        learn_stats(policy, data)
        w1 = weights_of(policy)
        for part in (*HEADS, "log_alpha"):
            before, after = flat({**_only(w0, part)}), flat({**_only(w1, part)})
            if part in owned:
                assert np.abs(after - before).max() > 1e-4, (lr_key, part)
            else:
                np.testing.assert_array_equal(after, before, err_msg=f"{lr_key} step moved {part}")


def _only(w, part):
    """``w`` with every part but ``part`` emptied (for ``flat``)."""
    out = {h: (w[h] if h == part else []) for h in HEADS}
    out["log_alpha"] = w["log_alpha"] if part == "log_alpha" else 0.0
    return out


@pytest.mark.parametrize("mode", ["torch", "tf2"])
def test_bad_action_space_is_named(mode):
    cls = FixedNoiseTorch if mode == "torch" else FixedNoiseEager
    with pytest.raises(ValueError, match=r"1-D Box action space, got Discrete\(3\)"):
        cls(OBS_SPACE, gym.spaces.Discrete(3), dict(CONFIG, framework=mode))
    with pytest.raises(ValueError, match=r"must be Box\(-1, 1\), got Box\(-2.0, 2.0"):
        cls(OBS_SPACE, gym.spaces.Box(-2.0, 2.0, (2,), np.float32), dict(CONFIG, framework=mode))


@pytest.mark.learning
def test_example_script_learns():
    env = dict(
        os.environ,
        RLPOLICY_EXAMPLE_QUICK="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sac_style_policy.py"), "--frameworks", "torch,tf2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for fw in ("torch", "tf2"):
        assert f"{fw}: optimizers=3 " in out
        before = float(out.split(f"{fw}: optimizers=3 before: greedy reward=")[1].split()[0])
        after = float(out.split(f"{fw}: after ")[1].split("greedy reward=")[1].split()[0])
        # Random init: mean -|a - obs/2|^2 around -0.2; the optimum is 0.
        assert after > before + 0.05 and after > -0.05, out


@pytest.mark.slow
def test_offpolicy_bench_sac_rows_run():
    """benchmarks/bench_offpolicy.py's SAC rows, smallest settings: every system reports a row."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3")
    args = ["--algos", "sac", "--repeats", "1", "--calls", "1", "--sac-batch", "8"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_offpolicy.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = dict(
        line.split(" | ")[0:2]
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and "---" not in line
    )
    assert "| SAC-style learn_on_batch (3 optimizers + polyak), batch 8" in rows, proc.stdout
    assert {"| torch", "| tf", "| traced", "| untraced"} <= set(rows), proc.stdout
    assert "trace counts {'learn_on_batch': 1}" in proc.stdout  # the traced policy traced once
