"""Shared fixtures: one fixture per axis (framework, device), as STYLE.md describes.

Test ids read like ``test_x[torch-fake-gpu-x2]``; select with ``-k "torch and cpu"``.
"""
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

FRAMEWORKS = ("torch", "tf", "tf2")
DEVICES = {
    "cpu": {"num_gpus": 0},
    "fake-gpu-x2": {"num_gpus": 2, "_fake_gpus": True},
}


def _cuda_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_collection_modifyitems(config, items):
    if os.environ.get("RLPOLICY_SLOW") != "1":
        skip_slow = pytest.mark.skip(reason="slow test; set RLPOLICY_SLOW=1 to run it")
        for item in items:
            if item.get_closest_marker("slow") is not None:
                item.add_marker(skip_slow)
    if _cuda_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a real CUDA device; none visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tf_modules():
    """(tf1, tf) imported once for the session; skips when tensorflow is missing."""
    pytest.importorskip("tensorflow")
    from rlpolicy.utils.framework import try_import_tf

    tf1, tf, _ = try_import_tf()
    return tf1, tf


@pytest.fixture(params=FRAMEWORKS)
def framework(request):
    fw = request.param
    pytest.importorskip("torch" if fw == "torch" else "tensorflow")
    return fw


@pytest.fixture(params=list(DEVICES))
def device_config(request):
    return dict(DEVICES[request.param])


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance (2 CPUs, no dashboard) shared by every Ray test of this
    process (each xdist worker starts its own); shut down at the session's end.
    Skips when Ray is not installed."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # started by someone else: use it, leave it running
        yield ray
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()
