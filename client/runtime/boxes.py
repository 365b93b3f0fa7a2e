"""CUDA runtime functions: copies and memsets of boxes of bytes.

A box is `width` bytes by `height` rows by `depth` slices.  Every 2-D and
3-D copy (cudaMemcpy2D/3D, to, from and between CUDA arrays, the
deprecated cudaMemcpyToArray family) is one `copy_box` between two sides:
host memory, device memory (a pointer, its pitch, its rows per slice) or a
CUDA array at an offset.  The bytes cross the network once and packed: the
host side gathers or scatters its rows here (numpy, one pass), the server
does the same with its own pitch, so no row padding travels.

An asynchronous copy from host memory reads it before returning, pinned
memory too (a 1-D copy from pinned memory reads it in stream order); one
into pinned memory whose rows are packed lands before the stream's next
synchronisation, as a 1-D copy does, and one into rows with gaps returns
once done.  Mapped host memory is copied on its device copy.  Large
synchronous copies with gaps in their host rows travel in parts, packed or
unpacked here while the link moves another part.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from rcuda import copy_kinds
from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

from .. import graphs, interposer
from ..capture import Recording
from ..memory.arrays import CudaArray
from .core import SUCCESS, cuda
from .memory import (DEFAULT, DEVICE_TO_DEVICE, DEVICE_TO_HOST, HOST_TO_DEVICE, MEMCPY_FLAGS,
                     ORDER_ANY, ORDER_DURING_CALL, ORDER_STREAM, BatchCopyError, _check_kind_value, _device_side,
                     _device_wrote, _mapped_involved, _pinned, _stream_on, _write_host, allocate_pitched)
from ..streams import LEGACY_STREAM_ID
from ..interposer import address, out_pointer, stream_of

#: Synchronous copies of at least this many bytes whose host rows have gaps
#: travel in parts of about PART_BYTES: one is packed or unpacked here while
#: the link moves another.
PIPELINE_FROM, PART_BYTES = 16 << 20, 2 << 20
#: How long a part's reply callback may lag behind the last part's reply.
PART_WAIT_SECONDS = 30.0
#: The largest staging buffer a thread keeps for its next copy.
KEPT_STAGING_BYTES = 256 << 20
_thread = threading.local()

#: The kinds that put each side on a device: (destination, source).
_DEVICE_SIDES = {copy_kinds.KINDS[name]: sides for sides, name in copy_kinds.INFERRED.items()}


def rt():
    return interposer.rt


def ffi():
    return interposer.ffi


@dataclass(frozen=True)
class Side:
    """One side of a box copy: linear memory at `ptr` (the box's first
    byte) with its pitch and rows per slice, on `device` or on the host
    (None); or `array` with the box at byte x, row y, slice z."""

    ptr: int = 0
    pitch: int = 0
    rows: int = 0
    device: object = None
    array: CudaArray | None = None
    x: int = 0
    y: int = 0
    z: int = 0
    mirrored: bool = False  # mapped host memory: `ptr` is its device copy

    def wire(self) -> dict:
        if self.array is not None:
            return {"array": self.array.server_id, "level": self.array.level, "x": self.x, "y": self.y, "z": self.z}
        return {"ptr": self.ptr, "pitch": self.pitch, "rows": self.rows}

    def span(self, extent) -> int:
        width, height, depth = extent
        return ((depth - 1) * self.rows + (height - 1)) * self.pitch + width

    def at(self, y: int, z: int) -> "Side":
        """The side from row y of slice z of its box on (a part of a copy)."""
        if self.array is not None:
            return dataclasses.replace(self, y=self.y + y, z=self.z + z)
        return dataclasses.replace(self, ptr=self.ptr + (z * self.rows + y) * self.pitch)


def linear_side(ptr: int, pitch: int, rows: int, extent, on_device: bool | None, what: str) -> Side:
    """Linear memory: where the allocation map says it is.  `on_device`
    (from a copy's kind) True requires device memory; None or False accept
    either (with unified addressing CUDA goes by the pointer too)."""
    width, height, depth = extent
    if (height > 1 or depth > 1) and pitch < width:
        raise CudaError(cudaError.cudaErrorInvalidPitchValue,
                        f"{what}: a pitch of {pitch} bytes is less than the width {width}")
    if depth > 1 and rows < height:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: slices of {rows} rows, the box has {height}")
    side = Side(ptr, pitch, rows)
    if not all(extent):
        return side
    span = side.span(extent)
    mirrored = _mapped_involved((ptr, span))
    if mirrored:
        ptr = _device_side(ptr, span, what)
    allocation = rt().allocations.find(ptr, span)
    if allocation is None and on_device:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what} {ptr:#x}..+{span} is not inside a device allocation")
    return Side(ptr, pitch, rows, allocation.device if allocation else None, mirrored=mirrored)


def array_side(array: CudaArray, x: int, y: int, z: int, extent, what: str) -> Side:
    """An array with the box at byte offset x, row y, slice z: inside it, whole texels."""
    width, height, depth = extent
    row_bytes, rows, slices = array.storage()
    if x % array.element_size or width % array.element_size:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what}: {width} bytes at byte {x} of a CUDA array are not whole {array.element_size}-byte "
                        f"elements")
    if x + width > row_bytes or y + height > rows or z + depth > slices:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what}: {width} bytes x {height} x {depth} at ({x}, {y}, {z}) run outside the CUDA array's "
                        f"{row_bytes} bytes x {rows} x {slices}")
    return Side(device=array.device, array=array, x=x, y=y, z=z)


def _host_box(side: Side, extent):
    """Host memory of a side as a writable (depth, height, width) byte view."""
    width, height, depth = extent
    import numpy as np  # here: every program imports this module, few copy boxes
    from numpy.lib.stride_tricks import as_strided

    base = np.frombuffer(ffi().buffer(ffi().cast("char *", side.ptr), side.span(extent)), np.uint8)
    return as_strided(base, shape=(depth, height, width), strides=(side.rows * side.pitch, side.pitch, 1))


def _staging(size: int):
    """This thread's buffer for a synchronous copy's packed bytes, kept for
    the next (fresh memory costs a page fault per 4 KiB: as much again as
    the copy into it)."""
    import numpy as np

    if size > KEPT_STAGING_BYTES:
        return np.empty(size, np.uint8)
    buffer = getattr(_thread, "staging", None)
    if buffer is None or buffer.size < size:
        buffer = _thread.staging = np.empty(size, np.uint8)
    return buffer[:size]


def _packed(side: Side, extent, asynchronous: bool):
    """The host box's bytes, rows and slices back to back: a view where they
    are so and the call waits; else a copy (the thread's staging, for a
    call that waits)."""
    box = _host_box(side, extent)
    if asynchronous:
        return memoryview(box.copy()).cast("B")
    if box.flags.c_contiguous:
        return memoryview(box).cast("B")
    packed = _staging(box.size)
    packed.reshape(box.shape)[...] = box
    return memoryview(packed)


def _scatter(side: Side, extent, packed) -> None:
    import numpy as np

    box = _host_box(side, extent)
    box[...] = np.frombuffer(packed, np.uint8).reshape(box.shape)


def _joined(frames):
    return frames[0].buffer if len(frames) == 1 else b"".join(frame.buffer for frame in frames)


def copy_box(dst: Side, src: Side, extent, stream=None, asynchronous: bool = False, call: str = "cudaMemcpy3D"):
    """Copy the box `extent` (width in bytes, height, depth) from `src` to
    `dst`, in `stream` (None: the legacy stream), as cudaMemcpy3D(Async)."""
    if not all(extent):
        return
    capture = rt().captures.of(stream) if stream is not None and asynchronous else None
    if capture is not None:  # a memcpy node (client/capture.py)
        capture.add(stream, graphs.MEMCPY, box_node_params(dst, src, extent), box_work(stream.device, dst, src, extent, call))
        return
    width, height, depth = extent
    fields = {"extent": [width, height, depth]}
    if dst.device is None and src.device is None:
        if asynchronous and stream is not None:
            stream.device.request("stream_sync", stream=stream.id)
        _host_box(dst, extent)[...] = _host_box(src, extent)
    elif src.device is None:
        device = dst.device
        stream_id = _stream_on(device, stream)
        if not asynchronous and width * height * depth >= PIPELINE_FROM and not _host_box(src, extent).flags.c_contiguous:
            _upload_in_parts(device, dst, src, extent, stream_id)
        else:
            data = _packed(src, extent, asynchronous)
            op = device.post if asynchronous else device.request
            op("htod3d", [data], dst=dst.wire(), stream=stream_id, **fields)
    elif dst.device is None:
        device = src.device
        stream_id = _stream_on(device, stream)
        box = _host_box(dst, extent)
        if asynchronous and box.flags.c_contiguous and _pinned(dst.ptr, box.size):
            # As a 1-D download into pinned memory: the bytes land in place as
            # the reply is read, before any later reply (a synchronisation's).
            pending = rt().pending_downloads
            token = pending.started(dst.ptr, box.size)
            device.post_with_callback("dtoh3d", lambda reply, frames: _write_host(dst.ptr, frames),
                                      finally_=lambda: pending.landed(token), into=memoryview(box).cast("B"),
                                      src=src.wire(), stream=stream_id, **fields)
        else:
            # Into pageable memory CUDA returns once the copy is complete; into
            # pinned rows with gaps too (they are unpacked here, which a later
            # synchronisation could not wait for).
            if box.flags.c_contiguous:
                _, frames = device.request("dtoh3d", into=memoryview(box).cast("B"), src=src.wire(), stream=stream_id,
                                           **fields)
                _write_host(dst.ptr, frames)  # (frames only where it did not land in `into`)
            elif width * height * depth >= PIPELINE_FROM:
                _download_in_parts(device, dst, src, extent, stream_id)
            else:
                packed = _staging(width * height * depth)
                _, frames = device.request("dtoh3d", into=memoryview(packed), src=src.wire(), stream=stream_id,
                                           **fields)
                _scatter(dst, extent, _joined(frames) if frames else packed)
    elif dst.device is src.device:
        device = dst.device
        op = device.post if asynchronous else device.request
        op("dtod3d", dst=dst.wire(), src=src.wire(), stream=_stream_on(device, stream), **fields)
    else:
        # Between GPUs: through this process, in the order of both (rare: a
        # program's 3-D peer copies).
        _, frames = src.device.request("dtoh3d", src=src.wire(), stream=_stream_on(src.device, stream), **fields)
        packed = memoryview(_joined(frames))
        dst.device.request("htod3d", [packed], dst=dst.wire(), stream=_stream_on(dst.device, stream), **fields)
    if dst.mirrored:
        _device_wrote(dst.ptr, dst.span(extent), stream, asynchronous)


def box_node_params(dst: Side, src: Side, extent) -> dict:
    return {"box": (dst, src, tuple(extent)), "summary": "{} x {} x {} B".format(*extent)}


def box_work(device, dst: Side, src: Side, extent, call: str) -> graphs.Work:
    """What a graph's memcpy node of a box does when the graph runs: a copy
    within one GPU is a request the server keeps; one touching host memory
    is made here, at each launch (client/graphs.py)."""
    if dst.device is not None and dst.device is src.device and not dst.mirrored and not src.mirrored:
        with Recording(dst.device) as recording:
            copy_box(dst, src, extent, recording.stream, True, call)
        return recording.work()
    if dst.device is not None and src.device is not None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: a graph memcpy node between GPUs")
    return graphs.Work(dst.device or src.device or device,
                       run=lambda stream: copy_box(dst, src, extent, stream, True, call),
                       writes_host=dst.device is None)


def _parts(extent):
    """A large box as parts of whole rows of one slice, about PART_BYTES
    each: (row, slice, rows)."""
    width, height, depth = extent
    rows = max(1, min(height, PART_BYTES // width))
    return [(y, z, min(rows, height - y)) for z in range(depth) for y in range(0, height, rows)]


def _upload_in_parts(device, dst: Side, src: Side, extent, stream_id: int) -> None:
    """A large upload whose rows have gaps, as a message per part: each part
    is packed while the link's thread sends the one before (the packed
    bytes are lent to C, and stay put until the last part's reply), and the
    last part waits for the whole copy, as cudaMemcpy does."""
    width = extent[0]
    box, packed = _host_box(src, extent), _staging(width * extent[1] * extent[2])
    parts, offset = _parts(extent), 0
    for index, (y, z, rows) in enumerate(parts):
        piece = packed[offset:offset + rows * width]
        piece.reshape(rows, width)[...] = box[z, y:y + rows]
        fields = dict(dst=dst.at(y, z).wire(), extent=[width, rows, 1], stream=stream_id)
        if index < len(parts) - 1:
            device.post("htod3d", [memoryview(piece)], borrowed=True, **fields)
        else:
            device.request("htod3d", [memoryview(piece)], **fields)
        offset += rows * width


def _download_in_parts(device, dst: Side, src: Side, extent, stream_id: int) -> None:
    """A large download into rows with gaps, as a message per part, all
    sent at once: the server packs one part while the link moves another,
    each lands in this thread's staging as its reply is read, and the last
    part's reply (which comes after all the others, with any failure of
    theirs) ends the wait; then the parts are unpacked."""
    width = extent[0]
    packed = _staging(width * extent[1] * extent[2])
    parts, offset, delivered = _parts(extent), 0, []
    for index, (y, z, rows) in enumerate(parts):
        piece = packed[offset:offset + rows * width]
        fields = dict(into=memoryview(piece), src=src.at(y, z).wire(), extent=[width, rows, 1], stream=stream_id)
        if index < len(parts) - 1:
            done = threading.Event()
            device.post_with_callback("dtoh3d", lambda reply, frames, piece=piece: _fill(piece, frames),
                                      finally_=done.set, **fields)
            delivered.append(done)
        else:
            _, frames = device.request("dtoh3d", **fields)
            _fill(piece, frames)
        offset += rows * width
    for done in delivered:  # their replies came first; their callbacks may still be finishing
        if not done.wait(PART_WAIT_SECONDS):
            raise CudaError(cudaError.cudaErrorUnknown, f"cudaMemcpy3D from {device.label}: a part's reply "
                                                        f"was not delivered in {PART_WAIT_SECONDS:.0f} s")
    _scatter(dst, extent, packed)


def _fill(piece, frames) -> None:
    """A reply's bytes that did not land in `into` (a ZeroMQ link)."""
    import numpy as np

    if frames and sum(len(frame.buffer) for frame in frames):
        piece[...] = np.frombuffer(_joined(frames), np.uint8)


