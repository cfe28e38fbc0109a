"""TorchPolicy towers on real CUDA devices (skipped cleanly without CUDA)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_pg_policies import ACT, OBS, PG, SGDPG, pg_batch  # noqa: E402

from rlpolicy.policy.sample_batch import SampleBatch  # noqa: E402

NUM_CUDA = torch.cuda.device_count() if torch.cuda.is_available() else 0

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(NUM_CUDA == 0, reason="needs a real CUDA device; none visible"),
]

BASE = {"lr": 0.05, "model": {"fcnet_hiddens": [16]}}


def make(cls=SGDPG, seed=0, **config):
    torch.manual_seed(seed)
    return cls(OBS, ACT, {**BASE, **config})


def assert_weights_close(a, b, rtol=1e-4, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


@pytest.fixture(params=[1, 2], ids=["cuda-x1", "cuda-x2"])
def num_gpus(request):
    if request.param > NUM_CUDA:
        pytest.skip(f"needs {request.param} CUDA devices; {NUM_CUDA} visible")
    return request.param


def test_towers_live_on_cuda(num_gpus):
    policy = make(num_gpus=num_gpus)
    assert [str(d) for d in policy.devices] == [f"cuda:{i}" for i in range(num_gpus)]
    assert policy.model is policy.model_gpu_towers[0]
    for i, tower in enumerate(policy.model_gpu_towers):
        assert all(p.device == torch.device(f"cuda:{i}") for p in tower.parameters())
    actions, _, extra = policy.compute_actions(pg_batch(5)[SampleBatch.OBS], explore=False)
    np.testing.assert_array_equal(actions, extra[SampleBatch.ACTION_DIST_INPUTS].argmax(-1))


def test_cuda_tower_step_equals_cpu_step(num_gpus):
    batch = pg_batch(16, seed=3)
    cpu = make(sgd_minibatch_size=16)
    gpu = make(seed=5, sgd_minibatch_size=16, num_gpus=num_gpus)
    gpu.set_weights(cpu.get_weights())
    assert cpu.load_batch_into_buffer(batch.copy()) == 16
    assert gpu.load_batch_into_buffer(batch.copy()) == 16 // num_gpus
    loaded = gpu._tower_buffers.loaded(0)
    assert [b[SampleBatch.OBS].device.type for b in loaded] == ["cuda"] * num_gpus
    cpu.learn_on_loaded_batch(0)
    fetches = gpu.learn_on_loaded_batch(0)
    assert set(fetches) == {f"tower_{i}" for i in range(num_gpus)} | {"learner_stats"}
    assert_weights_close(cpu.get_weights(), gpu.get_weights())
    stats = gpu.get_tower_stats("pg_loss")
    assert len(stats) == num_gpus and all(s.device == gpu.device for s in stats)


def test_cuda_learn_on_batch_and_state_round_trip():
    cpu, gpu = make(PG), make(PG, seed=4, num_gpus=1)
    gpu.set_state(cpu.get_state())
    for i in range(2):
        cpu.learn_on_batch(pg_batch(8, seed=i))
        gpu.learn_on_batch(pg_batch(8, seed=i))
    assert_weights_close(cpu.get_weights(), gpu.get_weights())
    restored = make(PG, seed=9, num_gpus=1)
    restored.set_state(gpu.get_state())
    for p in (gpu, restored):
        p.learn_on_batch(pg_batch(8, seed=7))
    assert_weights_close(gpu.get_weights(), restored.get_weights(), rtol=1e-6, atol=1e-7)


def test_cuda_export_torchscript(tmp_path):
    policy = make(num_gpus=1)
    policy.export_model(str(tmp_path))
    loaded = torch.jit.load(str(tmp_path / "model.pt"), map_location="cuda:0")
    obs = torch.from_numpy(pg_batch(3)[SampleBatch.OBS]).cuda()
    with torch.no_grad():
        out, _ = loaded(
            {"obs": obs}, [torch.ones(3, device="cuda:0")], torch.ones(3, dtype=torch.int32, device="cuda:0")
        )
        ref, _ = policy.model({"obs": obs}, [], torch.ones(3, dtype=torch.int32))
    np.testing.assert_allclose(out.cpu().numpy(), ref.cpu().numpy(), rtol=1e-5, atol=1e-6)


def test_checkpoint_written_on_cuda_loads_on_cpu(tmp_path):
    from rlpolicy.policy.policy import Policy

    gpu = make(PG, num_gpus=1)
    gpu.learn_on_batch(pg_batch(8, seed=1))  # optimizer state on the GPU too
    gpu.export_checkpoint(str(tmp_path))
    restored = Policy.from_checkpoint(str(tmp_path), {"num_gpus": 0}, trusted="imported")
    assert str(restored.device) == "cpu"
    assert all(t.device.type == "cpu" for t in restored.model.state_dict().values())
    assert_weights_close(gpu.get_weights(), restored.get_weights(), rtol=0, atol=0)
    for p in (gpu, restored):  # the next Adam step agrees too
        p.learn_on_batch(pg_batch(8, seed=2))
    assert_weights_close(gpu.get_weights(), restored.get_weights())
