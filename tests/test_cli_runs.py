"""`rlpolicy train` runs a user can trust: Ctrl-C (real SIGINT, twice), re-running into an
existing --out (refuse / --overwrite / --resume), checkpoint_best, the progress bar when
Ray has replaced ``print``, ONE progress.csv column set for every algorithm x framework,
and missing optional packages reported before training starts.

The subprocess tests drive the real command (``python -m rlpolicy.cli``); missing packages
are simulated with a meta-path finder that blocks their import in that process.
"""

import builtins
import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from rlpolicy.cli import commands, run_outputs, train_run
from rlpolicy.cli.run_outputs import PROGRESS_COLUMNS, RunRecord
from rlpolicy.cli.train_run import RunOptions, run_training
from rlpolicy.utils.metrics.iteration import IterationResult

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
TINY_PG = json.dumps(
    {
        "train_batch_size": 200,
        "rollout_fragment_length": 200,
        "batch_mode": "truncate_episodes",
        "model": {"fcnet_hiddens": [8]},
    }
)


def _blocked_main(blocked, argv):
    """``python -c`` code: block the top-level modules ``blocked``, then run the CLI."""
    return textwrap.dedent(f"""
        import importlib.abc, sys
        BLOCKED = {tuple(blocked)!r}
        class _Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by test)")
        sys.meta_path.insert(0, _Block())
        for name in list(sys.modules):
            if name.split(".")[0] in BLOCKED:
                del sys.modules[name]
        from rlpolicy.cli import main
        sys.exit(main({list(argv)!r}))
    """)


def _run(code_or_argv, timeout=180):
    cmd = (
        [sys.executable, "-c", code_or_argv]
        if isinstance(code_or_argv, str)
        else [sys.executable, "-m", "rlpolicy.cli", *code_or_argv]
    )
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV)


def _last_line(text):
    return text.strip().splitlines()[-1]


# ------------------------------------------------------------------ Ctrl-C, twice


