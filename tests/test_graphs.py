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


def test_capture_patterns_of_nvidias_samples(program, server):
    """A forked stream destroyed after joining back, nodes added to the
    capturing graph, capture into an existing graph, cudaGraphAddNode."""
    run(program, server, "capture_patterns")


def test_memory_nodes_explicit_and_captured(program, server):
    run(program, server, "memory")


def test_capture_and_graph_misuse_gets_cuda_errors(program, server):
    run(program, server, "misuse")


def test_user_objects_live_as_long_as_their_graphs(program, server):
    run(program, server, "user_objects")


@pytest.mark.parametrize("flags", [(), ("-DCUDA_API_PER_THREAD_DEFAULT_STREAM",)], ids=["legacy", "per_thread"])
def test_driver_api_graphs_and_capture(compile_cuda, server_factory, tmp_path, flags):
    """tests/cuda/driver_graphs.cu, a program linked to libcuda.so.1 only:
    cuGraph* on the same graphs (kernel nodes from a module's CUfunction and
    a library's CUkernel, kernelParams and `extra`, memcpy, memset, host,
    child, event, memory and batch memory operation nodes), uploads,
    cuStreamBeginCapture with a fork and join, relaunches after updates,
    the older ABIs, misuse; built for per-thread default streams too (the
    _ptsz exports)."""
    import subprocess
    from conftest import nvcc_path
    from rcuda.binaries import dropin_dir
    fatbin = tmp_path / "driver_module_kernels.fatbin"
    subprocess.run([nvcc_path(), "-fatbin", "-o", str(fatbin), str(CUDA_SOURCES / "driver_module_kernels.cu")],
                   check=True, capture_output=True, text=True, timeout=300)
    program = compile_cuda("driver_graphs.cu", "-x", "c++", f"-L{dropin_dir()}", "-l:libcuda.so.1", *flags,
                           cudart="none")
    server = server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / "driver_module_kernels.py"))
    dot = tmp_path / "driver_graph.dot"
    result = run_program(program, server, str(fatbin), str(dot))
    assert result.returncode == 0 and "PASSED driver_graphs" in result.stdout, result.stdout + result.stderr[-3000:]
    for section in ("explicit", "batch", "memory", "capture", "any", "misuse"):
        assert f"ok {section}\n" in result.stdout, result.stdout
    assert "digraph" in dot.read_text()
    assert "not supported" not in result.stderr, result.stderr[-3000:]
