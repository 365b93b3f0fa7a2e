"""The interface every backend implements.

A `Backend` knows the GPUs of one server; `open_device` gives a `Device`, one
GPU as seen by one client session.  A session's worker drives each `Device`
from a single thread, so implementations need no locking of their own.

Names follow the CUDA runtime (`malloc`, `memcpy_htod`, `launch`, ...).
Failures raise `rcuda.errors.CudaError` with the status a real GPU would give
(e.g. cudaErrorIllegalAddress for an out-of-bounds access in a kernel); the
worker turns them into error replies, and decides which are sticky.

No method waits for the device.  What a synchronising request waits for
(cudaStreamSynchronize, cudaMemcpy to the host, cudaFree, ...) comes back as
a `Completion`, and the device service keeps serving the session's other
requests until it is ready: one client thread waiting on one stream holds up
no other.
"""
from __future__ import annotations

import abc
import bisect
import functools
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from rcuda import launch_rules
from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError
from rcuda.protocol import VA_WINDOW_SIZE  # noqa: F401 - the backends' import of it

from .chunk_digests import on_host

#: cudaMalloc's guaranteed alignment.
ALLOCATION_ALIGNMENT = 256

#: cudaDeviceGetP2PAttribute's attributes, by name.
P2P_ATTRIBUTES = tuple(ENUMS["cudaDeviceP2PAttr"])


