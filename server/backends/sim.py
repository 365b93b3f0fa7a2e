"""The sim backend: GPUs simulated on the CPU, so rcuda runs anywhere.

Device memory is host memory (one numpy byte array per allocation) at fake,
disjoint addresses; kernels are Python functions from plugin files
(sim_plugins.py).  A launch runs its kernel at once, in the device's thread,
so its results are always there when anything reads them.

A kernel with a modelled time (the plugin's COSTS) also occupies the emulated
GPU for that time, queued behind the kernels before it, as on a GPU: the
device is busy until `_busy_until`, and whatever observes the device (a
copy, a synchronisation, an event) first waits for that.  Simulating the
kernel on the CPU overlaps the modelled time instead of adding to it, so an
emulated GPU keeps its speed when the host's CPUs are busy (four emulated
GPUs on a two-core machine), as a real GPU does.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import logging
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from rcuda import fatbin
from rcuda._generated.cuda_enums import MACROS
from rcuda.device_attributes import attributes_from_properties
from rcuda.errors import CudaError, cudaError
from rcuda.fatbin import KernelResources

from .base import (ALLOCATION_ALIGNMENT, VA_WINDOW_SIZE, Allocation, AllocationTable, Backend, Device, ParamLayout,
                   check_launch_configuration)
from .sim_plugins import (IllegalAddress, KernelImplementation, KernelLibrary, Launch, demangle,
                          kernel_files_from_environment, short_name)

log = logging.getLogger(__name__)

DEFAULT_MEMORY_BYTES = 16 << 30

#: Without a client-assigned window, device i allocates in
#: [DEFAULT_VA_BASE + i * VA_WINDOW_SIZE, ... + VA_WINDOW_SIZE): disjoint, and
#: all below 0x8000_0000_0000 (the top of a canonical user-space address).
DEFAULT_VA_BASE = 0x7000_0000_0000
MAX_DEVICES = (0x8000_0000_0000 - DEFAULT_VA_BASE) // VA_WINDOW_SIZE  # 16

#: The sim GPUs report compute capability 8.0: kernel resources are read from
#: the program's newest cubin not newer than sm_80.
SIM_ARCH = 80

#: Dynamic shared memory a kernel may use without cudaFuncSetAttribute.
DEFAULT_DYNAMIC_SHARED = 48 << 10

EVENT_DISABLE_TIMING = MACROS["cudaEventDisableTiming"]

#: Unused bytes left after each allocation, so that running off its end hits
#: no other allocation and fails as an illegal address.
GUARD_BYTES = ALLOCATION_ALIGNMENT


def _round_up(value: int, alignment: int = ALLOCATION_ALIGNMENT) -> int:
    return -(-value // alignment) * alignment


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

    def device_count(self) -> int:
        return self.devices

    def open_device(self, index: int, va_base: int | None = None) -> SimDevice:
        if not 0 <= index < self.devices:
            raise CudaError(cudaError.cudaErrorInvalidDevice, f"sim device {index} does not exist "
                                                              f"(this server has {self.devices})")
        if va_base is None:
            va_base = DEFAULT_VA_BASE + index * VA_WINDOW_SIZE
        return SimDevice(index, va_base, self.memory_bytes, self.kernels, identity=self.identity)


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
        self.accepted: set = set()  # (grid, block, shared memory) configurations already checked
        self.symbols = None         # launch.symbol(): set by the device

    def describe(self) -> str:
        return self.name if self.demangled == self.name else f"{self.demangled} ({self.name})"


@dataclass
class SimModule:
    image: bytes

    @functools.cached_property
    def fatbin(self) -> fatbin.Fatbin:
        return fatbin.parse_fatbin(self.image)


@dataclass
class SimEvent:
    flags: int
    recorded_at: float | None = None  # perf_counter() seconds of the last record


class SimDevice(Device):
    def __init__(self, index: int, va_base: int, memory_bytes: int, kernels: KernelLibrary,
                 window_size: int = VA_WINDOW_SIZE, identity: str = ""):
        if va_base < 0 or va_base % ALLOCATION_ALIGNMENT:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"va_base {va_base:#x} must be a non-negative multiple of {ALLOCATION_ALIGNMENT}")
        self.index = index
        self._window = (max(va_base, ALLOCATION_ALIGNMENT), va_base + window_size)  # never address 0
        # Addresses are handed out in increasing order and not reused while the
        # window lasts: a freed pointer then stays invalid, so use after free is
        # caught as an illegal address instead of silently hitting new data.
        self._next_address = self._window[0]
        self._memory = AllocationTable()
        self._total = memory_bytes
        self._kernels = kernels
        self._modules: dict[str, SimModule] = {}
        self._symbols: dict[tuple[str, str], tuple[int, int]] = {}  # (module, name) -> (address, size)
        self._events: dict[int, SimEvent] = {}
        self._properties = sim_properties(index, memory_bytes, identity)
        self._output: list[str] = []
        self._output_lock = threading.Lock()
        self._busy_until = 0.0  # perf_counter() time the emulated GPU's queued work ends (COSTS)

    # ---------------------------------------------------------- properties

    def properties(self) -> dict:
        return copy.deepcopy(self._properties)

    def attributes(self) -> dict[str, int]:
        return attributes_from_properties(self._properties)

    def memory_in_use(self) -> int:
        return self._memory.bytes_in_use

    def mem_get_info(self) -> tuple[int, int]:
        return self._total - self._memory.bytes_in_use, self._total

    # ---------------------------------------------------------- memory

    def malloc(self, size: int) -> int:
        if size < 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMalloc of {size} bytes")
        if size == 0:
            return 0  # what cudaMalloc does: success, and a NULL pointer
        return self._allocate(size, "cudaMalloc")

    def _allocate(self, size: int, what: str, symbol: bool = False) -> int:
        free = self._total - self._memory.bytes_in_use
        if size > free:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"{what} of {size} bytes: only {free} of the sim device's {self._total} bytes "
                            f"are free (rcuda server --memory-limit sets its size)")
        start = self._place(_round_up(size) + GUARD_BYTES)
        if start is None:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"{what} of {size} bytes: the device's address window is full")
        try:
            memory = np.zeros(size, np.uint8)
        except MemoryError:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"{what} of {size} bytes: the sim server's host is out of memory") from None
        self._memory.add(Allocation(start, size, memory, symbol=symbol))
        return start

    def _place(self, span: int) -> int | None:
        """The address for a new allocation taking `span` bytes of addresses."""
        low, high = self._window
        if self._next_address + span <= high:
            start, self._next_address = self._next_address, self._next_address + span
            return start
        # The window is used up: only now reuse the gaps freed allocations left.
        candidate = low
        for allocation in self._memory:
            if candidate + span <= allocation.start:
                return candidate
            candidate = _round_up(allocation.end) + GUARD_BYTES
        return candidate if candidate + span <= high else None

    def free(self, ptr: int) -> None:
        if ptr == 0:
            return  # cudaFree(NULL) does nothing
        self._settle()  # cudaFree waits for the device, as on a GPU
        self._memory.remove(ptr)

    def memcpy_htod(self, dst: int, data: memoryview, stream: int = 0) -> None:
        source = np.frombuffer(data, np.uint8)
        if source.size:
            self._bytes(dst, source.size, "cudaMemcpy to device")[:] = source

    def memcpy_dtoh(self, src: int, size: int, stream: int = 0) -> memoryview:
        if size == 0:
            return memoryview(b"")
        # A view, not a copy: the service sends it before serving anything
        # that could change it (see Device.memcpy_dtoh).
        return memoryview(self._bytes(src, size, "cudaMemcpy from device"))

    def host_view(self, ptr: int, size: int) -> memoryview:
        # Everything before this in the stream has run (see below): writing now is in order.
        return memoryview(self._bytes(ptr, size, "cudaMemcpy to device")) if size else memoryview(bytearray())

    def memcpy_dtod(self, dst: int, src: int, size: int, stream: int = 0) -> None:
        if size:
            source = self._bytes(src, size, "cudaMemcpy device to device (source)")
            self._bytes(dst, size, "cudaMemcpy device to device (destination)")[:] = source  # overlap-safe

    def memset(self, ptr: int, value: int, size: int, stream: int = 0) -> None:
        if size:
            self._bytes(ptr, size, "cudaMemset")[:] = value & 0xFF

    def _bytes(self, ptr: int, size: int, what: str) -> np.ndarray:
        """Device memory for a copy or a memset, after the queued kernels."""
        self._settle()
        allocation = self._memory.require(ptr, size, what)
        offset = ptr - allocation.start
        return allocation.memory[offset:offset + size]

    # ---------------------------------------------------------- modules, kernels, symbols

    def load_module(self, key: str, image: bytes) -> None:
        # The image holds GPU code the sim cannot run (it runs plugins); it is
        # read for variables and kernel resources, so it must be a fatbinary.
        module = SimModule(bytes(image))
        try:
            module.fatbin.variables()
            module.fatbin.resources(SIM_ARCH)
        except fatbin.FatbinError as exc:
            raise CudaError(cudaError.cudaErrorInvalidKernelImage, f"module {key} is not a usable fatbinary: "
                                                                    f"{exc}") from None
        self._modules[key] = module

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
        resources = module.fatbin.resources(SIM_ARCH).get(name)
        function = SimFunction(name, implementation, layout, resources, module_key)
        function.symbols = lambda source_name: self._symbol_by_source_name(module_key, source_name)
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
            "ptxVersion": SIM_ARCH,
            "binaryVersion": r.arch if r else SIM_ARCH,
            "cacheModeCA": 0,
            "maxDynamicSharedSizeBytes": function.max_dynamic_shared,
            "preferredShmemCarveout": function.preferred_carveout,
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
        # Other attributes (cluster shapes, scheduling hints) change nothing the sim models.

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

    def launch(self, function: SimFunction, grid, block, params: bytes, shared_mem: int, stream: int) -> None:
        # Checked configurations are remembered: launch-bound programs repeat
        # a few, and these checks cost more than an empty kernel.
        key = (grid, block, shared_mem)
        if key not in function.accepted:
            self._check_launch(function, grid, block, shared_mem)
            if len(function.accepted) < 64:
                function.accepted.add(key)
        if len(params) < function.layout.buffer_size:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"kernel {function.describe()}: {len(params)} bytes of parameters, "
                            f"its layout needs {function.layout.buffer_size}")
        launch = Launch(name=function.name, demangled=function.demangled, grid=grid, block=block,
                        shared_mem=shared_mem, stream=stream, device=self.index, params=params,
                        layout=function.layout, memory=self._memory, symbols=function.symbols)
        arrived = time.perf_counter()
        self._run(function, launch)
        self._queue_gpu_time(function, launch, arrived)

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

    def _queue_gpu_time(self, function: SimFunction, launch: Launch, arrived: float) -> None:
        """COSTS: the kernel keeps the emulated GPU busy for its modelled
        time, from when it arrived or the work before it ends, whichever is
        later.  Nobody waits here: the next thing that observes the device
        does (`_settle`).  Work simulated more slowly than modelled just
        finishes later: a run of kernels takes about max(simulated, modelled)."""
        cost = function.implementation.cost
        if cost is None:
            return
        try:
            seconds = float(cost(launch))
        except Exception as exc:
            log.error("cost function of kernel %s raised", function.describe(), exc_info=True)
            raise CudaError(cudaError.cudaErrorLaunchFailure,
                            f"the COSTS function of kernel {function.describe()} raised "
                            f"{type(exc).__name__}: {exc}") from None
        self._busy_until = max(self._busy_until, arrived) + max(seconds, 0.0)

    def _settle(self) -> None:
        """Wait until the emulated GPU has finished its queued work."""
        delay = self._busy_until - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

    # ---------------------------------------------------------- streams, events
    # Everything runs at once, in order, in the device thread: by the time a
    # request is read, all earlier work of every stream has run, and every
    # order CUDA promises is kept.  Waiting is only for modelled time: one
    # queue for all streams (_busy_until).

    def synchronize(self) -> None:
        self._settle()

    def stream_create(self, stream: int, flags: int, priority: int) -> None:
        pass

    def stream_destroy(self, stream: int) -> None:
        pass

    def stream_synchronize(self, stream: int) -> None:
        self._settle()

    def stream_query(self, stream: int) -> bool:
        return time.perf_counter() >= self._busy_until

    def stream_wait_event(self, stream: int, event: int) -> None:
        pass

    def event_create(self, event: int, flags: int) -> None:
        self._events[event] = SimEvent(flags)

    def event_destroy(self, event: int) -> None:
        self._events.pop(event, None)

    def event_record(self, event: int, stream: int) -> None:
        # The event completes when the queue reaches it.
        self._events[event].recorded_at = max(time.perf_counter(), self._busy_until)

    def event_synchronize(self, event: int) -> None:
        self._wait_for(self._events[event])

    def event_query(self, event: int) -> bool:
        recorded = self._events[event].recorded_at
        return recorded is None or time.perf_counter() >= recorded

    def _wait_for(self, event: SimEvent) -> None:
        delay = (event.recorded_at or 0.0) - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

    def event_elapsed_ms(self, start: int, end: int) -> float:
        times = []
        for event in (start, end):
            e = self._events[event]
            if e.flags & EVENT_DISABLE_TIMING:
                raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                                "cudaEventElapsedTime: an event was created with cudaEventDisableTiming")
            if e.recorded_at is None:
                raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                                "cudaEventElapsedTime: an event was never recorded")
            self._wait_for(e)
            times.append(e.recorded_at)
        return (times[1] - times[0]) * 1000.0

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
        self._memory.clear()
        self._modules.clear()
        self._symbols.clear()
        self._events.clear()


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


def sim_properties(index: int, memory_bytes: int, identity: str = "") -> dict:
    """cudaDeviceProp fields (CUDA 13's names) of simulated GPU `index`: an
    A100-like device reporting compute capability 8.0.  `identity` (the
    server's host and address) makes UUIDs differ between sim servers."""
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
        "cooperativeLaunch": 0,
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
        "memoryPoolsSupported": 0,
        "gpuDirectRDMASupported": 0,
        "gpuDirectRDMAFlushWritesOptions": 0,
        "gpuDirectRDMAWritesOrdering": 0,
        "memoryPoolSupportedHandleTypes": 0,
        "deferredMappingCudaArraySupported": 0,
        "ipcEventSupported": 0,
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
