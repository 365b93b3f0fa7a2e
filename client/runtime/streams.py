"""CUDA runtime functions: streams, events, host functions in streams.

Creating, destroying and recording are sent without waiting (the ids are
chosen here); synchronising and querying wait for the server.  Event times
are the server's: the interval between two records on the device that ran
the work, so cudaEventElapsedTime measures the GPU, not the network.

Where rcuda differs from one machine: a stream waiting on an event of a GPU
on another server (cudaStreamWaitEvent across servers) waits on the host,
in the calling thread, for that event, then carries on; the order CUDA
promises is kept, the calling thread just does not return at once.
"""
from __future__ import annotations

import logging

from rcuda._generated.cuda_enums import MACROS
from rcuda.errors import CudaError, cudaError

from .. import graphs, interposer
from .. import stream_attributes
from ..capture import ACTIVE, Recording
from .core import SUCCESS, cuda
from ..interposer import address, out_pointer, stream_of
from ..stream_attributes import PRIORITY

log = logging.getLogger(__name__)

NOT_READY = cudaError.cudaErrorNotReady
STREAM_FLAGS = MACROS["cudaStreamNonBlocking"]
EVENT_FLAGS = MACROS["cudaEventBlockingSync"] | MACROS["cudaEventDisableTiming"] | MACROS["cudaEventInterprocess"]
EVENT_INTERPROCESS = MACROS["cudaEventInterprocess"]


def rt():
    return interposer.rt


# ------------------------------------------------------------------ streams


def _priority_range(device) -> tuple[int, int]:
    props = device.properties
    return props.get("leastStreamPriority", 0), props.get("greatestStreamPriority", 0)


@cuda()
def cudaStreamCreateWithPriority(pStream, flags, priority):
    out_pointer(pStream, "pStream")
    if flags & ~STREAM_FLAGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaStreamCreate flags {flags:#x}")
    device = rt().device()
    pStream[0] = interposer.ffi.cast("cudaStream_t", rt().streams.create(device, flags, _clamped(device, priority)).handle)
    return SUCCESS


def _clamped(device, priority: int) -> int:
    """CUDA clamps a stream priority to the device's range."""
    least, greatest = _priority_range(device)
    return min(max(priority, greatest), least)


@cuda()
def cudaStreamCreateWithFlags(pStream, flags):
    return cudaStreamCreateWithPriority(pStream, flags, 0)


@cuda()
def cudaStreamCreate(pStream):
    return cudaStreamCreateWithPriority(pStream, 0, 0)


@cuda()
def cudaStreamDestroy(stream):
    handle = address(stream)
    if handle in (0, MACROS["cudaStreamLegacy"], MACROS["cudaStreamPerThread"]):
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle, "a default stream cannot be destroyed")
    stream = rt().streams.resolve(handle, rt().device())
    rt().managed.stream_destroyed(stream)
    rt().captures.stream_gone(stream)
    rt().streams.destroy(handle)
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamSynchronize(stream, per_thread=False):
    s = stream_of(stream, per_thread)
    s.device.request("stream_sync", stream=s.id)
    rt().pools.synchronized(s.device, s)  # frees seen complete, pool memory above its threshold released
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamQuery(stream, per_thread=False):
    s = stream_of(stream, per_thread)
    reply, _ = s.device.request("stream_query", stream=s.id)
    return SUCCESS if reply["ready"] else NOT_READY


@cuda(stream_variants=True)
def cudaStreamWaitEvent(stream, event, flags, per_thread=False):
    s = stream_of(stream, per_thread)
    e = rt().streams.event(address(event))
    if wait_in_capture(s, e, flags):
        return SUCCESS
    if e.device is s.device:
        s.device.post("stream_wait", stream=s.id, event=e.id)
    else:  # across GPUs: wait here for the event (see the module docstring)
        e.device.request("event_sync", event=e.id)
    rt().pools.event_waited(s, e)  # pool memory freed before the event may go to this stream now
    return SUCCESS


