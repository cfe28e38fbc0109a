"""Test helpers for the exploration tests: fake distributions and a per-framework driver.

The fakes implement just what explorations use (``inputs``, ``sample``,
``deterministic_sample``, ``sampled_action_logp``,
``required_model_output_shape``), so the tests check the explorations' own
behaviour. ``Driver`` runs an exploration the way a policy of the given
framework does: torch and tf2 call it directly; "tf" builds the ops once in a
private ``tf1.Graph`` (inputs, timestep and explore fed through placeholders)
and runs them in that graph's Session.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import tree

# Fixed seeds keep the statistical tests reproducible; another value checks their tolerances.
SEED = int(os.environ.get("EXPLORATION_TEST_SEED", "0"))


def _tf():
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf(error=True)
    return tf1, tf


def _torch():
    import torch

    return torch


# ----------------------------------------------------------------------------
# Fake distributions.
# ----------------------------------------------------------------------------
class TFFakeCategorical:
    """Categorical over logits [B, n] (tf)."""

    def __init__(self, inputs: Any, model: Any = None):
        _, tf = _tf()
        self.inputs, self.model = inputs, model
        self._sample = tf.squeeze(tf.random.categorical(inputs, 1), axis=1)
        self._logp = tf.reduce_sum(
            tf.nn.log_softmax(inputs) * tf.one_hot(self._sample, tf.shape(inputs)[1]), axis=1
        )

    def sample(self):
        return self._sample

    def sampled_action_logp(self):
        return self._logp

    def deterministic_sample(self):
        _, tf = _tf()
        return tf.argmax(self.inputs, axis=1)

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return action_space.n


class TorchFakeCategorical:
    """Categorical over logits [B, n] (torch)."""

    def __init__(self, inputs: Any, model: Any = None):
        torch = _torch()
        self.inputs, self.model = inputs, model
        self._dist = torch.distributions.Categorical(logits=inputs)
        self._last = None

    def sample(self):
        self._last = self._dist.sample()
        return self._last

    def sampled_action_logp(self):
        return self._dist.log_prob(self._last)

    def deterministic_sample(self):
        self._last = self.inputs.argmax(dim=1)
        return self._last

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return action_space.n


class TFFakeDeterministic:
    """Point mass at the inputs [B, d] (tf); sample == deterministic_sample, logp 0."""

    def __init__(self, inputs: Any, model: Any = None):
        self.inputs, self.model = inputs, model

    def sample(self):
        return self.inputs

    deterministic_sample = sample

    def sampled_action_logp(self):
        _, tf = _tf()
        return tf.zeros(tf.shape(self.inputs)[:1])

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return int(np.prod(action_space.shape))


class TorchFakeDeterministic:
    """Point mass at the inputs [B, d] (torch)."""

    def __init__(self, inputs: Any, model: Any = None):
        self.inputs, self.model = inputs, model

    def sample(self):
        return self.inputs

    deterministic_sample = sample

    def sampled_action_logp(self):
        return _torch().zeros(self.inputs.shape[:1])

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return int(np.prod(action_space.shape))


def struct_dist_class(space: gym.Space, framework: str) -> type:
    """A fake distribution over any (nested) space whose deterministic action is all zeros."""

    def zeros_like_space(batch: Any) -> Any:
        from rlpolicy.utils.exploration._ops import base_struct_from_space

        def leaf(s):
            shape = (batch,) + tuple(s.shape)
            if framework == "torch":
                return _torch().zeros(shape, dtype=getattr(_torch(), np.dtype(s.dtype).name))
            _, tf = _tf()
            shape = tf.concat([[batch], tf.constant(list(s.shape), tf.int32)], 0)
            return tf.zeros(shape, dtype=s.dtype)

        return tree.map_structure(leaf, base_struct_from_space(space))

    class _StructDist:
        def __init__(self, inputs: Any, model: Any = None):
            self.inputs, self.model = inputs, model

        def deterministic_sample(self):
            batch = self.inputs.shape[0] if framework == "torch" else _tf()[1].shape(self.inputs)[0]
            return zeros_like_space(batch)

        sample = deterministic_sample

        def required_model_output_shape(self, action_space, model_config):
            return int(self.inputs.shape[1])

    return _StructDist


FAKES = {
    "categorical": {"torch": TorchFakeCategorical, "tf": TFFakeCategorical},
    "deterministic": {"torch": TorchFakeDeterministic, "tf": TFFakeDeterministic},
}


def fake_dist(kind: str, framework: str) -> type:
    return FAKES[kind]["torch" if framework == "torch" else "tf"]


# ----------------------------------------------------------------------------
# Driver.
# ----------------------------------------------------------------------------
class Driver:
    """Builds an exploration for ``framework`` and calls it like a policy would."""

    def __init__(self, framework: str, make: Callable[[], Any], dist_cls: type, in_dim: int):
        self.framework, self.dist_cls, self.in_dim = framework, dist_cls, in_dim
        if framework == "torch":
            _torch().manual_seed(SEED)
        elif framework == "tf2":
            _tf()[1].random.set_seed(SEED)
        if framework != "tf":
            self.exploration = make()
            self.exploration.action_space.seed(SEED)
            return
        tf1, tf = _tf()
        self.graph = tf1.Graph()
        with self.graph.as_default():
            tf1.set_random_seed(SEED)
            self.exploration = make()
            self.exploration.action_space.seed(SEED)
            self.inputs_ph = tf1.placeholder(tf.float32, [None, in_dim], name="inputs")
            self.ts_ph = tf1.placeholder(tf.int64, [], name="timestep")
            self.explore_ph = tf1.placeholder(tf.bool, [], name="explore")
            self.ops = self._build(self.ts_ph)
            self.ops_no_ts = None  # Built on first use: graph building is slow.
            self.sess = tf1.Session(graph=self.graph)
            self.sess.run(tf1.global_variables_initializer())

    def _build(self, timestep: Any) -> Any:
        dist = self.dist_cls(self.inputs_ph)
        return self.exploration.get_exploration_action(
            action_distribution=dist, timestep=timestep, explore=self.explore_ph
        )

    def act(self, inputs: np.ndarray, timestep: Optional[int], explore: bool = True):
        """Returns (actions, logp) as numpy structures."""
        inputs = np.asarray(inputs, dtype=np.float32)
        if self.framework == "tf":
            if timestep is None and self.ops_no_ts is None:
                with self.graph.as_default():
                    self.ops_no_ts = self._build(None)
            ops = self.ops if timestep is not None else self.ops_no_ts
            feed = {self.inputs_ph: inputs, self.explore_ph: explore}
            if timestep is not None:
                feed[self.ts_ph] = timestep
            return self.sess.run(ops, feed)
        if self.framework == "torch":
            dist = self.dist_cls(_torch().from_numpy(inputs))
        else:
            dist = self.dist_cls(_tf()[1].constant(inputs))
        out = self.exploration.get_exploration_action(
            action_distribution=dist, timestep=timestep, explore=explore
        )
        return tree.map_structure(_to_numpy, out)

    def get_state(self) -> dict:
        if self.framework == "tf":
            return self.exploration.get_state(self.sess)
        return self.exploration.get_state()

    def set_state(self, state: dict) -> None:
        if self.framework == "tf":
            self.exploration.set_state(state, self.sess)
        else:
            self.exploration.set_state(state)


def _to_numpy(x: Any) -> Any:
    if x is None:
        return None
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "numpy"):
        return x.numpy()
    return np.asarray(x)


def exploration_kwargs(action_space: gym.Space, framework: str, **extra: Any) -> dict:
    """The constructor keywords a policy passes, plus ``extra``."""
    return dict(
        action_space=action_space,
        framework=framework,
        policy_config={},
        model=None,
        num_workers=0,
        worker_index=0,
        **extra,
    )
