"""CUDA driver API: streams, events, host functions in streams, stream capture.

A CUstream is a cudaStream_t and a CUevent a cudaEvent_t (the same handle
values, client/streams.py), so these are the runtime's functions
(client/runtime/streams.py) behind the driver's checks: a stream or event is
made on the current context's device and belongs to that context; the
special streams (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) mean the
current context's, so they need one.
"""
from __future__ import annotations

from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..runtime import capture as runtime_capture
from ..runtime import streams as runtime_streams
from ..interposer import address, out_pointer, stream_of
from .registry import SUCCESS, driver, from_runtime, require_initialized
from .contexts import contexts, current_context, handle_of
from ..streams import LEGACY_HANDLE, PER_THREAD_HANDLE
from ..capture import GLOBAL as GLOBAL_CAPTURE

#: cuStreamWaitEvent's flags: CU_EVENT_WAIT_DEFAULT, CU_EVENT_WAIT_EXTERNAL (graphs only; a plain wait here).
WAIT_FLAGS = (0, 1)


def check_stream(hStream, call: str) -> None:
    """The special streams are the current context's: CUDA_ERROR_INVALID_CONTEXT without one."""
    if address(hStream) in (0, LEGACY_HANDLE, PER_THREAD_HANDLE):
        current_context(call)
    else:
        require_initialized()


# ------------------------------------------------------------------ streams


@driver()
def cuStreamCreateWithPriority(phStream, flags, priority):
    context = current_context("cuStreamCreate")
    status = runtime_streams.cudaStreamCreateWithPriority(phStream, flags, priority)
    contexts().adopt(context, address(phStream[0]))
    return from_runtime(status)


@driver()
def cuStreamCreate(phStream, Flags):
    return cuStreamCreateWithPriority(phStream, Flags, 0)


@driver("cuStreamDestroy_v2", "cuStreamDestroy")
def cuStreamDestroy_v2(hStream):
    require_initialized()
    return from_runtime(runtime_streams.cudaStreamDestroy(hStream))


def _forward(call: str, runtime_function, hStream, *args, per_thread: bool) -> int:
    """The runtime's function of a stream, after the driver's check."""
    check_stream(hStream, call)
    return from_runtime(runtime_function(hStream, *args, per_thread))


