"""rlpolicy.models.torch.modules.noisy_layer.NoisyLayer against numpy formulas."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy.models.torch.modules.noisy_layer import NoisyLayer  # noqa: E402


def test_parameters_shapes_and_init():
    torch.manual_seed(0)
    layer = NoisyLayer(8, 3, sigma0=0.5)
    assert [n for n, _ in layer.named_parameters()] == ["sigma_w", "sigma_b", "w", "b"]
    assert layer.sigma_w.shape == layer.w.shape == (8, 3) and layer.b.shape == (3,)
    assert layer.sigma_w.abs().max() <= 1 / np.sqrt(8) and layer.w.abs().max() <= np.sqrt(6 / 11)
    assert layer.w.std() > 0.05  # not a constant fill (RLlib 1.11's bug)
    np.testing.assert_allclose(
        layer.sigma_b.detach().numpy(), np.full(3, 0.5 / np.sqrt(8)), rtol=1e-6, atol=1e-7
    )
    out = layer(torch.randn(5, 8))
    assert out.shape == (5, 3) and (out >= 0).all()  # relu by default


def test_noise_changes_between_calls_and_vanishes_with_zero_sigma():
    torch.manual_seed(1)
    layer = NoisyLayer(6, 5, sigma0=0.5, activation="tanh")
    x = torch.randn(4, 6)
    assert (layer(x) - layer(x)).abs().max() > 1e-4
    with torch.no_grad():
        layer.sigma_w.zero_()
        layer.sigma_b.zero_()
    expected = np.tanh(x.numpy() @ layer.w.detach().numpy() + layer.b.detach().numpy())
    np.testing.assert_allclose(layer(x).detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_noise_is_factorised_and_gradients_reach_the_sigmas():
    torch.manual_seed(2)
    n_in, n_out = 4, 6
    layer = NoisyLayer(n_in, n_out, sigma0=0.5, activation=None)
    with torch.no_grad():
        layer.w.zero_()
        layer.b.zero_()
        layer.sigma_w.fill_(1.0)
        layer.sigma_b.fill_(1.0)
    x = torch.cat([torch.zeros(1, n_in), torch.eye(n_in)])
    y = layer(x)
    f_out = y[0].detach().numpy()
    ratios = (y[1:].detach().numpy() - f_out) / f_out  # f(e_in_i), equal across output columns
    np.testing.assert_allclose(ratios, np.repeat(ratios[:, :1], n_out, axis=1), rtol=1e-4, atol=1e-4)
    y.sum().backward()
    assert layer.sigma_w.grad is not None and layer.sigma_w.grad.abs().sum() > 0
    assert layer.sigma_b.grad.abs().sum() > 0


def test_rejects_bad_sizes():
    with pytest.raises(ValueError, match=r"NoisyLayer: in_size must be a positive int, got 0"):
        NoisyLayer(0, 3, 0.5)
