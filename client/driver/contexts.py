"""CUDA driver API: contexts (cuCtx*) and primary contexts (cuDevicePrimaryCtx*).

Contexts are client/driver/context_stacks.py's: the primary context of device d is the
runtime's device d, and the thread's current context decides the runtime's
current device.  The flags of a primary context are its device's
(cudaSetDeviceFlags and cuDevicePrimaryCtxSetFlags set the same bits).
"""
from __future__ import annotations

from rcuda._generated.cuda_enums import MACROS
from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..runtime import core as runtime_core
from ..runtime import queries as runtime_queries
from ..runtime import streams as runtime_streams
from ..interposer import out_pointer
from .registry import SUCCESS, driver, from_runtime, require_initialized
from .context_stacks import Context

#: CU_CTX_* flags: the same bits as the runtime's cudaDevice* flags.
SCHEDULES = {MACROS[n] for n in ("cudaDeviceScheduleAuto", "cudaDeviceScheduleSpin", "cudaDeviceScheduleYield",
                                 "cudaDeviceScheduleBlockingSync")}
SCHEDULE_MASK = MACROS["cudaDeviceScheduleMask"]
FLAGS_MASK = MACROS["cudaDeviceMask"]
#: What cuCtxGetApiVersion reports: the context ABI every driver since CUDA 3.2 has.
CONTEXT_API_VERSION = 3020
#: CUexecAffinityType: CU_EXEC_AFFINITY_TYPE_SM_COUNT (CU_EXEC_AFFINITY_TYPE_MAX is none).
EXEC_AFFINITY_TYPES = (0,)


def contexts():
    return interposer.rt.contexts


def current_context(call: str) -> Context:
    """The calling thread's current context; CUDA_ERROR_INVALID_CONTEXT without one."""
    require_initialized()
    context = contexts().current(call)
    if context is None:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT, f"{call}: no context is current in this thread "
                                                               "(cuCtxCreate, cuCtxSetCurrent or cudaSetDevice first)")
    return context


def context_or_current(handle, call: str) -> Context:
    """A CUcontext argument where NULL means the current context."""
    require_initialized()
    value = interposer.address(handle)
    return current_context(call) if value == 0 else contexts().get(value, call)


def cu_device(dev: int):
    """The RemoteDevice of a CUdevice (an ordinal); CUDA_ERROR_INVALID_DEVICE otherwise."""
    require_initialized()
    return interposer.rt.device(dev)


def context_flags(context: Context) -> int:
    return interposer.rt.device(context.ordinal).flags if context.primary else context.flags


def check_flags(flags: int, call: str) -> None:
    if flags & ~FLAGS_MASK or (flags & SCHEDULE_MASK) not in SCHEDULES:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE, f"{call}: flags {flags:#x} are not CU_CTX_* flags")


def handle_of(context: Context | None):
    return interposer.ffi.cast("CUcontext", context.handle if context else 0)


# ------------------------------------------------------------------ created contexts


def _create(pctx, flags: int, dev: int, call: str):
    out_pointer(pctx, "pctx")
    device = cu_device(dev)
    check_flags(flags, call)
    context = contexts().create(device.ordinal, flags)
    contexts().push(context)
    pctx[0] = handle_of(context)
    return SUCCESS


@driver("cuCtxCreate_v2", "cuCtxCreate")
def cuCtxCreate_v2(pctx, flags, dev):
    return _create(pctx, flags, dev, "cuCtxCreate")


@driver()
def cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev):
    if numParams:
        raise DriverError(CUresult.CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
                          "cuCtxCreate_v3: execution affinity (SM partitions) is not supported by rcuda")
    return _create(pctx, flags, dev, "cuCtxCreate_v3")


@driver()
def cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev):
    if ctxCreateParams != interposer.ffi.NULL:
        if ctxCreateParams.numExecAffinityParams:
            raise DriverError(CUresult.CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
                              "cuCtxCreate_v4: execution affinity (SM partitions) is not supported by rcuda")
        if ctxCreateParams.cigParams != interposer.ffi.NULL:
            raise DriverError(CUresult.CUDA_ERROR_NOT_SUPPORTED,
                              "cuCtxCreate_v4: CUDA in graphics (CIG) contexts are not supported by rcuda")
    return _create(pctx, flags, dev, "cuCtxCreate_v4")


