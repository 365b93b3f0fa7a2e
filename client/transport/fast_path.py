"""The Python side of the launch fast path (native/launch_fast_path.c) and
of the error check in C (native/last_error.c).

C records a launch by itself when it knows the kernel's parameter layout and
its id on the device, the stream, and the limits to check; Python teaches it
those as it meets them (first launch of a kernel on a device, stream
creation, device opening) and ships the recorded batches.  When C does not
know enough, or the device is unusable (sticky error, lost server), the
launch comes to Python, which explains the refusal or sends it itself.

Asynchronous memsets and small copies join the launches in C's batch
(native/async_fast_path.c) while Python welcomes them (`rcuda_fast_record_ops`).

Small synchronous calls (cudaDeviceSynchronize, cudaStreamSynchronize,
cudaMemGetInfo, cudaMemcpy between the program and a device) are made in C
too, on the device's link, while the device says nothing stands in the way
(native/sync_fast_path.c; `device_clean`; `allocation_added` and its kin
keep C's copy of the allocation map).

`NullFastPath` stands in where there is no interposer (the runtime used from
Python, in tests): every launch then takes the Python path, and the links
still run in C when the library is built (`native`).
"""
from __future__ import annotations

import logging
import threading

from rcuda import protocol
from rcuda.errors import CudaError, cudaError

from . import native as native_library

trace = logging.getLogger("rcuda.trace")

#: What a synchronising request covers, for mapped memory (native/mapped_memory.h):
#: the device's work, a stream's (the request's `stream`), or less (an event's).
MIRROR_SYNC_DEVICE, MIRROR_SYNC_STREAM, MIRROR_SYNC_EVENT = 0, 1, 2
SYNC_SCOPES = {"sync": MIRROR_SYNC_DEVICE, "stream_sync": MIRROR_SYNC_STREAM, "marker": MIRROR_SYNC_STREAM,
               "dtoh": MIRROR_SYNC_STREAM, "htod": MIRROR_SYNC_STREAM, "dtoh3d": MIRROR_SYNC_STREAM,
               "htod3d": MIRROR_SYNC_STREAM, "event_sync": MIRROR_SYNC_EVENT,
               # a query that says the work is done: as good as a synchronisation
               "stream_query": MIRROR_SYNC_STREAM, "event_query": MIRROR_SYNC_EVENT}
#: Mirrors refreshed through Python on a ZeroMQ link, at most, per synchronisation.
MAX_MIRRORS = 1024


class NullFastPath:
    """No C side: nothing recorded, nothing to ship."""

    def current_device(self, threads: threading.local) -> int:
        return getattr(threads, "device", 0)

    def set_current_device(self, threads: threading.local, ordinal: int) -> None:
        threads.device = ordinal

    def set_driver_context(self, current: bool) -> None: ...

    def device_opened(self, device) -> None: ...
    def set_usable(self, device, usable: bool) -> None: ...
    def errors_changed(self) -> None: ...
    def device_reset(self, device) -> None: ...
    def kernel_ready(self, host_fun: int, kernel, device, fn: int, attrs: dict) -> None: ...
    def kernel_gone(self, host_fun: int, devices) -> None: ...
    def stream_created(self, stream) -> None: ...
    def stream_destroyed(self, stream) -> None: ...
    def per_thread_stream(self, stream) -> None: ...
    def graph_ready(self, graph_exec) -> None: ...
    def graph_gone(self, graph_exec) -> None: ...
    def event_created(self, event) -> None: ...
    def event_destroyed(self, event) -> None: ...
    def events_welcome(self, welcome: bool) -> None: ...
    def device_clean(self, device, clean: bool) -> None: ...

    def batch_source(self, ordinal: int):
        return None

    def batch_device(self, ordinal: int) -> int:
        """The device whose recorded launches a link ships first (-1: none)."""
        return -1

    def native(self):
        """(ffi, lib) of the C side the links run in, or None."""
        return native_library.load()

    def records_in_c(self, ordinal: int) -> int | None:
        """How many asynchronous memsets and copies C recorded for the device (None: no C side)."""
        return None

    # Mapped host memory (native/mapped_memory.c): only inside the interposer.
    def mirror_add(self, host: int, size: int, device_ptr: int, device, alias: int, dirty: bool,
                   device_only_reads: bool, guarded: bool = False) -> int:
        raise CudaError(cudaError.cudaErrorNotSupported, "mapped host memory needs the interposer")

    def pinned_block(self, base: int, span: int, device, add: bool = True) -> None: ...
    def mirror_guard(self, slot: int, guarded: bool) -> None: ...
    def mirror_prefetch(self, slot: int, offset: int, size: int) -> None: ...
    def mirror_on_touch(self, on: bool) -> None: ...
    def mirror_remove(self, slot: int) -> None: ...
    def mirrors_forget(self, device=None) -> None: ...
    def mirror_written(self, device, stream: int) -> None: ...

    def mirror_before_sync(self, device, op: str, fields: dict):
        return None

    def mirror_refresh(self, device, token) -> None: ...

    def mirror_source(self, ordinal: int):
        return None