def copy_linear(dst: int, dpitch: int, drows: int, src: int, spitch: int, srows: int, extent, kind: int,
                stream=None, asynchronous: bool = False, call: str = "cudaMemcpy2D") -> None:
    """A box between two linear sides, by the copy's kind."""
    _check_kind_value(kind)
    dst_device, src_device = _DEVICE_SIDES.get(kind, (None, None))
    copy_box(linear_side(dst, dpitch, drows, extent, dst_device, f"{call}: destination"),
             linear_side(src, spitch, srows, extent, src_device, f"{call}: source"), extent, stream, asynchronous,
             call)


def memset_box(ptr: int, pitch: int, rows: int, value: int, extent, stream=None, asynchronous: bool = False,
               elem: int = 1, call: str = "cudaMemset3D") -> None:
    """Set a box of device memory as memset sets bytes (elem: the pattern's size)."""
    side = linear_side(ptr, pitch, rows, extent, True, call)
    if not all(extent):
        return
    device = side.device
    op = device.post if asynchronous else device.request
    op("memset3d", dst=side.wire(), value=value, extent=list(extent), stream=_stream_on(device, stream), elem=elem)
    if side.mirrored:
        _device_wrote(side.ptr, side.span(extent), stream, asynchronous)


# ------------------------------------------------------------------ 2-D