def wait_in_capture(stream, event, flags: int) -> bool:
    """cudaStreamWaitEvent where a capture is involved (client/capture.py):
    on an event recorded in a capture, the stream joins it (or adds the
    event's nodes to its dependencies); a capturing stream waiting on an
    event recorded outside gets a wait node.  False: no capture involved."""
    captures = rt().captures
    recorded = event.captured
    if recorded is not None and recorded[0].status == ACTIVE and captures.of(recorded[1]) is recorded[0]:
        captures.join(stream, recorded[0], recorded[2])
        return True
    capture = captures.of(stream)
    if capture is None:
        return False
    if event.device is not stream.device:
        capture.invalidate("a wait on another GPU's event")
        raise CudaError(cudaError.cudaErrorStreamCaptureIsolation,
                        "cudaStreamWaitEvent: a capturing stream cannot wait on another GPU's event")
    capture.add(stream, graphs.WAIT_EVENT, {"event": event}, event_work(event, "stream_wait"))
    return True


def event_work(event, op: str) -> graphs.Work:
    """An event record or wait node's work: the request, to run in the launch's stream."""
    with Recording(event.device) as recording:
        event.device.post(op, event=event.id, stream=recording.stream.id)
    return recording.work()


@cuda(stream_variants=True)
def cudaStreamGetFlags(hStream, flags, per_thread=False):
    out_pointer(flags, "flags")
    flags[0] = stream_of(hStream, per_thread).flags
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamGetPriority(hStream, priority, per_thread=False):
    out_pointer(priority, "priority")
    priority[0] = stream_of(hStream, per_thread).priority
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamGetDevice(hStream, device, per_thread=False):
    out_pointer(device, "device")
    device[0] = stream_of(hStream, per_thread).device.ordinal
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamGetId(hStream, streamId, per_thread=False):
    out_pointer(streamId, "streamId")
    streamId[0] = stream_of(hStream, per_thread).id
    return SUCCESS


@cuda()
def cudaDeviceGetStreamPriorityRange(leastPriority, greatestPriority):
    least, greatest = _priority_range(rt().device())
    if leastPriority != interposer.ffi.NULL:
        leastPriority[0] = least
    if greatestPriority != interposer.ffi.NULL:
        greatestPriority[0] = greatest
    return SUCCESS


# ------------------------------------------------------------------ stream attributes


@cuda(stream_variants=True)
def cudaStreamSetAttribute(hStream, attr, value, per_thread=False):
    """Kept here and sent to the server in stream order (client/stream_attributes.py)."""
    call = "cudaStreamSetAttribute"
    out_pointer(value, "value")
    s = stream_of(hStream, per_thread)
    name = stream_attributes.attribute_name(attr, call)
    window_limit = s.device.properties.get("accessPolicyMaxWindowSize", 0)
    _set_attribute(s, name, stream_attributes.read(name, value, interposer.ffi, call, window_limit))
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamGetAttribute(hStream, attr, value_out, per_thread=False):
    out_pointer(value_out, "value_out")
    s = stream_of(hStream, per_thread)
    name = stream_attributes.attribute_name(attr, "cudaStreamGetAttribute")
    stream_attributes.write(name, _attribute(s, name), value_out, interposer.ffi)
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamCopyAttributes(dst, src, per_thread=False):
    to, source = stream_of(dst, per_thread), stream_of(src, per_thread)
    if to.device is not source.device:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaStreamCopyAttributes: the streams belong to "
                                                         f"{source.device.label} and {to.device.label}")
    for name in stream_attributes.STREAM_ATTRIBUTES:
        _set_attribute(to, name, _attribute(source, name))
    return SUCCESS


def _attribute(stream, name: str):
    return stream.priority if name == PRIORITY else stream.attributes.get(name, stream_attributes.DEFAULTS[name])


def _set_attribute(stream, name: str, value) -> None:
    if name == PRIORITY:
        value = stream.priority = _clamped(stream.device, value)
    else:
        stream.attributes[name] = value
    stream.device.post("stream_attr", stream=stream.id, attr=name, value=value)


# ------------------------------------------------------------------ host functions


