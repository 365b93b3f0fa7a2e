"""Memory pools and stream-ordered allocation: tests/cuda/memory_pools.cu
run unmodified through rcuda against sim servers (kernels of
tests/cuda/runtime_kernels.py)."""
from __future__ import annotations

import pytest

from conftest import CUDA_SOURCES, requires_nvcc, run_program

pytestmark = requires_nvcc

KERNELS = str(CUDA_SOURCES / "runtime_kernels.py")


@pytest.fixture(scope="module")
def program(compile_cuda):
    return compile_cuda("memory_pools.cu")


@pytest.fixture
def server(server_factory):
    return server_factory("--backend", "sim", "--kernels", KERNELS)


def run(program, servers, scenario: str, *args: str):
    result = run_program(program, servers, scenario, *args)
    assert "FAILED" not in result.stdout, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    return result


ONE_GPU = ["basic", "counters", "threshold", "cross_stream", "trim", "created", "plain_free", "reset", "errors"]


@pytest.mark.parametrize("scenario", ONE_GPU)
def test_pools_on_one_gpu(program, server, scenario):
    result = run(program, server, scenario)
    assert f"ok {scenario}" in result.stdout, result.stdout + result.stderr


def test_pools_per_thread_default_stream(compile_cuda, server):
    per_thread = compile_cuda("memory_pools.cu", "--default-stream", "per-thread")
    for scenario in ("basic", "trim"):
        result = run(per_thread, server, scenario)
        assert f"ok {scenario}" in result.stdout, result.stdout + result.stderr


def test_unused_pool_memory_makes_room_when_the_device_is_full(program, server_factory):
    server = server_factory("--backend", "sim", "--kernels", KERNELS, "--memory-limit", str(64 << 20))
    result = run(program, server, "out_of_memory", "64")
    assert "ok out_of_memory" in result.stdout, result.stdout + result.stderr


def test_pool_access_between_two_gpus_of_one_server(program, server_factory):
    server = server_factory("--backend", "sim", "--devices", "2", "--kernels", KERNELS)
    result = run(program, server, "access_same_server")
    assert "ok access same server" in result.stdout, result.stdout + result.stderr


def test_pool_access_refused_across_servers(program, server_factory):
    servers = [server_factory("--backend", "sim", "--kernels", KERNELS) for _ in range(2)]
    result = run(program, servers, "access_across_servers")
    assert "ok access across servers" in result.stdout, result.stdout + result.stderr


def test_pools_on_a_gpu(program, server_factory):
    """The cupy backend: pool blocks are its ordinary allocations, the
    kernels real."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    for scenario in ONE_GPU:
        result = run(program, server, scenario)
        assert f"ok {scenario}" in result.stdout, result.stdout + result.stderr


def test_pool_handle_types_are_what_rcuda_shares_not_what_the_gpu_could(service, monkeypatch):
    """cudaDevAttrMemoryPoolSupportedHandleTypes (and the property) as the
    client answers them from each backend's description: POSIX file
    descriptors where the backend exports memory to other sessions
    (ipc_export, through which pools are shared: the sim), none where it
    cannot (the cupy backend), even when the GPU's driver reports more kinds
    (here POSIX file descriptors and fabric handles, 0x9)."""
    import types

    from rcuda.client.device import RemoteDevice
    from rcuda.device_attributes import attributes_from_properties
    from rcuda.server.backends import base, cupy_backend, sim

    gpu = service.gpu
    described = gpu.getDeviceProperties(0)
    monkeypatch.setattr(gpu, "getDeviceProperties", lambda index: dict(described, memoryPoolSupportedHandleTypes=0x9))
    number = cupy_backend.DEVICE_ATTRIBUTES["cudaDevAttrMemoryPoolSupportedHandleTypes"]
    monkeypatch.setattr(gpu, "deviceGetAttribute", lambda attribute, index: 0x9 if attribute == number else 0)
    on_a_gpu = cupy_backend.CupyDevice(gpu, gpu, 0, None, None)
    assert on_a_gpu.attributes()["cudaDevAttrMemoryPoolSupportedHandleTypes"] == 0x9  # the driver's answer
    simulated = sim.sim_properties(0, 1 << 30)
    for device_class, props, attributes in ((cupy_backend.CupyDevice, on_a_gpu.properties(), on_a_gpu.attributes()),
                                            (sim.SimDevice, simulated, attributes_from_properties(simulated))):
        shares = device_class.ipc_export is not base.Device.ipc_export
        client = types.SimpleNamespace()
        RemoteDevice.describe(client, props, attributes)
        expected = 0x1 if shares else 0  # cudaMemHandleTypePosixFileDescriptor
        assert client.attributes["cudaDevAttrMemoryPoolSupportedHandleTypes"] == expected, device_class
        assert client.properties["memoryPoolSupportedHandleTypes"] == expected, device_class
        assert client.attributes["cudaDevAttrMemoryPoolsSupported"] == 1 == client.properties["memoryPoolsSupported"]


def test_pools_on_a_server_without_memory_ipc(program, server_factory):
    """A server whose GPUs share no memory between sessions (a GPU server's
    case; here the sim made so by tests/cuda/without_memory_ipc.py): pools
    work, their handle types are none, and a pool to share is refused."""
    server = server_factory("--backend", "sim", "--kernels", KERNELS, "--kernels",
                            str(CUDA_SOURCES / "without_memory_ipc.py"))
    result = run(program, server, "basic")
    assert "ok basic" in result.stdout, result.stdout + result.stderr