@cuda("cudaMemcpy2D", "cudaMemcpy2D_ptds")
def cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind):
    copy_linear(address(dst), dpitch, height, address(src), spitch, height, (width, height, 1), kind)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream, per_thread=False):
    copy_linear(address(dst), dpitch, height, address(src), spitch, height, (width, height, 1), kind,
                stream_of(stream, per_thread), True, "cudaMemcpy2DAsync")
    return SUCCESS


@cuda("cudaMemset2D", "cudaMemset2D_ptds")
def cudaMemset2D(devPtr, pitch, value, width, height):
    memset_box(address(devPtr), pitch, height, value, (width, height, 1), call="cudaMemset2D")
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemset2DAsync(devPtr, pitch, value, width, height, stream, per_thread=False):
    memset_box(address(devPtr), pitch, height, value, (width, height, 1), stream_of(stream, per_thread), True,
               call="cudaMemset2DAsync")
    return SUCCESS


# ------------------------------------------------------------------ 3-D


@cuda()
def cudaMalloc3D(pitchedDevPtr, extent):
    """Rows of extent.width bytes at the texture alignment, height x depth of them."""
    out_pointer(pitchedDevPtr, "pitchedDevPtr")
    ptr, pitch = allocate_pitched(rt().device(), extent.width, extent.height * extent.depth)
    pitched = pitchedDevPtr[0]
    pitched.ptr, pitched.pitch = ffi().cast("void *", ptr), pitch
    pitched.xsize, pitched.ysize = extent.width, extent.height
    return SUCCESS


