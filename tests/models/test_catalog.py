"""ModelCatalog: distribution/model selection tables, registries, shapes and error table."""

import copy
import subprocess
import sys
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from rlpolicy._core.defaults import MODEL_DEFAULTS as CORE_DEFAULTS
from rlpolicy.models import catalog as catalog_mod
from rlpolicy.models.action_dist import ActionDistribution
from rlpolicy.models.catalog import MODEL_DEFAULTS, ModelCatalog, UnsupportedSpaceException
from rlpolicy.models.preprocessors import DictFlatteningPreprocessor, OneHotPreprocessor

torch = pytest.importorskip("torch")
nn = torch.nn

from rlpolicy.models.torch import torch_action_dist as tad  # noqa: E402
from rlpolicy.models.torch.fcnet import FullyConnectedNetwork  # noqa: E402
from rlpolicy.models.torch.torch_modelv2 import TorchModelV2  # noqa: E402

BOX3 = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def cfg(**kw):
    c = copy.deepcopy(MODEL_DEFAULTS)
    c.update(kw)
    return c


@pytest.fixture
def clean_registries(monkeypatch):
    for name in ("_CUSTOM_MODELS", "_CUSTOM_ACTION_DISTS", "_CUSTOM_PREPROCESSORS"):
        monkeypatch.setattr(catalog_mod, name, {})


def test_model_defaults_reexported():
    assert MODEL_DEFAULTS is CORE_DEFAULTS


def test_import_needs_no_framework():
    code = (
        "import sys, rlpolicy.models.catalog, rlpolicy.models;"
        "from rlpolicy.models import ModelCatalog, get_preprocessor, ModelV2;"
        "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -------------------------------------------------------------- action dists
@pytest.mark.parametrize(
    "space,cls,n",
    [
        (gym.spaces.Discrete(4), tad.TorchCategorical, 4),
        (BOX3, tad.TorchDiagGaussian, 6),
        (gym.spaces.MultiDiscrete([2, 3, 4]), tad.TorchMultiCategorical, 9),
        (gym.spaces.Box(-1, 2, (2,), np.int64), tad.TorchMultiCategorical, 8),
        (gym.spaces.Tuple([gym.spaces.Discrete(2), BOX3]), tad.TorchMultiActionDistribution, 8),
        (
            gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.MultiDiscrete([3, 3])}),
            tad.TorchMultiActionDistribution,
            8,
        ),
    ],
)
def test_get_action_dist_table(space, cls, n):
    dist_cls, num = ModelCatalog.get_action_dist(space, cfg(), framework="torch")
    base = dist_cls.func if isinstance(dist_cls, partial) else dist_cls
    # An integer Box from -1 gets its samples shifted: a subclass (models.dist_offsets).
    shifted = getattr(space, "dtype", None) == np.int64 and np.min(getattr(space, "low", 0)) != 0
    assert (
        (issubclass(base, cls) and base is not cls and base.action_offset == -1) if shifted else base is cls
    )
    assert int(num) == n


def test_partials_carry_input_lens_and_children():
    d, _ = ModelCatalog.get_action_dist(gym.spaces.MultiDiscrete([2, 3]), cfg(), framework="torch")
    assert list(d.keywords["input_lens"]) == [2, 3]
    d, _ = ModelCatalog.get_action_dist(gym.spaces.Box(-1, 2, (2,), np.int64), cfg(), framework="torch")
    assert d.keywords["input_lens"] == [4, 4]
    space = gym.spaces.Tuple([gym.spaces.Discrete(2), BOX3])
    d, _ = ModelCatalog.get_action_dist(space, cfg(), framework="torch")
    assert d.keywords["input_lens"] == [2, 6]
    assert d.keywords["child_distributions"] == [tad.TorchCategorical, tad.TorchDiagGaussian]
    assert d.keywords["action_space"] is space
    dist = d(torch.zeros(5, 8), None)
    s = dist.sample()
    assert tuple(s[0].shape) == (5,) and tuple(s[1].shape) == (5, 3)


