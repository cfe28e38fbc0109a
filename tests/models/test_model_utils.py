"""rlpolicy.models.utils (activations, initializers, filter configs) and the ActionDistribution base."""

import numpy as np
import pytest

from rlpolicy.models.action_dist import ActionDistribution
from rlpolicy.models.utils import get_activation_fn, get_filter_config, get_initializer

X = np.linspace(-3.0, 3.0, 13).astype(np.float32)
NUMPY_ACTS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "swish": lambda x: x / (1.0 + np.exp(-x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
}


@pytest.mark.parametrize("name", list(NUMPY_ACTS))
@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
@pytest.mark.tf_eager_code  # calls the TF activations eagerly, also for "tf"
def test_activations_match_numpy(name, framework):
    fn = get_activation_fn(name, framework=framework)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        out = fn()(torch.from_numpy(X)).numpy()
    else:
        pytest.importorskip("tensorflow")
        out = np.asarray(fn(X))
    np.testing.assert_allclose(out, NUMPY_ACTS[name](X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_linear_none_and_callables(framework):
    assert get_activation_fn(None, framework) is None
    assert get_activation_fn("linear", framework) is None
    assert get_activation_fn(np.tanh, framework) is np.tanh
    assert get_initializer(np.zeros, framework) is np.zeros


@pytest.mark.parametrize(
    "fn, args, match",
    [
        (get_activation_fn, ("bogus", "tf"), r"unknown activation 'bogus' for framework='tf'"),
        (get_activation_fn, ("relu", "mxnet"), r"unsupported framework 'mxnet'"),
        (get_initializer, ("he_normal", "tf"), r"unknown initializer 'he_normal' for framework='tf'"),
        (get_initializer, ("xavier_normal", "mxnet"), r"unsupported framework 'mxnet'"),
        (get_filter_config, ((33, 33, 3),), r"observation shape \[33, 33, 3\].*\[84, 84, K\]"),
    ],
)
def test_error_table(fn, args, match):
    if fn is get_activation_fn and args[1] == "tf":
        pytest.importorskip("tensorflow")  # TF's table of names is TF's own
    with pytest.raises(ValueError, match=match):
        fn(*args)


@pytest.mark.tf
@pytest.mark.tf_eager_code
def test_tf_initializers_are_glorot():
    pytest.importorskip("tensorflow")
    from rlpolicy.utils.framework import get_keras

    keras = get_keras()
    assert get_initializer(None, "tf") is keras.initializers.GlorotUniform
    assert get_initializer("xavier_normal", "tf2") is keras.initializers.GlorotNormal
    # Glorot uniform: U(-a, a) with a = sqrt(6 / (fan_in + fan_out)).
    w = get_initializer("xavier_uniform", "tf")(seed=0)((200, 300)).numpy()
    a = np.sqrt(6.0 / 500.0)
    assert np.abs(w).max() <= a and np.abs(w).max() > 0.95 * a
    assert w.var() == pytest.approx(a * a / 3.0, rel=0.05, abs=1e-6)


def test_filter_config_shapes_reduce_to_one_by_one():
    # RLlib's default filters for 84x84 and 42x42 images (the last conv ends 1x1 with "valid").
    assert get_filter_config((84, 84, 4)) == [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 1]]
    assert get_filter_config((42, 42, 3)) == [[16, [4, 4], 2], [32, [4, 4], 2], [256, [11, 11], 1]]


def test_action_distribution_base_is_abstract_and_multi_methods_delegate():
    dist = ActionDistribution(inputs="in", model="m")
    assert (dist.inputs, dist.model) == ("in", "m")
    for call in (
        dist.sample,
        dist.deterministic_sample,
        dist.sampled_action_logp,
        dist.entropy,
        lambda: dist.logp(0),
        lambda: dist.kl(dist),
        lambda: ActionDistribution.required_model_output_shape(None, {}),
    ):
        with pytest.raises(NotImplementedError):
            call()

    class Fixed(ActionDistribution):
        def kl(self, other):
            return ("kl", other)

        def entropy(self):
            return "H"

    f = Fixed(None, None)
    assert f.multi_kl("o") == ("kl", "o") and f.multi_entropy() == "H"