def test_two_real_sigints_keep_the_checkpoint_and_exit_130(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    # Pendulum episodes last 200 steps, so a final evaluation of 300 of them takes seconds.
    cmd = [
        sys.executable,
        "-m",
        "rlpolicy.cli",
        "train",
        "--algo",
        "pg",
        "--env",
        "Pendulum-v1",
        "--stop-reward",
        "0",
        "--num-envs",
        "2",
        "--config",
        TINY_PG,
        "--eval-episodes",
        "300",
        "--progress-bar",
        "off",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    lines = []
    try:

        def wait_for(pattern):
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line.rstrip("\n"))
                if re.search(pattern, line):
                    return
            raise AssertionError(f"no line matching {pattern!r}: {lines}")

        wait_for(r"^iter +1 ")
        proc.send_signal(signal.SIGINT)  # first: stop training, save, evaluate
        wait_for(r"^final evaluation \(300 episodes, explore off\) \.\.\.$")
        proc.send_signal(signal.SIGINT)  # second: during the final evaluation
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines += rest.splitlines()
    assert proc.returncode == 130, (lines, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert _last_line(err) == f"interrupted again: final evaluation skipped; the checkpoint is in {out}"
    assert any(line.startswith("interrupted: saving the checkpoint") for line in lines)
    assert not any(": mean return" in line for line in lines if line.startswith("final evaluation"))
    # The checkpoint was written before the evaluation: it loads and acts.
    from rlpolicy.policy.policy import Policy

    record = run_outputs.read_run_record(str(out))
    policy = Policy.from_checkpoint(str(out))
    assert type(policy).__name__ == "PGTorchPolicy" and record.iteration >= 1
    action = policy.compute_single_action(np.zeros(3, np.float32), explore=False)[0]
    assert np.shape(action) == (1,)
    rows = list(csv.DictReader(open(out / "progress.csv")))
    assert len(rows) == record.iteration and rows[-1]["eval_reward_mean"] == ""
    assert not (out / "learning_curve.png").exists()


# ------------------------------------------------------------------ an existing --out


def _pg(out, *extra):
    return [
        "train",
        "--algo",
        "pg",
        "--num-envs",
        "2",
        "--config",
        TINY_PG,
        "--eval-episodes",
        "2",
        "--stop-reward",
        "1e9",
        "--progress-bar",
        "off",
        "--out",
        str(out),
        *extra,
    ]


def _main(argv, capsys):
    """(exit code, stdout, stderr) of ``rlpolicy <argv>`` run in this process."""
    try:
        code = commands.main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_existing_out_is_refused_then_overwritten_then_resumed(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    code, _, err = _main(_pg(out, "--stop-timesteps", "400", "--checkpoint-every", "1"), capsys)
    assert code == 0, err
    periodic = sorted(p.name for p in out.glob("checkpoint_0*"))
    assert len(periodic) == 2
    code, stdout, err = _main(["evaluate", str(out / "checkpoint_best"), "--episodes", "2"], capsys)
    assert code == 0 and f"from {out / 'checkpoint_best'} on CartPole-v1" in stdout, err

    code, stdout, err = _main(_pg(out, "--stop-timesteps", "400"), capsys)
    assert code == 2 and stdout == ""
    last = _last_line(err)
    assert last.startswith(f"rlpolicy train: error: argument --out: '{out}' already holds a run (")
    assert "--overwrite" in last and "--resume" in last
    assert sorted(p.name for p in out.glob("checkpoint_0*")) == periodic  # nothing deleted

    before = (out / "progress.csv").read_text()
    first_record = run_outputs.read_run_record(str(out))
    code, stdout, err = _main(_pg(out, "--stop-timesteps", "800", "--resume"), capsys)
    assert code == 0, err
    assert f"resumed at step {first_record.timesteps_total} (iteration {first_record.iteration})" in stdout
    after = (out / "progress.csv").read_text()
    assert after.startswith(before)  # appended, not rewritten
    rows = list(csv.DictReader(open(out / "progress.csv")))
    iterations = [int(r["iteration"]) for r in rows]
    assert iterations == list(range(1, len(rows) + 1)) and len(rows) > first_record.iteration
    steps = [int(r["timesteps_total"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] >= 800
    record = run_outputs.read_run_record(str(out))
    assert (record.iteration, record.timesteps_total) == (iterations[-1], steps[-1])

    code, _, err = _main(["train", "--algo", "ppo", "--out", str(out), "--resume"], capsys)
    assert code == 2
    assert "holds a run of --algo pg --framework torch --env CartPole-v1" in _last_line(err)

    code, _, err = _main(_pg(out, "--stop-timesteps", "200", "--overwrite"), capsys)
    assert code == 0, err
    assert list(out.glob("checkpoint_0*")) == []  # the earlier run's periodic checkpoints
    rows = list(csv.DictReader(open(out / "progress.csv")))
    assert [r["iteration"] for r in rows] == ["1"]


def test_the_real_command_refuses_an_existing_run_in_one_line(tmp_path):
    pytest.importorskip("torch")  # the --out check comes after the default --framework torch's
    (tmp_path / "progress.csv").write_text("iteration\n")
    (tmp_path / "checkpoint_000003").mkdir()
    (tmp_path / "checkpoint_000003" / "rlpolicy_run.json").write_text("{}")
    proc = _run(["train", "--out", str(tmp_path)])
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert _last_line(proc.stderr) == (
        f"rlpolicy train: error: argument --out: '{tmp_path}' already holds a run (progress.csv, "
        "checkpoint_000003/); pass --overwrite to replace it or --resume to continue it"
    )
    assert (tmp_path / "checkpoint_000003").is_dir()


def test_resume_restores_weights_optimizer_and_counters(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    assert commands.main(_pg(out, "--stop-timesteps", "400")) == 0
    saved = run_outputs.read_run_record(str(out))
    from rlpolicy._core.checkpoint import read_checkpoint

    state = read_checkpoint(str(out)).state
    seen = {}

    def capture(trainer, env_creator, opts, log=None):
        seen["state"] = trainer.policy.get_state()
        seen["result"] = trainer.train()
        seen["opts"] = opts
        raise SystemExit(0)

    monkeypatch.setattr(train_run, "run_training", capture)
    with pytest.raises(SystemExit):
        commands.main(_pg(out, "--stop-timesteps", "800", "--resume"))
    got = seen["state"]
    for k, w in state["weights"].items():
        np.testing.assert_array_equal(got["weights"][k], w)
    assert got["global_timestep"] == state["global_timestep"] == saved.timesteps_total
    # Adam's moments and step counts: the saved run's, not a fresh optimizer's.
    saved_params = list(state["_optimizer_variables"][0]["state"].values())
    got_params = list(got["_optimizer_variables"][0]["state"].values())
    assert len(got_params) == len(saved_params) > 0
    for s, g in zip(saved_params, got_params):
        assert float(np.asarray(g["step"])) == float(np.asarray(s["step"])) > 0
        np.testing.assert_array_equal(np.asarray(g["exp_avg_sq"]), np.asarray(s["exp_avg_sq"]))
    result = seen["result"]
    assert result.iteration == saved.iteration + 1
    assert result.timesteps_total >= saved.timesteps_total + 200
    assert result.episodes_total > saved.episodes_total
    assert seen["opts"].resume and seen["opts"].record.timesteps_total == saved.timesteps_total


# ------------------------------------------------------------------ run_training: best, bar, rows


class _FakePolicy:
    def __init__(self):
        self.version = 0

    def get_weights(self):
        return {"w": np.full(2, float(self.version), np.float32)}

    def export_checkpoint(self, directory):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "rlpolicy_checkpoint.json"), "w") as f:
            json.dump({"version": self.version}, f)


class _ScriptedTrainer:
    """Replays training means, 1000 steps per iteration; the policy's version is the iteration."""

    def __init__(self, means, stats=None):
        self.means, self.i, self.policy = list(means), 0, _FakePolicy()
        self.stats = stats or {"total_loss": 0.2 - 0.1 / 3, "allreduce_latency": 0.0}

    def train(self):
        self.i += 1
        self.policy.version = self.i
        return IterationResult(
            self.i, 1000 * self.i, self.means[self.i - 1], 10 * self.i, dict(self.stats), 0.0
        )


@pytest.fixture
def scripted_evals(monkeypatch):
    values = []
    monkeypatch.setattr(train_run, "evaluate_policy", lambda policy, creator, n, seed: [values.pop(0)] * n)
    return values


def _opts(tmp_path, **kw):
    kw.setdefault("record", RunRecord(algo="ppo", framework="torch", env="CartPole-v1"))
    return RunOptions(out_dir=str(tmp_path), progress_bar=False, **kw)


def _version(directory):
    return json.loads((Path(directory) / "rlpolicy_checkpoint.json").read_text())["version"]


def test_checkpoint_best_keeps_the_best_evaluation_and_the_last_stays_in_out(tmp_path, scripted_evals):
    scripted_evals.extend([100.0, 300.0, 200.0, 150.0])  # evaluations at iterations 1, 2, 3, final 4
    summary = run_training(
        _ScriptedTrainer([10, 20, 30, 40]),
        None,
        _opts(tmp_path, stop_reward=475, stop_timesteps=4000, eval_every=1, eval_episodes=2),
        log=lambda s: None,
    )
    assert summary.reason == "timesteps" and summary.best_dir == str(tmp_path / "checkpoint_best")
    assert _version(tmp_path / "checkpoint_best") == 2  # the policy that scored 300
    best = run_outputs.read_run_record(str(tmp_path / "checkpoint_best"))
    assert (best.iteration, best.eval_reward_mean, best.extra) == (
        2,
        300.0,
        {"best_by": "eval_reward_mean", "score": 300.0},
    )
    assert _version(tmp_path) == 4 and run_outputs.read_run_record(str(tmp_path)).iteration == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".old-"))]  # no leftovers


def test_checkpoint_best_by_the_training_mean_without_evaluations(tmp_path, scripted_evals):
    run_training(
        _ScriptedTrainer([10, 50, 30]),
        None,
        _opts(tmp_path, stop_reward=475, stop_timesteps=3000, eval_episodes=0),
        log=lambda s: None,
    )
    best = run_outputs.read_run_record(str(tmp_path / "checkpoint_best"))
    assert _version(tmp_path / "checkpoint_best") == 2
    assert best.extra == {"best_by": "episode_reward_mean", "score": 50.0}


def test_final_evaluation_of_an_unsolved_run_is_in_the_last_row(tmp_path, scripted_evals):
    scripted_evals.extend([12.5])
    run_training(
        _ScriptedTrainer([10, 0.1 + 0.2]),
        None,
        _opts(tmp_path, stop_reward=475, stop_timesteps=2000, eval_episodes=2),
        log=lambda s: None,
    )
    text = (tmp_path / "progress.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert tuple(rows[0]) == PROGRESS_COLUMNS and len(rows) == 2
    assert (rows[0]["eval_reward_mean"], rows[1]["eval_reward_mean"], rows[1]["eval_reward_std"]) == (
        "",
        "12.5",
        "0",
    )
    assert rows[1]["episode_reward_mean"] == "0.3"  # 0.30000000000000004 written with 6 digits
    stats = json.loads(rows[1]["learner_stats"])
    assert stats == {"total_loss": 0.166667}  # allreduce_latency dropped, 6 significant digits
    assert "0000000" not in text and "9999999" not in text
    assert run_outputs.read_run_record(str(tmp_path)).eval_reward_mean == 12.5


def test_lines_go_through_the_bar_after_ray_replaced_print(tmp_path, scripted_evals, monkeypatch, capsys):
    pytest.importorskip("tqdm")
    calls = []
    real = builtins.print

    def ray_print(*args, **kwargs):  # what Ray installs once workers start
        calls.append(args)
        real(*args, **kwargs)

    monkeypatch.setattr(builtins, "print", ray_print)
    import tqdm

    writes = []
    original_write = tqdm.tqdm.write

    def spy(cls, s, *a, **kw):
        writes.append(s)
        return original_write(s, *a, **kw)

    monkeypatch.setattr(tqdm.tqdm, "write", classmethod(spy))
    run_training(
        _ScriptedTrainer([100, 200, 300]),
        None,
        RunOptions(stop_reward=475, stop_timesteps=3000, eval_episodes=0, progress_bar=True),
    )
    out, err = capsys.readouterr()
    assert len([w for w in writes if w.startswith("iter ")]) == 3  # every line through the bar
    assert not [c for c in calls if c and str(c[0]).startswith("iter ")]
    assert len(re.findall(r"^iter +\d+ +steps", out, re.M)) == 3 and "/3.00k" in err


# ------------------------------------------------------------------ one column set

TINY = {
    "pg": {"train_batch_size": 64, "rollout_fragment_length": 64, "model": {"fcnet_hiddens": [8]}},
    "ppo": {
        "train_batch_size": 64,
        "rollout_fragment_length": 64,
        "sgd_minibatch_size": 32,
        "num_sgd_iter": 1,
        "model": {"fcnet_hiddens": [8]},
    },
    "dqn": {
        "timesteps_per_iteration": 64,
        "learning_starts": 16,
        "hiddens": [8],
        "model": {"fcnet_hiddens": [8]},
    },
}


def _significant_digits(cell):
    """Digits of a number as written, without sign, exponent and leading zeros."""
    mantissa = re.fullmatch(r"-?([\d.]+)(e[+-]\d+)?", cell).group(1)
    return (
        len(mantissa.replace(".", "").lstrip("0").rstrip("0") or "0")
        if "." in mantissa
        else len(mantissa.lstrip("0") or "0")
    )


@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
def test_progress_columns_are_the_same_for_every_algorithm_and_framework(framework, tmp_path, capsys):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    for algo in ("pg", "ppo", "dqn"):
        out = tmp_path / algo
        code = commands.main(
            [
                "train",
                "--algo",
                algo,
                "--framework",
                framework,
                "--num-envs",
                "2",
                "--config",
                json.dumps(TINY[algo]),
                "--stop-timesteps",
                "64",
                "--stop-reward",
                "1e9",
                "--eval-episodes",
                "1",
                "--progress-bar",
                "off",
                "--out",
                str(out),
            ]
        )
        assert code == 0, capsys.readouterr()
        with open(out / "progress.csv", newline="") as f:
            header, *rows = list(csv.reader(f))
        assert tuple(header) == PROGRESS_COLUMNS, (algo, framework)
        last = dict(zip(header, rows[-1]))
        assert last["eval_reward_mean"] != ""  # the final evaluation, unsolved run
        stats = json.loads(last["learner_stats"])
        assert "allreduce_latency" not in stats
        assert all(_significant_digits(c) <= 6 for c in rows[-1][:8] if c), rows[-1]


# ------------------------------------------------------------------ optional packages, before training


def test_num_workers_without_ray_is_one_line_rc_2():
    pytest.importorskip("torch")  # the Ray check comes after the default --framework torch's
    proc = _run(_blocked_main(["ray"], ["train", "--num-workers", "2"]))
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert "Traceback" not in proc.stderr
    assert _last_line(proc.stderr) == (
        "rlpolicy train: error: argument --num-workers: 2 Ray workers need Ray, which is not "
        "installed: pip install 'rlpolicy[ray]' (or use --num-workers 0)"
    )


def test_export_onnx_without_onnxruntime_fails_before_training(tmp_path):
    pytest.importorskip("torch")
    proc = _run(_blocked_main(["onnxruntime"], ["train", "--export", "onnx", "--out", str(tmp_path / "r")]))
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr  # nothing trained
    assert _last_line(proc.stderr) == (
        "rlpolicy train: error: argument --export: onnx needs onnxruntime, "
        "not installed: pip install 'rlpolicy[onnx]'"
    )
    assert not (tmp_path / "r").exists()


def test_without_matplotlib_the_run_says_so_first_and_never_names_the_plot(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "r"
    proc = _run(_blocked_main(["matplotlib"], _pg(out, "--stop-timesteps", "200")))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == (
        "note: learning_curve.png will not be written: matplotlib is not installed "
        "(pip install 'rlpolicy[cli]')"
    )
    assert lines[-1] == f"checkpoint written to {out} (progress.csv, checkpoint_best/)"
    assert not (out / "learning_curve.png").exists() and (out / "progress.csv").is_file()
    # `rlpolicy export` checks the same way, before loading anything.
    proc = _run(_blocked_main(["onnxruntime", "onnx"], ["export", str(out), "--format", "onnx"]))
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert _last_line(proc.stderr) == (
        "rlpolicy export: error: argument --format: onnx needs onnx, "
        "onnxruntime, not installed: pip install 'rlpolicy[onnx]'"
    )
    assert not (out / "export_onnx").exists()


def test_the_documented_columns_are_the_written_ones():
    page = (ROOT / "docs" / "cli.md").read_text()
    section = page.split("## `progress.csv`", 1)[1].split("\n## ", 1)[0]
    documented = [
        name
        for row in re.findall(r"^\| (`[^|]+`) \|", section, re.M)
        for name in re.findall(r"`([a-z_]+)`", row)
    ]
    assert tuple(documented) == PROGRESS_COLUMNS


def test_a_ctrl_c_during_a_checkpoint_write_waits_for_the_write(tmp_path):
    class SignalsWhileWriting(_FakePolicy):
        def export_checkpoint(self, directory):
            os.kill(os.getpid(), signal.SIGINT)  # arrives in the middle of the write
            super().export_checkpoint(directory)

    trainer = _ScriptedTrainer([10, 20, 30])
    trainer.policy = SignalsWhileWriting()
    run = train_run._Run(trainer, None, _opts(tmp_path, stop_reward=475), log=lambda s: None)
    run.last = trainer.train()
    with pytest.raises(KeyboardInterrupt):  # raised after the write, not inside it
        run.save(str(tmp_path / "checkpoint_000001"), folder=True)
    assert _version(tmp_path / "checkpoint_000001") == 1
    assert run_outputs.read_run_record(str(tmp_path / "checkpoint_000001")).iteration == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_ctrl_c_during_a_progress_row_write_keeps_one_row_per_iteration(tmp_path, monkeypatch):
    # The signal lands after the row is on disk but before the run marks it written:
    # the row must not be appended a second time when the run finishes.
    real_add = run_outputs.ProgressLog.add
    signalled = []

    def add_then_signal(self, row):
        real_add(self, row)
        if not signalled:  # once: a repeated flush must show as a second row, not a second signal
            signalled.append(True)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(run_outputs.ProgressLog, "add", add_then_signal)
    trainer = _ScriptedTrainer([10, 20, 30])
    trainer.policy = _FakePolicy()
    summary = train_run.run_training(
        trainer, None, _opts(tmp_path, stop_reward=475, eval_episodes=0, plot=False), log=lambda s: None
    )
    assert summary.reason == "interrupted" and summary.iterations == 1
    rows = list(csv.DictReader(open(tmp_path / "progress.csv")))
    assert [row["iteration"] for row in rows] == ["1"]
    assert _version(tmp_path) == 1  # the checkpoint of iteration 1 was still written
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ------------------------------------------------------------------ exit codes, divergence, start-up


def test_budget_end_exits_0_and_fail_if_unsolved_exits_4(tmp_path, capsys):
    pytest.importorskip("torch")
    code, stdout, err = _main(_pg(tmp_path / "a", "--stop-timesteps", "200"), capsys)
    assert code == 0, err
    assert "stopped (timesteps)" in stdout and (tmp_path / "a" / "rlpolicy_run.json").is_file()
    code, stdout, err = _main(_pg(tmp_path / "b", "--stop-timesteps", "200", "--fail-if-unsolved"), capsys)
    assert code == 4, err
    assert "stopped (timesteps)" in stdout and (tmp_path / "b" / "rlpolicy_run.json").is_file()


def test_run_sh_asks_for_a_failing_exit_when_unsolved():
    text = (ROOT / "scripts" / "run.sh").read_text()
    assert "--fail-if-unsolved" in text.split("exec ", 1)[1]


@pytest.mark.parametrize("config", [{"lr": 1e38}, {"lr": 1e38, "grad_clip": None}])
def test_non_finite_training_stops_with_one_line_and_saves_nothing(tmp_path, capsys, config):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    tiny = {**json.loads(TINY_PG), **config}
    argv = _pg(out, "--stop-timesteps", "2000", "--checkpoint-every", "1")
    argv[argv.index("--config") + 1] = json.dumps(tiny)
    code, stdout, err = _main(argv, capsys)
    assert code == 3, (stdout, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    # torch >= 2.1 writes inf/NaN weights; older torch refuses the overflowing Adam step.
    assert re.match(
        r"rlpolicy train: error: training diverged at iteration 1: non-finite "
        r"(.*weights \(\d+ of \d+ arrays|optimizer step \(value cannot be converted .* overflow)",
        lines[0],
    ), lines[0]
    # Nothing of the diverged iteration: no last, best or periodic checkpoint.
    assert not (out / "rlpolicy_run.json").exists() and not (out / "checkpoint_best").exists()
    assert list(out.glob("checkpoint_0*")) == []
    assert "checkpoint written" not in stdout


def test_a_diverged_iteration_keeps_the_earlier_best_and_writes_no_last(tmp_path, scripted_evals):
    scripted_evals.extend([100.0])
    trainer = _ScriptedTrainer([10, 20], stats=None)
    real_train = trainer.train

    def train():
        result = real_train()
        if result.iteration == 2:
            result.learner_stats["total_loss"] = float("nan")
        return result

    trainer.train = train
    summary = run_training(trainer, None, _opts(tmp_path, stop_reward=1e9, eval_every=1, eval_episodes=1))
    assert summary.reason == "diverged" and not summary.solved
    assert summary.error.startswith("iteration 2: non-finite total_loss")
    assert _version(tmp_path / "checkpoint_best") == 1  # iteration 1's, not the NaN one
    assert not (tmp_path / "rlpolicy_checkpoint.json").exists()  # no last checkpoint
    rows = list(csv.DictReader(open(tmp_path / "progress.csv")))
    assert [r["iteration"] for r in rows] == ["1"]


class _NaNRewardCartPole:
    """CartPole whose 3rd step's reward is NaN (registered as a gymnasium env)."""

    def __new__(cls, **kwargs):
        import gymnasium as gym

        class Wrapper(gym.Wrapper):
            def step(self, action):
                obs, reward, term, trunc, info = self.env.step(action)
                self.t = getattr(self, "t", 0) + 1
                return obs, (float("nan") if self.t == 3 else reward), term, trunc, info

        return Wrapper(gym.make("CartPole-v1"))


def test_a_nan_reward_from_the_env_names_the_env_and_column(tmp_path, capsys):
    pytest.importorskip("torch")
    import gymnasium as gym

    env_id = "NaNRewardCartPole-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_NaNRewardCartPole, reward_threshold=100.0)
    argv = _pg(tmp_path / "run", "--stop-timesteps", "400")
    argv[argv.index("--out") : argv.index("--out")] = ["--env", env_id]
    code, stdout, err = _main(argv, capsys)
    assert code == 3, (stdout, err)
    assert _last_line(err).startswith(
        f"rlpolicy train: error: training diverged at iteration 1: env '{env_id}' (sub-environment 0) "
        "returned NaN/inf in column 'rewards'"
    )


def test_evaluate_refuses_a_checkpoint_with_non_finite_weights(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    assert _main(_pg(out, "--stop-timesteps", "200"), capsys)[0] == 0
    from rlpolicy.policy.policy import Policy

    policy = Policy.from_checkpoint(str(out))
    policy.set_weights({k: np.full_like(v, np.nan) for k, v in policy.get_weights().items()})
    policy.export_checkpoint(str(out))
    code, stdout, err = _main(["evaluate", str(out), "--episodes", "2"], capsys)
    # Refused at load, like every checkpoint that fails to load (issue 28): exit 2, one line.
    assert code == 2 and stdout == ""
    assert _last_line(err).startswith("rlpolicy evaluate: error: ") and "holds NaN or inf values" in err, err


def test_resume_past_the_step_budget_trains_nothing(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    assert _main(_pg(out, "--stop-timesteps", "400"), capsys)[0] == 0
    record = run_outputs.read_run_record(str(out))
    rows = (out / "progress.csv").read_text()
    code, stdout, err = _main(_pg(out, "--stop-timesteps", "400", "--resume"), capsys)
    assert code == 0, err
    assert stdout.strip() == (
        f"nothing to train: {out} is at step {record.timesteps_total} (iteration {record.iteration}), "
        "already >= --stop-timesteps 400"
    )
    assert (out / "progress.csv").read_text() == rows
    assert run_outputs.read_run_record(str(out)) == record


def test_after_a_second_ctrl_c_no_earlier_evaluation_is_shown_as_final(tmp_path, monkeypatch):
    calls = []

    def evaluate(policy, creator, n, seed):
        calls.append(len(calls))
        if len(calls) == 2:  # the final evaluation: a second Ctrl-C
            raise KeyboardInterrupt
        return [250.0] * n

    monkeypatch.setattr(train_run, "evaluate_policy", evaluate)
    # Iteration 1's training mean reaches the target: evaluated (250, short of it); the
    # budget ends at iteration 2, whose final evaluation a second Ctrl-C stops.
    summary = run_training(
        _ScriptedTrainer([500, 20]),
        None,
        _opts(tmp_path, stop_reward=400, eval_episodes=1, stop_timesteps=1500),
    )
    assert summary.final_eval_skipped and summary.iterations == 2 and len(calls) == 2
    assert [e["iteration"] for e in summary.evaluations] == [1]  # kept as history
    assert summary.eval_mean is None and summary.eval_std is None  # not shown as the final one


def test_overwrite_removes_stale_exports_and_nothing_else(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    assert _main(_pg(out, "--stop-timesteps", "200"), capsys)[0] == 0
    for name in ("export_onnx", "export_torchscript_pipeline"):
        (out / name).mkdir()
        (out / name / "model.onnx").write_text("stale")
    (out / "export_notes").mkdir()  # not an export folder this command writes
    (out / "mine.txt").write_text("keep")
    code, _, err = _main(_pg(out, "--stop-timesteps", "200", "--overwrite"), capsys)
    assert code == 0, err
    assert not (out / "export_onnx").exists() and not (out / "export_torchscript_pipeline").exists()
    assert (out / "export_notes").is_dir() and (out / "mine.txt").read_text() == "keep"


def test_ctrl_c_during_start_up_exits_130_without_a_traceback():
    pytest.importorskip("torch")
    # A real SIGINT while the trainer is being built (before any training).
    code = textwrap.dedent("""
        import os, signal, sys, time
        import rlpolicy.cli.training as training
        def interrupted(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        training.make_trainer = interrupted
        from rlpolicy.cli import main
        sys.exit(main(["train", "--algo", "pg", "--progress-bar", "off"]))
    """)
    proc = _run(code)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip() == "rlpolicy: interrupted"


def test_usage_block_only_for_usage_errors(capsys):
    code, stdout, err = _main(["train", "--no-such-flag"], capsys)
    assert code == 2 and err.startswith("usage: rlpolicy ") and "unrecognized arguments" in err
    code, stdout, err = _main(["train", "--seed", "-1"], capsys)
    assert code == 2 and err.startswith("usage: rlpolicy train ")
    code, stdout, err = _main(["train", "--env", "NoSuchEnv-v9"], capsys)
    assert code == 2 and stdout == ""
    assert len(err.strip().splitlines()) == 1 and "usage:" not in err
    assert err.startswith("rlpolicy train: error: argument --env: 'NoSuchEnv-v9'")
    code, stdout, err = _main(["train", "--config", "{bad"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_train_help_states_the_stop_rule_every_algorithm_and_the_exit_codes(capsys):
    code, stdout, _ = _main(["train", "--help"], capsys)
    assert code == 0
    text = " ".join(stdout.split())
    assert "(pg, ppo, dqn)" in text and "greedy evaluation" in text
    for phrase in ("0 done", "3 training diverged", "4 unsolved with --fail-if-unsolved", "130 Ctrl-C"):
        assert phrase in text
    assert "--fail-if-unsolved" in text


def test_docs_list_every_exit_code_the_command_returns():
    from rlpolicy.cli import commands as c

    table = (ROOT / "docs" / "cli.md").read_text()
    codes = {c.EXIT_OK, c.EXIT_FAILED, c.EXIT_USAGE, c.EXIT_DIVERGED, c.EXIT_UNSOLVED, c.EXIT_INTERRUPTED}
    for code in codes:
        assert re.search(rf"^\| {code} \|", table, re.M), code
    index = (ROOT / "docs" / "index.md").read_text()
    assert "`dqn`" in index and "greedy evaluation" in index


def test_a_ray_wrapped_non_finite_sample_error_is_one_line():
    # What ray.get raises for a worker's NonFiniteSampleError: the remote traceback as text.
    text = (
        'ray::RolloutWorker.apply() (pid=1, ip=127.0.0.1)\n  File "sampler.py", line 9, in _check\n'
        "rlpolicy.utils.error.NonFiniteSampleError: env 'X' (sub-environment 0) returned NaN/inf in "
        "column 'rewards': [nan]; fix the env"
    )
    line = train_run._first_line(RuntimeError(text))
    assert line == "env 'X' (sub-environment 0) returned NaN/inf in column 'rewards': [nan]; fix the env"
