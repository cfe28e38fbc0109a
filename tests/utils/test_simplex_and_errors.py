"""Simplex space (contains / sample / equality) and rlpolicy.utils.error."""

import numpy as np
import pytest

from rlpolicy.utils.spaces.simplex import Simplex


def test_samples_lie_on_the_simplex_and_follow_the_concentration():
    space = Simplex((2, 3), concentration=[8.0, 1.0, 1.0], seed=0)
    draws = np.stack([space.sample() for _ in range(2000)])
    assert draws.shape == (2000, 2, 3) and draws.dtype == np.float32
    np.testing.assert_allclose(draws.sum(-1), 1.0, rtol=1e-5, atol=1e-5)
    assert draws.min() >= 0.0
    # Dirichlet mean: concentration / sum(concentration) = [0.8, 0.1, 0.1].
    np.testing.assert_allclose(draws.mean(axis=(0, 1)), [0.8, 0.1, 0.1], atol=0.01)
    assert all(space.contains(d) for d in draws[:20])
    same_seed = Simplex((2, 3), concentration=[8.0, 1.0, 1.0], seed=0)
    np.testing.assert_array_equal(same_seed.sample(), draws[0])


@pytest.mark.parametrize(
    "x,ok",
    [
        ([0.2, 0.3, 0.5], True),
        ([1.0, 0.0, 0.0], True),
        ([0.2, 0.3, 0.4], False),  # sums to 0.9
        ([1.2, -0.2, 0.0], False),  # a negative coordinate
        ([0.5, 0.5], False),  # wrong shape
        ("abc", False),
    ],
)
def test_contains(x, ok):
    assert Simplex((3,)).contains(x) is ok


def test_equality_repr_and_json():
    assert Simplex((3,)) == Simplex([3]) and Simplex((3,)) != Simplex((3,), concentration=[2, 1, 1])
    assert repr(Simplex((2,))) == "Simplex((2,); [1.0, 1.0])"
    space = Simplex((3,), seed=1)
    samples = [space.sample() for _ in range(2)]
    back = space.from_jsonable(space.to_jsonable(samples))
    np.testing.assert_allclose(back, samples, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"shape": 3}, r"shape must be a non-empty tuple/list of positive ints, got 3"),
        ({"shape": (2, 0)}, r"shape must be a non-empty tuple/list of positive ints"),
        ({"shape": (3,), "concentration": [1.0, 1.0]}, r"concentration must hold 3 positive values"),
        ({"shape": (2,), "concentration": [1.0, -1.0]}, r"concentration must hold 2 positive values"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Simplex(**kwargs)


def test_unsupported_space_exception_is_one_class_at_both_paths():
    from rlpolicy.models.catalog import UnsupportedSpaceException as from_catalog
    from rlpolicy.utils.error import EnvError, UnsupportedSpaceException

    assert from_catalog is UnsupportedSpaceException
    assert issubclass(UnsupportedSpaceException, ValueError)
    assert issubclass(EnvError, Exception)
