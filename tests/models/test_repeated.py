"""``Repeated`` spaces, ``RepeatedValues`` and their preprocessing / unpacking.

Written like RLlib 1.x client code: the names come from their 1.11 paths
(``utils.spaces.repeated``, ``models.repeated_values``, ``models.preprocessors``,
``models.modelv2``). Expected encodings come from a numpy reference written
here (RLlib 1.11's layout ``[len, item_0, ..., item_{max_len-1}]``, zero
padded) and from hand-worked arrays, never from the code under test.
"""

import pickle

import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, Tuple

from rlpolicy.models.catalog import ModelCatalog
from rlpolicy.models.modelv2 import restore_original_dimensions
from rlpolicy.models.preprocessors import RepeatedValuesPreprocessor, get_preprocessor
from rlpolicy.models.repeated_values import RepeatedValues
from rlpolicy.policy._obs_prep import stack_rows
from rlpolicy.utils.spaces.repeated import Repeated

ATOL = 1e-6
ITEM = Box(-10.0, 10.0, (2,), np.float32)
LIST3 = Repeated(ITEM, max_len=3)
ENTITY = Dict({"id": Discrete(2), "pos": Box(-1.0, 1.0, (2,), np.float32)})


def np_size(space):
    """Hand-counted width of the flat encoding."""
    if isinstance(space, Repeated):
        return 1 + space.max_len * np_size(space.child_space)
    if isinstance(space, Dict):
        return sum(np_size(s) for s in space.spaces.values())
    if isinstance(space, Tuple):
        return sum(np_size(s) for s in space.spaces)
    if isinstance(space, Discrete):
        return int(space.n)
    return int(np.prod(space.shape))


def np_encode(obs, space):
    """Reference flat encoding of one raw observation (RLlib 1.11's layout)."""
    if isinstance(space, Repeated):
        out = np.zeros(np_size(space), np.float32)
        out[0] = len(obs)
        width = np_size(space.child_space)
        for i, item in enumerate(obs):
            out[1 + i * width : 1 + (i + 1) * width] = np_encode(item, space.child_space)
        return out
    if isinstance(space, Dict):
        return np.concatenate([np_encode(obs[k], s) for k, s in space.spaces.items()])
    if isinstance(space, Tuple):
        return np.concatenate([np_encode(o, s) for o, s in zip(obs, space.spaces)])
    if isinstance(space, Discrete):
        out = np.zeros(space.n, np.float32)
        out[int(obs)] = 1.0
        return out
    return np.asarray(obs, np.float32).ravel()


# ---------------------------------------------------------------- the space


def test_sample_draws_one_to_max_len_child_samples():
    space = Repeated(Discrete(5), max_len=4)
    space.seed(7)
    samples = [space.sample() for _ in range(300)]
    lengths = {len(s) for s in samples}
    assert lengths == {1, 2, 3, 4}  # RLlib 1.11 never draws an empty list
    assert all(isinstance(s, list) and all(Discrete(5).contains(c) for c in s) for s in samples)
    assert all(space.contains(s) for s in samples)


def test_seed_makes_samples_reproducible_including_the_child():
    # (separate child objects: seeding one shared child twice would interleave its draws)
    a = Repeated(Box(-10.0, 10.0, (2,), np.float32), 3)
    b = Repeated(Box(-10.0, 10.0, (2,), np.float32), 3)
    a.seed(11)
    b.seed(11)
    for _ in range(5):
        sa, sb = a.sample(), b.sample()
        assert len(sa) == len(sb)
        for x, y in zip(sa, sb):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "value, inside",
    [
        ([], True),
        ([np.zeros(2, np.float32)], True),
        ([np.zeros(2, np.float32)] * 3, True),
        (np.zeros((2, 2), np.float32), True),  # an array of items, as 1.11 accepts
        ([np.zeros(2, np.float32)] * 4, False),  # longer than max_len
        ([np.full(2, 11.0, np.float32)], False),  # item outside the child Box
        ([np.zeros(3, np.float32)], False),  # item of the wrong shape
        (np.zeros(2, np.float32)[0], False),  # a scalar is no list
        ("ab", False),
        ({"a": 1}, False),
    ],
)
def test_contains(value, inside):
    assert LIST3.contains(value) is inside
    assert (value in LIST3) is inside


def test_repr_and_attributes():
    space = Repeated(Discrete(3), max_len=5)
    assert repr(space) == "Repeated(Discrete(3), 5)"
    assert space.child_space == Discrete(3) and space.max_len == 5 and space.shape is None


