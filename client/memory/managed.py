"""Managed memory: cudaMallocManaged, __managed__ variables, and what a
program says about them (stream attachment, prefetches, advice).

A managed allocation is a mirror (client/memory/mapped.py) like
cudaHostAlloc(Mapped)'s, or a block of one shared by small allocations
(client/memory/managed_arenas.py): a device allocation on the device current at
the call, with the host copy mapped at exactly its address.  One pointer
serves both sides; native/mapped_memory.c keeps the copies in step: a
kernel sees the host's writes made before its launch, the host sees the
device's after a synchronisation.  That is CUDA's model for devices
without concurrent managed access (cudaDevAttrConcurrentManagedAccess 0),
which is what rcuda's devices report.  Such a device keeps managed memory
from the host while it works; here a host access meanwhile waits for the
device's work and sees its writes (native/mapped_memory.c, `guarded`
mirrors), unless the memory is attached to the host.

Advice and prefetch locations are kept per page, as CUDA keeps them, so
that cudaMemRangeGetAttribute(s) answers what the program asked for.
Prefetching moves nothing by itself: host writes go to the device before
the next operation anyway, and the device's come back at the next
synchronisation.
"""
from __future__ import annotations

import bisect
import ctypes
import functools
import mmap
import operator
import threading
from dataclasses import dataclass

from rcuda._generated.cuda_enums import ENUMS, MACROS
from rcuda.errors import CudaError, cudaError

from . import address_space
from .managed_arenas import ARENA_BYTES, SMALL_BYTES, Arena
from .mapped import MAP_FAILED, PAGE, Mirror, _libc, _round_up

ATTACH_GLOBAL = MACROS["cudaMemAttachGlobal"]
ATTACH_HOST = MACROS["cudaMemAttachHost"]
ATTACH_SINGLE = MACROS["cudaMemAttachSingle"]
LOCATION_TYPES = ENUMS["cudaMemLocationType"]
LOCATION_DEVICE = LOCATION_TYPES["cudaMemLocationTypeDevice"]
LOCATION_HOST = LOCATION_TYPES["cudaMemLocationTypeHost"]
LOCATION_HOST_NUMA = LOCATION_TYPES["cudaMemLocationTypeHostNuma"]
LOCATION_HOST_NUMA_CURRENT = LOCATION_TYPES["cudaMemLocationTypeHostNumaCurrent"]
LOCATION_INVALID = LOCATION_TYPES["cudaMemLocationTypeInvalid"]
ADVICE = ENUMS["cudaMemoryAdvise"]
RANGE_ATTRIBUTES = ENUMS["cudaMemRangeAttribute"]

#: Locations as one int per page, as the older range attributes report them.
CPU = -1      # cudaCpuDeviceId
INVALID = -2  # cudaInvalidDeviceId: none, or not the same for every page
#: AccessedBy is a bit per device; the host's is the last.
HOST_BIT = 63


class PageAdvice:
    """What the program said about each page of an allocation."""

    def __init__(self, pages: int):
        self.read_mostly = [False] * pages
        self.preferred = [INVALID] * pages
        self.last_prefetch = [INVALID] * pages
        self.accessed_by = [0] * pages  # a bit per device, HOST_BIT for the host


#: An allocation nobody advised: every page as CUDA starts it.
NO_ADVICE = PageAdvice(1)


