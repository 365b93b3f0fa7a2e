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