@driver("cuCtxDestroy_v2", "cuCtxDestroy")
def cuCtxDestroy_v2(ctx):
    """Destroys the streams and events the driver made in it; popped if
    current here.  A primary context cannot be destroyed (CUDA says
    CUDA_ERROR_INVALID_CONTEXT)."""
    require_initialized()
    context = contexts().get(interposer.address(ctx), "cuCtxDestroy")
    if context.primary:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT,
                          "cuCtxDestroy: a primary context is released (cuDevicePrimaryCtxRelease), not destroyed")
    runtime_streams.destroy_all(contexts().destroy(context))
    return SUCCESS


@driver()
def cuCtxAttach(pctx, flags):
    """Deprecated since CUDA 4: the current context, its usage count one more."""
    require_initialized()
    out_pointer(pctx, "pctx")
    if flags:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE, f"cuCtxAttach: flags must be 0, not {flags}")
    context = contexts().current("cuCtxAttach")
    if context is None:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT, "cuCtxAttach: no context is current to this thread")
    context.attached += 1
    pctx[0] = handle_of(context)
    return SUCCESS


@driver()
def cuCtxDetach(ctx):
    """Deprecated since CUDA 4: the usage count of the current context one
    fewer; a created context goes (as cuCtxDestroy) when its creation's is
    the last.  A primary context stays."""
    require_initialized()
    context = contexts().get(interposer.address(ctx), "cuCtxDetach")
    if context is not contexts().current("cuCtxDetach"):
        raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT, "cuCtxDetach: the context must be current here")
    if context.attached:
        context.attached -= 1
    elif context.primary:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT,
                          "cuCtxDetach: a primary context not attached (cuCtxAttach) is released, not detached")
    else:
        runtime_streams.destroy_all(contexts().destroy(context))
    return SUCCESS


# ------------------------------------------------------------------ the current context


@driver("cuCtxPushCurrent_v2", "cuCtxPushCurrent")
def cuCtxPushCurrent_v2(ctx):
    require_initialized()
    contexts().push(contexts().get(interposer.address(ctx), "cuCtxPushCurrent"))
    return SUCCESS


@driver("cuCtxPopCurrent_v2", "cuCtxPopCurrent")
def cuCtxPopCurrent_v2(pctx):
    current_context("cuCtxPopCurrent")
    popped = contexts().pop()
    if pctx != interposer.ffi.NULL:
        pctx[0] = handle_of(popped)
    return SUCCESS


@driver()
def cuCtxSetCurrent(ctx):
    """Replaces the top of the thread's stack (NULL pops it): the context's
    device becomes the runtime's current device too."""
    require_initialized()
    value = interposer.address(ctx)
    contexts().set_current(contexts().get(value, "cuCtxSetCurrent") if value else None)
    return SUCCESS


@driver()
def cuCtxGetCurrent(pctx):
    require_initialized()
    out_pointer(pctx, "pctx")
    pctx[0] = handle_of(contexts().current("cuCtxGetCurrent"))
    return SUCCESS


@driver()
def cuCtxGetDevice(device):
    return cuCtxGetDevice_v2(device, interposer.ffi.NULL)


@driver()
def cuCtxGetDevice_v2(device, ctx):
    out_pointer(device, "device")
    device[0] = context_or_current(ctx, "cuCtxGetDevice").ordinal
    return SUCCESS


@driver()
def cuCtxSynchronize():
    return cuCtxSynchronize_v2(interposer.ffi.NULL)


@driver()
def cuCtxSynchronize_v2(ctx):
    """All of the device's work: a created context shares its device's
    queues, so it waits for the primary context's work too."""
    runtime_core.synchronize_device(interposer.rt.device(context_or_current(ctx, "cuCtxSynchronize").ordinal))
    return SUCCESS