def _memset_3d(pitched, value, extent, stream=None, asynchronous=False, call="cudaMemset3D") -> None:
    memset_box(address(pitched.ptr), pitched.pitch, pitched.ysize, value, (extent.width, extent.height, extent.depth),
               stream, asynchronous, call=call)


@cuda("cudaMemset3D", "cudaMemset3D_ptds")
def cudaMemset3D(pitchedDevPtr, value, extent):
    _memset_3d(pitchedDevPtr, value, extent)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemset3DAsync(pitchedDevPtr, value, extent, stream, per_thread=False):
    _memset_3d(pitchedDevPtr, value, extent, stream_of(stream, per_thread), True, "cudaMemset3DAsync")
    return SUCCESS


def _side_3d(array_handle, pos, pitched, extent_bytes, on_device, what: str) -> Side:
    """One side of a cudaMemcpy3DParms: an array (pos.x in elements) or a
    pitched pointer (pos.x in bytes)."""
    handle = address(array_handle)
    if handle:
        array = rt().arrays.get(handle, what)
        return array_side(array, pos.x * array.element_size, pos.y, pos.z, extent_bytes, what)
    base = address(pitched.ptr)
    if not base and all(extent_bytes):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: neither an array nor a pointer")
    offset = (pos.z * pitched.ysize + pos.y) * pitched.pitch + pos.x
    return linear_side(base + offset, pitched.pitch, pitched.ysize, extent_bytes, on_device, what)


