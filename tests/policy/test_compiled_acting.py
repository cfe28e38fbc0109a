"""TorchPolicy's compiled acting path (config["torch_compile_acting"] = "jit").

Each case runs the same inputs through two policies with the same weights, one
eager and one compiled, and requires the same actions, state-outs and extra
fetches (explore=False; explore=True from the same seed), that the compiled
side really ran a traced graph, and that anything it cannot trace faithfully
falls back to the eager result (logged once).
"""

import logging

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from rlpolicy.models.torch.torch_action_dist import TorchCategorical  # noqa: E402
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2  # noqa: E402
from rlpolicy.policy._torch import compiled_acting  # noqa: E402
from rlpolicy.policy.torch_policy import TorchPolicy  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
ATOL = 1e-5
LOG = "rlpolicy.policy"


class TwoHeadModel(TorchModelV2, nn.Module):
    """A custom model: a tanh layer, then logits scaled by a learned temperature."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.body = nn.Linear(obs_space.shape[0], 8)
        self.head = nn.Linear(8, num_outputs)
        self.log_temp = nn.Parameter(torch.tensor([0.3]))

    def forward(self, input_dict, state, seq_lens):
        h = torch.tanh(self.body(input_dict["obs"]))
        return self.head(h) * torch.exp(self.log_temp), state


class BranchyModel(TwoHeadModel):
    """Python control flow on tensor values: a trace would bake in one branch."""

    def forward(self, input_dict, state, seq_lens):
        obs = input_dict["obs"]
        logits, _ = super().forward(input_dict, state, seq_lens)
        if obs.sum() > 0:
            return logits, state
        return -logits, state


CASES = {
    "fc-discrete": (gym.spaces.Discrete(4), {"fcnet_hiddens": [16, 16]}, None),
    "fc-box": (gym.spaces.Box(-2.0, 2.0, (3,), np.float32), {"fcnet_hiddens": [16]}, None),
    "fc-multidiscrete": (gym.spaces.MultiDiscrete([3, 2]), {"fcnet_hiddens": [16]}, None),
    "lstm-discrete": (
        gym.spaces.Discrete(3),
        {"fcnet_hiddens": [16], "use_lstm": True, "lstm_cell_size": 8},
        None,
    ),
    "lstm-box-prev-action-reward": (
        gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        {
            "fcnet_hiddens": [8],
            "use_lstm": True,
            "lstm_cell_size": 4,
            "lstm_use_prev_action": True,
            "lstm_use_prev_reward": True,
        },
        None,
    ),
    "custom-model": (gym.spaces.Discrete(5), {}, TwoHeadModel),
}


def _make(act_space, model_config, model_cls=None, compiled=True, **config):
    torch.manual_seed(0)
    config = {"model": dict(model_config), **config}
    if compiled:
        config["torch_compile_acting"] = "jit"
    kwargs = {}
    if model_cls is not None:
        kwargs = {
            "model": model_cls(OBS, act_space, act_space.n, config["model"], "custom"),
            "action_distribution_class": TorchCategorical,
        }
    return TorchPolicy(OBS, act_space, config, **kwargs)


def _pair(case, **config):
    act_space, model_config, model_cls = CASES[case]
    eager = _make(act_space, model_config, model_cls, compiled=False, **config)
    compiled = _make(act_space, model_config, model_cls, **config)
    # Different init draws would already differ; make the weights equal on purpose.
    compiled.set_weights(eager.get_weights())
    return eager, compiled


def _inputs(policy, rng, n):
    obs = rng.uniform(-1.0, 1.0, (n, OBS.shape[0])).astype(np.float32)
    states = [np.repeat(s[None], n, axis=0) for s in policy.get_initial_state()]
    kwargs = {}
    if policy.model.model_config.get("lstm_use_prev_action"):
        kwargs["prev_action_batch"] = np.stack([policy.action_space.sample() for _ in range(n)])
    if policy.model.model_config.get("lstm_use_prev_reward"):
        kwargs["prev_reward_batch"] = rng.normal(size=n).astype(np.float32)
    return obs, states, kwargs


def _assert_same(a, b):
    actions_a, states_a, extra_a = a
    actions_b, states_b, extra_b = b
    np.testing.assert_allclose(
        np.asarray(actions_a, np.float64), np.asarray(actions_b, np.float64), atol=ATOL
    )
    assert len(states_a) == len(states_b)
    for sa, sb in zip(states_a, states_b):
        np.testing.assert_allclose(sa, sb, atol=ATOL)
    assert sorted(extra_a) == sorted(extra_b)
    for k in extra_a:
        np.testing.assert_allclose(extra_a[k], extra_b[k], atol=ATOL, err_msg=k)


def _traces(policy):
    graphs = policy._compiled_acting
    assert graphs, "the compiled path was not set up"
    assert graphs.disabled is None, graphs.disabled
    return graphs.num_traces


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("explore", [False, True])
def test_compiled_matches_eager_over_steps(case, explore):
    eager, compiled = _pair(case)
    rng = np.random.default_rng(1)
    obs, states, kwargs = _inputs(eager, rng, 5)
    states_e = states_c = states
    torch.manual_seed(7)  # one seed, then three steps: the same random draws in order
    runs_e = [None] * 3
    for i in range(3):
        runs_e[i] = eager.compute_actions(obs[i:] if not states else obs, states_e, explore=explore, **kwargs)
        states_e = runs_e[i][1]
    torch.manual_seed(7)
    for i in range(3):
        out = compiled.compute_actions(obs[i:] if not states else obs, states_c, explore=explore, **kwargs)
        _assert_same(runs_e[i], out)
        states_c = out[1]
    assert _traces(compiled) >= 1
    assert compiled.global_timestep == eager.global_timestep
    assert len(out[0]) == len(out[2]["action_logp"]) == (5 if states else 3)


def test_explore_samples_follow_the_seed_and_differ_from_deterministic():
    eager, compiled = _pair("fc-discrete")
    n = compiled_acting.CPU_FEEDFORWARD_MAX_BATCH  # (the largest the graphs take on CPU)
    obs = np.random.default_rng(2).uniform(-1, 1, (n, 6)).astype(np.float32)
    # Flat logits near zero: sampled actions spread over the 4 actions.
    torch.manual_seed(3)
    sampled = compiled.compute_actions(obs, explore=True)
    greedy = compiled.compute_actions(obs, explore=False)
    torch.manual_seed(3)
    _assert_same(eager.compute_actions(obs, explore=True), sampled)
    assert len(np.unique(sampled[0])) > 1
    assert not np.array_equal(sampled[0], greedy[0])
    assert _traces(compiled) == 2
    # Greedy = argmax of the distribution inputs; deterministic logp is 0 (prob 1).
    np.testing.assert_array_equal(greedy[0], greedy[2]["action_dist_inputs"].argmax(-1))
    np.testing.assert_allclose(greedy[2]["action_logp"], 0.0)
    # Sampled logp = log_softmax of the logits at the sampled action.
    logits = sampled[2]["action_dist_inputs"].astype(np.float64)
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(
        sampled[2]["action_logp"], log_softmax[np.arange(len(obs)), sampled[0]], atol=ATOL
    )


def test_from_input_dict_matches_eager():
    eager, compiled = _pair("lstm-discrete")
    obs, states, _ = _inputs(eager, np.random.default_rng(4), 3)
    batch = {"obs": obs, "state_in_0": states[0], "state_in_1": states[1]}
    _assert_same(
        eager.compute_actions_from_input_dict(dict(batch), explore=False),
        compiled.compute_actions_from_input_dict(dict(batch), explore=False),
    )
    assert _traces(compiled) == 1


def test_one_graph_per_batch_size_and_explore_flag_bounded_cache():
    eager, compiled = _pair("fc-box")
    rng = np.random.default_rng(5)
    for n, explore in [(1, False), (7, False), (1, False), (1, True), (7, False)]:
        obs = rng.uniform(-1, 1, (n, 6)).astype(np.float32)
        torch.manual_seed(n)
        expected = eager.compute_actions(obs, explore=explore)
        torch.manual_seed(n)
        _assert_same(expected, compiled.compute_actions(obs, explore=explore))
    assert _traces(compiled) == 3  # (1, greedy), (7, greedy), (1, sampled)
    for n in range(2, 2 + compiled_acting.MAX_GRAPHS + 2):
        obs = rng.uniform(-1, 1, (n, 6)).astype(np.float32)
        _assert_same(eager.compute_actions(obs, explore=False), compiled.compute_actions(obs, explore=False))
    assert len(compiled._compiled_acting.graphs) == compiled_acting.MAX_GRAPHS


def test_graphs_see_new_weights():
    eager, compiled = _pair("custom-model")
    obs = np.random.default_rng(6).uniform(-1, 1, (4, 6)).astype(np.float32)
    before = compiled.compute_actions(obs, explore=False)
    new = {k: (2.0 * v + 0.5).astype(np.float32) for k, v in eager.get_weights().items()}
    eager.set_weights(new)
    compiled.set_weights(new)
    after = compiled.compute_actions(obs, explore=False)
    _assert_same(eager.compute_actions(obs, explore=False), after)
    assert not np.allclose(before[2]["action_dist_inputs"], after[2]["action_dist_inputs"])
    # The custom model's logits by hand, from the new weights.
    h = np.tanh(obs @ new["body.weight"].T + new["body.bias"])
    logits = (h @ new["head.weight"].T + new["head.bias"]) * np.exp(new["log_temp"])
    np.testing.assert_allclose(after[2]["action_dist_inputs"], logits, atol=ATOL)
    assert _traces(compiled) == 1  # (the same graph, new parameter values)
    # Another model object in its place: new graphs for it, not the old model's.
    compiled.model = compiled.model_gpu_towers[0] = _make(
        gym.spaces.Discrete(5), {}, TwoHeadModel, compiled=False
    ).model
    eager.model = eager.model_gpu_towers[0] = _make(
        gym.spaces.Discrete(5), {}, TwoHeadModel, compiled=False
    ).model
    _assert_same(eager.compute_actions(obs, explore=False), compiled.compute_actions(obs, explore=False))
    assert compiled._compiled_acting.model is compiled.model
    # An optimizer step changes the parameters in place: the graph follows too.
    with torch.no_grad():
        for p in compiled.model.parameters():
            p.mul_(0.5)
        for p in eager.model.parameters():
            p.mul_(0.5)
    _assert_same(eager.compute_actions(obs, explore=False), compiled.compute_actions(obs, explore=False))


def test_value_dependent_model_falls_back_to_eager(caplog):
    act = gym.spaces.Discrete(3)
    eager = _make(act, {}, BranchyModel, compiled=False)
    compiled = _make(act, {}, BranchyModel)
    compiled.set_weights(eager.get_weights())
    pos = np.full((2, 6), 0.5, np.float32)
    neg = -pos
    with caplog.at_level(logging.WARNING, logger=LOG):
        for obs in (pos, neg, pos, neg):
            _assert_same(
                eager.compute_actions(obs, explore=False), compiled.compute_actions(obs, explore=False)
            )
    # Both branches: the logits of -obs are not the negated logits of obs, but the
    # greedy action comes from the branch, so the two policies agree on every call.
    messages = [r.getMessage() for r in caplog.records if "torch_compile_acting" in r.getMessage()]
    assert len(messages) == 1 and "test_compiled_acting.py" in messages[0]
    assert compiled._compiled_acting.disabled is not None


def _sampler(policy, model, input_dict, state_batches, explore, timestep):
    logits, state = model(input_dict, state_batches, None)
    actions = logits.argmax(-1)
    return actions, torch.zeros(len(actions)), state


@pytest.mark.parametrize("what", ["action_sampler_fn", "extra_action_out"])
def test_unsupported_policies_stay_eager(what, caplog):
    class WithExtra(TorchPolicy):
        def extra_action_out(self, input_dict, state_batches, model, action_dist):
            return {"last": model.last_output()}

    cls = WithExtra if what == "extra_action_out" else TorchPolicy
    kwargs = {"action_sampler_fn": _sampler} if what == "action_sampler_fn" else {}
    config = {"model": {"fcnet_hiddens": [8]}}
    torch.manual_seed(0)
    eager = cls(OBS, gym.spaces.Discrete(3), dict(config), **kwargs)
    torch.manual_seed(0)
    compiled = cls(OBS, gym.spaces.Discrete(3), dict(config, torch_compile_acting="jit"), **kwargs)
    obs = np.random.default_rng(8).uniform(-1, 1, (3, 6)).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger=LOG):
        for _ in range(2):
            _assert_same(
                eager.compute_actions(obs, explore=False), compiled.compute_actions(obs, explore=False)
            )
    messages = [r.getMessage() for r in caplog.records if "torch_compile_acting" in r.getMessage()]
    assert len(messages) == 1 and what in messages[0]
    assert compiled._compiled_acting is False


def test_random_phase_stays_eager_then_compiles():
    exploration = {"type": "StochasticSampling", "random_timesteps": 4}
    eager, compiled = _pair("fc-discrete", exploration_config=exploration)
    obs = np.random.default_rng(9).uniform(-1, 1, (2, 6)).astype(np.float32)
    torch.manual_seed(11)
    eager.exploration.action_space.seed(11)  # (the random phase draws from the space)
    expected = [eager.compute_actions(obs, explore=True) for _ in range(4)]
    torch.manual_seed(11)
    compiled.exploration.action_space.seed(11)
    got = [compiled.compute_actions(obs, explore=True) for _ in range(4)]
    for e, g in zip(expected, got):
        _assert_same(e, g)
    # Timesteps 0 and 2 are random (eager, logp 0); 4 and 6 are sampled (the graph).
    np.testing.assert_allclose(got[0][2]["action_logp"], 0.0)
    assert compiled._compiled_acting.num_traces == 1
    assert compiled.exploration.last_timestep == eager.exploration.last_timestep == 6


def test_bad_mode_is_rejected():
    with pytest.raises(ValueError, match="torch_compile_acting"):
        TorchPolicy(OBS, gym.spaces.Discrete(2), {"torch_compile_acting": "compile"})


def test_default_is_eager():
    policy = TorchPolicy(OBS, gym.spaces.Discrete(2), {"model": {"fcnet_hiddens": [4]}})
    policy.compute_actions(np.zeros((1, 6), np.float32))
    assert policy.config["torch_compile_acting"] is False
    assert policy._compiled_acting is False


DICT_OBS = gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (3,), np.float32), "b": gym.spaces.Discrete(4)})
NESTED = {
    "dict-obs-tuple-action": (
        DICT_OBS,
        gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)]),
    ),
    "box-obs-dict-action": (
        OBS,
        gym.spaces.Dict({"x": gym.spaces.Discrete(2), "y": gym.spaces.MultiDiscrete([2, 3])}),
    ),
}


@pytest.mark.parametrize("case", sorted(NESTED))
def test_nested_observations_and_actions(case):
    import tree

    obs_space, act_space = NESTED[case]
    policies = []
    for mode in (False, "jit"):
        torch.manual_seed(0)
        policies.append(
            TorchPolicy(
                obs_space, act_space, {"model": {"fcnet_hiddens": [16]}, "torch_compile_acting": mode}
            )
        )
    eager, compiled = policies
    compiled.set_weights(eager.get_weights())
    obs_space.seed(0)
    obs = [obs_space.sample() for _ in range(4)]  # raw nested observations
    for explore in (False, True):
        torch.manual_seed(5)
        expected = eager.compute_actions(obs, explore=explore)
        torch.manual_seed(5)
        got = compiled.compute_actions(obs, explore=explore)
        tree.assert_same_structure(expected[0], got[0])
        assert type(got[0]) is type(expected[0])
        for a, b in zip(tree.flatten(expected[0]), tree.flatten(got[0])):
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=ATOL)
        for k in expected[2]:
            np.testing.assert_allclose(expected[2][k], got[2][k], atol=ATOL, err_msg=k)
    assert _traces(compiled) == 2


class TrainingFlagModel(TwoHeadModel):
    """Reads the batch's is_training flag (a Python bool, not a tensor)."""

    def forward(self, input_dict, state, seq_lens):
        logits, _ = super().forward(input_dict, state, seq_lens)
        return (logits * 3.0 if input_dict["is_training"] else logits), state


