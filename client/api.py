"""CUDA runtime functions, implemented on the client: the registry, and the
core (registration, launches, devices, errors, versions).

One Python function per CUDA function, with CUDA's name and parameters
(cffi hands over pointers as cdata, numbers as ints).  Each returns a
cudaError_t or raises an RcudaError; client/entrypoints.py turns exceptions
into statuses, records the thread's last error and logs.  The other groups
live beside this module (api_memory, api_streams, api_queries) and register
the same way; functions registered nowhere answer cudaErrorNotSupported
(see `rcuda coverage`).

Where behaviour differs from a local GPU, the docstring says so.
"""
from __future__ import annotations

import functools
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
PER_THREAD_SUFFIXES = ("_ptsz", "_ptds")


def bind(the_ffi, the_lib, runtime: Runtime) -> None:
    global ffi, lib, rt
    ffi, lib, rt = the_ffi, the_lib, runtime


def registrar(functions: dict, registry: dict, what: str):
    """The decorator that registers implementations of `functions`' names in
    `registry`: `cuda` for the runtime, client/api_driver.py's `driver`."""

    def decorator(*names, stream_variants: bool = False):
        """Register an implementation under its own name (or `names`).  With
        `stream_variants`, the `_ptsz`/`_ptds` entry points that programs built
        with `--default-stream per-thread` call are registered too, with
        per_thread=True: for them stream 0 is the thread's default stream."""

        def register(fn):
            for name in names or (fn.__name__,):
                if name not in functions:
                    raise NameError(f"{name} is not a {what}")
                registry[name] = fn
                if stream_variants:
                    variants = [name + s for s in PER_THREAD_SUFFIXES if name + s in functions]
                    if not variants:
                        raise NameError(f"{name} has no _ptsz/_ptds variant")
                    for variant in variants:
                        registry[variant] = functools.partial(fn, per_thread=True)
            return fn

        return register

    return decorator


cuda = registrar(FUNCTIONS, IMPLEMENTED, "CUDA runtime export")


def address(pointer) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def out_pointer(pointer, what: str):
    if pointer == ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what} is NULL")
    return pointer


def c_string(text: str):
    """A NUL-terminated C string that lives as long as the process (CUDA's
    name and error strings are static too)."""
    cached = rt.c_strings.get(text)
    if cached is None:
        cached = rt.c_strings[text] = ffi.new("char[]", text.encode())
    return cached


def stream_of(handle, per_thread: bool = False, device=None):
    """The Stream a program's cudaStream_t means (see client/streams.py)."""
    return rt.streams.resolve(address(handle), device or rt.device(), per_thread)


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
    rt.fatbin_handles.append(handle)  # the program keeps the pointer until exit
    rt.kernels.add_module(address(handle), bytes(ffi.buffer(data, size)))
    return handle


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
    """A __device__/__constant__ variable: its host shadow's address is what
    the program passes to cudaMemcpyToSymbol & co."""
    rt.kernels.add_variable(address(fatCubinHandle), address(hostVar), ffi.string(deviceName).decode(), size,
                            bool(constant))


@cuda()
def __cudaRegisterManagedVar(fatCubinHandle, hostVarPtrAddress, deviceAddress, deviceName, ext, size,
                             constant, global_):
    """A __managed__ variable: set up at the program's first touch of it
    (__cudaInitModule), which fills in the host pointer it goes through."""
    rt.kernels.add_managed_variable(address(fatCubinHandle), address(hostVarPtrAddress),
                                    ffi.string(deviceName).decode(), size)


@cuda()
def __cudaInitModule(fatCubinHandle):
    """Non-zero once the module's __managed__ variables can be touched by
    the host (0 makes native/registrations.c stop the program, saying why)."""
    module = rt.kernels.module(address(fatCubinHandle))
    for host_pointer_at, host in rt.managed.set_up_variables(rt, module):
        ffi.cast("void **", host_pointer_at)[0] = ffi.cast("void *", host)
    return b"\x01"


# ------------------------------------------------------------------ launch


def launch(host_fun, grid, block, args, shared_mem, stream_handle, per_thread: bool = False,
           cooperative: bool = False) -> int:
    """A kernel launch the C fast path (native/launch_fast_path.c) did not
    take: the first of a kernel on a device, an unknown stream, a
    configuration to refuse, a device in error; and every cooperative one.
    Once it succeeds, C knows enough to take the next plain ones itself."""
    host_fun = address(host_fun)
    kernel = rt.kernels.kernel(host_fun)
    device, fn = launch_kernel(kernel, (grid.x, grid.y, grid.z), (block.x, block.y, block.z), shared_mem,
                               stream_handle, lambda params: params.pack(ffi, args), per_thread, cooperative)
    rt.fast.kernel_ready(host_fun, kernel, device, fn, device.function_attributes(kernel))
    return SUCCESS


