"""CUDA driver API functions (libcuda.so.1), implemented on the client: the
registry, initialisation, versions, error strings and entry points.

Each driver export calls its Python entry point rcuda_py_<name>
(native/generated/cuda_driver_exports.c, client/entrypoints.py), which runs
the function registered here under its exported name, or answers
CUDA_ERROR_NOT_SUPPORTED and logs the name once.  Implementations return a
CUresult or raise: a CudaError (the runtime's status for the same error, as
the rest of the client raises) becomes the matching CUresult
(rcuda/driver_errors.py); a DriverError carries a CUresult of its own.

To implement a driver function: one function named as the export
(cuMemAlloc_v2, not cuMemAlloc), decorated with @driver(), in a module
client/api_driver_<group>.py (api_driver_memory, api_driver_modules...).
Every such module is imported by load_modules(), and `rcuda coverage` lists
its functions under <group>; this module's under "core".
"""
from __future__ import annotations

import importlib
import logging
import pkgutil

from rcuda._generated.cuda_driver_api import CUDA_VERSION, DRIVER_FUNCTIONS
from rcuda._generated.cudart_api import CUDART_VERSION
from rcuda.driver_errors import CUresult, DriverError, error_name, error_string
from rcuda.errors import CudaError, cudaError

from . import api
from .api import cuda, out_pointer, registrar

log = logging.getLogger(__name__)

DRIVER_IMPLEMENTED: dict[str, callable] = {}
driver = registrar(DRIVER_FUNCTIONS, DRIVER_IMPLEMENTED, "CUDA driver API export")

SUCCESS = CUresult.CUDA_SUCCESS
_initialized = False  # cuInit succeeded in this process
_export_tables_reported: set[str] = set()


def load_modules() -> None:
    """Import every client/api_driver_*.py: each registers its functions."""
    for module in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
        if module.name.startswith("api_driver_"):
            importlib.import_module(f"{__package__}.{module.name}")


def require_initialized() -> None:
    """What every driver function but the few CUDA allows before cuInit checks
    first.  The runtime initialises the driver too: a program's runtime call
    that found the devices counts as cuInit."""
    if not _initialized and not api.rt.opened_devices():
        raise DriverError(CUresult.CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called")


@driver()
def cuInit(Flags):
    """Connects to the servers (RCUDA_SERVERS) now, as the driver finds its GPUs."""
    global _initialized
    if Flags != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuInit: Flags must be 0, not {Flags}")
    if not api.rt.devices:
        raise DriverError(CUresult.CUDA_ERROR_NO_DEVICE, "cuInit: the servers have no GPU")
    _initialized = True
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
        pStr[0] = api.ffi.NULL
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: {error} is not a CUresult")
    pStr[0] = api.c_string(text)
    return SUCCESS


@driver()
def cuGetErrorName(error, pStr):
    return _error_text(error_name, error, pStr, "cuGetErrorName")


@driver()
def cuGetErrorString(error, pStr):
    return _error_text(error_string, error, pStr, "cuGetErrorString")


# ---------------------------------------------------------------- entry points


def resolve(symbol: str, version: int, per_thread: bool) -> tuple[str | None, str]:
    """(the export cuGetProcAddress answers for `symbol` at CUDA `version`,
    or None; "found", "version not sufficient" or "not found").  The newest
    variant of that API no newer than `version`; with `per_thread`, its
    _ptds/_ptsz variant when it has one (else the legacy-stream one)."""
    variants = [(row["version"], row["per_thread"], name) for name, row in DRIVER_FUNCTIONS.items()
                if row["api"] == symbol]
    if not variants:
        return None, "not found"
    usable = [v for v in variants if v[0] <= version]
    threaded = [v for v in usable if v[1]] if per_thread else []
    chosen = max(threaded or [v for v in usable if not v[1]], default=None)
    return (chosen[2], "found") if chosen else (None, "version not sufficient")


def _entry_point(symbol, pfn, version: int, per_thread: bool, what: str) -> str:
    """Fill *pfn with our export of `symbol` (NULL when there is none); the search's outcome."""
    out_pointer(symbol, "symbol")
    out_pointer(pfn, "pfn")
    if version > CUDA_VERSION:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what}: CUDA version {version} is newer than rcuda's driver API ({CUDA_VERSION})")
    name, outcome = resolve(api.ffi.string(symbol).decode(errors="replace"), version, per_thread)
    pfn[0] = api.lib.rcuda_driver_export(name.encode()) if name else api.ffi.NULL
    return outcome


