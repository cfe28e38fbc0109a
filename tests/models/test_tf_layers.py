"""rlpolicy.models.tf.layers against numpy references, eagerly and inside a tf1.Graph."""

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.utils.framework import get_keras, try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()
keras = get_keras()

from rlpolicy.models.tf.layers import (  # noqa: E402
    GRUGate,
    MultiHeadAttention,
    NoisyLayer,
    PositionalEmbedding,
    RelativeMultiHeadAttention,
    SkipConnection,
)

pytestmark = pytest.mark.tf

TOL = {"rtol": 1e-5, "atol": 1e-5}


class Runner:
    """Builds layers and evaluates tensors eagerly or in an own tf1.Graph + Session."""

    def __init__(self, mode):
        self.graph = tf1.Graph() if mode == "graph" else None
        self.sess = tf1.Session(graph=self.graph) if mode == "graph" else None

    def build(self, fn):
        """Runs ``fn()`` (layer construction and calls) in this runner's mode."""
        if self.graph is None:
            return fn()
        with self.graph.as_default():
            out = fn()
            self.sess.run(tf1.global_variables_initializer())
            return out

    def eval(self, tensors):
        """Numpy values of a tensor / variable or a list of them."""
        if self.sess is not None:
            return self.sess.run(tensors)
        if isinstance(tensors, (list, tuple)):
            return [t.numpy() for t in tensors]
        return tensors.numpy()

    def again(self, tensor, call):
        """Evaluates ``tensor`` anew: re-runs it in graph mode, calls ``call()`` again eagerly."""
        return self.eval(tensor) if self.sess is not None else call().numpy()

    def assign(self, variable, value):
        if self.sess is None:
            variable.assign(value)
        else:
            with self.graph.as_default():
                self.sess.run(tf1.assign(variable, value))


@pytest.fixture(params=[pytest.param("eager", marks=pytest.mark.tf_eager_code), "graph"])
def runner(request, tf_modules):
    r = Runner(request.param)
    yield r
    if r.sess is not None:
        r.sess.close()


