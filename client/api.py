"""CUDA runtime functions, implemented on the client.

One Python function per CUDA function, with CUDA's name and parameters
(cffi hands over pointers as cdata, numbers as ints).  Each returns a
cudaError_t or raises an RcudaError; client/entrypoints.py turns exceptions
into statuses, records the thread's last error and logs.  Functions not
defined here answer cudaErrorNotSupported (see `rcuda coverage`).

Where behaviour differs from a local GPU, the docstring says so.
"""
from __future__ import annotations

import logging

from rcuda import errors
from rcuda._generated.cudart_api import CUDART_VERSION, FUNCTIONS
from rcuda.errors import CudaError, cudaError

from .runtime import Runtime

log = logging.getLogger(__name__)

IMPLEMENTED: dict[str, callable] = {}

ffi = None  # set by bind(): the interposer's cffi FFI
lib = None
rt: Runtime = None  # the process's runtime state

SUCCESS = cudaError.cudaSuccess
FATBIN_WRAPPER_MAGIC = 0x466243B1

# cudaMemcpyKind
HOST_TO_HOST, HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, DEFAULT = range(5)


def bind(the_ffi, the_lib, runtime: Runtime) -> None:
    global ffi, lib, rt
    ffi, lib, rt = the_ffi, the_lib, runtime


def cuda(*names):
    """Register an implementation under its own name (and variants' names)."""

    def register(fn):
        for name in names or (fn.__name__,):
            if name not in FUNCTIONS:
                raise NameError(f"{name} is not a CUDA runtime export")
            IMPLEMENTED[name] = fn
        return fn

    return register


def address(pointer) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def out_pointer(pointer, what: str):
    if pointer == ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what} is NULL")
    return pointer


# ------------------------------------------------------------------ registration


@cuda()
def __cudaRegisterFatBinary(fatCubin):
    """Keep the fatbinary; the handle we return is a pointer we own."""
    words = ffi.cast("int *", fatCubin)
    if words[0] != FATBIN_WRAPPER_MAGIC:
        raise CudaError(cudaError.cudaErrorInvalidKernelImage,
                        f"fatbinary wrapper has magic {words[0] & 0xffffffff:#x}")
    data = ffi.cast("void **", fatCubin)[1]
    header = bytes(ffi.buffer(data, 16))
    from rcuda import fatbin
    size = fatbin.fatbin_size(header)
    handle = ffi.new("void *[1]")
    _handles.append(handle)  # the program keeps the pointer until exit
    rt.kernels.add_module(address(handle), bytes(ffi.buffer(data, size)))
    return handle


_handles: list = []


@cuda()
def __cudaRegisterFatBinaryEnd(fatCubinHandle):
    return None


@cuda()
def __cudaUnregisterFatBinary(fatCubinHandle):
    rt.kernels.remove_module(address(fatCubinHandle))


@cuda()
def __cudaRegisterFunction(fatCubinHandle, hostFun, deviceFun, deviceName, thread_limit, tid, bid,
                           bDim, gDim, wSize):
    rt.kernels.add_function(address(fatCubinHandle), address(hostFun), ffi.string(deviceFun).decode())


@cuda()
def __cudaRegisterVar(fatCubinHandle, hostVar, deviceAddress, deviceName, ext, size, constant, global_):
    """__device__ variables: recorded here; symbol copies are a later feature."""
    log.debug("__device__ variable %s (%d bytes) registered", ffi.string(deviceName).decode(), size)


@cuda()
def __cudaRegisterManagedVar(fatCubinHandle, hostVarPtrAddress, deviceAddress, deviceName, ext, size,
                             constant, global_):
    log.warning("__managed__ variable %s: managed memory is not supported by rcuda",
                ffi.string(deviceName).decode())


@cuda()
def __cudaInitModule(fatCubinHandle):
    return b"\x01"


# ------------------------------------------------------------------ launch


def _launch(host_fun, grid, block, args, shared_mem, stream) -> int:
    kernel = rt.kernels.kernel(address(host_fun))
    device = rt.device()
    grid_t, block_t = (grid.x, grid.y, grid.z), (block.x, block.y, block.z)
    device.check_launch_configuration(grid_t, block_t, shared_mem)
    fn = device.function_id(kernel)
    params = kernel.params.pack(ffi, args)
    device.launch(fn, grid_t, block_t, shared_mem, address(stream), params)
    return SUCCESS


@cuda("__cudaLaunchKernel", "__cudaLaunchKernel_ptsz")
def __cudaLaunchKernel(kernel, gridDim, blockDim, args, sharedMem, stream):
    return _launch(kernel, gridDim, blockDim, args, sharedMem, stream)


@cuda("cudaLaunchKernel", "cudaLaunchKernel_ptsz")
def cudaLaunchKernel(func, gridDim, blockDim, args, sharedMem, stream):
    return _launch(func, gridDim, blockDim, args, sharedMem, stream)


# ------------------------------------------------------------------ devices


@cuda()
def cudaGetDeviceCount(count):
    out_pointer(count, "count")
    try:
        count[0] = len(rt.devices)
    except errors.RcudaError:
        count[0] = 0
        raise
    return SUCCESS


