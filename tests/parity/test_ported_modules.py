"""1.x client code, ported by renaming imports, runs: the policy modules of
``ported_torch_policies.py`` (mixins from ``policy.torch_policy``, ``build_torch_policy``,
a CQL-style ``compute_gradients_fn``), plus ``utils.compression``, ``utils.from_config``,
``adjust_nstep``'s error type and SampleBatch's unequal-column error.

Expected values are worked out here by hand or with numpy, never with the code under test.
"""

import abc
import base64
import json
import pickle
import zlib
from functools import partial

import numpy as np
import pytest

from rlpolicy.evaluation.postprocessing import adjust_nstep
from rlpolicy.policy.sample_batch import SampleBatch, is_compressed, pack, unpack
from rlpolicy.utils.compression import LZ4_ENABLED, pack_if_needed, unpack_if_needed
from rlpolicy.utils.from_config import from_config

# ---------------------------------------------------------------- torch policy modules


@pytest.fixture(scope="module")
def ported():
    pytest.importorskip("torch")
    import ported_torch_policies

    return ported_torch_policies


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _rollout(policy, n, seed):
    """One finished trajectory: actions from the policy, then its postprocessing."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n + 1, 3)).astype(np.float32)
    actions, _, extra = policy.compute_actions(obs[:-1], explore=True)
    batch = SampleBatch(
        {
            SampleBatch.OBS: obs[:-1],
            SampleBatch.NEXT_OBS: obs[1:],
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: rng.normal(size=n).astype(np.float32),
            SampleBatch.DONES: np.arange(n) == n - 1,
            **extra,
        }
    )
    return policy.postprocess_trajectory(batch)


PPO_CONFIG = {
    "model": {"fcnet_hiddens": [8]},
    "lr": 0.01,
    "lr_schedule": [[0, 0.01], [100, 0.001]],
    "entropy_coeff": 0.1,
    "entropy_coeff_schedule": [[0, 0.1], [200, 0.0]],
    "seed": 1,
}


@pytest.mark.parametrize(
    "timestep, lr, entropy_coeff",
    [
        # Piecewise-linear by hand: lr 0.01 -> 0.001 over [0, 100], then 0.001;
        # entropy_coeff 0.1 -> 0.0 over [0, 200], then 0.0.
        (50, 0.0055, 0.075),
        (150, 0.001, 0.025),
        (1000, 0.001, 0.0),
    ],
)
def test_ppo_like_module_schedules_act_and_learn(ported, timestep, lr, entropy_coeff):
    from rlpolicy.policy.torch_policy import EntropyCoeffSchedule, LearningRateSchedule, TorchPolicy

    policy = ported.PPOLikeTorchPolicy(ported.OBS_SPACE, ported.ACTION_SPACE, PPO_CONFIG)
    assert isinstance(policy, (TorchPolicy, LearningRateSchedule, EntropyCoeffSchedule))
    assert policy.cur_lr == pytest.approx(0.01, abs=1e-9)
    assert policy.entropy_coeff == pytest.approx(0.1, abs=1e-9)

    policy.on_global_var_update({"timestep": timestep})
    assert policy.cur_lr == pytest.approx(lr, abs=1e-9)
    assert policy.entropy_coeff == pytest.approx(entropy_coeff, abs=1e-9)
    assert [g["lr"] for opt in policy._optimizers for g in opt.param_groups] == [pytest.approx(lr, abs=1e-9)]

    batch = _rollout(policy, 12, seed=timestep)
    assert {"advantages", "value_targets", "vf_preds", "action_logp"} <= set(batch.keys())
    before = policy.get_weights()
    stats = policy.learn_on_batch(batch)["learner_stats"]
    assert stats["cur_lr"] == pytest.approx(lr, abs=1e-9)
    assert stats["entropy_coeff"] == pytest.approx(entropy_coeff, abs=1e-9)
    assert np.isfinite(stats["total_loss"]) and stats["entropy"] > 0
    # Adam's first step moves every parameter by lr * g / (|g| + eps): at most lr, and
    # almost exactly lr for parameters with a clear gradient. So the step used cur_lr.
    after = policy.get_weights()
    deltas = np.concatenate([np.abs(after[k] - before[k]).ravel() for k in before])
    assert deltas.max() <= lr * (1 + 1e-4)
    assert deltas.max() == pytest.approx(lr, rel=1e-3)


def _pg_batch(n, seed):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.NEXT_OBS: obs[::-1].copy(),
            SampleBatch.ACTIONS: rng.integers(0, 2, n),
            SampleBatch.REWARDS: np.ones(n, np.float32),
            SampleBatch.DONES: np.zeros(n, bool),
            "advantages": rng.normal(size=n).astype(np.float32),
        }
    )


def _pg_loss_and_grads(w, b, batch):
    """-mean(A * log softmax(W obs + b)[a]) and its gradients, in numpy."""
    obs, acts, adv = batch["obs"].astype(np.float64), batch["actions"], batch["advantages"].astype(np.float64)
    probs = _softmax(obs @ w.T + b)
    n = len(acts)
    loss = -np.mean(adv * np.log(probs[np.arange(n), acts]))
    d_logits = -(adv[:, None] * (np.eye(2)[acts] - probs)) / n
    return loss, d_logits.T @ obs, d_logits.sum(axis=0)


def _linear_params(policy):
    layer = policy.model.logits
    return layer.weight.detach().numpy().astype(np.float64), layer.bias.detach().numpy().astype(np.float64)


def test_build_torch_policy_user(ported):
    with pytest.warns(
        DeprecationWarning, match=r"build_torch_policy.*build_policy_class\(framework='torch'\)"
    ):
        cls = ported.make_pg_like_policy_class()
    assert cls.__name__ == "PGLikeTorchPolicy" and issubclass(cls, ported.TorchPolicy)
    policy = cls(
        ported.OBS_SPACE,
        ported.ACTION_SPACE,
        {"model": {"custom_model": "ported_linear_logits"}, "lr": 0.5, "seed": 2},
    )
    w, b = _linear_params(policy)
    batch = _pg_batch(10, seed=3)
    _, gw, gb = _pg_loss_and_grads(w, b, batch)
    policy.learn_on_batch(batch.copy())
    w2, b2 = _linear_params(policy)
    np.testing.assert_allclose(w2, w - 0.5 * gw, atol=1e-5)  # one plain SGD step
    np.testing.assert_allclose(b2, b - 0.5 * gb, atol=1e-5)
    actions, _, _ = policy.compute_actions(batch["obs"], explore=False)
    np.testing.assert_array_equal(actions, np.argmax(batch["obs"] @ w2.T + b2, axis=1))


def test_cql_style_compute_gradients_fn_uses_convert_to_numpy(ported):
    import torch

    policy = ported.CQLStyleTorchPolicy(
        ported.OBS_SPACE,
        ported.ACTION_SPACE,
        {"model": {"custom_model": "ported_linear_logits"}, "lr": 0.25, "train_batch_size": 6, "seed": 4},
    )
    converted = policy._convert_to_numpy({"a": torch.tensor([1.5, 2.0]), "b": (torch.tensor(3),)})
    assert isinstance(converted["a"], np.ndarray) and converted["a"].tolist() == [1.5, 2.0]
    assert converted["b"][0] == 3 and not isinstance(converted["b"][0], torch.Tensor)

    w, b = _linear_params(policy)
    batch = _pg_batch(6, seed=5)
    loss, gw, gb = _pg_loss_and_grads(w, b, batch)
    stats = policy.learn_on_batch(batch.copy())["learner_stats"]
    assert not any(isinstance(v, torch.Tensor) for v in stats.values())
    assert float(stats["loss"]) == pytest.approx(loss, abs=1e-5)
    assert int(stats["batch_size"]) == 6
    np.testing.assert_allclose(stats["weight"], w - 0.25 * gw, atol=1e-5)  # the loss stepped once
    w2, b2 = _linear_params(policy)
    np.testing.assert_allclose(w2, w - 0.25 * gw, atol=1e-5)
    np.testing.assert_allclose(b2, b - 0.25 * gb, atol=1e-5)


# ---------------------------------------------------------------- utils.compression

ARRAYS = [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7,
    np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8),
    np.array([True, False, True]),
    np.array([2**40, -1], dtype=np.int64),
    np.zeros((0, 5), np.float64),
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_pack_unpack_arrays(array):
    packed = pack(array)
    assert isinstance(packed, str) and packed.isascii() and is_compressed(packed)
    out = unpack(packed)
    assert out.dtype == array.dtype and out.shape == array.shape
    np.testing.assert_array_equal(out, array)
    assert unpack(packed.encode("ascii")).tolist() == array.tolist()  # bytes unpack too


def test_pack_unpack_nested_dict():
    data = {"obs": ARRAYS[0], "meta": {"ids": [1, 2, 3], "name": "ep-1"}, "t": (ARRAYS[2], None)}
    out = unpack(pack(data))
    assert set(out) == {"obs", "meta", "t"} and out["meta"] == {"ids": [1, 2, 3], "name": "ep-1"}
    np.testing.assert_array_equal(out["obs"], ARRAYS[0])
    np.testing.assert_array_equal(out["t"][0], ARRAYS[2])
    assert out["t"][1] is None


def test_pack_compresses():
    zeros = np.zeros((100, 100))  # 80,000 bytes of float64
    assert len(pack(zeros)) < 2_000


@pytest.mark.skipif(LZ4_ENABLED, reason="with lz4 installed, pack writes lz4 frames")
def test_pack_format_without_lz4_is_base64_zlib_pickle():
    data = {"x": np.arange(5)}
    raw = pickle.loads(zlib.decompress(base64.b64decode(pack(data))))
    np.testing.assert_array_equal(raw["x"], np.arange(5))


def test_pack_if_needed_and_unpack_if_needed():
    array = ARRAYS[0]
    packed = pack_if_needed(array)
    assert isinstance(packed, str)
    np.testing.assert_array_equal(unpack_if_needed(packed), array)
    other = {"not": "an array"}
    assert pack_if_needed(other) is other and pack_if_needed(3) == 3
    assert unpack_if_needed(array) is array and unpack_if_needed(None) is None


@pytest.mark.parametrize(
    "value, expected",
    [("abc", True), (b"abc", True), (np.zeros(2), False), ({"a": 1}, False), (None, False), (3, False)],
)
def test_is_compressed(value, expected):
    assert is_compressed(value) is expected


@pytest.mark.parametrize(
    "bad, exc, match",
    [
        ("not base64 !!", ValueError, "not base64"),
        (base64.b64encode(b"plain bytes, not compressed").decode(), ValueError, "neither lz4 nor zlib"),
        (np.zeros(3), ValueError, "got ndarray"),
    ],
)
def test_unpack_bad_input(bad, exc, match):
    with pytest.raises(exc, match=match):
        unpack(bad)


@pytest.mark.skipif(LZ4_ENABLED, reason="lz4 is installed")
def test_unpack_lz4_data_without_lz4_names_lz4():
    frame = base64.b64encode(b"\x04\x22\x4d\x18" + b"\x00" * 16).decode()  # an lz4 frame header
    with pytest.raises(ImportError, match="install lz4"):
        unpack(frame)


# ---------------------------------------------------------------- utils.from_config


class Shape:
    """A 1.x-style configurable base: a registry of short names, as Exploration/Schedule use."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class Circle(Shape):
    def __init__(self, radius=1.0):
        super().__init__(radius=radius)
        self.radius = radius


