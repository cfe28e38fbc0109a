"""The ``rlpolicy`` command line: version, help, argument errors (exit code 2, one error
line naming the problem) and the env-specific default of ``--stop-reward``."""
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from rlpolicy import cli

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
    for text in ("(default: ppo)", "(default: CartPole-v1)", "(default: torch)", "(default: 400000)",
                 "(default: 8)", "reward_threshold"):
        assert text in " ".join(out.split()), text


@pytest.mark.parametrize("argv, match", [
    (["--env", "NoSuchEnv-v0"], r"argument --env: 'NoSuchEnv-v0': Environment `NoSuchEnv` doesn't exist"),
    (["--framework", "mxnet"], r"argument --framework: invalid choice: 'mxnet'"),
    (["--config", "{bad"], r"argument --config: not valid JSON \(Expecting property name"),
    (["--config", "[1, 2]"], r"argument --config: must be a JSON object of config keys, got list"),
    (["--config", '{"bogus": 1}'], r"argument --config: unknown config key 'bogus' for --algo ppo$"),
    (["--config", '{"lrr": 0.1}'], r"unknown config key 'lrr' for --algo ppo; did you mean 'lr'\?$"),
    (["--algo", "pg", "--config", '{"lambda": 0.9}'], r"unknown config key 'lambda' for --algo pg"),
    (["--config", '{"gamma": 2}'], r"argument --config: config\['gamma'\]=2 is invalid; allowed: a number"),
    (["--config", '{"train_batch_size": 8, "sgd_minibatch_size": 16}'], r"config\['sgd_minibatch_size'\]=16"),
    (["--num-envs", "0"], r"argument --num-envs: must be >= 1, got 0"),
    (["--max-seconds", "0"], r"argument --max-seconds: must be > 0, got 0"),
    (["--seed", "x"], r"argument --seed: expected int, got 'x'"),
    (["--env", "Pendulum-v1"], r"argument --stop-reward: env 'Pendulum-v1' has no reward_threshold"),
])
def test_argument_errors_exit_2_with_one_line(argv, match, capsys):
    code, out, err = run_main(["train", *argv], capsys)
    assert code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("rlpolicy train: error: ")
    assert "Traceback" not in err
    assert re.search(match, last), last


def test_unavailable_framework_is_an_argument_error(monkeypatch, capsys):
    from rlpolicy.agents import training

    def no_tf(algo, framework="torch"):
        raise ValueError(f"no {framework} policy for {algo}")

    monkeypatch.setattr(training, "get_policy_class", no_tf)
    code, _, err = run_main(["train", "--framework", "tf2"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == ("rlpolicy train: error: argument --framework: 'tf2' "
                                            "cannot be used for 'ppo': no tf2 policy for ppo")


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
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "rlpolicy train: error: argument --framework: 'torch' cannot be used for 'ppo': "
        "PPOTorchPolicy needs PyTorch (framework='torch'), but torch is not installed; "
        "install it with `pip install rlpolicy[torch]`")


def _train_args(*argv):
    parser, train = cli._build_parser()
    return train, parser.parse_args(["train", *argv])


def test_stop_reward_defaults_to_the_env_threshold():
    train, args = _train_args()
    assert cli._env_and_stop_reward(train, args)[1] == 475.0  # CartPole-v1's reward_threshold
    train, args = _train_args("--env", "MountainCar-v0")
    assert cli._env_and_stop_reward(train, args)[1] == -110.0
    train, args = _train_args("--env", "Pendulum-v1", "--stop-reward", "-200")
    assert cli._env_and_stop_reward(train, args)[1] == -200.0


def test_valid_config_keys_are_accepted():
    train, args = _train_args("--config", '{"lambda": 0.9, "_extra": 1, "model": {"fcnet_hiddens": [8]}}',
                              "--num-gpus", "2", "--fake-gpus")
    config = cli._checked_config(train, args)
    assert config["lambda"] == 0.9 and config["_extra"] == 1
    assert config["model"] == {"fcnet_hiddens": [8], "vf_share_layers": False}
    assert config["num_gpus"] == 2 and config["_fake_gpus"] is True and config["framework"] == "torch"


def test_short_training_run_reports_and_fails_to_reach_the_goal(capsys):
    pytest.importorskip("torch")
    code, out, _ = run_main(["train", "--algo", "pg", "--num-envs", "2", "--max-timesteps", "200",
                             "--config", '{"train_batch_size": 200, "rollout_fragment_length": 200}',
                             "--stop-reward", "1000"], capsys)
    assert code == 1
    assert "training PGTorchPolicy on CartPole-v1 until mean return >= 1000" in out
    assert "iter   1  steps     200" in out and "stopped at mean return" in out
