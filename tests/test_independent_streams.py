"""Streams stay independent end to end (the client's link, the server's GPU
thread, the sim's model): a real program's thread waiting on a stream
behind a long kernel holds up none of another thread's calls on that GPU."""
from __future__ import annotations

import pytest

from auth_helpers import make_keys
from conftest import CUDA_SOURCES, requires_nvcc, run_program

pytestmark = requires_nvcc
KERNELS = str(CUDA_SOURCES / "stream_kernels.py")


@pytest.mark.parametrize("link", ["lane", "sealed-lane", "socket"])
def test_a_thread_waiting_on_a_busy_stream_holds_up_no_other_thread(compile_cuda, server_factory, tmp_path, link):
    """The program checks it itself: the other thread's idle-stream sync,
    copies on a third stream, queries and events all finish before the
    waiter's 2 s kernel does (room enough on a loaded machine), and the
    kernel after cudaStreamWaitEvent sees the long kernel's result.  The
    sealed lane and the socket are a --auth server's."""
    env = {}
    args = ["--backend", "sim", "--kernels", KERNELS]
    if link != "lane":
        keys = make_keys(tmp_path)
        args += ["--auth", str(keys.server_dir)]
        env = {**keys.env(), "RCUDA_LINK": "lane" if link == "sealed-lane" else "socket"}
    server = server_factory(*args)
    result = run_program(compile_cuda("independent_streams.cu"), server, "2000", env_extra=env)
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr[-3000:]


def test_on_a_gpu_a_thread_waiting_on_a_busy_stream_holds_up_no_other_thread(compile_cuda, server_factory):
    """The same on the cupy backend: the server waits for the GPU with events
    (polled, then a waiter thread), never in its serving thread."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    result = run_program(compile_cuda("independent_streams.cu"), server, "2000")
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr[-3000:]
