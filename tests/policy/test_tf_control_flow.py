"""policy._tf.control_flow: pruning dead While loop variables of a frozen TF1 graph.

A Keras LSTM built in a TF1 graph carries gradient accumulators as extra loop
variables. The invariant checked here: the pruned graph has fewer loop
variables, none of the accumulators, and computes the same outputs as the
original frozen graph when both run in fresh TF sessions.
"""

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.policy._tf.control_flow import (  # noqa: E402
    keep_functional_control_flow,
    prune_dead_loop_vars,
)
from rlpolicy.utils.framework import get_keras, try_import_tf  # noqa: E402

tf1, tf, _ = try_import_tf()

# The module prunes functional (v2) While loops; TF1 control flow (after
# tf1.disable_v2_behavior() or disable_control_flow_v2()) builds none.
pytestmark = pytest.mark.skipif(
    not tf1.control_flow_v2_enabled(), reason="TF1 control flow builds no functional While loops"
)


@pytest.fixture(scope="module")
def frozen_lstm():
    """(frozen GraphDef, input name, output names) of a tiny Keras LSTM in a TF1 graph."""
    keras = get_keras()
    graph = tf1.Graph()
    with graph.as_default():
        tf1.set_random_seed(0)
        x = tf1.placeholder(tf.float32, [None, 3, 2], name="x")
        seq, h, c = keras.layers.LSTM(4, return_sequences=True, return_state=True)(x)
        outputs = [tf.identity(t, name=n) for t, n in ((seq, "seq"), (h, "h"), (c, "c"))]
        sess = tf1.Session(graph=graph)
        sess.run(tf1.global_variables_initializer())
        names = [o.op.name for o in outputs]
        frozen = tf1.graph_util.convert_variables_to_constants(sess, graph.as_graph_def(), names)
    return tf1.graph_util.extract_sub_graph(frozen, names), "x:0", [f"{n}:0" for n in names]


def _while(graph_def):
    (node,) = [n for n in graph_def.node if n.op in ("While", "StatelessWhile")]
    return node


def _run(graph_def, inputs, outputs, value):
    with tf1.Session(graph=tf.Graph()) as sess:
        tf1.import_graph_def(graph_def, name="")
        return sess.run(outputs, {inputs: value})


def _accumulators(graph_def):
    return sum(1 for n in graph_def.node if n.op == "EmptyTensorList")


@pytest.mark.tf
def test_prune_drops_accumulators_and_keeps_outputs(frozen_lstm):
    frozen, x, outputs = frozen_lstm
    assert _accumulators(frozen) > 0  # the premise: Keras in a TF1 graph accumulates
    before = bytes(frozen.SerializeToString())
    pruned = prune_dead_loop_vars(frozen, outputs)
    assert frozen.SerializeToString() == before  # the input is not changed
    pruned = tf1.graph_util.extract_sub_graph(pruned, [o.split(":")[0] for o in outputs])
    n_before = len(_while(frozen).attr["T"].list.type)
    n_after = len(_while(pruned).attr["T"].list.type)
    assert n_after == n_before - _accumulators(frozen)
    assert _accumulators(pruned) == 0
    # The loop counter and maximum_iterations lead (tf2onnx reads them by position).
    assert list(_while(pruned).input)[:2] == list(_while(frozen).input)[:2]
    value = np.random.default_rng(0).normal(size=(5, 3, 2)).astype(np.float32)
    for want, got in zip(_run(frozen, x, outputs, value), _run(pruned, x, outputs, value)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_loop_output_that_is_read_stays(frozen_lstm):
    frozen, x, outputs = frozen_lstm
    node = _while(frozen)
    n = len(node.attr["T"].list.type)
    last = f"{node.name}:{n - 1}"  # the last loop variable is an accumulator
    pruned = prune_dead_loop_vars(frozen, outputs + [last])
    assert len(_while(pruned).attr["T"].list.type) == n - _accumulators(frozen) + 1


def test_keep_functional_control_flow_clears_lowering_everywhere(frozen_lstm):
    frozen, _, _ = frozen_lstm
    graph_def = type(frozen)()
    graph_def.CopyFrom(frozen)
    keep_functional_control_flow(graph_def)
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    flags = [n.attr["_lower_using_switch_merge"].b for n in nodes if "_lower_using_switch_merge" in n.attr]
    assert flags and not any(flags)
