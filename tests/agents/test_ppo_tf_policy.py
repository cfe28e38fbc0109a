"""PPOTFPolicy (graph "tf") and PPOTFPolicy.as_eager() ("tf2").

The loss and learner stats against a numpy re-computation from the policy's
own weights (tanh MLP, separate policy and value stacks, as in
test_ppo_torch_policy.py), the mixins wired into the loss (KL coefficient,
schedules), value fetches and GAE bootstrapping against numpy, and a short
learning-progress run on CartPole.
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from rlpolicy.agents.ppo import PPOTFPolicy  # noqa: E402
from rlpolicy.agents.ppo.ppo_tf_policy import KLCoeffMixin, ValueNetworkMixin  # noqa: E402
from rlpolicy.policy import tf_mixins  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
CONFIG = {
    "lr": 1e-3,
    "clip_param": 0.2,
    "vf_clip_param": 0.5,
    "kl_coeff": 0.3,
    "kl_target": 0.01,
    "entropy_coeff": 0.01,
    "vf_loss_coeff": 0.5,
    "gamma": 0.9,
    "lambda": 0.8,
    "seed": 0,
    "model": {"fcnet_hiddens": [8], "fcnet_activation": "tanh", "vf_share_layers": False},
}
STAT_NAMES = [
    "cur_kl_coeff",
    "cur_lr",
    "total_loss",
    "policy_loss",
    "vf_loss",
    "vf_explained_var",
    "kl",
    "entropy",
    "entropy_coeff",
]


def tf_weights(policy):
    """The model's variables as ``{"<layer>/<kernel|bias>": float64 array}``."""
    vs = policy.model.variables()
    sess = policy.get_session()
    values = sess.run(vs) if sess is not None else [v.numpy() for v in vs]
    return {v.name.split(":")[0]: np.asarray(x, np.float64) for v, x in zip(vs, values)}


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def dense(w, layer, x, act=False):
    y = x @ w[f"{layer}/kernel"] + w[f"{layer}/bias"]
    return np.tanh(y) if act else y


def numpy_forward(w, obs):
    obs = obs.astype(np.float64)
    logits = dense(w, "fc_out", dense(w, "fc_1", obs, True))
    value = dense(w, "value_out", dense(w, "fc_value_1", obs, True))[:, 0]
    return logits, value


def numpy_stats(w, b, cfg):
    logits, value = numpy_forward(w, b["obs"])
    logp_new, logp_old = log_softmax(logits), log_softmax(b["action_dist_inputs"].astype(np.float64))
    n = len(logits)
    ratio = np.exp(logp_new[np.arange(n), b["actions"]] - b["action_logp"])
    adv = b["advantages"]
    surr = np.minimum(adv * ratio, adv * np.clip(ratio, 1 - cfg["clip_param"], 1 + cfg["clip_param"]))
    kl = (np.exp(logp_old) * (logp_old - logp_new)).sum(-1)
    ent = -(np.exp(logp_new) * logp_new).sum(-1)
    vf = np.clip((value - b["value_targets"]) ** 2, 0, cfg["vf_clip_param"])
    total = np.mean(-surr + cfg["kl_coeff"] * kl + cfg["vf_loss_coeff"] * vf - cfg["entropy_coeff"] * ent)
    vt = b["value_targets"]
    ev = max(-1.0, 1 - np.var(vt - value) / np.var(vt))
    return {
        "total_loss": total,
        "policy_loss": np.mean(-surr),
        "vf_loss": np.mean(vf),
        "vf_explained_var": ev,
        "kl": np.mean(kl),
        "entropy": np.mean(ent),
    }


def make_batch(n=16, seed=0):
    r = np.random.default_rng(seed)
    logits = r.normal(size=(n, 3)).astype(np.float32)
    actions = r.integers(0, 3, n)
    logp = log_softmax(logits)[np.arange(n), actions]
    return SampleBatch(
        {
            "obs": r.uniform(-1, 1, (n, 4)).astype(np.float32),
            "actions": actions,
            "action_dist_inputs": logits,
            "action_logp": logp.astype(np.float32),
            "advantages": r.normal(size=n).astype(np.float32),
            "value_targets": r.normal(size=n).astype(np.float32),
        }
    )


def build(framework, **overrides):
    cls = PPOTFPolicy if framework == "tf" else PPOTFPolicy.as_eager()
    return cls(OBS, ACT, {**CONFIG, **overrides, "framework": framework})


@pytest.fixture(scope="module", params=["tf", "tf2"])
def policy(request):
    return build(request.param, lr_schedule=[[0, 1e-3], [100, 1e-4]])


