"""The fast torch <-> numpy helpers of TorchPolicy's hot paths (``policy/_torch/convert``):
each must give exactly what the generic path (torch's own state_dict/load_state_dict,
convert_to_non_torch_type) gives."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from rlpolicy.policy._torch.convert import (  # noqa: E402
    load_state_dict_fast,
    numpy_copy,
)


class Shared(nn.Module):
    """A module used twice (state_dict lists it under both names) plus a
    non-persistent buffer (left out of state_dict)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 3)
        self.b = self.a
        self.register_buffer("scale", torch.ones(3))
        self.register_buffer("scratch", torch.zeros(3), persistent=False)


MODELS = {
    "mlp": lambda: nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)),
    "batchnorm": lambda: nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)),  # custom loader
    "shared": Shared,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_load_state_dict_fast_copies_values(name):
    torch.manual_seed(0)
    src, dst = MODELS[name](), MODELS[name]()
    state = {k: v.clone() + 1.0 for k, v in src.state_dict().items()}
    load_state_dict_fast(dst, state)
    for k, v in dst.state_dict().items():
        torch.testing.assert_close(v, state[k].to(v.dtype), rtol=0, atol=0)
        assert v.data_ptr() != state[k].data_ptr()  # copied, not shared
    state[next(iter(state))].add_(5.0)  # later changes of the input do not leak in
    torch.testing.assert_close(dst.state_dict()[next(iter(state))], state[next(iter(state))] - 5.0)


def test_load_state_dict_fast_runs_load_hooks():
    model = MODELS["mlp"]()
    calls = []
    model[0]._register_load_state_dict_pre_hook(lambda *args, **kw: calls.append(1))
    load_state_dict_fast(model, model.state_dict())
    assert calls == [1]


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda s: s.update({"extra": torch.zeros(1)}), r"unknown keys \['extra'\]"),
        (lambda s: s.pop("0.bias"), r"missing keys \['0.bias'\]"),
        (lambda s: s.update({"0.bias": torch.zeros(7)}), r"'0.bias' has shape \(7,\)"),
    ],
)
def test_load_state_dict_fast_bad_state_names_the_key_and_changes_nothing(change, match):
    # Stricter than torch's load_state_dict, which copies the matching tensors before raising.
    torch.manual_seed(0)
    model = MODELS["mlp"]()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = {k: v + 1.0 for k, v in model.state_dict().items()}
    change(state)
    with pytest.raises(ValueError, match=match):
        load_state_dict_fast(model, state)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_numpy_copy_is_a_snapshot():
    live = torch.zeros(2)
    snap = numpy_copy({"g": [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0, 1]}], "s": live})
    live.add_(1.0)
    np.testing.assert_array_equal(snap["s"], [0.0, 0.0])
    assert snap["g"] == [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0, 1]}]
