"""CUDA runtime functions: device memory, copies, memsets, symbols, pinned
host memory, pointer attributes.

Copies are checked against the allocation map before they travel: a range
that is not inside one of this process's allocations is cudaErrorInvalidValue
at the call, as CUDA reports it.

Asynchronous copies follow CUDA's rules for where the host memory is:
  * pinned memory (cudaHostAlloc, cudaHostRegister): the copy is ordered in
    its stream and returns at once; the source is read when the message is
    sent (after any host function before it in the stream, which may have
    filled it), the destination filled when the bytes arrive, before any
    later synchronisation returns;
  * pageable memory: a host-to-device copy returns once the source is read
    (a snapshot), a device-to-host copy only once it is complete, so the
    program may touch its buffer right after the call, as CUDA allows.

Mapped host memory (client/memory/mapped.py) has a host and a device copy:
copies and memsets that touch it are made on its device copy, in their
stream, and one that returns synchronously brings the result to the host
copy before it returns.
"""
from __future__ import annotations

import logging

from rcuda._generated.cuda_enums import ENUMS, MACROS
from rcuda import copy_kinds
from rcuda.protocol import MAX_BATCH_COPIES
from rcuda.errors import CudaError, cudaError

from .. import graphs, interposer
from ..capture import Recording
from ..memory import pointers
from ..streams import LEGACY_STREAM_ID
from . import ipc
from .core import SUCCESS, cuda
from ..interposer import address, out_pointer, stream_of

log = logging.getLogger(__name__)

KINDS = ENUMS["cudaMemcpyKind"]
HOST_TO_HOST = KINDS["cudaMemcpyHostToHost"]
HOST_TO_DEVICE = KINDS["cudaMemcpyHostToDevice"]
DEVICE_TO_HOST = KINDS["cudaMemcpyDeviceToHost"]
DEVICE_TO_DEVICE = KINDS["cudaMemcpyDeviceToDevice"]
DEFAULT = KINDS["cudaMemcpyDefault"]

MEMORY_TYPES = ENUMS["cudaMemoryType"]
P2P_ATTRIBUTES = {number: name for name, number in ENUMS["cudaDeviceP2PAttr"].items()}
HOST_ALLOC_PORTABLE = MACROS["cudaHostAllocPortable"]
HOST_ALLOC_MAPPED = MACROS["cudaHostAllocMapped"]
HOST_REGISTER_MAPPED = MACROS["cudaHostRegisterMapped"]
#: cudaPointerAttributes.device for memory CUDA knows nothing about.
UNREGISTERED_DEVICE = -2


def rt():
    return interposer.rt


def ffi():
    return interposer.ffi


# ------------------------------------------------------------------ allocation


@cuda()
def cudaMalloc(devPtr, size):
    out_pointer(devPtr, "devPtr")
    rt().captures.check_unsafe("cudaMalloc")
    devPtr[0] = ffi().cast("void *", allocate(rt().device(), size))
    return SUCCESS


def allocate(device, size: int) -> int:
    """Device memory on `device`, in the allocation map (0 for 0 bytes)."""
    ptr = device.malloc(size)
    if ptr:
        rt().allocations.add(ptr, size, device)
    return ptr


def graph_memory(device, size: int, call: str) -> graphs.GraphMemory:
    """Memory of a graph's alloc node (client/graphs.py, GraphMemory)."""
    if size <= 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: a graph allocation of {size} bytes")
    table = rt().graphs

    def last_release(block):
        table.memory.pop(block.ptr, None)
        if rt().allocations.find(block.ptr) is not None and not block.device.link.failed:
            block.device.free(block.ptr)
            rt().allocations.remove(block.ptr)

    block = graphs.GraphMemory(allocate(device, size), size, device, last_release)
    table.memory[block.ptr] = block
    return block


