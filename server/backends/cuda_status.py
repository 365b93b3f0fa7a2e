"""The cudaError_t for a status number from the real runtime or driver
(what CuPy's exceptions and ctypes calls to libcuda return)."""
from __future__ import annotations

from rcuda.errors import cudaError


def runtime_status(code: int) -> cudaError:
    """The cudaError_t for a runtime status; cudaErrorUnknown for one CUDA 13 lacks."""
    try:
        return cudaError(int(code))
    except ValueError:
        return cudaError.cudaErrorUnknown


def driver_status(code: int) -> cudaError:
    """The cudaError_t for a CUresult.  CUDA gives the driver and runtime codes
    the same numbers where they mean the same (CUDA_ERROR_ILLEGAL_ADDRESS and
    cudaErrorIllegalAddress are both 700, OUT_OF_MEMORY and MemoryAllocation
    both 2, NO_BINARY_FOR_GPU and NoKernelImageForDevice both 209, ...)."""
    return runtime_status(code)