@cuda(stream_variants=True)
def cudaLaunchHostFunc(stream, fn, userData, per_thread=False):
    """Runs `fn(userData)` on the client, in stream order (client/callbacks.py)."""
    if fn == interposer.ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaLaunchHostFunc: fn is NULL")
    s = stream_of(stream, per_thread)
    s.device._check_usable("cudaLaunchHostFunc")
    capture = rt().captures.of(s)
    if capture is not None:  # a host node (client/capture.py)
        capture.add(s, graphs.HOST, {"fn": fn, "userData": userData}, host_work(s.device, fn, userData))
        return SUCCESS

    def run(status):
        if not status:  # CUDA does not run host functions in a failed context
            fn(userData)

    rt().callbacks.enqueue(s.device, s.id, run)
    return SUCCESS


def host_work(device, fn, user_data) -> graphs.Work:
    """A host node's work: `fn(user_data)` on the client, in the launch's
    stream, as a host function (client/callbacks.py)."""
    def run(stream):
        stream.device._check_usable("a graph's host node")
        rt().callbacks.enqueue(stream.device, stream.id, lambda status: None if status else fn(user_data))
    return graphs.Work(device, run=run)


@cuda(stream_variants=True)
def cudaStreamAddCallback(stream, callback, userData, flags, per_thread=False):
    """Like cudaLaunchHostFunc; the callback gets the stream's status."""
    return add_callback(stream, callback, userData, flags, per_thread, "cudaStreamAddCallback", int)


def add_callback(stream, callback, userData, flags, per_thread: bool, call: str, status_of) -> int:
    """cudaStreamAddCallback and cuStreamAddCallback: `callback(stream,
    status_of(the stream's cudaError), userData)` in stream order."""
    if callback == interposer.ffi.NULL or flags != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: NULL callback or flags != 0")
    s = stream_of(stream, per_thread)
    s.device._check_usable(call)
    capture = rt().captures.of(s)
    if capture is not None:
        capture.invalidate(f"{call} during the capture")
        raise CudaError(cudaError.cudaErrorStreamCaptureUnsupported, f"{call} cannot be captured (cudaLaunchHostFunc can)")
    handle = interposer.ffi.cast("cudaStream_t", address(stream))
    rt().callbacks.enqueue(s.device, s.id, lambda status: callback(handle, status_of(status), userData))
    return SUCCESS


def destroy_all(handles) -> None:
    """Destroy the streams and events among `handles` that are still alive
    (a driver context's, at cuCtxDestroy)."""
    for handle in handles:
        kind = rt().streams.kind(handle)
        if kind == "stream":
            cudaStreamDestroy(handle)
        elif kind == "event":
            cudaEventDestroy(handle)


# ------------------------------------------------------------------ a device's work as a whole (cuCtxRecordEvent)


def _refuse_captures(device, call: str) -> None:
    """CUDA refuses a context-wide record or wait while a stream of the
    context captures, and invalidates those captures."""
    captures = [c for c in rt().captures.active_on(device) if c.status == ACTIVE]
    for capture in captures:
        capture.invalidate(f"{call} during the capture")
    if captures:
        raise CudaError(cudaError.cudaErrorStreamCaptureUnsupported,
                        f"{call}: a stream of {device.label} is capturing")


def record_device_work(event, device, call: str) -> None:
    """`event` recorded after all work sent so far to any stream of
    `device` (the legacy stream, the program's streams, every thread's
    default stream): a scratch event recorded in each is waited for by a
    stream of rcuda's own, in which `event` is recorded.  No stream the
    program uses waits for anything."""
    _refuse_captures(device, call)
    streams = rt().streams
    gather, scratch, _ = streams.internal(device)
    for stream in streams.of_device(device):
        device.post("event_record", event=scratch.id, stream=stream.id)
        device.post("stream_wait", stream=gather.id, event=scratch.id)
    device.post("event_record", event=event.id, stream=gather.id)
    event.captured = None
    event.frees_before = None  # many streams' frees: none is known ordered before it (client/memory/pools.py)


