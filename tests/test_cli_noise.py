"""rlpolicy's own calls print no framework noise a user cannot act on: TF's deprecation
notes for the TF1 graph tools the ONNX export uses, and TF's "triggered tf.function
retracing" warning for rlpolicy's traced functions (DQN tf2 builds several replayed
models, each traced once). Each check runs in a fresh process: TF prints a deprecation
note only once per process."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.tf

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
NOISE = ("is deprecated", "convert_variables_to_constants", "extract_sub_graph", "retracing")


def _python(code, timeout=300):
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _noise(stderr):
    return [line for line in stderr.splitlines() if any(n in line for n in NOISE)]


def test_tf_graph_onnx_export_prints_no_deprecation_notes(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf2onnx")
    proc = _python(f"""
        import os
        import gymnasium as gym
        from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy
        env = gym.make("CartPole-v1")
        p = PGTFPolicy(env.observation_space, env.action_space,
                       {{"framework": "tf", "model": {{"fcnet_hiddens": [8]}}}})
        p.export_model({str(tmp_path)!r}, onnx=13)
        assert any(f.endswith(".onnx") for f in os.listdir({str(tmp_path)!r}))
    """)
    assert _noise(proc.stderr) == []


@pytest.mark.tf_eager_code
def test_fast_functions_trace_without_tfs_retracing_warning(caplog):
    tf = pytest.importorskip("tensorflow")
    import logging

    from rlpolicy.utils.tf_utils import fast_function

    log = logging.getLogger("tensorflow")

    def body(x):  # runs while tracing, where TF logs its retracing warning
        log.warning("5 out of the last 5 calls to <body> triggered tf.function retracing.")
        log.warning("a user's own warning")
        return x * 2.0

    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        for n in (1, 2, 3):  # three signatures: three traces
            assert float(tf.reduce_sum(fast_function(body)(tf.ones([n])))) == 2.0 * n
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["a user's own warning"] * 3


def test_tf_log_filtered_drops_only_the_phrases_and_only_inside_the_block(caplog):
    pytest.importorskip("tensorflow")
    import logging

    from rlpolicy.utils.tf_utils import tf_log_filtered

    log = logging.getLogger("tensorflow")
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        with tf_log_filtered("noise phrase"):
            log.warning("a noise phrase here")
            log.warning("a real warning")
        log.warning("noise phrase after the block")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["a real warning", "noise phrase after the block"]
    assert not any(isinstance(f, logging.Filter) and hasattr(f, "phrases") for f in log.filters)


@pytest.mark.learning
def test_dqn_tf2_training_prints_no_retracing_warning(tmp_path):
    pytest.importorskip("tensorflow")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlpolicy.cli",
            "train",
            "--algo",
            "dqn",
            "--framework",
            "tf2",
            "--stop-timesteps",
            "2000",
            "--eval-episodes",
            "2",
            "--progress-bar",
            "off",
            "--out",
            str(tmp_path / "run"),
            "--config",
            '{"learning_starts": 200, "timesteps_per_iteration": 500}',
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr
    assert _noise(proc.stderr) == []
