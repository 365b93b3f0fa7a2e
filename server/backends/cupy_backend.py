"""The cupy backend: real GPUs, through CuPy's bindings of the CUDA runtime
(`cupy.cuda.runtime`) and driver (`cupy.cuda.driver`) APIs.

Memory is plain cudaMalloc memory (not CuPy's memory pool), modules are the
programs' own fatbinaries loaded with cuModuleLoadData, and a launch passes
the client's packed parameter buffer as a pointer per parameter
(cuLaunchKernel's kernelParams): the driver puts each where the image it
loaded wants it, which the client's layout need not match
(native/batch_executor.c says why).
CuPy is imported when a backend is created, so this module imports on
machines without it.

Nothing here blocks the device service's thread: copies to and from the
host go through pinned staging buffers (cudaMemcpyAsync from or into
pageable memory may wait for the stream), and what a synchronising request
waits for is an event recorded where it must (`EventCompletion`), polled by
the service, or watched by a waiter thread that wakes the service through
the device's eventfd once the service stops polling.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import logging
import math
import os
import threading

import numpy as np

from rcuda import fatbin, stream_memops
from rcuda._generated.cuda_enums import ENUMS
from rcuda.device_attributes import DEVICE_ATTRIBUTES
from rcuda.errors import CudaError, cudaError

from . import cuda_arrays, cuda_batches, cuda_jit
from .chunk_digests import GpuDigests
from .arrays import ArraySpec, Place
from .base import (Allocation, AllocationTable, Backend, Completion, Device, Done, ParamLayout, Physical,
                   PhysicalTable, WatchedCompletion, check_launch_configuration)
from .cuda_batches import TaughtAllocationTable
from .cuda_status import driver_status, runtime_status

log = logging.getLogger(__name__)

CUDA_ERROR_NOT_FOUND = 500

#: cudaDeviceP2PAttr -> CUdevice_P2PAttribute (cuda.h; the same numbers, 1..5).
P2P_ATTRIBUTE_NUMBERS = ENUMS["cudaDeviceP2PAttr"]

#: cudaDeviceProp fields that cupy's getDeviceProperties leaves out, read with
#: cudaDeviceGetAttribute instead (cudaDeviceAttr numbers of CUDA 13).
EXTRA_ATTRIBUTES = {
    "memPitch": 11,
    "hostRegisterSupported": 99,
    "sparseCudaArraySupported": 112,
    "hostRegisterReadOnlySupported": 113,
    "timelineSemaphoreInteropSupported": 114,
    "memoryPoolsSupported": 115,
    "gpuDirectRDMASupported": 116,
    "gpuDirectRDMAFlushWritesOptions": 117,
    "gpuDirectRDMAWritesOrdering": 118,
    "memoryPoolSupportedHandleTypes": 119,
    "clusterLaunch": 120,
    "deferredMappingCudaArraySupported": 121,
    "ipcEventSupported": 125,
    "deviceNumaConfig": 130,
    "deviceNumaId": 131,
    "mpsEnabled": 133,
    "hostNumaId": 134,
    "gpuPciDeviceID": 139,
    "gpuPciSubsystemID": 140,
    "hostNumaMultinodeIpcSupported": 143,
}


def _import_cupy():
    try:
        from cupy.cuda import driver, runtime
    except ImportError as exc:
        raise RuntimeError(f"the cupy backend needs CuPy built for this machine's CUDA (e.g. "
                           f"`pip install cupy-cuda13x`), or use --backend sim: {exc}") from exc
    return runtime, driver


class CupyBackend(Backend):
    name = "cupy"

    def __init__(self, devices: int | None = None, memory_bytes: int | None = None):
        self._runtime, self._driver = _import_cupy()
        try:
            available = self._runtime.getDeviceCount()
        except self._runtime.CUDARuntimeError as exc:
            raise CudaError(runtime_status(exc.status), f"no usable GPU: {exc}") from None
        if available == 0:
            raise CudaError(cudaError.cudaErrorNoDevice, "no GPU is visible (check CUDA_VISIBLE_DEVICES)")
        if devices is None:
            devices = available
        elif not 1 <= devices <= available:
            raise CudaError(cudaError.cudaErrorInvalidDevice,
                            f"--devices {devices}: this machine has {available} GPU(s) visible")
        self.devices = devices
        self.memory_bytes = memory_bytes

    def device_count(self) -> int:
        return self.devices

    def reserve(self, index: int, size: int, hint: int | None):
        from .cuda_vmm import Reservation
        try:
            self._runtime.setDevice(index)  # the driver reserves in a context
        except self._runtime.CUDARuntimeError as exc:
            raise CudaError(runtime_status(exc.status), f"reserving addresses on GPU {index}: {exc}") from None
        return Reservation(index, size, hint)

    def open_device(self, index: int, window=None) -> CupyDevice:
        if not 0 <= index < self.devices:
            raise CudaError(cudaError.cudaErrorInvalidDevice, f"GPU {index} is not served here "
                                                              f"(this server has {self.devices})")
        return CupyDevice(self._runtime, self._driver, index, self.memory_bytes, window)


class CupyFunction:
    def __init__(self, handle: int, name: str, layout: ParamLayout):
        self.handle = handle  # CUfunction
        self.name = name
        self.layout = layout


#: cudaFuncAttributes field -> CUfunction_attribute (cuda.h; checked: 0..9).
FUNCTION_ATTRIBUTES = {
    "maxThreadsPerBlock": 0, "sharedSizeBytes": 1, "constSizeBytes": 2, "localSizeBytes": 3, "numRegs": 4,
    "ptxVersion": 5, "binaryVersion": 6, "cacheModeCA": 7, "maxDynamicSharedSizeBytes": 8,
    "preferredShmemCarveout": 9,
}
#: The cluster fields (CUfunction_attribute 10..15, cuda.h), asked of GPUs
#: with thread block clusters only.
CLUSTER_FUNCTION_ATTRIBUTES = {
    "clusterDimMustBeSet": 10, "requiredClusterWidth": 11, "requiredClusterHeight": 12, "requiredClusterDepth": 13,
    "nonPortableClusterSizeAllowed": 14, "clusterSchedulingPolicyPreference": 15,
}
#: cudaFuncAttribute names that cudaFuncSetAttribute may set -> CUfunction_attribute
#: (and the read-only ClusterDimMustBeSet, which the driver refuses as CUDA does).
SETTABLE_FUNCTION_ATTRIBUTES = {
    "cudaFuncAttributeMaxDynamicSharedMemorySize": 8,
    "cudaFuncAttributePreferredSharedMemoryCarveout": 9,
    "cudaFuncAttributeClusterDimMustBeSet": 10,
    "cudaFuncAttributeRequiredClusterWidth": 11,
    "cudaFuncAttributeRequiredClusterHeight": 12,
    "cudaFuncAttributeRequiredClusterDepth": 13,
    "cudaFuncAttributeNonPortableClusterSizeAllowed": 14,
    "cudaFuncAttributeClusterSchedulingPolicyPreference": 15,
}
CUDA_ERROR_NOT_READY = 600
#: cudaEventBlockingSync | cudaEventDisableTiming: the events Completions
#: are made of (a waiter thread sleeps on them rather than spinning).
COMPLETION_EVENT_FLAGS = 0x01 | 0x02
#: cudaStreamNonBlocking: the stream event waits are made on.
STREAM_NON_BLOCKING = 0x01
#: Uploads from this size on go through pinned staging buffers of ours.
STAGE_UPLOADS_FROM = 256 << 10


class EventCompletion(WatchedCompletion):
    """Events recorded on streams: ready when every one has happened."""

    def __init__(self, device: "CupyDevice", events: list[int], on_ready=None):
        super().__init__(device.wake, f"rcuda GPU{device.index} waiter", device._watchers)
        self._device = device
        self._events = events
        self._on_ready = on_ready  # runs once, when first found ready (a deferred free)
        self._ready = False

    def ready(self) -> bool:
        if not self._ready:
            device = self._device
            for event in self._events:
                if not device._done(lambda: device._runtime.eventQuery(event), "waiting for the device"):
                    return False
                with device._cuda("waiting for the device"):
                    # Complete: a synchronisation, which also flushes the
                    # kernels' printf output to stdout (returns at once).
                    device._runtime.eventSynchronize(event)
            self._ready = True
            if self._on_ready is not None:
                self._on_ready()
        return True

    def _block(self) -> None:
        device = self._device
        try:
            device._runtime.setDevice(device.index)
            for event in self._events:
                device._runtime.eventSynchronize(event)
        except device._runtime.CUDARuntimeError:
            pass  # the service's ready() reports the error

    def _give_back(self) -> None:
        self._device._recycle(self._events)

    def wait(self) -> None:
        with self._device._cuda("waiting for the device"):
            for event in self._events:
                self._device._runtime.eventSynchronize(event)
        self.ready()


class CupyDevice(Device):
    def __init__(self, runtime, driver, index: int, memory_limit: int | None, window):
        self.index = index
        self._runtime = runtime
        self._driver = driver
        self.physical = PhysicalTable()  # the program's cuMemCreate allocations (memory: the driver's handle)
        self._program_mappings = None    # cuda_vmm.ProgramMappings, made on first use
        self._modules: dict[str, tuple[int, bytes]] = {}  # module key -> (CUmodule, image)
        self._streams: dict[int, int] = {0: 0}  # client id -> cudaStream_t (0: the legacy default stream)
        self._events: dict[int, int] = {}       # client id -> cudaEvent_t
        self._event_exports: dict[int, int] = {}  # client id -> memory file holding its IPC handle
        self._arrays: dict[int, cuda_arrays.DriverArray] = {}  # client id -> the driver's array
        self._textures: set[int] = set()        # CUtexObject handles the session made
        self._surfaces: set[int] = set()        # CUsurfObject handles
        self._spare_events: list[int] = []      # for Completions, recorded again and again
        self._staged: collections.deque = collections.deque()  # (Completion, pinned buffer) of uploads
        self._landing: np.ndarray | None = None  # the pinned buffer upload_buffer handed out last
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._watchers: set[threading.Thread] = set()  # EventCompletion waiter threads
        self._properties = self._read_properties(memory_limit)
        self._attributes = self._read_attributes()
        self.batch_executor = self._open_batch_executor()
        self._serving: bool | None = None  # whether the executor serves small requests (None: not asked yet)
        self._memory = (TaughtAllocationTable(self.batch_executor) if self.batch_executor is not None
                        else AllocationTable())
        self._total = self._properties["totalGlobalMem"]
        self._window = None
        if window is not None:
            from .cuda_vmm import AddressWindow
            with self._cuda("opening the device's address window"):
                self._window = AddressWindow(index, window)
        with self._cuda("creating the streams of event waits and of mapped memory"):
            self._wait_stream = self._runtime.streamCreateWithFlags(STREAM_NON_BLOCKING)
            self._mirror_stream = self._runtime.streamCreateWithFlags(STREAM_NON_BLOCKING)  # write_now, read_now
        self._libraries = None
        self._digests: GpuDigests | bool | None = None  # made at first use; False: it failed

    # ---------------------------------------------------------- completions

    def wake_fd(self) -> int:
        return self._wake_fd

    def drain_wake_fd(self) -> None:
        try:
            os.eventfd_read(self._wake_fd)
        except (BlockingIOError, OSError):
            pass

    def wake(self) -> None:
        try:
            os.eventfd_write(self._wake_fd, 1)
        except OSError:
            pass  # closed: the session is over

    def _open_batch_executor(self) -> cuda_batches.BatchExecutor | None:
        """C's runner of this GPU's `launches` batches, or None (with a
        warning) where it cannot start: each record then runs through
        Python, as on the sim (or RCUDA_BATCH_EXECUTOR=python says so)."""
        if os.environ.get(cuda_batches.SWITCH_VARIABLE) == "python":
            return None
        try:
            with self._cuda("starting the batch executor"):
                executor = cuda_batches.BatchExecutor(self.index, self._properties, cuda_batches.DRIVER_LIBRARY)
        except OSError as exc:
            log.warning("%s; launches run through Python", exc)
            return None
        executor.set_stream(0, 0)
        return executor

    def _completion(self, streams, on_ready=None) -> Completion:
        """When the work queued so far on `streams` (cudaStream_t handles) is done."""
        events = []
        with self._cuda("recording an event"):
            for stream in streams:
                event = self._spare_events.pop() if self._spare_events else \
                    self._runtime.eventCreateWithFlags(COMPLETION_EVENT_FLAGS)
                self._runtime.eventRecord(event, stream)
                events.append(event)
        return EventCompletion(self, events, on_ready)

    def _join_watchers(self) -> None:
        for thread in list(self._watchers):
            thread.join(timeout=5)

    def _recycle(self, events: list[int]) -> None:
        self._spare_events.extend(events)

    def _reap_staged(self) -> None:
        """Upload staging buffers whose copies are done go back to the pool."""
        staged = self._staged
        while staged and staged[0][0].ready():
            staged.popleft()[0].release()

    def _staging(self, size: int) -> np.ndarray:
        """A pinned host buffer (CuPy's pinned memory pool keeps them)."""
        import cupy
        with self._cuda(f"allocating {size} bytes of pinned memory"):
            memory = cupy.cuda.alloc_pinned_memory(size)
        return np.frombuffer(memory, np.uint8, size)

    # ---------------------------------------------------------- calls into CUDA

    @contextlib.contextmanager
    def _cuda(self, what: str, not_found: cudaError = cudaError.cudaErrorSymbolNotFound):
        """Make this GPU current for the calling thread, and turn CuPy's CUDA
        exceptions into CudaError with the same status."""
        try:
            self._runtime.setDevice(self.index)
            yield
        except self._runtime.CUDARuntimeError as exc:
            raise CudaError(runtime_status(exc.status), f"{what} on GPU {self.index}: {exc}") from None
        except self._driver.CUDADriverError as exc:
            status = not_found if exc.status == CUDA_ERROR_NOT_FOUND else driver_status(exc.status)
            raise CudaError(status, f"{what} on GPU {self.index}: {exc}") from None

    # ---------------------------------------------------------- properties

    def _read_properties(self, memory_limit: int | None) -> dict:
        runtime = self._runtime
        with self._cuda("cudaGetDeviceProperties"):
            raw = runtime.getDeviceProperties(self.index)
            props = {key: list(value) if isinstance(value, tuple) else value for key, value in raw.items()}
            for field, attribute in EXTRA_ATTRIBUTES.items():
                if field not in props:
                    try:
                        props[field] = runtime.deviceGetAttribute(attribute, self.index)
                    except runtime.CUDARuntimeError:
                        pass  # a driver older than the attribute: the field stays 0 for the client
        name = props.get("name", b"")
        props["name"] = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        uuid = _uuid_from_driver(self.index) or bytes(props.get("uuid", b""))
        props["uuid"] = uuid[:16].ljust(16, b"\0")
        hex_uuid = props["uuid"].hex()
        props["uuid_str"] = "-".join((hex_uuid[:8], hex_uuid[8:12], hex_uuid[12:16], hex_uuid[16:20],
                                      hex_uuid[20:]))
        props["luid"] = bytes(props.get("luid", b""))[:8].ljust(8, b"\0")
        with self._cuda("initialising the context"):
            runtime.free(0)  # makes the primary context current, which the driver call below needs
        least, greatest = _stream_priority_range()
        props["leastStreamPriority"], props["greatestStreamPriority"] = least, greatest
        props["memoryPoolSupportedHandleTypes"] = 0  # no ipc_export here yet: rcuda cannot share its pools
        if memory_limit:
            props["totalGlobalMem"] = min(props["totalGlobalMem"], memory_limit)
        return props

    def _read_attributes(self) -> dict[str, int]:
        """Every cudaDeviceAttr this GPU answers, asked once."""
        answers = {}
        with self._cuda("cudaDeviceGetAttribute"):
            for name, number in DEVICE_ATTRIBUTES.items():
                if "Reserved" in name or name == "cudaDevAttrMax":
                    continue
                try:
                    answers[name] = self._runtime.deviceGetAttribute(number, self.index)
                except self._runtime.CUDARuntimeError:
                    pass  # not known to this driver
        return answers

    def properties(self) -> dict:
        return dict(self._properties)

    def attributes(self) -> dict[str, int]:
        return dict(self._attributes)

    def memory_in_use(self) -> int:
        arrays = sum(cuda_arrays.array_bytes(array.spec) for array in self._arrays.values())
        return self._memory.bytes_in_use + self.physical.bytes_in_use + arrays

    def memory_total(self) -> int:
        """What cudaMemGetInfo may report as total: the device's, or less
        under --memory-limit (then the driver's answer needs adjusting)."""
        return self._total

    def mem_get_info(self) -> tuple[int, int]:
        with self._cuda("cudaMemGetInfo"):
            free, total = self._runtime.memGetInfo()
        if self._total < total:  # --memory-limit: report the limit and what is left of it
            return max(0, min(free, self._total - self.memory_in_use())), self._total
        return free, total

    # ---------------------------------------------------------- memory

    def malloc(self, size: int) -> int:
        if size < 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMalloc of {size} bytes")
        if size == 0:
            return 0  # what cudaMalloc does: success, and a NULL pointer
        if self.memory_in_use() + size > self._total:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cudaMalloc of {size} bytes: the session already uses {self.memory_in_use()} "
                            f"of the {self._total} bytes this server allows per GPU")
        with self._cuda(f"cudaMalloc of {size} bytes"):
            ptr = self._window.allocate(size) if self._window else self._runtime.malloc(size)
        self._memory.add(Allocation(ptr, size))
        return ptr

    def free(self, ptr: int) -> Completion:
        if ptr == 0:
            return Done()  # cudaFree(NULL) does nothing
        self._memory.remove(ptr)

        def release():
            with self._cuda(f"cudaFree({ptr:#x})"):
                self._release(ptr)

        # cudaFree waits for the device: the memory goes once its work is done.
        return self._completion(self._all_streams(), on_ready=release)

    def _release(self, ptr: int) -> None:
        if self._window:
            self._window.free(ptr)
        else:
            self._runtime.free(ptr)

    def memcpy_htod(self, dst: int, data: memoryview, stream: int = 0) -> None:
        source = np.frombuffer(data, np.uint8)
        if not source.size:
            return
        self._memory.require(dst, source.size, "cudaMemcpy to device")
        if source.size < STAGE_UPLOADS_FROM:
            # Small: the driver copies it into its own staging buffer and
            # returns, so `data` (a message frame) is free again at once.
            with self._cuda("cudaMemcpy host to device"):
                self._runtime.memcpyAsync(dst, source.ctypes.data, source.size, self._runtime.memcpyHostToDevice,
                                          self._streams[stream])
            return
        self._reap_staged()
        # Large: through pinned memory of our own, since from pageable memory
        # the driver may wait for the stream (and this thread with it); the
        # bytes are there already when the network put them in it.
        staging, self._landing = self._landing, None
        if staging is None or staging.ctypes.data != source.ctypes.data or staging.size < source.size:
            staging = self._staging(source.size)
            staging[:] = source
        with self._cuda("cudaMemcpy host to device"):
            self._runtime.memcpyAsync(dst, staging.ctypes.data, source.size, self._runtime.memcpyHostToDevice,
                                      self._streams[stream])
        self._staged.append((self._completion([self._streams[stream]]), staging))

    def upload_buffer(self, size: int) -> memoryview | None:
        if size < STAGE_UPLOADS_FROM:
            return None  # memcpy_htod lets the driver stage it
        self._reap_staged()
        self._landing = self._staging(size)
        return memoryview(self._landing)

    def memcpy_dtoh(self, src: int, size: int, stream: int = 0) -> tuple[memoryview, Completion]:
        if not size:
            return memoryview(b""), Done()
        self._memory.require(src, size, "cudaMemcpy from device")
        host = self._staging(size)  # filled by the copy, in stream order
        with self._cuda("cudaMemcpy device to host"):
            self._runtime.memcpyAsync(host.ctypes.data, src, size, self._runtime.memcpyDeviceToHost,
                                      self._streams[stream])
        return memoryview(host), self._completion([self._streams[stream]])

    # Mapped memory: on a stream of their own that waits for no other
    # (non-blocking), and only for that copy.  From and into pageable memory,
    # never our pinned staging: allocating pinned memory (cudaHostAlloc, when
    # CuPy's pool holds no buffer of the size) is one of CUDA's implicit
    # synchronisations, which would hold the copy behind every stream's
    # running kernels.  The driver stages pageable memory through buffers of
    # its own, waiting at most for the copy's stream.

    def _mirror_copy(self, dst: int, src: int, size: int, kind, what: str) -> None:
        with self._cuda(what):
            self._runtime.memcpyAsync(dst, src, size, kind, self._mirror_stream)
            self._runtime.streamSynchronize(self._mirror_stream)

    def write_now(self, dst: int, data: memoryview) -> None:
        source = np.frombuffer(data, np.uint8)
        if not source.size:
            return
        self._memory.require(dst, source.size, "mapped memory")
        self._mirror_copy(dst, source.ctypes.data, source.size, self._runtime.memcpyHostToDevice,
                          "mapped memory to device")

    def read_now(self, src: int, size: int) -> memoryview:
        if not size:
            return memoryview(b"")
        self._memory.require(src, size, "mapped memory")
        host = np.empty(size, np.uint8)
        self._mirror_copy(host.ctypes.data, src, size, self._runtime.memcpyDeviceToHost, "mapped memory from device")
        return memoryview(host)

    def chunk_digests(self, src: int, size: int, chunk: int) -> np.ndarray:
        """Whole chunks digested on the GPU (chunk_digests.GpuDigests), a short
        last one on the host; all on the host where the GPU's digests failed
        their check."""
        whole = size // chunk
        digests = self._gpu_digests(chunk) if whole else None
        if digests is None:
            return super().chunk_digests(src, size, chunk)
        self._memory.require(src, size, "mapped memory")
        with self._cuda("digests of mapped memory"):
            on_gpu = digests(src, whole, self.index, self._mirror_stream)
        if size % chunk:
            on_gpu = np.concatenate((on_gpu, super().chunk_digests(src + whole * chunk, size % chunk, chunk)))
        return on_gpu

    def _gpu_digests(self, chunk: int):
        """The GPU's digest kernel (made at first use), or None where it
        cannot be made or computes another function than the reference."""
        if self._digests is not None and (self._digests is False or self._digests.chunk == chunk):
            return self._digests or None
        try:
            with self._cuda("the chunk digest kernel"):
                self._digests = GpuDigests(chunk)
        except Exception as exc:  # noqa: BLE001 - NVRTC, CuPy or a wrong result: digest on the host
            log.warning("GPU %d: mirrors are compared on the host (the chunk digest kernel failed: %s)",
                        self.index, exc)
            self._digests = False
        return self._digests or None

    def memcpy_dtod(self, dst: int, src: int, size: int, stream: int = 0) -> None:
        if size:
            self._memory.require(src, size, "cudaMemcpy device to device (source)")
            self._memory.require(dst, size, "cudaMemcpy device to device (destination)")
            with self._cuda("cudaMemcpy device to device"):
                self._runtime.memcpyAsync(dst, src, size, self._runtime.memcpyDeviceToDevice, self._streams[stream])

    def memcpy_dtod_batch(self, copies: list[tuple[int, int, int]], stream: int = 0) -> None:
        copies = [(dst, src, size) for dst, src, size in copies if size]
        for dst, src, size in copies:
            self._memory.require(src, size, "cudaMemcpyBatchAsync (source)")
            self._memory.require(dst, size, "cudaMemcpyBatchAsync (destination)")
        with self._cuda("cudaMemcpyBatchAsync"):
            for dst, src, size in copies:
                self._runtime.memcpyAsync(dst, src, size, self._runtime.memcpyDeviceToDevice, self._streams[stream])

    def memset(self, ptr: int, value: int, size: int, stream: int = 0, elem: int = 1) -> None:
        if size:
            self._memory.require(ptr, size, "cudaMemset")
            with self._cuda("cudaMemset"):
                if elem == 1:
                    self._runtime.memsetAsync(ptr, value & 0xFF, size, self._streams[stream])
                else:
                    from .cuda_vmm import memset_pattern
                    memset_pattern(self._streams[stream], ptr, value, size, elem, self.index)

    # -- the program's virtual memory management, through the driver (cuda_vmm.py)

    def _mappings(self):
        if self._program_mappings is None:
            from .cuda_vmm import ProgramMappings
            self._program_mappings = ProgramMappings(self.index)
        return self._program_mappings

    def vmm_granularity(self) -> tuple[int, int]:
        with self._cuda("cuMemGetAllocationGranularity"):
            return self._mappings().granularity()

    def vmm_create(self, handle: int, size: int, shareable: bool = False) -> None:
        if shareable:  # clients ask only where memoryPoolSupportedHandleTypes says so: 0 here (vmm_export too)
            raise CudaError(cudaError.cudaErrorNotSupported,
                            f"cuMemCreate on GPU {self.index}: no shareable physical memory on this backend")
        if self.memory_in_use() + size > self._total:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cuMemCreate of {size} bytes: the session already uses {self.memory_in_use()} of the "
                            f"{self._total} bytes this server allows per GPU")
        with self._cuda(f"cuMemCreate of {size} bytes"):
            self.physical.add(handle, Physical(size, self._mappings().create(size)))

    def vmm_map(self, ptr: int, size: int, offset: int, handle: int) -> None:
        physical = self.physical.get(handle, "cuMemMap")
        self._check_vmm_range(ptr, size, offset, physical)
        with self._cuda(f"cuMemMap({ptr:#x}, {size})"):
            self._mappings().map(ptr, size, offset, physical.memory)
        self._memory.add(Allocation(ptr, size, mapped=(handle, physical)))
        physical.mappings += 1

    def vmm_unmap(self, ptr: int) -> None:
        allocation = self._memory.remove(ptr, unmap=True)
        handle, physical = allocation.mapped
        physical.mappings -= 1
        with self._cuda(f"cuMemUnmap({ptr:#x})"):
            self._mappings().unmap(ptr, allocation.size)
        self._free_if_unused(handle, physical)

    def _vmm_free(self, physical: Physical) -> None:
        with self._cuda("cuMemRelease"):
            self._mappings().release(physical.memory)

    # ---------------------------------------------------------- arrays and regions
    # Through the driver API (cuda_arrays.py): CuPy binds no CUDA arrays,
    # 3-D copies or texture objects.  The driver works on the current
    # context, which self._cuda makes this GPU's primary context.

    def array_create(self, array: int, spec: ArraySpec) -> None:
        if array in self._arrays:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"CUDA array id {array} is in use")
        size = cuda_arrays.array_bytes(spec)
        if self.memory_in_use() + size > self._total:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"a CUDA array of {size} bytes: the session already uses {self.memory_in_use()} of the "
                            f"{self._total} bytes this server allows per GPU")
        with self._cuda(f"cudaMalloc3DArray of {size} bytes"):
            self._arrays[array] = cuda_arrays.DriverArray(spec)

    def array_destroy(self, array: int) -> None:
        found = self._array(array, "cudaFreeArray")
        del self._arrays[array]
        with self._cuda("cudaFreeArray"):
            found.destroy()

    def _array(self, array: int, what: str) -> cuda_arrays.DriverArray:
        found = self._arrays.get(array)
        if found is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"{what}: no CUDA array {array} here")
        return found

    def _region_copy(self, extent, what: str, dst: Place | None = None, src: Place | None = None):
        """A CUDA_MEMCPY3D of a box between the places given (each checked
        whole); the caller sets the host side of a copy to or from the host."""
        copy = cuda_arrays.copy_3d(extent)
        for side, place in (("dst", dst), ("src", src)):
            if place is None:
                continue
            where = f"{what} ({'destination' if side == 'dst' else 'source'})"
            if place.is_array:
                array = self._array(place.array, where)
                place.check_in_array(array.spec, extent, where)
                with self._cuda(where):
                    cuda_arrays.set_array(copy, side, array.level(place.level), place.x, place.y, place.z)
            else:
                self._memory.require(place.ptr, place.linear_span(extent, where), where)
                cuda_arrays.set_device(copy, side, place.ptr, place.pitch, place.rows)
        return copy

    def check_region(self, place: Place, extent, what: str) -> None:
        self._region_copy(extent, what, dst=place)

    def region_htod(self, dst: Place, extent, data: memoryview, stream: int = 0) -> None:
        copy = self._region_copy(extent, "cudaMemcpy3D to device", dst=dst)
        self._reap_staged()
        # Through pinned memory of ours, as memcpy_htod's large uploads: the
        # message frame is free at once, and the driver never waits here.
        staging = self._staging(math.prod(extent))
        staging[:] = np.frombuffer(data, np.uint8)
        cuda_arrays.set_host(copy, "src", staging.ctypes.data)
        with self._cuda("cudaMemcpy3D host to device"):
            cuda_arrays.copy_async(copy, self._streams[stream])
        self._staged.append((self._completion([self._streams[stream]]), staging))

    def region_dtoh(self, src: Place, extent, stream: int = 0) -> tuple[memoryview, Completion]:
        copy = self._region_copy(extent, "cudaMemcpy3D from device", src=src)
        host = self._staging(math.prod(extent))  # filled by the copy, in stream order
        cuda_arrays.set_host(copy, "dst", host.ctypes.data)
        with self._cuda("cudaMemcpy3D device to host"):
            cuda_arrays.copy_async(copy, self._streams[stream])
        return memoryview(host), self._completion([self._streams[stream]])

    def region_dtod(self, dst: Place, src: Place, extent, stream: int = 0) -> None:
        copy = self._region_copy(extent, "cudaMemcpy3D device to device", dst=dst, src=src)
        with self._cuda("cudaMemcpy3D device to device"):
            cuda_arrays.copy_async(copy, self._streams[stream])

    def region_memset(self, dst: Place, value: int, extent, stream: int = 0, elem: int = 1) -> None:
        self._memory.require(dst.ptr, dst.linear_span(extent, "cudaMemset3D"), "cudaMemset3D")
        with self._cuda("cudaMemset3D"):
            cuda_arrays.memset_box(dst.ptr, dst.pitch, dst.rows, value, extent, elem, self._streams[stream])

    def _resource(self, resource: dict, what: str) -> cuda_arrays.CUDA_RESOURCE_DESC:
        """The driver's description of a wire resource, over this session's
        arrays or memory only."""
        kind = resource.get("type")
        if kind in ("array", "mipmappedArray"):
            level = resource.get("level", 0)
            return self._array(resource.get("array"), what).resource(kind == "mipmappedArray",
                                                                      level if type(level) is int else -1, what)
        described, ptr, size = cuda_arrays.memory_resource(resource, what)
        self._memory.require(ptr, size, what)
        return described

    def texture_create(self, resource: dict, texture: dict, view: dict | None) -> int:
        what = "cudaCreateTextureObject"
        texture_described = cuda_arrays.texture_descriptor(texture)
        view_described = None if view is None else cuda_arrays.view_descriptor(view)
        resource_described = self._resource(resource, what)
        with self._cuda(what):
            handle = cuda_arrays.create_texture(resource_described, texture_described, view_described)
        self._textures.add(handle)
        return handle

    def texture_destroy(self, handle: int) -> None:
        if handle not in self._textures:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDestroyTextureObject({handle:#x}): "
                                                             f"not a texture object of this session")
        self._textures.remove(handle)
        with self._cuda("cudaDestroyTextureObject"):
            cuda_arrays.destroy_texture(handle)

    def surface_create(self, resource: dict) -> int:
        what = "cudaCreateSurfaceObject"
        if resource.get("type") != "array":
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: a surface is over an array, not "
                                                             f"{resource.get('type')!r:.40}")
        resource_described = self._resource(resource, what)
        with self._cuda(what):
            handle = cuda_arrays.create_surface(resource_described)
        self._surfaces.add(handle)
        return handle

    def surface_destroy(self, handle: int) -> None:
        if handle not in self._surfaces:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDestroySurfaceObject({handle:#x}): "
                                                             f"not a surface object of this session")
        self._surfaces.remove(handle)
        with self._cuda("cudaDestroySurfaceObject"):
            cuda_arrays.destroy_surface(handle)

    def bind_reference(self, module_key: str, name: str, surface: bool, resource: dict,
                       texture: dict | None) -> None:
        """The driver's own texture (surface) reference of the module this
        GPU loaded, bound with cuTexRefSet* (cuSurfRefSetArray): the driver
        applies it to the module's next launches."""
        module = self._module(module_key)
        what = f"{'surface' if surface else 'texture'} reference {name}"
        if not isinstance(resource, dict):
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: no resource to bind")
        kind, array = resource.get("type"), None
        if kind in ("array", "mipmappedArray"):
            level = resource.get("level", 0)
            found = self._array(resource.get("array"), what)
            if kind == "mipmappedArray":
                if not found.spec.levels:
                    raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: array {resource.get('array')} is "
                                                                     f"not a mipmapped array")
                array = found.handle
            else:
                array = found.level(level if type(level) is int else -1)
        elif surface:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: a surface reference is bound to an array")
        else:
            _, ptr, size = cuda_arrays.memory_resource(resource, what)
            self._memory.require(ptr, size, what)
        with self._cuda(what, not_found=cudaError.cudaErrorInvalidSymbol):
            if surface:
                cuda_arrays.bind_surface_reference(module, name, array)
            else:
                if not isinstance(texture, dict):
                    raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: no texture description")
                cuda_arrays.bind_texture_reference(module, name, resource, array, texture)

    # ---------------------------------------------------------- kernels, symbols

    def load_module(self, key: str, image: bytes) -> str:
        # The driver takes a fatbinary (and picks the cubin for this GPU, or
        # JIT-compiles the PTX when no cubin fits), a cubin or PTX.
        with self._cuda(f"loading module {key}"):
            handle, info = cuda_jit.load_module(bytes(image))
        self._modules[key] = (handle, bytes(image))
        return info

    def link(self, inputs: list[tuple[str, bytes]]) -> tuple[bytes, str]:
        with self._cuda("cuLinkComplete"):
            return cuda_jit.link(inputs)

    def _module(self, key: str) -> int:
        entry = self._modules.get(key)
        if entry is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"module {key} is not loaded")
        return entry[0]

    def get_function(self, module_key: str, name: str, layout: ParamLayout) -> CupyFunction:
        module = self._module(module_key)
        with self._cuda(f"kernel {name} (not in its module?)", not_found=cudaError.cudaErrorInvalidDeviceFunction):
            handle = self._driver.moduleGetFunction(module, name)
        return CupyFunction(handle, name, layout)

    def function_attributes(self, function: CupyFunction) -> dict:
        with self._cuda(f"cudaFuncGetAttributes({function.name})"):
            attrs = {field: self._driver.funcGetAttribute(number, function.handle)
                     for field, number in FUNCTION_ATTRIBUTES.items()}
            if self._properties.get("clusterLaunch"):
                attrs.update({field: self._driver.funcGetAttribute(number, function.handle)
                              for field, number in CLUSTER_FUNCTION_ATTRIBUTES.items()})
        return attrs

    def function_set_attribute(self, function: CupyFunction, attribute: str, value: int) -> None:
        number = SETTABLE_FUNCTION_ATTRIBUTES.get(attribute)
        if number is None:
            log.info("cudaFuncSetAttribute(%s, %s): not forwarded to the driver", function.name, attribute)
            return
        with self._cuda(f"cudaFuncSetAttribute({function.name}, {attribute})"):
            self._driver.funcSetAttribute(function.handle, number, value)

    def get_symbol(self, module_key: str, name: str) -> tuple[int, int]:
        module = self._module(module_key)
        variable = fatbin.parse_image(self._modules[module_key][1]).variables().get(name)
        with self._cuda(f"__device__ variable {name}", not_found=cudaError.cudaErrorInvalidSymbol):
            ptr = self._driver.moduleGetGlobal(module, name)
        size = variable.size if variable else 0
        if self._memory.containing(ptr, 1) is None:
            self._memory.add(Allocation(ptr, max(size, 1), symbol=True))  # copies to it are checked like any
        return ptr, size

    def launch(self, function: CupyFunction, grid, block, params: bytes, shared_mem: int, stream: int,
               cooperative: bool = False, cluster: tuple[int, int, int] | None = None) -> None:
        check_launch_configuration(self._properties, grid, block, shared_mem)
        params = bytes(params)
        # ctypes objects that must live until cuLaunchKernel returns (it copies
        # the parameters before returning).
        buffer = ctypes.create_string_buffer(params, len(params))
        pointers = param_pointers(function.layout, buffer)
        if cluster is not None:
            self._launch_ex(function, grid, block, pointers, shared_mem, stream, cooperative, cluster)
            return
        if cooperative:
            self._launch_cooperative(function, grid, block, pointers, shared_mem, stream)
            return
        with self._cuda(f"launch of kernel {function.name}"):
            self._driver.launchKernel(function.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                      shared_mem, self._streams[stream], ctypes.addressof(pointers), 0)

    def _launch_cooperative(self, function: CupyFunction, grid, block, pointers, shared_mem: int, stream: int) -> None:
        """cuLaunchCooperativeKernel (a pointer per parameter, as every
        launch here).  The driver refuses a grid that cannot be resident at
        once (720, cudaErrorCooperativeLaunchTooLarge)."""
        with self._cuda(f"cooperative launch of kernel {function.name}"):
            status = _cu_launch_cooperative_kernel()(function.handle, *grid, *block, shared_mem,
                                                     self._streams[stream], pointers)
        if status:
            raise CudaError(driver_status(status), f"cooperative launch of kernel {function.name} on GPU "
                                                   f"{self.index} failed with CUresult {status}")

    def _launch_ex(self, function: CupyFunction, grid, block, pointers, shared_mem: int, stream: int,
                   cooperative: bool, cluster) -> None:
        """A thread block cluster launch: cuLaunchKernelEx with
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (and CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        when cooperative).
        A kernel with __cluster_dims__ launched without a shape takes the
        plain cuLaunchKernel: the driver gives it its own."""
        attrs = (CUlaunchAttribute * 2)()
        attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attrs[0].value.clusterDim.x, attrs[0].value.clusterDim.y, attrs[0].value.clusterDim.z = cluster
        attrs[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attrs[1].value.cooperative = 1
        config = CUlaunchConfig(*grid, *block, shared_mem, self._streams[stream], ctypes.addressof(attrs),
                                2 if cooperative else 1)
        with self._cuda(f"cluster launch of kernel {function.name}"):
            status = _cu_launch_kernel_ex()(ctypes.byref(config), function.handle, pointers, None)
        if status:
            raise CudaError(driver_status(status), f"cluster launch of kernel {function.name} (cluster {cluster}) "
                                                   f"on GPU {self.index} failed with CUresult {status}")

    # ---------------------------------------------------------- streams, events

    def _all_streams(self) -> list[int]:
        return list(self._streams.values())

    def synchronize(self) -> Completion:
        return self._completion(self._all_streams())

    def stream_create(self, stream: int, flags: int, priority: int) -> None:
        with self._cuda("cudaStreamCreate"):
            self._streams[stream] = self._runtime.streamCreateWithPriority(flags, priority)
        if self.batch_executor is not None:
            self.batch_executor.set_stream(stream, self._streams[stream])

    # -- CUDA graphs: a run of a client graph's requests captured once from
    # the stream it is first launched in (relaxed mode: the service's other
    # work goes on), then launched as one graph of the driver's.

    def graph_capture(self, stream: int, run) -> object:
        handle = self._streams[stream]
        if not handle:
            raise NotImplementedError("the legacy stream cannot capture")
        runtime = self._runtime
        with self._cuda("cudaStreamBeginCapture"):
            runtime.streamBeginCapture(handle, runtime.streamCaptureModeRelaxed)
        try:
            run()
        except BaseException:
            with contextlib.suppress(Exception):
                runtime.graphDestroy(runtime.streamEndCapture(handle))
            raise
        with self._cuda("cudaStreamEndCapture"):
            graph = runtime.streamEndCapture(handle)
        try:
            with self._cuda("cudaGraphInstantiate"):
                return runtime.graphInstantiate(graph)
        finally:
            runtime.graphDestroy(graph)

    def graph_launch(self, graph: object, stream: int) -> None:
        with self._cuda("cudaGraphLaunch"):
            self._runtime.graphLaunch(graph, self._streams[stream])

    def graph_release(self, graph: object) -> None:
        with contextlib.suppress(Exception):  # the context may be gone already
            self._runtime.graphExecDestroy(graph)

    def stream_destroy(self, stream: int) -> None:
        if self.batch_executor is not None:
            self.batch_executor.forget_stream(stream)
        with self._cuda("cudaStreamDestroy"):
            self._runtime.streamDestroy(self._streams.pop(stream))

    def stream_synchronize(self, stream: int) -> Completion:
        return self._completion([self._streams[stream]])

    def stream_query(self, stream: int) -> bool:
        return self._done(lambda: self._runtime.streamQuery(self._streams[stream]), "cudaStreamQuery")

    def stream_wait_event(self, stream: int, event: int) -> None:
        with self._cuda("cudaStreamWaitEvent"):
            self._runtime.streamWaitEvent(self._streams[stream], self._events[event], 0)

    def stream_mem_ops(self, ops: list[tuple[int, int, int, int]], stream: int) -> None:
        """One cuStreamBatchMemOp_v2 call (through ctypes: CuPy binds none of
        them).  A write's NO_MEMORY_BARRIER, which the v2 API does not take,
        is dropped: the write keeps its barrier, which is always allowed."""
        for kind, address, _, _ in ops:
            if kind in stream_memops.WIDTH:
                self._memory.require(address, stream_memops.WIDTH[kind], "cuStreamBatchMemOp")
        params = (CUstreamBatchMemOpParams * len(ops))()
        for param, (kind, address, value, flags) in zip(params, ops):
            if kind in stream_memops.WRITES:
                fields = param.writeValue
                flags &= ~stream_memops.WRITE_NO_MEMORY_BARRIER
            elif kind in stream_memops.WAITS:
                fields = param.waitValue
            else:  # a flush or a barrier: {operation, flags}
                param.memoryBarrier.operation, param.memoryBarrier.flags = kind, flags
                continue
            fields.operation, fields.address, fields.value64, fields.flags = kind, address, value, flags
        with self._cuda("cuStreamBatchMemOp"):
            status = _cu_stream_batch_mem_op()(ctypes.c_void_p(self._streams[stream]), len(ops), params, 0)
        if status:
            raise CudaError(driver_status(status), f"cuStreamBatchMemOp on GPU {self.index}: CUresult {status}")

    def event_create(self, event: int, flags: int) -> None:
        with self._cuda("cudaEventCreate"):
            self._events[event] = self._runtime.eventCreateWithFlags(flags)
        if self.batch_executor is not None:
            self.batch_executor.set_event(event, self._events[event])

    def event_destroy(self, event: int) -> None:
        if self.batch_executor is not None:
            self.batch_executor.forget_event(event)
        exported = self._event_exports.pop(event, None)
        if exported is not None:
            os.close(exported)
        with self._cuda("cudaEventDestroy"):
            self._runtime.eventDestroy(self._events.pop(event))

    def tensor_map_encode(self, tensor_map) -> bytes:
        from . import cuda_tensor_maps
        with self._cuda("cuTensorMapEncode"):
            return cuda_tensor_maps.encode(tensor_map)

    def tensor_map_replace(self, raw: bytes, address: int) -> bytes:
        from . import cuda_tensor_maps
        with self._cuda("cuTensorMapReplaceAddress"):
            return cuda_tensor_maps.replace_address(raw, address)

    def event_export(self, event: int) -> int:
        """The driver's own IPC handle (the processes share this machine's
        GPU), in a memory file the other worker receives."""
        if event not in self._event_exports:
            with self._cuda("cudaIpcGetEventHandle"):
                handle = bytes(self._runtime.ipcGetEventHandle(self._events[event]))
            fd = os.memfd_create("rcuda-ipc-event", os.MFD_CLOEXEC)
            os.write(fd, handle)
            self._event_exports[event] = fd
        return self._event_exports[event]

    def event_open(self, event: int, flags: int, fd: int) -> None:
        handle = os.pread(fd, 64, 0)
        with self._cuda("cudaIpcOpenEventHandle", cudaError.cudaErrorInvalidResourceHandle):
            self._events[event] = self._runtime.ipcOpenEventHandle(handle)
        if self.batch_executor is not None:
            self.batch_executor.set_event(event, self._events[event])

    def event_record(self, event: int, stream: int) -> None:
        with self._cuda("cudaEventRecord"):
            self._runtime.eventRecord(self._events[event], self._streams[stream])

    def event_synchronize(self, event: int) -> Completion:
        # An event of our own, after the program's on a stream of our own: the
        # program may destroy its event while a waiter thread waits.
        with self._cuda("cudaEventSynchronize"):
            self._runtime.streamWaitEvent(self._wait_stream, self._events[event], 0)
        return self._completion([self._wait_stream])

    def event_query(self, event: int) -> bool:
        return self._done(lambda: self._runtime.eventQuery(self._events[event]), "cudaEventQuery")

    def event_elapsed_ms(self, start: int, end: int) -> float:
        with self._cuda("cudaEventElapsedTime"):
            return float(self._runtime.eventElapsedTime(self._events[start], self._events[end]))

    def _done(self, query, what: str) -> bool:
        """A stream or event query: CuPy returns the status, or raises it."""
        try:
            with self._cuda(what):
                status = query()
        except CudaError as exc:
            if exc.status == CUDA_ERROR_NOT_READY:
                return False
            raise
        if status not in (0, CUDA_ERROR_NOT_READY):
            raise CudaError(runtime_status(status), f"{what} on GPU {self.index}")
        return status == 0

    def libraries(self):
        """NVIDIA's cuBLAS, cuFFT and cuRAND on this GPU (cuda_libraries.py)."""
        if self._libraries is None:
            from .cuda_libraries import CudaLibraries
            self._libraries = CudaLibraries(self)
        return self._libraries

    def take_output(self) -> str:
        return _device_output.take() if _device_output else ""

    def output_position(self) -> tuple[int, int]:
        return _device_output.position() if _device_output else (-1, 0)

    def waiter_threads(self) -> set:
        """The live waiter threads of Completions, which close() joins."""
        return self._watchers

    def request_server(self):
        """The batch executor, once it has made its slots (on first use:
        before the session's work, as it allocates pinned memory)."""
        executor = self.batch_executor
        if executor is None or self._serving is False:
            return None
        if self._serving is None:
            try:
                with self._cuda("starting to serve requests in C"):
                    executor.start_serving()
                self._serving = True
            except (OSError, CudaError) as exc:
                log.warning("%s; small requests are served by Python", exc)
                self._serving = False
                return None
        return executor

    def stream_set_attribute(self, stream: int, attribute: str, value) -> None:
        """Applied with cuStreamSetAttribute (CuPy has no binding; the driver
        takes the runtime's attribute numbers and value layout)."""
        number, packed = _stream_attribute(attribute, value)
        with self._cuda(f"cudaStreamSetAttribute({attribute})"):
            status = ctypes.CDLL("libcuda.so.1").cuStreamSetAttribute(
                ctypes.c_void_p(self._streams[stream]), number, ctypes.byref(packed))
        if status:
            raise CudaError(driver_status(status), f"cudaStreamSetAttribute({attribute}) on GPU {self.index}")

    def reset_persisting_l2(self) -> None:
        with self._cuda("cudaCtxResetPersistingL2Cache"):
            status = ctypes.CDLL("libcuda.so.1").cuCtxResetPersistingL2Cache()
        if status:
            raise CudaError(driver_status(status), f"cudaCtxResetPersistingL2Cache on GPU {self.index}")

    def peer_attributes(self, peer: int) -> dict[str, int]:
        """The driver's answer for this pair of the server's GPUs (CuPy has
        no cudaDeviceGetP2PAttribute; cuDeviceGetP2PAttribute takes the same
        attribute numbers)."""
        return {name: _p2p_attribute(number, self.index, peer) for name, number in P2P_ATTRIBUTE_NUMBERS.items()}

    def set_allocation_access(self, ptr: int, peer: int, flags: int) -> None:
        mapping = self._memory.containing(ptr, 1)
        if mapping is not None and mapping.start == ptr and mapping.mapped is not None:
            with self._cuda(f"cuMemSetAccess({ptr:#x}) for GPU {peer}"):
                self._mappings().set_access(ptr, mapping.size, peer, flags)
            return
        if self._window is None:
            super().set_allocation_access(ptr, peer, flags)
        self._window.set_access(ptr, peer, flags)

    def set_peer_access(self, peer: int, enable: bool) -> None:
        if enable:
            with self._cuda(f"cudaDeviceEnablePeerAccess({peer})"):
                self._runtime.deviceEnablePeerAccess(peer)
        else:
            with self._cuda(f"cudaDeviceDisablePeerAccess({peer})"):
                self._runtime.deviceDisablePeerAccess(peer)

    def close(self) -> None:
        """Free what the session left: texture and surface objects, arrays,
        memory, streams, events, modules.
        Failures (e.g. after a sticky error, when the context refuses
        everything) are logged, not raised."""
        steps = [("cudaDeviceSynchronize", self._runtime.deviceSynchronize), ("ending the waiter threads",
                                                                             self._join_watchers)]
        # Texture and surface objects first: they read arrays and memory.
        steps += [("cudaDestroyTextureObject", lambda h=h: cuda_arrays.destroy_texture(h))
                  for h in self._textures]
        steps += [("cudaDestroySurfaceObject", lambda h=h: cuda_arrays.destroy_surface(h))
                  for h in self._surfaces]
        steps += [(f"cudaFreeArray({i})", lambda a=a: a.destroy()) for i, a in self._arrays.items()]
        allocations = self._memory.clear()
        steps += [(f"cudaFree({a.start:#x})", lambda a=a: self._release(a.start))
                  for a in allocations if not a.symbol and a.mapped is None]
        steps += [(f"cuMemUnmap({a.start:#x})", lambda a=a: self._mappings().unmap(a.start, a.size))
                  for a in allocations if a.mapped is not None]
        steps += [("cuMemRelease", lambda p=p: self._mappings().release(p.memory)) for p in self.physical.clear()]
        steps += [("cudaStreamDestroy", lambda h=h: self._runtime.streamDestroy(h)) for h in self._streams.values() if h]
        steps += [("cudaEventDestroy", lambda h=h: self._runtime.eventDestroy(h))
                  for h in [*self._events.values(), *self._spare_events]]
        steps += [("cudaStreamDestroy", lambda h=h: self._runtime.streamDestroy(h))
                  for h in (self._wait_stream, self._mirror_stream)]
        if self._serving:
            steps.append(("freeing the served requests' slots", self.batch_executor.stop_serving))
        steps += [(f"unloading module {key}", lambda m=m: self._driver.moduleUnload(m))
                  for key, (m, _) in self._modules.items()]
        if self._window:
            steps.append(("freeing the address window's allocations", self._window.free_all))
        for what, step in steps:
            try:
                with self._cuda(what):
                    step()
            except CudaError as exc:
                log.debug("GPU %d: %s", self.index, exc)
        self._streams = {0: 0}
        self._events.clear()
        self._textures.clear()
        self._surfaces.clear()
        self._arrays.clear()
        self._spare_events.clear()
        self._staged.clear()
        self._modules.clear()
        os.close(self._wake_fd)


class DeviceOutput:
    """What kernels printf: the driver writes it to this process's stdout
    (fd 1) at synchronisation points.  A session worker points fd 1 at a
    temporary file (a file never blocks the driver, as a full pipe would)
    and hands out what was appended since the last look."""

    def __init__(self):
        import os
        import tempfile
        self._libc = ctypes.CDLL(None)
        self._file = tempfile.TemporaryFile()
        os.dup2(self._file.fileno(), 1)
        self._offset = 0

    def position(self) -> tuple[int, int]:
        return self._file.fileno(), self._offset

    def take(self) -> str:
        self._libc.fflush(None)  # the driver's stdio buffer
        self._file.seek(self._offset)
        data = self._file.read()
        self._offset += len(data)
        return data.decode(errors="replace")


_device_output: DeviceOutput | None = None


def capture_device_output() -> None:
    """Called by a session worker, never in a process whose stdout matters."""
    global _device_output
    if _device_output is None:
        _device_output = DeviceOutput()


def _stream_priority_range() -> tuple[int, int]:
    """cudaDeviceGetStreamPriorityRange, from the driver (CuPy lacks it):
    (least, greatest) priority of the current context."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        least, greatest = ctypes.c_int(), ctypes.c_int()
        if libcuda.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)) == 0:
            return least.value, greatest.value
    except OSError:
        pass
    return 0, 0


class _AccessPolicyWindow(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _StreamAttributeValue(ctypes.Union):
    """The members of cudaStreamAttrValue (64 bytes) that streams use."""
    _fields_ = [("pad", ctypes.c_char * 64), ("window", _AccessPolicyWindow), ("number", ctypes.c_int),
                ("domain_map", ctypes.c_ubyte * 2)]


#: The stream attributes the client sends (client/stream_attributes.py).
STREAM_ATTRIBUTES = ("cudaLaunchAttributeAccessPolicyWindow", "cudaLaunchAttributeSynchronizationPolicy",
                     "cudaLaunchAttributePriority", "cudaLaunchAttributeMemSyncDomainMap",
                     "cudaLaunchAttributeMemSyncDomain", "cudaLaunchAttributeNvlinkUtilCentricScheduling")


def _stream_attribute(attribute: str, value) -> tuple[int, _StreamAttributeValue]:
    """(CUlaunchAttributeID, packed value) of a stream_attr request;
    cudaErrorInvalidValue for one of another shape."""
    packed = _StreamAttributeValue()
    try:
        if attribute not in STREAM_ATTRIBUTES:
            raise ValueError("not a stream attribute")
        if attribute == "cudaLaunchAttributeAccessPolicyWindow":
            base, size, ratio, hit, miss = value
            packed.window = _AccessPolicyWindow(base, size, ratio, hit, miss)
        elif attribute == "cudaLaunchAttributeMemSyncDomainMap":
            packed.domain_map[0], packed.domain_map[1] = value
        else:
            packed.number = value
    except (TypeError, ValueError, OverflowError) as exc:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaStreamSetAttribute({attribute}, {value!r:.60}): "
                                                         f"{exc}") from None
    return ENUMS["cudaLaunchAttributeID"][attribute], packed


def _p2p_attribute(attribute: int, source: int, destination: int) -> int:
    """cuDeviceGetP2PAttribute between two GPUs (driver ordinals are the
    runtime's); 0 where the driver does not answer, as for no link."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        src, dst, value = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        answered = (libcuda.cuDeviceGet(ctypes.byref(src), source) == 0
                    and libcuda.cuDeviceGet(ctypes.byref(dst), destination) == 0
                    and libcuda.cuDeviceGetP2PAttribute(ctypes.byref(value), attribute, src, dst) == 0)
        if answered:
            return value.value
    except (OSError, AttributeError):
        pass
    return 0


def param_pointers(layout: ParamLayout, buffer) -> ctypes.Array:
    """cuLaunchKernel's kernelParams: a pointer per parameter into `buffer`,
    packed by the client's layout (native/batch_executor.c says why never
    the packed buffer itself)."""
    base = ctypes.addressof(buffer)
    return (ctypes.c_void_p * max(len(layout.offsets), 1))(*(base + offset for offset in layout.offsets))


# cuda.h: CUlaunchAttributeID values, and the structures of cuLaunchKernelEx.
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class _ClusterDim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class CUlaunchAttributeValue(ctypes.Union):
    """The members of CUlaunchAttributeValue (64 bytes; its access policy
    window gives it a pointer's alignment) that launches use."""
    _fields_ = [("pad", ctypes.c_char * 64), ("accessPolicyWindow", _AccessPolicyWindow),
                ("cooperative", ctypes.c_int), ("clusterDim", _ClusterDim)]


class CUlaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", CUlaunchAttributeValue)]


class CUlaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


@functools.cache
def _cu_launch_kernel_ex():
    """The driver's cuLaunchKernelEx(config, f, kernelParams, extra), through ctypes."""
    function = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
    function.argtypes = [ctypes.POINTER(CUlaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                         ctypes.c_void_p]
    function.restype = ctypes.c_int
    return function


@functools.cache
def _cu_launch_cooperative_kernel():
    """The driver's cuLaunchCooperativeKernel(f, grid x/y/z, block x/y/z,
    sharedMemBytes, hStream, kernelParams), through ctypes."""
    function = ctypes.CDLL("libcuda.so.1").cuLaunchCooperativeKernel
    function.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    function.restype = ctypes.c_int
    return function


# cuda.h: CUstreamBatchMemOpParams (48 bytes), as cuStreamBatchMemOp takes it.
class _MemOpValueParams(ctypes.Structure):
    """CUstreamMemOpWaitValueParams_st and ...WriteValueParams_st: `value64`
    is the union of value and value64 (a 32-bit value is its low bytes)."""
    _fields_ = [("operation", ctypes.c_int), ("address", ctypes.c_uint64), ("value64", ctypes.c_uint64),
                ("flags", ctypes.c_uint), ("alias", ctypes.c_uint64)]


class _MemOpFlagParams(ctypes.Structure):
    """CUstreamMemOpFlushRemoteWritesParams_st and ...MemoryBarrierParams_st."""
    _fields_ = [("operation", ctypes.c_int), ("flags", ctypes.c_uint)]


class CUstreamBatchMemOpParams(ctypes.Union):
    _fields_ = [("operation", ctypes.c_int), ("waitValue", _MemOpValueParams), ("writeValue", _MemOpValueParams),
                ("flushRemoteWrites", _MemOpFlagParams), ("memoryBarrier", _MemOpFlagParams),
                ("pad", ctypes.c_uint64 * 6)]


@functools.cache
def _cu_stream_batch_mem_op():
    """The driver's cuStreamBatchMemOp_v2(stream, count, paramArray, flags), through ctypes."""
    function = ctypes.CDLL("libcuda.so.1").cuStreamBatchMemOp_v2
    function.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(CUstreamBatchMemOpParams), ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _uuid_from_driver(index: int) -> bytes | None:
    """The GPU's 16-byte UUID from cuDeviceGetUuid.  CuPy's property dict
    converts the uuid's char[16] like a C string, which cuts it at a zero
    byte; the driver gives all 16.  Driver ordinals are the runtime's."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        device = ctypes.c_int()
        if libcuda.cuDeviceGet(ctypes.byref(device), index) != 0:
            return None
        uuid = (ctypes.c_char * 16)()
        get_uuid = getattr(libcuda, "cuDeviceGetUuid_v2", None) or libcuda.cuDeviceGetUuid
        if get_uuid(uuid, device) != 0:
            return None
        return uuid.raw
    except (OSError, AttributeError):
        return None