def copy_3d(p, stream=None, asynchronous: bool = False, call: str = "cudaMemcpy3D", kind: int | None = None) -> None:
    """cudaMemcpy3D's parameters: the extent counts elements when an array
    takes part, bytes otherwise."""
    copy_box(*sides_3d(p, call, kind), stream, asynchronous, call)


def sides_3d(p, call: str, kind: int | None = None) -> tuple[Side, Side, tuple]:
    """(destination, source, extent in bytes) of a cudaMemcpy3DParms."""
    kind = p.kind if kind is None else kind
    _check_kind_value(kind)
    if address(p.srcArray) and address(p.srcPtr.ptr) or address(p.dstArray) and address(p.dstPtr.ptr):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: a side with both an array and a pointer")
    element = 1
    for handle in (p.srcArray, p.dstArray):
        if address(handle):
            element = rt().arrays.get(address(handle), call).element_size
            break
    extent = (p.extent.width * element, p.extent.height, p.extent.depth)
    dst_device, src_device = _DEVICE_SIDES.get(kind, (None, None))
    dst = _side_3d(p.dstArray, p.dstPos, p.dstPtr, extent, dst_device, f"{call}: destination")
    src = _side_3d(p.srcArray, p.srcPos, p.srcPtr, extent, src_device, f"{call}: source")
    return dst, src, extent


