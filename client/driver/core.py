"""CUDA driver API functions (libcuda.so.1), implemented on the client:
initialisation, versions, error strings and entry points.

The other groups live beside this module (contexts, devices, memory,
modules, launch...) and register with @driver() the same way
(client/driver/registry.py); `rcuda coverage` lists each module's
functions under its name, this one's under "core".
"""
from __future__ import annotations

import logging

from rcuda._generated.cuda_driver_api import CUDA_VERSION
from rcuda.driver_errors import CUresult, DriverError, error_name, error_string
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..interposer import out_pointer
from ..runtime import logs as runtime_logs
from ..proc_address import PROC_STATUS, entry_point, stream_mode
from .registry import SUCCESS, driver, from_runtime, mark_initialized

log = logging.getLogger(__name__)

_export_tables_reported: set[str] = set()


@driver()
def cuInit(Flags):
    """Connects to the servers (RCUDA_SERVERS) now, as the driver finds its GPUs."""
    if Flags != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuInit: Flags must be 0, not {Flags}")
    if not interposer.rt.devices:
        raise DriverError(CUresult.CUDA_ERROR_NO_DEVICE, "cuInit: the servers have no GPU")
    mark_initialized()
    return SUCCESS


@driver()
def cuDriverGetVersion(driverVersion):
    """The CUDA version rcuda's driver API implements (cuda.h's CUDA_VERSION)."""
    out_pointer(driverVersion, "driverVersion")[0] = CUDA_VERSION
    return SUCCESS


def _error_text(lookup, error, pStr, what: str):
    out_pointer(pStr, "pStr")
    text = lookup(error)
    if text is None:
        pStr[0] = interposer.ffi.NULL
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: {error} is not a CUresult")
    pStr[0] = interposer.c_string(text)
    return SUCCESS


@driver()
def cuGetErrorName(error, pStr):
    return _error_text(error_name, error, pStr, "cuGetErrorName")


@driver()
def cuGetErrorString(error, pStr):
    return _error_text(error_string, error, pStr, "cuGetErrorString")


# ---------------------------------------------------------------- entry points


@driver()
def cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus):
    """CU_GET_PROC_ADDRESS_DEFAULT means the legacy stream here: a program
    built for per-thread default streams gets cuda.h's inline wrapper, which
    asks for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM itself."""
    lib = interposer.lib
    per_thread = stream_mode(flags, False, lib.CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                             lib.CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuGetProcAddress")
    outcome = entry_point(symbol, pfn, cudaVersion, per_thread, "cuGetProcAddress")
    if symbolStatus != interposer.ffi.NULL:
        symbolStatus[0] = getattr(lib, PROC_STATUS[outcome])
    return SUCCESS


@driver()
def cuGetProcAddress(symbol, pfn, cudaVersion, flags):
    """CUDA 11.3's cuGetProcAddress, without the search status."""
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, interposer.ffi.NULL)


@driver()
def cuGetExportTable(ppExportTable, pExportTableId):
    """The driver's private tables (the static runtime and NVIDIA's libraries
    ask for them by UUID): rcuda has none.  NVRTC asks and does well
    without, so this is said once per UUID at info level, not as a warning;
    a program that cannot do without fails on the status returned."""
    null = interposer.ffi.NULL
    if ppExportTable != null:
        ppExportTable[0] = null
    uuid = bytes(interposer.ffi.buffer(pExportTableId.bytes, 16)).hex() if pExportTableId != null else "NULL"
    if uuid not in _export_tables_reported:
        _export_tables_reported.add(uuid)
        log.info("cuGetExportTable(%s): the driver's private export tables are not supported by rcuda "
                 "(what asked for it is probably NVRTC, or NVIDIA's static runtime or a library); returning "
                 "CUDA_ERROR_NOT_SUPPORTED", uuid)
    return CUresult.CUDA_ERROR_NOT_SUPPORTED


# ---------------------------------------------------------------- the error log (client/runtime/logs.py)


@driver()
def cuLogsRegisterCallback(callbackFunc, userData, callback_out):
    return from_runtime(runtime_logs.cudaLogsRegisterCallback(callbackFunc, userData, callback_out))


@driver()
def cuLogsUnregisterCallback(callback):
    return from_runtime(runtime_logs.cudaLogsUnregisterCallback(callback))


@driver()
def cuLogsCurrent(iterator_out, flags):
    return from_runtime(runtime_logs.cudaLogsCurrent(iterator_out, flags))


@driver()
def cuLogsDumpToMemory(iterator, buffer, size, flags):
    return from_runtime(runtime_logs.cudaLogsDumpToMemory(iterator, buffer, size, flags))


@driver()
def cuLogsDumpToFile(iterator, pathToFile, flags):
    return from_runtime(runtime_logs.cudaLogsDumpToFile(iterator, pathToFile, flags))