@driver(stream_variants=True)
def cuStreamSynchronize(hStream, per_thread=False):
    return _forward("cuStreamSynchronize", runtime_streams.cudaStreamSynchronize, hStream, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamQuery(hStream, per_thread=False):
    return _forward("cuStreamQuery", runtime_streams.cudaStreamQuery, hStream, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamWaitEvent(hStream, hEvent, Flags, per_thread=False):
    if Flags not in WAIT_FLAGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuStreamWaitEvent: flags {Flags:#x}")
    return _forward("cuStreamWaitEvent", runtime_streams.cudaStreamWaitEvent, hStream, hEvent, 0, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamGetPriority(hStream, priority, per_thread=False):
    return _forward("cuStreamGetPriority", runtime_streams.cudaStreamGetPriority, hStream, priority, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamGetFlags(hStream, flags, per_thread=False):
    return _forward("cuStreamGetFlags", runtime_streams.cudaStreamGetFlags, hStream, flags, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamGetId(hStream, streamId, per_thread=False):
    return _forward("cuStreamGetId", runtime_streams.cudaStreamGetId, hStream, streamId, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamGetDevice(hStream, device, per_thread=False):
    return _forward("cuStreamGetDevice", runtime_streams.cudaStreamGetDevice, hStream, device, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamGetCtx(hStream, pctx, per_thread=False):
    """The context current when the driver made the stream; a runtime
    stream's is its device's primary context; a special stream's the
    current context."""
    out_pointer(pctx, "pctx")
    value = address(hStream)
    if value in (0, LEGACY_HANDLE, PER_THREAD_HANDLE):
        pctx[0] = handle_of(current_context("cuStreamGetCtx"))
        return SUCCESS
    require_initialized()
    stream = stream_of(hStream, per_thread)
    pctx[0] = handle_of(contexts().owner(value, stream.device.ordinal))
    return SUCCESS


@driver(stream_variants=True)
def cuStreamGetCtx_v2(hStream, pCtx, pGreenCtx, per_thread=False):
    """As cuStreamGetCtx; rcuda makes no green contexts, so *pGreenCtx is NULL."""
    if pGreenCtx != interposer.ffi.NULL:
        pGreenCtx[0] = interposer.ffi.NULL
    return cuStreamGetCtx(hStream, pCtx, per_thread=per_thread)


def _attribute_value(value):
    """A CUstreamAttrValue (CUlaunchAttributeValue) as the runtime's
    cudaLaunchAttributeValue: the same union, members and numbering."""
    return interposer.ffi.cast("union cudaLaunchAttributeValue *", value)


@driver(stream_variants=True)
def cuStreamGetAttribute(hStream, attr, value_out, per_thread=False):
    """cudaStreamGetAttribute (client/stream_attributes.py): one set of
    attributes per stream for both APIs; CUstreamAttrID numbers them alike."""
    return _forward("cuStreamGetAttribute", runtime_streams.cudaStreamGetAttribute, hStream, attr,
                    _attribute_value(value_out), per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamSetAttribute(hStream, attr, value, per_thread=False):
    return _forward("cuStreamSetAttribute", runtime_streams.cudaStreamSetAttribute, hStream, attr,
                    _attribute_value(value), per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamCopyAttributes(dst, src, per_thread=False):
    """Both streams must be of one context (CUDA_ERROR_INVALID_VALUE
    otherwise, as for streams of two devices)."""
    check_stream(src, "cuStreamCopyAttributes")
    check_stream(dst, "cuStreamCopyAttributes")
    if _stream_context(dst, per_thread) is not _stream_context(src, per_thread):
        raise CudaError(cudaError.cudaErrorInvalidValue, "cuStreamCopyAttributes: the streams belong to two contexts")
    return from_runtime(runtime_streams.cudaStreamCopyAttributes(dst, src, per_thread))


def _stream_context(hStream, per_thread: bool):
    """The context a stream belongs to, as cuStreamGetCtx answers."""
    value = address(hStream)
    if value in (0, LEGACY_HANDLE, PER_THREAD_HANDLE):
        return current_context("cuStreamCopyAttributes")
    return contexts().owner(value, stream_of(hStream, per_thread).device.ordinal)


@driver(stream_variants=True)
def cuStreamAddCallback(hStream, callback, userData, flags, per_thread=False):
    """The callback gets the stream's status as a CUresult."""
    check_stream(hStream, "cuStreamAddCallback")
    return from_runtime(runtime_streams.add_callback(hStream, callback, userData, flags, per_thread,
                                                     "cuStreamAddCallback", from_runtime))


@driver(stream_variants=True)
def cuLaunchHostFunc(hStream, fn, userData, per_thread=False):
    return _forward("cuLaunchHostFunc", runtime_streams.cudaLaunchHostFunc, hStream, fn, userData, per_thread=per_thread)


# ------------------------------------------------------------------ events


@driver()
def cuEventCreate(phEvent, Flags):
    context = current_context("cuEventCreate")
    status = runtime_streams.cudaEventCreateWithFlags(phEvent, Flags)
    contexts().adopt(context, address(phEvent[0]))
    return from_runtime(status)


@driver("cuEventDestroy_v2", "cuEventDestroy")
def cuEventDestroy_v2(hEvent):
    require_initialized()
    return from_runtime(runtime_streams.cudaEventDestroy(hEvent))


@driver(stream_variants=True)
def cuEventRecord(hEvent, hStream, per_thread=False):
    check_stream(hStream, "cuEventRecord")
    return from_runtime(runtime_streams.cudaEventRecord(hEvent, hStream, per_thread))


@driver(stream_variants=True)
def cuEventRecordWithFlags(hEvent, hStream, flags, per_thread=False):
    check_stream(hStream, "cuEventRecordWithFlags")
    return from_runtime(runtime_streams.cudaEventRecordWithFlags(hEvent, hStream, flags, per_thread))


@driver()
def cuEventSynchronize(hEvent):
    require_initialized()
    return from_runtime(runtime_streams.cudaEventSynchronize(hEvent))


@driver()
def cuEventQuery(hEvent):
    require_initialized()
    return from_runtime(runtime_streams.cudaEventQuery(hEvent))


@driver("cuEventElapsedTime_v2", "cuEventElapsedTime")
def cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd):
    require_initialized()
    return from_runtime(runtime_streams.cudaEventElapsedTime(pMilliseconds, hStart, hEnd))


# ------------------------------------------------------------------ capture (client/runtime/capture.py)
# Work a capturing stream takes becomes nodes of the capture's graph
# (client/capture.py), the driver's as the runtime's: CUstreamCaptureMode,
# CUstreamCaptureStatus and the dependency update flags are numbered as the
# runtime's, and the thread's capture mode is one per thread for both APIs.


@driver(stream_variants=True)
def cuStreamBeginCapture_v2(hStream, mode, per_thread=False):
    return _forward("cuStreamBeginCapture", runtime_capture.cudaStreamBeginCapture, hStream, mode,
                    per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamBeginCapture(hStream, per_thread=False):
    """CUDA 10.0's, without a mode: a global capture."""
    return cuStreamBeginCapture_v2(hStream, GLOBAL_CAPTURE, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies, dependencyData, numDependencies, mode,
                                per_thread=False):
    return _forward("cuStreamBeginCaptureToGraph", runtime_capture.cudaStreamBeginCaptureToGraph, hStream, hGraph,
                    dependencies, dependencyData, numDependencies, mode, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamEndCapture(hStream, phGraph, per_thread=False):
    return _forward("cuStreamEndCapture", runtime_capture.cudaStreamEndCapture, hStream, phGraph,
                    per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamIsCapturing(hStream, captureStatus, per_thread=False):
    return _forward("cuStreamIsCapturing", runtime_capture.cudaStreamIsCapturing, hStream, captureStatus,
                    per_thread=per_thread)


def _capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                  numDependencies_out, per_thread: bool) -> int:
    """Of a stream that is not capturing only the status is written.  The
    edge data (all default edges) is a CUgraphEdgeData array kept with the
    capture, as the runtime keeps its own."""
    ffi = interposer.ffi
    null = ffi.NULL
    status = _forward("cuStreamGetCaptureInfo", runtime_capture.cudaStreamGetCaptureInfo, hStream, captureStatus_out,
                      id_out, null if graph_out is None else graph_out,
                      null if dependencies_out is None else dependencies_out, null,
                      null if numDependencies_out is None else numDependencies_out, per_thread=per_thread)
    if edgeData_out is not None and edgeData_out != null:
        stream = stream_of(hStream, per_thread)
        capture = interposer.rt.captures.of(stream)
        if capture is not None:
            capture.driver_edges = ffi.new("CUgraphEdgeData[]", max(len(capture.deps.get(stream, [])), 1))
            edgeData_out[0] = capture.driver_edges
    return status


@driver(stream_variants=True)
def cuStreamGetCaptureInfo(hStream, captureStatus_out, id_out, per_thread=False):
    """CUDA 10.1's: the status and the capture's id."""
    return _capture_info(hStream, captureStatus_out, id_out, None, None, None, None, per_thread)


@driver(stream_variants=True)
def cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out,
                              per_thread=False):
    return _capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, None, numDependencies_out,
                         per_thread)


@driver(stream_variants=True)
def cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                              numDependencies_out, per_thread=False):
    return _capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                         numDependencies_out, per_thread)


@driver(stream_variants=True)
def cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, dependencyData, numDependencies, flags,
                                         per_thread=False):
    return _forward("cuStreamUpdateCaptureDependencies", runtime_capture.cudaStreamUpdateCaptureDependencies,
                    hStream, dependencies, dependencyData, numDependencies, flags, per_thread=per_thread)


@driver(stream_variants=True)
def cuStreamUpdateCaptureDependencies(hStream, dependencies, numDependencies, flags, per_thread=False):
    return cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, interposer.ffi.NULL, numDependencies, flags,
                                                per_thread=per_thread)


@driver()
def cuThreadExchangeStreamCaptureMode(mode):
    """The calling thread's mode, the one cudaThreadExchangeStreamCaptureMode swaps."""
    require_initialized()
    return from_runtime(runtime_capture.cudaThreadExchangeStreamCaptureMode(mode))