def test_dist_type_requests():
    d, n = ModelCatalog.get_action_dist(BOX3, cfg(), dist_type="deterministic", framework="torch")
    assert d is tad.TorchDeterministic and n == 3
    d, n = ModelCatalog.get_action_dist(BOX3, cfg(), dist_type=tad.TorchSquashedGaussian, framework="torch")
    assert d is tad.TorchSquashedGaussian and n == 6
    d, n = ModelCatalog.get_action_dist(BOX3, cfg(), dist_type=tad.TorchBeta, framework="torch")
    assert d is tad.TorchBeta and n == 6


class _MyDist(ActionDistribution):
    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return 7


def test_custom_action_dist(clean_registries):
    ModelCatalog.register_custom_action_dist("mine", _MyDist)
    d, n = ModelCatalog.get_action_dist(BOX3, cfg(custom_action_dist="mine"), framework="torch")
    assert d is _MyDist and n == 7


def test_custom_multi_action_dist_gets_children(clean_registries):
    class MyMulti(tad.TorchMultiActionDistribution):
        pass

    ModelCatalog.register_custom_action_dist("multi", MyMulti)
    space = gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Discrete(2)])
    d, n = ModelCatalog.get_action_dist(space, cfg(custom_action_dist="multi"), framework="torch")
    assert d.func is MyMulti and n == 5 and d.keywords["input_lens"] == [3, 2]


def test_get_action_shape_torch():
    assert ModelCatalog.get_action_shape(gym.spaces.Discrete(3), "torch") == (torch.int64, (None,))
    assert ModelCatalog.get_action_shape(BOX3, "torch") == (torch.float32, (None, 3))
    md = gym.spaces.MultiDiscrete([2, 3])
    assert ModelCatalog.get_action_shape(md, "torch") == (md.dtype, (None, 2))
    tup = gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)])
    assert ModelCatalog.get_action_shape(tup, "torch") == (torch.int64, (None, 2))
    mixed = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Box(-1, 1, (2, 2))})
    assert ModelCatalog.get_action_shape(mixed, "torch") == (torch.float32, (None, 5))


@pytest.mark.tf
def test_get_action_placeholder_tf_graph():
    tf = pytest.importorskip("tensorflow")
    g = tf.compat.v1.Graph()
    with g.as_default():
        ph = ModelCatalog.get_action_placeholder(BOX3, name="act")
    assert ph.shape.as_list() == [None, 3] and ph.dtype == tf.float32 and ph.graph is g


# ------------------------------------------------------------------ models
@pytest.mark.parametrize(
    "space,name",
    [
        (BOX3, "FullyConnectedNetwork"),
        # RLlib 1.11: only 1-D Boxes go to the FC net; 2-D / >3-D Boxes and raw (unpreprocessed)
        # Discrete / MultiDiscrete / Dict / Tuple spaces go to the complex-input net.
        (gym.spaces.Box(0, 1, (3, 4), np.float32), "ComplexInputNetwork"),
        (gym.spaces.Box(0, 1, (2, 2, 2, 2), np.float32), "ComplexInputNetwork"),
        (gym.spaces.Discrete(3), "ComplexInputNetwork"),
        (gym.spaces.MultiDiscrete([2, 3]), "ComplexInputNetwork"),
        (gym.spaces.Dict({"v": BOX3}), "ComplexInputNetwork"),
        (OneHotPreprocessor(gym.spaces.Discrete(3)).observation_space, "FullyConnectedNetwork"),
        (gym.spaces.Box(0, 1, (10, 10, 3), np.float32), "VisionNetwork"),
        (gym.spaces.Tuple([BOX3]), "ComplexInputNetwork"),
        (
            DictFlatteningPreprocessor(
                gym.spaces.Dict({"i": gym.spaces.Box(0, 1, (10, 10, 3))})
            ).observation_space,
            "ComplexInputNetwork",
        ),
        (DictFlatteningPreprocessor(gym.spaces.Dict({"v": BOX3})).observation_space, "FullyConnectedNetwork"),
    ],
)
def test_get_v2_model_class_table(space, name):
    assert ModelCatalog._get_v2_model_class(space, cfg(), framework="torch").__name__ == name


