"""A 1.x-style custom TF model whose Keras layers are all unnamed (Keras numbers them
per process: ``dense`` in one, ``dense_3`` in the next instance), and a script that
saves or restores a tf2 PPO policy built on it (run in fresh processes by
tests/policy/test_eager_state_by_position.py).

Usage: ``python _unnamed_layers_model.py save|load DIR_UNTRACED DIR_TRACED``; prints
one JSON line: per directory, the variable names and the logits on ``X``.
"""

import json
import sys

import gymnasium as gym
import numpy as np

from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy
from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.models.tf.tf_modelv2 import TFModelV2
from rlpolicy.utils.framework import get_keras, try_import_tf

tf1, tf, _ = try_import_tf()
keras = get_keras()

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
X = np.array([[0.1, -0.2, 0.3], [0.5, 0.25, -1.0]], np.float32)
# Hand-set values: trunk kernel/bias, policy head kernel/bias, value head kernel/bias.
VALUES = {"trunk_k": 0.1, "trunk_b": 0.05, "pi_k": -0.3, "pi_b": 0.2, "vf_k": 0.7, "vf_b": -0.1}


class UnnamedLayers(TFModelV2):
    """A functional trunk (Input -> Dense(4, tanh)) and two attribute-held heads."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        inp = keras.layers.Input(shape=obs_space.shape)
        self.trunk = keras.Model(inp, keras.layers.Dense(4, activation="tanh")(inp))
        self.pi = keras.layers.Dense(num_outputs)
        self.vf = keras.layers.Dense(1)
        self.pi.build((None, 4))
        self.vf.build((None, 4))

    def forward(self, input_dict, state, seq_lens):
        h = self.trunk(input_dict["obs"])
        self._v = tf.reshape(self.vf(h), [-1])
        return self.pi(h), state

    def value_function(self):
        return self._v


ModelCatalog.register_custom_model("unnamed_layers", UnnamedLayers)
PPOEager = PPOTFPolicy.as_eager()


def make(tracing, seed=0):
    return PPOEager(
        OBS,
        ACT,
        {
            "framework": "tf2",
            "eager_tracing": bool(tracing),
            "seed": seed,
            "model": {"custom_model": "unnamed_layers"},
        },
    )


def set_known(policy):
    m = policy.model
    dense = m.trunk.layers[-1]
    for var, key in [
        (dense.kernel, "trunk_k"),
        (dense.bias, "trunk_b"),
        (m.pi.kernel, "pi_k"),
        (m.pi.bias, "pi_b"),
        (m.vf.kernel, "vf_k"),
        (m.vf.bias, "vf_b"),
    ]:
        var.assign(np.full(var.shape, VALUES[key], np.float32))


def expected_logits():
    """The model's forward pass in numpy for the hand-set values."""
    h = np.tanh(X @ np.full((3, 4), VALUES["trunk_k"]) + VALUES["trunk_b"])
    return h @ np.full((4, 2), VALUES["pi_k"]) + VALUES["pi_b"]


def logits(policy):
    return policy.compute_actions(X, explore=False)[2]["action_dist_inputs"]


def run(mode, checkpoint_dir, tracing):
    from rlpolicy.policy.policy import Policy

    if mode == "save":
        make(tracing), make(tracing)  # shift Keras' numbering in this process
        policy = make(tracing)
        set_known(policy)
        policy.export_checkpoint(checkpoint_dir)
    else:
        policy = Policy.from_checkpoint(checkpoint_dir)
    return {"names": [v.name for v in policy.variables()], "logits": np.asarray(logits(policy)).tolist()}


if __name__ == "__main__":
    mode, dirs = sys.argv[1], sys.argv[2:]
    print(json.dumps([run(mode, d, tracing) for tracing, d in enumerate(dirs)]))