class Square(Shape):
    def __init__(self, side, color="red"):
        super().__init__(side, color=color)
        self.side, self.color = side, color


Shape.__type_registry__ = {"circle": Circle, "square": Square}


class WithDefault(Shape):
    __default_constructor__ = partial(Circle, radius=9.0)


class AbstractShape(Shape, abc.ABC):
    @abc.abstractmethod
    def area(self): ...


def test_from_config_dict_specs():
    assert from_config(Circle, {"radius": 2.0}).radius == 2.0
    assert isinstance(from_config(Shape, {"type": Circle, "radius": 2.0}), Circle)
    spec = {"type": "circle", "radius": 3.0}
    obj = from_config(Shape, spec, radius=5.0)  # kwargs win over the dict's keys
    assert isinstance(obj, Circle) and obj.radius == 5.0
    assert spec == {"type": "circle", "radius": 3.0}  # the caller's dict is unchanged
    sq = from_config(Shape, {"type": "Square", "_args": [4], "color": "blue"})
    assert isinstance(sq, Square) and (sq.side, sq.color) == (4, "blue")
    assert from_config({"type": Square, "side": 2}).side == 2  # the spec as first argument


def test_from_config_hints():
    c = Circle(1.0)
    assert from_config(Circle, c) is c  # an instance is returned as is
    assert isinstance(from_config(Shape, "Cir-cle"), Circle)  # registry key, normalised
    assert from_config(Shape, "Square", side=7).side == 7  # a class in Shape's module
    assert from_config(Shape, lambda **kw: ("built", kw), a=1) == ("built", {"a": 1})
    assert from_config(Shape, False) is False
    assert from_config(Shape, None, type="circle").radius == 1.0
    from collections import OrderedDict

    built = from_config(None, "collections.OrderedDict", a=1)
    assert type(built) is OrderedDict and built == {"a": 1}
    from rlpolicy.utils.schedules import ConstantSchedule

    sched = from_config(
        Shape, {"type": "rlpolicy.utils.schedules.ConstantSchedule", "value": 0.5, "framework": None}
    )
    assert isinstance(sched, ConstantSchedule) and sched.value(123) == 0.5


