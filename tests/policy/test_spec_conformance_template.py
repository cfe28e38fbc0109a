"""Spec conformance of ``build_policy_class`` (RLlib 1.11's policy_template listing).

Covers what tests/policy/test_policy_template.py leaves open: the conversion
of hook outputs to numpy, the no-grad postprocessing wrapper when called
directly, view-requirement pruning after the dummy-batch run (with a loss
and in evaluation mode), target models per tower through ``make_model`` and
``TargetNetworkMixin``, the default-config merge and learning on fake GPUs.
Expectations are hand-worked or computed with numpy.
"""

import copy

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlpolicy.models.catalog import ModelCatalog  # noqa: E402
from rlpolicy.policy.policy_template import build_policy_class  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402
from rlpolicy.policy.torch_mixins import TargetNetworkMixin  # noqa: E402
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402
from rlpolicy.utils.metrics.learner_info import LEARNER_STATS_KEY  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)
SMALL = {"model": {"fcnet_hiddens": [8]}, "seed": 0}
FAKE2 = {"num_gpus": 2, "_fake_gpus": True}


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model(train_batch)
    logp = dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])
    return -torch.mean(logp * train_batch["advantages"])


def add_advantages(policy, batch, other_agent_batches=None, episode=None):
    batch["advantages"] = np.asarray(batch[SampleBatch.REWARDS], np.float32) - 1.0
    return batch


def tensor_stats(policy, train_batch):
    return {
        "adv_sum": torch.sum(torch.as_tensor(train_batch["advantages"])),
        "nested": {"two": torch.tensor([2.0, 2.0])},
    }


PG = build_policy_class(
    "SpecPG", "torch", loss_fn=pg_loss, postprocess_fn=add_advantages, stats_fn=tensor_stats
)


def batch_of(n, seed=0):
    r = np.random.default_rng(seed)
    return SampleBatch(
        {
            SampleBatch.OBS: r.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: r.integers(0, 2, n),
            SampleBatch.REWARDS: r.normal(size=n).astype(np.float32),
        }
    )


# ------------------------------------------------------------------ hook outputs


def test_stats_fn_output_reaches_learner_stats_as_numpy():
    torch.manual_seed(0)
    policy = PG(OBS, ACT, dict(SMALL))
    batch = add_advantages(policy, batch_of(6))
    expected = float(np.sum(np.asarray(batch[SampleBatch.REWARDS]) - 1.0))
    stats = policy.learn_on_batch(batch)[LEARNER_STATS_KEY]
    assert not torch.is_tensor(stats["adv_sum"])
    assert float(stats["adv_sum"]) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert isinstance(stats["nested"]["two"], np.ndarray)
    np.testing.assert_array_equal(stats["nested"]["two"], [2.0, 2.0])
    assert stats["allreduce_latency"] == 0.0