@dataclass(eq=False)
class ManagedRange:
    """One managed allocation (or __managed__ variable): [base, base + size)
    of `mirror`, which it has to itself unless `arena` shares it."""
    base: int
    size: int
    mirror: Mirror
    flags: int                        # cudaMallocManaged's (cudaMemAttachGlobal or Host)
    arena: Arena | None = None
    variable: bool = False            # a __managed__ variable's (not cudaFree's to free)
    attach: int = 0                   # cudaMemAttach* as the program last set it (flags at first)
    attached_stream: object = None    # cudaMemAttachSingle's stream
    advice: PageAdvice | None = None  # made at the first advice or prefetch

    def __post_init__(self):
        self.attach = self.attach or self.flags

    def advised(self) -> PageAdvice:
        if self.advice is None:
            self.advice = PageAdvice((self.base + self.size - 1) // PAGE - self.base // PAGE + 1)
        return self.advice

    def holds(self, address: int, count: int) -> bool:
        return self.base <= address and address + count <= self.base + self.size

    def prefetched(self, address: int, count: int, where: int) -> None:
        """[address, address + count) was prefetched to `where`."""
        _fill(self.advised().last_prefetch, self.pages(address, count), where)

    def pages(self, address: int, count: int) -> slice:
        """The pages [address, address + count) touches, as CUDA rounds a
        range, counted from the allocation's first page."""
        first = self.base // PAGE
        return slice(address // PAGE - first, (address + count - 1) // PAGE - first + 1)


class ManagedMemory:
    """The process's managed allocations (their mirrors are `mapped`'s)."""

    def __init__(self, mapped):
        self._mapped = mapped
        self._lock = threading.Lock()
        self._ranges: dict[int, ManagedRange] = {}
        self._bases: list[int] = []  # of _ranges, sorted
        self._arenas: dict[object, list[Arena]] = {}  # device -> its arenas
        #: __managed__ variables of images the program loaded (cuLibraryGetManaged):
        #: (device, module key, name) -> the host copy's address
        self._loaded_variables: dict[tuple, int] = {}

    # ---------------------------------------------------------- making and freeing

    def allocate(self, runtime, device, size: int, flags: int) -> int:
        if size == 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, "cudaMallocManaged of 0 bytes")
        if flags not in (ATTACH_GLOBAL, ATTACH_HOST):
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaMallocManaged flags {flags:#x}: must be cudaMemAttachGlobal or cudaMemAttachHost")
        with self._lock:
            if size <= SMALL_BYTES:
                arena, base = self._take_small(runtime, device, size)
                self._add(ManagedRange(base, size, arena.mirror, flags, arena=arena))
                return base
        host = self._mapped.allocate(runtime, device, size, flags, managed=True)
        with self._lock:
            self._add(ManagedRange(host, size, self._mapped.at(host), flags))
        return host

    def _take_small(self, runtime, device, size: int) -> tuple[Arena, int]:
        arenas = self._arenas.setdefault(device, [])
        for arena in arenas:
            base = arena.take(size)
            if base is not None:
                return arena, base
        host = self._mapped.allocate(runtime, device, ARENA_BYTES, ATTACH_GLOBAL, managed=True)
        arena = Arena(self._mapped.at(host))
        arenas.append(arena)
        return arena, arena.take(size)

    def _add(self, managed: ManagedRange) -> None:
        self._ranges[managed.base] = managed
        bisect.insort(self._bases, managed.base)

    def _remove(self, base: int) -> ManagedRange:
        managed = self._ranges.pop(base)
        self._bases.remove(base)
        return managed

    def set_up_variables(self, runtime, module) -> list[tuple[int, int]]:
        """A module's __managed__ variables, at the program's first touch of
        one (__cudaInitModule): each is the module's variable on the current
        device, mirrored by host memory that starts with its value.  Returns
        (where the program keeps the variable's host pointer, that pointer)
        the first time, nothing after."""
        with self._lock:
            if module.managed_ready:
                return []
            device = runtime.device()
            ready = [(pointer_at, self._mirror_variable(runtime, device, module, name))
                     for pointer_at, name, _size in module.managed_variables]
            module.managed_ready = True
            return ready

    def loaded_variable(self, runtime, device, module, name: str) -> tuple[int, int]:
        """(host address, size) of __managed__ variable `name` of an image the
        program loaded at run time (a library: cuLibraryGetManaged,
        cudaLibraryGetManaged): mirrored as the program's own are, on
        `device`, at its first request; the same copy after, for as long as
        the session (the server keeps the image, and the same image loaded
        again is the same module there)."""
        key = (device, module.key, name)
        with self._lock:
            host = self._loaded_variables.get(key)
            if host is None:
                host = self._loaded_variables[key] = self._mirror_variable(runtime, device, module, name)
            return host, self._ranges[host].size

    def _mirror_variable(self, runtime, device, module, name: str) -> int:
        ptr, size = device.symbol(module, name)
        if runtime.allocations.find(ptr) is None:
            runtime.allocations.add(ptr, size, device)  # so that copies to it are checked like any other
        rounded = _round_up(size)
        host = _libc.mmap(None, rounded, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                          -1, 0)
        if host in (None, MAP_FAILED):
            raise CudaError(cudaError.cudaErrorMemoryAllocation, f"the host copy of __managed__ {name} ({size} bytes)")
        # Its initial value (the module's initialiser) is the device's.
        ctypes.memmove(host, b"".join(bytes(f.buffer) for f in device.copy_from_device(ptr, size)), size)
        mirror = self._mapped.mirror_variable(runtime, device, host, size, ptr)
        self._add(ManagedRange(host, size, mirror, ATTACH_GLOBAL, variable=True))
        return host

    def is_managed(self, base: int) -> bool:
        """Whether `base` is a cudaMallocManaged allocation's start."""
        managed = self._ranges.get(base)
        return managed is not None and not managed.variable

    def free(self, runtime, base: int) -> None:
        """cudaFree of a managed allocation: after the device's queued work,
        which may still use it (CUDA synchronises too).  An arena goes when
        its last block does, unless it is its device's last."""
        with self._lock:
            managed = self._remove(base)
        mirror = managed.mirror
        mirror.device.synchronize()
        if managed.arena is not None:
            with self._lock:
                managed.arena.give(base, managed.size)
                arenas = self._arenas[mirror.device]
                if not managed.arena.empty or len(arenas) == 1:
                    return
                arenas.remove(managed.arena)
        self._mapped.release(runtime, mirror)
        address_space.unmap(mirror.host, _round_up(mirror.size))

    def forget_device(self, device) -> None:
        """cudaDeviceReset: the device copies are gone (mapped forgets the
        mirrors); the host copies stay as plain memory, as CUDA leaves
        nothing to free."""
        with self._lock:
            for base in [b for b, r in self._ranges.items() if r.mirror.device is device]:
                self._remove(base)
            self._arenas.pop(device, None)
            for key in [k for k in self._loaded_variables if k[0] is device]:
                del self._loaded_variables[key]

    def forget_all(self) -> None:
        with self._lock:
            self._ranges.clear()
            self._bases.clear()
            self._arenas.clear()
            self._loaded_variables.clear()

    def stream_destroyed(self, stream) -> None:
        """Attachments to a destroyed stream revert to the allocation's
        default (cudaMallocManaged's flags)."""
        with self._lock:
            for managed in self._ranges.values():
                if managed.attached_stream is stream:
                    managed.attach, managed.attached_stream = managed.flags, None

    # ---------------------------------------------------------- lookups

    def find(self, address: int, count: int, call: str) -> ManagedRange:
        """The managed allocation holding [address, address + count)."""
        if count == 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: an empty range at {address:#x}")
        with self._lock:
            i = bisect.bisect_right(self._bases, address) - 1
            managed = self._ranges[self._bases[i]] if i >= 0 else None
        if managed is None or not managed.holds(address, count):
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"{call}: {address:#x}..+{count} is not inside one managed allocation")
        return managed

    # ---------------------------------------------------------- what the program says

    def attach(self, fast, stream, null_stream: bool, address: int, length: int, flags: int) -> None:
        """cudaStreamAttachMemAsync (`null_stream`: the program passed 0).
        Memory attached to the host is the host's while the device works."""
        call = "cudaStreamAttachMemAsync"
        if flags not in (ATTACH_GLOBAL, ATTACH_HOST, ATTACH_SINGLE):
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: flags {flags:#x}")
        managed = self._ranges.get(address)
        if managed is None:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {address:#x} is not a managed allocation")
        if length not in (0, managed.size):
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"{call}: length {length} must be 0 or the allocation's size ({managed.size})")
        if flags == ATTACH_SINGLE and null_stream:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"{call}: cudaMemAttachSingle to the NULL stream (a virtual global stream)")
        managed.attach = flags
        managed.attached_stream = stream if flags == ATTACH_SINGLE else None
        if managed.arena is None and not managed.variable:  # (an arena's mirror is shared: always kept)
            fast.mirror_guard(managed.mirror.slot, flags != ATTACH_HOST)

    def location(self, location, call: str, devices: int, host_allowed: bool = True) -> int:
        """A cudaMemLocation as one int: a device ordinal or CPU.  The host's
        NUMA nodes are one host here."""
        if location.type == LOCATION_DEVICE:
            if not 0 <= location.id < devices:
                raise CudaError(cudaError.cudaErrorInvalidDevice, f"{call}: device {location.id}")
            return location.id
        if host_allowed and location.type in (LOCATION_HOST, LOCATION_HOST_NUMA_CURRENT):
            return CPU
        if host_allowed and location.type == LOCATION_HOST_NUMA:
            if location.id != 0:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{call}: host NUMA node {location.id} (this host has node 0)")
            return CPU
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: location type {location.type}")

    def advise(self, address: int, count: int, advice: int, where: int | None) -> None:
        """cudaMemAdvise: `where` is the location (an int) for the advice
        that has one."""
        managed = self.find(address, count, "cudaMemAdvise")
        pages = managed.pages(address, count)
        if advice not in ADVICE.values():
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMemAdvise: advice {advice}")
        advised = managed.advised()
        bit = 1 << (HOST_BIT if where == CPU else where or 0)
        if advice == ADVICE["cudaMemAdviseSetReadMostly"]:
            _fill(advised.read_mostly, pages, True)
        elif advice == ADVICE["cudaMemAdviseUnsetReadMostly"]:
            _fill(advised.read_mostly, pages, False)
        elif advice == ADVICE["cudaMemAdviseSetPreferredLocation"]:
            _fill(advised.preferred, pages, where)
        elif advice == ADVICE["cudaMemAdviseUnsetPreferredLocation"]:
            _fill(advised.preferred, pages, INVALID)
        elif advice == ADVICE["cudaMemAdviseSetAccessedBy"]:
            advised.accessed_by[pages] = [b | bit for b in advised.accessed_by[pages]]
        else:  # cudaMemAdviseUnsetAccessedBy
            advised.accessed_by[pages] = [b & ~bit for b in advised.accessed_by[pages]]

    def range_attribute(self, attribute: int, address: int, count: int, data_size: int, devices: int) -> list[int]:
        """cudaMemRangeGetAttribute: the value(s) as 32-bit ints, `data_size`
        bytes of them."""
        call = "cudaMemRangeGetAttribute"
        managed = self.find(address, count, call)
        advised = managed.advice
        pages = managed.pages(address, count) if advised is not None else slice(0, 1)
        advised = advised or NO_ADVICE
        if attribute == RANGE_ATTRIBUTES["cudaMemRangeAttributeAccessedBy"]:
            if data_size == 0 or data_size % 4:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{call}(cudaMemRangeAttributeAccessedBy): dataSize {data_size} is not a non-zero "
                                f"multiple of 4")
            common = functools.reduce(operator.and_, advised.accessed_by[pages])
            accessors = [d for d in range(min(devices, HOST_BIT)) if common >> d & 1]
            if common >> HOST_BIT & 1:
                accessors.append(CPU)
            slots = data_size // 4
            return (accessors + [INVALID] * slots)[:slots]
        if data_size != 4:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: dataSize {data_size} must be 4")
        if attribute == RANGE_ATTRIBUTES["cudaMemRangeAttributeReadMostly"]:
            return [int(all(advised.read_mostly[pages]))]
        by_name = {"PreferredLocation": advised.preferred, "LastPrefetchLocation": advised.last_prefetch}
        for name, per_page in by_name.items():
            values = set(per_page[pages])
            where = values.pop() if len(values) == 1 else INVALID
            if attribute == RANGE_ATTRIBUTES[f"cudaMemRangeAttribute{name}"]:
                return [where]
            if attribute == RANGE_ATTRIBUTES[f"cudaMemRangeAttribute{name}Type"]:
                return [LOCATION_INVALID if where == INVALID else LOCATION_HOST if where == CPU else LOCATION_DEVICE]
            if attribute == RANGE_ATTRIBUTES[f"cudaMemRangeAttribute{name}Id"]:
                return [where if where >= 0 else 0]
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: attribute {attribute}")


def _fill(per_page: list, pages: slice, value) -> None:
    per_page[pages] = [value] * len(range(*pages.indices(len(per_page))))
