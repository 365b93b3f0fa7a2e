"""The runtime's device notifications: cudaDeviceRegisterAsyncNotification
and cudaDeviceUnregisterAsyncNotification.

A callback is kept, per device, until it is unregistered, and never called:
the notifications of the servers' drivers (over-budget memory, for one) are
not forwarded to the program.
"""
from __future__ import annotations

import threading

from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..driver.handles import handles
from ..interposer import address, out_pointer
from .core import SUCCESS, cuda

_lock = threading.Lock()
#: handle -> (device ordinal, callback, user data)
_callbacks: dict[int, tuple[int, object, object]] = {}


@cuda()
def cudaDeviceRegisterAsyncNotification(device, callbackFunc, userData, callback):
    """Succeeds and keeps the callback, which is never called: the servers'
    drivers' notifications are not forwarded."""
    interposer.rt.device(device)  # cudaErrorInvalidDevice
    out_pointer(callbackFunc, "callbackFunc")
    out_pointer(callback, "callback")
    with _lock:
        handle = handles.new_handle()  # a number no other handle has
        _callbacks[handle] = (device, callbackFunc, userData)
    callback[0] = interposer.ffi.cast("cudaAsyncCallbackHandle_t", handle)
    return SUCCESS


@cuda()
def cudaDeviceUnregisterAsyncNotification(device, callback):
    """A handle not registered on `device` (or unregistered already) is
    cudaErrorInvalidValue."""
    interposer.rt.device(device)
    handle = address(callback)
    with _lock:
        registered = _callbacks.get(handle)
        if registered is None or registered[0] != device:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaDeviceUnregisterAsyncNotification: {handle:#x} is no callback of device {device}")
        del _callbacks[handle]
    return SUCCESS
