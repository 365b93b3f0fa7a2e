"""CUDA runtime functions: IPC memory handles (cudaIpcGetMemHandle,
cudaIpcOpenMemHandle, cudaIpcCloseMemHandle), and the byte formats of
shared memory pools (client/runtime/pools.py's cudaMemPoolExport* and
cudaMemPoolImport*), which travel the same way.

Two client processes using the same GPU of one server share memory through
it (server/ipc.py): the exporting process's session offers the allocation,
the handle says where to ask (the GPU's UUID, the session worker's name)
and carries the export's secret token; the opening process's session maps
the same bytes.  Processes on other servers' GPUs cannot open it, as two
hosts' GPUs cannot share memory.

A pool's shareable handle is a file descriptor of a memfd holding a
record (the GPU's UUID and the pool's 16 random bytes); the program passes
it to other processes by its own means (SCM_RIGHTS, fork).  A pointer's
export data (cudaMemPoolPtrExportData) carries the pool's bytes and the
block's IPC export, which cudaMemPoolImportPointer opens as
cudaIpcOpenMemHandle does; cudaFree closes it.

An event made with cudaEventInterprocess is shared the same way
(cudaIpcGetEventHandle, cudaIpcOpenEventHandle): the opening process's
session opens the exporting one's event on the server (the sim: its last
record's time in a memory file both map; a GPU server: the driver's own IPC
event), so a record in either process is what a query, a synchronisation or
a stream wait in the other sees.
"""
from __future__ import annotations

import fcntl
import os
import stat
import struct
import threading

from rcuda._generated.cuda_enums import MACROS
from rcuda.errors import CudaError, cudaError

from .. import interposer
from .core import SUCCESS, cuda
from ..interposer import address, out_pointer

#: cudaIpcMemHandle_t's 64 bytes: magic, the GPU's UUID, the worker's name, the token, the size.
HANDLE = struct.Struct("<8s16s16s16sQ")
MAGIC = b"rcudaIPC"
#: cudaIpcOpenMemHandle's one flag.
LAZY_ENABLE_PEER_ACCESS = 0x1
#: cudaMemPoolPtrExportData's 64 bytes: magic, the pool's share id, the worker's name, the token, the size.
POINTER = struct.Struct("<8s16s16s16sQ")
POINTER_MAGIC = b"rcudaPTR"
#: What a pool's shareable handle (a memfd) holds: magic, the GPU's UUID, the pool's share id.
POOL_RECORD = struct.Struct("<8s16s16s")
POOL_MAGIC = b"rcudaMPL"
#: What a physical allocation's shareable handle (a memfd) holds: magic, the GPU's UUID, the worker's name, the
#: token, the size.
PHYSICAL_RECORD = struct.Struct("<8s16s16s16sQ")
PHYSICAL_MAGIC = b"rcudaVMM"
#: cudaIpcEventHandle_t's 64 bytes: magic, the GPU's UUID, the worker's name, the token.
EVENT_HANDLE = struct.Struct("<8s16s16s16s8x")
EVENT_MAGIC = b"rcudaEVT"
EVENT_INTERPROCESS = MACROS["cudaEventInterprocess"]
EVENT_DISABLE_TIMING = MACROS["cudaEventDisableTiming"]
#: Who opened memory: a handle (cudaIpcOpenMemHandle) or a pool's pointer
#: (cudaMemPoolImportPointer), each closed only by its own call.
BY_HANDLE, BY_POOL = "handle", "pool"


def rt():
    return interposer.rt


class Opened:
    """Handles this process opened: the same handle opened again gives the
    same pointer, counted, as CUDA does."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_token: dict[tuple, list] = {}  # (BY_HANDLE or BY_POOL, token) -> [device, ptr, opens, Allocation]
        self.by_ptr: dict[int, tuple] = {}


_opened = Opened()


def _forget_opened() -> None:
    """In a forked child: what the parent opened is the parent's."""
    global _opened
    _opened = Opened()


os.register_at_fork(after_in_child=_forget_opened)


def _uuid(device) -> bytes:
    return bytes(device.properties.get("uuid", b"")).ljust(16, b"\0")[:16]


def _export(ptr: int) -> tuple:
    """The server's offer of the allocation starting at `ptr`: (device, worker, token, size)."""
    allocation = rt().allocations.find(ptr)
    device = allocation.device
    reply, _ = device.request("ipc_export", ptr=ptr)
    return device, bytes.fromhex(reply["worker"]), bytes.fromhex(reply["token"]), reply["size"]


