"""The driver API's functions whose runtime twins rcuda has
(tests/cuda/driver_parity.cu): peer access and copies, memory pools,
managed memory's hints and queries, cuPointerSetAttribute, the profiler,
cuKernelGetAttribute, CUDA_ERROR_NOT_INITIALIZED before cuInit, stream
attributes, function and kernel queries, a library's __managed__
variables, context settings, cuCtxRecordEvent/cuCtxWaitEvent (against a
kernel's time, modelled on the sim), device queries, pools by location and
batch prefetches; run through rcuda against a two-GPU sim server, and where
there are two GPUs that are peers, against a cupy server of both."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import CUDA_SOURCES, nvcc_path, requires_nvcc
from program_paths import check_passed, check_section, run_on_gpu, run_on_sim
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc
LINK_DRIVER = (f"-L{dropin_dir()}", "-l:libcuda.so.1")

SECTIONS = ["not_initialized", "peers", "pools", "managed", "pointer_attribute", "profiler", "kernel_attributes",
            "stream_attributes", "functions", "library_managed", "contexts", "context_events", "devices",
            "pools_by_location", "managed_batches"]


@pytest.fixture(scope="module")
def fatbins(build_dir) -> list[str]:
    """kernel_attributes loads driver_module_kernels.cu's fatbinary, the
    later sections driver_parity_kernels.cu's (their sim plugins,
    driver_module_kernels.py, let the server load them)."""
    made = []
    for source in ("driver_module_kernels.cu", "driver_parity_kernels.cu"):
        made.append(build_dir / f"parity_{Path(source).stem}.fatbin")
        subprocess.run([nvcc_path(), "-fatbin", "-o", str(made[-1]), str(CUDA_SOURCES / source)],
                       check=True, capture_output=True, text=True, timeout=300)
    return [str(path) for path in made]


@pytest.fixture(scope="module")
def result(compile_cuda, fatbins):
    """One run on a two-GPU sim server."""
    return run_on_sim(compile_cuda, "driver_parity.cu", "driver_module_kernels.py", *fatbins, flags=LINK_DRIVER)


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    check_passed(result, "driver_parity.cu")
    assert "internal error" not in result.stderr, result.stderr[-3000:]


def test_on_a_gpu_server_with_two(compile_cuda, fatbins):
    """The cupy backend: the same program on two GPUs of one server that are
    peers, the real driver's answers behind rcuda's."""
    result = run_on_gpu(compile_cuda, "driver_parity.cu", *fatbins, devices=2, peers=True, flags=LINK_DRIVER)
    check_section(result, *SECTIONS)
    check_passed(result, "driver_parity.cu")
    assert "internal error" not in result.stderr, result.stderr[-3000:]