@cuda()
def cudaSetDevice(device):
    rt.set_device(device)
    return SUCCESS


@cuda()
def cudaGetDevice(device):
    out_pointer(device, "device")
    rt.devices  # noqa: B018 - initialises, or fails as CUDA does without devices
    device[0] = rt.current_ordinal
    return SUCCESS


@cuda()
def cudaGetDeviceProperties(prop, device):
    out_pointer(prop, "prop")
    fill_struct(prop, rt.device(device).properties)
    return SUCCESS


def fill_struct(pointer, values: dict) -> None:
    """Set a cffi struct's fields from a dict, zeroing the rest.  Strings are
    stored NUL-terminated, bytes raw (e.g. the 16-byte uuid), lists into
    arrays.  Names this CUDA does not know are skipped: a newer server may
    send fields an older client lacks."""
    struct = pointer[0]
    size = ffi.sizeof(struct)
    ffi.memmove(pointer, bytes(size), size)
    fields = dict(ffi.typeof(struct).fields)
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            continue
        if isinstance(value, str):
            value = value.encode()[:ffi.sizeof(field.type) - 1]
        if isinstance(value, bytes):
            ffi.memmove(ffi.addressof(struct, name), value[:ffi.sizeof(field.type)],
                        min(len(value), ffi.sizeof(field.type)))
        elif isinstance(value, (list, tuple)):
            array = getattr(pointer, name)
            for i, item in enumerate(value[:len(array)]):
                array[i] = item
        else:
            setattr(pointer, name, value)


@cuda()
def cudaDeviceSynchronize():
    rt.device().synchronize()
    return SUCCESS


@cuda()
def cudaDriverGetVersion(driverVersion):
    out_pointer(driverVersion, "driverVersion")
    driverVersion[0] = CUDART_VERSION
    return SUCCESS


@cuda()
def cudaRuntimeGetVersion(runtimeVersion):
    out_pointer(runtimeVersion, "runtimeVersion")
    runtimeVersion[0] = CUDART_VERSION
    return SUCCESS


# ------------------------------------------------------------------ errors


@cuda()
def cudaGetLastError():
    return rt.take_last_error()


@cuda()
def cudaPeekAtLastError():
    return rt.peek_last_error()


_strings: dict = {}


def _c_string(text: str):
    cached = _strings.get(text)
    if cached is None:
        cached = _strings[text] = ffi.new("char[]", text.encode())
    return cached


@cuda()
def cudaGetErrorString(error):
    return _c_string(errors.error_string(error))


@cuda()
def cudaGetErrorName(error):
    return _c_string(errors.error_name(error))


# ------------------------------------------------------------------ memory


@cuda()
def cudaMalloc(devPtr, size):
    out_pointer(devPtr, "devPtr")
    device = rt.device()
    ptr = device.malloc(size)
    if ptr:
        rt.allocations.add(ptr, size, device)
    devPtr[0] = ffi.cast("void *", ptr)
    return SUCCESS


