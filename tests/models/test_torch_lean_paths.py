"""The lean torch paths behave like the plain ones they replace.

Weight init (normc drawn once, no torch default init first), the default
distributions without ``torch.distributions`` objects, the functional replay
of ``SlimFC`` stacks (``rlpolicy._fast.torch_functional``). Expectations come from
numpy formulas, ``torch.distributions`` / ``nn.Module`` themselves, or
invariants; never from the code under test.
"""

import copy

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from rlpolicy.models.catalog import MODEL_DEFAULTS  # noqa: E402
from rlpolicy.models.torch.fcnet import FullyConnectedNetwork  # noqa: E402
from rlpolicy.models.torch.misc import SlimFC, normc_initializer  # noqa: E402
from rlpolicy.models.torch.torch_action_dist import TorchCategorical, TorchDiagGaussian  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
ACT = gym.spaces.Discrete(3)


def fcnet(seed=0, **model):
    torch.manual_seed(seed)
    cfg = dict(
        MODEL_DEFAULTS,
        **dict(dict(fcnet_hiddens=[16, 16], fcnet_activation="tanh", vf_share_layers=False), **model),
    )
    return FullyConnectedNetwork(OBS, ACT, 3, cfg, "m")


def reference_forward(model, x):
    """Logits and values by calling every module (hooks and all), no shortcut."""
    h = x
    for fc in model._hidden_layers:
        h = fc._model(h)
    logits = model._logits._model(h)
    v = x
    for fc in model._value_branch_separate:
        v = fc._model(v)
    return logits, model._value_branch._model(v).squeeze(1)


# ---------------------------------------------------------------- weight init
def test_normc_layers_have_row_norm_std_zero_bias_and_a_seeded_draw():
    model = fcnet(seed=3)
    layers = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert type(next(iter(layers.values()))) is nn.Linear  # exactly torch's class
    for name, lin in layers.items():
        std = 0.01 if name.startswith(("_logits", "_value_branch._model")) else 1.0
        w = lin.weight.detach().numpy()
        np.testing.assert_allclose(np.linalg.norm(w, axis=1), std, rtol=1e-5, atol=1e-7, err_msg=name)
        np.testing.assert_array_equal(lin.bias.detach().numpy(), 0.0)
        assert np.isfinite(w).all()
    # Directions of a normc row are uniform on the sphere: entries of the 16x16
    # layers, rescaled by sqrt(fan_in), are ~N(0, 1) (mean 0, variance 1).
    big = np.concatenate(
        [layers[n].weight.detach().numpy().ravel() * 4.0 for n in layers if n.endswith("1._model.0")]
    )
    assert abs(big.mean()) < 0.15 and 0.8 < big.var() < 1.2
    same, other = fcnet(seed=3), fcnet(seed=4)
    for (k, a), b, c in zip(
        model.state_dict().items(), same.state_dict().values(), other.state_dict().values()
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        if k.endswith("weight"):
            assert not torch.equal(a, c)


def test_initializer_that_reads_the_weights_still_sees_torch_default_init():
    def double(w):
        with torch.no_grad():
            w.mul_(2.0)

    torch.manual_seed(0)
    fc = SlimFC(9, 4, initializer=double)
    bound = 2.0 / np.sqrt(9)  # twice torch's kaiming-uniform bound 1/sqrt(fan_in)
    w = fc._model[0].weight.detach().numpy()
    assert np.isfinite(w).all() and np.abs(w).max() <= bound + 1e-6 and np.abs(w).max() > 0.1


def test_slimfc_parameter_names_and_types_are_unchanged():
    fc = SlimFC(3, 2, initializer=normc_initializer(1.0), activation_fn="tanh")
    assert [n for n, _ in fc.named_parameters()] == ["_model.0.weight", "_model.0.bias"]
    assert [type(m) for m in fc._model] == [nn.Linear, nn.Tanh]
    assert all(p.requires_grad and type(p) is nn.Parameter for p in fc.parameters())


# ---------------------------------------------------------------- distributions
def test_lean_categorical_matches_torch_distributions_including_masked_logits():
    logits = torch.tensor([[0.3, -1.0, 2.0], [0.0, float("-inf"), 1.0]])
    other = torch.tensor([[1.0, 0.0, -1.0], [2.0, 0.5, float("-inf")]])
    d, o = TorchCategorical(logits, None), TorchCategorical(other, None)
    ref, ref_o = (torch.distributions.Categorical(logits=x) for x in (logits, other))
    acts = torch.tensor([2, 0])
    torch.testing.assert_close(d.logp(acts), ref.log_prob(acts))
    torch.testing.assert_close(d.entropy(), ref.entropy())
    torch.testing.assert_close(d.kl(o), torch.distributions.kl_divergence(ref, ref_o))
    assert torch.isinf(d.kl(o)[1])  # q has 0 mass where p has some
    torch.testing.assert_close(d.dist.probs, ref.probs)  # built on demand


def test_lean_categorical_samples_follow_the_softmax_and_logp_matches_the_sample():
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, -1.0]]).repeat(20000, 1)
    d = TorchCategorical(logits, None)
    sample = d.sample()
    p = np.exp([0.0, 1.0, -1.0]) / np.exp([0.0, 1.0, -1.0]).sum()
    np.testing.assert_allclose(np.bincount(sample.numpy(), minlength=3) / 20000, p, atol=0.015)
    np.testing.assert_allclose(
        d.sampled_action_logp().numpy(), np.log(p)[sample.numpy()], rtol=1e-5, atol=1e-6
    )