@cuda()
def cudaFree(devPtr):
    """Memory from a pool (cudaMallocAsync) goes back to its pool, its work
    done: CUDA makes the program vouch for that and does not synchronise.
    Another process's pool memory (cudaMemPoolImportPointer) is unmapped."""
    ptr = address(devPtr)
    if ptr == 0:
        rt().device()  # cudaFree(0) initialises the runtime, nothing more
        return SUCCESS
    if rt().managed.is_managed(ptr):
        rt().managed.free(rt(), ptr)
        return SUCCESS
    if rt().pools.owner(ptr) is not None:
        rt().pools.free(ptr)
        return SUCCESS
    if ipc.opened_from_pool(ptr):  # cudaMemPoolImportPointer's: unmapped at its last free
        ipc.close_handle(ptr, "cudaFree", ipc.BY_POOL)
        return SUCCESS
    if ptr in rt().graphs.memory:  # a graph's: its use ends, the memory stays for the graph's next launch
        return SUCCESS
    mirror = rt().mapped.find(ptr)
    if mirror is not None:
        what = "managed memory, not an allocation's start (freed already?)" if mirror.managed else \
            "mapped host memory (cudaFreeHost or cudaHostUnregister frees it)"
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaFree of {ptr:#x}: that is {what}")
    allocation = rt().allocations.find(ptr)
    if allocation is None or allocation.base != ptr:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaFree of {ptr:#x}: not an allocation's start")
    allocation.device.free(ptr)
    rt().allocations.remove(ptr)
    return SUCCESS


@cuda()
def cudaMallocPitch(devPtr, pitch, width, height):
    out_pointer(devPtr, "devPtr")
    out_pointer(pitch, "pitch")
    ptr, pitch[0] = allocate_pitched(rt().device(), width, height)
    devPtr[0] = ffi().cast("void *", ptr)
    return SUCCESS


def allocate_pitched(device, width: int, height: int) -> tuple[int, int]:
    """(address, pitch) of `height` rows of `width` bytes on `device`, each
    row starting at the GPU's texture alignment."""
    alignment = device.properties.get("textureAlignment") or 512
    row = -(-width // alignment) * alignment if width else 0
    return allocate(device, row * height), row


@cuda()
def cudaMemGetInfo(free, total):
    out_pointer(free, "free")
    out_pointer(total, "total")
    free[0], total[0] = rt().device().mem_info()
    return SUCCESS


# ------------------------------------------------------------------ 1-D copies


def _device_of(ptr: int, size: int, what: str):
    allocation = rt().allocations.find(ptr, size)
    if allocation is None:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what} {ptr:#x}..+{size} is not inside a device allocation")
    return allocation.device


def _check_kind(kind: int, dst: int, src: int, count: int) -> int:
    """The copy's direction (rcuda/copy_kinds.py): `kind`, or for
    cudaMemcpyDefault what the allocation map says of each side."""
    allocations = rt().allocations
    return copy_kinds.checked_kind(kind, allocations.find(dst, count) is not None,
                                   allocations.find(src, count) is not None)


def _stream_on(device, stream) -> int:
    """The id of `stream` on `device`, where the copy runs.  A copy into
    another device's memory than the stream's keeps the stream's order by
    waiting for the stream first, then runs in the memory's device's legacy
    stream."""
    if stream is None:
        return 0
    if stream.device is device:
        return stream.id
    stream.device.request("stream_sync", stream=stream.id)
    return 0


def _after_downloads_into(device, ptr: int, count: int) -> None:
    """An upload from pinned memory that asynchronous downloads still in
    flight will write (their bytes land when their replies arrive): hold
    the device's later messages back until they have (client/memory/host.py)."""
    gate = rt().pending_downloads.gate_for(ptr, count)
    if gate is not None:
        device.link.add_gate(gate)


def _host_view(ptr: int, count: int) -> memoryview:
    return memoryview(ffi().buffer(ffi().cast("char *", ptr), count))


def _pinned(ptr: int, count: int) -> bool:
    return rt().host_memory.find(ptr, count) is not None


def _write_host(ptr: int, frames) -> None:
    target = ffi().cast("char *", ptr)
    for frame in frames:
        chunk = frame.buffer
        ffi().memmove(target, chunk, len(chunk))
        target += len(chunk)


# -- mapped host memory (client/memory/mapped.py): the device copy stands for it


def _mapped_involved(*ranges) -> bool:
    mapped = rt().mapped
    return mapped.active and any(mapped.touching(ptr, length) is not None for ptr, length in ranges if length)


def _device_side(ptr: int, length: int, what: str) -> int:
    """Where [ptr, ptr + length) is on a device: a mirror's host copy stands
    for its device copy; other memory is itself."""
    mapped = rt().mapped
    mirror = mapped.on_host(ptr, length)
    if mirror is not None:
        return mirror.to_device(ptr)
    if mapped.touching(ptr, length) is not None and mapped.find(ptr, length) is None:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what} {ptr:#x}..+{length} runs past the edge of mapped host memory")
    return ptr


def _device_wrote(ptr: int, length: int, stream, asynchronous: bool) -> None:
    """[ptr, ptr + length) was written on a device (a copy, a memset): if it
    is a mirror's device copy, the next synchronisation brings it to the host
    copy, and a synchronous call is that synchronisation."""
    mirror = rt().mapped.touching(ptr, length) if length else None
    if mirror is None:
        return
    device = mirror.device
    stream_id = stream.id if stream is not None and stream.device is device else 0
    rt().fast.mirror_written(device, stream_id)
    if not asynchronous:
        device.request("stream_sync", stream=stream_id)  # and the host copy is refreshed


def _check_kind_value(kind: int) -> None:
    if kind not in copy_kinds.DIRECTIONS and kind != DEFAULT:
        raise CudaError(cudaError.cudaErrorInvalidMemcpyDirection, f"cudaMemcpyKind {kind}")


def memcpy(dst: int, src: int, count: int, kind: int, stream=None, asynchronous: bool = False) -> None:
    """cudaMemcpy and cudaMemcpyAsync.  `stream` None means the legacy
    default stream of the devices involved."""
    capture = rt().captures.of(stream) if stream is not None and asynchronous else None
    if capture is not None:  # a memcpy node (client/capture.py)
        capture.add(stream, graphs.MEMCPY, copy_node_params(dst, src, count, kind),
                    copy_work(stream.device, dst, src, count, kind))
        return
    if count and _mapped_involved((dst, count), (src, count)):
        # Mapped memory is on both sides of the bus: its device copy is used,
        # whatever the kind says (with unified addressing, CUDA goes by the pointers).
        _check_kind_value(kind)
        device_dst = _device_side(dst, count, "destination")
        _memcpy(device_dst, _device_side(src, count, "source"), count, DEFAULT, stream, asynchronous)
        _device_wrote(device_dst, count, stream, asynchronous)
        return
    _memcpy(dst, src, count, kind, stream, asynchronous)


def _memcpy(dst: int, src: int, count: int, kind: int, stream=None, asynchronous: bool = False) -> None:
    kind = _check_kind(kind, dst, src, count)
    if count == 0:
        return
    if dst == 0 or src == 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaMemcpy with a NULL pointer")
    if kind == HOST_TO_HOST:
        if asynchronous and stream is not None:  # in stream order: after the stream's earlier copies land
            stream.device.request("stream_sync", stream=stream.id)
        ffi().memmove(ffi().cast("void *", dst), ffi().cast("void *", src), count)
    elif kind == HOST_TO_DEVICE:
        device = _device_of(dst, count, "destination")
        stream_id = _stream_on(device, stream)
        pinned = _pinned(src, count)
        if pinned:  # read as the message goes out: after the downloads into it that came before
            _after_downloads_into(device, src, count)
        if asynchronous:
            # Pinned: read when the message goes out, as CUDA may read it any
            # time before the copy completes.  Pageable: the program may
            # reuse it once we return.
            data = _host_view(src, count) if pinned else memoryview(bytes(_host_view(src, count)))
            device.post("htod", [data], borrowed=pinned, dst=dst, size=count, stream=stream_id)
        else:
            device.copy_to_device(dst, _host_view(src, count), stream_id)
    elif kind == DEVICE_TO_HOST:
        device = _device_of(src, count, "source")
        stream_id = _stream_on(device, stream)
        if asynchronous and _pinned(dst, count):
            pending = rt().pending_downloads
            token = pending.started(dst, count)
            device.post_with_callback("dtoh", lambda reply, frames: _write_host(dst, frames),
                                      finally_=lambda: pending.landed(token), into=_host_view(dst, count),
                                      src=src, size=count, stream=stream_id)
        else:  # into pageable memory CUDA returns only once the copy is complete
            device.copy_from_device(src, count, stream_id, into=_host_view(dst, count))
    else:
        dst_device = _device_of(dst, count, "destination")
        src_device = _device_of(src, count, "source")
        if dst_device is src_device:
            stream_id = _stream_on(dst_device, stream)
            if asynchronous:
                dst_device.post("dtod", dst=dst, src=src, size=count, stream=stream_id)
            else:
                dst_device.copy_on_device(dst, src, count, stream_id)
        else:
            copy_between_devices(dst_device, dst, src_device, src, count, stream, asynchronous,
                                 "cudaMemcpyAsync" if asynchronous else "cudaMemcpy")


def copy_node_params(dst: int, src: int, count: int, kind: int) -> dict:
    """A 1-D memcpy node's parameters, as cudaGraphMemcpyNodeGetParams gives
    them (a box one row high)."""
    return {"dst": dst, "src": src, "count": count, "kind": kind, "summary": f"{count} B {src:#x} -> {dst:#x}"}


def copy_work(device, dst: int, src: int, count: int, kind: int) -> graphs.Work:
    """What a graph's 1-D memcpy node does when the graph runs: a copy
    within `device` is a request the server keeps; one touching host memory
    is made here, at each launch, in the launch's stream (client/graphs.py)."""
    direction = _check_kind(kind, dst, src, count)
    if count == 0:
        return graphs.Work(device)
    if direction == DEVICE_TO_DEVICE and not _mapped_involved((dst, count), (src, count)):
        for ptr, what in ((dst, "destination"), (src, "source")):
            if _device_of(ptr, count, what) is not device:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"a graph memcpy node between GPUs ({what} {ptr:#x} is not on {device.label})")
        with Recording(device) as recording:
            memcpy(dst, src, count, kind, recording.stream, asynchronous=True)
        return recording.work()
    return graphs.Work(device, run=lambda stream: memcpy(dst, src, count, kind, stream, asynchronous=True),
                       writes_host=direction in (DEVICE_TO_HOST, HOST_TO_HOST))


def copy_between_devices(dst_device, dst: int, src_device, src: int, count: int, stream=None,
                         asynchronous: bool = False, call: str = "cudaMemcpy") -> None:
    """A copy between two GPUs: server to server (client/transport/peer.py), never
    through this process; a copy in a stream runs in it there."""
    rt().peer_copies.copy(dst_device, dst, src_device, src, count, synchronous=not asynchronous, call=call,
                          stream=stream)


@cuda("cudaMemcpy", "cudaMemcpy_ptds")
def cudaMemcpy(dst, src, count, kind):
    memcpy(address(dst), address(src), count, kind)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpyAsync(dst, src, count, kind, stream, per_thread=False):
    memcpy(address(dst), address(src), count, kind, stream_of(stream, per_thread), asynchronous=True)
    return SUCCESS


# ------------------------------------------------------------------ several GPUs
# Copies between GPUs go server to server (client/transport/peer.py).  Direct load/store
# (peer access) exists only between GPUs of one server whose backend allows it.


def _peer_range(ptr: int, size: int, ordinal: int, what: str, call: str):
    device = rt().device(ordinal)
    allocation = rt().allocations.find(ptr, size)
    if allocation is None or allocation.device is not device:
        owner = f"it belongs to {allocation.device.label}" if allocation else "it is not inside a device allocation"
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: {what} {ptr:#x}..+{size} is not memory of {device.label}: {owner}")
    return device


def _memcpy_peer(dst, dstDevice, src, srcDevice, count, stream=None, asynchronous: bool = False,
                 call: str = "cudaMemcpyPeer") -> int:
    dst_ptr, src_ptr = address(dst), address(src)
    if count == 0:
        rt().device(dstDevice), rt().device(srcDevice)  # still validates the ordinals
        return SUCCESS
    dst_device = _peer_range(dst_ptr, count, dstDevice, "destination", call)
    src_device = _peer_range(src_ptr, count, srcDevice, "source", call)
    if dst_device is src_device:
        stream_id = _stream_on(dst_device, stream)
        if asynchronous:
            dst_device.post("dtod", dst=dst_ptr, src=src_ptr, size=count, stream=stream_id)
        else:
            dst_device.copy_on_device(dst_ptr, src_ptr, count, stream_id)
    else:
        copy_between_devices(dst_device, dst_ptr, src_device, src_ptr, count, stream, asynchronous, call)
    if rt().mapped.active:
        _device_wrote(dst_ptr, count, stream, asynchronous)
    return SUCCESS


@cuda()
def cudaMemcpyPeer(dst, dstDevice, src, srcDevice, count):
    return _memcpy_peer(dst, dstDevice, src, srcDevice, count)


@cuda()
def cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream):
    """Posts the copy and returns; its errors surface at the destination
    GPU's next synchronising call."""
    return _memcpy_peer(dst, dstDevice, src, srcDevice, count, stream_of(stream), True, "cudaMemcpyPeerAsync")


@cuda()
def cudaDeviceCanAccessPeer(canAccessPeer, device, peerDevice):
    out_pointer(canAccessPeer, "canAccessPeer")
    canAccessPeer[0] = int(rt().peer_copies.can_access(rt().device(device), rt().device(peerDevice)))
    return SUCCESS


@cuda()
def cudaDeviceGetP2PAttribute(value, attr, srcDevice, dstDevice):
    """The link between two GPUs as their server sees it; GPUs of different
    servers have none: every attribute reads 0 (copies still work)."""
    out_pointer(value, "value")
    source, destination = rt().device(srcDevice), rt().device(dstDevice)
    if source is destination:
        raise CudaError(cudaError.cudaErrorInvalidDevice,
                        f"cudaDeviceGetP2PAttribute: {source.label} is both ends of the link")
    name = P2P_ATTRIBUTES.get(attr)
    if name is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDeviceGetP2PAttribute: cudaDeviceP2PAttr {attr}")
    value[0] = rt().peer_copies.link_attribute(source, destination, name)
    return SUCCESS


@cuda()
def cudaDeviceEnablePeerAccess(peerDevice, flags):
    if flags != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDeviceEnablePeerAccess: flags must be 0, not {flags}")
    rt().peer_copies.enable(rt().device(), rt().device(peerDevice))
    return SUCCESS


@cuda()
def cudaDeviceDisablePeerAccess(peerDevice):
    rt().peer_copies.disable(rt().device(), rt().device(peerDevice))
    return SUCCESS


# ------------------------------------------------------------------ batches of copies
# cudaMemcpyBatchAsync (and the driver's cuMemcpyBatchAsync): copies in one
# stream, in no order among themselves, each side found by its pointer (as
# cudaMemcpyDefault).  The copies within the stream's GPU travel as ONE
# copy_batch message: device-to-device copies, and uploads of up to
# BATCH_UPLOAD_PIECE bytes whose source may be read during the call (pageable
# memory, as cudaMemcpyAsync reads it; pinned memory unless its copy must
# read it in stream order).  Every other copy (downloads, copies between
# GPUs or host to host, larger uploads, pinned sources read in stream order,
# mapped and managed memory) takes the one-copy path of cudaMemcpyAsync in
# the same stream.  Every copy is checked before anything is sent: a bad
# batch moves nothing.

SRC_ACCESS_ORDERS = ENUMS["cudaMemcpySrcAccessOrder"]
ORDER_STREAM = SRC_ACCESS_ORDERS["cudaMemcpySrcAccessOrderStream"]
ORDER_DURING_CALL = SRC_ACCESS_ORDERS["cudaMemcpySrcAccessOrderDuringApiCall"]
ORDER_ANY = SRC_ACCESS_ORDERS["cudaMemcpySrcAccessOrderAny"]
#: cudaMemcpyAttributes.flags CUDA knows: cudaMemcpyFlagPreferOverlapWithCompute
#: (driver_types.h's enum cudaMemcpyFlags, not in cuda_enums), a hint.
MEMCPY_FLAGS = 0x1
#: The largest upload that joins its batch's message; a larger one is an
#: htod of its own, which a lane lands straight in device memory.
BATCH_UPLOAD_PIECE = 1 << 20
#: The most upload bytes one copy_batch message carries.
BATCH_PAYLOAD = 64 << 20
#: cuMemcpyBatchAsync's failIdx for an error of no copy in particular (SIZE_MAX).
NO_COPY = 2**64 - 1


class BatchCopyError(CudaError):
    """A batch's failure; `index` is the copy it concerns (NO_COPY: none)."""

    def __init__(self, message: str, index: int = NO_COPY, status: int = cudaError.cudaErrorInvalidValue):
        super().__init__(status, message)
        self.index = index


def batch_from_c(dsts, srcs, sizes, count: int, attrs, attrsIdxs, numAttrs: int, stream, per_thread: bool,
                 call: str) -> None:
    """cudaMemcpyBatchAsync's arguments (cuMemcpyBatchAsync's have the same
    layout) read, checked and copied."""
    if count == 0:
        raise BatchCopyError(f"{call}: count is 0")
    if ffi().NULL in (dsts, srcs, sizes):
        raise BatchCopyError(f"{call}: dsts, srcs and sizes must not be NULL")
    orders = _source_orders(attrs, attrsIdxs, numAttrs, count, call)
    words = [ffi().unpack(ffi().cast("uintptr_t *", array), count) for array in (dsts, srcs, sizes)]
    memcpy_batch(list(zip(*words, orders)), stream_of(stream, per_thread), call)


def _source_orders(attrs, starts, count_attrs: int, count: int, call: str) -> list[int]:
    """The srcAccessOrder of each copy: attrs[k] applies to copies
    attrsIdxs[k] up to the next entry's first.  Checked as CUDA documents
    them; the location hints are ignored (they concern managed and system
    memory on devices accessing it concurrently, which rcuda's are not), and
    so is the flag cudaMemcpyFlagPreferOverlapWithCompute (a hint)."""
    if count_attrs == 0 or count_attrs > count or ffi().NULL in (attrs, starts):
        raise BatchCopyError(f"{call}: {count_attrs} attributes for {count} copies (1 to {count}, not NULL)")
    firsts = ffi().unpack(ffi().cast("size_t *", starts), count_attrs)
    if firsts[0] != 0 or firsts[-1] >= count or any(b <= a for a, b in zip(firsts, firsts[1:])):
        raise BatchCopyError(f"{call}: attrsIdxs must start at 0 and increase, each below count ({count})")
    orders = []
    for k, (first, end) in enumerate(zip(firsts, [*firsts[1:], count])):
        attribute = attrs[k]
        if attribute.srcAccessOrder not in (ORDER_STREAM, ORDER_DURING_CALL, ORDER_ANY):
            raise BatchCopyError(f"{call}: attrs[{k}].srcAccessOrder {attribute.srcAccessOrder}", first)
        if attribute.flags & ~MEMCPY_FLAGS:
            raise BatchCopyError(f"{call}: attrs[{k}].flags {attribute.flags:#x}", first)
        orders += [attribute.srcAccessOrder] * (end - first)
    return orders


def memcpy_batch(copies: list[tuple[int, int, int, int]], stream, call: str = "cudaMemcpyBatchAsync") -> None:
    """A batch of (dst, src, size, srcAccessOrder) copies in `stream` (a
    Stream, not the legacy one).  An order of DuringApiCall is kept: its
    host source is read before this returns, and a device source too (the
    call then waits for the copy)."""
    if stream.id == LEGACY_STREAM_ID:
        raise BatchCopyError(f"{call}: the legacy default stream cannot take a batch of copies")
    device = stream.device
    in_message, alone = [], []  # (kind, dst, src, size, order) and (index, dst, src, size, order)
    for index, (dst, src, size, order) in enumerate(copies):
        if size == 0:
            continue
        try:
            kind = _batch_route(device, dst, src, size, order)
        except CudaError as exc:
            raise BatchCopyError(f"{call}: copy {index}: {exc}", index, exc.status) from None
        if kind is None:
            alone.append((index, dst, src, size, order))
        else:
            in_message.append((kind, dst, src, size, order))
    for fields, frames in _batch_messages(in_message):
        device.post("copy_batch", frames, stream=stream.id, **fields)
    for index, dst, src, size, order in alone:
        try:
            memcpy(dst, src, size, DEFAULT, stream, asynchronous=order != ORDER_DURING_CALL)
        except CudaError as exc:
            raise BatchCopyError(f"{call}: copy {index}: {exc}", index, exc.status) from None
    if any(kind == "copy" and order == ORDER_DURING_CALL for kind, *_, order in in_message):
        device.request("stream_sync", stream=stream.id)  # their device sources are read by now


def _batch_route(device, dst: int, src: int, size: int, order: int) -> str | None:
    """How one copy of a batch on `device` travels: "copy" (device to
    device) or "upload" in the batch's message, None on its own; raises
    for a copy CUDA would refuse."""
    if dst == 0 or src == 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, "a NULL pointer")
    if _mapped_involved((dst, size), (src, size)):
        _device_side(dst, size, "destination")  # refused now, if at all: memcpy translates them later
        _device_side(src, size, "source")
        return None
    dst_device, src_device = _batch_side(dst, size, "destination"), _batch_side(src, size, "source")
    if dst_device is not device:
        return None
    if src_device is device:
        return "copy"
    if src_device is None and size <= BATCH_UPLOAD_PIECE and (order != ORDER_STREAM or not _pinned(src, size)):
        return "upload"
    return None


def _batch_side(ptr: int, size: int, what: str):
    """The device whose allocation holds [ptr, ptr + size), or None for host
    memory; a range that starts in an allocation must end in it."""
    allocation = rt().allocations.find(ptr)
    if allocation is None:
        return None
    if not allocation.contains(ptr, size):
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what} {ptr:#x}..+{size} runs past the end of its allocation on {allocation.device.label}")
    return allocation.device


def _batch_messages(entries):
    """The copy_batch messages carrying `entries`: (fields, frames) each,
    at most protocol.MAX_BATCH_COPIES copies and BATCH_PAYLOAD upload bytes
    (read now) a message."""
    copies, uploads, data, payload = [], [], [], 0
    for kind, dst, src, size, _ in entries:
        if len(copies) // 3 + len(uploads) // 2 == MAX_BATCH_COPIES or \
                (kind == "upload" and payload + size > BATCH_PAYLOAD):
            yield _batch_message(copies, uploads, data)
            copies, uploads, data, payload = [], [], [], 0
        if kind == "copy":
            copies += (dst, src, size)
        else:
            uploads += (dst, size)
            data.append(_host_view(src, size))
            payload += size
    if copies or uploads:
        yield _batch_message(copies, uploads, data)


def _batch_message(copies: list, uploads: list, data: list) -> tuple[dict, list]:
    frames = [memoryview(b"".join(data))] if data else []  # a snapshot: the sources are free once we return
    return {"copies": copies, "uploads": uploads}, frames


@cuda(stream_variants=True)
def cudaMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, per_thread=False):
    batch_from_c(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, per_thread, "cudaMemcpyBatchAsync")
    return SUCCESS


