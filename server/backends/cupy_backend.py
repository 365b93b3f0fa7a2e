"""The cupy backend: real GPUs, through CuPy's bindings of the CUDA runtime
(`cupy.cuda.runtime`) and driver (`cupy.cuda.driver`) APIs.

Memory is plain cudaMalloc memory (not CuPy's memory pool), modules are the
programs' own fatbinaries loaded with cuModuleLoadData, and a launch passes
the client's packed parameter buffer unchanged (cuLaunchKernel's `extra`).
CuPy is imported when a backend is created, so this module imports on
machines without it.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging

import numpy as np

from rcuda.errors import CudaError, cudaError

from .base import Allocation, AllocationTable, Backend, Device, ParamLayout, check_launch_configuration

log = logging.getLogger(__name__)

# cuda.h: the `extra` argument of cuLaunchKernel.
CU_LAUNCH_PARAM_END = 0x00
CU_LAUNCH_PARAM_BUFFER_POINTER = 0x01
CU_LAUNCH_PARAM_BUFFER_SIZE = 0x02

CUDA_ERROR_NOT_FOUND = 500

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


def runtime_status(code: int) -> cudaError:
    try:
        return cudaError(int(code))
    except ValueError:
        return cudaError.cudaErrorUnknown


def driver_status(code: int) -> cudaError:
    """The cudaError_t for a CUresult.  CUDA gives the driver and runtime codes
    the same numbers where they mean the same (CUDA_ERROR_ILLEGAL_ADDRESS and
    cudaErrorIllegalAddress are both 700, OUT_OF_MEMORY and MemoryAllocation
    both 2, NO_BINARY_FOR_GPU and NoKernelImageForDevice both 209, ...)."""
    return runtime_status(code)


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

    def open_device(self, index: int, va_base: int | None = None) -> CupyDevice:
        if not 0 <= index < self.devices:
            raise CudaError(cudaError.cudaErrorInvalidDevice, f"GPU {index} is not served here "
                                                              f"(this server has {self.devices})")
        # TODO: place allocations in [va_base, va_base + VA_WINDOW_SIZE) with the
        # driver's virtual memory management (cuMemAddressReserve with the window
        # as address hint, cuMemCreate, cuMemMap, cuMemSetAccess; CuPy binds none
        # of them, so through ctypes on libcuda.so.1).  Until then va_base is
        # ignored: pointers are unique among this server's GPUs (unified
        # addressing) but may collide with another server's.
        return CupyDevice(self._runtime, self._driver, index, self.memory_bytes)


class CupyFunction:
    def __init__(self, handle: int, name: str, layout: ParamLayout):
        self.handle = handle  # CUfunction
        self.name = name
        self.layout = layout


class CupyDevice(Device):
    def __init__(self, runtime, driver, index: int, memory_limit: int | None):
        self.index = index
        self._runtime = runtime
        self._driver = driver
        self._memory = AllocationTable()
        self._modules: dict[str, int] = {}  # module key -> CUmodule
        self._properties = self._read_properties(memory_limit)
        self._total = self._properties["totalGlobalMem"]

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
        if memory_limit:
            props["totalGlobalMem"] = min(props["totalGlobalMem"], memory_limit)
        return props

    def properties(self) -> dict:
        return dict(self._properties)

    def mem_get_info(self) -> tuple[int, int]:
        with self._cuda("cudaMemGetInfo"):
            free, total = self._runtime.memGetInfo()
        if self._total < total:  # --memory-limit: report the limit and what is left of it
            return max(0, min(free, self._total - self._memory.bytes_in_use)), self._total
        return free, total

    # ---------------------------------------------------------- memory

    def malloc(self, size: int) -> int:
        if size < 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMalloc of {size} bytes")
        if size == 0:
            return 0  # what cudaMalloc does: success, and a NULL pointer
        if self._memory.bytes_in_use + size > self._total:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cudaMalloc of {size} bytes: the session already uses {self._memory.bytes_in_use} "
                            f"of the {self._total} bytes this server allows per GPU")
        with self._cuda(f"cudaMalloc of {size} bytes"):
            ptr = self._runtime.malloc(size)
        self._memory.add(Allocation(ptr, size))
        return ptr

    def free(self, ptr: int) -> None:
        if ptr == 0:
            return  # cudaFree(NULL) does nothing
        self._memory.remove(ptr)
        with self._cuda(f"cudaFree({ptr:#x})"):
            self._runtime.free(ptr)

    def memcpy_htod(self, dst: int, data: memoryview) -> None:
        host = np.frombuffer(data, np.uint8)
        if host.size:
            self._memory.require(dst, host.size, "cudaMemcpy to device")
            with self._cuda("cudaMemcpy host to device"):
                self._runtime.memcpy(dst, host.ctypes.data, host.size, self._runtime.memcpyHostToDevice)

    def memcpy_dtoh(self, src: int, size: int) -> memoryview:
        host = np.empty(size, np.uint8)
        if size:
            self._memory.require(src, size, "cudaMemcpy from device")
            with self._cuda("cudaMemcpy device to host"):
                self._runtime.memcpy(host.ctypes.data, src, size, self._runtime.memcpyDeviceToHost)
        return memoryview(host)

    def memcpy_dtod(self, dst: int, src: int, size: int) -> None:
        if size:
            self._memory.require(src, size, "cudaMemcpy device to device (source)")
            self._memory.require(dst, size, "cudaMemcpy device to device (destination)")
            with self._cuda("cudaMemcpy device to device"):
                self._runtime.memcpy(dst, src, size, self._runtime.memcpyDeviceToDevice)

    def memset(self, ptr: int, value: int, size: int) -> None:
        if size:
            self._memory.require(ptr, size, "cudaMemset")
            with self._cuda("cudaMemset"):
                self._runtime.memset(ptr, value & 0xFF, size)

    # ---------------------------------------------------------- kernels

    def load_module(self, key: str, image: bytes) -> None:
        # The driver takes a whole fatbinary and picks the cubin for this GPU,
        # or JIT-compiles the PTX when no cubin fits.
        with self._cuda(f"loading module {key}"):
            self._modules[key] = self._driver.moduleLoadData(bytes(image))

    def get_function(self, module_key: str, name: str, layout: ParamLayout) -> CupyFunction:
        module = self._modules.get(module_key)
        if module is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"module {module_key} is not loaded")
        with self._cuda(f"kernel {name} (not in its module?)", not_found=cudaError.cudaErrorInvalidDeviceFunction):
            handle = self._driver.moduleGetFunction(module, name)
        return CupyFunction(handle, name, layout)

    def launch(self, function: CupyFunction, grid, block, params: bytes, shared_mem: int, stream: int) -> None:
        check_launch_configuration(self._properties, grid, block, shared_mem)
        params = bytes(params)
        # ctypes objects that must live until cuLaunchKernel returns (it copies
        # the parameters before returning).
        buffer = ctypes.create_string_buffer(params, len(params))
        size = ctypes.c_size_t(len(params))
        extra = (ctypes.c_void_p * 5)(CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buffer),
                                      CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size), CU_LAUNCH_PARAM_END)
        extra_pointer = ctypes.addressof(extra) if params else 0  # no parameters: nothing to pass
        # TODO: server-side streams; until the protocol creates them, every
        # launch goes to the legacy default stream, which keeps the order of
        # all operations of the session on this GPU.
        # TODO: dynamic shared memory above 48 KiB needs
        # cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES), i.e. a forwarded
        # cudaFuncSetAttribute.
        with self._cuda(f"launch of kernel {function.name}"):
            self._driver.launchKernel(function.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                      shared_mem, 0, 0, extra_pointer)

    def synchronize(self) -> None:
        with self._cuda("cudaDeviceSynchronize"):
            self._runtime.deviceSynchronize()

    def can_access_peer(self, peer: int) -> bool:
        try:
            return bool(self._runtime.deviceCanAccessPeer(self.index, peer))
        except self._runtime.CUDARuntimeError:
            return False

    def set_peer_access(self, peer: int, enable: bool) -> None:
        if enable:
            with self._cuda(f"cudaDeviceEnablePeerAccess({peer})"):
                self._runtime.deviceEnablePeerAccess(peer)
        else:
            with self._cuda(f"cudaDeviceDisablePeerAccess({peer})"):
                self._runtime.deviceDisablePeerAccess(peer)

    # Device printf on a real GPU is written by the driver to this process's
    # stdout (fd 1) at synchronisation, so take_output keeps the base class's
    # "" (the worker may later capture fd 1 to forward it).

    def close(self) -> None:
        """Free what the session left allocated; failures (e.g. after a sticky
        error, when the context refuses everything) are logged, not raised."""
        for allocation in self._memory.clear():
            try:
                with self._cuda(f"cudaFree({allocation.start:#x})"):
                    self._runtime.free(allocation.start)
            except CudaError as exc:
                log.debug("GPU %d: %s", self.index, exc)
        for key, module in self._modules.items():
            try:
                with self._cuda(f"unloading module {key}"):
                    self._driver.moduleUnload(module)
            except CudaError as exc:
                log.debug("GPU %d: %s", self.index, exc)
        self._modules.clear()


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