def _np(seed, *shape, scale=1.0):
    return (np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ------------------------------------------------------------------ MultiHeadAttention


def np_causal_mha(x, w_qkv, w_out, heads, d):
    """Plain loops: query i of head h attends to keys j <= i."""
    b_size, t_len, _ = x.shape
    qkv = x @ w_qkv
    q, k, v = qkv[..., : heads * d], qkv[..., heads * d : 2 * heads * d], qkv[..., 2 * heads * d :]
    out = np.zeros((b_size, t_len, heads * d))
    for b in range(b_size):
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            for i in range(t_len):
                logits = np.array([q[b, i, cols] @ k[b, j, cols] / np.sqrt(d) for j in range(i + 1)])
                w = _softmax(logits, 0)
                out[b, i, cols] = sum(w[j] * v[b, j, cols] for j in range(i + 1))
    return out @ w_out


def test_multi_head_attention_matches_numpy_with_causal_mask(runner):
    x = _np(0, 2, 5, 6)
    layer, out = runner.build(
        lambda: _call(MultiHeadAttention(out_dim=4, num_heads=3, head_dim=2), tf.constant(x))
    )
    w_qkv, w_out = runner.eval(layer.weights)
    assert w_qkv.shape == (6, 18) and w_out.shape == (6, 4)
    got = runner.eval(out)
    assert got.shape == (2, 5, 4)
    np.testing.assert_allclose(got, np_causal_mha(x, w_qkv, w_out, 3, 2), **TOL)


def test_multi_head_attention_is_causal(runner):
    """Changing a later timestep leaves the outputs of earlier ones unchanged."""
    x = _np(1, 1, 4, 3)
    x2 = x.copy()
    x2[:, 3] += 5.0

    def make():
        layer = MultiHeadAttention(out_dim=2, num_heads=1, head_dim=3)
        return layer(tf.constant(x)), layer(tf.constant(x2))

    a, b = runner.eval(list(runner.build(make)))
    np.testing.assert_allclose(a[:, :3], b[:, :3], **TOL)
    assert np.abs(a[:, 3] - b[:, 3]).max() > 1e-3


def _call(layer, *args, **kwargs):
    return layer, layer(*args, **kwargs)


# ------------------------------------------------------------------ RelativeMultiHeadAttention


def np_positional_embedding(distances, out_dim):
    inv = 1.0 / (10000.0 ** (np.arange(0, out_dim, 2.0) / out_dim))
    angles = np.asarray(distances, np.float64)[:, None] * inv[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)


def np_layernorm(x, gamma, beta, eps=1e-3):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def np_relative_mha(x, memory, w, heads, d, out_dim, layernorm=False, relu=False):
    """Transformer-XL attention written per (query, key) pair with explicit distances."""
    tau, t_len = memory.shape[1], x.shape[1]
    full = np.concatenate([memory, x], axis=1)
    if layernorm:
        full = np_layernorm(full, w["gamma"], w["beta"])
    qkv = full @ w["qkv"]
    q, k, v = qkv[..., : heads * d], qkv[..., heads * d : 2 * heads * d], qkv[..., 2 * heads * d :]
    out = np.zeros((x.shape[0], t_len, heads * d))
    for b in range(x.shape[0]):
        for i in range(t_len):
            qi = tau + i  # absolute position of query i
            dists = [qi - j for j in range(qi + 1)]
            rel = np_positional_embedding(dists, out_dim) @ w["pos_proj"]  # [qi+1, H*d]
            for h in range(heads):
                cols = slice(h * d, (h + 1) * d)
                logits = np.array(
                    [
                        (q[b, qi, cols] + w["u"][h]) @ k[b, j, cols]
                        + (q[b, qi, cols] + w["v"][h]) @ rel[j, cols]
                        for j in range(qi + 1)
                    ]
                ) / np.sqrt(d)
                p = _softmax(logits, 0)
                out[b, i, cols] = sum(p[j] * v[b, j, cols] for j in range(qi + 1))
    y = out @ w["out"]
    return np.maximum(y, 0.0) if relu else y


def _relative_weights(runner, layer):
    names = {
        "u": layer._uvar,
        "v": layer._vvar,
        "qkv": layer._qkv_layer.kernel,
        "out": layer._linear_layer.layer.kernel,
        "pos_proj": layer._pos_proj.kernel,
    }
    if layer._input_layernorm is not None:
        names.update(gamma=layer._input_layernorm.gamma, beta=layer._input_layernorm.beta)
    values = runner.eval(list(names.values()))
    return dict(zip(names, values))


@pytest.mark.parametrize("tau, layernorm", [(0, False), (3, True)])
def test_relative_multi_head_attention_matches_numpy(runner, tau, layernorm):
    x, memory = _np(2, 2, 4, 6), _np(3, 2, tau, 6)

    def make():
        layer = RelativeMultiHeadAttention(
            out_dim=6,
            num_heads=2,
            head_dim=3,
            input_layernorm=layernorm,
            output_activation=tf.nn.relu if layernorm else None,
        )
        return layer, layer(tf.constant(x), memory=tf.constant(memory))

    layer, out = runner.build(make)
    w = _relative_weights(runner, layer)
    if layernorm:  # non-trivial LayerNorm parameters
        runner.assign(layer._input_layernorm.gamma, 1.0 + _np(4, 6, scale=0.3))
        runner.assign(layer._input_layernorm.beta, _np(5, 6, scale=0.3))
        w = _relative_weights(runner, layer)
    expected = np_relative_mha(x, memory, w, 2, 3, 6, layernorm=layernorm, relu=layernorm)
    got = runner.again(out, lambda: layer(tf.constant(x), memory=tf.constant(memory)))
    assert got.shape == (2, 4, 6)
    np.testing.assert_allclose(got, expected, **TOL)


def test_relative_attention_without_memory_equals_empty_memory(runner):
    x = _np(6, 1, 3, 4)

    def make():
        layer = RelativeMultiHeadAttention(out_dim=4, num_heads=2, head_dim=2)
        return layer(tf.constant(x)), layer(tf.constant(x), memory=tf.zeros((1, 0, 4)))

    a, b = runner.eval(list(runner.build(make)))
    np.testing.assert_allclose(a, b, **TOL)


@pytest.mark.tf_eager_code
def test_rel_shift_aligns_distances(tf_modules):
    """x[b, i, k] encodes (i, k); after the shift, [i, j] must hold column j + T - 1 - i."""
    t_len, m = 3, 5
    x = np.array([[[[10 * i + k] for k in range(m)] for i in range(t_len)]], np.float32)  # [1, T, M, 1]
    got = RelativeMultiHeadAttention.rel_shift(tf.constant(x)).numpy()[0, :, :, 0]
    for i in range(t_len):
        for j in range(m - t_len + i + 1):  # the causal (unmasked) pairs
            assert got[i, j] == 10 * i + (j + t_len - 1 - i), (i, j)


def test_positional_embedding_matches_numpy(runner):
    out = runner.build(lambda: PositionalEmbedding(5)(tf.constant(4)))
    got = runner.eval(out)
    assert got.shape == (4, 6)  # odd out_dim: 3 frequencies -> 3 sin + 3 cos columns
    np.testing.assert_allclose(got, np_positional_embedding([3, 2, 1, 0], 5), **TOL)


# ------------------------------------------------------------------ GRUGate / SkipConnection


def np_gru_gate(h, x, w):
    r = _sigmoid(x @ w["w_r"] + h @ w["u_r"])
    z = _sigmoid(x @ w["w_z"] + h @ w["u_z"] - w["bias_z"])
    cand = np.tanh(x @ w["w_h"] + (r * h) @ w["u_h"])
    return (1 - z) * h + z * cand


def _gate_weights(runner, gate):
    values = runner.eval(gate.weights)
    return {v.name.split("/")[-1].split(":")[0]: val for v, val in zip(gate.weights, values)}


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_gru_gate_matches_numpy(runner, shape):
    h, x = _np(7, *shape), _np(8, *shape)
    gate, out = runner.build(lambda: _call(GRUGate(init_bias=2.0), (tf.constant(h), tf.constant(x))))
    w = _gate_weights(runner, gate)
    assert sorted(w) == ["bias_z", "u_h", "u_r", "u_z", "w_h", "w_r", "w_z"]
    np.testing.assert_allclose(w["bias_z"], np.full(4, 2.0), rtol=0, atol=0)
    np.testing.assert_allclose(runner.eval(out), np_gru_gate(h, x, w), **TOL)


def test_gru_gate_large_bias_passes_the_residual_through(runner):
    h, x = _np(9, 2, 3), _np(10, 2, 3)
    out = runner.build(lambda: GRUGate(init_bias=50.0)((tf.constant(h), tf.constant(x))))
    np.testing.assert_allclose(runner.eval(out), h, rtol=1e-6, atol=1e-6)  # z ~ 0: out == h


def test_gru_gate_rejects_mismatched_inputs(tf_modules):
    with pytest.raises(
        ValueError,
        match=r"GRUGate\('gru_gate.*'\): both inputs \(h, X\) must have the same known size in the last axis, got shapes \[2, 3\] and \[2, 4\]",
    ):
        GRUGate()((tf.zeros((2, 3)), tf.zeros((2, 4))))


def test_skip_connection_residual_and_fan_in(runner):
    x = _np(11, 2, 3, 4)

    def make():
        dense = keras.layers.Dense(4, use_bias=True, bias_initializer="glorot_uniform")
        gate = GRUGate(init_bias=0.5)
        plain = SkipConnection(dense)
        gated = SkipConnection(dense, fan_in_layer=gate)
        return dense, gate, plain(tf.constant(x)), gated(tf.constant(x))

    dense, gate, plain, gated = runner.build(make)
    kernel, bias = runner.eval([dense.kernel, dense.bias])
    layer_out = x @ kernel + bias
    np.testing.assert_allclose(runner.eval(plain), layer_out + x, **TOL)
    np.testing.assert_allclose(
        runner.eval(gated), np_gru_gate(x, layer_out, _gate_weights(runner, gate)), **TOL
    )


# ------------------------------------------------------------------ NoisyLayer


def test_noisy_layer_variables_shapes_and_init(runner):
    x = _np(12, 5, 8)
    layer, out = runner.build(lambda: _call(NoisyLayer("nz", out_size=3, sigma0=0.5), tf.constant(x)))
    assert [v.name.split("/")[-1] for v in layer.weights] == [
        "nz_sigma_w:0",
        "nz_sigma_b:0",
        "nz_fc_w:0",
        "nz_fc_b:0",
    ]
    sigma_w, sigma_b, w, b = runner.eval(layer.weights)
    assert sigma_w.shape == w.shape == (8, 3) and sigma_b.shape == b.shape == (3,)
    assert np.abs(sigma_w).max() <= 1 / np.sqrt(8) and np.abs(w).max() <= np.sqrt(6 / 11)
    np.testing.assert_allclose(sigma_b, np.full(3, 0.5 / np.sqrt(8)), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(b, np.zeros(3))
    got = runner.eval(out)
    assert got.shape == (5, 3) and (got >= 0).all()  # relu by default


def test_noisy_layer_noise_changes_between_calls_and_vanishes_with_zero_sigma(runner):
    x = _np(13, 4, 6)

    def make():
        layer = NoisyLayer("n", out_size=5, sigma0=0.5, activation="tanh")
        return layer, layer(tf.constant(x))

    layer, out = runner.build(make)
    first, second = runner.eval(out), runner.again(out, lambda: layer(tf.constant(x)))
    assert np.abs(first - second).max() > 1e-4  # fresh noise per call / per run
    runner.assign(layer.sigma_w, np.zeros((6, 5), np.float32))
    runner.assign(layer.sigma_b, np.zeros(5, np.float32))
    w, b = runner.eval([layer.w, layer.b])
    quiet = runner.again(out, lambda: layer(tf.constant(x)))
    np.testing.assert_allclose(quiet, np.tanh(x @ w + b), **TOL)


def test_noisy_layer_noise_is_factorised(runner):
    """With w = b = 0 and sigma = 1, row 0 (x = 0) shows f(e_out) and row i (x = unit i)
    shows (f(e_in_i) + 1) * f(e_out): the weight noise is an outer product."""
    n_in, n_out = 4, 6
    x = np.vstack([np.zeros((1, n_in)), np.eye(n_in)]).astype(np.float32)
    layer, out = runner.build(
        lambda: _call(NoisyLayer("f", out_size=n_out, sigma0=0.5, activation=None), tf.constant(x))
    )
    for var, value in [
        (layer.w, np.zeros((n_in, n_out))),
        (layer.b, np.zeros(n_out)),
        (layer.sigma_w, np.ones((n_in, n_out))),
        (layer.sigma_b, np.ones(n_out)),
    ]:
        runner.assign(var, value.astype(np.float32))
    samples = []
    for _ in range(50):
        y = runner.again(out, lambda: layer(tf.constant(x)))
        f_out = y[0]
        ratios = (y[1:] - f_out) / f_out  # f(e_in_i), the same for every output column
        np.testing.assert_allclose(ratios, np.repeat(ratios[:, :1], n_out, axis=1), rtol=1e-4, atol=1e-4)
        samples.append(f_out)
    # f(e) = sign(e) sqrt(|e|) with e ~ N(0, 1): E[f(e)^2] = E|e| = sqrt(2 / pi).
    assert np.mean(np.square(samples)) == pytest.approx(np.sqrt(2 / np.pi), abs=0.15)


def test_noisy_layer_rejects_bad_input(tf_modules):
    with pytest.raises(
        ValueError,
        match=r"NoisyLayer\('n'\): expects inputs of shape \[batch, in_size\] with a known in_size, got \[2, 3, 4\]",
    ):
        NoisyLayer("n", 2, 0.5)(tf.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"NoisyLayer\('n'\): out_size must be a positive int, got 0"):
        NoisyLayer("n", 0, 0.5)