# ------------------------------------------------------------------ memset


def memset(ptr: int, value: int, count: int, stream=None, asynchronous: bool = False, elem: int = 1) -> None:
    """`count` bytes at `ptr` set to `value`'s low `elem` bytes, repeated
    (elem 2 and 4: the driver's cuMemsetD16/D32)."""
    if count == 0:
        return
    if _mapped_involved((ptr, count)):
        # On pinned host memory cudaMemset is synchronous, as CUDA documents.
        ptr = _device_side(ptr, count, "destination")
        _memset(ptr, value, count, stream, asynchronous, elem)
        _device_wrote(ptr, count, stream, asynchronous)
        return
    _memset(ptr, value, count, stream, asynchronous, elem)


def _memset(ptr: int, value: int, count: int, stream=None, asynchronous: bool = False, elem: int = 1) -> None:
    device = _device_of(ptr, count, "destination")
    stream_id = _stream_on(device, stream)
    if asynchronous:
        device.post("memset", ptr=ptr, value=value, size=count, stream=stream_id, elem=elem)
    else:
        device.memset(ptr, value, count, stream_id, elem)


@cuda("cudaMemset", "cudaMemset_ptds")
def cudaMemset(devPtr, value, count):
    memset(address(devPtr), value, count)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemsetAsync(devPtr, value, count, stream, per_thread=False):
    memset(address(devPtr), value, count, stream_of(stream, per_thread), asynchronous=True)
    return SUCCESS