class _Custom(TorchModelV2, nn.Module):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name, width=2):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.width = width
        self.lin = nn.Linear(int(np.prod(obs_space.shape)), num_outputs)

    def forward(self, input_dict, state, seq_lens):
        return self.lin(input_dict["obs_flat"]), state


class _Interface:
    def extra(self):
        return "extra"


def test_custom_model_by_name_and_class_with_kwargs(clean_registries):
    ModelCatalog.register_custom_model("c", _Custom)
    m = ModelCatalog.get_model_v2(
        BOX3, BOX3, 2, cfg(custom_model="c", custom_model_config={"width": 9}), framework="torch"
    )
    assert isinstance(m, _Custom) and m.width == 9
    m = ModelCatalog.get_model_v2(
        BOX3, BOX3, 2, cfg(custom_model=_Custom), framework="torch", model_interface=_Interface
    )
    assert type(m).__name__ == "_Custom_as__Interface" and m.extra() == "extra"


def test_custom_model_with_lstm_is_wrapped(clean_registries):
    m = ModelCatalog.get_model_v2(
        BOX3,
        BOX3,
        2,
        cfg(custom_model=FullyConnectedNetwork, use_lstm=True, lstm_cell_size=4, fcnet_hiddens=[5]),
        framework="torch",
    )
    assert type(m).__name__ == "FullyConnectedNetwork_as_LSTMWrapper"
    assert m.lstm.input_size == 5 and m.lstm.hidden_size == 4


def test_default_model_and_interface():
    m = ModelCatalog.get_model_v2(
        BOX3, BOX3, 2, cfg(fcnet_hiddens=[4]), framework="torch", model_interface=_Interface, name="pol"
    )
    assert isinstance(m, FullyConnectedNetwork) and m.extra() == "extra" and m.name == "pol"
    m = ModelCatalog.get_model_v2(BOX3, BOX3, 2, cfg(), framework="torch", default_model=_Custom)
    assert isinstance(m, _Custom)


def test_preprocessor_for_space(clean_registries):
    p = ModelCatalog.get_preprocessor_for_space(gym.spaces.Discrete(3))
    assert isinstance(p, OneHotPreprocessor) and p.shape == (3,)

    class Env:
        observation_space = gym.spaces.Discrete(4)

    assert ModelCatalog.get_preprocessor(Env()).shape == (4,)

    class Double(OneHotPreprocessor):
        def _init_shape(self, obs_space, options):
            return (2 * obs_space.n,)

    ModelCatalog.register_custom_preprocessor("dbl", Double)
    p = ModelCatalog.get_preprocessor_for_space(gym.spaces.Discrete(3), cfg(custom_preprocessor="dbl"))
    assert isinstance(p, Double) and p.shape == (6,)


# -------------------------------------------------------------- error table
class _NotAModel:
    pass


