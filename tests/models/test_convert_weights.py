"""Weights moved across frameworks (``rlpolicy.models.convert_weights``).

A PPO policy's catalog model (FC, conv, LSTM) gets random weights in one
framework; after the move the other framework's policy must act, score actions
and value observations as the source does: the source framework's own forward
pass is the expectation. Both TF flavours' dicts are taken by ``set_weights``
of the other. Architectures that differ fail naming the key, changing nothing.
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorflow")

from rlpolicy.agents.ppo.ppo_tf_policy import PPOTFPolicy  # noqa: E402
from rlpolicy.agents.ppo.ppo_torch_policy import PPOTorchPolicy  # noqa: E402
from rlpolicy.models import convert_weights  # noqa: E402
from rlpolicy.models._weight_conversion import weights_layout  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402

VEC = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMG = gym.spaces.Box(0.0, 1.0, (10, 10, 3), np.float32)
DISCRETE = gym.spaces.Discrete(4)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
CONV = [[4, [3, 3], 2], [6, [3, 3], 2], [8, [3, 3], 1]]

CASES = {
    "fc": (VEC, DISCRETE, {"fcnet_hiddens": [6, 5], "vf_share_layers": False}),
    "fc-shared-free-log-std": (
        VEC,
        BOX,
        {"fcnet_hiddens": [6], "vf_share_layers": True, "free_log_std": True},
    ),
    # (With vf_share_layers, RLlib's torch and TF value heads differ in width here.)
    "fc-no-final-linear": (
        VEC,
        DISCRETE,
        {"fcnet_hiddens": [6, 4], "no_final_linear": True, "vf_share_layers": False},
    ),
    "conv": (IMG, DISCRETE, {"conv_filters": CONV, "vf_share_layers": True}),
    "conv-separate-vf": (IMG, DISCRETE, {"conv_filters": CONV, "vf_share_layers": False}),
    "lstm": (VEC, DISCRETE, {"fcnet_hiddens": [6], "use_lstm": True, "lstm_cell_size": 5, "max_seq_len": 4}),
    "conv-lstm": (
        IMG,
        DISCRETE,
        {"conv_filters": CONV, "use_lstm": True, "lstm_cell_size": 5, "max_seq_len": 4},
    ),
}
MOVES = [("torch", "tf"), ("torch", "tf2"), ("tf", "torch"), ("tf2", "torch"), ("tf", "tf2"), ("tf2", "tf")]


_POLICIES: dict = {}


def _policy(fw, case, copy=0):
    """One policy per (framework, case, copy) for the module: every test sets all
    the weights it reads, so the policies can be shared (building them is slow)."""
    key = (fw, case, copy)
    if key not in _POLICIES:
        obs_space, act_space, model = CASES[case]
        cls = PPOTorchPolicy if fw == "torch" else PPOTFPolicy.as_eager() if fw == "tf2" else PPOTFPolicy
        _POLICIES[key] = cls(obs_space, act_space, {"framework": fw, "model": dict(model), "seed": 0})
    return _POLICIES[key]


def _own_weights(policy):
    return policy.get_weights(as_dict=True) if policy.framework == "tf2" else policy.get_weights()


def _randomize(policy, seed):
    """Random weights in the policy's own keys (LSTM biases, log-std: all nonzero)."""
    rng = np.random.default_rng(seed)
    weights = {k: (rng.normal(size=v.shape) * 0.6).astype(v.dtype) for k, v in _own_weights(policy).items()}
    policy.set_weights(weights)
    return weights