def test_graphs_keep_the_batch_is_training_flag():
    from rlpolicy.policy.sample_batch import SampleBatch

    act = gym.spaces.Discrete(3)
    eager = _make(act, {}, TrainingFlagModel, compiled=False)
    compiled = _make(act, {}, TrainingFlagModel)
    compiled.set_weights(eager.get_weights())
    obs = np.random.default_rng(12).uniform(-1, 1, (4, 6)).astype(np.float32)
    out = {}
    for flag in (False, True, False):
        expected = eager.compute_actions_from_input_dict(
            SampleBatch({"obs": obs}, _is_training=flag), explore=False
        )
        got = compiled.compute_actions_from_input_dict(
            SampleBatch({"obs": obs}, _is_training=flag), explore=False
        )
        _assert_same(expected, got)
        out[flag] = got[2]["action_dist_inputs"]
    np.testing.assert_allclose(out[True], 3.0 * out[False], atol=ATOL)
    assert _traces(compiled) == 2


@pytest.mark.parametrize("vf_share_layers", [False, True])
def test_built_policy_classes_pg_and_ppo_compile(vf_share_layers, caplog):
    from rlpolicy.agents.pg.pg_torch_policy import PGTorchPolicy
    from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy

    def q_fetches(policy, input_dict, state_batches, model, action_dist):
        return {"last": model.last_output()}  # (reads the model: stays eager)

    PGWithFetch = PGTorchPolicy.with_updates(name="PGWithFetch", extra_action_out_fn=q_fetches)
    obs = np.random.default_rng(13).uniform(-1, 1, (3, 6)).astype(np.float32)
    config = {"model": {"fcnet_hiddens": [8], "vf_share_layers": vf_share_layers}}
    for cls in (PGTorchPolicy, PPOTorchPolicy, PGWithFetch):
        torch.manual_seed(0)
        eager = cls(OBS, gym.spaces.Discrete(3), dict(config))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOG):
            torch.manual_seed(0)  # (building runs compute_actions on a dummy batch)
            compiled = cls(OBS, gym.spaces.Discrete(3), dict(config, torch_compile_acting="jit"))
            for explore in (False, True):
                torch.manual_seed(2)
                expected = eager.compute_actions(obs, explore=explore)
                torch.manual_seed(2)
                _assert_same(expected, compiled.compute_actions(obs, explore=explore))
        messages = [r.getMessage() for r in caplog.records if "torch_compile_acting" in r.getMessage()]
        if cls is PGWithFetch:
            assert len(messages) == 1 and "extra_action_out" in messages[0]
            assert compiled._compiled_acting is False
            continue
        # PG has no extra_action_out_fn; PPO's vf_preds_fetches is marked as the
        # plain value fetch, which the graph computes itself.
        assert not messages and _traces(compiled) >= 2  # (+ the loss-init dummy batch)
        if cls is PPOTorchPolicy:
            assert expected[2]["vf_preds"].shape == (3,)
            with torch.no_grad():  # the value by the model's own eager forward pass
                eager.model({"obs": torch.from_numpy(obs)}, [], None)
                vf = eager.model.value_function().numpy()
            np.testing.assert_allclose(expected[2]["vf_preds"], vf, atol=ATOL)


def test_large_feedforward_batches_stay_eager_on_cpu_recurrent_ones_compile():
    limit = compiled_acting.CPU_FEEDFORWARD_MAX_BATCH
    rng = np.random.default_rng(14)
    for case, expect_traces in (("fc-discrete", 1), ("lstm-discrete", 2)):
        eager, compiled = _pair(case)
        for n in (limit, limit + 1):
            obs, states, _ = _inputs(eager, rng, n)
            _assert_same(
                eager.compute_actions(obs, states, explore=False),
                compiled.compute_actions(obs, states, explore=False),
            )
        # Feed-forward: only the batch at the limit traced; recurrent: both.
        assert _traces(compiled) == expect_traces, case
