"""ParameterNoise on DQN policies: the noise put on / taken off the weights equals
the stored draws, LayerNorms are left alone, the stddev adapts in the right
direction, the batch is not changed, and bad spaces are rejected."""

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
CONFIG = {"model": {"fcnet_hiddens": [8]}, "hiddens": [8]}


def _policy(framework, **exploration):
    cfg = dict(CONFIG, framework=framework, exploration_config={"type": "ParameterNoise", **exploration})
    if framework == "torch":
        pytest.importorskip("torch")
        from rlpolicy.agents.dqn.dqn_torch_policy import DQNTorchPolicy

        return DQNTorchPolicy(OBS, ACT, cfg)
    pytest.importorskip("tensorflow")
    from rlpolicy.agents.dqn.dqn_tf_policy import DQNTFPolicy

    return (DQNTFPolicy if framework == "tf" else DQNTFPolicy.as_eager())(OBS, ACT, cfg)


def _read(policy, variables):
    if policy.framework == "torch":
        return [v.detach().numpy().copy() for v in variables]
    sess = policy.get_session()
    return sess.run(variables) if sess is not None else [v.numpy() for v in variables]


@pytest.fixture(scope="module", params=["torch", "tf", "tf2"])
def noisy_policy(request):
    return _policy(request.param)


def test_noise_goes_on_with_explore_and_off_without(noisy_policy):
    pol, ex = noisy_policy, noisy_policy.exploration
    sess = pol.get_session() if pol.framework != "torch" else None
    all_keys = pol.model.trainable_variables(as_dict=True)
    layer_norms = [v for k, v in all_keys.items() if "LayerNorm" in k]
    assert layer_norms and len(ex.model_variables) == len(all_keys) - len(layer_norms)
    clean = _read(pol, ex.model_variables)
    ln_before = _read(pol, layer_norms)
    ex.on_episode_start(pol, tf_sess=sess)
    obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    pol.compute_actions(obs, explore=True)
    assert ex.weights_are_currently_noisy
    for w, w0, n in zip(_read(pol, ex.model_variables), clean, ex.noise):
        np.testing.assert_allclose(w - w0, n, rtol=1e-4, atol=1e-5)
    drawn = np.concatenate([n.ravel() for n in ex.noise])
    assert abs(drawn.std() - ex.stddev) < 0.25 * ex.stddev  # N(0, stddev) draws
    for a, b in zip(_read(pol, layer_norms), ln_before):
        np.testing.assert_array_equal(a, b)
    pol.compute_actions(obs, explore=False)
    assert not ex.weights_are_currently_noisy
    for w, w0 in zip(_read(pol, ex.model_variables), clean):
        np.testing.assert_allclose(w, w0, rtol=1e-5, atol=1e-5)


def test_stddev_grows_when_policies_agree_and_shrinks_when_they_differ():
    pol = _policy("torch", initial_stddev=1e-6, random_timesteps=0)
    ex = pol.exploration
    obs = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    batch = SampleBatch({SampleBatch.OBS: obs, SampleBatch.ACTIONS: np.zeros(32, np.int64)})
    ex.on_episode_start(pol)
    pol.compute_actions(obs[:1], explore=True)
    ex.set_state({"cur_stddev": 1e-6})
    ex.postprocess_trajectory(pol, batch)  # tiny noise: KL ~ 0 <= delta
    assert ex.stddev == pytest.approx(1e-6 * 1.01)
    np.testing.assert_array_equal(batch[SampleBatch.ACTIONS], np.zeros(32))  # batch untouched
    ex.set_state({"cur_stddev": 100.0})
    ex.on_episode_start(pol)
    pol.compute_actions(obs[:1], explore=True, timestep=10)  # epsilon now 0.01
    ex.postprocess_trajectory(pol, batch)  # huge noise: KL >> -log(1 - 0.01 + 0.01/2)
    assert ex.stddev == pytest.approx(100.0 / 1.01)
    assert ex.get_state() == {"cur_stddev": pytest.approx(100.0 / 1.01)}


def test_parameter_noise_errors():
    pytest.importorskip("torch")
    from rlpolicy.utils.error import UnsupportedSpaceException
    from rlpolicy.utils.exploration.parameter_noise import ParameterNoise

    with pytest.raises(ValueError, match=r"ParameterNoise needs the policy's model \(got model=None\)"):
        ParameterNoise(
            ACT, framework="torch", policy_config={"explore": True}, model=None, num_workers=0, worker_index=0
        )
    pol = _policy("torch")
    with pytest.raises(
        UnsupportedSpaceException, match=r"no default sub_exploration for action space MultiDiscrete"
    ):
        ParameterNoise(
            gym.spaces.MultiDiscrete([2, 2]),
            framework="torch",
            policy_config=pol.config,
            model=pol.model,
            num_workers=0,
            worker_index=0,
        )