def test_equality_by_value():
    assert Repeated(Discrete(3), 2) == Repeated(Discrete(3), 2)
    assert Repeated(Discrete(3), 2) != Repeated(Discrete(3), 3)
    assert Repeated(Discrete(3), 2) != Repeated(Discrete(4), 2)
    assert Repeated(Discrete(3), 2) != Discrete(3)
    assert hash(Repeated(ITEM, 2)) == hash(Repeated(Box(-10.0, 10.0, (2,), np.float32), 2))


def test_pickle_and_jsonable_round_trips():
    space = Repeated(ENTITY, 2)
    back = pickle.loads(pickle.dumps(space))
    assert back == space and back is not space
    samples = [[{"id": 1, "pos": np.array([0.5, -0.5], np.float32)}], []]
    restored = space.from_jsonable(space.to_jsonable(samples))
    assert len(restored) == 2 and restored[1] == []
    assert restored[0][0]["id"] == 1
    np.testing.assert_allclose(restored[0][0]["pos"], [0.5, -0.5], atol=ATOL)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((Discrete(2), 0), ValueError, r"max_len must be a positive int, got 0"),
        ((Discrete(2), 2.5), ValueError, r"max_len must be a positive int, got 2.5"),
        ((Discrete(2), True), ValueError, r"max_len must be a positive int, got True"),
        (("Box", 3), TypeError, r"child_space must be a gymnasium Space, got str"),
    ],
)
def test_constructor_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        Repeated(*args)


# ---------------------------------------------------------------- RepeatedValues


def test_unbatch_all_hand_worked():
    values = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    rv = RepeatedValues(values, lengths=np.array([2.0, 0.0], np.float32), max_len=3)
    items = rv.unbatch_all()
    assert len(items) == 2 and len(items[0]) == 2 and items[1] == []
    np.testing.assert_array_equal(items[0][0], [0, 1])
    np.testing.assert_array_equal(items[0][1], [2, 3])
    assert rv.unbatch_all() is items  # unbatched once, then cached


def test_unbatch_repeat_dim_hand_worked():
    values = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    slices = RepeatedValues(values, np.array([3, 1]), 3).unbatch_repeat_dim()
    assert isinstance(slices, list) and len(slices) == 3
    np.testing.assert_array_equal(slices[0], [[0, 1], [6, 7]])
    np.testing.assert_array_equal(slices[2], [[4, 5], [10, 11]])


def test_unbatch_all_dict_items():
    values = {"a": np.arange(4).reshape(1, 2, 2), "b": np.array([[10, 20]])}
    items = RepeatedValues(values, np.array([1]), 2).unbatch_all()
    assert len(items) == 1 and len(items[0]) == 1
    np.testing.assert_array_equal(items[0][0]["a"], [0, 1])
    assert items[0][0]["b"] == 10
    slices = RepeatedValues(values, np.array([1]), 2).unbatch_repeat_dim()
    assert set(slices) == {"a", "b"} and len(slices["b"]) == 2  # structure kept, as 1.11
    np.testing.assert_array_equal(slices["b"][1], [20])


def test_unbatch_all_tuple_items_given_as_a_list():
    # A Tuple child space is unpacked into a list (as RLlib 1.11's _unpack_obs does).
    values = [np.array([[[1.0], [2.0]]]), np.array([[7, 8]])]
    items = RepeatedValues(values, np.array([2]), 2).unbatch_all()
    assert len(items[0]) == 2
    first, second = items[0]
    np.testing.assert_array_equal(first[0], [1.0])
    assert first[1] == 7 and second[1] == 8
    np.testing.assert_array_equal(second[0], [2.0])


def test_unbatch_all_nested_lists_hand_worked():
    # Repeated(Repeated(Box(1,), 2), 2), one row: [[1, 2], [3]].
    inner = RepeatedValues(
        np.array([[[[1.0], [2.0]], [[3.0], [0.0]]]]), lengths=np.array([[2.0, 1.0]]), max_len=2
    )
    outer = RepeatedValues(inner, lengths=np.array([2.0]), max_len=2)
    (row,) = outer.unbatch_all()
    assert [len(lst) for lst in row] == [2, 1]
    assert [float(x[0]) for x in row[0]] == [1.0, 2.0] and float(row[1][0][0]) == 3.0
    slices = outer.unbatch_repeat_dim()
    assert all(isinstance(s, RepeatedValues) for s in slices)
    np.testing.assert_array_equal(slices[1].lengths, [1.0])