def launch_kernel(kernel, grid: tuple, block: tuple, shared_mem: int, stream_handle, pack, per_thread: bool,
                  cooperative: bool):
    """Launch `kernel` on the current device (the runtime's launches and the
    driver's): checks, its function id, `pack(kernel.params)` for the
    parameter buffer.  (the device, the function id)."""
    device = rt.device()
    stream = stream_of(stream_handle, per_thread, device)
    if stream.device is not device:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        f"launch on {device.label} into a stream of {stream.device.label}")
    device.check_launch_configuration(grid, block, shared_mem)
    fn = device.function_id(kernel)
    device.check_kernel_limits(kernel, block, shared_mem)
    if cooperative:
        device.check_cooperative_grid(kernel, grid, block, shared_mem)
    device.launch(fn, grid, block, shared_mem, stream.id, pack(kernel.params), cooperative)
    if device.mirrored:  # the kernel may write mapped memory (client/mapped_memory.py)
        rt.fast.mirror_written(device, stream.id)
    return device, fn


@cuda(stream_variants=True)
def cudaLaunchCooperativeKernel(func, gridDim, blockDim, args, sharedMem, stream, per_thread=False):
    """A launch whose blocks may synchronise with each other
    (cooperative_groups::this_grid().sync()): refused with
    cudaErrorCooperativeLaunchTooLarge unless every block can be resident at
    once.  The sim's plugin computes such a kernel whole."""
    return launch(func, gridDim, blockDim, args, sharedMem, stream, per_thread, cooperative=True)


#: cudaLaunchAttributes that change nothing rcuda can honour remotely and
#: that a GPU may equally ignore (hints); others are refused, but for
#: cudaLaunchAttributeCooperative.
IGNORED_LAUNCH_ATTRIBUTES = {"cudaLaunchAttributeIgnore", "cudaLaunchAttributeAccessPolicyWindow",
                             "cudaLaunchAttributePriority", "cudaLaunchAttributeMemSyncDomain",
                             "cudaLaunchAttributeMemSyncDomainMap", "cudaLaunchAttributeSynchronizationPolicy"}


@cuda(stream_variants=True)
def cudaLaunchKernelExC(config, func, args, per_thread=False):
    """cudaLaunchKernelEx: hints among the attributes are ignored, a
    cooperative one is honoured (cudaLaunchCooperativeKernel); cluster
    shapes and programmatic launches are not supported."""
    out_pointer(config, "config")
    cooperative = cooperative_attribute(config.attrs, config.numAttrs, "cudaLaunchKernelExC")
    return launch(func, config.gridDim, config.blockDim, args, config.dynamicSmemBytes, config.stream, per_thread,
                  cooperative)


def cooperative_attribute(attrs, count: int, what: str) -> bool:
    """Whether launch attributes (cudaLaunchAttribute *; the driver's
    CUlaunchAttribute has the same layout and numbers) ask for a cooperative
    launch; hints are ignored, others refused."""
    from rcuda._generated.cuda_enums import ENUMS
    names = {v: k for k, v in ENUMS["cudaLaunchAttributeID"].items()}
    cooperative = False
    if count and attrs == ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: {count} attributes at NULL")
    for i in range(count):
        name = names.get(attrs[i].id, f"attribute {attrs[i].id}")
        if name == "cudaLaunchAttributeCooperative":
            cooperative = bool(attrs[i].val.cooperative)
        elif name not in IGNORED_LAUNCH_ATTRIBUTES:
            raise CudaError(cudaError.cudaErrorNotSupported, f"{what}: {name} is not supported by rcuda")
    return cooperative


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
def cudaInitDevice(device, deviceFlags, flags):
    rt.device(device)
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
    synchronize_device(rt.device())
    return SUCCESS


def synchronize_device(device) -> None:
    """Wait for all of the device's work (cudaDeviceSynchronize, cuCtxSynchronize)."""
    device.synchronize()
    rt.pools.synchronized(device)  # frees seen complete, pool memory above its threshold released


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


# cudaGetLastError and cudaPeekAtLastError are answered in C while nothing
# has failed (native/last_error.c); otherwise client/entrypoints.py asks
# rt.take_last_error() / rt.peek_last_error().


@cuda()
def cudaGetErrorString(error):
    return c_string(errors.error_string(error))


@cuda()
def cudaGetErrorName(error):
    return c_string(errors.error_name(error))


@cuda()
def cudaCreateChannelDesc(x, y, z, w, f):
    desc = ffi.new("struct cudaChannelFormatDesc *")
    desc.x, desc.y, desc.z, desc.w, desc.f = x, y, z, w, f
    return desc[0]
