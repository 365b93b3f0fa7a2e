"""Cooperative launches: tests/cuda/cooperative.cu run unmodified through
rcuda on a sim server (tests/cuda/cooperative_kernels.py computes the
grid-synchronising kernel whole).  cudaLaunchCooperativeKernel (and its
_ptsz variant), cudaLaunchKernelEx's cudaLaunchAttributeCooperative, and
the grid that cannot be resident at once, refused with
cudaErrorCooperativeLaunchTooLarge."""
from __future__ import annotations

import pytest

from conftest import CUDA_SOURCES, run_program, start_server
from rcuda import launch_rules
from rcuda.errors import CudaError, cudaError

KERNELS = str(CUDA_SOURCES / "cooperative_kernels.py")
SECTIONS = ["launch", "too_large", "launch_ex"]


def _run(binary):
    server = start_server("--backend", "sim", "--kernels", KERNELS)
    try:
        return run_program(binary, server, timeout=300)
    finally:
        server.stop()


@pytest.mark.parametrize("flags", [(), ("--default-stream", "per-thread")], ids=["legacy", "per-thread"])
def test_cooperative_launches(compile_cuda, flags):
    result = _run(compile_cuda("cooperative.cu", *flags))
    assert result.returncode == 0 and "PASSED cooperative" in result.stdout, \
        result.stdout[-3000:] + result.stderr[-3000:]
    for section in SECTIONS:
        assert f"ok {section}" in result.stdout, result.stdout


PROPS = {"cooperativeLaunch": 1, "multiProcessorCount": 4, "warpSize": 32, "maxThreadsPerMultiProcessor": 2048,
         "maxBlocksPerMultiProcessor": 32, "regsPerMultiprocessor": 65536, "sharedMemPerMultiprocessor": 65536,
         "reservedSharedMemPerBlock": 0}
ATTRS = {"maxThreadsPerBlock": 1024, "numRegs": 32, "sharedSizeBytes": 0}


@pytest.mark.parametrize("grid, block, shared, fits", [
    ((32, 1, 1), (256, 1, 1), 0, True),        # 8 blocks of 8 warps per multiprocessor, 4 multiprocessors
    ((33, 1, 1), (256, 1, 1), 0, False),
    ((4, 2, 4), (256, 1, 1), 0, True),         # 32 blocks in three dimensions
    ((4, 2, 5), (256, 1, 1), 0, False),
    ((16, 1, 1), (256, 1, 1), 16384, True),    # shared memory: 4 blocks per multiprocessor
    ((17, 1, 1), (256, 1, 1), 16384, False),
])
def test_cooperative_grid_must_be_resident_at_once(grid, block, shared, fits):
    def check(props):
        launch_rules.check_cooperative(props, ATTRS, "k", grid, block, shared, where="here: ")

    if fits:
        check(PROPS)
    else:
        with pytest.raises(CudaError) as refused:
            check(PROPS)
        assert refused.value.status == cudaError.cudaErrorCooperativeLaunchTooLarge
        assert str(refused.value).startswith("here: ") and "kernel k" in str(refused.value)
    with pytest.raises(CudaError) as unsupported:
        check(dict(PROPS, cooperativeLaunch=0))
    assert unsupported.value.status == cudaError.cudaErrorNotSupported


def test_on_a_gpu(compile_cuda, server_factory):
    """The cupy backend: the kernel really synchronises its grid
    (cuLaunchCooperativeKernel), and the driver agrees on what fits."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    result = run_program(compile_cuda("cooperative.cu"), server, timeout=300)
    assert result.returncode == 0 and "PASSED cooperative" in result.stdout, \
        result.stdout[-3000:] + result.stderr[-3000:]
