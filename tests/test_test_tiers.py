"""The suite's tiers and the `tf` marker behave as the README says: the default run leaves
out the learning / bench / slow / meta tiers, `-m` selects a tier, the TF1-mode pass runs
exactly the tests marked `tf` (a `framework` of "tf"/"tf2" marks itself), and a test that
runs TensorFlow ops without the marker fails, so it cannot silently miss that pass.

Each case runs pytest in a fresh process on a small suite written to a temp folder, with
this suite's conftest.py, guard and pytest settings copied next to it."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

SUITE = """
import pytest


def _tf_op():
    import tensorflow as tf

    total = tf.reduce_sum(tf.ones([2]))
    if tf.executing_eagerly():
        return float(total)
    with tf.compat.v1.Session() as sess:  # the TF1-mode pass: graph mode
        return float(sess.run(total))


def test_plain():
    assert 1 + 1 == 2


@pytest.mark.tf
def test_marked_tf():
    assert _tf_op() == 2.0


def test_unmarked_tf():
    assert _tf_op() == 2.0


@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
def test_framework_sweep(framework):
    if framework != "torch":
        assert _tf_op() == 2.0


@pytest.mark.parametrize("mode", [pytest.param("eager", marks=pytest.mark.tf_eager_code), "plain"])
def test_eager_code(mode):
    if mode == "eager":
        import tensorflow as tf

        assert tf.executing_eagerly()  # in the TF1-mode pass too: tf_eager_code's context
        assert _tf_op() == 2.0


@pytest.mark.learning
def test_learning():
    pass


@pytest.mark.bench
def test_bench():
    pass


@pytest.mark.meta
def test_meta():
    pass


@pytest.mark.slow
def test_slow():
    pass
"""


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory):
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs tensorflow (the guard watches TF ops)")
    d = tmp_path_factory.mktemp("tiers")
    shutil.copy(TESTS / "conftest.py", d / "conftest.py")
    shutil.copy(TESTS / "_tf_marker_guard.py", d / "_tf_marker_guard.py")
    # The project's pytest settings (markers, the default tier's -m) and nothing else.
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[tool\.pytest\.ini_options\]\n.*?(?=^\[)", text, re.M | re.S).group(0)
    (d / "pyproject.toml").write_text(section.replace('testpaths = ["tests"]\n', ""), encoding="utf-8")
    (d / "test_suite.py").write_text(SUITE, encoding="utf-8")
    return d


def _run(suite_dir, *args, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RLPOLICY_TF_V1", "PYTEST_"))}
    full_env.update(env, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", *args],
        cwd=suite_dir,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcomes = {
        name: outcome
        for outcome, name in re.findall(r"^(PASSED|FAILED) test_suite\.py::(\S+)", proc.stdout, re.M)
    }
    return proc, outcomes


def test_default_tier_and_guard(suite_dir):
    proc, got = _run(suite_dir)
    assert got == {
        "test_plain": "PASSED",
        "test_marked_tf": "PASSED",
        "test_unmarked_tf": "FAILED",
        "test_framework_sweep[torch]": "PASSED",
        "test_framework_sweep[tf]": "PASSED",
        "test_framework_sweep[tf2]": "PASSED",
        "test_eager_code[eager]": "PASSED",
        "test_eager_code[plain]": "PASSED",
    }, proc.stdout + proc.stderr
    assert "test_suite.py::test_unmarked_tf ran TensorFlow ops but is not marked `tf`" in proc.stdout
    assert "4 deselected" in proc.stdout  # learning, bench, meta, slow


def test_dash_m_selects_a_tier(suite_dir):
    proc, got = _run(suite_dir, "-m", "learning or meta")
    assert got == {"test_learning": "PASSED", "test_meta": "PASSED"}, proc.stdout + proc.stderr


def test_tf1_pass_runs_exactly_the_marked_tests(suite_dir):
    proc, got = _run(suite_dir, RLPOLICY_TF_V1="1")
    # No guard in that pass: the selection is the marker. The unmarked TF test is not run;
    # tf_eager_code implies tf.
    assert got == {
        "test_marked_tf": "PASSED",
        "test_framework_sweep[tf]": "PASSED",
        "test_framework_sweep[tf2]": "PASSED",
        "test_eager_code[eager]": "PASSED",
    }, proc.stdout + proc.stderr


def test_guard_can_record_instead_of_failing(suite_dir, tmp_path):
    log = tmp_path / "tf.jsonl"
    proc, got = _run(suite_dir, "-k", "test_unmarked_tf or test_plain", RLPOLICY_TF_GUARD=f"record:{log}")
    assert got == {"test_plain": "PASSED", "test_unmarked_tf": "PASSED"}, proc.stdout + proc.stderr
    lines = sorted(log.read_text().splitlines())
    assert lines == [
        '{"nodeid": "test_suite.py::test_plain", "marked": false, "used": false}',
        '{"nodeid": "test_suite.py::test_unmarked_tf", "marked": false, "used": true}',
    ]