@cuda()
def cudaFree(devPtr):
    ptr = address(devPtr)
    if ptr == 0:
        rt.device()  # cudaFree(0) initialises the runtime, nothing more
        return SUCCESS
    allocation = rt.allocations.find(ptr)
    if allocation is None or allocation.base != ptr:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaFree of {ptr:#x}: not an allocation's start")
    allocation.device.free(ptr)
    rt.allocations.remove(ptr)
    return SUCCESS


@cuda()
def cudaMemGetInfo(free, total):
    out_pointer(free, "free")
    out_pointer(total, "total")
    free[0], total[0] = rt.device().mem_info()
    return SUCCESS


def _device_range(ptr: int, size: int, what: str):
    allocation = rt.allocations.find(ptr, size)
    if allocation is None:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{what} {ptr:#x}..+{size} is not inside a device allocation")
    return allocation.device


def _infer_kind(dst: int, src: int, count: int) -> int:
    """cudaMemcpyDefault: the allocation map says which side is device memory."""
    on_device_dst = rt.allocations.find(dst, count) is not None
    on_device_src = rt.allocations.find(src, count) is not None
    return {(False, False): HOST_TO_HOST, (True, False): HOST_TO_DEVICE,
            (False, True): DEVICE_TO_HOST, (True, True): DEVICE_TO_DEVICE}[(on_device_dst, on_device_src)]


def memcpy(dst: int, src: int, count: int, kind: int) -> None:
    if kind == DEFAULT:
        kind = _infer_kind(dst, src, count)
    if kind not in (HOST_TO_HOST, HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE):
        raise CudaError(cudaError.cudaErrorInvalidMemcpyDirection, f"cudaMemcpyKind {kind}")
    if count == 0:
        return
    if dst == 0 or src == 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaMemcpy with a NULL pointer")
    if kind == HOST_TO_HOST:
        ffi.memmove(ffi.cast("void *", dst), ffi.cast("void *", src), count)
    elif kind == HOST_TO_DEVICE:
        device = _device_range(dst, count, "destination")
        device.copy_to_device(dst, memoryview(ffi.buffer(ffi.cast("char *", src), count)))
    elif kind == DEVICE_TO_HOST:
        device = _device_range(src, count, "source")
        frames = device.copy_from_device(src, count)
        target = ffi.cast("char *", dst)
        for frame in frames:
            chunk = frame.buffer
            ffi.memmove(target, chunk, len(chunk))
            target += len(chunk)
    else:
        dst_device = _device_range(dst, count, "destination")
        src_device = _device_range(src, count, "source")
        if dst_device is src_device:
            dst_device.copy_on_device(dst, src, count)
        else:  # another GPU: server to server (client/peer.py), never through here
            rt.peer_copies.copy(dst_device, dst, src_device, src, count, synchronous=True, call="cudaMemcpy")


@cuda()
def cudaMemcpy(dst, src, count, kind):
    memcpy(address(dst), address(src), count, kind)
    return SUCCESS


@cuda()
def cudaMemset(devPtr, value, count):
    ptr = address(devPtr)
    if count:
        _device_range(ptr, count, "destination").memset(ptr, value, count)
    return SUCCESS


# ------------------------------------------------------------------ several GPUs
# Copies between GPUs go server to server (client/peer.py).  Direct load/store
# (peer access) exists only between GPUs of one server whose backend allows it.


def _peer_range(ptr: int, size: int, ordinal: int, what: str, call: str):
    device = rt.device(ordinal)
    allocation = rt.allocations.find(ptr, size)
    if allocation is None or allocation.device is not device:
        owner = f"it belongs to {allocation.device.label}" if allocation else "it is not inside a device allocation"
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: {what} {ptr:#x}..+{size} is not memory of {device.label}: {owner}")
    return device


def _memcpy_peer(dst, dstDevice, src, srcDevice, count, synchronous: bool, call: str) -> int:
    dst_ptr, src_ptr = address(dst), address(src)
    if count == 0:
        rt.device(dstDevice), rt.device(srcDevice)  # still validates the ordinals
        return SUCCESS
    dst_device = _peer_range(dst_ptr, count, dstDevice, "destination", call)
    src_device = _peer_range(src_ptr, count, srcDevice, "source", call)
    if dst_device is src_device:
        dst_device.copy_on_device(dst_ptr, src_ptr, count)  # TODO(streams): async on its stream
    else:
        rt.peer_copies.copy(dst_device, dst_ptr, src_device, src_ptr, count, synchronous=synchronous, call=call)
    return SUCCESS


@cuda()
def cudaMemcpyPeer(dst, dstDevice, src, srcDevice, count):
    return _memcpy_peer(dst, dstDevice, src, srcDevice, count, True, "cudaMemcpyPeer")


@cuda()
def cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream):
    """Posts the copy and returns; its errors surface at the destination
    GPU's next synchronising call.  The stream only orders the copy as the
    device's single queue does (TODO(streams): per-stream order)."""
    return _memcpy_peer(dst, dstDevice, src, srcDevice, count, False, "cudaMemcpyPeerAsync")


@cuda()
def cudaPointerGetAttributes(attributes, ptr):
    """Device memory: the GPU that owns it, from the allocation map (pointers
    never collide across devices).  Anything else is unregistered host memory,
    as CUDA reports it (TODO(pinned memory): cudaMemoryTypeHost)."""
    out_pointer(attributes, "attributes")
    rt.devices  # noqa: B018 - initialises, or fails as CUDA does without devices
    address_ = address(ptr)
    allocation = rt.allocations.find(address_) if address_ else None
    if allocation is not None:
        fill_struct(attributes, {"type": MEMORY_TYPE_DEVICE, "device": allocation.device.ordinal,
                                 "devicePointer": ffi.cast("void *", address_)})
    else:
        fill_struct(attributes, {"type": MEMORY_TYPE_UNREGISTERED, "device": INVALID_DEVICE_ID,
                                 "hostPointer": ffi.cast("void *", address_)})
    return SUCCESS


MEMORY_TYPE_UNREGISTERED, MEMORY_TYPE_DEVICE = 0, 2  # enum cudaMemoryType
INVALID_DEVICE_ID = -2  # cudaInvalidDeviceId


@cuda()
def cudaDeviceCanAccessPeer(canAccessPeer, device, peerDevice):
    out_pointer(canAccessPeer, "canAccessPeer")
    canAccessPeer[0] = int(rt.peer_copies.can_access(rt.device(device), rt.device(peerDevice)))
    return SUCCESS


@cuda()
def cudaDeviceEnablePeerAccess(peerDevice, flags):
    if flags != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDeviceEnablePeerAccess: flags must be 0, not {flags}")
    rt.peer_copies.enable(rt.device(), rt.device(peerDevice))
    return SUCCESS


@cuda()
def cudaDeviceDisablePeerAccess(peerDevice):
    rt.peer_copies.disable(rt.device(), rt.device(peerDevice))
    return SUCCESS


# ------------------------------------------------------------------ helpers


@cuda()
def cudaCreateChannelDesc(x, y, z, w, f):
    desc = ffi.new("struct cudaChannelFormatDesc *")
    desc.x, desc.y, desc.z, desc.w, desc.f = x, y, z, w, f
    return desc[0]
