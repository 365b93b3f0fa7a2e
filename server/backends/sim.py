"""The sim backend: GPUs simulated on the CPU, so rcuda runs anywhere.

Device memory is host memory (one numpy byte array per allocation) at fake,
disjoint addresses; kernels are Python functions from plugin files
(sim_plugins.py).  A launch runs its kernel at once, in the device's thread,
so its results are always there when anything reads them.

A kernel with a modelled time (the plugin's COSTS) also occupies the emulated
GPU for that time, in its stream, as on a GPU (see "modelled time" below):
results are computed at once, in issue order, and only the moment the work
is done is modelled, per stream.  Nothing here waits: whatever observes the
device (a copy to the host, a synchronisation, cudaFree) gets a Completion
with the modelled deadline, which the device service waits for while it
serves other requests.  Simulating a kernel on the CPU overlaps the modelled
time instead of adding to it, so an emulated GPU keeps its speed when the
host's CPUs are busy (four emulated GPUs on a two-core machine), as a real
GPU does.
"""
from __future__ import annotations

import bisect
import copy
import functools
import hashlib
import logging
import math
import mmap
import os
import struct
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from rcuda import fatbin, launch_rules, stream_memops, tensor_maps
from rcuda._generated.cuda_enums import ENUMS, MACROS
from rcuda.device_attributes import attributes_from_properties
from rcuda.errors import CudaError, cudaError
from rcuda.fatbin import KernelResources

from . import sim_jit
from .sim_addresses import AddressSpace, Reservation, takes_hints_from_environment
from .sim_arrays import SimArrays
from .base import (ALLOCATION_ALIGNMENT, VA_WINDOW_SIZE, Allocation, AllocationTable, Backend, Completion, Device,
                   Done, ParamLayout, Physical, PhysicalTable, check_launch_configuration, fill_pattern)
from .sim_plugins import (IllegalAddress, KernelImplementation, KernelLibrary, Launch, demangle,
                          kernel_files_from_environment, short_name)

log = logging.getLogger(__name__)

DEFAULT_MEMORY_BYTES = 16 << 30

#: Without a window from the session, device i allocates in
#: [DEFAULT_VA_BASE + i * VA_WINDOW_SIZE, ... + VA_WINDOW_SIZE): disjoint, and
#: all below 0x8000_0000_0000 (the top of a canonical user-space address).
DEFAULT_VA_BASE = 0x7000_0000_0000
MAX_DEVICES = (0x8000_0000_0000 - DEFAULT_VA_BASE) // VA_WINDOW_SIZE  # 16

#: The sim GPUs report compute capability 8.0: kernel resources are read from
#: the program's newest cubin not newer than sm_80.
SIM_ARCH = 80
#: RCUDA_SIM_COMPUTE_CAPABILITY=9.0 in the server's environment makes its
#: GPUs H100-like instead (compute capability 9.0, thread block clusters):
#: they then load sm_90 cubins (and PTX up to compute_90), not sm_80 ones.
COMPUTE_CAPABILITY_VARIABLE = "RCUDA_SIM_COMPUTE_CAPABILITY"
SIM_ARCHS = (80, 90)

#: cudaFuncSetAttribute's cluster shape attributes, in x, y, z order.
CLUSTER_DIMENSION_ATTRIBUTES = ("cudaFuncAttributeRequiredClusterWidth", "cudaFuncAttributeRequiredClusterHeight",
                                "cudaFuncAttributeRequiredClusterDepth")

#: Dynamic shared memory a kernel may use without cudaFuncSetAttribute.
DEFAULT_DYNAMIC_SHARED = 48 << 10

EVENT_DISABLE_TIMING = MACROS["cudaEventDisableTiming"]
STREAM_NON_BLOCKING = MACROS["cudaStreamNonBlocking"]

#: Kernels running at once on one emulated GPU (modelled time): CUDA's limit
#: for compute capability 8.0.  A kernel beyond it starts when one ends.
MAX_CONCURRENT_KERNELS = 128

#: The legacy default stream's id.
LEGACY_STREAM = 0

#: What each stream memory operation is called in a message.
_MEMOP_CALLS = {stream_memops.WAIT_VALUE_32: "cuStreamWaitValue32", stream_memops.WAIT_VALUE_64: "cuStreamWaitValue64",
                stream_memops.WRITE_VALUE_32: "cuStreamWriteValue32",
                stream_memops.WRITE_VALUE_64: "cuStreamWriteValue64"}

#: Where allocations start: a multiple of the sim's texture alignment, as a
#: GPU's cudaMalloc memory may back any texture (more than CUDA's promised 256).
PLACEMENT_ALIGNMENT = 512
#: Unused bytes left after each allocation, so that running off its end hits
#: no other allocation and fails as an illegal address.
GUARD_BYTES = PLACEMENT_ALIGNMENT


