"""State round trips of TorchPolicy copy once and stay snapshots.

``get_state`` hands out numpy copies (never views of live tensors);
``set_state`` copies them into the policy, into the optimizer's existing
state tensors when their layout matches (else through
``Optimizer.load_state_dict``). Expectations come from torch's own
``state_dict`` / ``load_state_dict`` and from a second, independently
trained policy.
"""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_pg_policies import ACT, OBS, PG, pg_batch  # noqa: E402

from rlpolicy.policy._torch.optimizers import optimizer_states  # noqa: E402
from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402

BASE = {"lr": 0.05, "model": {"fcnet_hiddens": [8]}, "seed": 0}


def make(seed=0, **config):
    torch.manual_seed(seed)
    return PG(OBS, ACT, {**BASE, **config})


def trained(seed, steps=2):
    p = make(seed=seed)
    for i in range(steps):
        p.learn_on_batch(pg_batch(8, seed=seed * 10 + i))
    return p


def live_tensors(policy):
    out = [p.detach() for p in policy.model.parameters()]
    for opt in policy._optimizers:
        out += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return out


def torch_state_as_numpy(opt):
    """What get_state should hold for ``opt``: its own state_dict, as numpy copies."""
    sd = opt.state_dict()
    return {
        "state": {i: {k: v.detach().numpy().copy() for k, v in s.items()} for i, s in sd["state"].items()},
        "param_groups": copy.deepcopy(sd["param_groups"]),
    }


def test_get_state_is_a_copy_equal_to_torchs_state_dict():
    policy = trained(1)
    state = policy.get_state()
    live = live_tensors(policy)
    arrays = list(state["weights"].values()) + [
        v for s in state["_optimizer_variables"][0]["state"].values() for v in s.values()
    ]
    assert all(not np.shares_memory(a, t.numpy()) for a in arrays for t in live)
    want = torch_state_as_numpy(policy._optimizers[0])
    got = state["_optimizer_variables"][0]
    assert got["param_groups"] == want["param_groups"]
    assert list(got["state"]) == list(want["state"])
    for i, s in want["state"].items():
        assert list(got["state"][i]) == list(s)
        for k, v in s.items():
            np.testing.assert_array_equal(got["state"][i][k], v)
            assert got["state"][i][k].dtype == v.dtype


def test_set_state_into_a_trained_policy_equals_torch_load_state_dict():
    source, target = trained(1), trained(2)
    source._optimizers[0].param_groups[0]["lr"] = 0.0123  # hyper-parameters travel too
    state = source.get_state()
    snapshot = copy.deepcopy(state)
    target.set_state(state)
    reference = trained(3)  # loaded the stock way: torch's load_state_dict
    reference.model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state["weights"].items()})
    opt_state = state["_optimizer_variables"][0]
    reference._optimizers[0].load_state_dict(
        {
            "param_groups": opt_state["param_groups"],
            "state": {
                i: {k: torch.from_numpy(v.copy()) for k, v in s.items()}
                for i, s in opt_state["state"].items()
            },
        }
    )
    assert target._optimizers[0].param_groups[0]["lr"] == 0.0123
    assert (
        torch_state_as_numpy(target._optimizers[0])["param_groups"]
        == torch_state_as_numpy(reference._optimizers[0])["param_groups"]
    )
    # Nothing shared with the state dict: mutating it now changes neither policy.
    for v in state["weights"].values():
        v += 100.0
    for s in opt_state["state"].values():
        for v in s.values():
            v += 100.0
    for p in (target, reference):
        p.learn_on_batch(pg_batch(8, seed=99))
    for k, v in reference.get_weights().items():
        np.testing.assert_allclose(target.get_weights()[k], v, rtol=1e-6, atol=1e-7, err_msg=k)
    for (i, s), (_, r) in zip(
        torch_state_as_numpy(target._optimizers[0])["state"].items(),
        torch_state_as_numpy(reference._optimizers[0])["state"].items(),
    ):
        for k in s:
            np.testing.assert_allclose(s[k], r[k], rtol=1e-6, atol=1e-7, err_msg=f"{i}.{k}")
    # The source's snapshot stayed as it was.
    np.testing.assert_array_equal(
        snapshot["weights"][next(iter(snapshot["weights"]))] + 100.0,
        state["weights"][next(iter(state["weights"]))],
    )


