"""Streams and events, as the program holds them.

A `cudaStream_t` or `cudaEvent_t` the program gets from rcuda is an opaque
handle value made here; each names an object that belongs to one device and
carries the id the server knows it by (ids are chosen here, so creating a
stream or an event is sent without waiting).

The default streams follow CUDA:
  * handle 0, or cudaStreamLegacy: the legacy default stream of the current
    device (server id 0), which synchronises with every blocking stream;
  * cudaStreamPerThread, or handle 0 in a program built with
    `--default-stream per-thread` (it calls the `_ptsz`/`_ptds` entry
    points): this host thread's own default stream on the current device,
    created on first use.
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from rcuda._generated.cuda_enums import MACROS
from rcuda.errors import CudaError, cudaError

from .device import RemoteDevice

LEGACY_HANDLE = MACROS["cudaStreamLegacy"]
PER_THREAD_HANDLE = MACROS["cudaStreamPerThread"]
NON_BLOCKING = MACROS["cudaStreamNonBlocking"]
DISABLE_TIMING = MACROS["cudaEventDisableTiming"]
LEGACY_STREAM_ID = 0

# Handles are values in a range no allocator hands out, so a stray pointer
# is not taken for a stream, and a destroyed stream's handle is never reused.
STREAM_HANDLES_FROM = 0x5D00_0000_0000
EVENT_HANDLES_FROM = 0x5E00_0000_0000


@dataclass(eq=False)
class Stream:
    handle: int
    device: RemoteDevice
    id: int          # the server's id; 0 is the legacy default stream
    flags: int = 0
    priority: int = 0
    attributes: dict = field(default_factory=dict)  # set by cudaStreamSetAttribute (client/stream_attributes.py)


@dataclass(eq=False)
class Event:
    handle: int
    device: RemoteDevice
    id: int
    flags: int = 0
    frees_before: tuple | None = None  # (stream, stream-ordered frees) at its last record: client/memory/pools.py
    captured: tuple | None = None  # (capture, nodes) when last recorded in a capturing stream: client/capture.py


class StreamTable:
    """Every stream and event of the process, by handle."""

    def __init__(self, fast=None, new_id=None):
        from .transport.fast_path import NullFastPath
        self.fast = fast or NullFastPath()
        self.new_id = new_id or itertools.count(1).__next__  # the runtime's
        self._stream_handles = itertools.count(STREAM_HANDLES_FROM, 0x10)
        self._event_handles = itertools.count(EVENT_HANDLES_FROM, 0x10)
        self._lock = threading.Lock()
        self._streams: dict[int, Stream] = {}
        self._events: dict[int, Event] = {}
        self._legacy: dict[RemoteDevice, Stream] = {}
        self._per_thread = threading.local()  # .streams: {device: (generation, Stream)}
        self._per_thread_made: list[tuple[int, Stream]] = []  # every thread's, (generation, Stream)
        #: Per device, (generation, stream, scratch event, barrier event) the
        #: program never sees (`internal`); the barrier once cuCtxWaitEvent set it.
        self._internal: dict[RemoteDevice, tuple] = {}
        self._internal_lock = threading.Lock()
        self._barriers: dict[RemoteDevice, Event] = {}

    # ---------------------------------------------------------- streams

    def create(self, device: RemoteDevice, flags: int, priority: int) -> Stream:
        stream = Stream(next(self._stream_handles), device, self.new_id(), flags, priority)
        device.post("stream_create", stream=stream.id, flags=flags, priority=priority)
        self._behind_barrier(stream)
        with self._lock:
            self._streams[stream.handle] = stream
        self.fast.stream_created(stream)
        return stream

    def destroy(self, handle: int) -> None:
        with self._lock:
            stream = self._streams.pop(handle, None)
        if stream is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                            f"cudaStreamDestroy({handle:#x}): not a stream (destroyed already?)")
        self.fast.stream_destroyed(stream)
        stream.device.post("stream_destroy", stream=stream.id)

    def resolve(self, handle: int, current: RemoteDevice, per_thread: bool = False) -> Stream:
        """The stream a program's handle means, with `current` the calling
        thread's device; `per_thread` for the `_ptsz`/`_ptds` entry points."""
        if handle == 0:
            handle = PER_THREAD_HANDLE if per_thread else LEGACY_HANDLE
        if handle == LEGACY_HANDLE:
            return self.legacy(current)
        if handle == PER_THREAD_HANDLE:
            return self.per_thread(current)
        stream = self._streams.get(handle)
        if stream is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                            f"stream {handle:#x} does not exist (destroyed, or not a cudaStream_t)")
        return stream

    def legacy(self, device: RemoteDevice) -> Stream:
        stream = self._legacy.get(device)
        if stream is None:
            stream = self._legacy.setdefault(device, Stream(LEGACY_HANDLE, device, LEGACY_STREAM_ID))
        return stream

    def per_thread(self, device: RemoteDevice) -> Stream:
        streams = getattr(self._per_thread, "streams", None)
        if streams is None:
            streams = self._per_thread.streams = {}
        generation, stream = streams.get(device, (None, None))
        if generation != device.generation:  # first use, or the device was reset since
            stream = Stream(PER_THREAD_HANDLE, device, self.new_id())
            device.post("stream_create", stream=stream.id, flags=0, priority=0)
            self._behind_barrier(stream)
            streams[device] = (device.generation, stream)
            with self._lock:
                self._per_thread_made.append((device.generation, stream))
            self.fast.per_thread_stream(stream)
        return stream

    def of_device(self, device: RemoteDevice) -> list[Stream]:
        """Every stream of `device` the program can give work: its legacy
        stream, the streams it made there, every thread's default stream."""
        with self._lock:
            made = [s for s in self._streams.values() if s.device is device]
            per_thread = [s for generation, s in self._per_thread_made
                          if s.device is device and generation == device.generation]
        return [self.legacy(device), *made, *per_thread]

    def internal(self, device: RemoteDevice) -> tuple[Stream, Event, Event]:
        """A stream of `device` and two events the program never sees (made
        at the first need, again after a reset): where work of all the
        device's streams is gathered (cuCtxRecordEvent), the scratch event
        that gathers it, and the barrier new streams wait for (cuCtxWaitEvent)."""
        with self._internal_lock:  # one set per device; self._lock is not held while posting
            found = self._internal.get(device)
            if found is None or found[0] != device.generation:
                stream = Stream(next(self._stream_handles), device, self.new_id(), NON_BLOCKING)
                device.post("stream_create", stream=stream.id, flags=NON_BLOCKING, priority=0)
                events = [Event(next(self._event_handles), device, self.new_id(), DISABLE_TIMING) for _ in range(2)]
                for event in events:
                    device.post("event_create", event=event.id, flags=DISABLE_TIMING)
                with self._lock:
                    found = self._internal[device] = (device.generation, stream, *events)
                    self._barriers.pop(device, None)
        return found[1:]

    def set_barrier(self, device: RemoteDevice, event: Event) -> None:
        """Streams made on `device` from now on wait for `event` first
        (recorded by the caller, never again without a new set_barrier)."""
        with self._lock:
            self._barriers[device] = event

    def _behind_barrier(self, stream: Stream) -> None:
        barrier = self._barriers.get(stream.device)
        if barrier is not None:
            stream.device.post("stream_wait", stream=stream.id, event=barrier.id)

    # ---------------------------------------------------------- events

    def create_event(self, device: RemoteDevice, flags: int, shared: tuple | None = None) -> Event:
        """A new event; `shared` (worker, token): another process's, exported
        on the same server (cudaIpcOpenEventHandle), opened before this returns."""
        event = Event(next(self._event_handles), device, self.new_id(), flags)
        if shared is None:
            device.post("event_create", event=event.id, flags=flags)
        else:
            device.request("event_create", event=event.id, flags=flags, ipc=list(shared))
        with self._lock:
            self._events[event.handle] = event
        self.fast.event_created(event)
        return event

    def event(self, handle: int) -> Event:
        event = self._events.get(handle)
        if event is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                            f"event {handle:#x} does not exist (destroyed, or not a cudaEvent_t)")
        return event

    def kind(self, handle: int) -> str | None:
        """"stream" or "event" for a live handle of either, else None."""
        return "stream" if handle in self._streams else "event" if handle in self._events else None

    def destroy_event(self, handle: int) -> None:
        with self._lock:
            event = self._events.pop(handle, None)
        if event is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                            f"cudaEventDestroy({handle:#x}): not an event (destroyed already?)")
        self.fast.event_destroyed(event)
        event.device.post("event_destroy", event=event.id)

    # ---------------------------------------------------------- reset, fork

    def forget_device(self, device: RemoteDevice) -> None:
        """cudaDeviceReset: the device's streams and events are gone."""
        with self._lock:
            for table in (self._streams, self._events):
                for handle in [h for h, item in table.items() if item.device is device]:
                    if table is self._streams:
                        self.fast.stream_destroyed(table[handle])
                    else:
                        self.fast.event_destroyed(table[handle])
                    del table[handle]
            self._per_thread_made = [(g, s) for g, s in self._per_thread_made if s.device is not device]
            self._internal.pop(device, None)
            self._barriers.pop(device, None)
        # Per-thread default streams notice the device's new generation.

    def clear(self) -> None:
        with self._lock:
            self._streams.clear()
            self._events.clear()
            self._legacy.clear()
            self._per_thread_made.clear()
            self._internal.clear()
            self._barriers.clear()
        self._per_thread = threading.local()
