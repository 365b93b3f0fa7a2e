"""cuFFT's multi-GPU calls (cufftXt*) on the GPUs of one server.

A plan given several GPUs with cufftXtSetGPUs is still made on its own GPU
(the one current at cufftCreate, which must be on the same server).  Its
data lives in the descriptors cufftXtMalloc makes: one allocation per GPU,
each holding a contiguous piece of the data in natural order (whole
transforms of a batch, else slabs of the first dimension, else equal runs
of a single 1-D transform).  An execution gathers the pieces into one
buffer on the plan's GPU (copies between the GPUs of one server stay on
the server), transforms it there and scatters the result into the output
descriptor's pieces; cufftXtMemcpy moves whole data between the program's
memory and a descriptor.  So every transform gives cuFFT's numbers, and a
kernel the program runs on each GPU's piece sees it in natural order.  That
order is where rcuda differs from cuFFT, which leaves a 2-D or 3-D forward
transform's output on the GPUs transposed (CUFFT_XT_FORMAT_INPLACE_SHUFFLED)
and a 1-D one permuted; data copied back with cufftXtMemcpy is the same.
The work is not split across the GPUs: a multi-GPU plan runs at the speed
of one.  Complex transforms (C2C, Z2Z) only, as cuFFT's multi-GPU 1-D ones.
"""
from __future__ import annotations

from rcuda.library_errors import LibraryError

from .. import interposer
from ..runtime import core as runtime_core
from . import cufft
from ..runtime import memory as runtime_memory
from .cufft import Plan, plan_of
from .registry import library

SUCCESS = 0
HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE = 0, 1, 2
CUDA_HOST_TO_DEVICE, CUDA_DEVICE_TO_HOST, CUDA_DEVICE_TO_DEVICE = 1, 2, 3
FORMAT_INPLACE = 2
LIB_FORMAT_CUFFT = 0
MAX_GPUS = 64
#: bytes per element of the complex types a multi-GPU plan takes
ELEMENT_BYTES = {"C2C": 8, "Z2Z": 16}

#: descriptor address -> (the cffi objects that keep it alive, its plan)
_descriptors: dict[int, tuple] = {}


def _multi(plan, call: str) -> Plan:
    obj = plan_of(plan, call)
    if not obj.gpus:
        raise LibraryError("CUFFT_INVALID_PLAN", f"{call}: plan {obj.handle} has no GPUs (cufftXtSetGPUs)")
    if obj.fft_type is None:
        raise LibraryError("CUFFT_INVALID_PLAN", f"{call}: plan {obj.handle} is not made")
    if cufft.TYPES[obj.fft_type] not in ELEMENT_BYTES:
        raise LibraryError("CUFFT_NOT_SUPPORTED", f"{call}: rcuda's multi-GPU plans are C2C or Z2Z, not "
                                                  f"{cufft.TYPES[obj.fft_type]}")
    return obj


@library()
def cufftXtSetGPUs(handle, nGPUs, whichGPUs):
    obj = plan_of(handle, "cufftXtSetGPUs")
    if obj.fft_type is not None:
        raise LibraryError("CUFFT_INVALID_PLAN", "cufftXtSetGPUs: the plan is made already")
    if not 1 <= nGPUs <= MAX_GPUS or whichGPUs == interposer.ffi.NULL:
        raise LibraryError("CUFFT_INVALID_VALUE", f"cufftXtSetGPUs: {nGPUs} GPUs")
    ordinals = [int(whichGPUs[i]) for i in range(nGPUs)]
    count = len(interposer.rt.devices)
    if len(set(ordinals)) != nGPUs or any(not 0 <= o < count for o in ordinals):
        raise LibraryError("CUFFT_INVALID_DEVICE", f"cufftXtSetGPUs: GPUs {ordinals} (the program has {count})")
    session = obj.device.session
    others = [o for o in ordinals if interposer.rt.device(o).session is not session]
    if others:
        raise LibraryError("CUFFT_INVALID_DEVICE", f"cufftXtSetGPUs: GPUs {others} are on another server than the "
                                                   f"plan's {obj.device.label}: a multi-GPU plan uses one server's")
    obj.gpus = ordinals
    return SUCCESS


def _pieces(obj: Plan) -> list[int]:
    """Bytes of the data on each of the plan's GPUs, in order."""
    layout = obj.layout
    sizes, batch = layout[1], layout[9]
    units, unit = (batch, 1) if batch > 1 else (sizes[0], 1)
    for size in (sizes if batch > 1 else sizes[1:]):
        unit *= size
    unit *= ELEMENT_BYTES[cufft.TYPES[obj.fft_type]]
    base, extra = divmod(units, len(obj.gpus))
    return [(base + (i < extra)) * unit for i in range(len(obj.gpus))]


@library()
def cufftXtMalloc(plan, descriptor, format):
    obj = _multi(plan, "cufftXtMalloc")
    if descriptor == interposer.ffi.NULL:
        raise LibraryError("CUFFT_INVALID_VALUE", "cufftXtMalloc: descriptor is NULL")
    xt = interposer.ffi.new("cudaXtDesc *")
    lib_desc = interposer.ffi.new("cudaLibXtDesc *")
    xt.version, xt.nGPUs = 1, len(obj.gpus)
    allocated = []
    try:
        for i, (ordinal, size) in enumerate(zip(obj.gpus, _pieces(obj))):
            ptr = runtime_memory.allocate(interposer.rt.device(ordinal), size)
            allocated.append(ptr)
            xt.GPUs[i], xt.data[i], xt.size[i] = ordinal, interposer.ffi.cast("void *", ptr), size
    except Exception:
        for ptr in allocated:
            runtime_core.IMPLEMENTED["cudaFree"](ptr)
        raise
    lib_desc.version, lib_desc.descriptor, lib_desc.library = 1, xt, LIB_FORMAT_CUFFT
    lib_desc.subFormat = format
    _descriptors[interposer.address(lib_desc)] = ((xt, lib_desc), obj)
    descriptor[0] = lib_desc
    return SUCCESS


