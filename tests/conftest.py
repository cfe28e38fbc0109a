"""Shared fixtures: one fixture per axis (framework, device), as STYLE.md describes.

Test ids read like ``test_x[torch-fake-gpu-x2]``; select with ``-k "torch and cpu"``.
"""

import importlib.util
import os
import re
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


# With RLPOLICY_TF_V1 set, only tests that use TF are run (the rest have nothing to show in
# a TF1-mode process): see _uses_tf. RLPOLICY_TF_V1_ALL=1 keeps every test.
TF_TOKENS = {"tf", "tf1", "tf2", "tfe", "eager", "keras", "traced", "tensorflow"}
# A test module uses TF if its source imports/mentions TF (tensorflow, try_import_tf, Keras,
# rlpolicy's tf modules, "tf"/"tf2" framework strings, tf1./tf. calls).
_TF_SOURCE = re.compile(
    r"\btensorflow\b|try_import_tf|\bkeras\b|\w_tf\b|\btf_\w|\btf2?\b[\"'.]"
    r"|[\"']tf2?[\"']|\btf1\."
)
_module_uses_tf_cache: dict = {}
# Modules whose every test runs its code in a fresh interpreter (scripts, blocked imports,
# stderr checks): that interpreter is not in TF1 mode, so the TF1-mode pass skips them.
FRESH_PROCESS_MODULES = {
    "test_examples",
    "test_benchmarks_smoke",
    "test_native_stderr",
    "test_import_without_frameworks",
    "test_missing_framework_errors",
}


def _tokens(text: str) -> set:
    return set(re.split(r"[^a-z0-9]+", text.lower()))


def _module_uses_tf(path) -> bool:
    key = str(path)
    if key not in _module_uses_tf_cache:
        try:
            source = open(key, encoding="utf-8").read()
        except OSError:
            source = ""
        _module_uses_tf_cache[key] = bool(_TF_SOURCE.search(source))
    return _module_uses_tf_cache[key]


def _uses_tf(item) -> bool:
    """The TF1-mode pass's selection rule: whether a test uses TF.

    A parametrized test whose parameter ids name a TF flavour (tf, tf2, eager, traced,
    keras, ...) is kept; one whose ids name torch and no TF flavour is dropped (the
    torch half of a framework sweep). Otherwise a test is kept if it is marked
    ``tf_eager_code``, if its name or module name mentions a TF flavour, or if its
    module's source uses TF (see ``_TF_SOURCE``). Tests that check a fresh process
    (name contains ``fresh_process``/``fresh_shell``, or in ``FRESH_PROCESS_MODULES``) are
    dropped: their subprocess is not in TF1 mode, so they show nothing new there.
    """
    name = getattr(item, "originalname", item.name).lower()
    if "fresh_process" in name or "fresh_shell" in name or item.path.stem in FRESH_PROCESS_MODULES:
        return False
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        ids = _tokens(callspec.id) | {v.lower() for v in callspec.params.values() if isinstance(v, str)}
        if ids & TF_TOKENS:
            return True
        if "torch" in ids:
            return False
    if item.get_closest_marker("tf_eager_code") is not None:
        return True
    if (_tokens(name) | _tokens(item.path.stem)) & TF_TOKENS:
        return True
    return _module_uses_tf(item.path)


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


def pytest_collection_modifyitems(config, items):
    # An install without torch or TensorFlow (the CI's variant jobs) skips the
    # framework sweep's cases for the missing one, as the `framework` fixture does.
    for item in items:
        fw = _missing_framework(item)
        if fw is not None:
            pkg = "torch" if fw == "torch" else "tensorflow"
            item.add_marker(pytest.mark.skip(reason=f"framework={fw!r} needs {pkg}, not installed"))
    if TF_V1_MODE and os.environ.get("RLPOLICY_TF_V1_ALL") != "1":
        kept = [item for item in items if _uses_tf(item)]
        dropped = [item for item in items if not _uses_tf(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
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


EAGER_IDS = {"tf2", "tfe", "eager", "traced"}


def pytest_configure(config):
    # A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits
    # SIGINT ignored, and so would every CLI process the tests start: the Ctrl-C tests
    # (tests/test_cli_runs.py) check the handling a terminal user gets, so give the test
    # processes, and through them their children, Python's default SIGINT handling.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers",
        "tf_eager_code: the test's own code runs TF eagerly (with RLPOLICY_TF_V1 it "
        "runs in TF's eager-mode context; tf2/eager/traced parametrizations and tests named "
        "or in a module named *eager* are taken as such without the marker)",
    )


def _is_eager_test(item) -> bool:
    """Whether a test is eager TF test code (see the tf_eager_code marker)."""
    if item.get_closest_marker("tf_eager_code") is not None:
        return True
    module = getattr(getattr(item, "module", None), "__name__", "")
    names = (getattr(item, "originalname", item.name), module)
    if any("eager" in n.lower() for n in names):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    ids = set(callspec.id.split("-")) | {v for v in callspec.params.values() if isinstance(v, str)}
    return bool(ids & EAGER_IDS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With RLPOLICY_TF_V1 set to a mode that turns eager execution off, eager test code
    (see ``_is_eager_test``) runs, fixtures included, in TF's eager-mode context, as RLlib
    1.11's framework_iterator switches eager on for "tf2". Every other test, and so
    every graph-mode ("tf") test, runs in the process's graph mode."""
    if TF_V1_MODE in ("", "tensorshape") or not _is_eager_test(item):
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
