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


@pytest.mark.meta
def test_readme_table_and_benchmark_promise_the_same():
    promised = _readme_promises()
    assert len(promised) == 9  # pg, ppo, dqn x torch, tf, tf2
    assert promised == _bench().PROMISES


def test_summary_keeps_a_promise_only_when_every_seed_solves_within_it():
    bench = _bench()
    runs = [
        {"solved": True, "steps": 1000, "train_s": 2.0, "wall_s": 3.0},
        {"solved": True, "steps": 3000, "train_s": 4.0, "wall_s": 4.5},
        {"solved": True, "steps": 2000, "train_s": 9.0, "wall_s": 12.0},
    ]
    s = bench.summarize(runs, promise=3000)
    assert (s["solved"], s["median_steps"], s["median_s"], s["max_steps"], s["kept"]) == (
        3,
        2000,
        4.0,
        3000,
        True,
    )
    assert s["median_total_s"] == 4.5  # with construction; median_s is the training loop's
    assert bench.summarize(runs, promise=2500)["kept"] is False  # one seed needed more steps
    runs[0] = {"solved": False, "steps": 9000, "train_s": 1.0, "wall_s": 1.5}
    s = bench.summarize(runs, promise=10_000)
    assert (s["solved"], s["median_steps"], s["kept"]) == (2, 2500, False)  # medians over solved runs


def test_variant_overrides_merge_into_the_defaults_and_bad_ones_are_refused():
    import argparse

    bench = _bench()
    name, over = bench._variant('kl0={"kl_coeff": 0.0, "model": {"fcnet_hiddens": [32]}}')
    assert (name, over) == ("kl0", {"kl_coeff": 0.0, "model": {"fcnet_hiddens": [32]}})
    merged = bench._merged({"lr": 1.0, "model": {"fcnet_hiddens": [64], "vf_share_layers": False}}, over)
    assert merged == {"lr": 1.0, "kl_coeff": 0.0, "model": {"fcnet_hiddens": [32], "vf_share_layers": False}}
    for bad in ("kl0", "={}", "x=[1]", "x={nope"):
        with pytest.raises(argparse.ArgumentTypeError, match="--variant"):
            bench._variant(bad)


@pytest.mark.learning
def test_main_job_defaults_evaluate_every_iteration_and_solve_early():
    """PPO torch with the shipped CartPole-v1 defaults (the main job): a greedy evaluation after
    every 2000-step iteration, so a seed that solves early stops early (seed 4: at 4k steps,
    while its training mean is still far below 475; a few seconds)."""
    pytest.importorskip("torch")
    bench = _bench()
    r = bench.run_rlpolicy("ppo", "torch", 4, max_steps=20_000, max_seconds=300)
    assert r["solved"] and r["eval_mean"] >= 475, r
    assert r["steps"] <= 20_000 and r["steps"] % 2000 == 0
    assert r["evaluations"] == r["steps"] // 2000  # one per iteration, none after solving
