"""rlpolicy.utils.framework: optional torch/tf imports; TF's eager mode is left on."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlpolicy.utils.framework import try_import_tf, try_import_torch

ROOT = Path(__file__).resolve().parents[2]


def test_try_import_torch_returns_torch_and_nn():
    torch = pytest.importorskip("torch")
    t, nn = try_import_torch()
    assert t is torch and nn is torch.nn
    assert try_import_torch(error=True)[0] is torch


def test_try_import_tf_returns_tf1_tf_and_major_version():
    tf = pytest.importorskip("tensorflow")
    tf1, tf_, version = try_import_tf()
    assert tf_ is tf and tf1 is tf.compat.v1
    assert version == int(tf.__version__.split(".")[0]) == 2


@pytest.mark.skipif(
    os.environ.get("RLPOLICY_TF_V1", "").strip().lower() not in ("", "0", "false", "tensorshape"),
    reason="RLPOLICY_TF_V1 turned eager execution off for this process on purpose "
    "(the TF1-mode pass); this test checks the default process",
)
def test_try_import_tf_keeps_eager_execution_enabled():
    tf = pytest.importorskip("tensorflow")
    tf1, _, _ = try_import_tf()
    assert tf.executing_eagerly()
    assert tf1.executing_eagerly_outside_functions()
    # Graph-mode code works inside its own graph while eager stays on outside it.
    with tf1.Graph().as_default():
        assert not tf.executing_eagerly()
    assert tf.executing_eagerly()


def _run(env_extra, body):
    env = dict(os.environ, **env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_eager_is_on_in_a_fresh_process_after_try_import_tf():
    pytest.importorskip("tensorflow")
    out = _run(
        {},
        """
        from rlpolicy.utils.framework import try_import_tf
        tf1, tf, v = try_import_tf()
        print(tf.executing_eagerly(), v)
    """,
    )
    assert out.splitlines()[-1] == "True 2"


def test_missing_frameworks_give_nones_and_error_flag_raises():
    out = _run(
        {"RLPOLICY_NO_TORCH": "1", "RLPOLICY_NO_TF": "1"},
        """
        import sys
        from rlpolicy.utils.framework import try_import_tf, try_import_torch
        torch, nn = try_import_torch()
        print(torch is None, nn is not None)
        class M(nn.Module):  # class definitions against nn still work without torch
            pass
        print(try_import_tf() == (None, None, None))
        for fn in (try_import_torch, try_import_tf):
            try:
                fn(error=True)
                print("no error")
            except ImportError as e:
                print("ImportError", "PyTorch" in str(e) or "TensorFlow" in str(e))
        print("torch" in sys.modules, "tensorflow" in sys.modules)
    """,
    )
    assert out.splitlines() == ["True True", "True", "ImportError True", "ImportError True", "False False"]
