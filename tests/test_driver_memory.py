"""The driver API's memory (tests/cuda/driver_memory.cu): allocations, every
copy and memset kind, pitched memory, 2-D and 3-D copies, pinned, mapped
and managed host memory, pointers crossing APIs, and virtual memory
management across two GPUs of one server; run unmodified through rcuda
against a two-GPU sim server, on the lane and on a --auth server's ZeroMQ link."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from program_paths import check_section, run_on_sim
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc

SECTIONS = ["alloc", "copies", "memsets", "pitched", "host_memory", "cross_api", "two_gpus", "vmm"]
LINK_DRIVER = (f"-L{dropin_dir()}", "-l:libcuda.so.1")


def compile_with_driver(compile_cuda):
    return lambda source: compile_cuda(source, *LINK_DRIVER)


@pytest.fixture(scope="module")
def result(compile_cuda):
    return run_on_sim(compile_with_driver(compile_cuda), "driver_memory.cu", "driver_memory_kernels.py")


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    assert result.returncode == 0 and "PASSED driver_memory" in result.stdout, result.stdout + result.stderr[-3000:]


def test_on_a_zeromq_link(compile_cuda, tmp_path):
    """A --auth server: every call takes the Python link, none is made in C."""
    result = run_on_sim(compile_with_driver(compile_cuda), "driver_memory.cu", "driver_memory_kernels.py",
                        "copies", "memsets", "vmm", auth_root=tmp_path)
    for section in ("copies", "memsets", "vmm"):
        check_section(result, section)
