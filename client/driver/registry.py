"""The driver API's registry: which Python function implements each
libcuda.so.1 export, and whether the driver is initialised.

Each driver export calls its Python entry point rcuda_py_<name>
(native/generated/cuda_driver_exports.c, client/entrypoints.py), which runs
the function registered here under its exported name, or answers
CUDA_ERROR_NOT_SUPPORTED and logs the name once.  Implementations return a
CUresult or raise: a CudaError (the runtime's status for the same error, as
the rest of the client raises) becomes the matching CUresult
(rcuda/driver_errors.py); a DriverError carries a CUresult of its own.

To implement a driver function: one function named as the export
(cuMemAlloc_v2, not cuMemAlloc), decorated with @driver(), in a module of
this package listed in client/driver/dispatch.py's MODULES.
"""
from __future__ import annotations

from rcuda._generated.cuda_driver_api import DRIVER_FUNCTIONS
from rcuda.driver_errors import FROM_RUNTIME, CUresult, DriverError
from rcuda.errors import cudaError

from .. import interposer
from ..registry import registrar

DRIVER_IMPLEMENTED: dict[str, callable] = {}
driver = registrar(DRIVER_FUNCTIONS, DRIVER_IMPLEMENTED, "CUDA driver API export")

SUCCESS = CUresult.CUDA_SUCCESS
_initialized = False  # cuInit succeeded in this process


def mark_initialized() -> None:
    global _initialized
    _initialized = True


def require_initialized() -> None:
    """What every driver function but the few CUDA allows before cuInit checks
    first.  The runtime initialises the driver too: a program's runtime call
    that found the devices counts as cuInit."""
    if not _initialized and not interposer.rt.opened_devices():
        raise DriverError(CUresult.CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called")


def from_runtime(status) -> CUresult:
    """A runtime function's returned status (cudaSuccess, cudaErrorNotReady)
    as a CUresult: a driver function that calls its runtime twin returns this."""
    return FROM_RUNTIME[cudaError(status)]
