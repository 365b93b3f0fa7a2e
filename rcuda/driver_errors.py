"""The CUDA driver API's status codes (CUresult), and rcuda's failures as them.

rcuda's code raises the runtime's statuses (`CudaError`, `cudaError`); a
driver function's failure becomes the CUresult the driver returns for the
same error.  The mapping is derived from the two generated enums, not written
by hand: the same error has the same name in both (CUDA_ERROR_INVALID_VALUE,
cudaErrorInvalidValue), or else the same value (the runtime numbers its
errors after the driver's: cudaErrorMemoryAllocation = CUDA_ERROR_OUT_OF_MEMORY
= 2).  The runtime's own errors, which the driver lacks, become
CUDA_ERROR_INVALID_VALUE when they name a bad argument (cudaErrorInvalid...)
and CUDA_ERROR_UNKNOWN otherwise.
"""
from __future__ import annotations

import enum

from rcuda._generated.cuda_driver_errors import ERRORS
from rcuda.errors import RcudaError, cudaError, to_cuda_status
from rcuda.errors import error_string as runtime_message

CUresult = enum.IntEnum("CUresult", [(name, value) for value, name, _ in ERRORS])
CUresult.__doc__ = "CUresult, with CUDA 13's names and values."

_DRIVER_PREFIX = "CUDA_ERROR_"
_RUNTIME_PREFIX = "cudaError"
#: Runtime-only errors about a handle rather than a value.
_HANDLE_ERRORS = {cudaError.cudaErrorInvalidDeviceFunction}


def _words(driver_name: str) -> str:
    """CUDA_ERROR_INVALID_VALUE -> "invalidvalue" (cudaErrorInvalidValue's tail, lowered)."""
    return driver_name[len(_DRIVER_PREFIX):].replace("_", "").lower()


_BY_NAME = {_words(c.name): c for c in CUresult if c.name.startswith(_DRIVER_PREFIX)}


def _to_driver(status: cudaError) -> CUresult:
    found = _BY_NAME.get(status.name[len(_RUNTIME_PREFIX):].lower())
    if found is None and status.value in CUresult._value2member_map_:
        found = CUresult(status.value)
    if found is None:
        if status in _HANDLE_ERRORS:
            return CUresult.CUDA_ERROR_INVALID_HANDLE
        invalid = status.name.startswith("cudaErrorInvalid")
        return CUresult.CUDA_ERROR_INVALID_VALUE if invalid else CUresult.CUDA_ERROR_UNKNOWN
    return found


#: cudaError -> CUresult, for every runtime status.
FROM_RUNTIME: dict[cudaError, CUresult] = {status: _to_driver(status) for status in cudaError}

#: CUresult -> the runtime status it comes from when names or values agree
#: (for the message: the driver's strings are the runtime's for the same error).
_SAME_ERROR = {driver: runtime for runtime, driver in FROM_RUNTIME.items()
               if runtime.name[len(_RUNTIME_PREFIX):].lower() == _words(driver.name)
               or runtime.value == driver.value}
_DESCRIPTIONS = {value: text for value, _, text in ERRORS}


def driver_status(exc: BaseException) -> CUresult:
    """The CUresult an exception becomes at the C boundary of a driver function."""
    if isinstance(exc, DriverError):
        return exc.result
    return FROM_RUNTIME[to_cuda_status(exc)]


def error_name(code: int) -> str | None:
    """cuGetErrorName: the enum's name; None for a value CUDA does not define."""
    return CUresult(code).name if code in CUresult._value2member_map_ else None


def error_string(code: int) -> str | None:
    """cuGetErrorString: the runtime's message for the same error, else the
    header's description of it; None for a value CUDA does not define."""
    if code not in CUresult._value2member_map_:
        return None
    runtime = _SAME_ERROR.get(CUresult(code))
    return runtime_message(runtime) if runtime is not None else _DESCRIPTIONS[code]


class DriverError(RcudaError):
    """A driver status with no runtime counterpart (CUDA_ERROR_NOT_INITIALIZED
    has one; e.g. CUDA_ERROR_INVALID_CONTEXT before any context).  Raised in
    code the runtime shares (client/driver/loading.py), its `status` is the
    runtime's error of the same name or value, else cudaErrorUnknown."""

    def __init__(self, result: int, message: str = ""):
        self.result = CUresult(result)
        super().__init__(message or self.result.name, _SAME_ERROR.get(self.result))
