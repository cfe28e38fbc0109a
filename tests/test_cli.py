"""The ``rlpolicy`` command line: version, help, argument errors (exit code 2, one error
line naming the problem) and the env-specific default of ``--stop-reward``."""

import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from rlpolicy.cli import commands as cli
from rlpolicy.cli.algorithms import training_defaults

# `train`'s default is --framework torch: checks made after that one need torch installed.
NEEDS_TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")

ROOT = Path(__file__).resolve().parents[1]


def run_main(argv, capsys):
    """(exit code, stdout, stderr) of ``rlpolicy <argv>`` run in-process."""
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_version_comes_from_package_metadata(capsys):
    code, out, _ = run_main(["--version"], capsys)
    assert code == 0 and out == f"rlpolicy {metadata.version('rlpolicy')}\n"


def test_help_shows_defaults(capsys):
    code, out, _ = run_main(["train", "--help"], capsys)
    assert code == 0
    for text in (
        "(default: ppo)",
        "(default: CartPole-v1)",
        "(default: torch)",
        "(default: 400000)",
        "8 for pg/ppo",
        "reward_threshold",
        "--stop-timesteps MAX_TIMESTEPS, --max-timesteps",
        "--out OUT, --checkpoint-dir OUT",
        "(default: 20)",
        "{torchscript,onnx,savedmodel}",
    ):
        assert text in " ".join(out.split()), text
    code, out, _ = run_main(["evaluate", "--help"], capsys)
    assert code == 0 and "--episodes EPISODES" in out and "explore off" in out
    code, out, _ = run_main(["export", "--help"], capsys)
    assert code == 0 and "--format {torchscript,onnx,savedmodel}" in out


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--env", "NoSuchEnv-v0"], r"argument --env: 'NoSuchEnv-v0': Environment `NoSuchEnv` doesn't exist"),
        (["--framework", "mxnet"], r"argument --framework: invalid choice: 'mxnet'"),
        (["--config", "{bad"], r"argument --config: not valid JSON \(Expecting property name"),
        (["--config", "[1, 2]"], r"argument --config: must be a JSON object of config keys, got list"),
        (["--config", '{"bogus": 1}'], r"argument --config: unknown config key 'bogus' for --algo ppo$"),
        (["--config", '{"lrr": 0.1}'], r"unknown config key 'lrr' for --algo ppo; did you mean 'lr'\?$"),
        (["--algo", "pg", "--config", '{"lambda": 0.9}'], r"unknown config key 'lambda' for --algo pg"),
        (
            ["--config", '{"gamma": 2}'],
            r"argument --config: config\['gamma'\]=2 is invalid; allowed: a number",
        ),
        (
            ["--config", '{"train_batch_size": 8, "sgd_minibatch_size": 16}'],
            r"config\['sgd_minibatch_size'\]=16",
        ),
        (["--num-envs", "0"], r"argument --num-envs: must be >= 1, got 0"),
        (["--max-seconds", "0"], r"argument --max-seconds: must be > 0, got 0"),
        (["--seed", "x"], r"argument --seed: expected int, got 'x'"),
        (["--env", "Pendulum-v1"], r"argument --stop-reward: env 'Pendulum-v1' has no reward_threshold"),
        (["--algo", "a2c"], r"argument --algo: invalid choice: 'a2c'"),
        (["--num-workers", "-1"], r"argument --num-workers: must be >= 0, got -1"),
        # These options are checked after the default --framework torch is.
        pytest.param(
            ["--algo", "dqn", "--num-workers", "2"],
            r"argument --num-workers: DQN trains in one process",
            marks=NEEDS_TORCH,
        ),
        (["--algo", "dqn", "--config", '{"lambda": 0.9}'], r"unknown config key 'lambda' for --algo dqn"),
        pytest.param(
            ["--export", "savedmodel", "--out", "x"],
            r"argument --export: 'savedmodel' cannot be exported "
            r"from a --framework torch policy; choose from torchscript, onnx",
            marks=NEEDS_TORCH,
        ),
        pytest.param(["--export", "onnx"], r"argument --export: needs --out", marks=NEEDS_TORCH),
        (["--export", "pickle"], r"argument --export: invalid choice: 'pickle'"),
        (["--checkpoint-every", "x"], r"argument --checkpoint-every: expected int, got 'x'"),
        (["--stop-timesteps", "0"], r"argument --stop-timesteps/--max-timesteps: must be >= 1, got 0"),
    ],
)
def test_argument_errors_exit_2_with_one_line(argv, match, capsys):
    code, out, err = run_main(["train", *argv], capsys)
    assert code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("rlpolicy train: error: ")
    assert "Traceback" not in err
    assert re.search(match, last), last