@driver()
def cuCtxGetApiVersion(ctx, version):
    out_pointer(version, "version")
    context_or_current(ctx, "cuCtxGetApiVersion")
    version[0] = CONTEXT_API_VERSION
    return SUCCESS


@driver()
def cuCtxGetId(ctx, ctxId):
    out_pointer(ctxId, "ctxId")
    ctxId[0] = context_or_current(ctx, "cuCtxGetId").id
    return SUCCESS


@driver()
def cuCtxGetFlags(flags):
    out_pointer(flags, "flags")
    flags[0] = context_flags(current_context("cuCtxGetFlags"))
    return SUCCESS


@driver()
def cuCtxSetFlags(flags):
    context = current_context("cuCtxSetFlags")
    check_flags(flags, "cuCtxSetFlags")
    if context.primary:
        interposer.rt.device(context.ordinal).flags = flags
    else:
        context.flags = flags
    return SUCCESS


@driver()
def cuCtxGetLimit(pvalue, limit):
    """The runtime's limits (CUlimit and cudaLimit number them alike), per process as in CUDA."""
    current_context("cuCtxGetLimit")
    return runtime_queries.cudaDeviceGetLimit(pvalue, limit)


@driver()
def cuCtxSetLimit(limit, value):
    current_context("cuCtxSetLimit")
    return runtime_queries.cudaDeviceSetLimit(limit, value)


@driver()
def cuCtxGetStreamPriorityRange(leastPriority, greatestPriority):
    current_context("cuCtxGetStreamPriorityRange")
    return runtime_streams.cudaDeviceGetStreamPriorityRange(leastPriority, greatestPriority)


@driver()
def cuCtxGetCacheConfig(pconfig):
    """The context's preference (CUfunc_cache numbers cudaFuncCache's
    values): a primary context's is its device's (cudaDeviceGetCacheConfig),
    a created context keeps its own."""
    out_pointer(pconfig, "pconfig")
    context = current_context("cuCtxGetCacheConfig")
    pconfig[0] = runtime_queries.device_cache_config(context.ordinal) if context.primary else context.cache_config
    return SUCCESS


@driver()
def cuCtxSetCacheConfig(config):
    """A preference CUDA may ignore: checked and remembered, not applied."""
    context = current_context("cuCtxSetCacheConfig")
    if context.primary:
        runtime_queries.set_device_cache_config(context.ordinal, config, "cuCtxSetCacheConfig")
    else:
        context.cache_config = runtime_queries.check_cache_config(config, "cuCtxSetCacheConfig")
    return SUCCESS


@driver()
def cuCtxGetSharedMemConfig(pConfig):
    """The fixed bank size of every device rcuda serves (four bytes):
    cudaDeviceGetSharedMemConfig's answer (deprecated, kept)."""
    current_context("cuCtxGetSharedMemConfig")
    return from_runtime(runtime_queries.cudaDeviceGetSharedMemConfig(pConfig))


@driver()
def cuCtxSetSharedMemConfig(config):
    """Checked; does nothing where the bank size is fixed, as in CUDA."""
    current_context("cuCtxSetSharedMemConfig")
    return from_runtime(runtime_queries.cudaDeviceSetSharedMemConfig(config))


@driver()
def cuCtxResetPersistingL2Cache():
    """cudaCtxResetPersistingL2Cache on the current context's device."""
    current_context("cuCtxResetPersistingL2Cache")
    return from_runtime(runtime_queries.cudaCtxResetPersistingL2Cache())


@driver()
def cuCtxGetExecAffinity(pExecAffinity, type_):
    """No context has an execution affinity (no device supports one:
    cuDeviceGetExecAffinitySupport reads 0), so a valid type answers
    CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, returned without a log line."""
    out_pointer(pExecAffinity, "pExecAffinity")
    current_context("cuCtxGetExecAffinity")
    check_exec_affinity_type(type_, "cuCtxGetExecAffinity")
    return CUresult.CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY


def check_exec_affinity_type(type_: int, call: str) -> None:
    if type_ not in EXEC_AFFINITY_TYPES:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {type_} is not a CUexecAffinityType")


# ------------------------------------------------------------------ a context's work as a whole


def _event(hEvent):
    require_initialized()
    return interposer.rt.streams.event(interposer.address(hEvent))


@driver()
def cuCtxRecordEvent(hCtx, hEvent):
    """`hEvent` completes when all the work sent to the context's device
    so far has: a created context shares its device's streams (see
    cuCtxSynchronize), so that is its work too.  The event must be the
    context's (CUDA_ERROR_INVALID_HANDLE otherwise)."""
    context = context_or_current(hCtx, "cuCtxRecordEvent")
    event = _event(hEvent)
    if contexts().owner(event.handle, event.device.ordinal) is not context:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,  # CUDA_ERROR_INVALID_HANDLE
                        f"cuCtxRecordEvent: the event belongs to another context than {context.handle:#x}")
    runtime_streams.record_device_work(event, interposer.rt.device(context.ordinal), "cuCtxRecordEvent")
    return SUCCESS


@driver()
def cuCtxWaitEvent(hCtx, hEvent):
    """All work sent to the context's device from now on, in any stream
    (streams made later too), waits for the event's work; the event may
    be another context's or device's."""
    context = context_or_current(hCtx, "cuCtxWaitEvent")
    event = _event(hEvent)
    runtime_streams.wait_device(interposer.rt.device(context.ordinal), event, "cuCtxWaitEvent")
    return SUCCESS


# ------------------------------------------------------------------ primary contexts


@driver()
def cuDevicePrimaryCtxRetain(pctx, dev):
    """The primary context's handle (the runtime's device `dev`); not made current."""
    out_pointer(pctx, "pctx")
    context = contexts().primary(cu_device(dev).ordinal)
    context.retained += 1
    pctx[0] = handle_of(context)
    return SUCCESS


@driver("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")
def cuDevicePrimaryCtxRelease_v2(dev):
    """One retain fewer.  The device's memory stays: the runtime's device is
    the same context, and the runtime never releases it."""
    context = contexts().primary(cu_device(dev).ordinal)
    if context.retained <= 0:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT,
                          f"cuDevicePrimaryCtxRelease: device {dev}'s primary context is not retained")
    context.retained -= 1
    return SUCCESS


@driver("cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset")
def cuDevicePrimaryCtxReset_v2(dev):
    """cudaDeviceReset of the device: everything the process had on it is freed."""
    interposer.rt.reset_device(cu_device(dev))
    return SUCCESS


@driver()
def cuDevicePrimaryCtxGetState(dev, flags, active):
    out_pointer(flags, "flags")
    out_pointer(active, "active")
    device = cu_device(dev)
    context = contexts().primary(device.ordinal)
    flags[0] = device.flags
    active[0] = int(context.retained > 0 or context.used)
    return SUCCESS


@driver("cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxSetFlags")
def cuDevicePrimaryCtxSetFlags_v2(dev, flags):
    device = cu_device(dev)
    check_flags(flags, "cuDevicePrimaryCtxSetFlags")
    device.flags = flags
    return SUCCESS


# ------------------------------------------------------------------ profiler


@driver()
def cuProfilerStart():
    """The runtime's cudaProfilerStart: not forwarded to the server (a
    profiler there sees the server's processes whole); needs a current
    context, as in CUDA."""
    current_context("cuProfilerStart")
    return from_runtime(runtime_queries.cudaProfilerStart())


@driver()
def cuProfilerStop():
    current_context("cuProfilerStop")
    return from_runtime(runtime_queries.cudaProfilerStop())


@driver()
def cuProfilerInitialize(configFile, outputFile, outputMode):
    """Deprecated: since CUDA 12.0 it always returns CUDA_ERROR_NOT_SUPPORTED
    (cudaProfiler.h), before cuInit too: what it answers here, without a log line."""
    return CUresult.CUDA_ERROR_NOT_SUPPORTED