class FastPath(NullFastPath):
    def __init__(self, ffi, lib):
        self._ffi, self._lib = ffi, lib
        self._known_kernels: set[int] = set()
        self._lock = threading.Lock()

    # The current device lives in C (thread-local), where launches read it.
    def current_device(self, threads: threading.local) -> int:
        return self._lib.rcuda_get_current_device()

    def set_current_device(self, threads: threading.local, ordinal: int) -> None:
        self._lib.rcuda_set_current_device(ordinal)

    def set_driver_context(self, current: bool) -> None:
        """Whether this thread has a current driver context (C's driver calls need one)."""
        self._lib.rcuda_set_driver_context(int(current))

    def native(self):
        return self._ffi, self._lib

    def batch_device(self, ordinal: int) -> int:
        return ordinal if ordinal < self._lib.FAST_MAX_DEVICES else -1

    def device_opened(self, device) -> None:
        props = device.properties
        u32 = "uint32_t[3]"
        max_shared = props.get("sharedMemPerBlockOptin") or props.get("sharedMemPerBlock", 49152)
        link = getattr(device.link, "handle", -1)  # a LaneLink's; a SocketLink has none
        self._lib.rcuda_fast_device(device.ordinal, device.link.wake_fd, link,
                                    self._ffi.new(u32, list(props["maxThreadsDim"])),
                                    self._ffi.new(u32, [min(v, 2**32 - 1) for v in props["maxGridSize"]]),
                                    props["maxThreadsPerBlock"], max_shared, device.generation)
        device.tell_clean()
        # Memsets and copies C records are not seen by statistics or a trace
        # of every call: with those on, each goes through Python.
        self._lib.rcuda_fast_record_ops(device.ordinal, int(device.stats is None
                                                            and not trace.isEnabledFor(logging.DEBUG)))

    def set_usable(self, device, usable: bool) -> None:
        self._lib.rcuda_fast_set_usable(device.ordinal, int(usable))
        if not usable:  # a sticky error or a lost server: cudaGetLastError must ask Python again
            self.errors_changed()

    def errors_changed(self) -> None:
        """An error was recorded (native/last_error.c answers cudaGetLastError
        without Python only while none has been since it last asked)."""
        self._lib.rcuda_errors_changed()

    def device_reset(self, device) -> None:
        """The server forgot the device's kernels and streams: so does C
        (new ids come through the slow path again)."""
        self._lib.rcuda_fast_set_usable(device.ordinal, 0)
        with self._lock:
            for host_fun in self._known_kernels:
                self._lib.rcuda_fast_kernel_on_device(self._ffi.cast("void *", host_fun), device.ordinal, 0, 0, 0)
        self.device_opened(device)

    def kernel_ready(self, host_fun: int, kernel, device, fn: int, attrs: dict) -> None:
        pointer = self._ffi.cast("void *", host_fun)
        with self._lock:
            if host_fun not in self._known_kernels:
                params = kernel.params
                self._lib.rcuda_fast_register_kernel(pointer, len(params.offsets),
                                                     self._ffi.new("uint32_t[]", list(params.offsets)),
                                                     self._ffi.new("uint32_t[]", list(params.sizes)),
                                                     params.buffer_size)
                self._known_kernels.add(host_fun)
        self._lib.rcuda_fast_kernel_on_device(pointer, device.ordinal, fn, attrs.get("maxThreadsPerBlock", 0),
                                              attrs.get("maxDynamicSharedSizeBytes", 0))

    def kernel_gone(self, host_fun: int, devices) -> None:
        """A driver function whose module was unloaded: its launches go to
        Python again (which refuses them)."""
        for device in devices:
            self._lib.rcuda_fast_kernel_on_device(self._ffi.cast("void *", host_fun), device.ordinal, 0, 0, 0)

    def stream_created(self, stream) -> None:
        self._lib.rcuda_fast_stream(stream.handle, stream.device.ordinal, stream.id, 1)

    def stream_destroyed(self, stream) -> None:
        self._lib.rcuda_fast_stream(stream.handle, stream.device.ordinal, stream.id, 0)

    def per_thread_stream(self, stream) -> None:
        """Called in the thread whose default stream it is (C keeps it per thread)."""
        self._lib.rcuda_fast_per_thread_stream(stream.device.ordinal, stream.id, stream.device.generation)

    def graph_ready(self, graph_exec) -> None:
        """An executable graph whose work is one run on its server, sent
        there: C records its launches (native/async_fast_path.c)."""
        self._lib.rcuda_fast_graph(graph_exec.handle, graph_exec.device.ordinal, graph_exec.id, 1)

    def graph_gone(self, graph_exec) -> None:
        """Its work changed, or it was destroyed: its launches are Python's."""
        self._lib.rcuda_fast_graph(graph_exec.handle, graph_exec.device.ordinal, graph_exec.id, 0)

    def event_created(self, event) -> None:
        """C records the event's records and the waits for it
        (native/async_fast_path.c), in a stream of its device."""
        self._lib.rcuda_fast_event(event.handle, event.device.ordinal, event.id, 1)

    def event_destroyed(self, event) -> None:
        self._lib.rcuda_fast_event(event.handle, event.device.ordinal, event.id, 0)

    def events_welcome(self, welcome: bool) -> None:
        """Whether any event's records and waits may be made in C: not once
        memory pools follow events (client/memory/pools.py)."""
        self._lib.rcuda_fast_events(int(welcome))

    def device_clean(self, device, clean: bool) -> None:
        """Whether C may make the device's synchronous calls: no asynchronous
        error waits to be reported, and nothing (statistics, a trace of every
        message) needs to see each call in Python."""
        clean = clean and device.stats is None and not trace.isEnabledFor(logging.DEBUG)
        self._lib.rcuda_fast_device_clean(device.ordinal, int(clean))

    # C's copy of the allocation map (native/allocation_table.c), for cudaMemcpy in C.
    def allocation_added(self, allocation) -> None:
        self._lib.rcuda_allocation_added(allocation.base, allocation.size, allocation.device.ordinal)

    def allocation_removed(self, base: int) -> None:
        self._lib.rcuda_allocation_removed(base)

    def allocations_cleared(self) -> None:
        self._lib.rcuda_allocations_cleared()

    # and of the pinned host memory (client/memory/host.py), for the copies it records.
    def pinned_added(self, found) -> None:
        self._lib.rcuda_pinned_added(found.base, found.size)

    def pinned_removed(self, base: int) -> None:
        self._lib.rcuda_pinned_removed(base)

    def pinned_block(self, base: int, span: int, device, add: bool = True) -> None:
        """A block of page-locked memory kernels can reach (client/memory/pinned.py),
        attached to `device` or to none; or gone (`add` false)."""
        self._lib.rcuda_pinned_block(base, span, -1 if device is None else device.ordinal, int(add))

    def records_in_c(self, ordinal: int) -> int | None:
        return self._lib.rcuda_fast_records_made(ordinal)

    # Mapped host memory (native/mapped_memory.c, client/memory/mapped.py).
    def mirror_add(self, host: int, size: int, device_ptr: int, device, alias: int, dirty: bool,
                   device_only_reads: bool, guarded: bool = False) -> int:
        """`alias`: a second writable mapping of the host copy's pages (0: none).
        `guarded`: managed memory, kept from the host while the device may
        write it (native/mapped_memory.c)."""
        if device.ordinal >= self._lib.FAST_MAX_DEVICES:
            raise CudaError(cudaError.cudaErrorNotSupported,
                            f"mapped host memory on {device.label}: only the first "
                            f"{self._lib.FAST_MAX_DEVICES} devices can have it")
        return self._lib.rcuda_mirror_add(host, size, device_ptr, device.ordinal, alias, int(dirty),
                                          int(device_only_reads), int(guarded))

    def mirror_guard(self, slot: int, guarded: bool) -> None:
        """Whether managed memory is kept from the host while its device may write it."""
        self._lib.rcuda_mirror_guard(slot, int(guarded))

    def mirror_prefetch(self, slot: int, offset: int, size: int) -> None:
        """Managed memory prefetched to the host: the next synchronisation brings it."""
        self._lib.rcuda_mirror_prefetch(slot, offset, size)

    def mirror_on_touch(self, on: bool) -> None:
        """Managed memory comes back where the host touches it (RCUDA_MANAGED_ON_TOUCH)."""
        self._lib.rcuda_mirror_on_touch(int(on))

    def mirror_remove(self, slot: int) -> None:
        self._lib.rcuda_mirror_remove(slot)

    def mirrors_forget(self, device=None) -> None:
        self._lib.rcuda_mirrors_forget(-1 if device is None else device.ordinal)

    def mirror_written(self, device, stream: int) -> None:
        """Work that may write mapped memory went to `device` in `stream`
        (C notes its own launches)."""
        self._lib.rcuda_mirror_written(device.ordinal, stream)

    def mirror_before_sync(self, device, op: str, fields: dict):
        """Before a synchronising request goes out: what its reply will mean
        for the device's mapped memory (a token for mirror_refresh)."""
        token = self._ffi.new("struct mirror_sync *")
        self._lib.rcuda_mirror_before_sync(device.ordinal, SYNC_SCOPES[op], fields.get("stream", 0), token)
        return token

    def mirror_refresh(self, device, token) -> None:
        """After a synchronising reply: the device's mapped memory gets what
        the device wrote, if it may have (token.pending).  On a lane C
        downloads it; on a ZeroMQ link Python does, ahead of its queue."""
        ffi, lib, link = self._ffi, self._lib, device.link
        if not token.pending:
            return
        handle = getattr(link, "handle", None)
        if handle is not None:
            reply = ffi.new("struct link_reply *")
            result = lib.rcuda_mirror_refresh(device.ordinal, handle, token, reply)
            try:
                if result > 0:
                    raise link.failed_in_c("mapped memory", result, reply.error_number)
                if result < 0:
                    device.answered("mirror_dtoh", protocol.unpack(ffi.buffer(reply.header, reply.header_size)))
            finally:
                lib.rcuda_link_free(reply)
            return
        slots, pointers = ffi.new("int[]", MAX_MIRRORS), ffi.new("uint64_t[]", MAX_MIRRORS)
        sizes = ffi.new("uint64_t[]", MAX_MIRRORS)
        with device.mirror_lock:  # one download of a mirror at a time (as C's refresh_lock)
            for i in range(lib.rcuda_mirror_slots(device.ordinal, slots, pointers, sizes, MAX_MIRRORS)):
                reply, frames = link.call({"op": "mirror_dtoh", "src": pointers[i], "size": sizes[i]}, urgent=True)
                device.answered("mirror_dtoh", reply)
                data = frames[0].buffer if len(frames) == 1 else b"".join(f.buffer for f in frames)
                if "runs" in reply:  # only the pages that changed (server/mirror_views.py)
                    if lib.rcuda_mirror_store_runs(slots[i], pointers[i], ffi.from_buffer(data), len(data),
                                                   reply["runs"]):
                        raise CudaError(cudaError.cudaErrorUnknown, f"mirror_dtoh on {device.label}: bad runs")
                    continue
                if len(data) != sizes[i]:
                    raise CudaError(cudaError.cudaErrorUnknown, f"mirror_dtoh on {device.label}: short reply")
                lib.rcuda_mirror_store(slots[i], pointers[i], ffi.from_buffer(data), sizes[i])
        lib.rcuda_mirror_covered(device.ordinal, token)

    def mirror_source(self, ordinal: int):
        """For a ZeroMQ link: its device's mapped memory (MirrorSource)."""
        if ordinal >= self._lib.FAST_MAX_DEVICES:
            return None
        return MirrorSource(self._ffi, self._lib, ordinal)

    def batch_source(self, ordinal: int):
        """A function returning (count, bytes) of the launches C recorded for
        device `ordinal` since the last call, or None."""
        data_out = self._ffi.new("char **")
        count_out = self._ffi.new("uint32_t *")
        lib, ffi = self._lib, self._ffi

        def take():
            size = lib.rcuda_fast_take(ordinal, data_out, count_out)
            if not size:
                return None
            try:
                return count_out[0], ffi.buffer(data_out[0], size)[:]
            finally:
                lib.rcuda_fast_free(data_out[0])

        return take


