"""The runtime's ways into the driver API: cudaGetDriverEntryPoint (a
driver function's address, as cuGetProcAddress finds it) and
cudaGetFuncBySymbol (the CUfunction of one of the program's kernels).

They answer with the driver API's own objects (client/driver/loading.py),
without loading the driver's function modules: those load at a program's
first driver call.
"""
from __future__ import annotations

from rcuda._generated.cudart_api import CUDART_VERSION

from .. import interposer
from ..driver.loading import runtime_function
from ..interposer import out_pointer
from ..proc_address import entry_point, stream_mode
from .core import SUCCESS, cuda

_RUNTIME_STATUS = {"found": "cudaDriverEntryPointSuccess", "not found": "cudaDriverEntryPointSymbolNotFound",
                   "version not sufficient": "cudaDriverEntryPointVersionNotSufficent"}


@cuda(stream_variants=True)
def cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, driverStatus, per_thread=False):
    """The driver entry point cuGetProcAddress gives, for the runtime.
    cudaEnableDefault follows how the program was built: its _ptsz variant
    (--default-stream per-thread) asks for per-thread variants."""
    lib = interposer.lib
    threaded = stream_mode(flags, per_thread, lib.cudaEnableLegacyStream, lib.cudaEnablePerThreadDefaultStream,
                           "cudaGetDriverEntryPoint")
    outcome = entry_point(symbol, funcPtr, cudaVersion, threaded, "cudaGetDriverEntryPoint")
    if driverStatus != interposer.ffi.NULL:
        driverStatus[0] = getattr(lib, _RUNTIME_STATUS[outcome])
    return SUCCESS


@cuda(stream_variants=True)
def cudaGetDriverEntryPoint(symbol, funcPtr, flags, driverStatus, per_thread=False):
    """As cudaGetDriverEntryPointByVersion, at the runtime's own CUDA version."""
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, per_thread)


@cuda()
def cudaGetFuncBySymbol(functionPtr, symbolPtr):
    """The CUfunction of a kernel of the program's own (its host stub), on
    the current device: one handle per kernel and device."""
    out_pointer(functionPtr, "functionPtr")
    fn = runtime_function(interposer.rt.kernels.kernel(interposer.address(symbolPtr)), interposer.rt.device())
    functionPtr[0] = interposer.ffi.cast("cudaFunction_t", fn.handle)
    return SUCCESS
