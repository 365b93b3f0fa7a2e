"""Mapped (zero-copy) host memory, from tests/cuda/mapped_memory.cu run
unmodified through rcuda on sim servers: kernels read and write
cudaHostAlloc(Mapped) and cudaHostRegister(Mapped) memory through its
pointers; the host sees their writes after a synchronisation, they see the
host's made before their launch (64 MiB in turns, a non-blocking stream
behind a busy legacy stream, host functions, events, copies); flags,
attributes, bad input, two devices, fork and the program's own SIGSEGV
handler.  On the lane (C's link) and on the ZeroMQ link of a --auth
server, and with every call through Python (RCUDA_STATS)."""
from __future__ import annotations

import re

import pytest

from auth_helpers import make_keys
from conftest import CUDA_SOURCES, requires_nvcc, run_program, start_server

pytestmark = requires_nvcc
KERNELS = str(CUDA_SOURCES / "mapped_kernels.py")

SECTIONS = ["attributes", "alloc_vector_add", "register_vector_add", "rounds_64mib", "nonblocking_stream",
            "host_function_and_events", "copies", "bad_input", "devices", "forked", "signals"]
#: On the ZeroMQ link and with every call through Python: what takes other paths there.
OTHER_PATHS = ["alloc_vector_add", "register_vector_add", "nonblocking_stream", "host_function_and_events",
               "copies", "bad_input", "devices"]


def _run(compile_cuda, *sections: str, auth_root=None, env: dict | None = None):
    args = ["--backend", "sim", "--devices", "2", "--kernels", KERNELS]
    env = dict(env or {})
    if auth_root is not None:
        keys = make_keys(auth_root)
        args += ["--auth", str(keys.server_dir)]
        env.update(keys.env())
    server = start_server(*args)
    try:
        return run_program(compile_cuda("mapped_memory.cu"), server, *sections, env_extra=env, timeout=300)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def lane(compile_cuda):
    return _run(compile_cuda)


@pytest.fixture(scope="module")
def zeromq(compile_cuda, tmp_path_factory):
    return _run(compile_cuda, *OTHER_PATHS, auth_root=tmp_path_factory.mktemp("mapped-auth"))


@pytest.fixture(scope="module")
def through_python(compile_cuda):
    """RCUDA_STATS=1: no call is made or recorded in C, launches aside."""
    return _run(compile_cuda, *OTHER_PATHS, env={"RCUDA_STATS": "1"})


@pytest.mark.parametrize("section", SECTIONS)
def test_section(lane, section):
    assert "FAILED" not in lane.stdout, lane.stdout + lane.stderr[-3000:]
    assert f"ok {section}" in lane.stdout, lane.stdout + lane.stderr[-3000:]


def test_whole_program_passes_and_exits_cleanly(lane):
    """It ends with mapped memory still allocated, holding unsent writes."""
    assert lane.returncode == 0 and "PASSED mapped_memory" in lane.stdout, lane.stdout + lane.stderr[-3000:]
    assert "Traceback" not in lane.stderr and "internal error" not in lane.stderr, lane.stderr[-3000:]


def test_64mib_rounds_report_their_times(lane):
    rounds = re.findall(r"time round (\d) .*?launch \+ cudaDeviceSynchronize ([\d.]+) ms", lane.stdout)
    assert [r for r, _ in rounds] == ["1", "2", "3", "4"], lane.stdout


@pytest.mark.parametrize("section", OTHER_PATHS)
def test_section_on_the_zeromq_link(zeromq, section):
    """Against a --auth server the link is Python's: it sends the dirty
    pages before each message and downloads the mirrors itself, ahead of a
    host function's gate."""
    assert "FAILED" not in zeromq.stdout, zeromq.stdout + zeromq.stderr[-3000:]
    assert f"ok {section}" in zeromq.stdout, zeromq.stdout + zeromq.stderr[-3000:]
    assert zeromq.returncode == 0


@pytest.mark.parametrize("section", OTHER_PATHS)
def test_section_through_python(through_python, section):
    assert "FAILED" not in through_python.stdout, through_python.stdout + through_python.stderr[-3000:]
    assert f"ok {section}" in through_python.stdout, through_python.stdout + through_python.stderr[-3000:]
    assert through_python.returncode == 0


def test_on_a_gpu(compile_cuda, server_factory):
    """The cupy backend: the device copies are written and read on a stream
    of their own, through pinned staging."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    sections = [s for s in SECTIONS if s != "devices"]
    result = run_program(compile_cuda("mapped_memory.cu"), server, *sections, timeout=300)
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr[-3000:]
