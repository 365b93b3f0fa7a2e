"""Stream capture: work issued into a capturing stream becomes graph nodes
instead of running (cudaStreamBeginCapture ... cudaStreamEndCapture).

A capture is kept here, in the client, so the frameworks' questions ("is
this stream capturing?", asked on every allocation) need no round trip.
Each stream taking part has a set of nodes the next operation depends on
(at first the capture's starting dependencies, then the node it last
added).  Other streams join by waiting on an event recorded in a capturing
stream, and must be joined back into the origin stream before the capture
ends, as in CUDA.

What is recorded, and where:
  * a stream operation the server runs (a launch, a memset, a copy within a
    GPU, a library call) reaches the device's `post` with the capturing
    stream's id, which hands it to the capture (`RemoteDevice.sinks`); the
    request becomes the node's work, sent when the graph is instantiated;
  * copies touching host memory, host functions, event records and waits,
    stream-ordered allocations are recognised where the program calls them
    (client/runtime/) and become nodes that do their work at each launch.

Illegal calls fail as in CUDA and invalidate the capture: a synchronous
call on a capturing stream or a device synchronisation
(cudaErrorStreamCaptureUnsupported), work on the legacy stream while a
blocking stream captures (cudaErrorStreamCaptureImplicit), cudaMalloc under
a global or thread-local capture.  While a device has a capture, C's fast
paths leave its calls to Python.
"""
from __future__ import annotations

import itertools
import threading

from rcuda._generated.cuda_enums import ENUMS, MACROS
from rcuda.errors import CudaError, cudaError

from . import graphs
from .device import NOT_STREAM_WORK
from .streams import Stream

STATUS = ENUMS["cudaStreamCaptureStatus"]
NONE, ACTIVE, INVALIDATED = (STATUS[f"cudaStreamCaptureStatus{n}"] for n in ("None", "Active", "Invalidated"))
MODES = ENUMS["cudaStreamCaptureMode"]
GLOBAL, THREAD_LOCAL, RELAXED = (MODES[f"cudaStreamCaptureMode{n}"] for n in ("Global", "ThreadLocal", "Relaxed"))
NON_BLOCKING = MACROS["cudaStreamNonBlocking"]

#: Server ops and the node type their request becomes.
NODE_TYPE_OF_OP = {"launch": graphs.KERNEL, "lib": graphs.KERNEL, "memset": graphs.MEMSET,
                   "memset3d": graphs.MEMSET, "dtod": graphs.MEMCPY, "dtod3d": graphs.MEMCPY,
                   "copy_batch": graphs.MEMCPY, "event_record": graphs.EVENT_RECORD,
                   "stream_wait": graphs.WAIT_EVENT, "stream_mem_ops": graphs.BATCH_MEM_OP}

_ids = itertools.count(1)
_thread = threading.local()


def thread_mode() -> int:
    """The calling thread's capture interaction mode
    (cudaThreadExchangeStreamCaptureMode)."""
    return getattr(_thread, "mode", GLOBAL)


def exchange_thread_mode(mode: int) -> int:
    previous = thread_mode()
    _thread.mode = mode
    return previous


def failure(status, message: str) -> CudaError:
    return CudaError(status, message)


class Capture:
    """One capture sequence: its graph, mode, origin stream and the streams
    that joined it."""

    def __init__(self, origin, graph: graphs.Graph, mode: int, deps: list, owns_graph: bool):
        self.id = next(_ids)
        self.origin = origin
        self.graph = graph
        self.mode = mode
        self.owns_graph = owns_graph          # begun with cudaStreamBeginCapture (not ...ToGraph)
        self.thread = threading.get_ident()
        self.status = ACTIVE
        self.deps: dict = {origin: list(deps)}  # stream -> the nodes its next operation depends on
        self.problem = ""

    def add(self, stream, type_: int, params: dict, work: graphs.Work | None = None) -> graphs.Node:
        """A node for an operation issued into `stream`, after the stream's
        dependencies; it becomes the stream's only dependency."""
        node = self.graph.add(type_, params, self.deps[stream], work)
        self.deps[stream] = [node]
        return node

    def invalidate(self, problem: str) -> None:
        self.status = INVALIDATED
        self.problem = self.problem or problem

    def ancestors(self, nodes) -> set:
        seen, pending = set(), list(nodes)
        while pending:
            node = pending.pop()
            if node not in seen:
                seen.add(node)
                pending.extend(node.deps)
        return seen


