"""CUDA runtime functions, implemented on the client: the runtime's
registry, and its core (registration, launches, devices, errors, versions).

One Python function per CUDA function, with CUDA's name and parameters
(cffi hands over pointers as cdata, numbers as ints).  Each returns a
cudaError_t or raises an RcudaError; client/entrypoints.py turns exceptions
into statuses, records the thread's last error and logs.  The other groups
live beside this module (memory, streams, queries, pools, managed,
driver_access) and register the same way; functions registered nowhere
answer cudaErrorNotSupported (see `rcuda coverage`).

Where behaviour differs from a local GPU, the docstring says so.
"""
from __future__ import annotations

import logging

from rcuda import errors
from rcuda._generated.cuda_enums import ENUMS
from rcuda._generated.cudart_api import CUDART_VERSION, FUNCTIONS
from rcuda.errors import CudaError, cudaError

from .. import graphs, interposer
from ..capture import Recording
from ..driver.loading import kernel_on
from ..interposer import address, fill_struct, out_pointer, stream_of
from ..registry import registrar

log = logging.getLogger(__name__)

IMPLEMENTED: dict[str, callable] = {}

SUCCESS = cudaError.cudaSuccess
FATBIN_WRAPPER_MAGIC = 0x466243B1


cuda = registrar(FUNCTIONS, IMPLEMENTED, "CUDA runtime export")


# ------------------------------------------------------------------ registration


@cuda()
def __cudaRegisterFatBinary(fatCubin):
    """Keep the fatbinary; the handle we return is a pointer we own."""
    words = interposer.ffi.cast("int *", fatCubin)
    if words[0] != FATBIN_WRAPPER_MAGIC:
        raise CudaError(cudaError.cudaErrorInvalidKernelImage,
                        f"fatbinary wrapper has magic {words[0] & 0xffffffff:#x}")
    data = interposer.ffi.cast("void **", fatCubin)[1]
    header = bytes(interposer.ffi.buffer(data, 16))
    from rcuda import fatbin
    size = fatbin.fatbin_size(header)
    handle = interposer.ffi.new("void *[1]")
    interposer.rt.fatbin_handles.append(handle)  # the program keeps the pointer until exit
    # The fatbinary stays in the program's memory until it is unregistered: read when first needed.
    interposer.rt.kernels.add_module(address(handle), lambda: bytes(interposer.ffi.buffer(data, size)))
    return handle


@cuda()
def __cudaRegisterFatBinaryEnd(fatCubinHandle):
    return None


@cuda()
def __cudaUnregisterFatBinary(fatCubinHandle):
    interposer.rt.kernels.remove_module(address(fatCubinHandle))


@cuda()
def __cudaRegisterFunction(fatCubinHandle, hostFun, deviceFun, deviceName, thread_limit, tid, bid,
                           bDim, gDim, wSize):
    interposer.rt.kernels.add_function(address(fatCubinHandle), address(hostFun), interposer.ffi.string(deviceFun).decode())


@cuda()
def __cudaRegisterVar(fatCubinHandle, hostVar, deviceAddress, deviceName, ext, size, constant, global_):
    """A __device__/__constant__ variable: its host shadow's address is what
    the program passes to cudaMemcpyToSymbol & co."""
    interposer.rt.kernels.add_variable(address(fatCubinHandle), address(hostVar), interposer.ffi.string(deviceName).decode(), size,
                            bool(constant))


@cuda()
def __cudaRegisterManagedVar(fatCubinHandle, hostVarPtrAddress, deviceAddress, deviceName, ext, size,
                             constant, global_):
    """A __managed__ variable: set up at the program's first touch of it
    (__cudaInitModule), which fills in the host pointer it goes through."""
    interposer.rt.kernels.add_managed_variable(address(fatCubinHandle), address(hostVarPtrAddress),
                                    interposer.ffi.string(deviceName).decode(), size)


@cuda()
def __cudaInitModule(fatCubinHandle):
    """Non-zero once the module's __managed__ variables can be touched by
    the host (0 makes native/registrations.c stop the program, saying why)."""
    module = interposer.rt.kernels.module(address(fatCubinHandle))
    for host_pointer_at, host in interposer.rt.managed.set_up_variables(interposer.rt, module):
        interposer.ffi.cast("void **", host_pointer_at)[0] = interposer.ffi.cast("void *", host)
    return b"\x01"


# ------------------------------------------------------------------ launch


