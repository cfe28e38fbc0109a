"""Torch policy mixins: schedules, KL coefficient, value network, target network."""

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.torch_mixins import (  # noqa: E402
    EntropyCoeffSchedule,
    KLCoeffMixin,
    LearningRateSchedule,
    TargetNetworkMixin,
    ValueNetworkMixin,
)
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)
BASE = {"model": {"fcnet_hiddens": [8]}, "lr": 0.1}


class SchedPolicy(LearningRateSchedule, EntropyCoeffSchedule, TorchPolicy):
    def __init__(self, obs_space, action_space, config):
        TorchPolicy.__init__(self, obs_space, action_space, config)
        LearningRateSchedule.__init__(self, config["lr"], config.get("lr_schedule"))
        EntropyCoeffSchedule.__init__(
            self, config.get("entropy_coeff", 0.0), config.get("entropy_coeff_schedule")
        )


@pytest.mark.parametrize(
    "timestep, lr",
    [(0, 1.0), (50, 0.55), (100, 0.1), (150, 0.1), (10_000, 0.1)],
)
def test_learning_rate_schedule(timestep, lr):
    policy = SchedPolicy(OBS, ACT, {**BASE, "lr_schedule": [[0, 1.0], [100, 0.1]]})
    assert policy.cur_lr == pytest.approx(1.0, abs=1e-6)
    policy.on_global_var_update({"timestep": timestep})
    assert policy.global_timestep == timestep  # base class still runs
    assert policy.cur_lr == pytest.approx(lr, abs=1e-6)
    assert [g["lr"] for o in policy._optimizers for g in o.param_groups] == [pytest.approx(lr, abs=1e-6)]


def test_constant_lr_and_entropy_without_schedules():
    policy = SchedPolicy(OBS, ACT, {**BASE, "entropy_coeff": 0.3})
    policy.on_global_var_update({"timestep": 1000})
    assert policy.cur_lr == 0.1 and policy.entropy_coeff == 0.3
    assert policy._optimizers[0].param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize(
    "schedule, timestep, expected",
    [
        ([[0, 0.5], [10, 0.1]], 5, 0.3),
        ([[0, 0.5], [10, 0.1]], 99, 0.1),  # outside: last value
        (100, 25, 0.3),  # older form: linear decay of entropy_coeff=0.4 to 0 at t=100
        (100, 500, 0.0),
    ],
)
def test_entropy_coeff_schedule(schedule, timestep, expected):
    policy = SchedPolicy(OBS, ACT, {**BASE, "entropy_coeff": 0.4})
    # (The config validator only accepts the list form; the mixin takes both.)
    EntropyCoeffSchedule.__init__(policy, 0.4, schedule)
    assert policy.entropy_coeff == pytest.approx(0.4 if isinstance(schedule, int) else 0.5, abs=1e-6)
    policy.on_global_var_update({"timestep": timestep})
    assert policy.entropy_coeff == pytest.approx(expected, abs=1e-6)


class KLPolicy(KLCoeffMixin, TorchPolicy):
    def __init__(self, obs_space, action_space, config):
        TorchPolicy.__init__(self, obs_space, action_space, config)
        KLCoeffMixin.__init__(self, config)


@pytest.mark.parametrize(
    "sampled_kl, expected",
    [(0.05, 0.3), (0.005, 0.2), (0.0049, 0.1), (0.0201, 0.3), (0.02, 0.2), (0.01, 0.2)],
)
def test_kl_coeff_update(sampled_kl, expected):
    policy = KLPolicy(OBS, ACT, {**BASE, "kl_coeff": 0.2, "kl_target": 0.01})
    assert policy.update_kl(sampled_kl) == pytest.approx(expected, abs=1e-6)
    assert policy.kl_coeff == pytest.approx(expected, abs=1e-6)


