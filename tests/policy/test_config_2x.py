"""Configs from RLlib 2.x (and many 1.x ones) are accepted where no policy code reads the
odd values; a bad value of a key the policy does read still raises, naming the key.

Written as client code: a 1.x-style torch policy (``build_policy_class``) and a TF one
(``build_tf_policy``) get a 2.x-style config dict.
"""

import warnings

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy._core import config as config_mod
from rlpolicy._core.config import UnknownConfigKeyWarning
from rlpolicy.policy.sample_batch import SampleBatch

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
FRAMEWORKS = ["torch", "tf", "tf2"]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(config_mod, "_WARNED_KEYS", set())


def torch_pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    dist = dist_class(logits, model)
    return -(dist.logp(train_batch[SampleBatch.ACTIONS]) * train_batch[SampleBatch.REWARDS]).mean()


def tf_pg_loss(policy, model, dist_class, train_batch):
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()
    logits, _ = model(train_batch)
    dist = dist_class(logits, model)
    return -tf.reduce_mean(dist.logp(train_batch[SampleBatch.ACTIONS]) * train_batch[SampleBatch.REWARDS])


def sac_style_torch_optimizer(policy, config):
    import torch

    return torch.optim.Adam(policy.model.parameters(), lr=config["optimization"]["actor_learning_rate"])


def sac_style_tf_optimizer(policy, config):
    from rlpolicy.utils.framework import get_keras, try_import_tf

    tf1, tf, _ = try_import_tf()
    rate = config["optimization"]["actor_learning_rate"]
    if policy.framework == "tf":
        return tf1.train.AdamOptimizer(learning_rate=rate)
    return get_keras().optimizers.Adam(rate)


def policy_class(framework, optimizer_fn=None):
    if framework == "torch":
        from rlpolicy.policy.policy_template import build_policy_class

        return build_policy_class(
            "PGTorchPolicy",
            "torch",
            loss_fn=torch_pg_loss,
            optimizer_fn=optimizer_fn and sac_style_torch_optimizer,
        )
    from rlpolicy.policy.tf_policy_template import build_tf_policy

    cls = build_tf_policy(
        "PGTFPolicy", loss_fn=tf_pg_loss, optimizer_fn=optimizer_fn and sac_style_tf_optimizer
    )
    return cls.as_eager() if framework == "tf2" else cls


def batch(n=4):
    return SampleBatch(
        {
            SampleBatch.OBS: np.zeros((n, 3), np.float32),
            SampleBatch.ACTIONS: np.arange(n) % 2,
            SampleBatch.REWARDS: np.ones(n, np.float32),
        }
    )


class EpisodeStatsCallbacks:
    """A duck-typed callbacks class (not a DefaultCallbacks subclass): episodes only."""

    def __init__(self):
        self.episodes = 0

    def on_episode_end(self, *, worker, base_env, policies, episode, **kwargs):
        self.episodes += 1


class LearnCountingCallbacks(EpisodeStatsCallbacks):
    def __init__(self):
        super().__init__()
        self.learn_calls = []

    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
        self.learn_calls.append(len(train_batch))
        result["seen"] = len(train_batch)


