"""utils.tf_modes: graph and eager Keras models side by side, Keras 2 as tf.keras and its opt-out."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
gym = pytest.importorskip("gymnasium")

from rlpolicy.models.tf.tf_modelv2 import TFModelV2  # noqa: E402
from rlpolicy.utils import tf_modes  # noqa: E402
from rlpolicy.utils.framework import get_keras, try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()
keras = get_keras()
pytestmark = pytest.mark.tf
ROOT = Path(__file__).resolve().parents[2]

K1 = np.array([[0.5, -0.25, 0.1], [0.2, 0.3, -0.4]], np.float32)
B1 = np.array([0.05, -0.1, 0.2], np.float32)
K2 = np.array([[1.0, -1.0], [0.5, 0.25], [-0.75, 2.0]], np.float32)
B2 = np.array([0.3, -0.2], np.float32)
OBS = np.array([[1.0, 2.0], [-0.5, 0.25], [0.0, 3.0]], np.float32)


def expected(scale):
    """tanh(obs @ K1 + B1) @ (scale * K2) + B2, then a Dense(1) of ones on it."""
    h = np.tanh(OBS @ K1 + B1) @ (scale * K2) + B2
    return h, h.sum(axis=1, keepdims=True)


class TwoFlavourModel(TFModelV2):
    """A functional Keras model (Model and Layer classes) plus a plain Dense layer."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, scale=1.0):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        const = keras.initializers.Constant
        inp = keras.layers.Input(shape=(2,))
        h = keras.layers.Dense(
            3, activation="tanh", kernel_initializer=const(K1), bias_initializer=const(B1)
        )(inp)
        out = keras.layers.Dense(2, kernel_initializer=const(scale * K2), bias_initializer=const(B2))(h)
        self.base_model = keras.Model(inp, out)
        self.head = keras.layers.Dense(1, kernel_initializer="ones", bias_initializer="zeros")

    def forward(self, input_dict, state, seq_lens):
        out = self.base_model(input_dict["obs"])
        self._summed = self.head(out)
        return out, state

    def summed(self):
        return self._summed


def _make(name, scale):
    space = gym.spaces.Box(-10, 10, (2,), np.float32)
    return TwoFlavourModel(space, gym.spaces.Discrete(2), 2, {}, name, scale=scale)


def _graph_round(i):
    graph = tf1.Graph()
    with graph.as_default():
        model = _make(f"g{i}", 1.0 + i)
        ph = tf1.placeholder(tf.float32, (None, 2))
        out, _ = model({"obs": ph}, [], None)
        summed = model.summed()
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            return sess.run([out, summed], {ph: OBS})


def _eager_round(i):
    mode = tf_modes.eager_mode()()  # (eager in this thread even in a TF1-mode process)
    with mode:
        model = _make(f"e{i}", -1.0 - i)
        out, _ = model({"obs": tf.constant(OBS)}, [], None)
        return out.numpy(), model.summed().numpy()


@pytest.mark.tf_eager_code
def test_two_threads_build_and_call_graph_and_eager_models():
    rounds, errors = 12, []

    def run(kind, round_fn, sign):
        try:
            for i in range(rounds):
                out, summed = round_fn(i)
                want_out, want_sum = expected(sign * (1.0 + i))
                np.testing.assert_allclose(out, want_out, atol=1e-5, err_msg=f"{kind} round {i}")
                np.testing.assert_allclose(summed, want_sum, atol=1e-5, err_msg=f"{kind} round {i}")
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append((kind, e))

    threads = [
        threading.Thread(target=run, args=("graph", _graph_round, 1.0)),
        threading.Thread(target=run, args=("eager", _eager_round, -1.0)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors


@pytest.mark.tf_eager_code
def test_a_call_changes_no_class():
    graph = tf1.Graph()
    with graph.as_default():
        g = _make("g", 1.0)
    with tf_modes.eager_mode()():
        e = _make("e", 1.0)
    dense = keras.layers.Dense
    bases_before = {k: k.__bases__ for k in dense.__mro__}
    with tf_modes.eager_mode()():
        e({"obs": tf.constant(OBS)}, [], None)
    with graph.as_default():
        g({"obs": tf1.placeholder(tf.float32, (None, 2))}, [], None)
    assert {k: k.__bases__ for k in dense.__mro__} == bases_before
    # Each layer keeps the flavour it was built in; isinstance of its own class holds.
    v1_layer = tf_modes._internals().keras_flavour_classes()[1]
    assert isinstance(g.head, v1_layer) and not isinstance(e.head, v1_layer)
    assert isinstance(g.head, dense) and isinstance(e.head, dense)
    assert type(g.head).__name__ == "Dense" and type(g.head) is not type(e.head)


def test_flavour_mro_matches_what_tf_keras_makes():
    # Hand-made expectation: a graph-built Dense has Layer_v1 before Layer; eager has no Layer_v1.
    classes = tf_modes._internals().keras_flavour_classes()
    layer, layer_v1, model, model_v1 = classes
    dense = keras.layers.Dense
    graph_mro = tf_modes.flavour_mro(dense, False, classes)
    eager_mro = tf_modes.flavour_mro(dense, True, classes)
    assert graph_mro[0] is dense and graph_mro.index(layer_v1) + 1 == graph_mro.index(layer)
    assert layer_v1 not in eager_mro and layer in eager_mro
    functional = type(keras.Model(keras.layers.Input((1,)), keras.layers.Input((1,))))
    g = tf_modes.flavour_mro(functional, False, classes)
    assert g.index(model_v1) < g.index(model) < g.index(layer_v1) < g.index(layer)
    e = tf_modes.flavour_mro(functional, True, classes)
    assert model_v1 not in e and layer_v1 not in e and e.index(model) < e.index(layer)


def _run(code, **env):
    full_env = dict(os.environ, OMP_NUM_THREADS="1", **env)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=full_env
    )


_POLICIES = """
import os, numpy as np, gymnasium as gym
import rlpolicy
from rlpolicy.agents.pg import PGTFPolicy
import tensorflow as tf, tf_keras
obs, act = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)
for fw, cls in (("tf", PGTFPolicy), ("tf2", PGTFPolicy.as_eager())):
    p = cls(obs, act, {"framework": fw, "model": {"fcnet_hiddens": [4]}})
    assert p.compute_actions(np.zeros((2, 3), np.float32))[0].shape == (2,)
print("legacy" if tf.keras.Model is tf_keras.Model else "keras3", os.environ.get("TF_USE_LEGACY_KERAS"))
"""


def test_tf_keras_is_tf_keras_by_default_and_keras3_when_the_process_opts_out():
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    default = subprocess.run(
        [sys.executable, "-c", _POLICIES],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    assert default.stdout.split() == ["legacy", "1"], default.stderr[-2000:]
    opted_out = _run(_POLICIES, TF_USE_LEGACY_KERAS="0")
    assert opted_out.stdout.split() == ["keras3", "0"], opted_out.stderr[-2000:]