class _Sink:
    """Takes a device's requests sent with a capturing stream's id."""

    __slots__ = ("captures", "stream")

    def __init__(self, captures: "Captures", stream):
        self.captures, self.stream = captures, stream

    @property
    def capture(self) -> Capture | None:
        return self.captures.of(self.stream)

    def __call__(self, header: dict, frames: list) -> None:
        capture = self.capture
        if capture is None:
            raise failure(cudaError.cudaErrorIllegalState, f"{header['op']}: the stream's capture has ended")
        if capture.status != ACTIVE:  # an invalidated capture records nothing, as CUDA's
            raise failure(cudaError.cudaErrorStreamCaptureInvalidated,
                          f"{header['op']} into a capture already invalidated: {capture.problem}")
        type_ = NODE_TYPE_OF_OP.get(header["op"], graphs.EMPTY)
        capture.add(self.stream, type_, dict(header),
                    graphs.Work(self.stream.device, [(dict(header), list(frames))]))

    def refuse(self, op: str) -> None:
        capture = self.capture
        message = f"{op} on a capturing stream (it would wait for work that is only being recorded)"
        if capture is not None:
            capture.invalidate(message)
        raise failure(cudaError.cudaErrorStreamCaptureUnsupported, message)


class Recording:
    """Requests a node's operation would send, caught instead of sent: the
    work of a node made with the graph API (cudaGraphAddKernelNode & co.).
    The operation runs as if into `stream`, a stream only the recording
    knows; the server puts the launch's stream in its place."""

    def __init__(self, device):
        self.device = device
        self.stream = Stream(0, device, device.new_id())
        self.requests: list = []

    def __call__(self, header: dict, frames: list) -> None:
        self.requests.append((dict(header), list(frames)))

    def refuse(self, op: str) -> None:
        raise failure(cudaError.cudaErrorNotSupported, f"{op}: not an operation a graph node can hold")

    def __enter__(self) -> "Recording":
        self.device.sinks[self.stream.id] = self
        return self

    def __exit__(self, *exc) -> None:
        self.device.sinks.pop(self.stream.id, None)

    def work(self, writes_host: bool = False) -> graphs.Work:
        return graphs.Work(self.device, self.requests, writes_host=writes_host)


