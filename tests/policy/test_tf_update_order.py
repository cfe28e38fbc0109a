"""Graph TF: one learn step reads every variable before it updates any.

The session run of ``learn_on_batch`` computes the losses, stats and gradients and
runs the apply ops together; an apply op waits only for its own gradient. Here the
first loss, ``-a * mean(r)``, has a gradient that does not need ``a``'s value, while
the second loss, ``(b - a)^2``, and a stat read ``a``: without an ordering the session
may update ``a`` first (seen as two different ``loss_b`` values over 300 identical
steps, and as a CI failure of the SAC-style example). Expectations are worked by hand:
with a0 = 1, b0 = 0, mean(r) = 1 and SGD lr 0.1, one step gives a1 = 1.1,
b1 = 0 - 0.1 * 2 * (0 - 1) = 0.2, loss_b = 1 and a_seen = 1.
"""

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy.models.tf.tf_modelv2 import TFModelV2
from rlpolicy.policy.sample_batch import SampleBatch
from rlpolicy.policy.tf_policy_template import build_tf_policy
from rlpolicy.utils.framework import try_import_tf

tf1, tf, _ = try_import_tf()
pytestmark = [pytest.mark.tf, pytest.mark.skipif(tf is None, reason="needs tensorflow")]

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
LR = 0.1


class TwoScalarModel(TFModelV2):
    """Acting logits from a fixed kernel; two trained scalars ``a`` and ``b``."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.kernel = tf.Variable(np.zeros((3, 2), np.float32), trainable=False, name=f"{name}_kernel")
        self.a = tf.Variable(1.0, name=f"{name}_a")
        self.b = tf.Variable(0.0, name=f"{name}_b")

    def forward(self, input_dict, state, seq_lens):
        return tf.matmul(input_dict["obs_flat"], self.kernel), state


def make_model(policy, obs_space, action_space, config):
    return TwoScalarModel(obs_space, action_space, 2, config["model"], "two_scalars")


def losses(policy, model, dist_class, train_batch):
    # Each use of a variable in a graph op is its own read.
    loss_a = -model.a * tf.reduce_mean(train_batch[SampleBatch.REWARDS])
    loss_b = tf.square(model.b - model.a)
    policy.order_stats = {"loss_b": loss_b, "a_seen": tf.identity(model.a), "b_seen": tf.identity(model.b)}
    return [loss_a, loss_b]


def gradients(policy, optimizers, loss_list):
    m = policy.model
    return [
        opt.compute_gradients(loss, var_list=[v]) for opt, loss, v in zip(optimizers, loss_list, (m.a, m.b))
    ]


TwoLossPolicy = build_tf_policy(
    name="TwoLossPolicy",
    loss_fn=losses,
    stats_fn=lambda policy, batch: dict(policy.order_stats),
    optimizer_fn=lambda policy, config: [tf1.train.GradientDescentOptimizer(LR) for _ in range(2)],
    compute_gradients_fn=gradients,
    make_model=make_model,
    get_default_config=lambda: {"_tf_policy_handles_more_than_one_loss": True},
)


def train_batch(n=8):
    rng = np.random.default_rng(0)
    return SampleBatch(
        {
            SampleBatch.OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: rng.integers(0, 2, n),
            SampleBatch.REWARDS: np.ones(n, np.float32),  # mean(r) = 1
        }
    )


def make(**config):
    return TwoLossPolicy(OBS, ACT, dict({"framework": "tf", "train_batch_size": 8}, **config))


def scalars(policy):
    return [float(x) for x in policy.get_session().run([policy.model.a, policy.model.b])]


def ancestors(roots):
    """Every op the ops of ``roots`` depend on (data and control inputs)."""
    stack, seen = [r.op if isinstance(r, tf.Tensor) else r for r in roots], set()
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def assert_updates_after_reads(update_root, read_tensors):
    """Every variable-writing op under ``update_root`` runs after every read tensor."""
    upstream = ancestors([update_root])
    writes = [
        op for op in upstream if op.type.startswith(("ResourceApply", "Apply", "AssignVariable", "AssignAdd"))
    ]
    assert writes, "no update ops found"
    for write in writes:
        before = ancestors([write])
        for t in read_tensors:
            assert t.op in before, f"{write.name} may run before {t.name}"


def test_one_step_reads_before_it_writes():
    pol = make()
    stats = {k: pol.order_stats[k] for k in ("loss_b", "a_seen", "b_seen")}
    assert_updates_after_reads(pol._apply_op, [*stats.values(), *pol._losses])
    state = pol.get_state()
    seen = set()
    for _ in range(100):
        pol.set_state(state)
        out = pol.learn_on_batch(train_batch())["learner_stats"]
        seen.add((float(out["loss_b"]), float(out["a_seen"]), *scalars(pol)))
    assert len(seen) == 1, seen
    loss_b, a_seen, a1, b1 = seen.pop()
    assert (loss_b, a_seen) == pytest.approx((1.0, 1.0), abs=1e-6)
    assert (a1, b1) == pytest.approx((1.1, 0.2), abs=1e-6)


def test_apply_gradients_still_feeds_the_gradients():
    """The gate sits on the gradient tensors: feeding them (apply_gradients) needs no batch."""
    pol = make()
    grads, _ = pol.compute_gradients(train_batch())
    np.testing.assert_allclose([g[0] for g in grads], [-1.0, 2.0 * (0.0 - 1.0)], atol=1e-6)
    pol.apply_gradients([[np.float32(-2.0)], [np.float32(1.0)]])
    assert scalars(pol) == pytest.approx((1.0 + LR * 2.0, 0.0 - LR * 1.0), abs=1e-6)


def test_fake_gpu_towers_read_before_they_write():
    pol = make(num_gpus=2, _fake_gpus=True, sgd_minibatch_size=8)
    stack = pol.multi_gpu_tower_stacks[0]
    reads = [
        t
        for tower in stack._towers
        for t in (*tower.loss_graph._losses, tower.loss_graph.order_stats["a_seen"])
    ]
    assert_updates_after_reads(stack._train_op, reads)
    pol.load_batch_into_buffer(train_batch(), buffer_index=0)
    out = pol.learn_on_loaded_batch(offset=0, buffer_index=0)["tower_0"]["learner_stats"]
    assert float(out["a_seen"]) == pytest.approx(1.0, abs=1e-6)
    assert scalars(pol) == pytest.approx((1.1, 0.2), abs=1e-6)
