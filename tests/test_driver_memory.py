"""The driver API's memory (tests/cuda/driver_memory.cu): allocations, every
copy and memset kind, pitched memory, 2-D and 3-D copies, pinned, mapped
and managed host memory, pointers crossing APIs, and virtual memory
management across two GPUs of one server; run unmodified through rcuda
against a two-GPU sim server, on the lane and on a --auth server's ZeroMQ
link; and where there is a GPU, against cupy servers."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from program_paths import check_passed, check_section, run_on_gpu, run_on_sim
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc

ONE_GPU = ["alloc", "copies", "memsets", "pitched", "host_memory", "cross_api"]
SECTIONS = [*ONE_GPU, "two_gpus", "vmm"]
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


def test_on_a_gpu(compile_cuda):
    """The cupy backend: the sections of one GPU, the real driver's memory behind rcuda's."""
    result = run_on_gpu(compile_cuda, "driver_memory.cu", *ONE_GPU, flags=LINK_DRIVER)
    check_section(result, *ONE_GPU)
    check_passed(result, "driver_memory.cu")


def test_two_gpus_on_a_gpu(compile_cuda):
    """Copies between two GPUs (another server's GPU0 where this machine has one)."""
    result = run_on_gpu(compile_cuda, "driver_memory.cu", "two_gpus", devices=2, one_server=False, flags=LINK_DRIVER)
    check_section(result, "two_gpus")
    check_passed(result, "driver_memory.cu")


def test_vmm_across_two_gpus_on_a_gpu_server(compile_cuda):
    """Virtual memory management across two GPUs of one cupy server, kernels
    on each using the other's half: the same program as on the sim."""
    result = run_on_gpu(compile_cuda, "driver_memory.cu", "vmm", devices=2, peers=True, flags=LINK_DRIVER)
    check_section(result, "vmm")
    check_passed(result, "driver_memory.cu")