def assert_stats(stats, expected):
    assert [k for k in stats if k not in ("model", "allreduce_latency")] == STAT_NAMES
    for name, value in expected.items():
        assert float(stats[name]) == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_mixin_paths_as_in_rllib():
    from rlpolicy.policy.tf_policy import EntropyCoeffSchedule, LearningRateSchedule

    assert KLCoeffMixin is tf_mixins.KLCoeffMixin and ValueNetworkMixin is tf_mixins.ValueNetworkMixin
    assert LearningRateSchedule is tf_mixins.LearningRateSchedule
    assert EntropyCoeffSchedule is tf_mixins.EntropyCoeffSchedule
    for mixin in (
        tf_mixins.LearningRateSchedule,
        tf_mixins.EntropyCoeffSchedule,
        KLCoeffMixin,
        ValueNetworkMixin,
    ):
        assert mixin in PPOTFPolicy.__mro__


def test_learner_stats_match_numpy_and_mixins_feed_the_loss(policy):
    batch = make_batch()
    stats = policy.learn_on_batch(batch.copy())[LEARNER_STATS_KEY]
    # The weights changed; recompute from the new ones for the next step.
    w = tf_weights(policy)
    stats = policy.learn_on_batch(batch.copy())[LEARNER_STATS_KEY]
    assert_stats(stats, numpy_stats(w, batch, CONFIG))
    assert float(stats["cur_kl_coeff"]) == pytest.approx(0.3, rel=1e-6)
    assert float(stats["cur_lr"]) == pytest.approx(1e-3, rel=1e-6)
    assert float(stats["entropy_coeff"]) == pytest.approx(0.01, rel=1e-6)
    # KL far above 2 * kl_target: x1.5; the schedule at t=50: halfway to 1e-4.
    assert policy.update_kl(1.0) == pytest.approx(0.45)
    policy.on_global_var_update({"timestep": 50})
    w = tf_weights(policy)
    stats = policy.learn_on_batch(batch.copy())[LEARNER_STATS_KEY]
    assert_stats(stats, numpy_stats(w, batch, {**CONFIG, "kl_coeff": 0.45}))
    assert float(stats["cur_kl_coeff"]) == pytest.approx(0.45, rel=1e-6)
    assert float(stats["cur_lr"]) == pytest.approx(5.5e-4, rel=1e-6)
    if policy.get_session() is None:  # eager: the Keras optimizer follows the schedule
        assert float(policy._optimizer.learning_rate.numpy()) == pytest.approx(5.5e-4, rel=1e-6)
    assert policy.get_state()["current_kl_coeff"] == pytest.approx(0.45)


@pytest.mark.parametrize("framework", ["tf", "tf2"])
def test_kl_term_off_and_critic_off(framework):
    cfg = {"kl_coeff": 0.0, "use_critic": False, "use_gae": False}
    policy = build(framework, **cfg)
    batch = make_batch(seed=1)
    expected = numpy_stats(tf_weights(policy), batch, {**CONFIG, **cfg, "vf_loss_coeff": 0.0})
    stats = policy.learn_on_batch(batch)[LEARNER_STATS_KEY]
    assert float(stats["kl"]) == 0.0 and float(stats["vf_loss"]) == 0.0
    assert float(stats["vf_explained_var"]) == 0.0
    assert float(stats["total_loss"]) == pytest.approx(
        expected["policy_loss"] - 0.01 * expected["entropy"], rel=1e-4, abs=1e-6
    )
    assert policy._value(obs=np.zeros((1, 4), np.float32)) == 0.0  # no GAE: no bootstrap value


def test_value_fetches_and_gae_bootstrap_match_numpy(policy):
    r = np.random.default_rng(3)
    n = 5
    obs = r.uniform(-1, 1, (n + 1, 4)).astype(np.float32)
    actions, _, extra = policy.compute_actions(obs[:n], explore=False)
    w = tf_weights(policy)
    logits, values = numpy_forward(w, obs)
    np.testing.assert_allclose(extra[SampleBatch.VF_PREDS], values[:n], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(actions, np.argmax(logits[:n], -1))
    rewards = r.normal(size=n).astype(np.float32)
    batch = SampleBatch(
        {
            SampleBatch.OBS: obs[:n],
            SampleBatch.NEXT_OBS: obs[1:],
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: rewards,
            SampleBatch.DONES: np.zeros(n, bool),
            SampleBatch.EPS_ID: np.zeros(n, np.int64),
            SampleBatch.AGENT_INDEX: np.zeros(n, np.int64),
            SampleBatch.T: np.arange(n),
            **extra,
        }
    )
    out = policy.postprocess_trajectory(batch)
    # Not terminated: bootstrap from V(obs[n]); GAE with gamma=0.9, lambda=0.8.
    v_ext = np.append(values[:n], values[n])
    deltas = rewards + 0.9 * v_ext[1:] - v_ext[:-1]
    adv = np.zeros(n)
    acc = 0.0
    for t in reversed(range(n)):
        acc = deltas[t] + 0.9 * 0.8 * acc
        adv[t] = acc
    np.testing.assert_allclose(out["advantages"], adv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["value_targets"], adv + values[:n], rtol=1e-4, atol=1e-5)


@pytest.mark.learning
@pytest.mark.parametrize("framework", ["tf", "tf2"])
def test_ppo_return_rises_on_cartpole(framework):
    from rlpolicy.cli.training import SimpleTrainer

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
        "framework": framework,
        "seed": 0,
        # Untraced eager steps are ~5x slower; tracing keeps this test short.
        "eager_tracing": framework == "tf2",
    }
    trainer = SimpleTrainer("ppo", lambda: gym.make("CartPole-v1"), cfg, num_envs=8, seed=0)
    assert type(trainer.policy).__name__ == ("PPOTFPolicy" if framework == "tf" else "PPOTFPolicy_eager")
    first = trainer.train()
    for _ in range(5):
        last = trainer.train()
    assert np.isfinite(last.learner_stats["total_loss"])
    assert last.episode_reward_mean > first.episode_reward_mean + 15, (first, last)