@cuda("cudaMemcpy3D", "cudaMemcpy3D_ptds")
def cudaMemcpy3D(p):
    copy_3d(out_pointer(p, "p"))
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpy3DAsync(p, stream, per_thread=False):
    copy_3d(out_pointer(p, "p"), stream_of(stream, per_thread), True, "cudaMemcpy3DAsync")
    return SUCCESS


def _copy_3d_peer(p, stream=None, asynchronous=False, call="cudaMemcpy3DPeer") -> None:
    """As cudaMemcpy3D, between the named devices (each side is found by its
    pointer or array anyway; the ordinals must exist)."""
    out_pointer(p, "p")
    rt().device(p.srcDevice), rt().device(p.dstDevice)
    params = ffi().new("struct cudaMemcpy3DParms *")
    for side in ("src", "dst"):
        setattr(params, side + "Array", getattr(p, side + "Array"))
        setattr(params, side + "Pos", getattr(p, side + "Pos"))
        setattr(params, side + "Ptr", getattr(p, side + "Ptr"))
    params.extent = p.extent
    copy_3d(params, stream, asynchronous, call, kind=DEFAULT)


@cuda("cudaMemcpy3DPeer", "cudaMemcpy3DPeer_ptds")
def cudaMemcpy3DPeer(p):
    _copy_3d_peer(p)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpy3DPeerAsync(p, stream, per_thread=False):
    _copy_3d_peer(p, stream_of(stream, per_thread), True, "cudaMemcpy3DPeerAsync")
    return SUCCESS


# ------------------------------------------------------------------ to and from arrays (2-D)


def _array(handle, call: str) -> CudaArray:
    return rt().arrays.get(address(handle), call)


def _to_array(dst, w_offset, h_offset, src, spitch, width, height, kind, stream=None, asynchronous=False,
              call="cudaMemcpy2DToArray") -> None:
    _check_kind_value(kind)
    extent = (width, height, 1)
    copy_box(array_side(_array(dst, call), w_offset, h_offset, 0, extent, f"{call}: destination"),
             linear_side(address(src), spitch, height, extent, kind == DEVICE_TO_DEVICE, f"{call}: source"),
             extent, stream, asynchronous, call)


def _from_array(dst, dpitch, src, w_offset, h_offset, width, height, kind, stream=None, asynchronous=False,
                call="cudaMemcpy2DFromArray") -> None:
    _check_kind_value(kind)
    extent = (width, height, 1)
    copy_box(linear_side(address(dst), dpitch, height, extent, kind == DEVICE_TO_DEVICE, f"{call}: destination"),
             array_side(_array(src, call), w_offset, h_offset, 0, extent, f"{call}: source"),
             extent, stream, asynchronous, call)


@cuda("cudaMemcpy2DToArray", "cudaMemcpy2DToArray_ptds")
def cudaMemcpy2DToArray(dst, wOffset, hOffset, src, spitch, width, height, kind):
    _to_array(dst, wOffset, hOffset, src, spitch, width, height, kind)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpy2DToArrayAsync(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, per_thread=False):
    _to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, stream_of(stream, per_thread), True,
              "cudaMemcpy2DToArrayAsync")
    return SUCCESS


@cuda("cudaMemcpy2DFromArray", "cudaMemcpy2DFromArray_ptds")
def cudaMemcpy2DFromArray(dst, dpitch, src, wOffset, hOffset, width, height, kind):
    _from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpy2DFromArrayAsync(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, per_thread=False):
    _from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream_of(stream, per_thread), True,
                "cudaMemcpy2DFromArrayAsync")
    return SUCCESS