def test_extra_action_out_fn_sees_sampled_actions_and_outputs_numpy():
    seen = {}

    def extra(policy, input_dict, state_batches, model, action_dist):
        seen["actions"] = input_dict[SampleBatch.ACTIONS]
        seen["grad"] = torch.is_grad_enabled()
        logits = action_dist.inputs
        return {"p1": torch.softmax(logits, -1)[:, 1]}

    cls = PG.with_updates(name="ExtraPG", extra_action_out_fn=extra)
    torch.manual_seed(0)
    policy = cls(OBS, ACT, dict(SMALL))
    obs = batch_of(5)[SampleBatch.OBS]
    actions, _, out = policy.compute_actions(obs, explore=True)
    assert isinstance(out["p1"], np.ndarray)
    np.testing.assert_array_equal(np.asarray(seen["actions"]), actions)
    assert seen["grad"] is False
    logits = out[SampleBatch.ACTION_DIST_INPUTS].astype(np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(out["p1"], p[:, 1], rtol=1e-5, atol=1e-6)


def test_postprocess_trajectory_direct_call_runs_under_no_grad_and_returns_fn_output():
    seen = {}

    def post(policy, batch, other_agent_batches=None, episode=None):
        seen.update(grad=torch.is_grad_enabled(), others=other_agent_batches, episode=episode)
        out = batch.copy()
        out["advantages"] = np.zeros(len(batch), np.float32)
        return out

    cls = PG.with_updates(name="PostPG", postprocess_fn=post)
    policy = cls(OBS, ACT, dict(SMALL))
    batch = batch_of(4)
    others = {"a": (None, batch)}
    out = policy.postprocess_trajectory(batch, others, "episode-object")
    assert seen == {"grad": False, "others": others, "episode": "episode-object"}
    assert "advantages" in out and "advantages" not in batch
    assert torch.is_grad_enabled()  # restored after the call
    # Without a postprocess_fn the batch comes back as is.
    plain = build_policy_class("Plain", "torch", loss_fn=lambda p, m, d, b: m(b)[0].sum())
    pol = plain(OBS, ACT, dict(SMALL))
    b = batch_of(3)
    assert pol.postprocess_trajectory(b) is b


def test_get_default_config_is_merged_under_the_given_config():
    cls = PG.with_updates(
        name="DefPG", get_default_config=lambda: {"lr": 0.123, "tau": 0.5, "model": {"fcnet_hiddens": [4]}}
    )
    policy = cls(OBS, ACT, {"tau": 0.9})
    assert policy.config["lr"] == 0.123 and policy.config["tau"] == 0.9
    assert policy.config["model"]["fcnet_hiddens"] == [4]
    assert policy._optimizers[0].param_groups[0]["lr"] == 0.123


# ------------------------------------------------------------------ view requirements


def test_view_requirements_pruned_to_what_acting_postprocessing_and_loss_read():
    torch.manual_seed(0)
    policy = PG(OBS, ACT, dict(SMALL))
    vr = policy.view_requirements
    # Read by acting (obs), by the loss (actions, advantages), added by
    # postprocessing (advantages), read by postprocessing (rewards), plus the
    # sampler columns RLlib always keeps.
    kept = {"obs", "actions", "advantages", "rewards", "dones", "infos", "eps_id", "unroll_id", "agent_index"}
    assert kept <= set(vr)
    for gone in (
        "new_obs",
        "prev_actions",
        "prev_rewards",
        SampleBatch.ACTION_DIST_INPUTS,
        SampleBatch.ACTION_LOGP,
        SampleBatch.ACTION_PROB,
    ):
        assert gone not in vr, gone
    assert vr["obs"].used_for_compute_actions is True
    assert vr["actions"].used_for_compute_actions is False
    assert vr["advantages"].used_for_compute_actions is False
    assert vr["advantages"].used_for_training is True


def test_column_read_only_by_postprocessing_is_not_used_for_training():
    def post(policy, batch, other_agent_batches=None, episode=None):
        batch["advantages"] = np.asarray(batch[SampleBatch.NEXT_OBS])[:, 0] * 0.0
        return batch

    torch.manual_seed(0)
    policy = PG.with_updates(name="NextObsPG", postprocess_fn=post)(OBS, ACT, dict(SMALL))
    vr = policy.view_requirements
    assert SampleBatch.NEXT_OBS in vr
    assert vr[SampleBatch.NEXT_OBS].used_for_training is False
    assert vr["advantages"].used_for_training is True


def test_in_evaluation_keeps_all_view_requirements():
    torch.manual_seed(0)
    policy = PG(OBS, ACT, {**SMALL, "in_evaluation": True})
    assert policy._loss is None
    vr = policy.view_requirements
    for key in ("obs", "new_obs", "actions", "prev_actions", "prev_rewards", "rewards", "dones"):
        assert key in vr, key


# ------------------------------------------------------------------ target models, mixins


def _make_model_with_target(policy, obs_space, action_space, config):
    _, n = ModelCatalog.get_action_dist(action_space, config["model"], framework="torch")
    model = ModelCatalog.get_model_v2(
        obs_space, action_space, n, config["model"], framework="torch", name="main"
    )
    policy.target_model = ModelCatalog.get_model_v2(
        obs_space, action_space, n, config["model"], framework="torch", name="target"
    )
    return model


def _setup_target(policy, obs_space, action_space, config):
    TargetNetworkMixin.__init__(policy)


TargetPG = build_policy_class(
    "TargetPG",
    "torch",
    loss_fn=pg_loss,
    postprocess_fn=add_advantages,
    make_model=_make_model_with_target,
    before_loss_init=_setup_target,
    mixins=[TargetNetworkMixin],
)


@pytest.mark.parametrize("devices", [{}, FAKE2], ids=["cpu", "fake-gpu-x2"])
def test_target_models_per_tower_via_make_model(devices):
    torch.manual_seed(0)
    policy = TargetPG(OBS, ACT, {**SMALL, **devices, "tau": 0.25})
    n = 2 if devices else 1
    assert len(policy.model_gpu_towers) == n
    assert list(policy.target_models) == policy.model_gpu_towers
    # The initial hard sync: every target equals the main model.
    main = {k: v.numpy().copy() for k, v in policy.model.state_dict().items()}
    for target in policy.target_models.values():
        for k, v in target.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), main[k])
    old_target = copy.deepcopy(main)
    policy.learn_on_batch(add_advantages(policy, batch_of(8)))
    new_main = {k: v.numpy().copy() for k, v in policy.model.state_dict().items()}
    policy.update_target()  # tau from the config: 0.25
    for target in policy.target_models.values():
        for k, v in target.state_dict().items():
            np.testing.assert_allclose(
                v.numpy(), 0.25 * new_main[k] + 0.75 * old_target[k], rtol=1e-6, atol=1e-7
            )


