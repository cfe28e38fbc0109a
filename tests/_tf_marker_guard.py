"""The `tf` marker's guard: a test that runs TensorFlow in the test process must be
marked ``tf``, else it fails and says so. The TF1-mode pass (``RLPOLICY_TF_V1=1``) runs
exactly the tests marked ``tf``, so an unmarked TF test would silently miss it.

How a test "runs TensorFlow" is observed, not guessed: once ``tensorflow`` is imported in
the process, every op it builds into a graph (``Graph._create_op_internal``), every op it
executes eagerly (the ``pywrap_tfe`` execute entry points that generated ops and functions
call) and every session run (``TF_SessionRun_wrapper``, ``TF_SessionRunCallable``) bumps
one counter. A test used TF when the counter moved between the start of its setup and the
end of its call, not counting the set-up of fixtures shared beyond the test (module, class
or session scope): which test happens to build a shared fixture depends on the order the
tests run in, so that work is nobody's; what a test then does with the fixture's policy
(compute actions, learn, read weights through a session) is counted. Importing TF alone
does not count.

``RLPOLICY_TF_GUARD``: ``fail`` (default; outside the TF1-mode pass), ``off``, or
``record:PATH``: append one JSON line per test to PATH (nodeid, marked, used) instead of
failing; used to audit the markers (e.g. tests marked ``tf`` that use none).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys

import pytest

_count = [0]
_installed = [False]
_shared_setup = {"depth": 0, "start": 0, "excluded": 0}


def _counting(fn):
    def wrapper(*args, **kwargs):
        _count[0] += 1
        return fn(*args, **kwargs)

    wrapper.__wrapped__ = fn
    return wrapper


def _install_counters() -> bool:
    """Wraps TF's op-building and op-executing entry points (once per process)."""
    if _installed[0]:
        return True
    try:
        from tensorflow.python import pywrap_tfe
        from tensorflow.python.framework import ops
    except Exception:  # not installed / layout changed: no guard
        return False
    for name in ("TFE_Py_FastPathExecute", "TFE_Py_Execute", "TFE_Py_ExecuteCancelable"):
        if hasattr(pywrap_tfe, name):
            setattr(pywrap_tfe, name, _counting(getattr(pywrap_tfe, name)))
    ops.Graph._create_op_internal = _counting(ops.Graph._create_op_internal)
    try:
        from tensorflow.python.client import session

        for name in ("TF_SessionRun_wrapper", "TF_SessionRunCallable"):
            if hasattr(session.tf_session, name):
                setattr(session.tf_session, name, _counting(getattr(session.tf_session, name)))
    except Exception:  # layout changed: ops are still counted
        pass
    _installed[0] = True
    return True


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    """Installs the counters as soon as ``tensorflow`` finishes importing, wherever that
    happens (a test module at collection, a fixture, a function-level import)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_install(module):
            exec_module(module)
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            _install_counters()

        loader.exec_module = exec_and_install
        return spec


def guard_mode() -> str:
    return os.environ.get("RLPOLICY_TF_GUARD", "fail").strip() or "fail"


def activate(tf1_mode: bool) -> None:
    """Called from conftest at import. In the TF1-mode pass the selection *is* the marker,
    so there is nothing to guard."""
    if tf1_mode or guard_mode() == "off":
        return
    if "tensorflow" in sys.modules:
        _install_counters()
    else:
        sys.meta_path.insert(0, _InstallAfterImport())


def _marked(item) -> bool:
    return item.get_closest_marker("tf") is not None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    """Keeps the TF work of setting up a fixture shared beyond one test out of the count."""
    shared = fixturedef.scope != "function"
    if shared:
        if _shared_setup["depth"] == 0:
            _shared_setup["start"] = _count[0]
        _shared_setup["depth"] += 1
    try:
        return (yield)
    finally:
        if shared:
            _shared_setup["depth"] -= 1
            if _shared_setup["depth"] == 0:
                _shared_setup["excluded"] += _count[0] - _shared_setup["start"]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    item._tf_guard_start = (_count[0], _shared_setup["excluded"])
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    result = yield
    start = getattr(item, "_tf_guard_start", None)
    mode = guard_mode()
    if start is None or mode == "off":
        return result
    used = (_count[0] - start[0]) - (_shared_setup["excluded"] - start[1]) > 0
    if mode.startswith("record:"):
        with open(mode[len("record:") :], "a", encoding="utf-8") as out:
            out.write(json.dumps({"nodeid": item.nodeid, "marked": _marked(item), "used": used}) + "\n")
        return result
    if used and not _marked(item):
        pytest.fail(
            f"{item.nodeid} ran TensorFlow ops but is not marked `tf`, so the TF1-mode pass "
            "(RLPOLICY_TF_V1=1) would skip it: add @pytest.mark.tf (or the module's pytestmark), "
            "or parametrize it with framework='tf'/'tf2'",
            pytrace=False,
        )
    return result