def test_set_state_with_another_layout_falls_back_to_load_state_dict():
    source, target = trained(1), trained(2)
    state = source.get_state()
    dropped = next(iter(state["_optimizer_variables"][0]["state"]))
    del state["_optimizer_variables"][0]["state"][dropped]  # one parameter without Adam state
    target.set_state(state)
    live = target._optimizers[0].state
    params = list(target.model.parameters())
    kept = state["_optimizer_variables"][0]["state"]
    assert params[dropped] not in live and len(live) == len(kept)  # as torch loads it
    for i, entry in kept.items():
        np.testing.assert_array_equal(live[params[i]]["exp_avg"].numpy(), entry["exp_avg"])


def test_set_state_into_a_fresh_policy_then_again_in_place():
    source = trained(1)
    state = source.get_state()
    fresh = make(seed=5)  # no Adam state yet: loads through load_state_dict
    fresh.set_state(state)
    fresh.set_state(state)  # now in place
    np.testing.assert_array_equal(
        optimizer_states(fresh._optimizers)[0]["state"][0]["exp_avg"],
        state["_optimizer_variables"][0]["state"][0]["exp_avg"],
    )
    assert not any(
        np.shares_memory(t.numpy(), a) for t in live_tensors(fresh) for a in state["weights"].values()
    )


def test_buffered_minibatches_learn_like_learn_on_batch():
    a, b = make(seed=0, sgd_minibatch_size=8, train_batch_size=16), make(seed=0)
    batch = pg_batch(16, seed=4)
    a.load_batch_into_buffer(batch.copy(), buffer_index=0)
    for offset in (0, 8):
        a.learn_on_loaded_batch(offset=offset, buffer_index=0)
        b.learn_on_batch(SampleBatch({k: v[offset : offset + 8] for k, v in batch.items()}))
    for k, v in b.get_weights().items():
        np.testing.assert_allclose(a.get_weights()[k], v, rtol=1e-6, atol=1e-7, err_msg=k)


def _bad_optimizer_states(state):
    """Optimizer states that do not fit the policy's single Adam, each with the
    words the error should name."""
    opt = state["_optimizer_variables"][0]
    one_param_short = copy.deepcopy(opt)
    one_param_short["param_groups"][0]["params"] = one_param_short["param_groups"][0]["params"][:-1]
    two_groups = copy.deepcopy(opt)
    two_groups["param_groups"] = two_groups["param_groups"] * 2
    return [
        ([opt, opt], "2 optimizer states"),
        ([one_param_short], r"\['param_groups'\]\[0\] holds"),
        ([two_groups], "2 param groups"),
        ([{"param_groups": []}], "'state'"),
        ({"state": {}}, "must be a list"),
    ]


@pytest.mark.parametrize("case", range(5))
def test_set_state_rejects_bad_optimizer_state_before_changing_anything(case):
    source = trained(2)
    policy = trained(3)
    before = policy.get_state()
    bad, words = _bad_optimizer_states(source.get_state())[case]
    with pytest.raises(ValueError, match=words):
        policy.set_state({**source.get_state(), "_optimizer_variables": bad})
    after = policy.get_state()
    # Neither the weights, the timestep nor the optimizer moved to the source's.
    for k, v in before["weights"].items():
        np.testing.assert_array_equal(after["weights"][k], v)
    assert after["global_timestep"] == before["global_timestep"]
    for i, s in before["_optimizer_variables"][0]["state"].items():
        for name, v in s.items():
            np.testing.assert_array_equal(after["_optimizer_variables"][0]["state"][i][name], v)