def get_handle(ptr: int, call: str) -> bytes:
    allocation = rt().allocations.find(ptr)
    if allocation is None or allocation.base != ptr:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {ptr:#x} is not the start of a device allocation")
    device, worker, token, size = _export(ptr)
    return HANDLE.pack(MAGIC, _uuid(device), worker, token, size)


def open_handle(raw: bytes, flags: int, call: str) -> int:
    magic, uuid, worker, token, _ = HANDLE.unpack(raw)
    if magic != MAGIC:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"{call}: not a handle cudaIpcGetMemHandle made")
    if flags & ~LAZY_ENABLE_PEER_ACCESS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: flags {flags:#x}")
    return _open(_device_of(uuid, call), worker, token, BY_HANDLE)


def get_event_handle(handle: int, call: str) -> bytes:
    """The 64 bytes of cudaIpcGetEventHandle for event `handle`."""
    event = rt().streams.event(handle)
    if not event.flags & EVENT_INTERPROCESS:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        f"{call}: the event was not made with cudaEventInterprocess")
    reply, _ = event.device.request("ipc_event_export", event=event.id)
    return EVENT_HANDLE.pack(EVENT_MAGIC, _uuid(event.device), bytes.fromhex(reply["worker"]),
                             bytes.fromhex(reply["token"]))


def open_event_handle(raw: bytes, call: str) -> int:
    """cudaIpcOpenEventHandle: another process's event, as an event of ours."""
    magic, uuid, worker, token = EVENT_HANDLE.unpack(raw)
    if magic != EVENT_MAGIC:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"{call}: not a handle cudaIpcGetEventHandle made")
    flags = EVENT_INTERPROCESS | EVENT_DISABLE_TIMING
    return rt().streams.create_event(_device_of(uuid, call), flags, shared=(worker.hex(), token.hex())).handle


def _device_of(uuid: bytes, call: str):
    """This process's GPU of a handle's UUID."""
    device = next((d for d in rt().devices if _uuid(d) == uuid), None)
    if device is None:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        f"{call}: the handle's GPU is none of this process's (another server's, or not in "
                        f"RCUDA_SERVERS / CUDA_VISIBLE_DEVICES)")
    return device


def _entry(key):
    """(Under the lock.) What was opened as `key`, unless cudaDeviceReset
    has unmapped it since (then it is forgotten)."""
    entry = _opened.by_token.get(key)
    if entry is not None and rt().allocations.find(entry[1]) is not entry[3]:
        del _opened.by_token[key], _opened.by_ptr[entry[1]]
        return None
    return entry


def _open(device, worker: bytes, token: bytes, kind: str) -> int:
    """Map another process's export on `device` (once: again, counted)."""
    key = (kind, token)
    with _opened.lock:
        known = _entry(key)
        if known is not None:
            known[2] += 1
            return known[1]
    reply, _ = device.request("ipc_open", worker=worker.hex(), token=token.hex())
    ptr, size = reply["ptr"], reply["size"]
    allocation = rt().allocations.add(ptr, size, device)
    with _opened.lock:
        _opened.by_token[key] = [device, ptr, 1, allocation]
        _opened.by_ptr[ptr] = key
    return ptr


def opened_from_pool(ptr: int) -> bool:
    """Whether `ptr` is memory cudaMemPoolImportPointer mapped (cudaFree closes it)."""
    with _opened.lock:
        key = _opened.by_ptr.get(ptr)
        return key is not None and key[0] == BY_POOL and _entry(key) is not None


def close_handle(ptr: int, call: str, kind: str = BY_HANDLE) -> None:
    with _opened.lock:
        key = _opened.by_ptr.get(ptr)
        if key is None or key[0] != kind or _entry(key) is None:
            what = "cudaIpcOpenMemHandle" if kind == BY_HANDLE else "cudaMemPoolImportPointer"
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {ptr:#x} is not memory {what} returned")
        entry = _opened.by_token[key]
        entry[2] -= 1
        if entry[2]:
            return
        del _opened.by_token[key], _opened.by_ptr[ptr]
    device = entry[0]
    rt().allocations.remove(ptr)
    device.request("ipc_close", ptr=ptr)


# ------------------------------------------------------------------ memory pools (client/runtime/pools.py)


def sealed_record(raw: bytes) -> int:
    """A new descriptor of a sealed memfd holding `raw`, for the program
    (it owns it, and closes it): a pool's or a physical allocation's
    shareable handle."""
    fd = os.memfd_create("rcuda-handle", os.MFD_ALLOW_SEALING)  # no CLOEXEC: a child may exec and inherit it
    try:
        os.write(fd, raw)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
                    | fcntl.F_SEAL_SEAL)
    except OSError:
        os.close(fd)
        raise
    return fd