@NEEDS_TORCH
def test_num_workers_without_worker_set_is_an_argument_error(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_worker_set_available", lambda: False)
    code, _, err = run_main(["train", "--num-workers", "2"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "rlpolicy train: error: argument --num-workers: 2 Ray workers need "
        "rlpolicy.evaluation.worker_set.WorkerSet, which is not available in this build; "
        "use --num-workers 0"
    )


@pytest.mark.parametrize(
    "argv, match",
    [
        (
            ["evaluate", "{missing}"],
            r"rlpolicy evaluate: error: argument checkpoint: checkpoint '.*nope' does not exist",
        ),
        (
            ["export", "{empty}", "--format", "onnx"],
            r"rlpolicy export: error: argument checkpoint: '.*empty' holds no checkpoint written by `rlpolicy train`",
        ),
        (["export", "{missing}"], r"rlpolicy export: error: the following arguments are required: --format"),
        (["evaluate", "{empty}", "--episodes", "0"], r"argument --episodes: must be >= 1, got 0"),
        (["export", "{empty}", "--format", "h5"], r"argument --format: invalid choice: 'h5'"),
    ],
)
def test_evaluate_and_export_argument_errors(argv, match, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    argv = [a.format(missing=tmp_path / "nope", empty=tmp_path / "empty") for a in argv]
    code, out, err = run_main(argv, capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    assert re.search(match, err.strip().splitlines()[-1]), err


def test_unavailable_framework_is_an_argument_error(monkeypatch, capsys):
    from rlpolicy.cli.algorithms import Algorithm

    def no_tf(self, framework="torch"):
        raise ValueError(f"no {framework} policy for {self.name}")

    monkeypatch.setattr(Algorithm, "policy_class", no_tf)
    code, _, err = run_main(["train", "--framework", "tf2"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "rlpolicy train: error: argument --framework: 'tf2' cannot be used for 'ppo': no tf2 policy for ppo"
    )


def test_missing_torch_is_an_argument_error():
    code = textwrap.dedent("""
        import importlib.abc, sys
        class _Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError(f"No module named {name!r} (blocked by test)")
        sys.meta_path.insert(0, _Block())
        from rlpolicy.cli import main
        sys.exit(main(["train"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "rlpolicy train: error: argument --framework: 'torch' cannot be used for 'ppo': "
        "PPOTorchPolicy needs PyTorch (framework='torch'), but torch is not installed; "
        "install it with `pip install rlpolicy[torch]`"
    )


def _train_args(*argv):
    parser, subparsers = cli._build_parser()
    return subparsers["train"], parser.parse_args(["train", *argv])


def test_stop_reward_defaults_to_the_env_threshold():
    train, args = _train_args()
    assert cli._env_and_stop_reward(train, args)[1] == 475.0  # CartPole-v1's reward_threshold
    train, args = _train_args("--env", "MountainCar-v0")
    assert cli._env_and_stop_reward(train, args)[1] == -110.0
    train, args = _train_args("--env", "Pendulum-v1", "--stop-reward", "-200")
    assert cli._env_and_stop_reward(train, args)[1] == -200.0


def test_valid_config_keys_are_accepted():
    train, args = _train_args(
        "--config",
        '{"lambda": 0.9, "_extra": 1, "model": {"fcnet_hiddens": [8]}}',
        "--num-gpus",
        "2",
        "--fake-gpus",
    )
    config = cli._checked_config(train, args)
    assert config["lambda"] == 0.9 and config["_extra"] == 1
    assert config["model"] == {"fcnet_hiddens": [8], "vf_share_layers": False}
    assert config["num_gpus"] == 2 and config["_fake_gpus"] is True and config["framework"] == "torch"


def test_per_env_defaults_go_under_the_user_config():
    train, args = _train_args("--env", "Pendulum-v1", "--stop-reward", "-400", "--config", '{"lr": 1e-3}')
    config = cli._checked_config(train, args)
    assert config["lr"] == 1e-3  # --config wins
    assert (config["gamma"], config["lambda"], config["vf_clip_param"]) == (0.95, 0.1, 10.0)
    assert config["model"]["fcnet_activation"] == "relu" and "num_envs" not in config
    train, args = _train_args("--config", '{"gamma": 0.9, "model": {"fcnet_activation": "relu"}}')
    model = cli._checked_config(train, args)["model"]  # a new model key merges into the defaults
    assert model == {"fcnet_hiddens": [64, 64], "vf_share_layers": False, "fcnet_activation": "relu"}
    assert cli._checked_config(train, args)["lambda"] == 0.95  # CartPole: the generic PPO defaults
    assert (
        training_defaults("ppo", "Pendulum-v1")["num_envs"] == 16
        and training_defaults("ppo", "CartPole-v1")["num_envs"] == 8
    )
    # PPO is evaluated every iteration on CartPole (its greedy policy solves long before the
    # training mean gets there), at the target only on Pendulum-v1 (its measured defaults)
    assert training_defaults("ppo", "CartPole-v1")["eval_every"] == 1
    assert training_defaults("ppo", "Pendulum-v1")["eval_every"] == 0 and "eval_every" not in config


def test_short_training_run_reports_and_fails_to_reach_the_goal(capsys):
    pytest.importorskip("torch")
    code, out, _ = run_main(
        [
            "train",
            "--algo",
            "pg",
            "--num-envs",
            "2",
            "--max-timesteps",
            "200",
            "--config",
            '{"train_batch_size": 200, "rollout_fragment_length": 200}',
            "--stop-reward",
            "1000",
            "--eval-episodes",
            "3",
        ],
        capsys,
    )
    assert code == 0  # the step budget ended it: a normal end
    assert "training PGTorchPolicy on CartPole-v1 until mean return >= 1000" in out
    assert re.search(r"^iter   1  steps +2\d\d  ", out, re.M) and "stopped (timesteps) at mean return" in out
    assert re.search(r"final evaluation \(3 episodes, explore off\): mean return [\d.]+ \+/- [\d.]+", out)


# --------------------------------------------------------------- end to end, fresh processes


def _rlpolicy(*argv, timeout=120):
    """Runs the installed ``rlpolicy`` command (``python -m rlpolicy.cli`` without one)."""
    script = Path(sys.executable).with_name("rlpolicy")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "rlpolicy.cli"]
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        cmd + list(argv), capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )


TINY_PPO = json.dumps(
    {
        "train_batch_size": 400,
        "rollout_fragment_length": 400,
        "sgd_minibatch_size": 100,
        "num_sgd_iter": 2,
        "model": {"fcnet_hiddens": [16]},
    }
)


def test_train_evaluate_export_from_a_fresh_shell_torch(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    proc = _rlpolicy(
        "train",
        "--stop-timesteps",
        "1200",
        "--config",
        TINY_PPO,
        "--out",
        str(out),
        "--checkpoint-every",
        "2",
        "--eval-episodes",
        "2",
        "--stop-reward",
        "1e9",
        "--eval-every",
        "0",
        "--export",
        "onnx",
    )  # PPO's default: every iteration
    assert proc.returncode == 0, proc.stderr  # the step budget ran out before the target: exit 0
    assert re.findall(r"^iter +(\d+) +steps +(\d+)", proc.stdout, re.M) == [
        ("1", "400"),
        ("2", "800"),
        ("3", "1200"),
    ]
    assert "final evaluation (2 episodes, explore off)" in proc.stdout
    assert (
        f"exported onnx to {out / 'export_onnx' / 'model.onnx'}; verified: loaded back with "
        "onnxruntime.InferenceSession" in proc.stdout
    )
    rows = list(csv.DictReader(open(out / "progress.csv")))
    assert [int(r["timesteps_total"]) for r in rows] == [400, 800, 1200]
    assert (out / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "checkpoint_000002" / "rlpolicy_run.json").is_file()
    # evaluate needs only the path: algo, framework and env come from the checkpoint.
    proc = _rlpolicy("evaluate", str(out), "--episodes", "3")
    assert proc.returncode == 0, proc.stderr
    assert (
        "evaluated PPOTorchPolicy (ppo, torch) from" in proc.stdout
        and "3 episodes, explore off" in proc.stdout
    )
    mean, std = map(float, re.search(r"mean return ([\d.]+) \+/- ([\d.]+)", proc.stdout).groups())
    assert 8 <= mean <= 500 and std >= 0  # a CartPole episode lasts 8..500 steps, +1 each
    proc = _rlpolicy("export", str(out / "checkpoint_000002"), "--format", "torchscript")
    assert proc.returncode == 0, proc.stderr
    path = out / "checkpoint_000002" / "export_torchscript" / "model.pt"
    assert f"exported torchscript to {path}; verified: loaded back with torch.jit.load" in proc.stdout
    assert path.is_file()
    code, _, err = run_main(["export", str(out), "--format", "savedmodel"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "rlpolicy export: error: argument --format: 'savedmodel' cannot be exported from this 'torch' "
        "checkpoint; choose from torchscript, onnx"
    )


@pytest.mark.tf
def test_train_tf_then_export_savedmodel_from_a_fresh_shell(tmp_path, capsys):
    pytest.importorskip("tensorflow")
    out = tmp_path / "tf"
    code, stdout, _ = run_main(
        [
            "train",
            "--framework",
            "tf",
            "--stop-timesteps",
            "400",
            "--config",
            TINY_PPO,
            "--out",
            str(out),
            "--eval-episodes",
            "1",
            "--stop-reward",
            "1e9",
        ],
        capsys,
    )
    assert code == 0 and "training PPOTFPolicy on CartPole-v1" in stdout, _
    proc = _rlpolicy("export", str(out), "--format", "savedmodel", "--out", str(tmp_path / "sm"))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"exported savedmodel to {tmp_path / 'sm' / 'saved_model'}; verified: loaded back with "
        "tf.saved_model.load" in proc.stdout
    )


def test_tuple_observation_env_trains_evaluates_and_exports(tmp_path, capsys):
    # Blackjack-v1 observes Tuple(Discrete(32), Discrete(11), Discrete(2)): the worker, the
    # evaluation and the export all see the same one-hot flattened observation (45 wide).
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    out = tmp_path / "bj"
    code, stdout, err = run_main(
        [
            "train",
            "--env",
            "Blackjack-v1",
            "--stop-reward",
            "1",
            "--stop-timesteps",
            "400",
            "--config",
            TINY_PPO,
            "--num-envs",
            "2",
            "--eval-episodes",
            "5",
            "--eval-every",
            "0",
            "--out",
            str(out),
            "--export",
            "onnx",
            "--progress-bar",
            "off",
        ],
        capsys,
    )
    assert code == 0, err  # the step budget ends the run; Blackjack returns are at most 1
    assert re.search(r"final evaluation \(5 episodes, explore off\): mean return -?[\d.]+", stdout)
    assert "verified: loaded back with onnxruntime.InferenceSession" in stdout
    code, stdout, err = run_main(["evaluate", str(out), "--episodes", "4"], capsys)
    assert code == 0, err
    mean = float(re.search(r"mean return (-?[\d.]+)", stdout).group(1))
    assert -1.0 <= mean <= 1.0


def test_no_module_branches_on_algorithm_names():
    """Per-algorithm facts live in the registry (rlpolicy/cli/algorithms.py) only."""
    compare = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](pg|ppo|dqn)["']""")
    offenders = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in sorted((ROOT / "rlpolicy").rglob("*.py"))
        if path.name != "algorithms.py"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if compare.search(line)
    ]
    assert offenders == []
    from rlpolicy.cli.algorithms import ALGORITHMS, get_algorithm

    assert sorted(ALGORITHMS) == ["dqn", "pg", "ppo"]
    assert [get_algorithm(a).uses_workers for a in ("pg", "ppo", "dqn")] == [True, True, False]
    with pytest.raises(ValueError, match="unknown algorithm 'sac'; known: pg, ppo, dqn"):
        get_algorithm("sac")
