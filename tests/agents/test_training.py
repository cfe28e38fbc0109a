"""The training loops behind ``rlpolicy train``: PPO learns CartPole (CPU and two fake-GPU
towers), the greedy evaluator plays each episode exactly once, and run_training's stop /
evaluate / checkpoint / progress logic follows its rules (checked with a scripted trainer)."""

import csv
import json
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from rlpolicy.cli import run_outputs, train_run  # noqa: E402
from rlpolicy.cli.run_outputs import RunRecord  # noqa: E402
from rlpolicy.cli.train_run import RunOptions, run_training  # noqa: E402
from rlpolicy.cli.training import IterationResult, evaluate_policy, make_trainer  # noqa: E402


def _trainer(device_config, algo="ppo"):
    from rlpolicy.cli.training import SimpleTrainer

    torch.manual_seed(0)
    np.random.seed(0)
    cfg = {
        "lr": 3e-4,
        "train_batch_size": 1000,
        "sgd_minibatch_size": 256,
        "num_sgd_iter": 8,
        "lambda": 0.95,
        "vf_clip_param": 1e4,
        "vf_loss_coeff": 0.5,
        "rollout_fragment_length": 400,
        "model": {"fcnet_hiddens": [64, 64], "vf_share_layers": False},
        **device_config,
    }
    return SimpleTrainer(algo, lambda: gym.make("CartPole-v1"), cfg, num_envs=8, seed=0)


@pytest.mark.learning
def test_ppo_return_rises(device_config):
    trainer = _trainer(device_config)
    assert len(trainer.policy.devices) == max(1, device_config.get("num_gpus", 0))
    first = trainer.train()
    for _ in range(5):
        last = trainer.train()
    assert np.isfinite(last.learner_stats["total_loss"])
    assert last.episode_reward_mean > first.episode_reward_mean + 15, (first, last)


def test_unknown_algorithm():
    from rlpolicy.cli.training import get_policy_class

    with pytest.raises(ValueError, match="unknown algorithm 'sac'"):
        get_policy_class("sac")
    with pytest.raises(ValueError, match="num_workers=2 is not supported for 'dqn'"):
        make_trainer("dqn", lambda: gym.make("CartPole-v1"), {}, num_workers=2)


def test_cli_train_writes_restorable_checkpoint(tmp_path):
    from rlpolicy.cli import commands as cli
    from rlpolicy.policy.policy import Policy

    status = cli.main(
        [
            "train",
            "--algo",
            "pg",
            "--max-timesteps",
            "2000",
            "--stop-reward",
            "1e9",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--num-envs",
            "2",
            "--eval-episodes",
            "2",
        ]
    )
    assert status == 0  # stopped by the step limit, not by the reward: a normal end
    restored = Policy.from_checkpoint(str(tmp_path / "ckpt"))  # the final checkpoint is OUT itself
    assert type(restored).__name__ == "PGTorchPolicy"
    obs = np.zeros((3, 4), np.float32)
    a, _, _ = restored.compute_actions(obs, explore=False)
    assert a.shape == (3,)
    record = json.loads((tmp_path / "ckpt" / "rlpolicy_run.json").read_text())
    assert (record["algo"], record["framework"], record["env"]) == ("pg", "torch", "CartPole-v1")
    assert record["timesteps_total"] >= 2000  # whole iterations: at least the budget


# --------------------------------------------------------------- the greedy evaluator


class _ConstantPolicy:
    """Always answers ``action``; counts the batches it saw."""

    def __init__(self, action_space, action, config=None):
        self.action_space, self.action = action_space, action
        self.config = config or {}
        self.global_timestep = 7
        self.batch_sizes = []

    def get_initial_state(self):
        return []

    def compute_actions(self, obs, state_batches=None, explore=None):
        assert explore is False
        self.batch_sizes.append(len(obs))
        return np.stack([np.asarray(self.action)] * len(obs)), [], {}


def _gym_returns(env_id, action, seeds):
    """Returns of plain gymnasium episodes that always take ``action`` (the expectation)."""
    out = []
    for seed in seeds:
        env = gym.make(env_id)
        env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(action)
            total, done = total + r, term or trunc
        out.append(total)
    return out


def test_evaluate_policy_plays_each_seeded_episode_once():
    policy = _ConstantPolicy(gym.spaces.Discrete(2), 1)
    returns = evaluate_policy(policy, lambda: gym.make("CartPole-v1"), 5, seed=40)
    assert returns == _gym_returns("CartPole-v1", 1, range(40, 45))
    assert policy.batch_sizes[0] == 5 and policy.batch_sizes == sorted(policy.batch_sizes, reverse=True)
    assert policy.global_timestep == 7


