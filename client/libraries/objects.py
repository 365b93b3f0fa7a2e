"""The objects programs hold of cuBLAS, cuFFT and cuRAND (handles, plans,
generators), and the `lib` call that forwards one's calls to its GPU.

An object is created on the current device and works there: its calls go
to that GPU's server in the object's stream, after everything the program
sent that stream before, as a library's kernels would.  Calls whose
results the program reads on the host (a dot product in host pointer mode,
a plan's work size, a host generator's numbers) wait for their reply; the
rest are sent without waiting, and their failures surface at the next
synchronising call, as a GPU's do.

The client state (client/state.py) forgets a device's objects at its reset,
so this module imports only client/interposer.py of the client.
"""
from __future__ import annotations

import itertools
import threading

from rcuda.errors import CudaError, cudaError
from rcuda.library_errors import LibraryError

from .. import interposer

#: Where the handles programs hold start (cuBLAS handles, cuRAND generators
#: are pointers; cuFFT plans are ints, numbered from 1 as cuFFT's).
LIBRARY_HANDLES_FROM = 0x5D00_0000_0000


class LibraryObject:
    """A cuBLAS handle, cuFFT plan or cuRAND generator: the program's
    handle for it, its id on its GPU's server, and the stream its calls use."""

    library = ""

    def __init__(self, handle: int, object_id: int, device, stream):
        self.handle, self.id, self.device = handle, object_id, device
        self.stream = stream              # client/streams.py's Stream
        self.stream_handle = 0            # the cudaStream_t the program gave (its Get*Stream)
        self.destroyed = False

    def use_stream(self, stream_handle) -> None:
        """Later calls go into the program's stream `stream_handle` (0: the
        legacy default stream), which must be of this object's GPU."""
        stream = interposer.stream_of(stream_handle, device=self.device)
        if stream.device is not self.device:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                            f"stream {interposer.address(stream_handle):#x} is on {stream.device.label}, this "
                            f"{self.library} object on {self.device.label}")
        self.stream, self.stream_handle = stream, interposer.address(stream_handle)

    def call(self, name: str, args: list, wait: bool = False):
        """Forward `name` with `args` (already in the form client and server
        agree on) in this object's stream.  With `wait`: (the results the
        reply carries, its payload frames), raising LibraryError for a
        library status; else None."""
        device, stream = self.device, self.stream.id
        if wait:
            reply, payload = device.request("lib", call=name, obj=self.id, args=args, stream=stream)
        else:
            device.post("lib", call=name, obj=self.id, args=args, stream=stream)
        if device.mirrored:  # the call may write mapped memory (client/memory/mapped.py), waited for or not
            interposer.rt.fast.mirror_written(device, stream)
        if not wait:
            return None
        if "status" in reply:
            raise LibraryError(reply["status"], f"{name} on {device.label}: {reply.get('msg', '')}")
        return reply.get("results", []), payload


class LibraryObjects:
    """Every live library object of the process, by the handle the program holds."""

    def __init__(self):
        self._lock = threading.Lock()
        self._objects: dict[int, LibraryObject] = {}
        self._ids = itertools.count(1)
        self._pointers = itertools.count(LIBRARY_HANDLES_FROM, 0x10)
        self._plans = itertools.count(1)

    def create(self, kind: type, name: str, args: list, device=None, plan: bool = False) -> LibraryObject:
        """A new `kind` on `device` (the current one), made on its server by
        creation call `name` (waits: a device that cannot serve it fails here)."""
        device = device or interposer.rt.device()
        with self._lock:
            handle = next(self._plans) if plan else next(self._pointers)
            obj = kind(handle, next(self._ids), device, interposer.stream_of(0, device=device))
        obj.call(name, args, wait=True)
        with self._lock:
            self._objects[handle] = obj
        return obj

    def get(self, handle: int, kind: type, call: str, bad_status: str) -> LibraryObject:
        obj = self._objects.get(handle)
        if not isinstance(obj, kind) or obj.destroyed:
            raise LibraryError(bad_status, f"{call}: {handle:#x} is not a live {kind.library} object")
        return obj

    def destroy(self, obj: LibraryObject, name: str) -> None:
        with self._lock:
            self._objects.pop(obj.handle, None)
        obj.destroyed = True
        obj.stream = interposer.stream_of(0, device=obj.device)  # its own stream may be gone already
        obj.call(name, [], wait=True)

    def forget_device(self, device) -> None:
        """cudaDeviceReset: the server freed the device's objects; their handles are invalid."""
        with self._lock:
            for handle, obj in list(self._objects.items()):
                if obj.device is device:
                    obj.destroyed = True
                    del self._objects[handle]

    def forget(self) -> None:
        """After fork: the parent's objects are the parent's."""
        with self._lock:
            self._objects.clear()


#: The process's library objects.
objects = LibraryObjects()