@cuda("cudaMemcpy2DArrayToArray", "cudaMemcpy2DArrayToArray_ptds")
def cudaMemcpy2DArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind):
    call = "cudaMemcpy2DArrayToArray"
    _check_kind_value(kind)
    extent = (width, height, 1)
    copy_box(array_side(_array(dst, call), wOffsetDst, hOffsetDst, 0, extent, f"{call}: destination"),
             array_side(_array(src, call), wOffsetSrc, hOffsetSrc, 0, extent, f"{call}: source"), extent)
    return SUCCESS


# ------------------------------------------------------------------ the deprecated 1-D forms
# `count` bytes from (wOffset, hOffset) on, row after row of the array: at
# most three boxes (the rest of the first row, whole rows, a last part row).


def _runs(array: CudaArray, w_offset: int, h_offset: int, count: int, call: str):
    """(x, y, width, rows, offset into the linear side) of each box."""
    row_bytes, rows, _ = array.storage()
    if w_offset >= row_bytes and count or w_offset + count > row_bytes * (rows - h_offset):
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: {count} bytes from ({w_offset}, {h_offset}) run past the CUDA array's end")
    runs, done, x, y = [], 0, w_offset, h_offset
    if x and count:
        first = min(row_bytes - x, count)
        runs.append((x, y, first, 1, 0))
        done, x, y = first, 0, y + 1
    whole = (count - done) // row_bytes
    if whole:
        runs.append((0, y, row_bytes, whole, done))
        done, y = done + whole * row_bytes, y + whole
    if count > done:
        runs.append((0, y, count - done, 1, done))
    return runs


def linear_array_copy(array_handle, w_offset, h_offset, linear, count, kind, to_array: bool, stream=None,
                      asynchronous=False, call="cudaMemcpyToArray") -> None:
    """`count` bytes between linear memory and an array from (w_offset,
    h_offset) on, row after row (the driver's cuMemcpyHtoA & co. too)."""
    _check_kind_value(kind)
    array = _array(array_handle, call)
    for x, y, width, rows, offset in _runs(array, w_offset, h_offset, count, call):
        extent = (width, rows, 1)
        place = array_side(array, x, y, 0, extent, call)
        flat = linear_side(linear + offset, width, rows, extent, kind == DEVICE_TO_DEVICE, call)
        copy_box(place, flat, extent, stream, asynchronous, call) if to_array else \
            copy_box(flat, place, extent, stream, asynchronous, call)


@cuda("cudaMemcpyToArray", "cudaMemcpyToArray_ptds")
def cudaMemcpyToArray(dst, wOffset, hOffset, src, count, kind):
    linear_array_copy(dst, wOffset, hOffset, address(src), count, kind, True)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpyToArrayAsync(dst, wOffset, hOffset, src, count, kind, stream, per_thread=False):
    linear_array_copy(dst, wOffset, hOffset, address(src), count, kind, True, stream_of(stream, per_thread), True,
                      "cudaMemcpyToArrayAsync")
    return SUCCESS


@cuda("cudaMemcpyFromArray", "cudaMemcpyFromArray_ptds")
def cudaMemcpyFromArray(dst, src, wOffset, hOffset, count, kind):
    linear_array_copy(src, wOffset, hOffset, address(dst), count, kind, False, call="cudaMemcpyFromArray")
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemcpyFromArrayAsync(dst, src, wOffset, hOffset, count, kind, stream, per_thread=False):
    linear_array_copy(src, wOffset, hOffset, address(dst), count, kind, False, stream_of(stream, per_thread), True,
                      "cudaMemcpyFromArrayAsync")
    return SUCCESS


@cuda("cudaMemcpyArrayToArray", "cudaMemcpyArrayToArray_ptds")
def cudaMemcpyArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind):
    """Two arrays whose rows need not line up: through a buffer here (the
    call is deprecated and rare; cudaMemcpy2DArrayToArray stays on the GPU)."""
    call = "cudaMemcpyArrayToArray"
    _check_kind_value(kind)
    buffer = ffi().new("char[]", max(count, 1))
    linear_array_copy(src, wOffsetSrc, hOffsetSrc, address(buffer), count, DEVICE_TO_HOST, False, call=call)
    linear_array_copy(dst, wOffsetDst, hOffsetDst, address(buffer), count, HOST_TO_DEVICE, True, call=call)
    return SUCCESS