@dataclass(frozen=True)
class ParamLayout:
    """Where each kernel parameter sits in the packed parameter buffer."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    @functools.cached_property  # read on every launch
    def buffer_size(self) -> int:
        return max((o + s for o, s in zip(self.offsets, self.sizes)), default=0)


class Completion(abc.ABC):
    """The moment some queued device work is done: what a synchronising
    request waits for.  The device service never blocks on one; it keeps
    serving other requests and answers when `ready()`."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """Whether the work is done (never blocks)."""

    def deadline(self) -> float | None:
        """time.perf_counter() at which it will be ready, when the backend
        knows (sim); None when only `Device.wake_fd` will tell (cupy)."""
        return None

    def release(self) -> None:
        """Free what it holds (a cupy event); called once, ready or not."""

    def watch(self) -> None:
        """Have `Device.wake_fd` signal when it is ready (cupy: a waiter
        thread).  The service calls it once it stops polling `ready()`
        itself; where `deadline()` is known there is nothing to do."""

    def wait(self) -> None:
        """Block until ready: only where blocking is right (a peer copy's
        source bytes, the end of a session)."""
        while not self.ready():
            deadline = self.deadline()
            time.sleep(max(deadline - time.perf_counter(), 0.0) if deadline is not None else 0.0005)


class WatchedCompletion(Completion):
    """A Completion of real device work (cupy): `watch` starts a waiter
    thread that blocks in `_block` (off the GPU thread) and then calls
    `wake` (the device's wake_fd).  What it holds (`_give_back`) returns
    once it is released and no waiter uses it any more."""

    def __init__(self, wake, name: str, watchers: set | None = None):
        self._wake = wake
        self._name = name
        self._watchers = watchers  # the device's live waiter threads, if it joins them at its close
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._released = False

    def _block(self) -> None:
        """Wait until the work is done (errors are for ready() to report)."""
        raise NotImplementedError

    def _give_back(self) -> None:
        """Return what the Completion holds (events, a slot)."""

    def watch(self) -> None:
        with self._lock:
            if self._watcher is None and not self._released:
                self._watcher = threading.Thread(target=self._watch, name=self._name, daemon=True)
                if self._watchers is not None:
                    self._watchers.add(self._watcher)
                self._watcher.start()

    def _watch(self) -> None:
        try:
            self._block()
        finally:
            self._wake()
            with self._lock:
                if self._watchers is not None:
                    self._watchers.discard(self._watcher)
                self._watcher = None
                if self._released:
                    self._give_back()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
            if self._watcher is not None:
                return  # the waiter gives it back when its wait ends
        self._give_back()


class Done(Completion):
    """Already complete (e.g. anything on a sim device without COSTS)."""

    __slots__ = ()

    def ready(self) -> bool:
        return True

    def deadline(self) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "Done()"


class Device(abc.ABC):
    """One GPU, as seen by one client session.

    Streams and events are named by ids the client chooses (so creating one
    needs no round trip); stream 0 is the legacy default stream.  The
    session's DeviceService checks that an id exists before calling here.
    Operations taking a `stream` are ordered on it; on the sim backend, which
    runs everything at once in the device thread, every order is kept."""

    index: int  # server-side device ordinal
    #: Runs `launches` batches in C (cupy: cuda_batches.BatchExecutor); None:
    #: the session's thread runs each record through this class.
    batch_executor = None

    @abc.abstractmethod
    def properties(self) -> dict:
        """cudaDeviceProp fields (CUDA's names) -> values; `name` is a str."""

    @abc.abstractmethod
    def attributes(self) -> dict[str, int]:
        """cudaDeviceGetAttribute answers: {cudaDevAttr name: value}."""

    @abc.abstractmethod
    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes, as cudaMemGetInfo."""

    @abc.abstractmethod
    def memory_in_use(self) -> int:
        """Bytes this session holds on the GPU (for rcuda smi)."""

    # ---------------------------------------------------------- memory

    @abc.abstractmethod
    def malloc(self, size: int) -> int:
        """Allocate `size` bytes of device memory; returns the device address."""

    @abc.abstractmethod
    def free(self, ptr: int) -> Completion:
        """Free an allocation made by `malloc` (cudaErrorInvalidValue otherwise).
        The allocation is forgotten at once: later requests cannot use it.
        cudaFree waits for the device; the Completion says when the free is
        done (the device's work queued so far ended).  cudaFree(NULL): Done."""

    @abc.abstractmethod
    def memcpy_htod(self, dst: int, data: memoryview, stream: int = 0) -> None:
        """Copy host bytes to device address `dst`."""

    @abc.abstractmethod
    def memcpy_dtoh(self, src: int, size: int, stream: int = 0) -> tuple[memoryview, Completion]:
        """Copy `size` bytes from device address `src` in stream order:
        (the bytes as they are when the copy runs, when that is).  The bytes
        may be sent only once the Completion is ready.

        Where the Completion is ready already (`Done`), the bytes may be a
        view of device memory that a later operation changes, as before: the
        caller sends them before the device serves anything else.  Otherwise
        they stay as returned (the sim returns a snapshot: later work of
        other streams may change the memory before the copy's time comes;
        cupy, bytes the device fills by then)."""

    def host_view(self, ptr: int, size: int, stream: int | None = None) -> memoryview | None:
        """Device memory [ptr, ptr + size) as writable bytes of this
        process, where the backend keeps it so (the sim); None where it is
        on a GPU.  A copy arriving on a lane is read straight into it.  The
        range has been checked (check_range).  `stream`, where the caller
        gives it, is the copy's: the sim then orders the copy there in its
        modelled time (without it, the copy has no place in any stream)."""
        return None

    def upload_buffer(self, size: int) -> memoryview | None:
        """Where `size` bytes of an upload still arriving from the network
        may be read to, so that memcpy_htod of them (next, with the buffer
        itself or a prefix of it) copies them no more: the cupy backend's
        page-locked staging, which the copy engine reads.  None: any buffer
        will do."""
        return None

    # Mapped host memory (the device copies of the program's mapped ranges,
    # client/memory/mapped.py): written and read at once, in no stream, as
    # a kernel on any stream would find host memory.  The range is checked
    # by the caller (check_range).

    def write_now(self, dst: int, data: memoryview) -> None:
        """Write host bytes to device address `dst` now, whatever the streams
        are doing (a kernel launched after this returns sees them)."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no mapped host memory")

    def read_now(self, src: int, size: int) -> memoryview:
        """The `size` bytes at device address `src` as they are now (what
        kernels wrote to them so far).  May be a view of device memory that
        the caller sends before serving anything else."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no mapped host memory")

    def chunk_digests(self, src: int, size: int, chunk: int) -> np.ndarray:
        """One uint64 digest per `chunk` bytes of the `size` bytes at `src` as
        they are now (the last chunk may be short): equal digests, equal
        bytes, but for a chance of about 2**-64 (server/mirror_views.py).
        This default digests what read_now gives on the host."""
        return on_host(self.read_now(src, size), chunk)

    @abc.abstractmethod
    def memcpy_dtod(self, dst: int, src: int, size: int, stream: int = 0) -> None:
        """Copy between two device addresses of this device."""

    def memcpy_dtod_batch(self, copies: list[tuple[int, int, int]], stream: int = 0) -> None:
        """cudaMemcpyBatchAsync's copies within this device: (dst, src, size)
        each, in `stream`, in no particular order among themselves.  Every
        range is checked first, so a bad batch copies nothing.  This default
        makes them one memcpy_dtod at a time."""
        for dst, src, size in copies:
            self.check_range(src, size, "cudaMemcpyBatchAsync (source)")
            self.check_range(dst, size, "cudaMemcpyBatchAsync (destination)")
        for dst, src, size in copies:
            self.memcpy_dtod(dst, src, size, stream)

    @abc.abstractmethod
    def memset(self, ptr: int, value: int, size: int, stream: int = 0, elem: int = 1) -> None:
        """Set `size` bytes at `ptr` to the low `elem` bytes of `value`
        repeated (elem 1, 2 or 4: cuMemsetD8/D16/D32; `size` a multiple of it)."""

    # ---------------------------------------------------------- IPC (server/ipc.py)

    def ipc_export(self, ptr: int) -> tuple[int, int]:
        """cudaIpcGetMemHandle of the allocation starting at `ptr`: a file
        descriptor another process of this server can map its bytes from
        (this device keeps it), and the size."""
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"{type(self).__name__}: no IPC (cudaIpcGetMemHandle) on this backend")

    def tensor_map_encode(self, tensor_map) -> bytes:
        """cuTensorMapEncode*: the 128 bytes of a CUtensorMap (rcuda/tensor_maps.py's
        TensorMap), as this backend's kernels read them."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no tensor maps on this backend")

    def tensor_map_replace(self, raw: bytes, address: int) -> bytes:
        """cuTensorMapReplaceAddress of an encoded map."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no tensor maps on this backend")

    def event_export(self, event: int) -> int:
        """cudaIpcGetEventHandle of an event made with cudaEventInterprocess: a
        file descriptor another process of this server can open it from
        (this device keeps it)."""
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"{type(self).__name__}: no IPC events (cudaIpcGetEventHandle) on this backend")

    def event_open(self, event: int, flags: int, fd: int) -> None:
        """cudaIpcOpenEventHandle: event `event` of this session is another
        process's, exported as `fd` (which the caller closes)."""
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"{type(self).__name__}: no IPC events (cudaIpcOpenEventHandle) on this backend")

    def ipc_open(self, fd: int, size: int) -> int:
        """Map another process's exported allocation (`fd`, which the
        caller closes); its address here."""
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"{type(self).__name__}: no IPC (cudaIpcOpenMemHandle) on this backend")

    def ipc_close(self, ptr: int) -> None:
        """cudaIpcCloseMemHandle: unmap what ipc_open mapped at `ptr`."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no IPC on this backend")

    # ---------------------------------------------------------- arrays and regions
    # CUDA arrays, and copies of boxes of bytes (cudaMemcpy2D/3D, to and
    # from arrays): see server/backends/arrays.py for ArraySpec and Place.
    # An extent is (width in bytes, height, depth), none of them 0; host
    # bytes travel packed (rows back to back, slices back to back).  Every
    # place is checked whole before anything moves.

    def array_create(self, array: int, spec) -> None:
        """Create array (or mipmapped array) `array` as `spec` says: the id
        is the client's; out of memory is cudaErrorMemoryAllocation."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no CUDA arrays")

    def array_destroy(self, array: int) -> None:
        """Free an array (cudaErrorInvalidResourceHandle for an unknown id)."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no CUDA arrays")

    @abc.abstractmethod
    def check_region(self, place, extent: tuple[int, int, int], what: str) -> None:
        """Raise what a copy of the box at `place` would (a copy that
        arrives in parts is checked whole before its first part lands)."""

    @abc.abstractmethod
    def region_htod(self, dst, extent: tuple[int, int, int], data: memoryview, stream: int = 0) -> None:
        """Write packed host bytes into the box at `dst` (a Place)."""

    @abc.abstractmethod
    def region_dtoh(self, src, extent: tuple[int, int, int], stream: int = 0) -> tuple[memoryview, Completion]:
        """The box at `src`, packed, and when it is there (as memcpy_dtoh)."""

    @abc.abstractmethod
    def region_dtod(self, dst, src, extent: tuple[int, int, int], stream: int = 0) -> None:
        """Copy a box between two places of this device."""

    @abc.abstractmethod
    def region_memset(self, dst, value: int, extent: tuple[int, int, int], stream: int = 0, elem: int = 1) -> None:
        """Set a box of linear memory as memset sets bytes (width a multiple of elem)."""

    def texture_create(self, resource: dict, texture: dict, view: dict | None) -> int:
        """A texture object over `resource` (dicts as rcuda/protocol.py says);
        returns the handle a kernel receives."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no texture objects")

    def texture_destroy(self, handle: int) -> None:
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no texture objects")

    def surface_create(self, resource: dict) -> int:
        """A surface object over an array resource; returns its handle."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no surface objects")

    def surface_destroy(self, handle: int) -> None:
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no surface objects")

    def bind_reference(self, module_key: str, name: str, surface: bool, resource: dict,
                       texture: dict | None) -> None:
        """Bind the driver's legacy texture (or surface) reference `name` of
        a loaded module to `resource` for its kernels' next
        launches, sampled as `texture` (cudaTextureDesc's fields) says."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no texture references")

    # ---------------------------------------------------------- code

    @abc.abstractmethod
    def load_module(self, key: str, image: bytes) -> str:
        """Load a module image under `key` (a content hash): a fatbinary, a
        cubin or PTX text, as cuModuleLoadData takes them.  Returns the JIT
        compiler's info log ("" when there is none); bad PTX is
        cudaErrorInvalidPtx with the compiler's error log as message."""

    @abc.abstractmethod
    def link(self, inputs: list[tuple[str, bytes]]) -> tuple[bytes, str]:
        """cuLinkComplete: link (name, image) inputs (fatbinaries, cubins,
        PTX) into one image a later load_module takes; (the image, the info
        log).  Failures as load_module's."""

    @abc.abstractmethod
    def get_function(self, module_key: str, name: str, layout: ParamLayout) -> object:
        """Look up kernel `name` (mangled) in a loaded module; returns a handle
        for `launch`.  cudaErrorInvalidDeviceFunction if it has no code here."""

    @abc.abstractmethod
    def function_attributes(self, function: object) -> dict:
        """cudaFuncAttributes fields (CUDA's names) of a kernel."""

    @abc.abstractmethod
    def function_set_attribute(self, function: object, attribute: str, value: int) -> None:
        """cudaFuncSetAttribute, by cudaFuncAttribute name."""

    @abc.abstractmethod
    def get_symbol(self, module_key: str, name: str) -> tuple[int, int]:
        """(device address, size) of a __device__/__constant__ variable of a
        loaded module (cudaErrorInvalidSymbol if there is none)."""

    @abc.abstractmethod
    def launch(self, function: object, grid: tuple[int, int, int], block: tuple[int, int, int],
               params: bytes, shared_mem: int, stream: int, cooperative: bool = False,
               cluster: tuple[int, int, int] | None = None) -> None:
        """Launch a kernel with its packed parameter buffer; `cooperative`:
        as cudaLaunchCooperativeKernel (the client checked that the grid fits
        on the device at once); `cluster`: a thread block cluster launch of
        that shape (the client checked it: rcuda/launch_rules.py), None for
        any other launch (a kernel with __cluster_dims__ still runs as
        clusters of its own shape)."""

    # ---------------------------------------------------------- streams, events

    @abc.abstractmethod
    def synchronize(self) -> Completion:
        """When all the session's work on this device queued so far, on every
        stream, is done (cudaDeviceSynchronize)."""

    @abc.abstractmethod
    def stream_create(self, stream: int, flags: int, priority: int) -> None:
        """Create stream `stream` (cudaStreamNonBlocking in `flags`)."""

    @abc.abstractmethod
    def stream_destroy(self, stream: int) -> None:
        """Destroy a stream once its work is done (as cudaStreamDestroy)."""

    @abc.abstractmethod
    def stream_synchronize(self, stream: int) -> Completion:
        """When the stream's work enqueued so far is done
        (cudaStreamSynchronize)."""

    @abc.abstractmethod
    def stream_query(self, stream: int) -> bool:
        """True when all the stream's work is done (never blocks)."""

    @abc.abstractmethod
    def stream_wait_event(self, stream: int, event: int) -> None:
        """Later work on `stream` waits for the event's last record."""

    def stream_mem_ops(self, ops: list[tuple[int, int, int, int]], stream: int) -> None:
        """cuStreamBatchMemOp: `ops` ([kind, address, value, flags] each,
        checked by rcuda/stream_memops.py's `problem`) in order in `stream`:
        a write puts a 4- or 8-byte little-endian value at its address, a
        wait holds the stream's later work until the word there meets its
        condition.  Every address is checked against the session's
        allocations (cudaErrorInvalidValue) before anything runs."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"{type(self).__name__}: no stream memory operations")

    def graph_capture(self, stream: int, run) -> object:
        """A CUDA graph of the device's own made from the work `run()` issues
        into `stream` (stream capture), instantiated: what graph_launch runs
        (server/graphs.py).  A backend without graphs raises
        NotImplementedError, and the work is then run request by request."""
        raise NotImplementedError

    def graph_launch(self, graph: object, stream: int) -> None:
        """Launch a graph graph_capture made into `stream`."""
        raise NotImplementedError

    def graph_release(self, graph: object) -> None:
        """Free a graph graph_capture made."""

    @abc.abstractmethod
    def event_create(self, event: int, flags: int) -> None:
        """Create event `event` (cudaEventDisableTiming etc. in `flags`)."""

    @abc.abstractmethod
    def event_destroy(self, event: int) -> None:
        """Destroy an event."""

    @abc.abstractmethod
    def event_record(self, event: int, stream: int) -> None:
        """Record the event at this point of the stream."""

    @abc.abstractmethod
    def event_synchronize(self, event: int) -> Completion:
        """When the event's last record has happened (Done if it was never
        recorded), as cudaEventSynchronize."""

    @abc.abstractmethod
    def event_query(self, event: int) -> bool:
        """True when the event's last record has happened (or it never was
        recorded); never blocks."""

    @abc.abstractmethod
    def event_elapsed_ms(self, start: int, end: int) -> float:
        """Milliseconds between two recorded events, as cudaEventElapsedTime
        (cudaErrorInvalidResourceHandle if either was never recorded or has
        timing disabled, cudaErrorNotReady if one has not happened yet).
        Never waits."""

    def wake_fd(self) -> int | None:
        """A file descriptor the device service polls beside its sockets: it
        becomes readable when a Completion without a deadline may have
        become ready (cupy).  None (the sim): deadlines say it all."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """End the session on this device: free everything it allocated.
        May block until the device is idle (it is the session's end)."""

    def take_output(self) -> str:
        """Device output (printf) produced since the last call, and forget it.
        Backends that cannot capture device output return ""."""
        return ""

    def request_server(self):
        """What serves small synchronous requests of a plain lane in C
        (cuda_batches.BatchExecutor, native/served_requests.c), or None:
        the device service serves them all (the sim)."""
        return None

    def output_position(self) -> tuple[int, int]:
        """Where device output is captured (a file descriptor, -1 for
        none) and how much of it take_output has handed out."""
        return -1, 0

    # -- performance hints: a backend that models no cache or scheduling (the
    # sim) ignores them; the client keeps what the program reads back.

    def stream_set_attribute(self, stream: int, attribute: str, value) -> None:
        """cudaStreamSetAttribute: `attribute` a cudaLaunchAttributeID name,
        `value` as client/stream_attributes.py sends it (checked there; a
        backend that applies it checks its shape again)."""

    def reset_persisting_l2(self) -> None:
        """cudaCtxResetPersistingL2Cache."""

    def libraries(self):
        """The provider of cuBLAS, cuFFT and cuRAND calls (server/library_calls.py):
        create(call, args), destroy(obj), run(call, obj, args, stream, answered)."""
        raise CudaError(cudaError.cudaErrorNotSupported, "this backend does not serve the CUDA libraries")

    # -- multi-GPU (server/peer.py).  Concrete defaults, so a backend that
    # knows nothing of peers still works: copies between GPUs then go
    # through host memory, and direct peer access is refused.

    def extent(self, ptr: int) -> int:
        """The size of the allocation (or mapping) starting at `ptr`; 0 if none does."""
        table = getattr(self, "_memory", None)
        found = table.containing(ptr, 1) if isinstance(table, AllocationTable) else None
        return found.size if found is not None and found.start == ptr else 0

    def check_range(self, ptr: int, size: int, what: str) -> None:
        """cudaErrorInvalidValue unless [ptr, ptr + size) lies inside one
        allocation of this session.  Backends keeping their allocations in
        `self._memory` (an AllocationTable) get this for free."""
        table = getattr(self, "_memory", None)
        if size and isinstance(table, AllocationTable):
            table.require(ptr, size, what)

    def peer_attributes(self, peer: int) -> dict[str, int]:
        """cudaDeviceGetP2PAttribute of the link from this GPU to server-side
        GPU `peer` (another one), by attribute name: no link by default.
        cudaDevP2PAttrAccessSupported is whether kernels on this GPU can load
        and store `peer`'s memory once peer access is enabled."""
        return dict.fromkeys(P2P_ATTRIBUTES, 0)

    def set_peer_access(self, peer: int, enable: bool) -> None:
        """cudaDeviceEnablePeerAccess / cudaDeviceDisablePeerAccess."""
        raise CudaError(cudaError.cudaErrorPeerAccessUnsupported,
                        f"GPU {self.index} cannot access GPU {peer} directly on this backend "
                        f"(cudaMemcpyPeer still copies between them)")

    def set_allocation_access(self, ptr: int, peer: int, flags: int) -> None:
        """Whether kernels on GPU `peer` may use the allocation starting at
        `ptr` (cudaMemAccessFlags; 0: not any more): what
        cudaMemPoolSetAccess asks of a pool's memory, and cuMemSetAccess of
        a mapping."""
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"GPU {self.index}: access to single allocations from GPU {peer} is not supported by "
                        f"this backend")

    # -- the driver's virtual memory management (client/driver/vmm.py):
    # physical allocations named by the client's handles, mapped at
    # addresses the client chose.  A mapping is an allocation of the
    # session (copies, memsets, kernels use it) whose bytes are the physical
    # allocation's; `physical` (a PhysicalTable) keeps the references.

    def vmm_granularity(self) -> tuple[int, int]:
        """(minimum, recommended) cuMemGetAllocationGranularity of device memory here."""
        return VMM_GRANULARITY, VMM_GRANULARITY

    def vmm_create(self, handle: int, size: int, shareable: bool = False) -> None:
        """cuMemCreate: `size` bytes (a multiple of the granularity) of physical
        memory; `shareable`: with a POSIX file descriptor handle (vmm_export)."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"GPU {self.index}: no virtual memory management here")

    def vmm_export(self, handle: int) -> int:
        """cuMemExportToShareableHandle of a shareable physical allocation: a
        file descriptor another process of this server imports it from (this
        device keeps it)."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"GPU {self.index}: no shareable physical memory here")

    def vmm_import(self, handle: int, fd: int, size: int) -> None:
        """cuMemImportFromShareableHandle: another process's physical
        allocation (`fd`, which the caller closes), named `handle` here."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"GPU {self.index}: no shareable physical memory here")

    def vmm_retain(self, handle: int) -> None:
        self.physical.get(handle, "vmm_retain").refs += 1

    def vmm_release(self, handle: int) -> None:
        """One reference fewer: freed once none is left and nothing maps it."""
        physical = self.physical.get(handle, "cuMemRelease")
        physical.refs -= 1
        self._free_if_unused(handle, physical)

    def vmm_map(self, ptr: int, size: int, offset: int, handle: int) -> None:
        """cuMemMap: bytes [offset, offset + size) of `handle` at `ptr`."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"GPU {self.index}: no virtual memory management here")

    def vmm_unmap(self, ptr: int) -> None:
        """cuMemUnmap of the mapping at `ptr`."""
        raise CudaError(cudaError.cudaErrorNotSupported, f"GPU {self.index}: no virtual memory management here")

    def _free_if_unused(self, handle: int, physical: "Physical") -> None:
        if physical.refs <= 0 and physical.mappings <= 0:
            self.physical.remove(handle)
            self._vmm_free(physical)

    def _vmm_free(self, physical: "Physical") -> None:
        """Give back a physical allocation nothing uses any more."""

    def _check_vmm_range(self, ptr: int, size: int, offset: int, physical: "Physical") -> None:
        """What cuMemMap checks: granularity-aligned, inside the physical
        allocation, over no other mapping, from the allocation's start."""
        granularity = self.vmm_granularity()[0]
        if size <= 0 or (ptr | size | offset) % granularity or offset + size > physical.size:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cuMemMap({ptr:#x}, {size}, offset {offset}): size, address and offset must be "
                            f"multiples of {granularity}, inside the {physical.size}-byte allocation")
        if self._memory.overlaps(ptr, size):
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cuMemMap({ptr:#x}, {size}): overlaps a mapping")
        if offset:  # cuda.h: the offset "currently must be zero"; a GPU's driver answers CUDA_ERROR_NOT_SUPPORTED
            raise CudaError(cudaError.cudaErrorNotSupported,
                            f"cuMemMap({ptr:#x}, {size}, offset {offset}): CUDA maps physical memory from its start "
                            f"only")


class Backend(abc.ABC):
    """The GPUs of one server."""

    name: str

    @abc.abstractmethod
    def device_count(self) -> int:
        """How many GPUs this server serves."""

    @abc.abstractmethod
    def open_device(self, index: int, window=None) -> Device:
        """Open server-side GPU `index` for one session.  Allocations are placed
        in `window` (a reservation of VA_WINDOW_SIZE bytes, from `reserve`)
        when it is given; the device does not release it."""

    @abc.abstractmethod
    def reserve(self, index: int, size: int, hint: int | None):
        """`size` bytes of device addresses, valid on every GPU of this
        worker, as cuMemAddressReserve gives them: at `hint` when the driver
        takes it, elsewhere otherwise.  Returns a reservation (`base`,
        `size`, `release()`); `index` is the GPU asking, for messages."""


# ---------------------------------------------------------------- helpers
# Shared by the backends, so every backend checks pointers and launch
# configurations the same way.


#: The sim's cuMemGetAllocationGranularity (and a real GPU's, for device memory).
VMM_GRANULARITY = 2 << 20

#: numpy element types of memset patterns, by size.
PATTERN_TYPES = {1: "u1", 2: "<u2", 4: "<u4"}


def fill_pattern(target, value: int, elem: int) -> None:
    """A memset: numpy bytes `target` set to `value`'s low `elem` bytes, repeated."""
    target.view(PATTERN_TYPES[elem])[:] = value & ((1 << 8 * elem) - 1)


@dataclass
class Physical:
    """A physical allocation (cuMemCreate), alive while the client holds a
    handle to it or it is mapped."""

    size: int
    memory: object = None  # the backend's (sim: a numpy array; cupy: the driver's handle)
    refs: int = 1
    mappings: int = 0
    shared: int | None = None  # the file descriptor its bytes are in (shareable or imported: the sim's)


class PhysicalTable:
    """A session's physical allocations on one device, by the client's handles."""

    def __init__(self):
        self._by_handle: dict[int, Physical] = {}
        self.bytes_in_use = 0

    def add(self, handle: int, physical: Physical) -> None:
        if handle in self._by_handle:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cuMemCreate: handle {handle:#x} is in use")
        self._by_handle[handle] = physical
        self.bytes_in_use += physical.size

    def get(self, handle: int, what: str) -> Physical:
        physical = self._by_handle.get(handle)
        if physical is None:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: {handle:#x} is no physical allocation here")
        return physical

    def remove(self, handle: int) -> None:
        self.bytes_in_use -= self._by_handle.pop(handle).size

    def clear(self) -> list[Physical]:
        physicals = list(self._by_handle.values())
        self._by_handle.clear()
        self.bytes_in_use = 0
        return physicals


@dataclass
class Allocation:
    start: int
    size: int
    memory: object = None  # the backend's own handle on the bytes (sim: a numpy array)
    symbol: bool = False   # a __device__ variable's storage: not for cudaFree
    #: A cuMemMap mapping: (handle, Physical) whose bytes these are (counted there); cuMemUnmap removes it
    mapped: tuple | None = None
    #: Other GPUs of the server whose kernels may use it (set_allocation_access): index -> cudaMemAccessFlags
    accessors: dict = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.start + self.size


class AllocationTable:
    """A session's allocations on one device, found by address.

    Every pointer coming from a client is looked up here before the backend
    touches memory, so a session can only reach what it allocated itself.

    Only the device's own thread changes a table, under `lock`; another
    GPU's thread (a sim kernel with peer access) reads it under `lock` too.
    """

    def __init__(self):
        self._starts: list[int] = []  # sorted
        self._by_start: dict[int, Allocation] = {}
        self.bytes_in_use = 0
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._starts)

    def __iter__(self):
        return (self._by_start[start] for start in self._starts)

    def add(self, allocation: Allocation) -> None:
        with self.lock:
            bisect.insort(self._starts, allocation.start)
            self._by_start[allocation.start] = allocation
        if allocation.mapped is None:
            self.bytes_in_use += allocation.size

    def remove(self, ptr: int, unmap: bool = False) -> Allocation:
        """Forget the allocation starting at `ptr` (what cudaFree does, or
        with `unmap` cuMemUnmap); cudaErrorInvalidValue for any other pointer
        (unknown, interior, already freed, a __device__ variable's storage,
        a mapping for cudaFree or an allocation for cuMemUnmap)."""
        allocation = self._by_start.get(ptr)
        call = "cuMemUnmap" if unmap else "cudaFree"
        if allocation is not None and allocation.symbol:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}({ptr:#x}): that is a __device__ variable")
        if allocation is not None and (allocation.mapped is None) == unmap:
            what = "not a cuMemMap mapping" if unmap else "a cuMemMap mapping (cuMemUnmap unmaps it)"
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}({ptr:#x}): that is {what}")
        if allocation is None:
            containing = self.containing(ptr, 1)
            where = (f"it points {ptr - containing.start} bytes into the allocation at {containing.start:#x}"
                     if containing else "it is not an allocation of this session (or was already freed)")
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}({ptr:#x}): {where}")
        with self.lock:
            del self._by_start[ptr]
            del self._starts[bisect.bisect_left(self._starts, ptr)]
        if allocation.mapped is None:
            self.bytes_in_use -= allocation.size
        return allocation

    def containing(self, ptr: int, size: int) -> Allocation | None:
        """The allocation holding all of [ptr, ptr + size), or None."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        allocation = self._by_start[self._starts[i]]
        return allocation if ptr + size <= allocation.end else None

    def overlaps(self, ptr: int, size: int) -> bool:
        """Whether any allocation shares an address with [ptr, ptr + size)."""
        i = bisect.bisect_left(self._starts, ptr)
        return any(start < ptr + size and ptr < self._by_start[start].end
                   for start in self._starts[max(i - 1, 0):i + 1])

    def require(self, ptr: int, size: int, what: str) -> Allocation:
        """`containing`, or cudaErrorInvalidValue naming the bad range.  This is
        what cudaMemcpy/cudaMemset return for a pointer they cannot use
        (cudaErrorInvalidDevicePointer is deprecated and no longer returned)."""
        allocation = self.containing(ptr, size)
        if allocation is None:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"{what}: [{ptr:#x}, {ptr + size:#x}) is not inside one allocation of this session")
        return allocation

    def clear(self) -> list[Allocation]:
        allocations = list(self)
        with self.lock:
            self._starts.clear()
            self._by_start.clear()
        self.bytes_in_use = 0
        return allocations


def check_launch_configuration(props: dict, grid, block, shared_mem: int) -> None:
    """cudaErrorInvalidConfiguration, naming the limit, for a launch the
    device described by `props` (cudaDeviceProp fields) would refuse
    (rcuda/launch_rules.py)."""
    launch_rules.check_device(launch_rules.device_limits(props), grid, block, shared_mem)
