"""The sampler's single-agent branch (``EnvRunner._step_single``, obs-only acting
inputs) gives the same batches, episode statistics and callback calls as the general
multi-agent path: CartPole sampled directly, and as a one-agent MultiAgentEnv with
the agent id the sampler gives single-agent envs, on the same seeds. Also: when
``on_episode_step`` is skipped (DefaultCallbacks' own, no legacy hook) and when not."""

import gymnasium as gym
import pytest
from golden_sampling_cases import RecordingCallbacks, assert_same_batches

from rlpolicy.env.multi_agent_env import MultiAgentEnv
from rlpolicy.evaluation.rollout_worker import RolloutWorker
from rlpolicy.evaluation.sampler import _overrides_step_callback
from rlpolicy.policy._callbacks import DefaultCallbacks

AGENT = "agent0"  # the agent id single-agent envs get


class OneAgentCartPole(MultiAgentEnv):
    """CartPole-v1 through the multi-agent dict API (one agent, ``AGENT``)."""

    def __init__(self):
        super().__init__()
        self.env = gym.make("CartPole-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self._agent_ids = {AGENT}

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed)
        return {AGENT: obs}, {AGENT: info}

    def step(self, action_dict):
        obs, r, term, trunc, info = self.env.step(action_dict[AGENT])
        return (
            {AGENT: obs},
            {AGENT: r},
            {AGENT: term, "__all__": term},
            {AGENT: trunc, "__all__": trunc},
            {AGENT: info},
        )


def _run(multi_agent, settings):
    pytest.importorskip("torch")
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

    callbacks = RecordingCallbacks()
    creator = (
        (lambda ctx=None: OneAgentCartPole()) if multi_agent else (lambda ctx=None: gym.make("CartPole-v1"))
    )
    worker = RolloutWorker(
        env_creator=creator,
        policy_spec=PPOTorchPolicy,
        policy_config={"framework": "torch", "model": {"fcnet_hiddens": [16]}},
        seed=3,
        callbacks=callbacks,
        **settings,
    )
    batches = [worker.sample() for _ in range(2)]
    stats = [(m.episode_length, m.episode_reward) for m in worker.get_metrics()]
    worker.stop()
    return batches, stats, callbacks.calls


@pytest.mark.parametrize(
    "settings",
    [
        dict(num_envs=3, rollout_fragment_length=30),
        dict(num_envs=2, rollout_fragment_length=40, batch_mode="complete_episodes"),
        dict(num_envs=2, rollout_fragment_length=25, episode_horizon=9),
        dict(num_envs=1, rollout_fragment_length=25, episode_horizon=7, soft_horizon=True),
        dict(num_envs=2, rollout_fragment_length=20, no_done_at_end=True),
    ],
    ids=["truncate", "complete", "horizon", "soft_horizon", "no_done_at_end"],
)
def test_single_agent_branch_matches_multi_agent_path(settings):
    lean, lean_stats, lean_calls = _run(False, settings)
    full, full_stats, full_calls = _run(True, settings)
    assert lean_stats == full_stats and len(lean_stats) > 0
    assert lean_calls == full_calls
    for a, b in zip(lean, full):
        assert_same_batches(a, b)


class _StepCounter(DefaultCallbacks):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_episode_step(self, **kwargs):
        self.steps += 1


def test_step_callback_skipped_only_when_it_does_nothing():
    assert not _overrides_step_callback(DefaultCallbacks())
    assert _overrides_step_callback(_StepCounter())
    with pytest.warns(DeprecationWarning):
        legacy = DefaultCallbacks(legacy_callbacks_dict={"on_episode_step": lambda info: None})
    assert _overrides_step_callback(legacy)
    patched = DefaultCallbacks()
    patched.on_episode_step = lambda **kw: None
    assert _overrides_step_callback(patched)


def test_step_callback_runs_once_per_env_step():
    pytest.importorskip("torch")
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

    cb = _StepCounter()
    worker = RolloutWorker(
        env_creator=lambda ctx=None: gym.make("CartPole-v1"),
        policy_spec=PPOTorchPolicy,
        policy_config={"framework": "torch", "model": {"fcnet_hiddens": [8]}},
        num_envs=2,
        rollout_fragment_length=10,
        seed=0,
        callbacks=cb,
    )
    worker.sample()
    worker.stop()
    assert cb.steps == 20
