"""CUDA runtime functions: IPC memory handles (cudaIpcGetMemHandle,
cudaIpcOpenMemHandle, cudaIpcCloseMemHandle).

Two client processes using the same GPU of one server share memory through
it (server/ipc.py): the exporting process's session offers the allocation,
the handle says where to ask (the GPU's UUID, the session worker's name)
and carries the export's secret token; the opening process's session maps
the same bytes.  Processes on other servers' GPUs cannot open it, as two
hosts' GPUs cannot share memory.

Events cannot be shared (cudaDevAttrIpcEventSupport reads 0):
cudaIpcGetEventHandle and cudaIpcOpenEventHandle answer cudaErrorNotSupported.
"""
from __future__ import annotations

import os
import struct
import threading

from rcuda.errors import CudaError, cudaError

from .. import interposer
from .core import SUCCESS, cuda
from ..interposer import address, out_pointer

#: cudaIpcMemHandle_t's 64 bytes: magic, the GPU's UUID, the worker's name, the token, the size.
HANDLE = struct.Struct("<8s16s16s16sQ")
MAGIC = b"rcudaIPC"
#: cudaIpcOpenMemHandle's one flag.
LAZY_ENABLE_PEER_ACCESS = 0x1


def rt():
    return interposer.rt


class Opened:
    """Handles this process opened: the same handle opened again gives the
    same pointer, counted, as CUDA does."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_token: dict[bytes, list] = {}  # token -> [device, ptr, opens]
        self.by_ptr: dict[int, bytes] = {}


_opened = Opened()


def _forget_opened() -> None:
    """In a forked child: what the parent opened is the parent's."""
    global _opened
    _opened = Opened()


os.register_at_fork(after_in_child=_forget_opened)


def get_handle(ptr: int, call: str) -> bytes:
    allocation = rt().allocations.find(ptr)
    if allocation is None or allocation.base != ptr:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {ptr:#x} is not the start of a device allocation")
    device = allocation.device
    reply, _ = device.request("ipc_export", ptr=ptr)
    return HANDLE.pack(MAGIC, bytes(device.properties.get("uuid", b"")).ljust(16, b"\0")[:16],
                       bytes.fromhex(reply["worker"]), bytes.fromhex(reply["token"]), reply["size"])


def open_handle(raw: bytes, flags: int, call: str) -> int:
    magic, uuid, worker, token, _ = HANDLE.unpack(raw)
    if magic != MAGIC:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"{call}: not a handle cudaIpcGetMemHandle made")
    if flags & ~LAZY_ENABLE_PEER_ACCESS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: flags {flags:#x}")
    with _opened.lock:
        known = _opened.by_token.get(token)
        if known is not None:
            known[2] += 1
            return known[1]
    device = next((d for d in rt().devices if bytes(d.properties.get("uuid", b"")).ljust(16, b"\0")[:16] == uuid),
                  None)
    if device is None:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        f"{call}: the handle's GPU is none of this process's (another server's, or not in "
                        f"RCUDA_SERVERS / CUDA_VISIBLE_DEVICES)")
    reply, _ = device.request("ipc_open", worker=worker.hex(), token=token.hex())
    ptr, size = reply["ptr"], reply["size"]
    rt().allocations.add(ptr, size, device)
    with _opened.lock:
        _opened.by_token[token] = [device, ptr, 1]
        _opened.by_ptr[ptr] = token
    return ptr


def close_handle(ptr: int, call: str) -> None:
    with _opened.lock:
        token = _opened.by_ptr.get(ptr)
        if token is None:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {ptr:#x} is not memory cudaIpcOpenMemHandle "
                                                             f"returned")
        entry = _opened.by_token[token]
        entry[2] -= 1
        if entry[2]:
            return
        del _opened.by_token[token], _opened.by_ptr[ptr]
    device = entry[0]
    rt().allocations.remove(ptr)
    device.request("ipc_close", ptr=ptr)


@cuda()
def cudaIpcGetMemHandle(handle, devPtr):
    out_pointer(handle, "handle")
    raw = get_handle(address(devPtr), "cudaIpcGetMemHandle")
    interposer.ffi.memmove(handle, raw, len(raw))
    return SUCCESS


@cuda()
def cudaIpcOpenMemHandle(devPtr, handle, flags):
    out_pointer(devPtr, "devPtr")
    raw = bytes(interposer.ffi.buffer(interposer.ffi.addressof(handle), HANDLE.size))
    devPtr[0] = interposer.ffi.cast("void *", open_handle(raw, flags, "cudaIpcOpenMemHandle"))
    return SUCCESS


@cuda()
def cudaIpcCloseMemHandle(devPtr):
    close_handle(address(devPtr), "cudaIpcCloseMemHandle")
    return SUCCESS
