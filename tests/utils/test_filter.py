"""rlpolicy.utils.filter / filter_manager, used as 1.x code uses them (ES/ARS-style
observation normalization: one filter per policy, worker buffers merged by a driver).

Expected values are numpy's mean/std of the stream (ddof=1), computed independently."""

import pickle
import threading

import numpy as np
import pytest

from rlpolicy.utils.filter import (
    ConcurrentMeanStdFilter,
    Filter,
    MeanStdFilter,
    NoFilter,
    RunningStat,
    get_filter,
)
from rlpolicy.utils.filter_manager import FilterManager

ATOL = 1e-6


def _stream(n, shape=(3,), seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(loc=[1.0, -2.0, 5.0][: shape[0]] if shape else 0.0, scale=3.0, size=(n, *shape))


# ---------------------------------------------------------------------- RunningStat
def test_running_stat_matches_numpy_over_the_stream():
    xs = _stream(50)
    rs = RunningStat((3,))
    for x in xs:
        rs.push(x)
    assert rs.n == 50 and rs.shape == (3,)
    np.testing.assert_allclose(rs.mean, xs.mean(axis=0), atol=ATOL)
    np.testing.assert_allclose(rs.var, xs.var(axis=0, ddof=1), atol=1e-5)
    np.testing.assert_allclose(rs.std, xs.std(axis=0, ddof=1), atol=1e-5)


def test_running_stat_merge_equals_single_stream():
    xs = _stream(40)
    a, b, whole = RunningStat((3,)), RunningStat((3,)), RunningStat((3,))
    for x in xs[:13]:
        a.push(x)
    for x in xs[13:]:
        b.push(x)
    for x in xs:
        whole.push(x)
    a.update(b)
    assert a.n == 40
    np.testing.assert_allclose(a.mean, whole.mean, atol=ATOL)
    np.testing.assert_allclose(a.var, xs.var(axis=0, ddof=1), atol=1e-5)


def test_running_stat_small_counts_follow_rllib():
    rs = RunningStat(())
    assert rs.n == 0 and rs.var == 0.0
    rs.push(3.0)
    assert rs.mean == 3.0 and rs.var == 9.0  # RLlib 1.11: mean**2 while n < 2
    empty = RunningStat(())
    rs.update(empty)  # merging nothing changes nothing
    assert rs.n == 1 and rs.mean == 3.0
    empty.update(RunningStat(()))
    assert empty.n == 0 and not np.isnan(empty.mean)


def test_running_stat_shape_errors_and_copy_independence():
    rs = RunningStat(np.array([2]))  # the form RLlib's worker passes: np.array(space.shape)
    with pytest.raises(ValueError, match=r"shape \(3,\) does not fit statistics of shape \(2,\)"):
        rs.push(np.zeros(3))
    assert rs.n == 0
    with pytest.raises(ValueError, match="cannot be merged"):
        rs.update(RunningStat((3,)))
    rs.push([1.0, 2.0])
    c = rs.copy()
    c.push([3.0, 4.0])
    assert rs.n == 1 and c.n == 2
    np.testing.assert_allclose(rs.mean, [1.0, 2.0])


# ---------------------------------------------------------------------- MeanStdFilter
def test_rllib_docstring_example_apply_changes():
    # The worked example of RLlib 1.11's MeanStdFilter.apply_changes docstring.
    a = MeanStdFilter(())
    a(1)
    a(2)
    assert [a.rs.n, float(a.rs.mean), a.buffer.n] == [2, 1.5, 2]
    b = MeanStdFilter(())
    b(10)
    a.apply_changes(b, with_buffer=False)
    assert a.rs.n == 3 and abs(float(a.rs.mean) - 13 / 3) < 1e-12 and a.buffer.n == 2
    a.apply_changes(b, with_buffer=True)
    assert a.rs.n == 4 and abs(float(a.rs.mean) - 5.75) < 1e-12 and a.buffer.n == 1


def test_filter_output_is_normalized_by_stats_including_the_current_obs():
    xs = _stream(20).astype(np.float32)
    f = MeanStdFilter((3,), clip=None)
    outs = [f(x) for x in xs]
    for t in (5, 19):
        seen = xs[: t + 1].astype(np.float64)
        expect = (xs[t] - seen.mean(0)) / (seen.std(0, ddof=1) + 1e-6)
        np.testing.assert_allclose(outs[t], expect, atol=1e-5)
    assert outs[0].dtype == np.float32
    np.testing.assert_allclose(outs[0], 0.0)  # the first obs is its own mean


def test_update_false_leaves_state_and_clip_demean_destd():
    f = MeanStdFilter((1,), clip=1.0)
    for v in (0.0, 2.0, 4.0):
        f(np.array([v]))
    n = f.rs.n
    out = f(np.array([100.0]), update=False)
    assert f.rs.n == n and f.buffer.n == n
    assert out[0] == 1.0  # (100 - 2) / 2 -> clipped to 1
    np.testing.assert_allclose(f(np.array([3.0]), update=False), [0.5], atol=1e-5)
    g = MeanStdFilter((1,), demean=False, destd=True, clip=None)
    for v in (0.0, 2.0, 4.0):
        g(np.array([v]))
    np.testing.assert_allclose(g(np.array([3.0]), update=False), [1.5], atol=1e-5)  # 3 / std 2
    h = MeanStdFilter((1,), demean=True, destd=False, clip=None)
    for v in (0.0, 2.0, 4.0):
        h(np.array([v]))
    np.testing.assert_allclose(h(np.array([3.0]), update=False), [1.0], atol=1e-6)


def test_batched_input_pushes_each_row():
    xs = _stream(8)
    f = MeanStdFilter((3,), clip=None)
    f(xs)
    assert f.rs.n == 8 and f.buffer.n == 8
    np.testing.assert_allclose(f.rs.mean, xs.mean(0), atol=ATOL)


def test_bad_observation_shape_names_it_and_records_nothing():
    f = MeanStdFilter((3,))
    with pytest.raises(ValueError, match=r"observation has shape \(4,\); expected \(3,\)"):
        f(np.zeros(4))
    assert f.rs.n == 0 and f.buffer.n == 0


def test_nested_shapes_with_unnormalized_discrete_part():
    # As RLlib's worker builds it for Dict(pos=Box(2), id=Discrete): None = not normalized.
    f = MeanStdFilter({"pos": np.array([2]), "id": None}, clip=None)
    obs = [{"pos": np.array([1.0, 2.0]), "id": 3}, {"pos": np.array([3.0, 6.0]), "id": 1}]
    f(obs[0])
    out = f(obs[1])
    assert out["id"] == 1
    np.testing.assert_allclose(f.rs["pos"].mean, [2.0, 4.0])
    pos = np.array([[1.0, 2.0], [3.0, 6.0]])
    np.testing.assert_allclose(out["pos"], (pos[1] - pos.mean(0)) / (pos.std(0, ddof=1) + 1e-6), atol=1e-6)
    with pytest.raises(ValueError, match=r"observation\['pos'\] has shape \(3,\)"):
        f({"pos": np.zeros(3), "id": 0})
    assert f.rs["pos"].n == 2
    with pytest.raises(ValueError, match="dict with keys"):
        f((np.zeros(2), 0))
    # A tuple structure and None alone (Discrete obs: nothing to normalize).
    t = MeanStdFilter((np.array([1]), None), clip=None)
    t((np.array([4.0]), 2))
    assert t.rs[0].n == 1 and t.rs[1] is None
    d = MeanStdFilter(None)
    assert d(5) == 5


def test_copy_sync_are_independent_and_serializable_round_trip():
    f = MeanStdFilter((3,), clip=5.0)
    for x in _stream(10):
        f(x)
    c = f.copy()
    assert type(c) is MeanStdFilter and c.clip == 5.0
    c(np.ones(3) * 100)
    assert f.rs.n == 10 and c.rs.n == 11 and f.buffer.n == 10
    s = MeanStdFilter((3,))
    s.sync(f)
    f.reset_buffer()
    assert s.buffer.n == 10 and f.buffer.n == 0
    back = pickle.loads(pickle.dumps(f.as_serializable()))
    np.testing.assert_allclose(back.rs.mean, f.rs.mean)
    np.testing.assert_allclose(back.rs.std, f.rs.std)
    assert back.rs.n == 10 and back.clip == 5.0
    with pytest.raises(ValueError, match=r"other filter has shape \(2,\)"):
        s.sync(MeanStdFilter((2,)))
    assert s.rs.n == 10


def test_clear_buffer_is_deprecated_alias():
    f = MeanStdFilter(())
    f(1.0)
    with pytest.warns(DeprecationWarning):
        f.clear_buffer()
    assert f.buffer.n == 0 and f.rs.n == 1


def test_concurrent_filter_threads_and_serializable_form():
    f = ConcurrentMeanStdFilter((2,), clip=None)
    xs = _stream(400, shape=(2,))

    def feed(part):
        for x in part:
            f(x)

    threads = [threading.Thread(target=feed, args=(xs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert f.rs.n == 400
    np.testing.assert_allclose(f.rs.mean, xs.mean(0), atol=1e-6)
    ser = f.as_serializable()
    assert type(ser) is MeanStdFilter and ser.rs.n == 400
    assert type(f.copy()) is ConcurrentMeanStdFilter
    back = pickle.loads(pickle.dumps(f))  # the lock is rebuilt, not pickled
    back(np.zeros(2))
    assert back.rs.n == 401 and f.rs.n == 400


def test_no_filter_and_get_filter():
    nf = NoFilter()
    x = np.arange(3)
    assert nf(x) is x and nf(x).dtype == x.dtype
    assert isinstance(nf([1, 2]), np.ndarray)
    assert nf.copy() is nf and nf.as_serializable() is nf
    assert isinstance(get_filter("NoFilter", (3,)), NoFilter)
    m = get_filter("MeanStdFilter", (3,))
    assert type(m) is MeanStdFilter and m.clip is None
    assert type(get_filter("ConcurrentMeanStdFilter", (3,))) is ConcurrentMeanStdFilter
    custom = get_filter(lambda shape: MeanStdFilter(shape, clip=2.0), (3,))
    assert custom.clip == 2.0
    with pytest.raises(ValueError, match="Unknown observation_filter: 'Bogus'"):
        get_filter("Bogus", (3,))
    assert issubclass(MeanStdFilter, Filter) and issubclass(NoFilter, Filter)


# ---------------------------------------------------------------------- FilterManager
class _FakeWorker:
    """What FilterManager needs from a worker (RolloutWorker's get_filters / sync_filters)."""

    def __init__(self):
        self.filters = {"default_policy": MeanStdFilter((3,), clip=None)}

    def get_filters(self, flush_after=False):
        out = {k: f.as_serializable() for k, f in self.filters.items()}
        if flush_after:
            for f in self.filters.values():
                f.reset_buffer()
        return out

    def sync_filters(self, new_filters):
        for k, f in self.filters.items():
            f.sync(new_filters[k])


def test_filter_manager_merges_worker_buffers_and_pushes_back():
    xs = _stream(30)
    local = {"default_policy": MeanStdFilter((3,), clip=None)}
    workers = [_FakeWorker(), _FakeWorker()]
    for x in xs[:10]:
        workers[0].filters["default_policy"](x)
    for x in xs[10:30]:
        workers[1].filters["default_policy"](x)
    FilterManager.synchronize(local, workers)
    rs = local["default_policy"].rs
    assert rs.n == 30
    np.testing.assert_allclose(rs.mean, xs.mean(0), atol=ATOL)
    np.testing.assert_allclose(rs.std, xs.std(0, ddof=1), atol=1e-5)
    for w in workers:
        assert w.filters["default_policy"].rs.n == 30
        np.testing.assert_allclose(w.filters["default_policy"].rs.mean, xs.mean(0), atol=ATOL)
    # A second round merges only what was seen since (buffers were flushed).
    more = _stream(5, seed=1)
    for x in more:
        workers[0].filters["default_policy"](x)
    FilterManager.synchronize(local, workers, update_remote=False)
    allx = np.concatenate([xs, more])
    assert local["default_policy"].rs.n == 35 and workers[1].filters["default_policy"].rs.n == 30
    np.testing.assert_allclose(local["default_policy"].rs.mean, allx.mean(0), atol=ATOL)


def test_filter_manager_missing_policy_changes_nothing():
    local = {"default_policy": MeanStdFilter((3,)), "other": MeanStdFilter((3,))}
    w = _FakeWorker()
    w.filters["default_policy"](np.ones(3))
    with pytest.raises(KeyError, match=r"no filter for policy id\(s\) \['other'\]"):
        FilterManager.synchronize(local, [w])
    assert local["default_policy"].rs.n == 0