def test_kl_coeff_in_state():
    a = KLPolicy(OBS, ACT, {**BASE, "kl_coeff": 0.2, "kl_target": 0.01})
    a.update_kl(1.0)
    state = a.get_state()
    assert state["current_kl_coeff"] == pytest.approx(0.3, abs=1e-6)
    b = KLPolicy(OBS, ACT, {**BASE, "kl_coeff": 0.2, "kl_target": 0.01})
    b.set_state(state)
    assert b.kl_coeff == pytest.approx(0.3, abs=1e-6) and "current_kl_coeff" in state
    del state["current_kl_coeff"]
    b.set_state(state)
    assert b.kl_coeff == 0.2


class VFPolicy(ValueNetworkMixin, TorchPolicy):
    def __init__(self, obs_space, action_space, config):
        TorchPolicy.__init__(self, obs_space, action_space, config)
        ValueNetworkMixin.__init__(self, config)


def test_value_network_mixin():
    torch.manual_seed(0)
    policy = VFPolicy(OBS, ACT, {**BASE, "use_gae": True})
    obs = np.array([[0.1, -0.2, 0.3]], np.float32)
    value = policy._value(**{SampleBatch.OBS: obs})
    with torch.no_grad():
        policy.model({SampleBatch.OBS: torch.from_numpy(obs)})
        expected = policy.model.value_function()[0].item()
    assert isinstance(value, float) and value == pytest.approx(expected, abs=1e-6)
    no_gae = VFPolicy(OBS, ACT, {**BASE, "use_gae": False})
    assert no_gae._value(**{SampleBatch.OBS: obs}) == 0.0


def _policy_with_target(device_config, tau=None):
    from rlpolicy.models.catalog import MODEL_DEFAULTS, ModelCatalog

    class WithTarget(TargetNetworkMixin, TorchPolicy):
        def __init__(self, obs_space, action_space, config):
            torch.manual_seed(3)
            self.target_model = ModelCatalog.get_model_v2(
                obs_space,
                action_space,
                2,
                {**MODEL_DEFAULTS, "fcnet_hiddens": [8]},
                framework="torch",
                name="target",
            )
            torch.manual_seed(4)
            TorchPolicy.__init__(self, obs_space, action_space, config)
            TargetNetworkMixin.__init__(self)

    cfg = {**BASE, **device_config}
    if tau is not None:
        cfg["tau"] = tau
    return WithTarget(OBS, ACT, cfg)


def _sd(module):
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def test_target_network_hard_then_soft_update(device_config):
    policy = _policy_with_target(device_config, tau=0.25)
    targets = list(dict.fromkeys(policy.target_models.values()))
    main = _sd(policy.model)
    for t in targets:  # hard initial sync
        for k, v in _sd(t).items():
            np.testing.assert_array_equal(v, main[k])
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(1.0)
    old_target = _sd(targets[0])
    new_main = _sd(policy.model)
    policy.update_target()  # tau from config: 0.25
    for k, v in _sd(targets[0]).items():
        np.testing.assert_allclose(v, 0.25 * new_main[k] + 0.75 * old_target[k], rtol=1e-6, atol=1e-6)
    policy.update_target(tau=1.0)
    for k, v in _sd(targets[-1]).items():
        np.testing.assert_allclose(v, new_main[k], rtol=1e-6, atol=1e-6)


def test_target_network_follows_set_weights(device_config):
    policy = _policy_with_target(device_config)
    weights = {k: v + 2.0 for k, v in policy.get_weights().items()}
    policy.set_weights(weights)
    for t in policy.target_models.values():
        for k, v in _sd(t).items():
            np.testing.assert_allclose(v, weights[k], rtol=1e-6)


def test_update_target_without_target_models():
    class NoTarget(TargetNetworkMixin, TorchPolicy):
        def __init__(self, obs_space, action_space, config):
            TorchPolicy.__init__(self, obs_space, action_space, config)

    policy = NoTarget(OBS, ACT, dict(BASE))
    with pytest.raises(ValueError, match="NoTarget.update_target\\(\\): the policy has no"):
        policy.update_target()
