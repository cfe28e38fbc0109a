"""The README's table of what `rlpolicy train` reaches on CartPole-v1 and the budgets that
benchmarks/bench_training.py checks are the same promises, row for row."""
import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _bench():
    pytest.importorskip("gymnasium")
    spec = importlib.util.spec_from_file_location("bench_training", ROOT / "benchmarks" / "bench_training.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _readme_promises():
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| (\w+)\s*\| (\w+)\s*\| solves within (\d+)k steps \|", text, re.M)
    return {(algo, fw): int(k) * 1000 for algo, fw, k in rows}


def test_readme_table_and_benchmark_promise_the_same():
    promised = _readme_promises()
    assert len(promised) == 9  # pg, ppo, dqn x torch, tf, tf2
    assert promised == _bench().PROMISES


def test_summary_keeps_a_promise_only_when_every_seed_solves_within_it():
    bench = _bench()
    runs = [{"solved": True, "steps": 1000, "wall_s": 2.0}, {"solved": True, "steps": 3000, "wall_s": 4.0},
            {"solved": True, "steps": 2000, "wall_s": 9.0}]
    s = bench.summarize(runs, promise=3000)
    assert (s["solved"], s["median_steps"], s["median_s"], s["max_steps"], s["kept"]) == (3, 2000, 4.0, 3000, True)
    assert bench.summarize(runs, promise=2500)["kept"] is False  # one seed needed more steps
    runs[0] = {"solved": False, "steps": 9000, "wall_s": 1.0}
    s = bench.summarize(runs, promise=10_000)
    assert (s["solved"], s["median_steps"], s["kept"]) == (2, 2500, False)  # medians over solved runs