def _outputs(policy, obs_space, act_space, seed=3):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(obs_space.low, obs_space.high, (6,) + obs_space.shape).astype(np.float32)
    state = [np.asarray(s)[None].repeat(len(obs), 0) for s in policy.get_initial_state()]
    if state:  # a nonzero recurrent state exercises the recurrent kernel
        state = [rng.normal(size=s.shape).astype(np.float32) for s in state]
    actions, state_out, extra = policy.compute_actions(obs, state_batches=state or None, explore=False)
    probe = (
        rng.uniform(-1.0, 1.0, (len(obs),) + act_space.shape).astype(np.float32)
        if isinstance(act_space, gym.spaces.Box)
        else rng.integers(0, act_space.n, len(obs))
    )
    logp = policy.compute_log_likelihoods(probe, obs, state_batches=state or None)
    return {
        "actions": np.asarray(actions),
        "dist_inputs": np.asarray(extra[SampleBatch.ACTION_DIST_INPUTS]),
        "vf": np.asarray(extra[SampleBatch.VF_PREDS]),
        "logp": np.asarray(logp),
        "state_out": [np.asarray(s) for s in state_out],
    }


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("src_fw,dst_fw", MOVES, ids=[f"{a}-to-{b}" for a, b in MOVES])
def test_moved_weights_give_the_same_actions_logp_and_values(case, src_fw, dst_fw):
    obs_space, act_space, _ = CASES[case]
    src, dst = _policy(src_fw, case), _policy(dst_fw, case)
    _randomize(src, seed=MOVES.index((src_fw, dst_fw)) * 10 + list(CASES).index(case))
    expected = _outputs(src, obs_space, act_space)
    before = _outputs(dst, obs_space, act_space)
    assert not np.allclose(before["dist_inputs"], expected["dist_inputs"], atol=1e-3)  # the move is needed
    convert_weights(src, dst)
    got = _outputs(dst, obs_space, act_space)
    for key in ("dist_inputs", "vf", "logp"):
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-4, atol=1e-4, err_msg=key)
    for a, b in zip(got["state_out"], expected["state_out"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg="state_out")
    if isinstance(act_space, gym.spaces.Discrete):
        np.testing.assert_array_equal(got["actions"], expected["actions"])
    else:
        np.testing.assert_allclose(got["actions"], expected["actions"], atol=1e-4)


@pytest.mark.parametrize("src_fw,dst_fw", [("tf", "tf2"), ("tf2", "tf"), ("torch", "tf2"), ("tf", "torch")])
def test_set_weights_and_set_state_take_the_other_layout(src_fw, dst_fw):
    obs_space, act_space, _ = CASES["lstm"]
    src, dst = _policy(src_fw, "lstm"), _policy(dst_fw, "lstm")
    _randomize(src, seed=100 + MOVES.index((src_fw, dst_fw)))
    expected = _outputs(src, obs_space, act_space)
    state = src.get_state()  # eager state: as_dict keys; graph and torch: their own
    # Optimizer slots are framework-specific (tf1 Adam, Keras Adam, torch Adam): not moved.
    state.pop("_optimizer_variables", None)
    dst.set_state(state)
    np.testing.assert_allclose(
        _outputs(dst, obs_space, act_space)["dist_inputs"], expected["dist_inputs"], atol=1e-4
    )
    other = _policy(dst_fw, "lstm", copy=1)
    other.set_weights(_own_weights(src))
    np.testing.assert_allclose(_outputs(other, obs_space, act_space)["vf"], expected["vf"], atol=1e-4)


@pytest.mark.tf
def test_graph_and_eager_keys_correspond_one_to_one():
    graph, eager = _policy("tf", "lstm"), _policy("tf2", "lstm")
    weights = _randomize(graph, seed=4)
    moved = convert_weights(weights, eager)
    assert weights_layout(weights) == "tf" and weights_layout(moved) == "tf2"
    assert len(moved) == len(weights)
    # Same variables in the same creation order: the values pair up positionally.
    for (gk, gv), (ek, ev) in zip(weights.items(), moved.items()):
        np.testing.assert_array_equal(ev, gv, err_msg=f"{gk} vs {ek}")


@pytest.mark.tf
def test_lstm_bias_sum_and_gate_order_by_hand():
    """torch's two LSTM biases add into TF's one; the kernels are transposed whole
    (both order the gates input, forget, cell, output)."""
    t, g = _policy("torch", "lstm"), _policy("tf", "lstm")
    w = _randomize(t, seed=5)
    moved = convert_weights(t, g)
    np.testing.assert_allclose(
        moved["lstm/lstm_cell/bias"], w["lstm.bias_ih_l0"] + w["lstm.bias_hh_l0"], atol=1e-6
    )
    np.testing.assert_array_equal(moved["lstm/lstm_cell/kernel"], w["lstm.weight_ih_l0"].T)
    np.testing.assert_array_equal(moved["lstm/lstm_cell/recurrent_kernel"], w["lstm.weight_hh_l0"].T)
    back = convert_weights(g, _policy("torch", "lstm"))
    np.testing.assert_allclose(
        back["lstm.bias_ih_l0"] + back["lstm.bias_hh_l0"], moved["lstm/lstm_cell/bias"], atol=1e-6
    )


@pytest.mark.tf
def test_conv_kernel_layout_by_hand():
    t, g = _policy("torch", "conv"), _policy("tf2", "conv")
    w = _randomize(t, seed=6)
    moved = convert_weights(t, g)
    oihw = w["_convs.0._model.1.weight"]
    hwio = moved["base_model.conv1.kernel:0"]
    assert hwio.shape == (3, 3, 3, 4)
    # kernel[h, w, in, out] of TF is weight[out, in, h, w] of torch.
    assert hwio[2, 0, 1, 3] == oihw[3, 1, 2, 0] and hwio[0, 1, 2, 1] == oihw[1, 2, 0, 1]


@pytest.mark.tf
@pytest.mark.parametrize("dst_fw", ["tf", "tf2", "torch"])
def test_different_architectures_fail_naming_the_key_and_change_nothing(dst_fw):
    src = _policy("torch" if dst_fw != "torch" else "tf", "fc")
    obs_space, act_space, model = CASES["fc"]
    cls = PPOTorchPolicy if dst_fw == "torch" else PPOTFPolicy.as_eager() if dst_fw == "tf2" else PPOTFPolicy
    dst = cls(obs_space, act_space, {"framework": dst_fw, "model": dict(model, fcnet_hiddens=[6, 7])})
    before = _own_weights(dst)
    # (The first mismatch in the destination's key order: fc_2's kernel, or torch's logits first.)
    with pytest.raises(ValueError, match=r"'(fc_2|fc_out)/kernel'\) gets shape \((6, 5|5, 4|4, 5)\)"):
        convert_weights(src, dst)
    with pytest.raises(ValueError, match=r"(fc_2|fc_out)/kernel"):
        dst.set_weights(_own_weights(src))
    for k, v in _own_weights(dst).items():
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.tf
def test_a_missing_layer_is_named():
    src = _policy("torch", "fc")  # two hidden layers
    obs_space, act_space, model = CASES["fc"]
    dst = PPOTFPolicy(obs_space, act_space, {"framework": "tf", "model": dict(model, fcnet_hiddens=[6])})
    with pytest.raises(ValueError, match="fc_2/kernel"):
        convert_weights(src, dst)


@pytest.mark.parametrize("src_fw,dst_fw", [("torch", "tf"), ("tf", "torch")])
def test_lstm_over_a_conv_output_larger_than_1x1_is_refused(src_fw, dst_fw):
    """torch flattens the 2x2x8 conv output channels-first, TF channels-last: the LSTM's
    input rows cannot be matched up from the weights alone."""
    model = {
        "conv_filters": [[4, [3, 3], 2], [8, [3, 3], 2]],
        "use_lstm": True,
        "lstm_cell_size": 5,
        "vf_share_layers": True,
    }
    pols = {
        fw: (PPOTorchPolicy if fw == "torch" else PPOTFPolicy)(
            IMG, DISCRETE, {"framework": fw, "model": dict(model)}
        )
        for fw in (src_fw, dst_fw)
    }
    before = _own_weights(pols[dst_fw])
    with pytest.raises(ValueError, match=r"lstm/lstm_cell/kernel reads 32 flattened conv features from 8"):
        convert_weights(pols[src_fw], pols[dst_fw])
    for k, v in _own_weights(pols[dst_fw]).items():
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.tf
def test_a_weights_list_is_refused():
    dst = _policy("tf", "fc")
    with pytest.raises(ValueError, match="list of weights has no keys"):
        convert_weights(list(_policy("torch", "fc").get_weights().values()), dst)


def test_public_name_is_the_function_and_its_module_is_importable():
    """``rlpolicy.models.convert_weights`` is the function, whichever way it is reached;
    its implementation module has its own (private) name, so nothing shadows it."""
    import importlib
    import inspect

    import rlpolicy.models as models

    implementation = importlib.import_module("rlpolicy.models._weight_conversion")
    assert inspect.ismodule(implementation)
    assert inspect.isfunction(models.convert_weights)
    assert models.convert_weights is implementation.convert_weights is convert_weights
    # No submodule of that name: a module import of it fails instead of giving the function.
    assert importlib.util.find_spec("rlpolicy.models.convert_weights") is None
    with pytest.raises(ModuleNotFoundError, match="rlpolicy.models.convert_weights"):
        importlib.import_module("rlpolicy.models.convert_weights")