# An RLlib 2.x-style (SAC) config: values no policy reads, 2.x-only model keys.
CONFIG_2X = {
    "rollout_fragment_length": "auto",
    "lr": None,
    "optimization": {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4},
    "callbacks": EpisodeStatsCallbacks,
    "model": {"fcnet_hiddens": [8], "fcnet_weights_initializer": None, "encoder_latent_dim": None},
    "batch_mode": "complete_episodes",
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_2x_config_is_accepted_with_warnings(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    config = dict(CONFIG_2X, framework=framework)
    with pytest.warns(UnknownConfigKeyWarning) as record:
        policy = policy_class(framework, optimizer_fn=True)(OBS, ACT, config)
    messages = [str(w.message) for w in record if w.category is UnknownConfigKeyWarning]
    assert any("'encoder_latent_dim' in config['model']" in m for m in messages), messages
    assert any("'fcnet_weights_initializer' in config['model']" in m for m in messages), messages
    # The values are kept as given; the policy works.
    assert policy.config["rollout_fragment_length"] == "auto" and policy.config["lr"] is None
    assert policy.config["model"]["encoder_latent_dim"] is None
    assert type(policy.callbacks) is EpisodeStatsCallbacks
    out = policy.learn_on_batch(batch())  # the callbacks object has no on_learn_on_batch: skipped
    assert out["custom_metrics"] == {}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_lr_none_raises_naming_lr_where_the_default_optimizer_reads_it(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    with pytest.raises(ValueError, match=r"config\['lr'\]=None is invalid; allowed: a finite number"):
        policy_class(framework)(
            OBS, ACT, {"framework": framework, "lr": None, "model": {"fcnet_hiddens": [8]}}
        )
    with pytest.raises(ValueError, match=r"config\['lr'\]='0.1' is invalid"):
        policy_class(framework)(
            OBS, ACT, {"framework": framework, "lr": "0.1", "model": {"fcnet_hiddens": [8]}}
        )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_duck_typed_callbacks_get_the_learn_hook(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    policy = policy_class(framework)(
        OBS,
        ACT,
        {"framework": framework, "model": {"fcnet_hiddens": [8]}, "callbacks": LearnCountingCallbacks},
    )
    out = policy.learn_on_batch(batch(6))
    assert policy.callbacks.learn_calls == [6] and out["custom_metrics"] == {"seen": 6}


def test_callbacks_factory_without_any_hook_is_refused():
    pytest.importorskip("torch")
    with pytest.raises(
        ValueError,
        match=r"config\['callbacks'\]=<class 'dict'> made a dict object "
        r"with none of the callback methods \(.*on_learn_on_batch",
    ):
        policy_class("torch")(OBS, ACT, {"model": {"fcnet_hiddens": [8]}, "callbacks": dict})
    with pytest.raises(ValueError, match=r"config\['callbacks'\]='MyCallbacks' is invalid"):
        policy_class("torch")(OBS, ACT, {"model": {"fcnet_hiddens": [8]}, "callbacks": "MyCallbacks"})


def test_bad_values_of_keys_policies_read_still_raise():
    pytest.importorskip("torch")
    cls = policy_class("torch")
    for override, key in [
        ({"gamma": 1.5}, "gamma"),
        ({"model": {"max_seq_len": 0}}, "model.max_seq_len"),
        ({"num_gpus": -1}, "num_gpus"),
        ({"grad_clip": 0}, "grad_clip"),
    ]:
        with pytest.raises(ValueError, match=f"config\\['{key}'\\]"):
            cls(OBS, ACT, {"model": {"fcnet_hiddens": [8]}, **override})


def test_unknown_model_key_warns_once_with_close_match():
    pytest.importorskip("torch")
    cls = policy_class("torch")
    with pytest.warns(
        UnknownConfigKeyWarning,
        match=r"PGTorchPolicy: unknown key 'fcnet_hidden' in config\['model'\]; "
        r"did you mean 'fcnet_hiddens'\?",
    ):
        policy = cls(OBS, ACT, {"model": {"fcnet_hidden": [4]}})
    assert policy.config["model"]["fcnet_hidden"] == [4]  # kept, as unknown top-level keys are
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownConfigKeyWarning)
        cls(OBS, ACT, {"model": {"fcnet_hidden": [4]}})  # once per process and key


def test_learning_rate_schedule_mixins_read_lr_only_without_a_schedule():
    pytest.importorskip("torch")
    from rlpolicy.policy.torch_mixins import LearningRateSchedule

    holder = object.__new__(type("Holder", (LearningRateSchedule,), {}))
    LearningRateSchedule.__init__(holder, None, [[0, 1e-3], [100, 1e-4]])  # lr unused: fine
    assert holder.cur_lr == pytest.approx(1e-3)
    with pytest.raises(ValueError, match=r"config\['lr'\]=None is invalid"):
        LearningRateSchedule.__init__(holder, None, None)


def test_command_line_rule_still_checks_trainer_keys():
    from rlpolicy._core.config import complete_config, validate_config

    full = complete_config(dict(CONFIG_2X, lr=1e-3))
    validate_config(full)  # a policy being built: passes
    with pytest.raises(ValueError, match=r"config\['rollout_fragment_length'\]='auto' is invalid"):
        validate_config(full, strict=True)
