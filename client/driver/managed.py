"""CUDA driver API: managed memory's hints and queries (cuStreamAttachMemAsync,
cuMemAdvise, cuMemPrefetchAsync, the batch prefetches and discards,
cuMemRangeGetAttribute(s)).

client/runtime/managed.py's functions behind the driver's names: they are
checked and recorded, move no data, and the range attributes answer from
that record.  CUmemLocation, CUmem_advise and CUmem_range_attribute are the
runtime's cudaMemLocation, cudaMemoryAdvise and cudaMemRangeAttribute.  The
legacy cuMemAdvise and cuMemPrefetchAsync (CUDA 8's ABI) take a CUdevice,
CU_DEVICE_CPU for the host.  cuMemAllocManaged is client/driver/memory.py's.
"""
from __future__ import annotations

from .. import interposer
from ..runtime import managed as runtime_managed
from .registry import driver, from_runtime, require_initialized
from .streams import check_stream

#: cuda.h's CU_DEVICE_CPU: the host, where a legacy call takes a CUdevice.
DEVICE_CPU = -1


def _location(device: int):
    """The CUmemLocation a legacy call's CUdevice stands for."""
    lib = interposer.lib
    kind = lib.CU_MEM_LOCATION_TYPE_HOST if device == DEVICE_CPU else lib.CU_MEM_LOCATION_TYPE_DEVICE
    return interposer.ffi.new("CUmemLocation *", {"type": kind, "id": 0 if device == DEVICE_CPU else device})[0]


@driver(stream_variants=True)
def cuStreamAttachMemAsync(hStream, dptr, length, flags, per_thread=False):
    check_stream(hStream, "cuStreamAttachMemAsync")
    return from_runtime(runtime_managed.cudaStreamAttachMemAsync(hStream, dptr, length, flags, per_thread))


@driver()
def cuMemAdvise_v2(devPtr, count, advice, location):
    require_initialized()
    return from_runtime(runtime_managed.cudaMemAdvise(devPtr, count, advice, location))


@driver()
def cuMemAdvise(devPtr, count, advice, device):
    return cuMemAdvise_v2(devPtr, count, advice, _location(device))


@driver(stream_variants=True)
def cuMemPrefetchAsync_v2(devPtr, count, location, flags, hStream, per_thread=False):
    check_stream(hStream, "cuMemPrefetchAsync")
    return from_runtime(runtime_managed.cudaMemPrefetchAsync(devPtr, count, location, flags, hStream, per_thread))


@driver(stream_variants=True)
def cuMemPrefetchAsync(devPtr, count, dstDevice, hStream, per_thread=False):
    return cuMemPrefetchAsync_v2(devPtr, count, _location(dstDevice), 0, hStream, per_thread)


@driver()
def cuMemRangeGetAttribute(data, dataSize, attribute, devPtr, count):
    require_initialized()
    return from_runtime(runtime_managed.cudaMemRangeGetAttribute(data, dataSize, attribute, devPtr, count))


@driver()
def cuMemRangeGetAttributes(data, dataSizes, attributes, numAttributes, devPtr, count):
    require_initialized()
    return from_runtime(runtime_managed.cudaMemRangeGetAttributes(data, dataSizes, attributes, numAttributes, devPtr,
                                                                  count))


@driver(stream_variants=True)
def cuMemPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream,
                            per_thread=False):
    check_stream(hStream, "cuMemPrefetchBatchAsync")
    return from_runtime(runtime_managed.cudaMemPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs,
                                                                  numPrefetchLocs, flags, hStream, per_thread))


@driver(stream_variants=True)
def cuMemDiscardBatchAsync(dptrs, sizes, count, flags, hStream, per_thread=False):
    """The contents become undefined: keeping them is one way to be that."""
    check_stream(hStream, "cuMemDiscardBatchAsync")
    return from_runtime(runtime_managed.cudaMemDiscardBatchAsync(dptrs, sizes, count, flags, hStream, per_thread))


@driver(stream_variants=True)
def cuMemDiscardAndPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                                      hStream, per_thread=False):
    check_stream(hStream, "cuMemDiscardAndPrefetchBatchAsync")
    return from_runtime(runtime_managed.cudaMemDiscardAndPrefetchBatchAsync(
        dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, per_thread))
