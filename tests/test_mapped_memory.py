"""Mapped (zero-copy) host memory, from tests/cuda/mapped_memory.cu run
unmodified through rcuda on sim servers: kernels read and write
cudaHostAlloc(Mapped) and cudaHostRegister(Mapped) memory through its
pointers; the host sees their writes after a synchronisation, they see the
host's made before their launch (64 MiB in turns, a non-blocking stream
behind a busy legacy stream, host functions, events, copies, threads
writing while others synchronise); flags,
attributes, bad input, two devices, fork and the program's own SIGSEGV
handler.  On the lane (C's link) and on the ZeroMQ link of a --auth
server, and with every call through Python (RCUDA_STATS); the mirror ops by
hand.  (The programs' tests skip without nvcc: compile_cuda says so.)"""
from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import run_program
from program_paths import THROUGH_PYTHON, check_section, run_on_sim
from rcuda.client.state import Runtime
from rcuda.config import ClientConfig, parse_server
from rcuda import wire
from rcuda.errors import CudaError, cudaError

SECTIONS = ["attributes", "alloc_vector_add", "register_vector_add", "rounds_64mib", "nonblocking_stream",
            "host_function_and_events", "copies", "bad_input", "devices", "threads", "forked", "signals"]
#: On the ZeroMQ link and with every call through Python: what takes other paths there.
OTHER_PATHS = ["alloc_vector_add", "register_vector_add", "nonblocking_stream", "host_function_and_events",
               "copies", "bad_input", "devices", "threads"]


def _run(compile_cuda, *sections: str, **options):
    return run_on_sim(compile_cuda, "mapped_memory.cu", "mapped_kernels.py", *sections, **options)


@pytest.fixture(scope="module")
def lane(compile_cuda):
    return _run(compile_cuda)


@pytest.fixture(scope="module")
def zeromq(compile_cuda, tmp_path_factory):
    return _run(compile_cuda, *OTHER_PATHS, auth_root=tmp_path_factory.mktemp("mapped-auth"))


@pytest.fixture(scope="module")
def through_python(compile_cuda):
    """RCUDA_STATS=1: no call is made or recorded in C, launches aside."""
    return _run(compile_cuda, *OTHER_PATHS, env=THROUGH_PYTHON)


@pytest.mark.parametrize("section", SECTIONS)
def test_section(lane, section):
    check_section(lane, section)


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
    check_section(zeromq, section)
    assert zeromq.returncode == 0


@pytest.mark.parametrize("section", OTHER_PATHS)
def test_section_through_python(through_python, section):
    check_section(through_python, section)
    assert through_python.returncode == 0


@pytest.fixture
def device(sim_server):
    """GPU0 of a Python client (no interposer): the mirror ops by hand."""
    rt = Runtime(ClientConfig(servers=[parse_server(sim_server.address)], timeout=10.0))
    yield rt.device(0)
    rt.shutdown()


def test_mirror_ops_by_hand(device):
    """mirror_htod's runs land where they say, a large one streamed on the
    lane; mirror_dtoh reads the device copy now; mirror_zero zeroes."""
    ptr = device.malloc(24 << 20)
    big = np.random.default_rng(3).integers(0, 256, 12 << 20, dtype=np.uint8)
    device.post("mirror_htod", [memoryview(big)], runs=[ptr + 4096, big.size])
    device.post("mirror_htod", [b"abc", b"defgh"], runs=[ptr, 3, ptr + 100, 5])
    reply, frames = device.request("mirror_dtoh", src=ptr, size=108)
    assert b"".join(bytes(f.buffer) for f in frames) == b"abc" + bytes(97) + b"defgh" + bytes(3)
    back = np.zeros(big.size, np.uint8)
    device.request("mirror_dtoh", into=memoryview(back), src=ptr + 4096, size=big.size)
    assert np.array_equal(back, big)
    device.request("mirror_zero", ptr=ptr, size=8192)
    _, frames = device.request("mirror_dtoh", src=ptr, size=8192)
    assert bytes(frames[0].buffer) == bytes(8192)


@pytest.mark.parametrize("fields, frames", [
    ({"runs": [1, 2, 3]}, [b"12"]),            # not pairs
    ({"runs": [0, 4]}, [b"1234"]),             # not the session's memory
    ({"runs": ["x", 4]}, [b"1234"]),           # not integers
])
def test_a_bad_mirror_htod_fails_the_next_call_and_nothing_else(device, fields, frames):
    ptr = device.malloc(64)
    device.post("mirror_htod", frames, **fields)
    with pytest.raises(CudaError) as error:
        device.request("sync")
    assert error.value.status == cudaError.cudaErrorInvalidValue
    device.request("mirror_zero", ptr=ptr, size=64)  # the device goes on


def test_mirror_dtoh_leaves_an_earlier_failure_to_the_programs_next_call(device):
    """mirror_dtoh is rcuda's own bookkeeping: an asynchronous failure waiting
    to be reported stays for the next reply the program gets."""
    ptr = device.malloc(64)
    device.post("memset", ptr=ptr + 4096, value=0, size=8, stream=0)  # outside: fails, unanswered
    reply, _ = device.link.call({"op": "mirror_dtoh", "src": ptr, "size": 8})
    assert reply["err"] == 0
    with pytest.raises(CudaError) as error:
        device.request("sync")
    assert error.value.status == cudaError.cudaErrorInvalidValue


def test_a_part_of_a_mirror_and_a_wait_by_hand(device):
    """mirror_dtoh of a part (offset, length) reads those bytes of the
    device copy, and a part outside the mirror is refused; mirror_wait
    answers once the device's work is done and, like mirror_dtoh, leaves an
    earlier failure to the program's next call."""
    size = 8 << 20
    ptr = device.malloc(size)
    data = np.random.default_rng(5).integers(0, 256, size, dtype=np.uint8)
    device.post("mirror_htod", [memoryview(data)], runs=[ptr, size])
    chunk = wire.MIRROR_CHUNK
    for _ in range(3):  # learnt by the server's view on the way: the bytes are the same each time
        reply, frames = device.request("mirror_dtoh", src=ptr, size=size, offset=4 * chunk, length=2 * chunk)
        assert "runs" not in reply or reply["runs"] == 0
        if "runs" not in reply:
            assert b"".join(bytes(f.buffer) for f in frames) == data[4 * chunk:6 * chunk].tobytes()
    with pytest.raises(CudaError) as error:
        device.request("mirror_dtoh", src=ptr, size=size, offset=size - chunk, length=2 * chunk)
    assert error.value.status == cudaError.cudaErrorInvalidValue
    device.post("memset", ptr=ptr + size + 4096, value=0, size=8, stream=0)  # outside: fails, unanswered
    reply, _ = device.link.call({"op": "mirror_wait"})
    assert reply["err"] == 0
    with pytest.raises(CudaError) as error:
        device.request("sync")
    assert error.value.status == cudaError.cudaErrorInvalidValue


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