ERRORS = [
    (
        lambda: ModelCatalog.get_model_v2(BOX3, BOX3, 2, cfg(custom_model="nope"), framework="torch"),
        ValueError,
        r"custom_model 'nope' is not registered; registered: \[\]",
    ),
    (
        lambda: ModelCatalog.get_model_v2(BOX3, BOX3, 2, cfg(custom_model=_NotAModel), framework="torch"),
        ValueError,
        "must be a ModelV2 subclass",
    ),
    (
        lambda: ModelCatalog.get_model_v2(BOX3, BOX3, 2, cfg(), framework="mxnet"),
        ValueError,
        r"framework='mxnet' is not supported; use one of \['tf', 'tf2', 'tfe', 'torch'\]",
    ),
    (
        lambda: ModelCatalog.get_model_v2(
            BOX3, BOX3, 2, cfg(use_attention=True, use_lstm=True), framework="torch"
        ),
        ValueError,
        "only one of use_lstm and use_attention may be True",
    ),
    (
        lambda: ModelCatalog.get_model_v2(gym.spaces.Text(4), BOX3, 2, cfg(), framework="torch"),
        UnsupportedSpaceException,
        r"no default model for observation space Text\(1, 4, ",
    ),
    (
        lambda: ModelCatalog.get_action_dist(BOX3, cfg(custom_action_dist="nope"), framework="torch"),
        ValueError,
        "custom_action_dist 'nope' is not registered",
    ),
    # (multi-dim Box and MultiBinary actions are supported: tests/test_action_spaces_nd.py)
    (
        lambda: ModelCatalog.get_action_dist(gym.spaces.Text(3), cfg(), framework="torch"),
        UnsupportedSpaceException,
        r"action space Text\(1, 3, .*not supported; supported:",
    ),
    (
        lambda: ModelCatalog.get_action_dist(BOX3, cfg(), dist_type="gumbel", framework="torch"),
        ValueError,
        "dist_type 'gumbel' not supported for Box",
    ),
    (
        lambda: ModelCatalog.get_action_dist(BOX3, cfg(), framework="jax"),
        ValueError,
        "framework='jax' is not supported",
    ),
    (
        lambda: ModelCatalog.get_action_shape(gym.spaces.Text(2), "torch"),
        UnsupportedSpaceException,
        r"action space Text\(1, 2, .*not supported",
    ),
    (
        lambda: ModelCatalog.get_preprocessor_for_space(BOX3, {"fcnet_hidens": [1]}),
        ValueError,
        r"unknown model config key\(s\) \['fcnet_hidens'\]",
    ),
    (
        lambda: ModelCatalog.get_preprocessor_for_space(BOX3, cfg(custom_preprocessor="x")),
        ValueError,
        "custom_preprocessor 'x' is not registered",
    ),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS)
def test_error_table(fn, exc, match, clean_registries):
    with pytest.raises(exc, match=match):
        fn()


def test_unsupported_space_is_also_not_implemented_error():
    # RLlib 1.11 raised NotImplementedError here; both kinds of handlers keep working.
    with pytest.raises(NotImplementedError):
        ModelCatalog.get_action_dist(gym.spaces.Text(3), cfg(), framework="torch")


@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
def test_unknown_custom_names_list_the_registered_ones(framework, clean_registries):
    ModelCatalog.register_custom_model("zeta", _Custom)
    ModelCatalog.register_custom_model("alpha", _Custom)
    ModelCatalog.register_custom_action_dist("my_dist", _MyDist)
    with pytest.raises(
        ValueError, match=r"custom_model 'nope' is not registered; registered: \['alpha', 'zeta'\]"
    ):
        ModelCatalog.get_model_v2(BOX3, BOX3, 2, cfg(custom_model="nope"), framework=framework)
    with pytest.raises(
        ValueError, match=r"custom_action_dist 'other' is not registered; registered: \['my_dist'\]"
    ):
        ModelCatalog.get_action_dist(BOX3, cfg(custom_action_dist="other"), framework=framework)


@pytest.mark.parametrize("framework", ["torch", "tf", "tf2"])
def test_unsupported_spaces_name_the_space_and_the_supported_ones(framework):
    space = gym.spaces.Dict({"x": BOX3, "t": gym.spaces.Text(4)})
    with pytest.raises(
        UnsupportedSpaceException,
        match=r"observation space Text\(1, 4, .*\(inside Dict\(.*\)\); supported: Box, Discrete, "
        r"MultiDiscrete, MultiBinary and Dict/Tuple of those",
    ):
        ModelCatalog.get_model_v2(space, BOX3, 2, cfg(), framework=framework)
    with pytest.raises(
        UnsupportedSpaceException,
        match=r"action space Text\(1, 3, .*supported: Discrete, MultiDiscrete, MultiBinary, "
        r"Box, Tuple, Dict",
    ):
        ModelCatalog.get_action_dist(gym.spaces.Text(3), cfg(), framework=framework)