def test_from_config_text_and_files(tmp_path, monkeypatch):
    assert from_config(Shape, '{"type": "circle", "radius": 4.0}').radius == 4.0
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shape.json").write_text(json.dumps({"type": "square", "color": "green"}))
    sq = from_config(Shape, "shape.json", side=3)
    assert isinstance(sq, Square) and (sq.side, sq.color) == (3, "green")
    pytest.importorskip("yaml")
    assert from_config(Shape, "type: circle\nradius: 6.5").radius == 6.5
    (tmp_path / "shape.yaml").write_text("type: circle\nradius: 8\n")
    assert from_config(Shape, "shape.yaml").radius == 8


def test_from_config_default_constructor_and_abstract():
    obj = from_config(WithDefault)
    assert isinstance(obj, Circle) and obj.radius == 9.0
    # As RLlib 1.11: the partial's own keywords take precedence over the call's.
    assert from_config(WithDefault, radius=1.0).radius == 9.0
    assert from_config(AbstractShape) is None  # an abstract class builds nothing


@pytest.mark.parametrize(
    "spec, exc, match",
    [
        ("NoSuchShape", ValueError, "'NoSuchShape' must be a valid filename"),
        ("no.such.module.Klass", ValueError, "no.such.module.Klass"),
        (42, TypeError, "invalid type 42"),
        ("missing.json", FileNotFoundError, "missing.json"),
    ],
)
def test_from_config_errors(spec, exc, match, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(exc, match=match):
        from_config(Shape, spec)


def test_from_config_bad_path_without_cls():
    with pytest.raises(ValueError, match="valid \\[module\\].\\[class\\] path"):
        from_config(None, "nowhere.Thing")


# ---------------------------------------------------------------- small 1.11 details


def _trajectory(dones):
    n = len(dones)
    obs = np.arange(n + 1, dtype=np.float32)[:, None]
    return SampleBatch(
        {
            SampleBatch.OBS: obs[:-1],
            SampleBatch.NEXT_OBS: obs[1:],
            SampleBatch.ACTIONS: np.zeros(n, np.int64),
            SampleBatch.REWARDS: np.array([1.0, 2.0, 4.0, 8.0][:n], np.float32),
            SampleBatch.DONES: np.array(dones),
        }
    )


@pytest.mark.parametrize("exc", [AssertionError, ValueError])
def test_adjust_nstep_mid_trajectory_done(exc):
    # 1.x code catches AssertionError (1.11 asserts); rlpolicy's callers catch ValueError.
    batch = _trajectory([False, True, False, False])
    with pytest.raises(exc, match="Unexpected done in middle"):
        adjust_nstep(2, 0.5, batch)
    np.testing.assert_array_equal(batch[SampleBatch.REWARDS], [1.0, 2.0, 4.0, 8.0])  # unchanged


def test_adjust_nstep_hand_computed():
    batch = _trajectory([False, False, False, True])
    adjust_nstep(2, 0.5, batch)
    # r'[i] = r[i] + 0.5 r[i+1] (within the trajectory); new_obs[i] = obs[i+2].
    np.testing.assert_allclose(batch[SampleBatch.REWARDS], [2.0, 4.0, 8.0, 8.0], atol=1e-6)
    np.testing.assert_array_equal(batch[SampleBatch.NEXT_OBS][:, 0], [2.0, 3.0, 4.0, 4.0])
    np.testing.assert_array_equal(batch[SampleBatch.DONES], [False, False, True, True])


def test_sample_batch_unequal_columns_count_as_in_1x():
    # RLlib 1.11 takes the first column's length as the count; rlpolicy does too, but
    # refuses to shuffle (or slice) such a batch rather than misalign it (porting.md).
    batch = SampleBatch({"obs": np.zeros((3, 2)), "actions": np.zeros(2)})
    assert batch.count == 3
    with pytest.raises(ValueError, match="column 'actions' has 2 rows but the batch has 3"):
        batch.shuffle()


# ---------------------------------------------------------------- utils.debug


def test_summarize_sample_batch_and_arrays():
    from collections import namedtuple

    from rlpolicy.policy.tf_policy import summarize as from_tf_policy  # where 1.11 imports it too
    from rlpolicy.utils.debug import summarize

    assert from_tf_policy is summarize
    batch = SampleBatch(
        {"obs": np.array([[0.0, 1.0], [2.0, 5.0]], np.float32), "names": np.array(["a", "b"])}
    )
    text = summarize({"batch": batch, "empty": np.zeros((0, 3)), "pt": namedtuple("Pt", "x")(7)})
    assert "'type': 'SampleBatch'" in text
    assert "np.ndarray((2, 2), dtype=float32, min=0.0, max=5.0, mean=2.0)" in text  # mean of 0,1,2,5
    assert "np.ndarray((2,), dtype=<U1, head=a)" in text
    assert "np.ndarray((0, 3), dtype=float64)" in text
    assert "'type': 'Pt'" in text and "'x': 7" in text


def test_update_global_seed_if_necessary():
    import random

    from rlpolicy.utils.debug import update_global_seed_if_necessary

    update_global_seed_if_necessary(None, None)  # no seed: nothing to do
    update_global_seed_if_necessary(None, 7)
    first = (random.random(), np.random.rand())
    update_global_seed_if_necessary(None, 7)
    assert (random.random(), np.random.rand()) == first
    torch = pytest.importorskip("torch")
    was = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic
    try:
        update_global_seed_if_necessary("torch", 3)
        a = torch.rand(3)
        update_global_seed_if_necessary("torch", 3)
        assert torch.equal(a, torch.rand(3)) and torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(was[0])
        torch.backends.cudnn.deterministic = was[1]