@pytest.mark.parametrize("framework", ["tf", "tf2"])
def test_towers_with_grad_clip_step_like_one_device(framework):
    # Two fake-GPU towers average their gradients and clip the mean: the same
    # step as one device on the whole minibatch (the towers do not clip alone).
    cfg = {"grad_clip": 0.05, "sgd_minibatch_size": 16, "train_batch_size": 16}
    single = build(framework, **cfg)
    towers = build(framework, **cfg, num_gpus=2, _fake_gpus=True)
    towers.set_weights(single.get_weights())
    start = tf_weights(single)
    batch = make_batch(seed=4)
    single.learn_on_batch(batch.copy())
    assert towers.load_batch_into_buffer(batch.copy()) == 8
    towers.learn_on_loaded_batch(0)
    after_single, after_towers = tf_weights(single), tf_weights(towers)
    for name, value in after_single.items():
        np.testing.assert_allclose(after_towers[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert any(not np.allclose(after_single[k], start[k]) for k in start)


@pytest.mark.tf
@pytest.mark.tf_eager_code
@pytest.mark.tf
def test_compute_and_clip_gradients_clips_by_global_norm():
    from rlpolicy.agents.ppo.ppo_tf_policy import compute_and_clip_gradients
    from rlpolicy.utils.framework import try_import_tf

    _, tf, _ = try_import_tf()

    class Model:
        def __init__(self):
            self.vars = [tf.Variable([3.0, 0.0]), tf.Variable([4.0])]

        def trainable_variables(self):
            return self.vars

    class Tape:
        def gradient(self, loss, variables):
            return [tf.constant([3.0, 0.0]), tf.constant([4.0])]  # global norm 5

    class Opt:
        tape = Tape()

    class Pol:
        model = Model()
        config = {"grad_clip": 1.0}

    gv = compute_and_clip_gradients(Pol(), Opt(), None)
    np.testing.assert_allclose(gv[0][0].numpy(), [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(gv[1][0].numpy(), [0.8], rtol=1e-6)
    assert gv[0][1] is Pol.model.vars[0]
    Pol.config = {"grad_clip": None}
    np.testing.assert_allclose(compute_and_clip_gradients(Pol(), Opt(), None)[0][0].numpy(), [3.0, 0.0])


@pytest.mark.parametrize("framework", ["tf", "tf2"])
def test_loss_functions_work_on_a_class_with_rllib_1_11_mixins_only(framework):
    # A 1.x client class: RLlib 1.11's mixin list (no PPOLossMixin) with the
    # module's loss and stats functions. The loss terms are its own attributes
    # under 1.11's names, and the stats match the numpy re-computation.
    from rlpolicy.agents.ppo.ppo_tf_policy import PPOLossMixin, kl_and_loss_stats, ppo_surrogate_loss

    mixins = [tf_mixins.LearningRateSchedule, tf_mixins.EntropyCoeffSchedule, KLCoeffMixin, ValueNetworkMixin]
    client = PPOTFPolicy.with_updates(
        name="ClientPPO", mixins=mixins, loss_fn=ppo_surrogate_loss, stats_fn=kl_and_loss_stats
    )
    cls = client if framework == "tf" else client.as_eager()
    policy = cls(OBS, ACT, {**CONFIG, "framework": framework})
    assert PPOLossMixin not in type(policy).__mro__ and PPOLossMixin in PPOTFPolicy.__mro__
    batch = make_batch(seed=2)
    expected = numpy_stats(tf_weights(policy), batch, CONFIG)
    stats = policy.learn_on_batch(batch)[LEARNER_STATS_KEY]
    assert_stats(stats, expected)
    for name in (
        "_total_loss",
        "_mean_policy_loss",
        "_mean_vf_loss",
        "_vf_explained_var",
        "_mean_kl_loss",
        "_mean_entropy",
        "_value_fn_out",
    ):
        assert name in vars(policy), name
    assert policy._mean_kl is policy._mean_kl_loss
