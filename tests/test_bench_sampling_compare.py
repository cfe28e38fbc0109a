"""``benchmarks/bench_sampling.py --compare`` (raw loop vs rlpolicy vs SB3) runs end to end
with its smallest settings, and its raw loop's GAE matches a hand-worked case."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.bench
def test_compare_mode_prints_the_side_by_side_table():
    pytest.importorskip("torch")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_sampling.py"), "--compare", "--compare-envs", "1,2"]
        + ["--fragment", "5", "--rounds", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "vs raw" in done.stdout and "rlpolicy    2" in done.stdout, done.stdout


def test_raw_loop_gae_is_the_textbook_recursion():
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_sampling import GAMMA, LAMBDA, RawSampler
    finally:
        sys.path.pop(0)
    raw = RawSampler(num_envs=2, fragment=6, seed=3)
    out = raw.sample()
    values = out["value_targets"] - out["advantages"]
    assert out["obs"].shape == (6, 2, 4) and out["actions"].shape == (6, 2)
    # adv_t = delta_t + gamma * lambda * (1 - done_t) * adv_{t+1},
    # delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t.
    adv, live = out["advantages"], 1.0 - out["dones"]
    for t in range(5):
        delta = adv[t] - GAMMA * LAMBDA * live[t] * adv[t + 1]
        want = out["rewards"][t] + GAMMA * values[t + 1] * live[t] - values[t]
        np.testing.assert_allclose(delta, want, atol=1e-5)