def _round_up(value: int, alignment: int = PLACEMENT_ALIGNMENT) -> int:
    return -(-value // alignment) * alignment


def arch_from_environment() -> int:
    """The sim GPUs' compute capability as 80 for 8.0: SIM_ARCH, or the
    server's RCUDA_SIM_COMPUTE_CAPABILITY (8.0 or 9.0; "90" too)."""
    text = os.environ.get(COMPUTE_CAPABILITY_VARIABLE, "").strip()
    if not text:
        return SIM_ARCH
    arch = text.replace(".", "")
    if not arch.isdigit() or int(arch) not in SIM_ARCHS:
        raise ValueError(f"{COMPUTE_CAPABILITY_VARIABLE}={text!r}: the sim GPUs have compute capability "
                         f"{' or '.join(f'{a // 10}.{a % 10}' for a in SIM_ARCHS)}")
    return int(arch)


class SimBackend(Backend):
    name = "sim"

    def __init__(self, devices: int | None = 1, kernel_files=(), memory_bytes: int | None = None,
                 identity: str = ""):
        devices = 1 if devices is None else devices
        if not 1 <= devices <= MAX_DEVICES:
            raise ValueError(f"the sim backend serves 1 to {MAX_DEVICES} devices, not {devices}")
        self.devices = devices
        self.memory_bytes = DEFAULT_MEMORY_BYTES if memory_bytes is None else memory_bytes
        self.identity = identity  # tells this server's GPUs' UUIDs from other sim servers'
        # Loaded once, here: a plugin that fails to import stops the server
        # from starting rather than failing its first launch.
        self.kernels = KernelLibrary([*kernel_files, *kernel_files_from_environment()])
        self.arch = arch_from_environment()
        self.addresses = AddressSpace(takes_hints_from_environment())  # the device and VMM windows
        #: The GPUs open in this worker (its one session), by index: what a
        #: kernel with peer access reaches.
        self.open_devices: dict[int, SimDevice] = {}

    def device_count(self) -> int:
        return self.devices

    def reserve(self, index: int, size: int, hint: int | None) -> Reservation:
        return self.addresses.reserve(size, hint)

    def open_device(self, index: int, window: Reservation | None = None) -> SimDevice:
        if not 0 <= index < self.devices:
            raise CudaError(cudaError.cudaErrorInvalidDevice, f"sim device {index} does not exist "
                                                              f"(this server has {self.devices})")
        va_base = DEFAULT_VA_BASE + index * VA_WINDOW_SIZE if window is None else window.base
        device = SimDevice(index, va_base, self.memory_bytes, self.kernels, identity=self.identity,
                           open_devices=self.open_devices, arch=self.arch)
        self.open_devices[index] = device
        return device


class SimFunction:
    """A kernel of a loaded module, ready to launch."""

    def __init__(self, mangled: str, implementation: KernelImplementation, layout: ParamLayout,
                 resources: KernelResources | None, module_key: str):
        self.name = mangled
        self.module_key = module_key
        self.demangled = demangle(mangled)
        self.implementation = implementation
        self.layout = layout
        self.resources = resources
        # cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize):
        # without it a launch may use the default 48 KiB minus static shared memory.
        self.max_dynamic_shared = DEFAULT_DYNAMIC_SHARED - (resources.shared_bytes if resources else 0)
        self.preferred_carveout = -1
        # Thread block clusters: __cluster_dims__ from the cubin, or set with
        # cudaFuncSetAttribute(cudaFuncAttributeRequiredCluster*) (0: none).
        self.required_cluster = list(resources.cluster_dims) if resources and resources.cluster_dims else [0, 0, 0]
        self.non_portable_cluster = 0
        self.cluster_scheduling = 0
        self.accepted: set = set()  # (grid, block, shared memory, cluster) configurations already checked
        self.symbols = None         # launch.symbol(): set by the device
        self.references = None      # launch.texref(), launch.surfref(): set by the device

    def describe(self) -> str:
        return self.name if self.demangled == self.name else f"{self.demangled} ({self.name})"

    def clustered(self) -> bool:
        """Whether every launch of the kernel is a cluster launch (a shape of
        its own, or __cluster_dims__ asking the launch for one)."""
        return any(self.required_cluster) or bool(self.resources and self.resources.explicit_cluster)


@dataclass
class SimModule:
    image: bytes

    @functools.cached_property
    def fatbin(self) -> fatbin.Fatbin:
        return fatbin.parse_image(self.image)


@dataclass
class SimEvent:
    flags: int
    recorded_at: float | None = None  # perf_counter() seconds of the last record (modelled)


class SharedSimEvent:
    """An event shared between processes of this server (cudaIpcGetEventHandle):
    its last record's modelled time lives in a memory file each process
    maps (perf_counter is the machine's monotonic clock, the same in each)."""

    _RECORD = struct.Struct("<d")  # NaN: never recorded

    def __init__(self, flags: int, fd: int):
        self.flags = flags
        self.fd = fd  # ours, kept for more exports
        self._mapping = mmap.mmap(fd, self._RECORD.size)

    @classmethod
    def create(cls, flags: int, recorded_at: float | None) -> "SharedSimEvent":
        fd = os.memfd_create("rcuda-ipc-event", os.MFD_CLOEXEC)
        os.ftruncate(fd, cls._RECORD.size)
        event = cls(flags, fd)
        event.recorded_at = recorded_at
        return event

    @property
    def recorded_at(self) -> float | None:
        (value,) = self._RECORD.unpack_from(self._mapping)
        return None if math.isnan(value) else value

    @recorded_at.setter
    def recorded_at(self, value: float | None) -> None:
        self._RECORD.pack_into(self._mapping, 0, math.nan if value is None else value)

    def close(self) -> None:
        self._mapping.close()
        os.close(self.fd)


_DONE = Done()
#: The largest buffer region_dtoh keeps for the next download.
KEPT_GATHER_BYTES = 256 << 20


class SimCompletion(Completion):
    """Ready at a modelled time."""

    __slots__ = ("at",)

    def __init__(self, at: float):
        self.at = at

    def ready(self) -> bool:
        return time.perf_counter() >= self.at

    def deadline(self) -> float:
        return self.at

    def __repr__(self) -> str:
        return f"SimCompletion(in {self.at - time.perf_counter():+.6f} s)"


def _completion(at: float) -> Completion:
    """`Done` if modelled time `at` has come, else a Completion then."""
    return _DONE if at <= time.perf_counter() else SimCompletion(at)


class SimDevice(Device):
    def __init__(self, index: int, va_base: int, memory_bytes: int, kernels: KernelLibrary,
                 window_size: int = VA_WINDOW_SIZE, identity: str = "", max_concurrent_kernels: int | None = None,
                 open_devices: dict | None = None, arch: int = SIM_ARCH):
        if va_base < 0 or va_base % ALLOCATION_ALIGNMENT:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"va_base {va_base:#x} must be a non-negative multiple of {ALLOCATION_ALIGNMENT}")
        self.index = index
        self._window = (max(_round_up(va_base), PLACEMENT_ALIGNMENT), va_base + window_size)  # never address 0
        # Addresses are handed out in increasing order and not reused while the
        # window lasts: a freed pointer then stays invalid, so use after free is
        # caught as an illegal address instead of silently hitting new data.
        self._next_address = self._window[0]
        self._memory = AllocationTable()
        self.physical = PhysicalTable()  # cuMemCreate's: numpy arrays that mappings view
        self.arrays = SimArrays(self._zeros, self._bytes)  # CUDA arrays, texture and surface objects
        self._gather_buffer = np.empty(0, np.uint8)  # region_dtoh's, reused
        self._shared: dict[int, tuple] = {}    # exported allocations: start -> (memfd, mmap)
        self._imported: dict[int, object] = {}  # another process's, mapped here: start -> mmap
        self._total = memory_bytes
        self._kernels = kernels
        self._modules: dict[str, SimModule] = {}
        self._symbols: dict[tuple[str, str], tuple[int, int]] = {}  # (module, name) -> (address, size)
        self._events: dict[int, SimEvent] = {}
        self.arch = arch  # the compute capability, as 80 for 8.0
        self._properties = sim_properties(index, memory_bytes, identity, arch)
        self._output: list[str] = []
        self._output_lock = threading.Lock()
        # Modelled time (perf_counter() seconds): see "modelled time" below.
        self._stream_end: dict[int, float] = {LEGACY_STREAM: 0.0}  # when each stream's queued work ends
        self._non_blocking: set[int] = set()  # streams created with cudaStreamNonBlocking
        self._legacy_end = 0.0  # ... the work of stream 0 and of the blocking streams, destroyed ones too
        self._device_end = 0.0  # ... all the work, on every stream
        self._max_concurrent = MAX_CONCURRENT_KERNELS if max_concurrent_kernels is None else max_concurrent_kernels
        if self._max_concurrent < 1:
            raise ValueError(f"max_concurrent_kernels must be at least 1, not {max_concurrent_kernels}")
        self._kernel_ends: list[float] = []  # sorted: when each running or queued modelled kernel ends
        self._value_written: dict[int, float] = {}  # stream_mem_ops: address -> when a write there happens
        # Peer access: the sim GPUs of one server share its memory, so a
        # kernel here may use the memory of the GPUs this one enabled.
        self._open_devices = {} if open_devices is None else open_devices  # the worker's, by index
        self._peers: dict[int, SimDevice] = {}  # enabled: index -> that GPU as it was then
        self._libraries = None

    # ---------------------------------------------------------- properties

    def properties(self) -> dict:
        return copy.deepcopy(self._properties)

    def attributes(self) -> dict[str, int]:
        return attributes_from_properties(self._properties)

    def memory_in_use(self) -> int:
        return self._memory.bytes_in_use + self.physical.bytes_in_use + self.arrays.bytes_in_use

    def mem_get_info(self) -> tuple[int, int]:
        return self._total - self.memory_in_use(), self._total

    # ---------------------------------------------------------- memory

    def malloc(self, size: int) -> int:
        if size < 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMalloc of {size} bytes")
        if size == 0:
            return 0  # what cudaMalloc does: success, and a NULL pointer
        return self._allocate(size, "cudaMalloc")

    def _allocate(self, size: int, what: str, symbol: bool = False) -> int:
        memory = self._zeros(size, what)
        start = self._place(_round_up(size) + GUARD_BYTES)
        if start is None:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"{what} of {size} bytes: the device's address window is full")
        self._memory.add(Allocation(start, size, memory, symbol=symbol))
        return start

    def _check_free(self, size: int, what: str) -> None:
        free = self._total - self.memory_in_use()
        if size > free:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"{what} of {size} bytes: only {free} of the sim device's {self._total} bytes "
                            f"are free (rcuda server --memory-limit sets its size)")

    def _zeros(self, size: int, what: str) -> np.ndarray:
        """`size` bytes of new device memory, within the device's size."""
        self._check_free(size, what)
        try:
            return np.zeros(size, np.uint8)
        except MemoryError:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"{what} of {size} bytes: the sim server's host is out of memory") from None

    def _place(self, span: int) -> int | None:
        """The address for a new allocation taking `span` bytes of addresses."""
        low, high = self._window
        if self._next_address + span <= high:
            start, self._next_address = self._next_address, self._next_address + span
            return start
        # The window is used up: only now reuse the gaps freed allocations left.
        candidate = low
        for allocation in self._memory:  # (mappings lie outside the window, above or below it)
            if candidate + span <= allocation.start:
                break
            candidate = max(candidate, _round_up(allocation.end) + GUARD_BYTES)
        return candidate if candidate + span <= high else None

    def free(self, ptr: int) -> Completion:
        if ptr == 0:
            return _DONE  # cudaFree(NULL) does nothing
        if ptr in self._imported:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaFree of {ptr:#x}: memory of another process (cudaIpcCloseMemHandle unmaps it)")
        self._memory.remove(ptr)  # gone at once: later requests cannot use it
        shared = self._shared.pop(ptr, None)
        if shared is not None:
            os.close(shared[0])  # its mapping goes with the last view of it
        return _completion(self._device_end)  # cudaFree waits for the device, as on a GPU

    # Copies and memsets are made at once (everything before them in issue
    # order has run) and take no modelled time; they happen in stream order
    # (`_op`), which is when a copy to the host is there.

    def memcpy_htod(self, dst: int, data: memoryview, stream: int = 0) -> None:
        source = np.frombuffer(data, np.uint8)
        if source.size:
            self._bytes(dst, source.size, "cudaMemcpy to device")[:] = source
            self._op(stream)

    def memcpy_dtoh(self, src: int, size: int, stream: int = 0) -> tuple[memoryview, Completion]:
        if size == 0:
            return memoryview(b""), _DONE
        data = self._bytes(src, size, "cudaMemcpy from device")
        at = self._op(stream)
        if at <= time.perf_counter():
            # A view, not a copy: the service sends it before serving anything
            # that could change it (see Device.memcpy_dtoh).
            return memoryview(data), _DONE
        # The bytes as they are in issue order; later work of other streams
        # may change the memory before the copy's modelled time comes.
        return memoryview(data.tobytes()), SimCompletion(at)

    def host_view(self, ptr: int, size: int, stream: int | None = None) -> memoryview:
        # Everything before this in issue order has run: writing now is in order.
        if not size:
            return memoryview(bytearray())
        view = memoryview(self._bytes(ptr, size, "cudaMemcpy to device"))
        if stream is not None:
            self._op(stream)
        return view

    # Mapped memory: kernels run when they arrive, so "now" is every stream's present.

    def write_now(self, dst: int, data: memoryview) -> None:
        source = np.frombuffer(data, np.uint8)
        if source.size:
            self._bytes(dst, source.size, "mapped memory")[:] = source

    def read_now(self, src: int, size: int) -> memoryview:
        if not size:
            return memoryview(b"")
        return memoryview(self._bytes(src, size, "mapped memory"))

    def memcpy_dtod(self, dst: int, src: int, size: int, stream: int = 0) -> None:
        if size:
            source = self._bytes(src, size, "cudaMemcpy device to device (source)")
            self._bytes(dst, size, "cudaMemcpy device to device (destination)")[:] = source  # overlap-safe
            self._op(stream)

    def memcpy_dtod_batch(self, copies: list[tuple[int, int, int]], stream: int = 0) -> None:
        pairs = [(self._bytes(dst, size, "cudaMemcpyBatchAsync (destination)"),
                  self._bytes(src, size, "cudaMemcpyBatchAsync (source)")) for dst, src, size in copies if size]
        for target, source in pairs:  # every range checked: now the bytes move
            target[:] = source
        if pairs:
            self._op(stream)

    def memset(self, ptr: int, value: int, size: int, stream: int = 0, elem: int = 1) -> None:
        if size:
            fill_pattern(self._bytes(ptr, size, "cudaMemset"), value, elem)
            self._op(stream)

    # IPC (server/ipc.py): an exported allocation's bytes move into a memfd
    # (once), which another worker maps; both then see the same memory.

    def ipc_export(self, ptr: int) -> tuple[int, int]:
        allocation = self._memory.require(ptr, 1, "cudaIpcGetMemHandle")
        if allocation.start != ptr or allocation.symbol or allocation.mapped or ptr in self._imported:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaIpcGetMemHandle of {ptr:#x}: not the start of a cudaMalloc allocation")
        if ptr not in self._shared:
            fd = os.memfd_create("rcuda-ipc", os.MFD_CLOEXEC)
            os.ftruncate(fd, allocation.size)
            mapping = mmap.mmap(fd, allocation.size)
            memory = np.frombuffer(mapping, np.uint8)
            memory[:] = allocation.memory
            allocation.memory = memory  # every later access goes to the shared bytes
            self._shared[ptr] = (fd, mapping)
        return self._shared[ptr][0], allocation.size

    def ipc_open(self, fd: int, size: int) -> int:
        mapping = mmap.mmap(fd, size)
        start = self._place(_round_up(size) + GUARD_BYTES)
        if start is None:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cudaIpcOpenMemHandle of {size} bytes: the device's address window is full")
        self._memory.add(Allocation(start, size, np.frombuffer(mapping, np.uint8)))
        self._imported[start] = mapping
        return start

    def ipc_close(self, ptr: int) -> None:
        if ptr not in self._imported:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaIpcCloseMemHandle of {ptr:#x}: not memory cudaIpcOpenMemHandle mapped")
        self._memory.remove(ptr)
        del self._imported[ptr]

    # Boxes of bytes and CUDA arrays (server/backends/sim_arrays.py): like
    # the 1-D copies, made at once, in stream order.

    def array_create(self, array: int, spec) -> None:
        self.arrays.create(array, spec)

    def array_destroy(self, array: int) -> None:
        self.arrays.destroy(array)

    def check_region(self, place, extent, what: str) -> None:
        self.arrays.region(place, extent, what)

    def region_htod(self, dst, extent, data, stream=0) -> None:
        box = self.arrays.region(dst, extent, "cudaMemcpy3D to device")
        box[...] = np.frombuffer(data, np.uint8).reshape(extent[::-1])
        self._op(stream)

    def region_dtoh(self, src, extent, stream=0) -> tuple[memoryview, Completion]:
        box = self.arrays.region(src, extent, "cudaMemcpy3D from device")
        at = self._op(stream)
        if at <= time.perf_counter():  # sent before anything can change it, as memcpy_dtoh's view
            if box.flags.c_contiguous:
                return memoryview(box.reshape(-1)), _DONE
            packed = self._gathered(box.size)  # sent before the next request: reusable
            np.copyto(packed.reshape(box.shape), box)
            return memoryview(packed), _DONE
        return memoryview(box.tobytes()), SimCompletion(at)

    def _gathered(self, size: int) -> np.ndarray:
        """A buffer for a box's bytes on their way out, kept for the next
        (fresh memory costs a page fault per 4 KiB)."""
        if size > KEPT_GATHER_BYTES:
            return np.empty(size, np.uint8)
        if self._gather_buffer.size < size:
            self._gather_buffer = np.empty(size, np.uint8)
        return self._gather_buffer[:size]

    def region_dtod(self, dst, src, extent, stream=0) -> None:
        source = self.arrays.region(src, extent, "cudaMemcpy3D device to device (source)")
        self.arrays.region(dst, extent, "cudaMemcpy3D device to device (destination)")[...] = source  # overlap-safe
        self._op(stream)

    def region_memset(self, dst, value, extent, stream=0, elem=1) -> None:
        box = self.arrays.region(dst, extent, "cudaMemset3D")
        row = np.empty(extent[0], np.uint8)
        fill_pattern(row, value, elem)
        box[...] = row
        self._op(stream)

    def texture_create(self, resource: dict, texture: dict, view: dict | None) -> int:
        return self.arrays.texture_create(resource, texture, view)

    def texture_destroy(self, handle: int) -> None:
        self.arrays.destroy_object(handle, surface=False)

    def surface_create(self, resource: dict) -> int:
        return self.arrays.surface_create(resource)

    def surface_destroy(self, handle: int) -> None:
        self.arrays.destroy_object(handle, surface=True)

    def bind_reference(self, module_key: str, name: str, surface: bool, resource: dict,
                       texture: dict | None) -> None:
        kind = "surface" if surface else "texture"
        if self._module(module_key).fatbin.references().get(name) != kind:
            raise CudaError(cudaError.cudaErrorInvalidSymbol, f"module {module_key} has no {kind} reference {name}")
        if not isinstance(resource, dict):
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{kind} reference {name}: no resource to bind")
        self.arrays.bind_reference(module_key, name, surface, resource, texture)

    def _reference_by_source_name(self, module_key: str, name: str, surface: bool, kernel: str):
        """launch.texref() / launch.surfref(): a module's reference by its
        name, mangled or demangled."""
        kind = "surface" if surface else "texture"
        names = [n for n, k in self._module(module_key).fatbin.references().items() if k == kind]
        if name not in names:
            matches = [n for n in names if demangle(n) == name]
            if len(matches) != 1:
                raise IllegalAddress(f"kernel {kernel}: launch.{kind[:4]}ref({name!r}): the module has no such {kind} "
                                     f"reference (it has: {', '.join(sorted(map(demangle, names))) or 'none'})")
            name = matches[0]
        return self.arrays.reference(module_key, name, surface, kernel)

    # Virtual memory management: a mapping is an allocation whose bytes are
    # a view of the physical allocation's array, so mappings of one physical
    # allocation (on this GPU, or opened to another with mem_access) share
    # bytes.  Mapping and unmapping happen at once, as copies do.

    def vmm_create(self, handle: int, size: int, shareable: bool = False) -> None:
        granularity = self.vmm_granularity()[0]
        if size <= 0 or size % granularity:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cuMemCreate of {size} bytes: not a positive multiple of the granularity {granularity}")
        if not shareable:
            self.physical.add(handle, Physical(size, self._zeros(size, "cuMemCreate")))
            return
        self._check_free(size, "cuMemCreate")
        fd = os.memfd_create("rcuda-vmm", os.MFD_CLOEXEC)  # its bytes in a file another session can map
        os.ftruncate(fd, size)
        self.physical.add(handle, Physical(size, np.frombuffer(mmap.mmap(fd, size), np.uint8), shared=fd))

    def vmm_export(self, handle: int) -> int:
        physical = self.physical.get(handle, "cuMemExportToShareableHandle")
        if physical.shared is None:
            raise CudaError(cudaError.cudaErrorInvalidValue, "cuMemExportToShareableHandle: the allocation was "
                                                             "made without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR")
        return physical.shared

    def vmm_import(self, handle: int, fd: int, size: int) -> None:
        shared = os.dup(fd)
        self.physical.add(handle, Physical(size, np.frombuffer(mmap.mmap(shared, size), np.uint8), shared=shared))

    def _vmm_free(self, physical: Physical) -> None:
        if physical.shared is not None:
            os.close(physical.shared)  # the bytes go with the last mapping of them

    def vmm_map(self, ptr: int, size: int, offset: int, handle: int) -> None:
        physical = self.physical.get(handle, "cuMemMap")
        self._check_vmm_range(ptr, size, offset, physical)
        self._memory.add(Allocation(ptr, size, physical.memory[offset:offset + size], mapped=(handle, physical)))
        physical.mappings += 1

    def vmm_unmap(self, ptr: int) -> None:
        handle, physical = self._memory.remove(ptr, unmap=True).mapped
        physical.mappings -= 1
        self._free_if_unused(handle, physical)

    def libraries(self):
        """cuBLAS, cuFFT and cuRAND in numpy (server/library_calls.py)."""
        if self._libraries is None:
            from .sim_libraries import SimLibraries
            self._libraries = SimLibraries(self)
        return self._libraries

    def _bytes(self, ptr: int, size: int, what: str) -> np.ndarray:
        """Device memory for a copy or a memset."""
        allocation = self._memory.require(ptr, size, what)
        offset = ptr - allocation.start
        return allocation.memory[offset:offset + size]

    # ---------------------------------------------------------- modules, kernels, symbols

    def load_module(self, key: str, image: bytes) -> str:
        # The image holds GPU code the sim cannot run (it runs plugins); it is
        # read for variables and kernel resources, and its PTX is checked as
        # a JIT compiler would reject it (server/backends/sim_jit.py).
        module = SimModule(bytes(image))
        try:
            module.fatbin.variables()
            module.fatbin.resources(self.arch)
        except fatbin.FatbinError as exc:
            raise CudaError(cudaError.cudaErrorInvalidKernelImage, f"module {key} is not a usable image: "
                                                                    f"{exc}") from None
        _check_loadable(module.fatbin, key, self.arch)
        info = sim_jit.check_module(module.fatbin, key)
        self._modules[key] = module
        return info

    def link(self, inputs: list[tuple[str, bytes]]) -> tuple[bytes, str]:
        return sim_jit.link(inputs)

    def _module(self, key: str) -> SimModule:
        module = self._modules.get(key)
        if module is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"module {key} is not loaded")
        return module

    def get_function(self, module_key: str, name: str, layout: ParamLayout) -> SimFunction:
        module = self._module(module_key)
        implementation = self._kernels.find(name)
        if implementation is None:
            demangled = demangle(name)
            known = f"{demangled} (mangled {name})" if demangled != name else name
            raise CudaError(cudaError.cudaErrorInvalidDeviceFunction,
                            f"the sim backend has no implementation of kernel {known}: provide one in a plugin "
                            f"file with `rcuda server --backend sim --kernels FILE.py` or RCUDA_SIM_KERNELS=FILE.py "
                            f"(KERNELS = {{{short_name(demangled)!r}: function}})")
        resources = module.fatbin.resources(self.arch).get(name)
        function = SimFunction(name, implementation, layout, resources, module_key)
        function.symbols = lambda source_name: self._symbol_by_source_name(module_key, source_name)
        function.references = functools.partial(self._reference_by_source_name, module_key)
        return function

    def function_attributes(self, function: SimFunction) -> dict:
        r = function.resources
        props = self._properties
        max_threads = props["maxThreadsPerBlock"]
        if r is not None:
            if r.registers:  # registers are allocated per warp, in units of 256
                per_warp = -(-r.registers * props["warpSize"] // 256) * 256
                max_threads = min(max_threads, props["regsPerBlock"] // per_warp * props["warpSize"])
            if r.max_threads:
                max_threads = min(max_threads, r.max_threads)
        return {
            "sharedSizeBytes": r.shared_bytes if r else 0,
            "constSizeBytes": r.const_bytes if r else 0,
            "localSizeBytes": r.local_bytes if r else 0,
            "maxThreadsPerBlock": max_threads,
            "numRegs": r.registers if r else 0,
            "ptxVersion": self.arch,
            "binaryVersion": r.arch if r else self.arch,
            "cacheModeCA": 0,
            "maxDynamicSharedSizeBytes": function.max_dynamic_shared,
            "preferredShmemCarveout": function.preferred_carveout,
            "clusterDimMustBeSet": int(bool(r and r.explicit_cluster)),
            "requiredClusterWidth": function.required_cluster[0],
            "requiredClusterHeight": function.required_cluster[1],
            "requiredClusterDepth": function.required_cluster[2],
            "clusterSchedulingPolicyPreference": function.cluster_scheduling,
            "nonPortableClusterSizeAllowed": function.non_portable_cluster,
            # Not a cudaFuncAttributes field: __launch_bounds__' blocks per cluster (0: not given).
            "maxBlocksPerCluster": (r.max_cluster_blocks or 0) if r else 0,
        }

    def function_set_attribute(self, function: SimFunction, attribute: str, value: int) -> None:
        if attribute == "cudaFuncAttributeMaxDynamicSharedMemorySize":
            static = function.resources.shared_bytes if function.resources else 0
            limit = self._properties["sharedMemPerBlockOptin"] - static
            if not 0 <= value <= limit:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"cudaFuncSetAttribute({function.describe()}, MaxDynamicSharedMemorySize, {value}): "
                                f"at most {limit} bytes")
            function.max_dynamic_shared = value
            function.accepted.clear()
        elif attribute == "cudaFuncAttributePreferredSharedMemoryCarveout":
            if not -1 <= value <= 100:
                raise CudaError(cudaError.cudaErrorInvalidValue, f"carveout {value} is not a percentage")
            function.preferred_carveout = value
        elif attribute in CLUSTER_DIMENSION_ATTRIBUTES:
            if function.resources and function.resources.cluster_dims:
                # cuda.h documents CUDA_ERROR_NOT_PERMITTED; the driver (580, CUDA 13.0, on an
                # H100) answers CUDA_ERROR_INVALID_VALUE, and a GPU server passes that on.
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"cudaFuncSetAttribute({function.describe()}, {attribute}): the kernel's cluster "
                                f"shape {function.resources.cluster_dims} is set at compile time (__cluster_dims__)")
            if value < 0:
                raise CudaError(cudaError.cudaErrorInvalidValue, f"{attribute} {value}: not a number of blocks")
            function.required_cluster[CLUSTER_DIMENSION_ATTRIBUTES.index(attribute)] = value  # checked at launch
            function.accepted.clear()
        elif attribute == "cudaFuncAttributeNonPortableClusterSizeAllowed":
            if value not in (0, 1):
                raise CudaError(cudaError.cudaErrorInvalidValue, f"{attribute} {value}: 0 or 1")
            function.non_portable_cluster = value
            function.accepted.clear()
        elif attribute == "cudaFuncAttributeClusterSchedulingPolicyPreference":
            if value not in ENUMS["cudaClusterSchedulingPolicy"].values():
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{attribute} {value}: not a cudaClusterSchedulingPolicy")
            function.cluster_scheduling = value  # a hint the sim has no use for
        else:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaFuncSetAttribute({function.describe()}, {attribute}): not an attribute a program "
                            f"may set")

    def get_symbol(self, module_key: str, name: str) -> tuple[int, int]:
        found = self._symbols.get((module_key, name))
        if found is not None:
            return found
        variable = self._module(module_key).fatbin.variables().get(name)
        if variable is None:
            raise CudaError(cudaError.cudaErrorInvalidSymbol, f"no __device__ variable {name} in module {module_key}")
        address = self._allocate(max(variable.size, 1), f"__device__ variable {name}", symbol=True)
        if variable.initial:
            self._bytes(address, len(variable.initial), name)[:] = np.frombuffer(variable.initial, np.uint8)
        self._symbols[(module_key, name)] = (address, variable.size)
        return address, variable.size

    def _symbol_by_source_name(self, module_key: str, name: str) -> int:
        """launch.symbol(): a variable by mangled name, or by its demangled one."""
        variables = self._module(module_key).fatbin.variables()
        if name not in variables:
            matches = [v for v in variables if demangle(v) == name]
            if len(matches) != 1:
                raise IllegalAddress(f"launch.symbol({name!r}): the program has no such __device__ variable "
                                     f"(it has: {', '.join(sorted(map(demangle, variables))) or 'none'})")
            name = matches[0]
        return self.get_symbol(module_key, name)[0]

    def launch(self, function: SimFunction, grid, block, params: bytes, shared_mem: int, stream: int,
               cooperative: bool = False, cluster: tuple[int, int, int] | None = None) -> None:
        """A plugin computes the whole grid at once: a cooperative launch
        (blocks that wait for each other) needs nothing more, nor does a
        cluster launch (blocks that share their shared memory), whose shape
        the plugin sees as `launch.cluster`."""
        # Checked configurations are remembered: launch-bound programs repeat
        # a few, and these checks cost more than an empty kernel.
        key = (grid, block, shared_mem, cluster)
        if key not in function.accepted:
            self._check_launch(function, grid, block, shared_mem)
            if len(function.accepted) < 64:
                function.accepted.add(key)
        if cluster is not None or function.clustered():
            # The cluster shape (the kernel's own when the launch names
            # none), checked as the client checked it, at every launch: a
            # kernel's required shape may change after a configuration was
            # accepted.
            cluster = launch_rules.check_cluster_launch(self._properties, self.function_attributes(function),
                                                        function.describe(), grid, block, shared_mem, cluster)
        if len(params) < function.layout.buffer_size:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"kernel {function.describe()}: {len(params)} bytes of parameters, "
                            f"its layout needs {function.layout.buffer_size}")
        others = [device._memory for device in list(self._open_devices.values()) if device is not self]
        memory = PeerMemory(self.index, self._memory, [peer._memory for peer in self._peers.values()], others) \
            if others else self._memory
        launch = Launch(name=function.name, demangled=function.demangled, grid=grid, block=block,
                        shared_mem=shared_mem, stream=stream, device=self.index, params=params,
                        layout=function.layout, memory=memory, symbols=function.symbols,
                        objects=self.arrays.lookup, cluster=cluster or (1, 1, 1),
                        references=function.references)
        arrived = time.perf_counter()
        self._run(function, launch)
        self._queue_gpu_time(function, launch, stream, arrived)

    def _check_launch(self, function: SimFunction, grid, block, shared_mem: int) -> None:
        check_launch_configuration(self._properties, grid, block, shared_mem)
        threads = block[0] * block[1] * block[2]
        if function.resources and function.resources.max_threads and threads > function.resources.max_threads:
            raise CudaError(cudaError.cudaErrorLaunchOutOfResources,
                            f"kernel {function.describe()}: {threads} threads per block, its __launch_bounds__ "
                            f"allow {function.resources.max_threads}")
        if shared_mem > function.max_dynamic_shared:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"kernel {function.describe()}: {shared_mem} bytes of dynamic shared memory, more than "
                            f"its {function.max_dynamic_shared} (raise it with cudaFuncSetAttribute)")

    def _run(self, function: SimFunction, launch: Launch) -> None:
        """Run the plugin; its exceptions become the CUDA errors a GPU gives.
        What it prints is kept as device output (see _ThreadRoutedStdout)."""
        printed = []
        router = _ThreadRoutedStdout.install()
        router._local.buffer = printed
        try:
            function.implementation.run(launch)
        except IllegalAddress as exc:
            log.warning("illegal address: %s", exc)
            raise CudaError(cudaError.cudaErrorIllegalAddress, str(exc)) from None
        except IndexError as exc:  # e.g. numpy indexing past the end of a view
            kernel = function.describe()
            log.warning("kernel %s: illegal address (IndexError)", kernel, exc_info=True)
            raise CudaError(cudaError.cudaErrorIllegalAddress, f"kernel {kernel}: IndexError: {exc}") from None
        except AssertionError as exc:
            kernel = function.describe()
            log.warning("kernel %s: device-side assert failed: %s", kernel, exc)
            raise CudaError(cudaError.cudaErrorAssert,
                            f"kernel {kernel}: device-side assert failed{': ' + str(exc) if str(exc) else ''}") \
                from None
        except (Exception, SystemExit) as exc:
            kernel = function.describe()
            log.error("kernel %s (sim plugin %s) raised", kernel, function.implementation.source, exc_info=True)
            raise CudaError(cudaError.cudaErrorLaunchFailure,
                            f"kernel {kernel} raised {type(exc).__name__}: {exc}") from None
        finally:
            router._local.buffer = None
            if printed:
                self._keep_output(printed)

    def _queue_gpu_time(self, function: SimFunction, launch: Launch, stream: int, arrived: float) -> None:
        """COSTS: the kernel keeps a place on the emulated GPU busy for its
        modelled time, from when it arrived or when it may start in its
        stream, whichever is later (see `_start`).  Nobody waits here.  Work
        simulated more slowly than modelled just finishes later: a run of
        kernels takes about max(simulated, modelled)."""
        cost = function.implementation.cost
        if cost is None:
            self._op(stream, arrived)  # no modelled time: a moment in stream order
            return
        try:
            seconds = max(float(cost(launch)), 0.0)
        except Exception as exc:
            log.error("cost function of kernel %s raised", function.describe(), exc_info=True)
            raise CudaError(cudaError.cudaErrorLaunchFailure,
                            f"the COSTS function of kernel {function.describe()} raised "
                            f"{type(exc).__name__}: {exc}") from None
        start = self._kernel_start(max(arrived, self._start(stream)), arrived)
        self._ends(stream, start + seconds)
        bisect.insort(self._kernel_ends, start + seconds)

    # ---------------------------------------------------------- modelled time
    # Results are computed at once, in issue order, in the device thread:
    # that order keeps every order CUDA promises, so results are right.  Only
    # the moment work is done is modelled, one timeline per stream:
    #
    # - `_stream_end[s]`: when stream s's queued work ends.  Work issued at
    #   time t on s starts at max(t, `_start(s)`): after the stream's earlier
    #   work, and (the legacy default stream) work on stream 0 after all
    #   earlier work of every blocking stream, work on a blocking stream
    #   after the earlier work of stream 0.  Non-blocking streams
    #   (cudaStreamNonBlocking) are independent of stream 0.
    # - A kernel with COSTS then runs for its cost, beside the kernels of
    #   other streams, up to `_max_concurrent` at once (`_kernel_start`).
    #   Copies, memsets, kernels without COSTS, event records and waits take
    #   no time: they happen at their start.
    # - `_legacy_end` and `_device_end` only grow: they hold the ends of
    #   destroyed streams too, as dependencies for stream 0 and for
    #   cudaDeviceSynchronize, for as long as they matter.
    #
    # Once all modelled work has ended (always, without COSTS), every start
    # is "now" and nothing is kept (the fast path of `_op`).

    def _start(self, stream: int) -> float:
        """When work issued on `stream` may start, as far as the streams go."""
        if stream == LEGACY_STREAM:
            return self._legacy_end
        end = self._stream_end.get(stream, 0.0)
        if stream in self._non_blocking:
            return end
        legacy = self._stream_end[LEGACY_STREAM]
        return end if end >= legacy else legacy

    def _ends(self, stream: int, end: float) -> None:
        """Stream `stream`'s queued work now ends at `end` (not earlier than before)."""
        self._stream_end[stream] = end
        if stream not in self._non_blocking and end > self._legacy_end:
            self._legacy_end = end
        if end > self._device_end:
            self._device_end = end

    def _op(self, stream: int, now: float | None = None) -> float:
        """Work taking no modelled time, issued on `stream` at `now`: when it happens."""
        if now is None:
            now = time.perf_counter()
        if self._device_end <= now:
            return now  # the emulated GPU is idle: every stream's work has ended
        at = max(now, self._start(stream))
        self._ends(stream, at)
        return at

    def _kernel_start(self, ready: float, now: float) -> float:
        """When a modelled kernel that may start at `ready` gets a place on
        the GPU: at once while fewer than `_max_concurrent` kernels run
        then; else when the earliest of them ends.  Takes the place."""
        ends = self._kernel_ends
        del ends[:bisect.bisect_right(ends, now)]  # over: no later kernel can start before now
        if len(ends) < self._max_concurrent:
            return ready
        # Every place is taken by a kernel ending at ends[i].  Take the place
        # freed last by `ready` (leaving earlier-freed ones to kernels that
        # may start sooner); if none is free then, the earliest to be.
        i = bisect.bisect_right(ends, ready) - 1
        if i < 0:
            return ends.pop(0)
        del ends[i]
        return ready

    # ---------------------------------------------------------- streams, events

    def synchronize(self) -> Completion:
        return _completion(self._device_end)

    def stream_create(self, stream: int, flags: int, priority: int) -> None:
        if stream == LEGACY_STREAM:
            return  # always there (the service refuses this id)
        self._stream_end[stream] = 0.0
        if flags & STREAM_NON_BLOCKING:
            self._non_blocking.add(stream)
        else:
            self._non_blocking.discard(stream)

    def stream_destroy(self, stream: int) -> None:
        # CUDA lets the stream's queued work finish.  Its end stays in
        # _legacy_end (blocking streams) and _device_end, so stream 0 and
        # cudaDeviceSynchronize still wait for it; nothing else could.
        if stream != LEGACY_STREAM:
            self._stream_end.pop(stream, None)
            self._non_blocking.discard(stream)

    def _stream_done_at(self, stream: int) -> float:
        """When the work queued so far on `stream` ends (for stream 0, the
        blocking streams' earlier work too)."""
        if stream == LEGACY_STREAM:
            return self._legacy_end
        return self._stream_end.get(stream, 0.0)

    def stream_synchronize(self, stream: int) -> Completion:
        return _completion(self._stream_done_at(stream))

    def stream_query(self, stream: int) -> bool:
        return time.perf_counter() >= self._stream_done_at(stream)

    def stream_wait_event(self, stream: int, event: int) -> None:
        recorded = self._events[event].recorded_at
        if recorded is None:
            return  # waiting for an event never recorded waits for nothing, as in CUDA
        now = time.perf_counter()
        if recorded <= now and self._device_end <= now:
            return  # already happened, and the GPU is idle
        at = max(now, self._start(stream), recorded)
        self._ends(stream, at)

    # Stream memory operations.  Work runs in arrival order, so when a wait
    # arrives every write issued before it, on any stream, has been made, and
    # nothing issued after it can run first: a wait whose condition does not
    # hold then would wait forever.  It fails at once instead, with
    # cudaErrorNotSupported (reported by the next reply, as an asynchronous
    # error; the operations after it in its batch do not run).  A wait that
    # holds happens, in modelled time, no earlier than the write-value op that
    # last wrote its word.

    def stream_mem_ops(self, ops: list[tuple[int, int, int, int]], stream: int) -> None:
        words = [self._bytes(address, stream_memops.WIDTH[kind], _MEMOP_CALLS[kind])
                 if kind in stream_memops.WIDTH else None for kind, address, _, _ in ops]  # all checked first
        for (kind, address, value, flags), word in zip(ops, words):
            if kind in stream_memops.WRITES:
                word[:] = np.frombuffer(value.to_bytes(word.size, "little"), np.uint8)
                now = time.perf_counter()
                at = self._op(stream, now)
                if at > now:
                    self._value_written[address] = at
                else:
                    self._value_written.pop(address, None)
            elif kind in stream_memops.WAITS:
                found = int.from_bytes(word.tobytes(), "little")
                if not stream_memops.satisfied(found, value, flags, word.size):
                    raise CudaError(cudaError.cudaErrorNotSupported,
                                    f"{_MEMOP_CALLS[kind]} on stream {stream}: the word at {address:#x} is "
                                    f"{found:#x}, the wait is for {stream_memops.condition(value, flags)}; the "
                                    f"sim runs work in arrival order, so only work issued before a wait can "
                                    f"satisfy it (a GPU would wait here)")
                now, written = time.perf_counter(), self._value_written.get(address, 0.0)
                if written > now:
                    self._ends(stream, max(now, self._start(stream), written))
                else:
                    self._op(stream, now)
            # A flush of remote writes and a memory barrier: writes are made in order already.

    def event_create(self, event: int, flags: int) -> None:
        self._events[event] = SimEvent(flags)

    def event_destroy(self, event: int) -> None:
        found = self._events.pop(event, None)
        if isinstance(found, SharedSimEvent):
            found.close()

    # Tensor maps: the sim's own encoding (rcuda/tensor_maps.py), which its
    # kernel plugins decode.

    def tensor_map_encode(self, tensor_map) -> bytes:
        return tensor_maps.encode(tensor_map)

    def tensor_map_replace(self, raw: bytes, address: int) -> bytes:
        return tensor_maps.replace_address(raw, address)

    def event_export(self, event: int) -> int:
        found = self._events[event]
        if not isinstance(found, SharedSimEvent):
            found = self._events[event] = SharedSimEvent.create(found.flags, found.recorded_at)
        return found.fd

    def event_open(self, event: int, flags: int, fd: int) -> None:
        self._events[event] = SharedSimEvent(flags, os.dup(fd))

    def event_record(self, event: int, stream: int) -> None:
        # The event happens when the stream's work before it has ended.
        self._events[event].recorded_at = self._op(stream)

    def event_synchronize(self, event: int) -> Completion:
        recorded = self._events[event].recorded_at
        return _DONE if recorded is None else _completion(recorded)

    def event_query(self, event: int) -> bool:
        recorded = self._events[event].recorded_at
        return recorded is None or time.perf_counter() >= recorded

    def event_elapsed_ms(self, start: int, end: int) -> float:
        events = [self._events[start], self._events[end]]
        for e in events:
            if e.flags & EVENT_DISABLE_TIMING:
                raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                                "cudaEventElapsedTime: an event was created with cudaEventDisableTiming")
            if e.recorded_at is None:
                raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                                "cudaEventElapsedTime: an event was never recorded")
        now = time.perf_counter()
        if any(e.recorded_at > now for e in events):
            raise CudaError(cudaError.cudaErrorNotReady,
                            "cudaEventElapsedTime: an event's record has not happened yet")
        return (events[1].recorded_at - events[0].recorded_at) * 1000.0

    # ---------------------------------------------------------- peers

    def peer_attributes(self, peer: int) -> dict[str, int]:
        return dict(SIM_PEER_LINK)

    def set_allocation_access(self, ptr: int, peer: int, flags: int) -> None:
        # Read-only access is read-write here: a plugin's views are writable.
        if peer not in self._open_devices:
            raise CudaError(cudaError.cudaErrorInvalidDevice, f"sim GPU {peer} is not open in this session")
        with self._memory.lock:
            allocation = self._memory.containing(ptr, 1)
            if allocation is None or allocation.start != ptr or allocation.symbol:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"access for GPU {peer} to {ptr:#x}: not an allocation's start on sim GPU "
                                f"{self.index}")
            if flags:
                allocation.accessors[peer] = flags
            else:
                allocation.accessors.pop(peer, None)

    def set_peer_access(self, peer: int, enable: bool) -> None:
        # The client keeps what is enabled (and CUDA's errors for enabling
        # twice); a GPU reset since enabling is another GPU, unreachable.
        if enable:
            device = self._open_devices.get(peer)
            if device is None:
                raise CudaError(cudaError.cudaErrorInvalidDevice, f"sim GPU {peer} is not open in this session")
            self._peers[peer] = device
        else:
            self._peers.pop(peer, None)

    # ---------------------------------------------------------- output

    def _keep_output(self, printed: list[str]) -> None:
        if printed:
            with self._output_lock:
                self._output.extend(printed)

    def take_output(self) -> str:
        with self._output_lock:
            text = "".join(self._output)
            self._output.clear()
        return text

    def close(self) -> None:
        # Nothing runs in the background: the modelled work needs no waiting for.
        if self._open_devices.get(self.index) is self:
            del self._open_devices[self.index]
        self._peers.clear()
        self._memory.clear()
        self.physical.clear()
        self.arrays.clear()
        for fd, _ in self._shared.values():
            os.close(fd)
        self._shared.clear()
        self._imported.clear()
        self._modules.clear()
        self._symbols.clear()
        self._events.clear()
        self._kernel_ends.clear()