@pytest.mark.tf
def test_unbatch_all_torch_and_eager_tf_tensors():
    torch = pytest.importorskip("torch")
    values = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    rv = RepeatedValues(torch.from_numpy(values), torch.tensor([1.0, 2.0]), 2)
    items = rv.unbatch_all()
    assert [len(x) for x in items] == [1, 2] and torch.is_tensor(items[1][1])
    np.testing.assert_array_equal(items[1][1].numpy(), [6, 7])
    tf = pytest.importorskip("tensorflow")
    if tf.executing_eagerly():
        items = RepeatedValues(tf.constant(values), tf.constant([1.0, 2.0]), 2).unbatch_all()
        assert [len(x) for x in items] == [1, 2]
        np.testing.assert_array_equal(items[1][0].numpy(), [4, 5])


@pytest.mark.tf
def test_unbatch_all_in_graph_mode_raises(tf_modules):
    tf1, _ = tf_modules
    with tf1.Graph().as_default():
        values = tf1.placeholder(np.float32, [None, 3, 2])
        rv = RepeatedValues(values, tf1.placeholder(np.float32, [None]), 3)
        with pytest.raises(ValueError, match=r"needs a known batch size"):
            rv.unbatch_all()
        assert len(rv.unbatch_repeat_dim()) == 3  # symbolic slices still work


def test_repr():
    rv = RepeatedValues(np.zeros((1, 2)), np.array([0]), 2)
    assert (
        repr(rv)
        == str(rv)
        == (f"RepeatedValues(value={np.zeros((1, 2))!r}, lengths={np.array([0])!r}, max_len=2)")
    )


# ---------------------------------------------------------------- preprocessor


def test_get_preprocessor_and_catalog_pick_the_repeated_preprocessor():
    assert get_preprocessor(LIST3) is RepeatedValuesPreprocessor
    prep = ModelCatalog.get_preprocessor_for_space(LIST3)
    assert isinstance(prep, RepeatedValuesPreprocessor)
    assert prep.shape == (7,) and prep.size == 7
    assert prep.observation_space.shape == (7,)
    assert prep.observation_space.original_space is LIST3


@pytest.mark.parametrize(
    "space, obs, want",
    [
        (LIST3, [np.array([1.0, 2.0]), np.array([3.0, 4.0])], [2, 1, 2, 3, 4, 0, 0]),
        (LIST3, [], [0, 0, 0, 0, 0, 0, 0]),
        (LIST3, np.array([[5.0, 6.0]]), [1, 5, 6, 0, 0, 0, 0]),
        (Repeated(Discrete(3), 2), [2, 0], [2, 0, 0, 1, 1, 0, 0]),
        (Repeated(ENTITY, 2), [{"id": 1, "pos": np.array([0.5, -0.5])}], [1, 0, 1, 0.5, -0.5, 0, 0, 0, 0]),
    ],
)
def test_transform_hand_worked(space, obs, want):
    prep = get_preprocessor(space)(space)
    out = prep.transform(obs)
    assert out.dtype == np.float32 and out.shape == (len(want),)
    np.testing.assert_allclose(out, want, atol=ATOL)
    np.testing.assert_allclose(prep.transform_batch([obs])[0], want, atol=ATOL)


NESTED = Dict(
    {
        "units": Repeated(ENTITY, 3),
        "me": Box(-1.0, 1.0, (1,), np.float32),
        "groups": Repeated(Repeated(Discrete(2), 2), 2),
    }
)


@pytest.mark.parametrize(
    "space", [LIST3, Repeated(ENTITY, 3), NESTED, Repeated(Tuple((Discrete(3), ITEM)), 2)]
)
def test_batches_match_the_numpy_reference(space):
    space.seed(5)
    rows = [space.sample() for _ in range(6)]
    if isinstance(space, Repeated):
        rows[0] = []  # an empty list too
    prep = get_preprocessor(space)(space)
    assert prep.size == np_size(space)
    batch = prep.transform_batch(stack_rows(rows, space))
    assert batch.shape == (6, np_size(space)) and batch.dtype == np.float32
    for i, row in enumerate(rows):
        np.testing.assert_allclose(batch[i], np_encode(row, space), atol=ATOL)
        np.testing.assert_allclose(prep.transform(row), np_encode(row, space), atol=ATOL)