# ------------------------------------------------------------------ symbols


def symbol_address(symbol, device=None) -> tuple[int, int]:
    """(device address, size) of the __device__ variable whose host shadow
    is at `symbol`, on `device` (the current one by default)."""
    variable = rt().kernels.variable(address(symbol))
    return variable_address(variable.module, variable.name, device or rt().device())


def variable_address(module, name: str, device) -> tuple[int, int]:
    """(device address, size) of variable `name` (its device-side name) of
    `module` on `device` (cudaGetSymbolAddress's, cuModuleGetGlobal's)."""
    known = (module.key, name) in device._symbols
    ptr, size = device.symbol(module, name)
    if not known and rt().allocations.find(ptr) is None:
        rt().allocations.add(ptr, size, device)  # so that copies to it are checked like any other
    return ptr, size


def _symbol_range(symbol, count: int, offset: int, what: str) -> int:
    ptr, size = symbol_address(symbol)
    if offset + count > size:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what}: {count} bytes at offset {offset} run past the {size}-byte variable")
    return ptr + offset


def _symbol_kind(kind: int, allowed: int, what: str) -> int:
    if kind not in (allowed, DEVICE_TO_DEVICE, DEFAULT):
        raise CudaError(cudaError.cudaErrorInvalidMemcpyDirection, f"{what}: cudaMemcpyKind {kind}")
    return kind