@pytest.mark.parametrize(
    "config, env_action",
    [
        ({"normalize_actions": True, "clip_actions": False}, 2.0 * 0.5),  # unsquashed from [-1, 1]
        ({"normalize_actions": False, "clip_actions": True}, 2.0),  # clipped into [-2, 2]
    ],
)
def test_evaluate_policy_maps_box_actions_like_the_sampler(config, env_action):
    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    raw = 0.5 if config["normalize_actions"] else 3.0
    policy = _ConstantPolicy(space, np.array([raw], np.float32), config)
    returns = evaluate_policy(policy, lambda: gym.make("Pendulum-v1"), 2, seed=3)
    expected = _gym_returns("Pendulum-v1", np.array([env_action], np.float32), [3, 4])
    np.testing.assert_allclose(returns, expected, rtol=1e-6)


# --------------------------------------------------------------- run_training's rules


class _FakePolicy:
    def get_weights(self):  # finite: the run's divergence check reads them
        return {"w": [0.0, 1.0]}

    def export_checkpoint(self, directory):
        import os

        os.makedirs(directory, exist_ok=True)
        with open(f"{directory}/rlpolicy_checkpoint.json", "w") as f:
            f.write("{}")


class _ScriptedTrainer:
    """Replays a list of training mean returns, 1000 steps per iteration."""

    def __init__(self, means):
        self.means, self.i, self.policy = list(means), 0, _FakePolicy()

    def train(self):
        self.i += 1
        return IterationResult(
            self.i, 1000 * self.i, self.means[self.i - 1], 10 * self.i, {"total_loss": 1.0 / self.i}, 0.0
        )


@pytest.fixture
def scripted_evals(monkeypatch):
    """Evaluations return the next value of ``scripted_evals`` (a list to fill)."""
    values = []
    monkeypatch.setattr(train_run, "evaluate_policy", lambda policy, creator, n, seed: [values.pop(0)] * n)
    return values


def _opts(tmp_path, **kw):
    kw.setdefault("record", RunRecord(algo="ppo", framework="torch", env="CartPole-v1"))
    return RunOptions(out_dir=str(tmp_path), progress_bar=False, **kw)


def test_evaluates_when_the_training_mean_reaches_the_target_and_continues_below_it(tmp_path, scripted_evals):
    scripted_evals.extend([400.0, 480.0])
    lines = []
    summary = run_training(
        _ScriptedTrainer([100, 476, 480, 470]),
        None,
        _opts(tmp_path, stop_reward=475, eval_episodes=3),
        log=lines.append,
    )
    # iteration 2: training mean 476 >= 475 -> evaluation 400 < 475 -> continue;
    # iteration 3: 480 -> evaluation 480 -> solved.
    assert (summary.solved, summary.reason, summary.iterations, summary.timesteps) == (
        True,
        "solved",
        3,
        3000,
    )
    assert [e["iteration"] for e in summary.evaluations] == [2, 3]
    assert summary.eval_mean == 480.0 and summary.eval_std == 0.0
    assert sum("evaluation (3 episodes, explore off): mean return 400.0" in s for s in lines) == 1
    rows = list(csv.DictReader(open(tmp_path / "progress.csv")))
    assert [r["episode_reward_mean"] for r in rows] == ["100", "476", "480"]
    assert [r["eval_reward_mean"] for r in rows] == ["", "400", "480"]
    assert list(rows[0]) == list(run_outputs.PROGRESS_COLUMNS)
    assert [json.loads(r["learner_stats"]) for r in rows] == [
        {"total_loss": 1.0},
        {"total_loss": 0.5},
        {"total_loss": 0.333333},
    ]
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((tmp_path / "rlpolicy_run.json").read_text())
    assert record["iteration"] == 3 and record["eval_reward_mean"] == 480.0


def test_budget_stop_runs_a_final_evaluation_and_periodic_checkpoints(tmp_path, scripted_evals):
    scripted_evals.extend([12.0])
    summary = run_training(
        _ScriptedTrainer([10] * 10),
        None,
        _opts(tmp_path, stop_reward=475, stop_timesteps=5000, checkpoint_every=2),
    )
    assert (summary.solved, summary.reason, summary.timesteps) == (False, "timesteps", 5000)
    assert summary.eval_mean == 12.0 and [e["iteration"] for e in summary.evaluations] == [5]
    assert sorted(p.name for p in tmp_path.glob("checkpoint_0*")) == [
        "checkpoint_000002",
        "checkpoint_000004",
    ]
    assert json.loads((tmp_path / "checkpoint_000004" / "rlpolicy_run.json").read_text())["iteration"] == 4
    assert run_outputs.resolve_checkpoint(str(tmp_path)) == str(tmp_path)