class _Mixin:
    def extra_grad_info(self, train_batch):
        return {"from": "mixin"}

    def optimizer(self):
        return torch.optim.SGD(self.model.parameters(), lr=0.5)

    def get_initial_state(self):
        return ["mixin-state"]


def test_mixin_methods_not_in_the_template_body_beat_torch_policy():
    cls = build_policy_class(
        "MixPG", "torch", loss_fn=pg_loss, postprocess_fn=add_advantages, mixins=[_Mixin]
    )
    assert cls.__mro__.index(_Mixin) < cls.__mro__.index(TorchPolicy)
    policy = cls(OBS, ACT, dict(SMALL))
    assert policy.get_initial_state() == ["mixin-state"]  # plain MRO lookup
    with_stats = cls.with_updates(name="MixPG2", stats_fn=lambda p, b: {"from": "stats_fn"})
    assert with_stats(OBS, ACT, dict(SMALL)).extra_grad_info(SampleBatch({"advantages": np.zeros(2)})) == {
        "from": "stats_fn"
    }


# ------------------------------------------------------------------ learning on fake GPUs


def test_built_policy_learns_a_bandit_on_two_fake_gpus():
    # Action 1 pays +1, action 0 pays -1; advantages = reward - 1 would bias,
    # so use rewards themselves as advantages.
    def post(policy, batch, other_agent_batches=None, episode=None):
        batch["advantages"] = np.asarray(batch[SampleBatch.REWARDS], np.float32)
        return batch

    cls = PG.with_updates(name="BanditPG", postprocess_fn=post)
    torch.manual_seed(0)
    policy = cls(OBS, ACT, {**SMALL, **FAKE2, "lr": 0.05, "sgd_minibatch_size": 64})
    obs = np.zeros((64, 3), np.float32)

    def p_right():
        logits = policy.compute_actions(obs[:1], explore=False)[2][SampleBatch.ACTION_DIST_INPUTS]
        e = np.exp(logits[0] - logits[0].max())
        return e[1] / e.sum()

    start = p_right()
    for _ in range(15):
        actions, _, _ = policy.compute_actions(obs, explore=True)
        b = SampleBatch(
            {
                SampleBatch.OBS: obs,
                SampleBatch.ACTIONS: actions,
                SampleBatch.REWARDS: np.where(actions == 1, 1.0, -1.0).astype(np.float32),
            }
        )
        b = policy.postprocess_trajectory(b)
        assert policy.load_batch_into_buffer(b) == 32
        fetches = policy.learn_on_loaded_batch(0)
        assert {"tower_0", "tower_1"} <= set(fetches)
    assert p_right() > max(0.9, start + 0.3)
