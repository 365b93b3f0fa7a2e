"""CUDA graphs and stream capture: tests/cuda/graphs.cu run unmodified
through rcuda against a sim server."""
from __future__ import annotations

import pytest

from conftest import CUDA_SOURCES, requires_nvcc, run_program

pytestmark = requires_nvcc

KERNELS = str(CUDA_SOURCES / "graph_kernels.py")


@pytest.fixture(scope="module")
def program(compile_cuda):
    return compile_cuda("graphs.cu")


@pytest.fixture(params=["sim", "cupy"])
def server(request, server_factory):
    """A sim server, and a GPU server where there is a GPU (its graphs are
    the driver's own: server/graphs.py)."""
    if request.param == "cupy":
        from test_backends import cupy_unavailable
        if reason := cupy_unavailable():
            pytest.skip(reason)
        return server_factory("--backend", "cupy", "--devices", "1")
    return server_factory("--backend", "sim", "--kernels", KERNELS)


def run(program, server, mode: str, *args: str):
    result = run_program(program, server, mode, *args)
    assert f"ok {mode}" in result.stdout and result.returncode == 0, result.stdout + result.stderr
    return result


def test_explicit_graph_with_kernel_memcpy_memset_host_and_child_nodes(program, server, tmp_path):
    """Built by hand, launched three times (host memory read at each launch,
    the download landed before the host node), cloned, dumped as DOT,
    updated per node and whole, a node disabled, nested as a child."""
    dot = tmp_path / "graph.dot"
    run(program, server, "explicit", str(dot))
    assert "digraph" in dot.read_text()


def test_stream_capture_with_fork_and_join(program, server):
    run(program, server, "capture")


def test_memory_nodes_explicit_and_captured(program, server):
    run(program, server, "memory")


def test_capture_and_graph_misuse_gets_cuda_errors(program, server):
    run(program, server, "misuse")


def test_user_objects_live_as_long_as_their_graphs(program, server):
    run(program, server, "user_objects")
