"""TF's start-up banners once, and no warning that rlpolicy's own calls cause.

The stderr of a fresh interpreter is what a user sees, so the checks run in
subprocesses and read their stderr.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlpolicy.utils.tf_modes import dedupe_lines

ROOT = Path(__file__).resolve().parents[2]


def _run(code, timeout=300):
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user's shell has it
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        env=env,
        timeout=timeout,
        cwd=str(ROOT),
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return proc.stdout.decode(), proc.stderr.decode(errors="replace")


def test_dedupe_lines_keeps_first_copy_ignoring_absl_prefix():
    data = (
        b"WARNING: All log messages before absl::InitializeLog() is called\n"
        b"I0000 00:00:1796163782.111613    5240 port.cc:153] oneDNN on\n"
        b"real error\n"
        b"WARNING: All log messages before absl::InitializeLog() is called\n"
        b"I0000 00:00:1796163786.709201    5240 port.cc:153] oneDNN on\n"
        b"\n\n"
        b"E0000 00:00:1796163786.9    5240 x.cc:1] other\n"
    )
    assert dedupe_lines(data) == (
        b"WARNING: All log messages before absl::InitializeLog() is called\n"
        b"I0000 00:00:1796163782.111613    5240 port.cc:153] oneDNN on\n"
        b"real error\n\n\n"
        b"E0000 00:00:1796163786.9    5240 x.cc:1] other\n"
    )


def test_capture_writes_everything_back_in_order_once():
    _, err = _run("""
        import os, sys
        from rlpolicy.utils.tf_modes import dedupe_native_stderr
        os.write(2, b"before\\n")
        with dedupe_native_stderr():
            os.write(2, b"I0000 00:00:1.5    12 a.cc:1] banner\\n")
            print("from python", file=sys.stderr)
            os.write(2, b"I0000 00:00:2.5    12 a.cc:1] banner\\n")
        os.write(2, b"after\\n")
    """)
    assert err == "before\nI0000 00:00:1.5    12 a.cc:1] banner\nfrom python\nafter\n"


def test_capture_restores_stderr_when_the_block_raises():
    _, err = _run("""
        import os
        from rlpolicy.utils.tf_modes import dedupe_native_stderr
        try:
            with dedupe_native_stderr():
                os.write(2, b"inside\\n")
                raise ImportError("no module")
        except ImportError:
            pass
        os.write(2, b"after\\n")
    """)
    assert err == "inside\nafter\n"


def test_tf_policy_construction_and_exports_are_quiet():
    pytest.importorskip("tensorflow")
    out, err = _run("""
        import os, tempfile
        import gymnasium as gym, numpy as np
        from rlpolicy.agents.pg.pg_tf_policy import PGTFPolicy
        obs, act = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)
        policy = PGTFPolicy(obs, act, {"framework": "tf", "model": {"fcnet_hiddens": [4]}})
        d = tempfile.mkdtemp()
        for i in range(2):
            policy.export_model(os.path.join(d, f"saved_{i}"))
            policy.export_checkpoint(os.path.join(d, f"ckpt_{i}"))
        print("ok", sorted(os.listdir(os.path.join(d, "saved_0"))))
    """)
    assert out.startswith("ok") and "saved_model.pb" in out
    for banner in ("All log messages before absl::InitializeLog()", "oneDNN custom operations are on"):
        assert err.count(banner) <= 1, err
    # No deprecation (or other) warning raised from rlpolicy's own code.
    assert not re.search(r"From \S*rlpolicy\S*: .*deprecated", err), err
    assert "build_tensor_info" not in err, err
    assert err.count("register_variables") <= 1, err