def _check_loadable(image: fatbin.Fatbin, key: str, arch: int = SIM_ARCH) -> None:
    """What a GPU of compute capability `arch`'s driver accepts: a cubin of
    the same major version and no newer minor one, or PTX no newer than the
    device, which it would JIT-compile; else CUDA's own error."""
    runnable = [e for e in image.entries
                if (e.kind == fatbin.KIND_CUBIN and e.arch // 10 == arch // 10 and e.arch <= arch)
                or (e.kind == fatbin.KIND_PTX and e.arch <= arch)]
    if not runnable:
        has = ", ".join(f"{e.kind} {e.arch}" for e in image.entries) or "nothing"
        raise CudaError(cudaError.cudaErrorNoKernelImageForDevice,
                        f"module {key} has no code a compute capability {arch // 10}.{arch % 10} GPU can "
                        f"load (it has: {has})")

class PeerMemory:
    """What a kernel of GPU `index` reaches: this GPU's allocations, then
    those of the peers it enabled, then single allocations of the server's
    other GPUs that were opened to it (set_allocation_access).  Other
    tables are read under their locks, as their own threads may be
    allocating meanwhile."""

    def __init__(self, index: int, own: AllocationTable, peers: list[AllocationTable],
                 others: list[AllocationTable]):
        self.index, self.own, self.peers, self.others = index, own, peers, others

    def containing(self, ptr: int, size: int) -> Allocation | None:
        found = self.own.containing(ptr, size)
        for table in self.peers:
            if found is None:
                with table.lock:
                    found = table.containing(ptr, size)
        for table in self.others:
            if found is None:
                with table.lock:
                    found = table.containing(ptr, size)
                if found is not None and not found.accessors.get(self.index):
                    found = None
        return found


# ---------------------------------------------------------------- device output
# What a plugin prints is device output.  Several device threads run kernels
# at once, so stdout cannot be swapped per launch (contextlib.redirect_stdout
# is process-wide).  Instead sys.stdout is wrapped once by a router that sends
# a write from a thread that is inside a launch to that launch's buffer, and
# everything else to the real stdout.


class _ThreadRoutedStdout:
    _local = threading.local()

    def __init__(self, real):
        self.real = real

    @classmethod
    def install(cls) -> "_ThreadRoutedStdout":
        """The router, put in place of sys.stdout if it is not there.  Checked
        at every launch, not once: something (a test harness) may have
        replaced sys.stdout since."""
        router = sys.stdout
        if type(router) is not cls:
            with _install_lock:
                if type(sys.stdout) is not cls:
                    sys.stdout = cls(sys.stdout)
                router = sys.stdout
        return router

    @classmethod
    def buffer_of_this_thread(cls) -> list[str] | None:
        return getattr(cls._local, "buffer", None)

    def write(self, text: str) -> int:
        buffer = self.buffer_of_this_thread()
        if buffer is not None:
            buffer.append(text)
            return len(text)
        return self.real.write(text) if self.real is not None else len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.buffer_of_this_thread() is None and self.real is not None:
            self.real.flush()

    def __getattr__(self, name):  # encoding, fileno, isatty, ...: the real stream's
        return getattr(self.real, name)


_install_lock = threading.Lock()


# ---------------------------------------------------------------- properties


#: cudaDeviceGetP2PAttribute between two sim GPUs of one server.  Kernels may
#: load and store each other's memory (access), over the best link there is
#: (rank 0).  Two GPUs' plugins run in parallel threads, so a read-modify-write
#: across GPUs is not atomic: no native atomics.  The sim has no CUDA arrays.
SIM_PEER_LINK = {
    "cudaDevP2PAttrPerformanceRank": 0,
    "cudaDevP2PAttrAccessSupported": 1,
    "cudaDevP2PAttrNativeAtomicSupported": 0,
    "cudaDevP2PAttrCudaArrayAccessSupported": 0,
    "cudaDevP2PAttrOnlyPartialNativeAtomicSupported": 0,
}


def sim_properties(index: int, memory_bytes: int, identity: str = "", arch: int = SIM_ARCH) -> dict:
    """cudaDeviceProp fields (CUDA 13's names) of simulated GPU `index`: an
    A100-like device reporting compute capability 8.0, or with `arch` 90 an
    H100-like one (9.0: more multiprocessors and shared memory, thread block
    clusters).  `identity` (the server's host and address) makes UUIDs
    differ between sim servers."""
    props = _a100_properties(index, memory_bytes, identity)
    if arch == 90:
        props.update(H100_PROPERTIES)
    return props


#: What an H100 (SXM) reports differently from the A100 the sim is by default.
H100_PROPERTIES = {
    "major": 9,
    "minor": 0,
    "multiProcessorCount": 132,
    "sharedMemPerMultiprocessor": 233472,
    "sharedMemPerBlockOptin": 232448,
    "l2CacheSize": 50 << 20,
    "clusterLaunch": 1,
}


def _a100_properties(index: int, memory_bytes: int, identity: str) -> dict:
    seed = f"rcuda sim GPU {index}" + (f" of {identity}" if identity else "")
    uuid = hashlib.sha256(seed.encode()).digest()[:16]  # stable across restarts at one address
    hex_uuid = uuid.hex()
    return {
        "name": f"rcuda sim GPU {index}",
        "uuid": uuid,
        # Not a cudaDeviceProp field: the text after "GPU-" in nvidia-smi, for CUDA_VISIBLE_DEVICES.
        "uuid_str": "-".join((hex_uuid[:8], hex_uuid[8:12], hex_uuid[12:16], hex_uuid[16:20], hex_uuid[20:])),
        "luid": bytes(8),
        "luidDeviceNodeMask": 0,
        "totalGlobalMem": memory_bytes,
        "sharedMemPerBlock": 49152,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "memPitch": 2147483647,
        "maxThreadsPerBlock": 1024,
        "maxThreadsDim": [1024, 1024, 64],
        "maxGridSize": [2147483647, 65535, 65535],
        "totalConstMem": 65536,
        "major": 8,
        "minor": 0,
        "textureAlignment": 512,
        "texturePitchAlignment": 32,
        "multiProcessorCount": 108,
        "integrated": 0,
        "canMapHostMemory": 1,
        "maxTexture1D": 131072,
        "maxTexture1DMipmap": 32768,
        "maxTexture2D": [131072, 65536],
        "maxTexture2DMipmap": [32768, 32768],
        "maxTexture2DLinear": [131072, 65000, 2097120],
        "maxTexture2DGather": [32768, 32768],
        "maxTexture3D": [16384, 16384, 16384],
        "maxTexture3DAlt": [8192, 8192, 32768],
        "maxTextureCubemap": 32768,
        "maxTexture1DLayered": [32768, 2048],
        "maxTexture2DLayered": [32768, 32768, 2048],
        "maxTextureCubemapLayered": [32768, 2046],
        "maxSurface1D": 32768,
        "maxSurface2D": [131072, 65536],
        "maxSurface3D": [16384, 16384, 16384],
        "maxSurface1DLayered": [32768, 2048],
        "maxSurface2DLayered": [32768, 32768, 2048],
        "maxSurfaceCubemap": 32768,
        "maxSurfaceCubemapLayered": [32768, 2046],
        "surfaceAlignment": 512,
        "concurrentKernels": 1,
        "ECCEnabled": 0,
        "pciBusID": index + 1,
        "pciDeviceID": 0,
        "pciDomainID": 0,
        "tccDriver": 0,
        "asyncEngineCount": 1,
        "unifiedAddressing": 1,
        "memoryBusWidth": 5120,
        "l2CacheSize": 40 << 20,
        "persistingL2CacheMaxSize": 30 << 20,
        "maxThreadsPerMultiProcessor": 2048,
        "streamPrioritiesSupported": 1,
        "globalL1CacheSupported": 1,
        "localL1CacheSupported": 1,
        "sharedMemPerMultiprocessor": 167936,
        "regsPerMultiprocessor": 65536,
        "managedMemory": 0,
        "isMultiGpuBoard": 0,
        "multiGpuBoardGroupID": index,
        "hostNativeAtomicSupported": 0,
        "pageableMemoryAccess": 0,
        "concurrentManagedAccess": 0,
        "computePreemptionSupported": 1,
        "canUseHostPointerForRegisteredMem": 0,
        "cooperativeLaunch": 1,
        "sharedMemPerBlockOptin": 166912,
        "pageableMemoryAccessUsesHostPageTables": 0,
        "directManagedMemAccessFromHost": 0,
        "maxBlocksPerMultiProcessor": 32,
        "accessPolicyMaxWindowSize": 134213632,
        "reservedSharedMemPerBlock": 1024,
        "hostRegisterSupported": 0,
        "sparseCudaArraySupported": 0,
        "hostRegisterReadOnlySupported": 0,
        "timelineSemaphoreInteropSupported": 0,
        "memoryPoolsSupported": 1,
        "gpuDirectRDMASupported": 0,
        "gpuDirectRDMAFlushWritesOptions": 0,
        "gpuDirectRDMAWritesOrdering": 0,
        "memoryPoolSupportedHandleTypes": 1,  # POSIX file descriptors: sessions share memory (ipc_export)
        "deferredMappingCudaArraySupported": 0,
        "ipcEventSupported": 1,
        "clusterLaunch": 0,
        "unifiedFunctionPointers": 0,
        "deviceNumaConfig": 0,
        "deviceNumaId": -1,
        "mpsEnabled": 0,
        "hostNumaId": -1,
        "gpuPciDeviceID": 0,
        "gpuPciSubsystemID": 0,
        "hostNumaMultinodeIpcSupported": 0,
        # Gone from cudaDeviceProp in CUDA 13, still answered by cudaDeviceGetAttribute (kHz).
        "clockRate": 1410000,
        "memoryClockRate": 1215000,
        "kernelExecTimeoutEnabled": 0,
        "computeMode": 0,
        "maxTexture1DLinear": 268435456,
        "singleToDoublePrecisionPerfRatio": 2,
        "canFlushRemoteWrites": 0,
        # cudaDeviceGetStreamPriorityRange, as on A100/H100.
        "leastStreamPriority": 0,
        "greatestStreamPriority": -5,
    }
