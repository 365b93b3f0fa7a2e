"""The libraries' registry: which Python function implements each export
of the drop-in cuBLAS, cuBLASLt, cuFFT and cuRAND (@library()), and the
libraries' own statuses, into which failures are turned.

Each export of the drop-in libraries (native/generated/libraries_exports.c)
calls its Python entry point (client/entrypoints.py), which runs the
function registered here by client/libraries/cublas.py, cublaslt.py,
cufft.py, cufft_xt.py or curand.py, or, for a cuBLAS computation none of
them registers, the generic forwarder of cublas.py (client/libraries/
dispatch.py), or answers the library's "not supported" status and logs the
name once.
"""
from __future__ import annotations

import logging

from rcuda._generated.libraries_api import LIBRARIES, LIBRARY_FUNCTIONS
from rcuda.errors import cudaError
from rcuda.library_errors import LibraryError

from .. import interposer
from ..registry import registrar

log = logging.getLogger(__name__)

LIBRARY_IMPLEMENTED: dict[str, callable] = {}
library = registrar(LIBRARY_FUNCTIONS, LIBRARY_IMPLEMENTED, "cuBLAS, cuFFT or cuRAND export")
#: Exports rcuda refuses by design (@refused), each with its reason: `rcuda
#: coverage` counts them unsupported and docs/coverage.md gives the reasons.
LIBRARY_REFUSED: dict[str, str] = {}


def refused(status: str, reason: str):
    """Register an export that rcuda cannot serve by its nature: the
    decorated function checks the arguments as the library would (a bad
    handle is still the library's status for it), then the call answers
    `status`, naming itself and `reason` in the log."""

    def register(check):
        name = check.__name__

        def refuse(*args):
            check(*args)
            raise LibraryError(status, f"{name}: {reason}")

        refuse.__name__, refuse.__module__, refuse.__doc__ = name, check.__module__, check.__doc__
        LIBRARY_REFUSED[name] = reason
        return library()(refuse)

    return register


def status(library_name: str, name: str) -> int:
    """The value of status enumerator `name` of `library_name` (cublas, cufft, curand)."""
    return LIBRARIES[library_name]["statuses"][name]


def required(pointer, what: str, status: str):
    """`pointer`, or LibraryError `status` (the library's own) when it is NULL."""
    if pointer == interposer.ffi.NULL:
        raise LibraryError(status, f"{what} is NULL")
    return pointer


def library_status(library_name: str, exc: BaseException) -> int:
    """The status of `library_name` a failure is reported as."""
    if isinstance(exc, LibraryError) and exc.library_status in LIBRARIES[library_name]["statuses"]:
        return status(library_name, exc.library_status)
    name = _CUDA_FAILURES[library_name].get(getattr(exc, "status", None), _CUDA_FAILURES[library_name][None])
    return status(library_name, name)


# What a CUDA failure under a library call is reported as, by library (None: any other).
_CUDA_FAILURES = {
    "cublas": {cudaError.cudaErrorInvalidValue: "CUBLAS_STATUS_INVALID_VALUE",
               cudaError.cudaErrorMemoryAllocation: "CUBLAS_STATUS_ALLOC_FAILED",
               cudaError.cudaErrorNoDevice: "CUBLAS_STATUS_NOT_INITIALIZED",
               cudaError.cudaErrorInvalidResourceHandle: "CUBLAS_STATUS_INVALID_VALUE",
               cudaError.cudaErrorNotSupported: "CUBLAS_STATUS_NOT_SUPPORTED",
               None: "CUBLAS_STATUS_EXECUTION_FAILED"},
    "cufft": {cudaError.cudaErrorInvalidValue: "CUFFT_INVALID_VALUE",
              cudaError.cudaErrorMemoryAllocation: "CUFFT_ALLOC_FAILED",
              cudaError.cudaErrorNoDevice: "CUFFT_SETUP_FAILED",
              cudaError.cudaErrorNotSupported: "CUFFT_NOT_SUPPORTED",
              None: "CUFFT_EXEC_FAILED"},
    "curand": {cudaError.cudaErrorMemoryAllocation: "CURAND_STATUS_ALLOCATION_FAILED",
               cudaError.cudaErrorNoDevice: "CURAND_STATUS_INITIALIZATION_FAILED",
               None: "CURAND_STATUS_LAUNCH_FAILURE"},
}
_CUDA_FAILURES["cublasLt"] = _CUDA_FAILURES["cublas"]
