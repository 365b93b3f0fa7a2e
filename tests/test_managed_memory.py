"""Managed memory, from tests/cuda/managed_memory.cu run unmodified through
rcuda on sim servers: cudaMallocManaged and __managed__ variables used by
the host and by kernels through one pointer; the host sees kernel writes
after stream and device synchronisations, events, queries and in host
functions, kernels see host writes made between launches, a host thread
touching managed memory while a kernel writes it waits for the kernel and
keeps both sides' writes; threads, two
devices, fork; thousands of small allocations; stream attachment, prefetches, advice and range attributes;
bad input.  On the lane (C's link), on the ZeroMQ link of a --auth server,
and with every call through Python (RCUDA_STATS).  (The programs' tests
skip without nvcc: compile_cuda says so.)"""
from __future__ import annotations

import re
import urllib.request

import pytest

from conftest import CUDA_SOURCES, run_program, wait_for
from program_paths import THROUGH_PYTHON, check_section, run_on_sim

SECTIONS = ["attributes", "vector_add", "host_writes_between_launches", "synchronisations", "threads",
            "managed_variables", "advice_and_prefetch", "many_small", "copies", "devices", "forked", "bad_input", "changed_chunks",
            "touch_64mib", "host_waits_for_kernels", "system_atomics", "touch_only_what_is_read", "prefetch_to_host",
            "system_call_after_sync"]
#: On the ZeroMQ link and with every call through Python: what takes other paths there.
OTHER_PATHS = ["vector_add", "host_writes_between_launches", "synchronisations", "threads", "managed_variables",
               "many_small", "copies", "devices", "changed_chunks"]
#: Through Python, the lane is still C's: the host waits for kernels there too.
THROUGH_PYTHON_PATHS = OTHER_PATHS + ["host_waits_for_kernels", "system_atomics"]


def _run(compile_cuda, *sections: str, **options):
    return run_on_sim(compile_cuda, "managed_memory.cu", "managed_kernels.py", *sections, **options)


@pytest.fixture(scope="module")
def lane(compile_cuda):
    return _run(compile_cuda)


#: RCUDA_MANAGED_ON_TOUCH=1: all but a system call given managed memory the
#: host has not touched since a synchronisation (EFAULT there, docs/design.md).
ON_TOUCH_SECTIONS = [s for s in SECTIONS if s != "system_call_after_sync"]


@pytest.fixture(scope="module")
def on_touch(compile_cuda):
    return _run(compile_cuda, *ON_TOUCH_SECTIONS, env={"RCUDA_MANAGED_ON_TOUCH": "1"})


@pytest.fixture(scope="module")
def zeromq(compile_cuda, tmp_path_factory):
    return _run(compile_cuda, *OTHER_PATHS, auth_root=tmp_path_factory.mktemp("managed-auth"))


@pytest.fixture(scope="module")
def through_python(compile_cuda):
    """RCUDA_STATS=1: no call is made or recorded in C, launches aside."""
    return _run(compile_cuda, *THROUGH_PYTHON_PATHS, env=THROUGH_PYTHON)


@pytest.mark.parametrize("section", SECTIONS)
def test_section(lane, section):
    check_section(lane, section)


@pytest.mark.parametrize("section", ON_TOUCH_SECTIONS)
def test_section_with_managed_memory_on_touch(on_touch, section):
    check_section(on_touch, section)
    assert on_touch.returncode == 0


def test_whole_program_passes_and_exits_cleanly(lane):
    """It ends with __managed__ variables still mirrored."""
    assert lane.returncode == 0 and "PASSED managed_memory" in lane.stdout, lane.stdout + lane.stderr[-3000:]
    assert "Traceback" not in lane.stderr and "internal error" not in lane.stderr, lane.stderr[-3000:]


def test_64mib_touch_reports_its_times(lane):
    assert re.search(r"time touch_64mib managed [\d.]+ ms memcpy [\d.]+ ms", lane.stdout), lane.stdout


@pytest.mark.parametrize("section", OTHER_PATHS)
def test_section_on_the_zeromq_link(zeromq, section):
    check_section(zeromq, section)
    assert zeromq.returncode == 0


def test_host_waits_for_kernels_on_a_sealed_lane(compile_cuda, tmp_path):
    """A --auth server's sealed lanes are C's links too: the settler waits
    for the GPU and refreshes through them."""
    sections = ["host_waits_for_kernels", "system_atomics", "touch_only_what_is_read", "forked"]
    result = _run(compile_cuda, *sections, auth_root=tmp_path, env={"RCUDA_LINK": "lane"})
    check_section(result, *sections)
    assert result.returncode == 0


@pytest.mark.parametrize("section", THROUGH_PYTHON_PATHS)
def test_section_through_python(through_python, section):
    check_section(through_python, section)
    assert through_python.returncode == 0


def test_on_a_gpu(compile_cuda, server_factory):
    """The cupy backend: managed memory is device memory behind the mirror,
    __managed__ variables the driver's own."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    sections = [s for s in SECTIONS if s != "devices"]
    result = run_program(compile_cuda("managed_memory.cu"), server, *sections, timeout=300)
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr[-3000:]


ON_TOUCH = {"RCUDA_MANAGED_ON_TOUCH": "1"}  # (the on_touch fixture's too)


def bytes_sent(compile_cuda, server_factory, section: str, env: dict | None = None) -> float:
    """What the server sent from the device while `section` ran alone (its
    metrics, once the program's session has ended and been counted)."""
    server = server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / "managed_kernels.py"),
                            "--metrics-port", "0")
    port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", server.ready_line)[1])
    result = run_program(compile_cuda("managed_memory.cu"), server, section, env_extra=env)
    check_section(result, section)

    def sent_once_ended():
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        sent = re.search(r'rcuda_gpu_bytes_total\{direction="from_device"[^}]*\} (\S+)', text)
        return float(sent[1]) if "rcuda_sessions 0.0" in text and sent and float(sent[1]) > 0 else None
    return wait_for(sent_once_ended, 15, "the program's session ends and is counted")


def test_only_what_the_host_touches_comes_back(compile_cuda, server_factory):
    """RCUDA_MANAGED_ON_TOUCH=1: a synchronisation leaves managed memory on
    the device until the host touches it: kernels rewrite 32 MiB and a small
    allocation, the host reads only the small one, and the server sends it
    (its arena, 2 MiB), not the 32 MiB.  By default it sends all of it."""
    sent = bytes_sent(compile_cuda, server_factory, "touch_only_what_is_read", ON_TOUCH)
    assert sent < 8 << 20, f"{sent:.0f} bytes came back from the device for a 4 KiB read"
    sent = bytes_sent(compile_cuda, server_factory, "touch_only_what_is_read")
    assert sent >= 32 << 20, f"{sent:.0f} bytes came back from the device, not all 32 MiB"


def test_what_the_program_prefetches_to_the_host_comes_back(compile_cuda, server_factory):
    """RCUDA_MANAGED_ON_TOUCH=1 and cudaMemPrefetchAsync to the host: the 4 MiB prefetched come back at
    the synchronisation though the host reads a word of them, with the
    part around the word it reads of the other half."""
    sent = bytes_sent(compile_cuda, server_factory, "prefetch_to_host", ON_TOUCH)
    assert 5 << 20 <= sent < 8 << 20, f"{sent:.0f} bytes came back from the device"