@pytest.mark.parametrize(
    "batch, match",
    [
        ([[np.zeros(2)] * 4], r"observation row 0: 4 items exceed max_len=3 of Repeated\(Box"),
        ([5.0], r"observation row 0: input for Repeated\(.*\) must be a list of items, got float"),
        ([[np.zeros(2)], [np.zeros(3)]], r"observation items: rows of different shapes"),
        ([[np.zeros(3)]], r"observation items: expected shape \(1, 2\) for Box"),
        (np.zeros(3), r"observation row 0: input for .* must be a list of items, got float64"),
        (7, r"a batch of observations for Repeated\(.*\) needs a leading batch axis"),
    ],
)
def test_batch_errors_name_the_row(batch, match):
    prep = get_preprocessor(LIST3)(LIST3)
    with pytest.raises(ValueError, match=match):
        prep.transform_batch(batch)


def test_single_transform_errors():
    prep = get_preprocessor(LIST3)(LIST3)
    with pytest.raises(ValueError, match=r"holds 4 items, more than max_len=3"):
        prep.transform([np.zeros(2)] * 4)
    with pytest.raises(ValueError, match=r"must be a list of items, got int"):
        prep.transform(3)
    disc = get_preprocessor(Repeated(Discrete(3), 2))(Repeated(Discrete(3), 2))
    with pytest.raises(ValueError, match=r"items: row 1 holds \[7\], outside Discrete\(3\)"):
        disc.transform_batch([[1, 7]])


# ---------------------------------------------------------------- restoring the structure


def _flat(space, rows):
    return np.stack([np_encode(r, space) for r in rows])


