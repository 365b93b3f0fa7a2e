"""The driver's error log (cudaLogs*, the driver's cuLogs*): rcuda keeps
none, so the log is always empty.

rcuda's own messages about failed calls go to the program's stderr
(RCUDA_LOG), not through this API.  A callback a program registers is kept
and never called; a dump writes nothing (an empty buffer, an existing or
new empty file).  PyTorch registers a callback at every start.
"""
from __future__ import annotations

import itertools
import threading

from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..interposer import address, out_pointer
from .core import SUCCESS, cuda

#: Where callback handles start (a range no allocator hands out).
CALLBACK_HANDLES_FROM = 0x5E00_0000_0000

_lock = threading.Lock()
_handles = itertools.count(CALLBACK_HANDLES_FROM, 0x10)
_callbacks: dict[int, tuple] = {}  # handle -> (function, user data), kept for the program


def _no_flags(flags: int, call: str) -> None:
    if flags != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: flags must be 0, not {flags}")


@cuda()
def cudaLogsRegisterCallback(callbackFunc, userData, callback_out):
    if callbackFunc == interposer.ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaLogsRegisterCallback: callbackFunc is NULL")
    with _lock:
        handle = next(_handles)
        _callbacks[handle] = (callbackFunc, userData)
    if callback_out != interposer.ffi.NULL:
        callback_out[0] = interposer.ffi.cast("void *", handle)
    return SUCCESS


@cuda()
def cudaLogsUnregisterCallback(callback):
    with _lock:
        if _callbacks.pop(address(callback), None) is None:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaLogsUnregisterCallback: {address(callback):#x} is not a registered callback")
    return SUCCESS


@cuda()
def cudaLogsCurrent(iterator_out, flags):
    _no_flags(flags, "cudaLogsCurrent")
    out_pointer(iterator_out, "iterator_out")[0] = 0  # the tail of an empty log
    return SUCCESS


@cuda()
def cudaLogsDumpToMemory(iterator, buffer, size, flags):
    """No messages: *size becomes 0 and the buffer an empty string."""
    _no_flags(flags, "cudaLogsDumpToMemory")
    out_pointer(size, "size")
    if size[0] and buffer != interposer.ffi.NULL:
        buffer[0] = b"\0"
    size[0] = 0
    return SUCCESS


@cuda()
def cudaLogsDumpToFile(iterator, pathToFile, flags):
    _no_flags(flags, "cudaLogsDumpToFile")
    path = interposer.ffi.string(out_pointer(pathToFile, "pathToFile")).decode(errors="surrogateescape")
    try:
        open(path, "ab").close()
    except OSError as exc:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaLogsDumpToFile: {path}: {exc.strerror}") from None
    return SUCCESS