def _descriptor(pointer, call: str):
    entry = _descriptors.get(interposer.address(pointer))
    if entry is None:
        raise LibraryError("CUFFT_INVALID_VALUE", f"{call}: {interposer.address(pointer):#x} is not a descriptor "
                                                  f"cufftXtMalloc made")
    (xt, lib_desc), _ = entry
    return xt, lib_desc


def _parts(xt) -> list[tuple[int, int, int]]:
    """(GPU, address, bytes) of each piece of a descriptor."""
    return [(xt.GPUs[i], interposer.address(xt.data[i]), xt.size[i]) for i in range(xt.nGPUs)]


@library()
def cufftXtFree(descriptor):
    xt, _ = _descriptor(descriptor, "cufftXtFree")
    for _, ptr, _ in _parts(xt):
        runtime_core.IMPLEMENTED["cudaFree"](ptr)
    del _descriptors[interposer.address(descriptor)]
    return SUCCESS


@library()
def cufftXtMemcpy(plan, dstPointer, srcPointer, type):
    _multi(plan, "cufftXtMemcpy")
    if type == HOST_TO_DEVICE:
        xt, lib_desc = _descriptor(dstPointer, "cufftXtMemcpy")
        offset = interposer.address(srcPointer)
        for _, ptr, size in _parts(xt):
            runtime_memory.memcpy(ptr, offset, size, CUDA_HOST_TO_DEVICE)
            offset += size
        lib_desc.subFormat = FORMAT_INPLACE
    elif type == DEVICE_TO_HOST:
        xt, _ = _descriptor(srcPointer, "cufftXtMemcpy")
        offset = interposer.address(dstPointer)
        for _, ptr, size in _parts(xt):
            runtime_memory.memcpy(offset, ptr, size, CUDA_DEVICE_TO_HOST)
            offset += size
    elif type == DEVICE_TO_DEVICE:
        (dst, dst_desc), (src, src_desc) = (_descriptor(dstPointer, "cufftXtMemcpy"),
                                            _descriptor(srcPointer, "cufftXtMemcpy"))
        for (dst_gpu, dst_ptr, size), (src_gpu, src_ptr, _) in zip(_parts(dst), _parts(src)):
            runtime_memory.cudaMemcpyPeer(dst_ptr, dst_gpu, src_ptr, src_gpu, size)
        dst_desc.subFormat = src_desc.subFormat
    else:
        raise LibraryError("CUFFT_INVALID_VALUE", f"cufftXtMemcpy: copy type {type}")
    return SUCCESS


def _staging(obj: Plan) -> int:
    """The plan's buffer on its own GPU for a whole transform's data."""
    if obj.staging is None:
        obj.staging = runtime_memory.allocate(obj.device, sum(_pieces(obj)))
    return obj.staging


def _execute(plan, input, output, direction, kind: str | None, call: str) -> int:
    obj = _multi(plan, call)
    plan_kind = cufft.TYPES[obj.fft_type]
    if kind is not None and kind != plan_kind:
        raise LibraryError("CUFFT_INVALID_TYPE", f"{call} on a {plan_kind} plan")
    if direction not in (cufft.FORWARD, cufft.INVERSE):
        raise LibraryError("CUFFT_INVALID_VALUE", f"{call}: direction {direction}")
    source, _ = _descriptor(input, call)
    target, target_desc = _descriptor(output, call)
    staging, home = _staging(obj), obj.device.ordinal
    offset = staging
    for gpu, ptr, size in _parts(source):
        runtime_memory.cudaMemcpyPeer(offset, home, ptr, gpu, size)
        offset += size
    obj.call(f"cufftExec{plan_kind}", [staging, staging, direction])
    runtime_core.IMPLEMENTED["cudaStreamSynchronize"](obj.stream_handle)  # the pieces are read after the transform
    offset = staging
    for gpu, ptr, size in _parts(target):
        runtime_memory.cudaMemcpyPeer(ptr, gpu, offset, home, size)
        offset += size
    target_desc.subFormat = FORMAT_INPLACE
    return SUCCESS


@library()
def cufftXtExecDescriptorC2C(plan, input, output, direction):
    return _execute(plan, input, output, direction, "C2C", "cufftXtExecDescriptorC2C")


@library()
def cufftXtExecDescriptorZ2Z(plan, input, output, direction):
    return _execute(plan, input, output, direction, "Z2Z", "cufftXtExecDescriptorZ2Z")


@library()
def cufftXtExecDescriptor(plan, input, output, direction):
    return _execute(plan, input, output, direction, None, "cufftXtExecDescriptor")


@library()
def cufftXtSetWorkArea(plan, workArea):
    """Each GPU's work area: the plan's own GPU's is the one it uses."""
    obj = plan_of(plan, "cufftXtSetWorkArea")
    gpus = obj.gpus or [obj.device.ordinal]
    if workArea == interposer.ffi.NULL:
        raise LibraryError("CUFFT_INVALID_VALUE", "cufftXtSetWorkArea: workArea is NULL")
    if obj.device.ordinal in gpus:
        obj.call("cufftSetWorkArea", [interposer.address(workArea[gpus.index(obj.device.ordinal)])])
    return SUCCESS
