"""utils.tf_modes: eager policy methods called from graph mode run eagerly.

Graph mode here is a ``tf1.Graph().as_default()`` block (what a TF1-mode process
is in everywhere); the same code runs in the RLPOLICY_TF_V1 pass.
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.policy.eager_tf_policy import EagerTFPolicy, build_eager_tf_policy  # noqa: E402
from rlpolicy.policy.policy import Policy  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.framework import try_import_tf  # noqa: E402
from rlpolicy.utils.tf_modes import make_methods_eager, runs_eagerly  # noqa: E402

pytestmark = pytest.mark.tf

tf1, tf, _ = try_import_tf()


def test_a_graph_mode_caller_gets_eager_mode_and_keeps_its_graph():
    seen = []
    square = runs_eagerly(lambda x: (seen.append(tf.executing_eagerly()), tf.constant(x) ** 2)[1])
    with tf1.Graph().as_default() as graph:
        assert not tf.executing_eagerly()
        out = square(3.0)
        assert tf1.get_default_graph() is graph and not tf.executing_eagerly()
    assert seen == [True] and float(out.numpy()) == 9.0


def test_a_tf_function_trace_is_not_switched_to_eager():
    seen = []
    double = runs_eagerly(lambda x: (seen.append(tf.executing_eagerly()), 2 * x)[1])

    @tf.function
    def traced(x):
        return double(x) + 1.0

    with tf1.Graph().as_default():
        out = runs_eagerly(traced)(4.0)  # eager mode for the call, not inside the trace
    assert seen == [False] and float(out.numpy()) == 9.0


class Counter:
    """A 1.x-style mixin: a public method that touches TF state."""

    def __init__(self):
        self.hits = tf.Variable(0.0, trainable=False)

    def hit(self):
        self.hits.assign_add(1.0)
        return float(self.hits.numpy())

    def _private(self):
        return tf.executing_eagerly()


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    return -tf.reduce_mean(dist_class(logits, model).logp(train_batch["actions"]))


def test_methods_of_built_classes_and_their_mixins_are_wrapped_once():
    cls = build_eager_tf_policy(
        "Counted", loss_fn=pg_loss, mixins=[Counter], before_loss_init=lambda p, o, a, c: Counter.__init__(p)
    )
    for name in ("__init__", "compute_single_action", "learn_on_batch", "get_state", "hit"):
        fn = getattr(cls, name)
        assert getattr(fn, "_rlpolicy_runs_eagerly", False), name
        assert not getattr(fn.__wrapped__, "_rlpolicy_runs_eagerly", False), name  # once
    assert Counter.hit is not cls.hit  # the mixin class itself is left alone
    assert not hasattr(cls._private, "__wrapped__")
    # `loss` keeps its identity: "does the class override Policy.loss?" stays answerable.
    assert EagerTFPolicy.loss is Policy.loss
    assert not hasattr(cls.with_tracing.__func__, "__wrapped__")  # classmethods stay
    assert make_methods_eager(cls) is cls and cls.hit.__wrapped__ is Counter.hit


def _arrays(weights):
    return [np.array(w) for w in (weights.values() if isinstance(weights, dict) else weights)]


def test_an_eager_policy_built_and_used_from_graph_mode():
    cls = build_eager_tf_policy(
        "Counted2", loss_fn=pg_loss, mixins=[Counter], before_loss_init=lambda p, o, a, c: Counter.__init__(p)
    )
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Discrete(2)
    obs = np.array([[0.5, -0.5, 1.0], [1.0, 0.0, -1.0]], np.float32)
    with tf1.Graph().as_default():
        policy = cls(obs_space, act_space, {"framework": "tf2", "model": {"fcnet_hiddens": [4]}, "lr": 0.1})
        before = _arrays(policy.get_weights())
        action, _, _ = policy.compute_single_action(obs[0], explore=False)
        assert act_space.contains(int(action))
        assert policy.hit() == 1.0 and policy.hit() == 2.0  # the mixin's method, too
        policy.learn_on_batch(SampleBatch({"obs": obs, "actions": np.array([0, 1])}))
        after = _arrays(policy.get_weights())
    assert any(not np.allclose(a, b) for a, b in zip(after, before))