@cuda("cudaMemcpyToSymbol", "cudaMemcpyToSymbol_ptds")
def cudaMemcpyToSymbol(symbol, src, count, offset, kind):
    kind = _symbol_kind(kind, HOST_TO_DEVICE, "cudaMemcpyToSymbol")
    memcpy(_symbol_range(symbol, count, offset, "cudaMemcpyToSymbol"), address(src), count, kind)
    return SUCCESS


@cuda("cudaMemcpyFromSymbol", "cudaMemcpyFromSymbol_ptds")
def cudaMemcpyFromSymbol(dst, symbol, count, offset, kind):
    kind = _symbol_kind(kind, DEVICE_TO_HOST, "cudaMemcpyFromSymbol")
    memcpy(address(dst), _symbol_range(symbol, count, offset, "cudaMemcpyFromSymbol"), count, kind)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpyToSymbolAsync(symbol, src, count, offset, kind, stream, per_thread=False):
    kind = _symbol_kind(kind, HOST_TO_DEVICE, "cudaMemcpyToSymbolAsync")
    memcpy(_symbol_range(symbol, count, offset, "cudaMemcpyToSymbolAsync"), address(src), count, kind,
           stream_of(stream, per_thread), asynchronous=True)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpyFromSymbolAsync(dst, symbol, count, offset, kind, stream, per_thread=False):
    kind = _symbol_kind(kind, DEVICE_TO_HOST, "cudaMemcpyFromSymbolAsync")
    memcpy(address(dst), _symbol_range(symbol, count, offset, "cudaMemcpyFromSymbolAsync"), count, kind,
           stream_of(stream, per_thread), asynchronous=True)
    return SUCCESS