def launch(host_fun, grid, block, args, shared_mem, stream_handle, per_thread: bool = False,
           cooperative: bool = False, cluster=None) -> int:
    """A kernel launch the C fast path (native/launch_fast_path.c) did not
    take: the first of a kernel on a device, an unknown stream, a
    configuration to refuse, a device in error; and every cooperative or
    cluster one (`cluster`: the shape cudaLaunchKernelEx gives; a kernel
    with __cluster_dims__ is a cluster launch without).  Once it succeeds,
    C knows enough to take the next plain ones itself.  `host_fun` is a host
    stub or a library's cudaKernel_t (then C keys the kernel by that handle)."""
    host_fun = address(host_fun)
    kernel = kernel_on(host_fun, "cudaLaunchKernel")
    device, fn = launch_kernel(kernel, (grid.x, grid.y, grid.z), (block.x, block.y, block.z), shared_mem,
                               stream_handle, lambda params: params.pack(interposer.ffi, args), per_thread, cooperative,
                               cluster)
    device.fast_path_ready(host_fun, kernel, fn)
    return SUCCESS


def launch_kernel(kernel, grid: tuple, block: tuple, shared_mem: int, stream_handle, pack, per_thread: bool,
                  cooperative: bool, cluster=None):
    """Launch `kernel` on the current device (the runtime's launches and the
    driver's): checks, its function id, `pack(kernel.params)` for the
    parameter buffer.  (the device, the function id)."""
    device = interposer.rt.device()
    stream = stream_of(stream_handle, per_thread, device)
    if stream.device is not device:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        f"launch on {device.label} into a stream of {stream.device.label}")
    capture = interposer.rt.captures.of(stream)
    if capture is not None:  # a kernel node, not a launch (client/capture.py)
        fn, work = kernel_work(device, kernel, grid, block, shared_mem, pack(kernel.params), cooperative, cluster)
        capture.add(stream, graphs.KERNEL, kernel_node_params(kernel, grid, block, shared_mem, work), work)
        return device, fn
    fn = launch_on(device, stream, kernel, grid, block, shared_mem, pack(kernel.params), cooperative, cluster)
    return device, fn


def launch_on(device, stream, kernel, grid: tuple, block: tuple, shared_mem: int, params: bytes,
              cooperative: bool, cluster=None) -> int:
    """Check and send a launch of `kernel` into `stream` of `device`; its function id."""
    device.check_launch_configuration(grid, block, shared_mem)
    fn = device.function_id(kernel)
    device.check_kernel_limits(kernel, block, shared_mem)
    cluster = device.launch_cluster(kernel, grid, block, shared_mem, cluster)
    if cooperative:
        device.check_cooperative_grid(kernel, grid, block, shared_mem)
    interposer.rt.pinned.attach_for_launch(interposer.rt, device, params)  # page-locked memory it is passed
    device.launch(fn, grid, block, shared_mem, stream.id, params, cooperative, cluster)
    if device.mirrored:  # the kernel may write mapped memory (client/memory/mapped.py)
        interposer.rt.fast.mirror_written(device, stream.id)
    return fn


def kernel_work(device, kernel, grid: tuple, block: tuple, shared_mem: int, params: bytes, cooperative: bool,
                cluster=None):
    """A kernel node's work: its launch, checked as a launch is, recorded
    (client/capture.py's Recording).  (function id, graphs.Work)."""
    with Recording(device) as recording:
        fn = launch_on(device, recording.stream, kernel, grid, block, shared_mem, params, cooperative, cluster)
    return fn, recording.work()


def kernel_node_params(kernel, grid: tuple, block: tuple, shared_mem: int, work) -> dict:
    """What a kernel node's queries answer (cudaGraphKernelNodeGetParams)."""
    header, frames = work.requests[0]
    return {"kernel": kernel, "name": kernel.name, "grid": tuple(grid), "block": tuple(block),
            "shmem": shared_mem, "args": bytes(frames[0]), "cooperative": bool(header["cooperative"]),
            "cluster": header.get("cluster"), "attributes": {}}


@cuda(stream_variants=True)
def cudaLaunchCooperativeKernel(func, gridDim, blockDim, args, sharedMem, stream, per_thread=False):
    """A launch whose blocks may synchronise with each other
    (cooperative_groups::this_grid().sync()): refused with
    cudaErrorCooperativeLaunchTooLarge unless every block can be resident at
    once.  The sim's plugin computes such a kernel whole."""
    return launch(func, gridDim, blockDim, args, sharedMem, stream, per_thread, cooperative=True)


