"""CUDA driver API: pointer attributes (cuPointerGetAttribute, cuPointerGetAttributes).

Answered from the process's maps (client/memory/pointers.py), as the runtime's
cudaPointerGetAttributes is.  Device memory's context is its device's
primary context (memory belongs to the device whichever context allocated
it, client/driver/context_stacks.py).  Managed memory reads CU_MEMORYTYPE_DEVICE with
IS_MANAGED set, as on a GPU.  What rcuda cannot tell (P2P tokens, buffer
and memory block ids, the memory pool) answers CUDA_ERROR_NOT_SUPPORTED.
"""
from __future__ import annotations

from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..memory import pointers
from ..interposer import out_pointer
from .registry import SUCCESS, driver, require_initialized
from .contexts import contexts, handle_of

#: CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE (cuda.h's CUpointer_attribute_access_flags).
ACCESS_READ_WRITE = 3
#: C type of each attribute's answer (cuda.h's "The type of data must be ..."; booleans are bool).
ATTRIBUTE_TYPES = {
    "CONTEXT": "CUcontext", "MEMORY_TYPE": "unsigned int", "DEVICE_POINTER": "CUdeviceptr",
    "HOST_POINTER": "void *", "SYNC_MEMOPS": "bool", "IS_MANAGED": "bool", "DEVICE_ORDINAL": "int",
    "IS_LEGACY_CUDA_IPC_CAPABLE": "bool", "RANGE_START_ADDR": "CUdeviceptr", "RANGE_SIZE": "size_t",
    "MAPPED": "bool", "ALLOWED_HANDLE_TYPES": "unsigned long long", "IS_GPU_DIRECT_RDMA_CAPABLE": "bool",
    "ACCESS_FLAGS": "unsigned int", "MAPPING_SIZE": "size_t", "MAPPING_BASE_ADDR": "void *",
    "IS_HW_DECOMPRESS_CAPABLE": "bool",
}
POINTER_TYPES = ("CUcontext", "void *")
PREFIX = "CU_POINTER_ATTRIBUTE_"


def _attribute_name(attribute: int, call: str) -> str:
    name = interposer.ffi.typeof("CUpointer_attribute").elements.get(attribute)
    if name is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {attribute} is not a CUpointer_attribute")
    name = name[len(PREFIX):]
    if name not in ATTRIBUTE_TYPES:
        raise DriverError(CUresult.CUDA_ERROR_NOT_SUPPORTED, f"{call}: rcuda cannot answer {PREFIX}{name}")
    return name


def _value(info: pointers.PointerInfo, name: str):
    """The attribute's value for a pointer rcuda knows; None when the pointer
    has none (no host address for device memory, say)."""
    ordinal = info.device.ordinal if info.device is not None else interposer.rt.current_ordinal
    values = {
        "CONTEXT": handle_of(contexts().primary(ordinal)),
        "MEMORY_TYPE": interposer.lib.CU_MEMORYTYPE_HOST if info.kind == "host" else interposer.lib.CU_MEMORYTYPE_DEVICE,
        "DEVICE_POINTER": info.device_ptr or None,
        "HOST_POINTER": info.host or None,
        "SYNC_MEMOPS": True,  # rcuda's synchronous copies always synchronise
        "IS_MANAGED": info.kind == "managed",
        "DEVICE_ORDINAL": ordinal,
        "IS_LEGACY_CUDA_IPC_CAPABLE": False,
        "RANGE_START_ADDR": info.start, "RANGE_SIZE": info.size,
        "MAPPED": True,
        "ALLOWED_HANDLE_TYPES": 0,  # CU_MEM_HANDLE_TYPE_NONE: nothing is shareable between processes
        "IS_GPU_DIRECT_RDMA_CAPABLE": False,
        "ACCESS_FLAGS": ACCESS_READ_WRITE,
        "MAPPING_SIZE": info.size, "MAPPING_BASE_ADDR": info.start,
        "IS_HW_DECOMPRESS_CAPABLE": False,
    }
    return values[name]


def _write(data, name: str, value) -> None:
    c_type = ATTRIBUTE_TYPES[name]
    target = interposer.ffi.cast(c_type + " *", data)
    target[0] = interposer.ffi.cast(c_type, value) if c_type in POINTER_TYPES else value


@driver()
def cuPointerGetAttribute(data, attribute, ptr):
    """CUDA_ERROR_INVALID_VALUE for a pointer rcuda did not hand out or
    register, or an attribute the pointer has no value for."""
    require_initialized()
    out_pointer(data, "data")
    name = _attribute_name(attribute, "cuPointerGetAttribute")
    info = pointers.describe(interposer.rt, int(ptr))
    if info.kind == "unknown":
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuPointerGetAttribute: {int(ptr):#x} is not memory "
                                                         "allocated, mapped or registered through CUDA")
    value = _value(info, name)
    if value is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuPointerGetAttribute: {int(ptr):#x} has no {PREFIX}{name}")
    _write(data, name, value)
    return SUCCESS


@driver()
def cuPointerGetAttributes(numAttributes, attributes, data, ptr):
    """Unlike cuPointerGetAttribute, an unknown pointer is no error: every
    answer is zero (NULL, false) then, as is an attribute the pointer has no
    value for."""
    require_initialized()
    if numAttributes and (attributes == interposer.ffi.NULL or data == interposer.ffi.NULL):
        raise CudaError(cudaError.cudaErrorInvalidValue, "cuPointerGetAttributes: attributes or data is NULL")
    info = pointers.describe(interposer.rt, int(ptr))
    for i in range(numAttributes):
        name = _attribute_name(attributes[i], "cuPointerGetAttributes")
        value = None if info.kind == "unknown" else _value(info, name)
        _write(data[i], name, value if value is not None else 0)
    return SUCCESS


@driver()
def cuPointerSetAttribute(value, attribute, ptr):
    """Only CU_POINTER_ATTRIBUTE_SYNC_MEMOPS may be set, as in CUDA (any other
    attribute is CUDA_ERROR_INVALID_VALUE).  rcuda's synchronous memory
    operations always synchronise, so the value is checked and changes
    nothing: SYNC_MEMOPS reads 1 even after it is set to 0."""
    require_initialized()
    out_pointer(value, "value")
    if attribute != interposer.lib.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"cuPointerSetAttribute: only {PREFIX}SYNC_MEMOPS can be set, not attribute {attribute}")
    if pointers.describe(interposer.rt, int(ptr)).kind == "unknown":
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuPointerSetAttribute: {int(ptr):#x} is not memory "
                                                         "allocated, mapped or registered through CUDA")
    return SUCCESS
