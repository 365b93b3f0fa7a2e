"""The driver API's functions whose runtime twins rcuda has
(tests/cuda/driver_parity.cu): peer access and copies, memory pools,
managed memory's hints and queries, cuPointerSetAttribute, the profiler,
cuKernelGetAttribute, CUDA_ERROR_NOT_INITIALIZED before cuInit, stream
attributes, function and kernel queries, a library's __managed__
variables, context settings, cuCtxRecordEvent/cuCtxWaitEvent (against the
sim's modelled time), device queries, pools by location and batch
prefetches; run through rcuda against a two-GPU sim server."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import CUDA_SOURCES, nvcc_path, requires_nvcc
from program_paths import check_passed, check_section, run_on_sim
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc

SECTIONS = ["not_initialized", "peers", "pools", "managed", "pointer_attribute", "profiler", "kernel_attributes",
            "stream_attributes", "functions", "library_managed", "contexts", "context_events", "devices",
            "pools_by_location", "managed_batches"]


@pytest.fixture(scope="module")
def result(compile_cuda, build_dir):
    """One run; kernel_attributes loads driver_module_kernels.cu's fatbinary,
    the later sections driver_parity_kernels.cu's (their sim plugins,
    driver_module_kernels.py, let the server load them)."""
    fatbins = []
    for source in ("driver_module_kernels.cu", "driver_parity_kernels.cu"):
        fatbins.append(build_dir / f"parity_{Path(source).stem}.fatbin")
        subprocess.run([nvcc_path(), "-fatbin", "-o", str(fatbins[-1]), str(CUDA_SOURCES / source)],
                       check=True, capture_output=True, text=True, timeout=300)
    def build(source, *flags):
        return compile_cuda(source, f"-L{dropin_dir()}", "-l:libcuda.so.1", *flags)
    return run_on_sim(build, "driver_parity.cu", "driver_module_kernels.py", *map(str, fatbins))


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    check_passed(result, "driver_parity.cu")
    assert "internal error" not in result.stderr, result.stderr[-3000:]
