"""CUDA runtime functions: managed memory (client/memory/managed.py).

cudaFree of a managed allocation, cudaPointerGetAttributes and copies of
managed memory are client/runtime/memory.py's; `__managed__` variables are
registered by client/runtime/core.py.
"""
from __future__ import annotations

from rcuda.errors import CudaError, cudaError

from .. import interposer
from .core import SUCCESS, cuda
from ..interposer import address, out_pointer, stream_of
from ..memory.managed import ADVICE, CPU


def rt():
    return interposer.rt


def ffi():
    return interposer.ffi


@cuda()
def cudaMallocManaged(devPtr, size, flags):
    out_pointer(devPtr, "devPtr")
    devPtr[0] = ffi().cast("void *", rt().managed.allocate(rt(), rt().device(), size, flags))
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamAttachMemAsync(stream, devPtr, length, flags, per_thread=False):
    """Recorded, not sent: which streams may use the memory changes nothing
    in how rcuda keeps its copies in step."""
    rt().managed.attach(rt().fast, stream_of(stream, per_thread), address(stream) == 0, address(devPtr), length, flags)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemPrefetchAsync(devPtr, count, location, flags, stream, per_thread=False):
    _prefetch("cudaMemPrefetchAsync", [(address(devPtr), count)], [location], [0], flags, stream, per_thread)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, stream,
                              per_thread=False):
    _prefetch("cudaMemPrefetchBatchAsync", _ranges(dptrs, sizes, count), _locations(prefetchLocs, numPrefetchLocs),
              _location_indices(prefetchLocIdxs, numPrefetchLocs, count), flags, stream, per_thread)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemDiscardBatchAsync(dptrs, sizes, count, flags, stream, per_thread=False):
    """The contents become undefined: keeping them is one way to be that."""
    _check_flags("cudaMemDiscardBatchAsync", flags)
    stream_of(stream, per_thread)
    for ptr, size in _ranges(dptrs, sizes, count):
        rt().managed.find(ptr, size, "cudaMemDiscardBatchAsync")
    return SUCCESS


@cuda(stream_variants=True)
def cudaMemDiscardAndPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                                        stream, per_thread=False):
    _prefetch("cudaMemDiscardAndPrefetchBatchAsync", _ranges(dptrs, sizes, count),
              _locations(prefetchLocs, numPrefetchLocs), _location_indices(prefetchLocIdxs, numPrefetchLocs, count),
              flags, stream, per_thread)
    return SUCCESS


def _prefetch(call: str, ranges, locations, first_of_location, flags, stream, per_thread) -> None:
    """Prefetches are recorded (cudaMemRangeAttributeLastPrefetchLocation).
    The host's writes reach the device before its next operation anyway; a
    range prefetched to the host comes back at the next synchronisation in
    one piece, not where the host touches it (native/mapped_memory.c)."""
    _check_flags(call, flags)
    stream_of(stream, per_thread)
    managed, devices = rt().managed, len(rt().devices)
    wheres = [managed.location(location, call, devices) for location in locations]
    found = [(managed.find(ptr, size, call), ptr, size) for ptr, size in ranges]  # all checked first
    for i, (allocation, ptr, size) in enumerate(found):
        where = wheres[max(j for j, first in enumerate(first_of_location) if first <= i)]
        allocation.prefetched(ptr, size, where)
        if where == CPU and not allocation.variable:
            rt().fast.mirror_prefetch(allocation.mirror.slot, ptr - allocation.mirror.host, size)


def _check_flags(call: str, flags: int) -> None:
    if flags != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: flags must be 0, not {flags}")


def _ranges(dptrs, sizes, count: int) -> list[tuple[int, int]]:
    if count == 0 or dptrs == ffi().NULL or sizes == ffi().NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, "a batch of no ranges, or NULL dptrs/sizes")
    return [(address(dptrs[i]), sizes[i]) for i in range(count)]


def _locations(locations, number: int) -> list:
    if number == 0 or locations == ffi().NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, "a batch prefetch with no locations")
    return [locations[i] for i in range(number)]


def _location_indices(indices, number: int, count: int) -> list[int]:
    """prefetchLocIdxs: location j applies from range indices[j] on; the
    first must be 0 and they must increase."""
    if indices == ffi().NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, "prefetchLocIdxs is NULL")
    firsts = [indices[j] for j in range(number)]
    if firsts[0] != 0 or any(b <= a for a, b in zip(firsts, firsts[1:])) or firsts[-1] >= count:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"prefetchLocIdxs {firsts}: must start at 0, increase and stay below count {count}")
    return firsts


#: Advice whose location matters (the others ignore it).
LOCATED_ADVICE = {ADVICE["cudaMemAdviseSetPreferredLocation"], ADVICE["cudaMemAdviseSetAccessedBy"],
                  ADVICE["cudaMemAdviseUnsetAccessedBy"]}


@cuda()
def cudaMemAdvise(devPtr, count, advice, location):
    managed = rt().managed
    where = managed.location(location, "cudaMemAdvise", len(rt().devices)) if advice in LOCATED_ADVICE else None
    managed.advise(address(devPtr), count, advice, where)
    return SUCCESS


@cuda()
def cudaMemRangeGetAttribute(data, dataSize, attribute, devPtr, count):
    out_pointer(data, "data")
    values = rt().managed.range_attribute(attribute, address(devPtr), count, dataSize, len(rt().devices))
    out = ffi().cast("int *", data)
    for i, value in enumerate(values):
        out[i] = value
    return SUCCESS


@cuda()
def cudaMemRangeGetAttributes(data, dataSizes, attributes, numAttributes, devPtr, count):
    if numAttributes == 0 or ffi().NULL in (data, dataSizes, attributes):
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaMemRangeGetAttributes: no attributes, or NULL arrays")
    for i in range(numAttributes):
        cudaMemRangeGetAttribute(data[i], dataSizes[i], attributes[i], devPtr, count)
    return SUCCESS