class Captures:
    """Every capture of the process, by stream."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_stream: dict = {}   # Stream -> Capture

    def of(self, stream) -> Capture | None:
        return self._by_stream.get(stream) if self._by_stream else None

    def status(self, stream) -> int:
        capture = self.of(stream)
        return NONE if capture is None else capture.status

    # ---------------------------------------------------------- begin, join, end

    def begin(self, stream, mode: int, graph: graphs.Graph | None = None, deps=()) -> Capture:
        if stream.id == 0:
            raise failure(cudaError.cudaErrorStreamCaptureUnsupported, "the legacy default stream cannot capture")
        if mode not in (GLOBAL, THREAD_LOCAL, RELAXED):
            raise failure(cudaError.cudaErrorInvalidValue, f"capture mode {mode}")
        if self.of(stream) is not None:
            raise failure(cudaError.cudaErrorIllegalState, "the stream is capturing already")
        owns = graph is None
        capture = Capture(stream, graph if graph is not None else graphs.Graph(), mode, list(deps), owns)
        self._join(stream, capture)
        return capture

    def join(self, stream, capture: Capture, nodes) -> None:
        """`stream` waited on an event recorded in `capture`: it captures
        too, after `nodes` (or adds them to its dependencies)."""
        current = self.of(stream)
        if current is not None and current is not capture:
            current.invalidate("two captures merged by an event")
            capture.invalidate("two captures merged by an event")
            raise failure(cudaError.cudaErrorStreamCaptureMerge,
                          "cudaStreamWaitEvent would merge two separate captures")
        if current is None:
            capture.deps[stream] = list(nodes)
            self._join(stream, capture)
        else:
            capture.deps[stream] = capture.deps[stream] + [n for n in nodes if n not in capture.deps[stream]]

    def _join(self, stream, capture: Capture) -> None:
        device = stream.device
        with self._lock:
            self._by_stream[stream] = capture
        device.sinks[stream.id] = _Sink(self, stream)
        device.capture_rules = self.check_request
        self._device_changed(device)

    def end(self, stream) -> graphs.Graph:
        capture = self.of(stream)
        if capture is None:
            raise failure(cudaError.cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing")
        if capture.origin is not stream:
            capture.invalidate("ended in another stream than it began")
            raise failure(cudaError.cudaErrorStreamCaptureUnmatched,
                          "cudaStreamEndCapture: the capture began in another stream")
        if capture.mode != RELAXED and capture.thread != threading.get_ident():
            raise failure(cudaError.cudaErrorStreamCaptureWrongThread,
                          "cudaStreamEndCapture: a global or thread-local capture ends in the thread that began it")
        joined = capture.ancestors(capture.deps[stream])
        unjoined = [s for s, deps in capture.deps.items() if s is not stream and not set(deps) <= joined]
        self._leave(capture)
        if capture.status != ACTIVE:
            raise failure(cudaError.cudaErrorStreamCaptureInvalidated,
                          f"cudaStreamEndCapture: the capture was invalidated: {capture.problem}")
        if unjoined:
            raise failure(cudaError.cudaErrorStreamCaptureUnjoined,
                          f"cudaStreamEndCapture: {len(unjoined)} stream(s) forked from the capture were not "
                          f"joined back into its origin stream")
        return capture.graph

    def _leave(self, capture: Capture) -> None:
        devices = set()
        with self._lock:
            for stream in list(capture.deps):
                if self._by_stream.get(stream) is capture:
                    del self._by_stream[stream]
                    stream.device.sinks.pop(stream.id, None)
                    devices.add(stream.device)
        for device in devices:
            self._device_changed(device)

    def stream_gone(self, stream) -> None:
        """A capturing stream was destroyed: the origin's capture is
        invalidated; a stream forked into a capture leaves it (what it
        captured stays, and must have been joined back by the end)."""
        capture = self.of(stream)
        if capture is None:
            return
        if stream is capture.origin:
            capture.invalidate("the capture's origin stream was destroyed")
            return
        with self._lock:
            del self._by_stream[stream]
        stream.device.sinks.pop(stream.id, None)
        self._device_changed(stream.device)

    def _device_changed(self, device) -> None:
        """C's fast paths leave a device with a capture to Python."""
        capturing = any(s.device is device for s in self._by_stream)
        if not capturing:
            device.capture_rules = None
        device.fast.set_usable(device, not capturing and device.sticky is None)

    # ---------------------------------------------------------- rules

    def active_on(self, device=None) -> list[Capture]:
        """The captures with a stream on `device` (None: every capture), once each."""
        return list(dict.fromkeys(c for s, c in list(self._by_stream.items()) if device is None or s.device is device))

    def check_request(self, device, op: str, fields: dict) -> None:
        """A call on `device` that waits for its reply, or work on the legacy
        stream, while the device has a capture (RemoteDevice calls this):
        what CUDA forbids fails and invalidates the captures it touches."""
        stream_id = fields.get("stream")
        sink = device.sinks.get(stream_id) if stream_id is not None else None
        if sink is not None:
            sink.refuse(op)
        captures = [c for c in self.active_on(device) if c.status == ACTIVE]
        if not captures:
            return
        if op == "sync":
            for capture in captures:
                capture.invalidate("cudaDeviceSynchronize during the capture")
            raise failure(cudaError.cudaErrorStreamCaptureUnsupported,
                          "device synchronisation while a stream of the device is capturing")
        if stream_id == 0 and op not in NOT_STREAM_WORK:
            blocking = [c for c in captures
                        if any(s.device is device and not s.flags & NON_BLOCKING for s in c.deps)]
            for capture in blocking:
                capture.invalidate(f"{op} on the legacy stream during the capture")
            if blocking:
                raise failure(cudaError.cudaErrorStreamCaptureImplicit,
                              f"{op} on the legacy stream would wait for a capturing blocking stream")

    def check_unsafe(self, call: str) -> None:
        """A potentially unsafe call (cudaMalloc): refused while a global
        capture runs anywhere, or a thread-local one in this thread, unless
        this thread's mode is relaxed."""
        if not self._by_stream or thread_mode() == RELAXED:
            return
        me = threading.get_ident()
        for capture in self.active_on():
            if capture.status == ACTIVE and (capture.mode == GLOBAL or
                                             (capture.mode == THREAD_LOCAL and capture.thread == me)):
                capture.invalidate(f"{call} during the capture")
                raise failure(cudaError.cudaErrorStreamCaptureUnsupported,
                              f"{call} is not permitted while a stream captures (see "
                              f"cudaThreadExchangeStreamCaptureMode)")

    def forget_device(self, device) -> None:
        for capture in self.active_on(device):
            capture.invalidate("cudaDeviceReset")
            self._leave(capture)

    def clear(self) -> None:
        with self._lock:
            self._by_stream.clear()
