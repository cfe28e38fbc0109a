"""Eager TF state travels between instances and processes, as in RLlib 1.11.

1.11's eager policy stores ``get_weights()`` (a list in variable order) as
``get_state()["weights"]`` and assigns it by position. Client code here is a 1.x
custom model whose Keras layers are unnamed, so Keras numbers them per process
(``dense`` here, ``dense_3`` in the next instance): ``q.set_state(p.get_state())``
between two instances, and ``Policy.from_checkpoint`` in a fresh process, must work
(tf2, traced and untraced). Expected values: hand-set weights and a numpy forward pass.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _unnamed_layers_model as um  # noqa: E402

pytestmark = [pytest.mark.tf, pytest.mark.tf_eager_code]
ATOL = 1e-5


@pytest.fixture(params=[False, True], ids=["untraced", "traced"])
def tracing(request):
    return request.param


def test_set_state_between_two_instances(tracing):
    p, q = um.make(tracing, seed=1), um.make(tracing, seed=2)
    # The premise: the two instances' Keras names differ.
    assert [v.name for v in p.variables()] != [v.name for v in q.variables()]
    um.set_known(p)
    state = p.get_state()
    assert isinstance(state["weights"], list) and len(state["weights"]) == 6
    q.set_state(state)
    np.testing.assert_allclose(um.logits(q), um.expected_logits(), atol=ATOL)
    # get_weights() after set_state is the state's weights, in the same order.
    for got, want in zip(q.get_weights(), state["weights"]):
        np.testing.assert_array_equal(got, want)


def test_keyed_dict_of_another_instance_is_taken_by_position(tracing):
    # get_weights(as_dict=True) stays, and an older checkpoint's dict (keys with
    # another instance's Keras numbering) is assigned by position.
    p, q = um.make(tracing, seed=1), um.make(tracing, seed=2)
    um.set_known(p)
    keyed = p.get_weights(as_dict=True)
    assert isinstance(keyed, dict) and set(keyed) != set(q.get_weights(as_dict=True))
    q.set_weights(keyed)
    np.testing.assert_allclose(um.logits(q), um.expected_logits(), atol=ATOL)
    r = um.make(tracing, seed=3)
    r.set_state({**p.get_state(), "weights": keyed})
    np.testing.assert_allclose(um.logits(r), um.expected_logits(), atol=ATOL)


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda w: w[:-1], "set_weights got 5 arrays for the model's 6 variables"),
        (
            lambda w: w[:1] + [np.zeros((9, 9), np.float32)] + w[2:],
            r"has shape \(9, 9\), the model's is \(4,\)",
        ),
        (lambda w: {f"other_{i}": x for i, x in enumerate(w)}, "weights do not match the model's variables"),
    ],
    ids=["count", "shape", "foreign-keys"],
)
def test_state_that_does_not_fit_is_refused_and_changes_nothing(bad, match):
    p, q = um.make(False, seed=1), um.make(False, seed=2)
    um.set_known(p)
    before = q.get_weights()
    state = p.get_state()
    with pytest.raises(ValueError, match=match):
        q.set_state({**state, "weights": bad(state["weights"])})
    for got, want in zip(q.get_weights(), before):
        np.testing.assert_array_equal(got, want)


def _run(mode, dirs):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("RLPOLICY_TF_V1", None)  # the child is a plain (eager) process
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "_unnamed_layers_model.py"), mode, *map(str, dirs)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_checkpoint_restores_in_another_instance(tracing, tmp_path):
    p = um.make(tracing, seed=1)
    um.set_known(p)
    p.export_checkpoint(str(tmp_path))
    from rlpolicy.policy.policy import Policy

    q = Policy.from_checkpoint(str(tmp_path))
    assert [v.name for v in p.variables()] != [v.name for v in q.variables()]
    np.testing.assert_allclose(um.logits(q), um.expected_logits(), atol=ATOL)


@pytest.mark.learning  # (two fresh processes importing TensorFlow: about a minute)
def test_checkpoint_restores_in_a_fresh_process(tmp_path):
    # One process saves an untraced and a traced policy, a fresh one restores both.
    dirs = [tmp_path / "untraced", tmp_path / "traced"]
    saved, loaded = _run("save", dirs), _run("load", dirs)
    for before, after in zip(saved, loaded):
        assert before["names"] != after["names"]  # Keras numbered the layers differently
        np.testing.assert_allclose(before["logits"], um.expected_logits(), atol=ATOL)
        np.testing.assert_allclose(after["logits"], um.expected_logits(), atol=ATOL)
