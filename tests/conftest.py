"""Shared fixtures: one fixture per axis (framework, device), as STYLE.md describes.

Test ids read like ``test_x[torch-fake-gpu-x2]``; select with ``-k "torch and cpu"``.
"""

import importlib.util
import os
import signal

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# RLPOLICY_TF_V1 runs the suite in a process whose TF behaves like TF1 code (and RLlib's
# own try_import_tf) leave it: "1" / "behavior" calls tf.compat.v1.disable_v2_behavior(),
# "tensorshape" only disable_v2_tensorshape(), "eager" only disable_eager_execution().
# Done here, before any test module imports TF.
TF_V1_MODES = {
    "1": "disable_v2_behavior",
    "behavior": "disable_v2_behavior",
    "tensorshape": "disable_v2_tensorshape",
    "eager": "disable_eager_execution",
}
TF_V1_MODE = os.environ.get("RLPOLICY_TF_V1", "").strip().lower()
if TF_V1_MODE in ("", "0", "false"):
    TF_V1_MODE = ""
elif TF_V1_MODE not in TF_V1_MODES:
    raise ValueError(f"RLPOLICY_TF_V1={TF_V1_MODE!r}: expected one of {sorted(TF_V1_MODES)} or 0")
else:
    import tensorflow as _tf

    getattr(_tf.compat.v1, TF_V1_MODES[TF_V1_MODE])()

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


# The TF1-mode pass (RLPOLICY_TF_V1 set) runs exactly the tests marked `tf`
# (RLPOLICY_TF_V1_ALL=1 keeps every test). Outside it, tests/_tf_marker_guard.py fails any
# test that runs TensorFlow ops without that marker, so none can silently miss the pass.
# A test with a parameter valued "tf" / "tf2" (a framework choice: framework, fw, src_fw,
# ...) is marked `tf` here ("tf2" also `tf_eager_code`); every other TF test carries the
# marker itself.
TF_FRAMEWORK_VALUES = {"tf": ("tf",), "tf2": ("tf", "tf_eager_code")}

import _tf_marker_guard  # noqa: E402  (tests/ is on sys.path for conftest)

_tf_marker_guard.activate(tf1_mode=bool(TF_V1_MODE))


def _framework_installed(fw: str) -> bool:
    """Whether the package behind a framework name (torch, tf, tf2) can be imported."""
    return importlib.util.find_spec("torch" if fw == "torch" else "tensorflow") is not None


def _missing_framework(item):
    """The framework a test is parametrized on (a ``framework`` or ``fw`` parameter of
    torch / tf / tf2) when that framework is not installed, else None."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for key in ("framework", "fw"):
        fw = callspec.params.get(key)
        if isinstance(fw, str) and fw in FRAMEWORKS and not _framework_installed(fw):
            return fw
    return None


def _framework_marks(item):
    """The marks a parameter valued "tf" or "tf2" implies (a framework choice, whatever the
    parameter is called: framework, fw, src_fw, trained, ...)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return ()
    marks = set()
    for value in callspec.params.values():
        if isinstance(value, str) and value in TF_FRAMEWORK_VALUES:
            marks.update(TF_FRAMEWORK_VALUES[value])
    return sorted(marks)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in _framework_marks(item):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
        # Eager TF test code is TF test code: it belongs to the TF1-mode pass too.
        if item.get_closest_marker("tf_eager_code") and item.get_closest_marker("tf") is None:
            item.add_marker("tf")
        # An install without torch or TensorFlow (the CI's variant jobs) skips the
        # framework sweep's cases for the missing one, as the `framework` fixture does.
        fw = _missing_framework(item)
        if fw is not None:
            pkg = "torch" if fw == "torch" else "tensorflow"
            item.add_marker(pytest.mark.skip(reason=f"framework={fw!r} needs {pkg}, not installed"))
    if TF_V1_MODE and os.environ.get("RLPOLICY_TF_V1_ALL") != "1":
        kept = [item for item in items if item.get_closest_marker("tf") is not None]
        dropped = [item for item in items if item.get_closest_marker("tf") is None]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    if _cuda_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a real CUDA device; none visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    # A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits
    # SIGINT ignored, and so would every CLI process the tests start: the Ctrl-C tests
    # (tests/test_cli_runs.py) check the handling a terminal user gets, so give the test
    # processes, and through them their children, Python's default SIGINT handling.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not config.pluginmanager.is_registered(_tf_marker_guard):
        config.pluginmanager.register(_tf_marker_guard, "rlpolicy-tf-marker-guard")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With RLPOLICY_TF_V1 set to a mode that turns eager execution off, eager test code
    (marked ``tf_eager_code``; "tf2" framework cases are marked so) runs, fixtures
    included, in TF's eager-mode context, as RLlib
    1.11's framework_iterator switches eager on for "tf2". Every other test, and so
    every graph-mode ("tf") test, runs in the process's graph mode."""
    if TF_V1_MODE in ("", "tensorshape") or item.get_closest_marker("tf_eager_code") is None:
        yield
        return
    from tensorflow.python.eager import context

    with context.eager_mode():
        yield


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