def _stream_mode(flags: int, default_per_thread: bool, legacy: int, per_thread: int, what: str) -> bool:
    """Whether `flags` ask for per-thread-default-stream variants."""
    if flags not in (0, legacy, per_thread):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: unknown flags {flags:#x}")
    return flags == per_thread or (flags == 0 and default_per_thread)


_PROC_STATUS = {"found": "CU_GET_PROC_ADDRESS_SUCCESS", "not found": "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND",
                "version not sufficient": "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT"}


@driver()
def cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus):
    """CU_GET_PROC_ADDRESS_DEFAULT means the legacy stream here: a program
    built for per-thread default streams gets cuda.h's inline wrapper, which
    asks for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM itself."""
    lib = api.lib
    per_thread = _stream_mode(flags, False, lib.CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                              lib.CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuGetProcAddress")
    outcome = _entry_point(symbol, pfn, cudaVersion, per_thread, "cuGetProcAddress")
    if symbolStatus != api.ffi.NULL:
        symbolStatus[0] = getattr(lib, _PROC_STATUS[outcome])
    return SUCCESS


@driver()
def cuGetProcAddress(symbol, pfn, cudaVersion, flags):
    """CUDA 11.3's cuGetProcAddress, without the search status."""
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, api.ffi.NULL)


@driver()
def cuGetExportTable(ppExportTable, pExportTableId):
    """The driver's private tables (the static runtime and NVIDIA's libraries
    ask for them by UUID): rcuda has none.  Logged once per UUID."""
    if ppExportTable != api.ffi.NULL:
        ppExportTable[0] = api.ffi.NULL
    uuid = bytes(api.ffi.buffer(pExportTableId.bytes, 16)).hex() if pExportTableId != api.ffi.NULL else "NULL"
    if uuid not in _export_tables_reported:
        _export_tables_reported.add(uuid)
        log.warning("cuGetExportTable(%s): the driver's private export tables are not supported by rcuda "
                    "(what asked for it is probably NVIDIA's static runtime or library); returning "
                    "CUDA_ERROR_NOT_SUPPORTED", uuid)
    return CUresult.CUDA_ERROR_NOT_SUPPORTED


_RUNTIME_STATUS = {"found": "cudaDriverEntryPointSuccess", "not found": "cudaDriverEntryPointSymbolNotFound",
                   "version not sufficient": "cudaDriverEntryPointVersionNotSufficent"}


@cuda(stream_variants=True)
def cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, driverStatus, per_thread=False):
    """The driver entry point cuGetProcAddress gives, for the runtime.
    cudaEnableDefault follows how the program was built: its _ptsz variant
    (--default-stream per-thread) asks for per-thread variants."""
    lib = api.lib
    threaded = _stream_mode(flags, per_thread, lib.cudaEnableLegacyStream, lib.cudaEnablePerThreadDefaultStream,
                            "cudaGetDriverEntryPoint")
    outcome = _entry_point(symbol, funcPtr, cudaVersion, threaded, "cudaGetDriverEntryPoint")
    if driverStatus != api.ffi.NULL:
        driverStatus[0] = getattr(lib, _RUNTIME_STATUS[outcome])
    return api.SUCCESS


@cuda(stream_variants=True)
def cudaGetDriverEntryPoint(symbol, funcPtr, flags, driverStatus, per_thread=False):
    """As cudaGetDriverEntryPointByVersion, at the runtime's own CUDA version."""
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, per_thread)