def test_a_subclass_that_sets_its_own_dist_gets_the_dist_based_methods():
    class AlwaysFirst(TorchCategorical):
        def __init__(self, inputs, model=None):
            super().__init__(inputs, model)
            self.dist = torch.distributions.Categorical(probs=torch.tensor([[1.0, 0.0]]))

    d = AlwaysFirst(torch.tensor([[-5.0, 5.0]]))
    assert d.sample().tolist() == [0] and d.deterministic_sample().tolist() == [0]
    assert d.logp(torch.tensor([0])).item() == pytest.approx(0.0, abs=1e-6)


def test_lean_diag_gaussian_matches_numpy_formulas():
    mean, log_std = np.array([[0.5, -1.0]], np.float32), np.array([[0.1, -0.7]], np.float32)
    m2, ls2 = np.array([[0.0, 0.3]], np.float32), np.array([[-0.2, 0.4]], np.float32)
    d = TorchDiagGaussian(torch.tensor(np.concatenate([mean, log_std], 1)), None)
    o = TorchDiagGaussian(torch.tensor(np.concatenate([m2, ls2], 1)), None)
    x = np.array([[0.2, 0.1]], np.float32)
    std, s2 = np.exp(log_std), np.exp(ls2)
    logp = (-0.5 * ((x - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(1)
    np.testing.assert_allclose(d.logp(torch.tensor(x)).numpy(), logp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        d.entropy().numpy(), (log_std + 0.5 + 0.5 * np.log(2 * np.pi)).sum(1), rtol=1e-5, atol=1e-6
    )
    kl = (np.log(s2 / std) + (std**2 + (mean - m2) ** 2) / (2 * s2**2) - 0.5).sum(1)
    np.testing.assert_allclose(d.kl(o).numpy(), kl, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(d.deterministic_sample().numpy(), mean)
    torch.manual_seed(1)
    many = TorchDiagGaussian(torch.tensor(np.concatenate([mean, log_std], 1)).repeat(20000, 1), None)
    s = many.sample().numpy()
    assert not many.sample().requires_grad
    np.testing.assert_allclose(s.mean(0), mean[0], atol=0.03)
    np.testing.assert_allclose(s.std(0), std[0], rtol=0.03)


# ---------------------------------------------------------------- functional plan
def test_plan_output_equals_calling_the_modules():
    model = fcnet()
    x = torch.randn(7, 5)
    logits, _ = model({"obs": x})
    ref_logits, ref_v = reference_forward(model, x)
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=0)
    torch.testing.assert_close(model.value_function(), ref_v, rtol=0, atol=0)


@pytest.mark.parametrize("activation", ["tanh", "relu", "sigmoid", "swish", "linear"])
def test_plan_gradients_equal_calling_the_modules(activation):
    # The plan applies tanh/relu/sigmoid in place on each linear output: same values
    # and the same gradients as the out-of-place modules, and the input is untouched.
    model = fcnet(fcnet_activation=activation)
    x = torch.randn(6, 5)
    x_before = x.clone()
    logits, _ = model({"obs": x})
    loss = logits.pow(2).sum() + model.value_function().sum()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    ref_logits, ref_v = reference_forward(model, x)
    ref_grads = torch.autograd.grad(ref_logits.pow(2).sum() + ref_v.sum(), list(model.parameters()))
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=0)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)


def test_slimfc_forward_with_activation_keeps_its_input_and_gradient():
    torch.manual_seed(0)
    fc = SlimFC(4, 3, activation_fn="tanh")
    x = torch.randn(5, 4, requires_grad=True)
    out = fc(x)
    out.sum().backward()
    w, b = fc._model[0].weight.detach(), fc._model[0].bias.detach()
    expected = np.tanh(x.detach().numpy() @ w.numpy().T + b.numpy())
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-6, atol=1e-6)
    dx = (1.0 - expected**2) @ w.numpy()  # d/dx sum(tanh(xW^T + b))
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-5, atol=1e-6)


def test_hooks_swaps_and_parametrizations_are_honoured():
    model, x = fcnet(), torch.randn(2, 5)
    seen = []
    h = model._hidden_layers[0]._model[1].register_forward_hook(lambda m, i, o: seen.append(o))
    model({"obs": x})
    assert len(seen) == 1  # the hook on the first tanh fired
    h.remove()
    model._logits = SlimFC(16, 3, initializer=normc_initializer(0.01))  # swapped head
    torch.testing.assert_close(model({"obs": x})[0], reference_forward(model, x)[0], rtol=0, atol=0)
    torch.nn.utils.parametrize.register_parametrization(model._value_branch._model[0], "weight", _Double())
    ref_v = reference_forward(model, x)[1]
    model({"obs": x})
    torch.testing.assert_close(model.value_function(), ref_v, rtol=0, atol=0)


class _Double(nn.Module):
    def forward(self, w):
        return 2.0 * w


def test_deep_copies_and_moved_parameters_use_their_own_tensors():
    model = fcnet()
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(1.0)
    x = torch.randn(3, 5)
    assert not torch.allclose(clone({"obs": x})[0], model({"obs": x})[0])
    torch.testing.assert_close(clone({"obs": x})[0], reference_forward(clone, x)[0], rtol=0, atol=0)
    traced = torch.jit.trace(_Logits(model), x)  # (tracing: the modules are called)
    torch.testing.assert_close(traced(x), reference_forward(model, x)[0], rtol=0, atol=0)


class _Logits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model({"obs": x})[0]