class MirrorSource:
    """What a ZeroMQ link (client/transport/zmq_socket.py) does for its device's mapped
    memory, which C does itself on a lane (native/mapped_memory.c)."""

    def __init__(self, ffi, lib, ordinal: int):
        self._ffi, self._lib, self.ordinal = ffi, lib, ordinal
        self._data, self._runs, self._count = ffi.new("char **"), ffi.new("uint64_t **"), ffi.new("uint32_t *")

    def take(self):
        """The dirty runs, made clean, as (device address, bytes), or None:
        sent before the next message."""
        ffi, lib = self._ffi, self._lib
        size = lib.rcuda_mirror_take(self.ordinal, self._data, self._runs, self._count)
        if not self._count[0]:
            return None
        try:
            data, runs, taken, offset = ffi.buffer(self._data[0], size)[:], self._runs[0], [], 0
            for i in range(self._count[0]):
                dst, length = runs[2 * i], runs[2 * i + 1]
                taken.append((dst, memoryview(data)[offset:offset + length]))
                offset += length
            return taken
        finally:
            lib.rcuda_fast_free(self._data[0])
            lib.rcuda_fast_free(ffi.cast("char *", self._runs[0]))

    def download_sent(self, device_ptr: int) -> None:
        """A mirror_dtoh of the mirror at `device_ptr` goes out now."""
        self._lib.rcuda_mirror_download_sent(self.ordinal, device_ptr)
