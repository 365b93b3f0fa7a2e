"""The sim backend: GPUs simulated on the CPU, so rcuda runs anywhere.

Device memory is host memory (one numpy byte array per allocation) at fake,
disjoint addresses; kernels are Python functions from plugin files
(sim_plugins.py).  A launch runs its kernel at once, in the device's thread,
so there is never anything to wait for in `synchronize`.
"""
from __future__ import annotations

import copy
import hashlib
import logging
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np

from rcuda.errors import CudaError, cudaError

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

    def __init__(self, mangled: str, implementation: KernelImplementation, layout: ParamLayout):
        self.name = mangled
        self.demangled = demangle(mangled)
        self.implementation = implementation
        self.layout = layout

    def describe(self) -> str:
        return self.name if self.demangled == self.name else f"{self.demangled} ({self.name})"


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
        self._modules: set[str] = set()
        self._properties = sim_properties(index, memory_bytes, identity)
        self._output: list[str] = []
        self._output_lock = threading.Lock()

    # ---------------------------------------------------------- properties

    def properties(self) -> dict:
        return copy.deepcopy(self._properties)

    def mem_get_info(self) -> tuple[int, int]:
        return self._total - self._memory.bytes_in_use, self._total

    # ---------------------------------------------------------- memory

    def malloc(self, size: int) -> int:
        if size < 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMalloc of {size} bytes")
        if size == 0:
            return 0  # what cudaMalloc does: success, and a NULL pointer
        free = self._total - self._memory.bytes_in_use
        if size > free:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cudaMalloc of {size} bytes: only {free} of the sim device's {self._total} bytes "
                            f"are free (rcuda server --memory-limit sets its size)")
        start = self._place(_round_up(size) + GUARD_BYTES)
        if start is None:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cudaMalloc of {size} bytes: the device's address window is full")
        try:
            memory = np.zeros(size, np.uint8)
        except MemoryError:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cudaMalloc of {size} bytes: the sim server's host is out of memory") from None
        self._memory.add(Allocation(start, size, memory))
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
        self._memory.remove(ptr)

    def memcpy_htod(self, dst: int, data: memoryview) -> None:
        source = np.frombuffer(data, np.uint8)
        if source.size:
            self._bytes(dst, source.size, "cudaMemcpy to device")[:] = source

    def memcpy_dtoh(self, src: int, size: int) -> memoryview:
        if size == 0:
            return memoryview(b"")
        # A copy: the reply may be sent after later operations changed the memory.
        return memoryview(self._bytes(src, size, "cudaMemcpy from device").copy())

    def memcpy_dtod(self, dst: int, src: int, size: int) -> None:
        if size:
            source = self._bytes(src, size, "cudaMemcpy device to device (source)")
            self._bytes(dst, size, "cudaMemcpy device to device (destination)")[:] = source  # overlap-safe

    def memset(self, ptr: int, value: int, size: int) -> None:
        if size:
            self._bytes(ptr, size, "cudaMemset")[:] = value & 0xFF

    def _bytes(self, ptr: int, size: int, what: str) -> np.ndarray:
        allocation = self._memory.require(ptr, size, what)
        offset = ptr - allocation.start
        return allocation.memory[offset:offset + size]

    # ---------------------------------------------------------- kernels

    def load_module(self, key: str, image: bytes) -> None:
        self._modules.add(key)  # the image holds GPU code; the sim runs plugins instead

    def get_function(self, module_key: str, name: str, layout: ParamLayout) -> SimFunction:
        if module_key not in self._modules:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"module {module_key} is not loaded")
        implementation = self._kernels.find(name)
        if implementation is None:
            demangled = demangle(name)
            known = f"{demangled} (mangled {name})" if demangled != name else name
            raise CudaError(cudaError.cudaErrorInvalidDeviceFunction,
                            f"the sim backend has no implementation of kernel {known}: provide one in a plugin "
                            f"file with `rcuda server --backend sim --kernels FILE.py` or RCUDA_SIM_KERNELS=FILE.py "
                            f"(KERNELS = {{{short_name(demangled)!r}: function}})")
        return SimFunction(name, implementation, layout)

    def launch(self, function: SimFunction, grid, block, params: bytes, shared_mem: int, stream: int) -> None:
        check_launch_configuration(self._properties, grid, block, shared_mem)
        if len(params) < function.layout.buffer_size:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"kernel {function.describe()}: {len(params)} bytes of parameters, "
                            f"its layout needs {function.layout.buffer_size}")
        launch = Launch(name=function.name, demangled=function.demangled, grid=grid, block=block,
                        shared_mem=shared_mem, stream=stream, device=self.index, params=params,
                        layout=function.layout, memory=self._memory)
        started = time.perf_counter()
        self._run(function, launch)
        self._model_gpu_time(function, launch, time.perf_counter() - started)

    def _run(self, function: SimFunction, launch: Launch) -> None:
        """Run the plugin; its exceptions become the CUDA errors a GPU gives."""
        kernel = function.describe()
        printed: list[str] = []
        try:
            with capture_device_output(printed):
                function.implementation.run(launch)
        except IllegalAddress as exc:
            log.warning("illegal address: %s", exc)
            raise CudaError(cudaError.cudaErrorIllegalAddress, str(exc)) from None
        except IndexError as exc:  # e.g. numpy indexing past the end of a view
            log.warning("kernel %s: illegal address (IndexError)", kernel, exc_info=True)
            raise CudaError(cudaError.cudaErrorIllegalAddress, f"kernel {kernel}: IndexError: {exc}") from None
        except AssertionError as exc:
            log.warning("kernel %s: device-side assert failed: %s", kernel, exc)
            raise CudaError(cudaError.cudaErrorAssert,
                            f"kernel {kernel}: device-side assert failed{': ' + str(exc) if str(exc) else ''}") \
                from None
        except (Exception, SystemExit) as exc:
            log.error("kernel %s (sim plugin %s) raised", kernel, function.implementation.source, exc_info=True)
            raise CudaError(cudaError.cudaErrorLaunchFailure,
                            f"kernel {kernel} raised {type(exc).__name__}: {exc}") from None
        finally:
            self._keep_output(printed)

    def _model_gpu_time(self, function: SimFunction, launch: Launch, elapsed: float) -> None:
        """COSTS: make the launch take the modelled GPU time.  The Python
        kernel's own run time counts towards it, so a launch takes about
        max(real, modelled) seconds."""
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
        if seconds > elapsed:
            time.sleep(seconds - elapsed)

    def synchronize(self) -> None:
        pass  # launches have already run, in this thread

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


@contextmanager
def capture_device_output(printed: list[str]):
    """Append to `printed` what this thread prints while inside the block."""
    with _install_lock:
        # Checked at every launch, not once: something (a test harness) may
        # have replaced sys.stdout since.
        if not isinstance(sys.stdout, _ThreadRoutedStdout):
            sys.stdout = _ThreadRoutedStdout(sys.stdout)
    _ThreadRoutedStdout._local.buffer = printed
    try:
        yield
    finally:
        _ThreadRoutedStdout._local.buffer = None


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
    }