def wait_device(device, event, call: str) -> None:
    """Every stream of `device`, those made later included, waits for
    `event`'s last record: each stream waits for it now, and streams made
    from now on wait for a barrier event recorded after it.  An event of
    another GPU is waited for here, on the host, as cudaStreamWaitEvent does
    across GPUs: all later work then comes after it."""
    recorded = event.captured
    if recorded is not None and recorded[0].status == ACTIVE:
        recorded[0].invalidate(f"{call} on an event recorded in the capture")
        raise CudaError(cudaError.cudaErrorStreamCaptureUnsupported,
                        f"{call}: the event was recorded in a capture that is still going on")
    _refuse_captures(device, call)
    if event.device is not device:
        event.device.request("event_sync", event=event.id)
        rt().pools.event_synchronized(event)
        return
    streams = rt().streams
    for stream in streams.of_device(device):
        device.post("stream_wait", stream=stream.id, event=event.id)
        rt().pools.event_waited(stream, event)
    gather, _, barrier = streams.internal(device)
    device.post("stream_wait", stream=gather.id, event=event.id)
    device.post("event_record", event=barrier.id, stream=gather.id)
    streams.set_barrier(device, barrier)


# ------------------------------------------------------------------ events


@cuda()
def cudaEventCreateWithFlags(event, flags):
    out_pointer(event, "event")
    if flags & ~EVENT_FLAGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaEventCreate flags {flags:#x}")
    if flags & EVENT_INTERPROCESS and not flags & MACROS["cudaEventDisableTiming"]:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        "cudaEventCreateWithFlags: cudaEventInterprocess needs cudaEventDisableTiming")
    event[0] = interposer.ffi.cast("cudaEvent_t", rt().streams.create_event(rt().device(), flags).handle)
    return SUCCESS


@cuda()
def cudaEventCreate(event):
    return cudaEventCreateWithFlags(event, 0)


@cuda()
def cudaEventDestroy(event):
    rt().streams.destroy_event(address(event))
    return SUCCESS


@cuda(stream_variants=True)
def cudaEventRecord(event, stream, per_thread=False):
    e = rt().streams.event(address(event))
    s = stream_of(stream, per_thread, e.device)
    if s.device is not e.device:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        f"cudaEventRecord: the event belongs to {e.device.label}, the stream to {s.device.label}")
    capture = rt().captures.of(s)
    if capture is not None:  # the event stands for the stream's place in the capture (client/capture.py)
        e.captured = (capture, s, list(capture.deps[s]))
        return SUCCESS
    e.captured = None
    e.device.post("event_record", event=e.id, stream=s.id)
    rt().pools.event_recorded(e, s)
    return SUCCESS


@cuda(stream_variants=True)
def cudaEventRecordWithFlags(event, stream, flags, per_thread=False):
    """cudaEventRecordExternal in a capture makes an event record node."""
    if flags & ~MACROS["cudaEventRecordExternal"]:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaEventRecordWithFlags flags {flags:#x}")
    if flags:
        e = rt().streams.event(address(event))
        s = stream_of(stream, per_thread, e.device)
        capture = rt().captures.of(s)
        if capture is not None:
            capture.add(s, graphs.EVENT_RECORD, {"event": e}, event_work(e, "event_record"))
            return SUCCESS
    return cudaEventRecord(event, stream, per_thread=per_thread)


@cuda()
def cudaEventSynchronize(event):
    e = rt().streams.event(address(event))
    e.device.request("event_sync", event=e.id)
    rt().pools.event_synchronized(e)
    return SUCCESS


@cuda()
def cudaEventQuery(event):
    e = rt().streams.event(address(event))
    reply, _ = e.device.request("event_query", event=e.id)
    return SUCCESS if reply["ready"] else NOT_READY


@cuda()
def cudaEventElapsedTime(ms, start, end):
    out_pointer(ms, "ms")
    first, last = rt().streams.event(address(start)), rt().streams.event(address(end))
    if first.device is not last.device:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        "cudaEventElapsedTime: the events belong to different devices")
    reply, _ = first.device.request("event_elapsed", start=first.id, end=last.id)
    ms[0] = reply["ms"]
    return SUCCESS