#: cudaLaunchAttributes that change nothing rcuda can honour remotely and
#: that a GPU may equally ignore (hints); others are refused, but for
#: cudaLaunchAttributeCooperative, cudaLaunchAttributeClusterDimension and
#: cudaLaunchAttributeClusterSchedulingPolicyPreference (a hint, checked).
IGNORED_LAUNCH_ATTRIBUTES = {"cudaLaunchAttributeIgnore", "cudaLaunchAttributeAccessPolicyWindow",
                             "cudaLaunchAttributePriority", "cudaLaunchAttributeMemSyncDomain",
                             "cudaLaunchAttributeMemSyncDomainMap", "cudaLaunchAttributeSynchronizationPolicy"}
CLUSTER_SCHEDULING_POLICIES = frozenset(ENUMS["cudaClusterSchedulingPolicy"].values())


@cuda(stream_variants=True)
def cudaLaunchKernelExC(config, func, args, per_thread=False):
    """cudaLaunchKernelEx: hints among the attributes are ignored, a
    cooperative one is honoured (cudaLaunchCooperativeKernel), a cluster
    shape too (a thread block cluster launch, checked as a GPU checks it:
    rcuda/launch_rules.py); programmatic launches are not supported."""
    out_pointer(config, "config")
    cooperative, cluster = launch_attributes(config.attrs, config.numAttrs, "cudaLaunchKernelExC")
    return launch(func, config.gridDim, config.blockDim, args, config.dynamicSmemBytes, config.stream, per_thread,
                  cooperative, cluster)


def launch_attributes(attrs, count: int, what: str) -> tuple[bool, tuple | None]:
    """(cooperative, cluster) from launch attributes (cudaLaunchAttribute *;
    the driver's CUlaunchAttribute has the same layout and numbers): whether
    the launch is cooperative, and its cluster shape (None: none given).
    Hints are ignored, others refused."""
    names = {v: k for k, v in ENUMS["cudaLaunchAttributeID"].items()}
    cooperative, cluster = False, None
    if count and attrs == interposer.ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: {count} attributes at NULL")
    for i in range(count):
        name = names.get(attrs[i].id, f"attribute {attrs[i].id}")
        if name == "cudaLaunchAttributeCooperative":
            cooperative = bool(attrs[i].val.cooperative)
        elif name == "cudaLaunchAttributeClusterDimension":
            dims = attrs[i].val.clusterDim
            cluster = (dims.x, dims.y, dims.z)
        elif name == "cudaLaunchAttributeClusterSchedulingPolicyPreference":
            if attrs[i].val.clusterSchedulingPolicyPreference not in CLUSTER_SCHEDULING_POLICIES:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{what}: cluster scheduling policy {attrs[i].val.clusterSchedulingPolicyPreference}")
        elif name not in IGNORED_LAUNCH_ATTRIBUTES:
            raise CudaError(cudaError.cudaErrorNotSupported, f"{what}: {name} is not supported by rcuda")
    return cooperative, cluster


# ------------------------------------------------------------------ devices


@cuda()
def cudaGetDeviceCount(count):
    out_pointer(count, "count")
    try:
        count[0] = len(interposer.rt.devices)
    except errors.RcudaError:
        count[0] = 0
        raise
    return SUCCESS


@cuda()
def cudaSetDevice(device):
    interposer.rt.set_device(device)
    return SUCCESS


@cuda()
def cudaInitDevice(device, deviceFlags, flags):
    interposer.rt.device(device)
    return SUCCESS


@cuda()
def cudaGetDevice(device):
    out_pointer(device, "device")
    interposer.rt.devices  # noqa: B018 - initialises, or fails as CUDA does without devices
    device[0] = interposer.rt.current_ordinal
    return SUCCESS


@cuda()
def cudaGetDeviceProperties(prop, device):
    out_pointer(prop, "prop")
    fill_struct(prop, interposer.rt.device(device).properties)
    return SUCCESS


@cuda()
def cudaDeviceSynchronize():
    synchronize_device(interposer.rt.device())
    return SUCCESS


def synchronize_device(device) -> None:
    """Wait for all of the device's work (cudaDeviceSynchronize, cuCtxSynchronize)."""
    device.synchronize()
    interposer.rt.pools.synchronized(device)  # frees seen complete, pool memory above its threshold released


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
# interposer.rt.take_last_error() / interposer.rt.peek_last_error().


@cuda()
def cudaCreateChannelDesc(x, y, z, w, f):
    desc = interposer.ffi.new("struct cudaChannelFormatDesc *")
    desc.x, desc.y, desc.z, desc.w, desc.f = x, y, z, w, f
    return desc[0]