# ------------------------------------------------------------------ batches of boxes
# cudaMemcpy3DBatchAsync and the driver's cuMemcpy3DBatchAsync (their
# operand structures have the same fields): each copy is a box, sent as
# cudaMemcpy3DAsync sends it, in the batch's stream; every copy is checked
# before any is sent, so a refused batch copies nothing.

OPERAND_POINTER = ENUMS["cudaMemcpy3DOperandType"]["cudaMemcpyOperandTypePointer"]
OPERAND_ARRAY = ENUMS["cudaMemcpy3DOperandType"]["cudaMemcpyOperandTypeArray"]


def _operand(operand, element: int, extent, what: str) -> Side:
    """One side of a batch copy; `extent` in bytes (width) and rows/slices."""
    if operand.type == OPERAND_ARRAY:
        array = rt().arrays.get(address(operand.op.array.array), what)
        offset = operand.op.array.offset
        return array_side(array, offset.x * element, offset.y, offset.z, extent, what)
    if operand.type != OPERAND_POINTER:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: operand type {operand.type}")
    ptr = operand.op.ptr
    row_length, layer_height = ptr.rowLength, ptr.layerHeight  # 0: packed as the extent
    if row_length and row_length * element < extent[0] or layer_height and layer_height < extent[1]:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: rows of {row_length} and layers of "
                                                         f"{layer_height} hold no box of {extent}")
    pitch = row_length * element if row_length else extent[0]
    return linear_side(address(ptr.ptr), pitch, layer_height or extent[1], extent, None, what)


def _element(operand, call: str) -> int | None:
    if operand.type != OPERAND_ARRAY:
        return None
    return rt().arrays.get(address(operand.op.array.array), call).element_size


def batch_3d(ops, count: int, flags: int, stream, call: str) -> None:
    """`count` copies of `ops` (cudaMemcpy3DBatchOp or CUDA_MEMCPY3D_BATCH_OP)
    in `stream`; failures are BatchCopyErrors naming the copy."""
    if flags:
        raise BatchCopyError(f"{call}: flags must be 0, not {flags}")
    if count and ops == ffi().NULL:
        raise BatchCopyError(f"{call}: {count} copies at NULL")
    if stream.id == LEGACY_STREAM_ID:
        raise BatchCopyError(f"{call}: the legacy default stream cannot take a batch of copies")
    copies = []
    for index in range(count):
        op, what = ops[index], f"{call}: copy {index}"
        try:
            if op.srcAccessOrder not in (ORDER_STREAM, ORDER_DURING_CALL, ORDER_ANY) or op.flags & ~MEMCPY_FLAGS:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{what}: srcAccessOrder {op.srcAccessOrder}, flags {op.flags:#x}")
            sizes = {_element(op.src, what), _element(op.dst, what)} - {None}
            if len(sizes) > 1:
                raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: arrays of different element sizes")
            element = sizes.pop() if sizes else 1
            extent = (op.extent.width * element, op.extent.height, op.extent.depth)
            if not all(extent):
                raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: an empty extent")
            dst, src = _operand(op.dst, element, extent, f"{what} destination"), \
                _operand(op.src, element, extent, f"{what} source")
        except CudaError as exc:
            raise BatchCopyError(str(exc), index, exc.status) from None
        # Read during the call: the call waits for a source on a device
        # (a host source is read before the call returns anyway).
        copies.append((dst, src, extent, op.srcAccessOrder == ORDER_DURING_CALL and src.device is not None))
    for dst, src, extent, waits in copies:
        copy_box(dst, src, extent, stream, not waits, call)


@cuda(stream_variants=True)
def cudaMemcpy3DBatchAsync(numOps, opList, flags, stream, per_thread=False):
    batch_3d(opList, numOps, flags, stream_of(stream, per_thread), "cudaMemcpy3DBatchAsync")
    return SUCCESS
