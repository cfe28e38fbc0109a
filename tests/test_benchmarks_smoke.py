"""The README's benchmark commands run: each script end to end, with its smallest settings.

The README gives the full commands (minutes each); here every script named in a
README ```bash block runs once with few repeats, so a newcomer's paste does
not die on an import, an argument or a changed API. No time is asserted.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# script -> (small arguments, a line its report must contain, modules it needs)
SMALL = {
    "bench_torch_policy.py": (["--quick", "--repeats", "1"], "get_state + set_state", ("torch",)),
    "bench_tf_policy.py": (["--quick", "--repeats", "1"], "compute_actions batch=1", ("tensorflow",)),
    "bench_sampling.py": (
        ["--workers", "0", "--rounds", "1", "--envs", "2", "--fragment", "10"],
        "steps/s",
        ("torch",),
    ),
    "bench_deterministic_towers.py": (
        ["--quick", "--repeats", "1", "--frameworks", "torch"],
        "exact/default",
        ("torch",),
    ),
    "bench_offpolicy.py": (
        ["--repeats", "1", "--calls", "1", "--batch", "8", "--sac-batch", "8"],
        "SAC-style learn_on_batch",
        ("torch", "tensorflow"),
    ),
    "bench_dqn_loop.py": (
        ["--systems", "torch", "--rounds", "1", "--steps", "8", "--warmup", "0", "--calls", "2"],
        "env steps/s",
        ("torch",),
    ),
    "bench_training.py": (
        ["--frameworks", "torch", "--seeds", "0", "--max-steps", "1500", "--max-seconds", "10"],
        "README promise",
        ("torch",),
    ),
}


def readme_benchmarks():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)
    return {name for block in blocks for name in re.findall(r"benchmarks/(\w+\.py)", block)}


@pytest.mark.meta
def test_every_readme_benchmark_has_a_smoke_run():
    assert readme_benchmarks() == set(SMALL)


@pytest.mark.bench
@pytest.mark.parametrize("script", sorted(SMALL))
def test_benchmark_script_runs(script):
    args, expected, needs = SMALL[script]
    for module in needs:
        pytest.importorskip(module)
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout, done.stdout[-3000:]


def _cuda_visible():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_gpu_check_skips_cleanly_without_cuda(tmp_path):
    if _cuda_visible():
        pytest.skip("CUDA is visible: gpu_check.sh would run the full check (minutes)")
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), str(tmp_path / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu_check: SKIPPED, no CUDA device" in done.stdout
    assert not (tmp_path / "out").exists()  # nothing written when skipped


def test_gpu_check_checkpoint_round_trip_on_cpu(tmp_path):
    """The checkpoint half of gpu_check.py with the CPU as the writing device: the restored
    policy acts the same and its next Adam steps land on the weights the writer reached."""
    pytest.importorskip("torch")
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    gpu_check.checkpoint_write(str(tmp_path), "cpu")
    gpu_check.checkpoint_load(str(tmp_path))
    expected = np.load(tmp_path / "expected.npz")
    # a corrupted expectation is caught: the check compares, it does not just run
    bad = {k: expected[k] for k in expected.files}
    first = next(k for k in bad if k.startswith("after/"))
    bad[first] = bad[first] + 1.0
    np.savez(tmp_path / "expected.npz", **bad)
    with pytest.raises(AssertionError):
        gpu_check.checkpoint_load(str(tmp_path))
