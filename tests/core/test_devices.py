"""plan_devices: every branch of RLlib 1.11's TorchPolicy device selection."""

import dataclasses
import sys
import types

import pytest

from rlpolicy._core import devices as dv
from rlpolicy._core.devices import DevicePlan, detect_ray_context, plan_devices

BASE = {"num_gpus": 0, "num_gpus_per_worker": 0, "_fake_gpus": False, "worker_index": 0}


def cfg(**kw):
    return {**BASE, **kw}


@pytest.mark.parametrize(
    "config, visible, ray_mode, expected",
    [
        # num_gpus=0 -> one CPU tower, even with GPUs visible.
        (cfg(), 4, None, ("cpu",)),
        # Fake GPUs: ceil(num_gpus) CPU towers, GPUs ignored.
        (cfg(num_gpus=2, _fake_gpus=True), 4, None, ("cpu", "cpu")),
        (cfg(num_gpus=1.5, _fake_gpus=True), 0, None, ("cpu", "cpu")),
        (cfg(num_gpus=0.3, _fake_gpus=True), 0, None, ("cpu",)),
        # No visible GPU: CPU towers, ceil(num_gpus) of them (RLlib 1.11).
        (cfg(num_gpus=2), 0, None, ("cpu", "cpu")),
        (cfg(num_gpus=1), [], None, ("cpu",)),
        # Real GPUs: one tower per GPU up to num_gpus.
        (cfg(num_gpus=1), 4, None, ("cuda:0",)),
        (cfg(num_gpus=2), 4, None, ("cuda:0", "cuda:1")),
        (cfg(num_gpus=3), 2, None, ("cuda:0", "cuda:1")),
        # Fractional GPU: index 0 < 0.5 -> one tower.
        (cfg(num_gpus=0.5), 2, None, ("cuda:0",)),
        # Ray local mode forces CPU unless GPUs are faked.
        (cfg(num_gpus=2), 2, "local", ("cpu",)),
        (cfg(num_gpus=2, _fake_gpus=True), 2, "local", ("cpu", "cpu")),
        # A Ray driver behaves like no Ray.
        (cfg(num_gpus=1), 1, "driver", ("cuda:0",)),
        # Remote workers (worker_index > 0) read num_gpus_per_worker.
        (cfg(num_gpus=2, num_gpus_per_worker=0, worker_index=3), 2, None, ("cpu",)),
        (cfg(num_gpus=0, num_gpus_per_worker=1, worker_index=1), 2, None, ("cuda:0",)),
        (cfg(num_gpus=0, num_gpus_per_worker=2, worker_index=1, _fake_gpus=True), 0, None, ("cpu", "cpu")),
    ],
)
def test_plan_devices_branches(config, visible, ray_mode, expected):
    plan = plan_devices(config, visible, ray_mode=ray_mode)
    assert plan.devices == expected
    assert plan.num_towers == len(expected)
    assert plan.on_gpu == expected[0].startswith("cuda")
    assert plan.fake == bool(config["_fake_gpus"])


def test_plan_reports_num_gpus_and_ids():
    plan = plan_devices(cfg(num_gpus=2), [5, 7, 9])
    assert plan.num_gpus == 2 and plan.gpu_ids == (5, 7)
    assert plan_devices(cfg(num_gpus=2), 2, ray_mode="local").num_gpus == 0
    assert plan_devices(cfg(num_gpus_per_worker=1.0, worker_index=2), 0).num_gpus == 1.0


def test_ray_worker_uses_assigned_gpu_ids():
    # Ray assigned physical GPUs 3 and 6; torch sees them as cuda:0, cuda:1.
    plan = plan_devices(cfg(num_gpus_per_worker=2, worker_index=1), 8, ray_mode="worker", ray_gpu_ids=[3, 6])
    assert plan.devices == ("cuda:0", "cuda:1")
    assert plan.gpu_ids == (3, 6)


def test_ray_worker_ids_ignored_on_cpu_paths():
    # Fake GPUs or no visible GPU: the Ray ids are never consulted.
    plan = plan_devices(
        cfg(num_gpus_per_worker=2, worker_index=1, _fake_gpus=True), 8, ray_mode="worker", ray_gpu_ids=[]
    )
    assert plan.devices == ("cpu", "cpu")


@pytest.mark.parametrize(
    "config, visible, kwargs, match",
    [
        (
            cfg(num_gpus=2, worker_index=0),
            2,
            {"ray_mode": "worker", "ray_gpu_ids": [0]},
            r"not able to find enough GPU IDs! Found \[0\], but num_gpus=2",
        ),
        (cfg(num_gpus=1), 1, {"ray_mode": "worker", "ray_gpu_ids": None}, r"Found \[\], but num_gpus=1"),
        (cfg(num_gpus=-1), 0, {}, r"config\['num_gpus'\]=-1 is invalid"),
        (cfg(num_gpus="2"), 0, {}, r"config\['num_gpus'\]='2' is invalid"),
        (cfg(num_gpus=True), 0, {}, r"config\['num_gpus'\]=True is invalid"),
        (cfg(num_gpus_per_worker=float("nan")), 0, {}, r"config\['num_gpus_per_worker'\]=nan"),
        (cfg(worker_index=-1), 0, {}, r"config\['worker_index'\]=-1 is invalid"),
        (cfg(), 0, {"ray_mode": "cluster"}, r"ray_mode='cluster' is unknown"),
    ],
)
def test_plan_devices_errors(config, visible, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_devices(config, visible, **kwargs)


def test_plan_defaults_for_missing_keys():
    assert plan_devices({}, 3).devices == ("cpu",)
    assert plan_devices({"num_gpus": None}, 3).devices == ("cpu",)


def test_device_plan_is_frozen():
    plan = DevicePlan(devices=("cpu",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.devices = ("cuda:0",)


def _fake_ray(monkeypatch, initialized, mode, local_mode=None, gpu_ids=()):
    worker_mod = types.SimpleNamespace(global_worker=types.SimpleNamespace(mode=mode), WORKER_MODE=1)
    if local_mode is not None:
        worker_mod.LOCAL_MODE = local_mode
    ray = types.SimpleNamespace(
        is_initialized=lambda: initialized,
        _private=types.SimpleNamespace(worker=worker_mod),
        get_gpu_ids=lambda: list(gpu_ids),
    )
    monkeypatch.setitem(sys.modules, "ray", ray)


def test_detect_ray_context_without_ray(monkeypatch):
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    assert detect_ray_context() == (dv.RAY_NONE, None)


@pytest.mark.parametrize(
    "initialized, mode, local_mode, expected",
    [
        (False, 1, None, (None, None)),
        (True, 0, None, ("driver", None)),
        (True, 1, None, ("worker", [2])),
        (True, 2, 2, ("local", None)),
    ],
)
def test_detect_ray_context_modes(monkeypatch, initialized, mode, local_mode, expected):
    _fake_ray(monkeypatch, initialized, mode, local_mode, gpu_ids=[2])
    assert detect_ray_context() == expected
