"""The main job's pieces end to end: PPO via build_policy_class learns CartPole a little,
on CPU and with two fake-GPU towers, and its checkpoint restores."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")


def _trainer(device_config, algo="ppo"):
    from rlpolicy.agents.training import SimpleTrainer

    torch.manual_seed(0)
    np.random.seed(0)
    cfg = {"lr": 3e-4, "train_batch_size": 1000, "sgd_minibatch_size": 256, "num_sgd_iter": 8,
           "lambda": 0.95, "vf_clip_param": 1e4, "vf_loss_coeff": 0.5, "rollout_fragment_length": 400,
           "model": {"fcnet_hiddens": [64, 64], "vf_share_layers": False}, **device_config}
    return SimpleTrainer(algo, lambda: gym.make("CartPole-v1"), cfg, num_envs=8, seed=0)


def test_ppo_return_rises(device_config):
    trainer = _trainer(device_config)
    assert len(trainer.policy.devices) == max(1, device_config.get("num_gpus", 0))
    first = trainer.train()
    for _ in range(5):
        last = trainer.train()
    assert np.isfinite(last.learner_stats["total_loss"])
    assert last.episode_reward_mean > first.episode_reward_mean + 15, (first, last)


def test_unknown_algorithm():
    from rlpolicy.agents.training import get_policy_class

    with pytest.raises(ValueError, match="unknown algorithm 'sac'"):
        get_policy_class("sac")


def test_cli_train_writes_restorable_checkpoint(tmp_path):
    from rlpolicy import cli
    from rlpolicy.policy.policy import Policy

    status = cli.main(["train", "--algo", "pg", "--max-timesteps", "2000", "--stop-reward", "1e9",
                       "--checkpoint-dir", str(tmp_path / "ckpt"), "--num-envs", "2"])
    assert status == 1  # stopped by the step limit, not by the reward
    restored = Policy.from_checkpoint(str(tmp_path / "ckpt"))
    assert type(restored).__name__ == "PGTorchPolicy"
    obs = np.zeros((3, 4), np.float32)
    a, _, _ = restored.compute_actions(obs, explore=False)
    assert a.shape == (3,)