def test_without_evaluation_the_training_mean_decides(tmp_path, scripted_evals):
    summary = run_training(
        _ScriptedTrainer([100, 474.9, 475]), None, _opts(tmp_path, stop_reward=475, eval_episodes=0)
    )
    assert (summary.solved, summary.iterations, summary.eval_mean) == (True, 3, None)


def test_interrupt_still_writes_the_final_checkpoint(tmp_path, scripted_evals):
    class Interrupted(_ScriptedTrainer):
        def train(self):
            if self.i == 2:
                raise KeyboardInterrupt
            return super().train()

    summary = run_training(Interrupted([1, 2, 3]), None, _opts(tmp_path, stop_reward=475, eval_episodes=0))
    assert (summary.reason, summary.iterations) == ("interrupted", 2)
    assert (tmp_path / "rlpolicy_checkpoint.json").is_file()


def test_resolve_checkpoint_errors_and_newest_periodic(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_outputs.resolve_checkpoint(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="holds no checkpoint written by `rlpolicy train`"):
        run_outputs.resolve_checkpoint(str(tmp_path))
    for it in (2, 10):
        d = tmp_path / f"checkpoint_{it:06d}"
        d.mkdir()
        (d / "rlpolicy_run.json").write_text("{}")
        (d / "rlpolicy_checkpoint.json").write_text("{}")
    assert run_outputs.resolve_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint_000010")


# --------------------------------------------------------------- learning, end to end


@pytest.mark.learning
def test_shipped_ppo_defaults_pass_a_greedy_evaluation_of_150(tmp_path):
    """The CLI's PPO defaults on CartPole-v1, short: a 20-episode greedy evaluation
    reaches 150 within 60k steps (about 20k with seed 0; a few seconds)."""
    from rlpolicy.cli.algorithms import config_defaults

    torch.manual_seed(0)
    np.random.seed(0)
    env = lambda: gym.make("CartPole-v1")  # noqa: E731
    trainer = make_trainer("ppo", env, config_defaults("ppo"), num_envs=8, seed=0)
    summary = run_training(
        trainer,
        env,
        RunOptions(stop_reward=150, stop_timesteps=60_000, progress_bar=False),
        log=lambda s: None,
    )
    assert summary.solved, summary
    assert summary.eval_mean >= 150 and math.isfinite(summary.train_mean)


def test_ray_workers_sample_exact_steps_and_stay_in_sync():
    """num_workers > 0: a WorkerSet samples exactly train_batch_size steps per iteration and
    the remote copy of the policy gets the learned weights after every update."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("rlpolicy.evaluation.worker_set")
    from rlpolicy.cli.training import SimpleTrainer

    started_ray = not ray.is_initialized()
    cfg = {
        "train_batch_size": 300,
        "rollout_fragment_length": 200,
        "lr": 1e-2,
        "model": {"fcnet_hiddens": [8]},
        "num_cpus_per_worker": 0.5,
    }
    trainer = SimpleTrainer("pg", lambda: gym.make("CartPole-v1"), cfg, num_envs=2, num_workers=1, seed=0)
    try:
        before = trainer.policy.get_weights()
        results = [trainer.train() for _ in range(2)]
        assert [r.timesteps_total for r in results] == [300, 600]
        assert results[-1].episodes_total > 0 and np.isfinite(results[-1].episode_reward_mean)
        local = trainer.policy.get_weights()
        assert any(not np.array_equal(before[k], local[k]) for k in local)  # it learned
        (remote,) = trainer.sampler.workers.foreach_worker(lambda w: w.policy.get_weights())[1:]
        for k in local:
            np.testing.assert_array_equal(remote[k], local[k])
    finally:
        trainer.stop()
        if started_ray:  # a Ray sized for this test must not serve later ones
            ray.shutdown()


def test_progress_bar_shows_steps_return_and_throughput(tmp_path, scripted_evals, capsys):
    pytest.importorskip("tqdm")
    run_training(
        _ScriptedTrainer([100, 200, 300]),
        None,
        RunOptions(stop_reward=475, stop_timesteps=3000, eval_episodes=0, progress_bar=True),
    )
    out, err = capsys.readouterr()
    assert len(re.findall(r"^iter +\d+ +steps +\d+ .* steps/s", out, re.M)) == 3  # the lines: stdout
    assert "/3.00k" in err and "return 300.0" in err and "steps/s" in err  # the bar: stderr
