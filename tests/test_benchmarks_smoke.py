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
    "bench_sampling.py": (["--workers", "0", "--rounds", "1", "--envs", "2", "--fragment", "10"],
                          "steps/s", ("torch",)),
    "bench_training.py": (["--frameworks", "torch", "--seeds", "0", "--max-steps", "1500",
                           "--max-seconds", "10"], "README promise", ("torch",)),
}


def readme_benchmarks():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)
    return {name for block in blocks for name in re.findall(r"benchmarks/(\w+\.py)", block)}


def test_every_readme_benchmark_has_a_smoke_run():
    assert readme_benchmarks() == set(SMALL)


@pytest.mark.parametrize("script", sorted(SMALL))
def test_benchmark_script_runs(script):
    args, expected, needs = SMALL[script]
    for module in needs:
        pytest.importorskip(module)
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout, done.stdout[-3000:]
