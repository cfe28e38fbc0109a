"""RolloutWorker.sample() returns, on fixed seeds, exactly the batches recorded in
``golden/sampling_<case>.npz`` before the issue-26 speed work: the same columns,
dtypes and values (float32 tolerance), and the same callback call sequence.

The fixtures pin torch's random streams (action sampling): with another torch
minor version than the one that wrote them the comparison is skipped."""

import os

import numpy as np
import pytest
from golden_sampling_cases import CASES, run_case

torch = pytest.importorskip("torch")  # (the fixtures were sampled by torch policies)

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


@pytest.fixture(params=sorted(CASES))
def case(request):
    return request.param


def test_sample_matches_golden_batches(case):
    path = os.path.join(GOLDEN, f"sampling_{case}.npz")
    with np.load(path) as data:
        golden = {k: data[k] for k in data.files}
    recorded = str(golden.pop("torch_version"))
    if _minor(recorded) != _minor(torch.__version__):
        pytest.skip(f"fixtures written with torch {recorded}, running {torch.__version__}")
    torch.set_num_threads(1)
    got = run_case(case)
    assert sorted(got) == sorted(golden)
    assert got["calls"].tolist() == golden["calls"].tolist()
    for key, want in golden.items():
        have = got[key]
        assert have.dtype == want.dtype, (key, have.dtype, want.dtype)
        assert have.shape == want.shape, (key, have.shape, want.shape)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(have, want, err_msg=key)