def test_restore_numpy_hand_worked():
    flat = _flat(LIST3, [[[1.0, 2.0]], [], [[3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]])
    obs_space = get_preprocessor(LIST3)(LIST3).observation_space
    rv = restore_original_dimensions(flat, obs_space, tensorlib="numpy")
    assert isinstance(rv, RepeatedValues) and rv.max_len == 3
    np.testing.assert_array_equal(rv.lengths, [1, 0, 3])
    want = np.array([[[1, 2], [0, 0], [0, 0]], [[0, 0]] * 3, [[3, 4], [5, 6], [7, 8]]], np.float32)
    np.testing.assert_array_equal(rv.values, want)
    assert [len(x) for x in rv.unbatch_all()] == [1, 0, 3]


def test_restore_nested_dict_and_lists():
    rows = [
        {"units": [{"id": 1, "pos": [0.5, 0.25]}], "me": [0.1], "groups": [[1, 0], [1]]},
        {"units": [], "me": [-0.1], "groups": []},
    ]
    obs_space = get_preprocessor(NESTED)(NESTED).observation_space
    out = restore_original_dimensions(_flat(NESTED, rows), obs_space, tensorlib="numpy")
    units, groups = out["units"], out["groups"]
    np.testing.assert_array_equal(units.lengths, [1, 0])
    assert set(units.values) == {"id", "pos"}
    np.testing.assert_array_equal(units.values["id"][0], [[0, 1], [0, 0], [0, 0]])  # one-hot
    np.testing.assert_allclose(units.values["pos"][0, 0], [0.5, 0.25], atol=ATOL)
    np.testing.assert_allclose(out["me"], [[0.1], [-0.1]], atol=ATOL)
    assert isinstance(groups.values, RepeatedValues)
    np.testing.assert_array_equal(groups.lengths, [2, 0])
    np.testing.assert_array_equal(groups.values.lengths, [[2, 1], [0, 0]])
    assert groups.values.values.shape == (2, 2, 2, 2)  # [B, outer, inner, one-hot]
    np.testing.assert_array_equal(groups.values.values[0, 0], [[0, 1], [1, 0]])
    assert [[len(inner) for inner in row] for row in groups.unbatch_all()] == [[2, 1], []]


def test_restore_torch_tensors():
    torch = pytest.importorskip("torch")
    flat = _flat(LIST3, [[[1.0, 2.0], [3.0, 4.0]]])
    obs_space = get_preprocessor(LIST3)(LIST3).observation_space
    rv = restore_original_dimensions(torch.from_numpy(flat), obs_space, tensorlib="torch")
    assert torch.is_tensor(rv.values) and tuple(rv.values.shape) == (1, 3, 2)
    np.testing.assert_array_equal(rv.lengths.numpy(), [2])
    np.testing.assert_array_equal(rv.values.numpy()[0, :2], [[1, 2], [3, 4]])


@pytest.mark.tf
def test_restore_tf_graph_tensors(tf_modules):
    tf1, tf = tf_modules
    flat = _flat(LIST3, [[[1.0, 2.0]], [[3.0, 4.0], [5.0, 6.0]]])
    obs_space = get_preprocessor(LIST3)(LIST3).observation_space
    graph = tf1.Graph()
    with graph.as_default():
        ph = tf1.placeholder(tf.float32, [None, 7])
        rv = restore_original_dimensions(ph, obs_space, tensorlib="tf")
        assert rv.values.shape.as_list() == [None, 3, 2]
        with tf1.Session(graph=graph) as sess:
            values, lengths = sess.run([rv.values, rv.lengths], {ph: flat})
    np.testing.assert_array_equal(lengths, [1, 2])
    np.testing.assert_array_equal(values[1, :2], [[3, 4], [5, 6]])


# ---------------------------------------------------------------- catalog


@pytest.mark.parametrize("framework", ["torch", "tf2"])
def test_default_model_is_the_fc_net_on_the_flat_obs(framework):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    obs_space = get_preprocessor(LIST3)(LIST3).observation_space
    model = ModelCatalog.get_model_v2(obs_space, Discrete(2), 2, {"fcnet_hiddens": [4]}, framework=framework)
    assert type(model).__name__ == "FullyConnectedNetwork"  # as RLlib 1.11's catalog picks
    flat = _flat(LIST3, [[[1.0, 2.0]], []])
    if framework == "torch":
        import torch

        flat = torch.from_numpy(flat)
    out, _ = model({"obs": flat})
    assert tuple(out.shape) == (2, 2)


def test_no_default_model_for_an_unflattened_repeated_space():
    pytest.importorskip("torch")
    from rlpolicy.utils.error import UnsupportedSpaceException

    with pytest.raises(
        UnsupportedSpaceException,
        match=r"no default model for observation space Repeated\(Box.*, 3\).*custom_model",
    ):
        ModelCatalog.get_model_v2(
            LIST3, Discrete(2), 2, {"_disable_preprocessor_api": True}, framework="torch"
        )


def test_convert_to_torch_tensor_converts_the_values():
    torch = pytest.importorskip("torch")
    from rlpolicy.utils.torch_utils import convert_to_torch_tensor

    rv = RepeatedValues({"a": np.ones((2, 3, 1), np.float32)}, np.array([1.0, 3.0]), 3)
    out = convert_to_torch_tensor({"obs": rv})["obs"]
    assert isinstance(out, RepeatedValues) and out.max_len == 3
    assert torch.is_tensor(out.values["a"]) and tuple(out.values["a"].shape) == (2, 3, 1)
    np.testing.assert_array_equal(np.asarray(out.lengths), [1.0, 3.0])  # as 1.11: left as given
    assert [len(x) for x in out.unbatch_all()] == [1, 3]


def test_layout_holds_for_any_child_space():
    """Property: for generated child spaces (tests/space_strategies.py), row = [len, the
    child's own encodings of the items, zeros], and restoring gives back the lengths."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st
    from space_strategies import spaces

    @hypothesis.settings(max_examples=10, deadline=None, derandomize=True, database=None)
    @hypothesis.given(
        child=spaces(for_obs=True, max_depth=1), max_len=st.integers(1, 3), seed=st.integers(0, 2**16)
    )
    def check(child, max_len, seed):
        space = Repeated(child, max_len)
        space.seed(seed)
        rows = [space.sample() for _ in range(3)] + [[]]
        child_prep = get_preprocessor(child)(child)
        prep = get_preprocessor(space)(space)
        width = child_prep.size
        flat = prep.transform_batch(stack_rows(rows, space))
        assert flat.shape == (4, 1 + max_len * width)
        for row, out in zip(rows, flat):
            assert out[0] == len(row)
            for i, item in enumerate(row):
                want = child_prep.transform_batch(stack_rows([item], child))[0]
                np.testing.assert_array_equal(out[1 + i * width : 1 + (i + 1) * width], want)
            assert not out[1 + len(row) * width :].any()
        restored = restore_original_dimensions(flat, prep.observation_space, tensorlib="numpy")
        np.testing.assert_array_equal(restored.lengths, [len(r) for r in rows])
        assert [len(items) for items in restored.unbatch_all()] == [len(r) for r in rows]

    check()
