"""The driver API's functions whose runtime twins rcuda has
(tests/cuda/driver_parity.cu): peer access and copies, memory pools,
managed memory's hints and queries, cuPointerSetAttribute, the profiler,
cuKernelGetAttribute, and CUDA_ERROR_NOT_INITIALIZED before cuInit; run
through rcuda against a two-GPU sim server."""
from __future__ import annotations

import subprocess

import pytest

from conftest import CUDA_SOURCES, nvcc_path, requires_nvcc
from program_paths import check_passed, check_section, run_on_sim
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc

SECTIONS = ["not_initialized", "peers", "pools", "managed", "pointer_attribute", "profiler", "kernel_attributes"]


@pytest.fixture(scope="module")
def result(compile_cuda, build_dir):
    """One run; kernel_attributes loads driver_module_kernels.cu's fatbinary
    (its sim plugin, driver_module_kernels.py, lets the server load it)."""
    fatbin = build_dir / "driver_parity_kernels.fatbin"
    subprocess.run([nvcc_path(), "-fatbin", "-o", str(fatbin), str(CUDA_SOURCES / "driver_module_kernels.cu")],
                   check=True, capture_output=True, text=True, timeout=300)
    def build(source, *flags):
        return compile_cuda(source, f"-L{dropin_dir()}", "-l:libcuda.so.1", *flags)
    return run_on_sim(build, "driver_parity.cu", "driver_module_kernels.py", str(fatbin))


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    check_passed(result, "driver_parity.cu")
    assert "internal error" not in result.stderr, result.stderr[-3000:]