def read_sealed_record(fd: int, record: struct.Struct, magic: bytes, what: str, call: str) -> tuple:
    """The fields of a record sealed_record made (its GPU of this process
    first, for the UUID after the magic); cudaErrorInvalidValue for any other descriptor."""
    try:
        if not 0 <= fd < 1 << 31 or not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"not a file descriptor of {what}")
        raw = os.pread(fd, record.size + 1, 0)
    except OSError as exc:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: descriptor {fd}: {exc}") from None
    if len(raw) != record.size or not raw.startswith(magic):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: descriptor {fd} is not {what}")
    _, uuid, *fields = record.unpack(raw)
    device = next((d for d in rt().devices if _uuid(d) == uuid), None)
    if device is None:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: the handle's GPU is none of this process's (another server's, or not in "
                        f"RCUDA_SERVERS / CUDA_VISIBLE_DEVICES)")
    return (device, *fields)


def pool_handle(device, share_id: bytes) -> int:
    """cudaMemPoolExportToShareableHandle: a new descriptor naming the pool."""
    return sealed_record(POOL_RECORD.pack(POOL_MAGIC, _uuid(device), share_id))


def read_pool_handle(fd: int, call: str) -> tuple:
    """(the GPU of this process, the pool's share id) that a descriptor
    pool_handle made names; cudaErrorInvalidValue for anything else."""
    return read_sealed_record(fd, POOL_RECORD, POOL_MAGIC, "a pool's shareable handle "
                              "(cudaMemPoolExportToShareableHandle)", call)


def physical_handle(device, worker: bytes, token: bytes, size: int) -> int:
    """cuMemExportToShareableHandle: a new descriptor naming a physical
    allocation's export (server/ipc.py)."""
    return sealed_record(PHYSICAL_RECORD.pack(PHYSICAL_MAGIC, _uuid(device), worker, token, size))


def read_physical_handle(fd: int, call: str) -> tuple:
    """(the GPU of this process, worker, token, size) of physical_handle's descriptor."""
    return read_sealed_record(fd, PHYSICAL_RECORD, PHYSICAL_MAGIC, "a physical allocation's shareable handle "
                              "(cuMemExportToShareableHandle)", call)


def export_block(ptr: int, share_id: bytes) -> bytes:
    """cudaMemPoolExportPointer: the 64 bytes that name the pool's block at `ptr`."""
    _, worker, token, size = _export(ptr)
    return POINTER.pack(POINTER_MAGIC, share_id, worker, token, size)


def import_block(raw: bytes, device, share_id: bytes, call: str) -> int:
    """cudaMemPoolImportPointer into the imported pool `share_id` on
    `device`: the block mapped here.  What CUDA documents for a bad or
    stale export is cudaErrorInvalidValue."""
    magic, pool_id, worker, token, _ = POINTER.unpack(raw)
    if magic != POINTER_MAGIC:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: not data cudaMemPoolExportPointer made")
    if pool_id != share_id:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: the pointer is another pool's")
    try:
        return _open(device, worker, token, BY_POOL)
    except CudaError as exc:
        if exc.status in (cudaError.cudaErrorInvalidResourceHandle, cudaError.cudaErrorDeviceUninitialized):
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {exc}") from None
        raise


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


@cuda()
def cudaIpcGetEventHandle(handle, event):
    out_pointer(handle, "handle")
    raw = get_event_handle(address(event), "cudaIpcGetEventHandle")
    interposer.ffi.memmove(handle, raw, len(raw))
    return SUCCESS


@cuda()
def cudaIpcOpenEventHandle(event, handle):
    out_pointer(event, "event")
    raw = bytes(interposer.ffi.buffer(interposer.ffi.addressof(handle), EVENT_HANDLE.size))
    event[0] = interposer.ffi.cast("cudaEvent_t", open_event_handle(raw, "cudaIpcOpenEventHandle"))
    return SUCCESS