@cuda()
def cudaGetSymbolAddress(devPtr, symbol):
    out_pointer(devPtr, "devPtr")
    devPtr[0] = ffi().cast("void *", symbol_address(symbol)[0])
    return SUCCESS


@cuda()
def cudaGetSymbolSize(size, symbol):
    out_pointer(size, "size")
    size[0] = rt().kernels.variable(address(symbol)).size
    return SUCCESS


# ------------------------------------------------------------------ pinned host memory


@cuda()
def cudaHostAlloc(pHost, size, flags):
    """With cudaHostAllocMapped, a mirror on the current device
    (client/memory/mapped.py), also with cudaHostAllocPortable: its device
    copy is on that device only.  Otherwise a block that a kernel's launch
    on any device makes that device's mirror (client/memory/pinned.py)."""
    out_pointer(pHost, "pHost")
    if flags & ~0xF:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaHostAlloc flags {flags:#x}")
    device = rt().device()  # initialises the runtime, as cudaHostAlloc does
    host = 0
    if flags & HOST_ALLOC_MAPPED and size:
        host = rt().mapped.allocate(rt(), device, size, flags)
    elif size:
        host = rt().pinned.allocate(rt(), size, flags)  # kernels may use it too (client/memory/pinned.py)
    if host:
        rt().host_memory.add_range(host, size, flags)
    pHost[0] = ffi().cast("void *", host)
    return SUCCESS


@cuda()
def cudaMallocHost(ptr, size):
    return cudaHostAlloc(ptr, size, 0)


@cuda()
def cudaFreeHost(ptr):
    """Synchronises every device first, as CUDA does: queued async copies
    may still read or fill the memory."""
    base = address(ptr)
    found = rt().host_memory.find(base)
    if found is not None and found.base == base:
        for device in rt().opened_devices():
            device.synchronize()
        mirror = rt().mapped.at(base)
        if not rt().pinned.free(rt(), base) and mirror is not None and mirror.allocated:
            rt().mapped.release(rt(), mirror)  # before its pages go
    rt().host_memory.free(base)
    return SUCCESS


@cuda()
def cudaHostRegister(ptr, size, flags):
    """With cudaHostRegisterMapped, a mirror on the current device
    (client/memory/mapped.py): the memory stays where it is, its device
    copy is elsewhere (cudaHostGetDevicePointer)."""
    base = address(ptr)
    host_memory = rt().host_memory
    host_memory.check_registrable(base, size)
    if flags & HOST_REGISTER_MAPPED:
        mirror = rt().mapped.register(rt(), rt().device(), base, size, flags)
        try:
            host_memory.register(base, size, flags)
        except BaseException:
            rt().mapped.release(rt(), mirror)
            raise
    else:
        host_memory.register(base, size, flags)
    return SUCCESS


@cuda()
def cudaHostUnregister(ptr):
    base = address(ptr)
    for device in rt().opened_devices():  # as cudaFreeHost: queued copies may use it
        device.synchronize()
    mirror = rt().mapped.at(base)
    if mirror is not None and not mirror.allocated:
        rt().mapped.release(rt(), mirror)
    rt().host_memory.unregister(base)
    return SUCCESS


@cuda()
def cudaHostGetFlags(pFlags, pHost):
    out_pointer(pFlags, "pFlags")
    found = rt().host_memory.find(address(pHost))
    if found is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaHostGetFlags({address(pHost):#x}): not pinned memory")
    pFlags[0] = found.flags
    return SUCCESS


@cuda()
def cudaHostGetDevicePointer(pDevice, pHost, flags):
    """The device address of mapped host memory: for cudaHostAlloc's the
    host address itself; for registered memory its device copy's."""
    out_pointer(pDevice, "pDevice")
    pDevice[0] = ffi().cast("void *", mapped_device_pointer(address(pHost), flags))
    return SUCCESS


def mapped_device_pointer(ptr: int, flags: int) -> int:
    """The device address of mapped host memory at `ptr`, on the current device."""
    if flags != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaHostGetDevicePointer: flags must be 0, not {flags}")
    if rt().pinned.attach_at(rt(), ptr, rt().device()):
        return ptr  # under unified addressing all page-locked memory is mapped, at its host address
    mirror = rt().mapped.on_host(ptr)
    if mirror is None or mirror.managed:
        pinned = rt().host_memory.find(ptr)
        what = ("managed memory" if mirror is not None else "pinned memory that is not mapped" if pinned is not None
                else "device memory" if rt().allocations.find(ptr) is not None else "not pinned host memory")
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaHostGetDevicePointer({ptr:#x}): {what}")
    device = rt().device()
    if mirror.device is not device:
        if mirror.flags & HOST_ALLOC_PORTABLE:
            raise CudaError(cudaError.cudaErrorNotSupported,
                            f"cudaHostGetDevicePointer({ptr:#x}) on {device.label}: rcuda maps portable memory "
                            f"on the device it was allocated on only ({mirror.device.label})")
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"cudaHostGetDevicePointer({ptr:#x}) on {device.label}: it is mapped on "
                        f"{mirror.device.label}")
    return mirror.to_device(ptr)


@cuda()
def cudaPointerGetAttributes(attributes, ptr):
    out_pointer(attributes, "attributes")
    value = address(ptr)
    attrs = attributes
    ffi().memmove(attrs, bytes(ffi().sizeof(attrs[0])), ffi().sizeof(attrs[0]))
    info = pointers.describe(rt(), value)
    if info.kind == "unknown":  # memory CUDA knows nothing of: still dereferenceable on the host, as CUDA reports it
        attrs.type = MEMORY_TYPES["cudaMemoryTypeUnregistered"]
        attrs.device = UNREGISTERED_DEVICE
        attrs.hostPointer = ffi().cast("void *", value)
        return SUCCESS
    attrs.type = MEMORY_TYPES[POINTER_MEMORY_TYPES[info.kind]]
    attrs.device = info.device.ordinal if info.device is not None else rt().current_ordinal
    attrs.hostPointer = ffi().cast("void *", info.host)
    attrs.devicePointer = ffi().cast("void *", info.device_ptr)
    return SUCCESS


POINTER_MEMORY_TYPES = {"device": "cudaMemoryTypeDevice", "host": "cudaMemoryTypeHost",
                        "managed": "cudaMemoryTypeManaged"}
