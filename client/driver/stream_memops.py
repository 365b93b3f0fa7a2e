"""CUDA driver API: stream memory operations: cuStreamWriteValue32/64,
cuStreamWaitValue32/64 and cuStreamBatchMemOp, each under its CUDA 8/9
name, its _v2 name (what cuda.h calls since CUDA 11.7) and their _ptsz
variants.

A call is checked here, as the driver checks it before enqueuing anything,
and becomes one `stream_mem_ops` request (rcuda/stream_memops.py) posted in
its stream without waiting, as a launch is (so a capturing stream records it
as a batch memory operation node).  The server runs the operations in order
in the stream; a failure there is an asynchronous error, reported by a later
call.

The words must be device memory of the stream's GPU (cuMemAlloc,
cudaMalloc, a pool's, a VMM mapping): anything else rcuda does not know is
CUDA_ERROR_INVALID_VALUE, as is managed memory (CUDA refuses it too); mapped
host memory, whose device copy rcuda keeps in step only at synchronisations,
and another GPU's memory are CUDA_ERROR_NOT_SUPPORTED.  A write's
CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER is accepted and the write keeps its
barrier.  CU_STREAM_WAIT_VALUE_FLUSH and CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES
need the GPU's CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES (the sim's is 0:
CUDA_ERROR_NOT_SUPPORTED, as on such a GPU).  The memory barrier operation
is the v2 API's only.
"""
from __future__ import annotations

from rcuda import stream_memops as rules
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..memory import pointers
from ..interposer import stream_of
from .registry import SUCCESS, driver
from .streams import check_stream

#: The runtime's name of CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES.
CAN_FLUSH = "cudaDevAttrCanFlushRemoteWrites"


def _invalid(call: str, why: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {why}")


def _not_supported(call: str, why: str) -> CudaError:
    return CudaError(cudaError.cudaErrorNotSupported, f"{call}: {why}")


def _checked(call: str, op: list, device) -> list:
    """`op` ([kind, address, value, flags]) if the driver would take it for
    `device`'s stream."""
    why = rules.problem(op)
    if why is not None:
        raise _invalid(call, why)
    kind, address, _, flags = op
    if (kind in rules.WAITS and flags & rules.WAIT_FLUSH) or kind == rules.FLUSH_REMOTE_WRITES:
        if not device.attributes.get(CAN_FLUSH, 0):
            raise _not_supported(call, f"{device.label} cannot flush remote writes "
                                       f"(CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0)")
    width = rules.WIDTH.get(kind)
    if width is None:
        return op
    info = pointers.describe(interposer.rt, address)
    if info.kind == "managed":
        raise _invalid(call, f"{address:#x} is managed memory, which stream memory operations do not take")
    if info.kind == "host":
        raise _not_supported(call, f"{address:#x} is mapped host memory: rcuda runs stream memory operations "
                                   f"on device memory only")
    allocation = interposer.rt.allocations.find(address, width)
    if info.kind != "device" or allocation is None:
        raise _invalid(call, f"{address:#x}..+{width} is not inside a device allocation")
    if allocation.device is not device:
        raise _not_supported(call, f"{address:#x} is memory of {allocation.device.label}, the stream's GPU is "
                                   f"{device.label}: rcuda runs stream memory operations on the stream's own GPU")
    return op


def _stream(call: str, hStream, per_thread: bool):
    check_stream(hStream, call)
    return stream_of(hStream, per_thread)


def _post(call: str, stream, ops: list) -> int:
    """Every operation checked, then all of them in one request."""
    checked = [_checked(call, op, stream.device) for op in ops]
    if checked:
        stream.device.post("stream_mem_ops", stream=stream.id, ops=checked)
    return SUCCESS


# ------------------------------------------------------------------ one operation


@driver("cuStreamWriteValue32_v2", "cuStreamWriteValue32", stream_variants=True)
def cuStreamWriteValue32_v2(stream, addr, value, flags, per_thread=False):
    call = "cuStreamWriteValue32"
    return _post(call, _stream(call, stream, per_thread), [[rules.WRITE_VALUE_32, addr, value, flags]])


@driver("cuStreamWriteValue64_v2", "cuStreamWriteValue64", stream_variants=True)
def cuStreamWriteValue64_v2(stream, addr, value, flags, per_thread=False):
    call = "cuStreamWriteValue64"
    return _post(call, _stream(call, stream, per_thread), [[rules.WRITE_VALUE_64, addr, value, flags]])


@driver("cuStreamWaitValue32_v2", "cuStreamWaitValue32", stream_variants=True)
def cuStreamWaitValue32_v2(stream, addr, value, flags, per_thread=False):
    call = "cuStreamWaitValue32"
    return _post(call, _stream(call, stream, per_thread), [[rules.WAIT_VALUE_32, addr, value, flags]])


@driver("cuStreamWaitValue64_v2", "cuStreamWaitValue64", stream_variants=True)
def cuStreamWaitValue64_v2(stream, addr, value, flags, per_thread=False):
    call = "cuStreamWaitValue64"
    return _post(call, _stream(call, stream, per_thread), [[rules.WAIT_VALUE_64, addr, value, flags]])


# ------------------------------------------------------------------ batches


def batch_ops(call: str, count: int, paramArray, v2: bool = True) -> list:
    """A CUstreamBatchMemOpParams array as wire operations (rcuda/stream_memops.py)."""
    if count > rules.MAX_OPS:
        raise _invalid(call, f"count {count}: at most {rules.MAX_OPS} operations")
    if count and paramArray == interposer.ffi.NULL:
        raise _invalid(call, "paramArray is NULL")
    ops = []
    for i in range(count):
        param = paramArray[i]
        kind = param.operation
        if kind in rules.WIDTH:
            fields = param.waitValue if kind in rules.WAITS else param.writeValue
            value = fields.value64 if rules.WIDTH[kind] == 8 else fields.value
            ops.append([kind, fields.address, value, fields.flags])
        elif kind == rules.FLUSH_REMOTE_WRITES or (kind == rules.BARRIER and v2):
            ops.append([kind, 0, 0, param.memoryBarrier.flags])  # both {operation, flags}
        else:
            raise _invalid(call, f"paramArray[{i}].operation {kind} is not a CUstreamBatchMemOpType"
                                 + (" of the v1 API (its barrier is the v2 API's)" if kind == rules.BARRIER else ""))
    return ops


def _batch(call: str, stream, count, paramArray, flags, per_thread: bool, v2: bool) -> int:
    if flags != 0:
        raise _invalid(call, f"flags {flags:#x} (must be 0)")
    resolved = _stream(call, stream, per_thread)
    return _post(call, resolved, batch_ops(call, count, paramArray, v2))


@driver(stream_variants=True)
def cuStreamBatchMemOp_v2(stream, count, paramArray, flags, per_thread=False):
    return _batch("cuStreamBatchMemOp", stream, count, paramArray, flags, per_thread, v2=True)


@driver(stream_variants=True)
def cuStreamBatchMemOp(stream, count, paramArray, flags, per_thread=False):
    """CUDA 8's: the same operations but the memory barrier."""
    return _batch("cuStreamBatchMemOp", stream, count, paramArray, flags, per_thread, v2=False)
