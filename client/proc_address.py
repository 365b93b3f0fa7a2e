"""Finding a driver entry point by name, as cuGetProcAddress does: shared by
the driver's cuGetProcAddress (client/driver/core.py) and the runtime's
cudaGetDriverEntryPoint (client/runtime/driver_access.py).  The answer is
one of rcuda's own driver exports (native/generated/cuda_driver_exports.c).
"""
from __future__ import annotations

from rcuda._generated.cuda_driver_api import CUDA_VERSION, DRIVER_FUNCTIONS
from rcuda.errors import CudaError, cudaError

from . import interposer
from .interposer import out_pointer

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


def entry_point(symbol, pfn, version: int, per_thread: bool, what: str) -> str:
    """Fill *pfn with our export of `symbol` (NULL when there is none); the search's outcome."""
    out_pointer(symbol, "symbol")
    out_pointer(pfn, "pfn")
    if version > CUDA_VERSION:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what}: CUDA version {version} is newer than rcuda's driver API ({CUDA_VERSION})")
    name, outcome = resolve(interposer.ffi.string(symbol).decode(errors="replace"), version, per_thread)
    pfn[0] = interposer.lib.rcuda_driver_export(name.encode()) if name else interposer.ffi.NULL
    return outcome


def stream_mode(flags: int, default_per_thread: bool, legacy: int, per_thread: int, what: str) -> bool:
    """Whether `flags` ask for per-thread-default-stream variants."""
    if flags not in (0, legacy, per_thread):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: unknown flags {flags:#x}")
    return flags == per_thread or (flags == 0 and default_per_thread)


#: What cuGetProcAddress_v2 says of a search, by its outcome.
PROC_STATUS = {"found": "CU_GET_PROC_ADDRESS_SUCCESS", "not found": "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND",
               "version not sufficient": "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT"}
