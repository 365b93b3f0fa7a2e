"""CUDA runtime functions: CUDA arrays and mipmapped arrays, channel formats.

An array lives on the current device's server (array_create); the program
gets a handle chosen here (client/memory/arrays.py).  Copies to and from
arrays are boxes (client/runtime/boxes.py); texture and surface objects over
them are in client/runtime/textures.py.
"""
from __future__ import annotations

from rcuda import array_rules
from rcuda._generated.cuda_enums import ENUMS
from rcuda.array_rules import CUBEMAP, KNOWN_FLAGS, LAYERED
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..memory.arrays import CudaArray
from .core import SUCCESS, cuda
from ..interposer import address, out_pointer

KIND = ENUMS["cudaChannelFormatKind"]
KIND_NAMES = {number: name for name, number in KIND.items()}
SIGNED, UNSIGNED, FLOAT = KIND["cudaChannelFormatKindSigned"], KIND["cudaChannelFormatKindUnsigned"], \
    KIND["cudaChannelFormatKindFloat"]


def rt():
    return interposer.rt


def ffi():
    return interposer.ffi


# ------------------------------------------------------------------ channel formats


def _normalized(name: str) -> tuple[str, int] | None:
    """cudaChannelFormatKind(Un)signedNormalized{8,16}X{1,2,4}: stored as
    that many integers (a texture reads them as floats in [-1, 1] / [0, 1])."""
    for prefix, sign in (("cudaChannelFormatKindUnsignedNormalized", "uint"),
                         ("cudaChannelFormatKindSignedNormalized", "int")):
        if name.startswith(prefix) and "X" in name:
            bits, channels = name[len(prefix):].split("X")
            return f"{sign}{bits}", int(channels)
    return None


def format_of(desc, call: str) -> tuple[str, int]:
    """(wire format, channels) of a cudaChannelFormatDesc."""
    sizes = [desc.x, desc.y, desc.z, desc.w]
    kind_name = KIND_NAMES.get(desc.f, f"kind {desc.f}")
    normalized = _normalized(kind_name)
    if normalized is not None:
        return normalized
    channels = next((i for i, size in enumerate(sizes) if size == 0), 4)
    bits = desc.x
    good = (desc.f in (SIGNED, UNSIGNED) and bits in (8, 16, 32)) or (desc.f == FLOAT and bits in (16, 32))
    if not good or channels not in (1, 2, 4) or any(size != bits for size in sizes[:channels]) \
            or any(sizes[channels:]):
        raise CudaError(cudaError.cudaErrorInvalidChannelDescriptor,
                        f"{call}: channel sizes {tuple(sizes)} of {kind_name}: arrays and textures hold 1, 2 or 4 "
                        f"channels of one size (8, 16 or 32 bits; floats 16 or 32)")
    prefix = {SIGNED: "int", UNSIGNED: "uint", FLOAT: "float"}[desc.f]
    return f"{prefix}{bits}", channels


def desc_tuple(desc) -> tuple[int, int, int, int, int]:
    return desc.x, desc.y, desc.z, desc.w, desc.f


def desc_of(fmt: str, channels: int) -> tuple[int, int, int, int, int]:
    """The cudaChannelFormatDesc of an array the driver made (no desc given)."""
    bits = int("".join(c for c in fmt if c.isdigit()))
    kind = FLOAT if fmt.startswith("float") else UNSIGNED if fmt.startswith("uint") else SIGNED
    sizes = [bits if i < channels else 0 for i in range(4)]
    return (*sizes, kind)


def fill_desc(out, desc: tuple) -> None:
    out.x, out.y, out.z, out.w, out.f = desc


@cuda()
def cudaCreateChannelDesc(x, y, z, w, f):
    desc = ffi().new("struct cudaChannelFormatDesc *")[0]
    desc.x, desc.y, desc.z, desc.w, desc.f = x, y, z, w, f
    return desc


# ------------------------------------------------------------------ arrays


def create_array(device, fmt: str, channels: int, sides: tuple[int, int, int], flags: int, desc: tuple,
                 levels: int = 0, call: str = "cudaMalloc3DArray") -> CudaArray:
    """A CUDA array (levels 0) or a mipmapped array on `device`: the
    server's answer is awaited, so running out of memory fails here."""
    width, height, depth = sides
    if flags & ~KNOWN_FLAGS:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: flags {flags:#x} (sparse, deferred-mapping and colour-attachment arrays are not "
                        f"supported by rcuda)")
    table = rt().arrays
    array = CudaArray(table.new_handle(), device, fmt, channels, width, height, depth, flags, desc, levels=levels)
    device.request("array_create", array=array.handle, format=fmt, channels=channels, width=width, height=height,
                   depth=depth, flags=flags, levels=levels)
    return table.add(array)


def free_array(array: CudaArray) -> None:
    rt().arrays.remove(array)
    array.device.post("array_destroy", array=array.handle)


def _created(handle_out, array: CudaArray) -> int:
    handle_out[0] = ffi().cast("void *", array.handle)
    return SUCCESS


@cuda()
def cudaMallocArray(array, desc, width, height, flags):
    """A 1-D (height 0) or 2-D array."""
    out_pointer(array, "array")
    out_pointer(desc, "desc")
    fmt, channels = format_of(desc, "cudaMallocArray")
    if flags & (LAYERED | CUBEMAP):
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaMallocArray: layered and cubemap arrays are "
                                                         "cudaMalloc3DArray's")
    return _created(array, create_array(rt().device(), fmt, channels, (width, height, 0), flags, desc_tuple(desc),
                                        call="cudaMallocArray"))


@cuda()
def cudaMalloc3DArray(array, desc, extent, flags):
    out_pointer(array, "array")
    out_pointer(desc, "desc")
    fmt, channels = format_of(desc, "cudaMalloc3DArray")
    sides = (extent.width, extent.height, extent.depth)
    return _created(array, create_array(rt().device(), fmt, channels, sides, flags, desc_tuple(desc)))


@cuda()
def cudaMallocMipmappedArray(mipmappedArray, desc, extent, numLevels, flags):
    out_pointer(mipmappedArray, "mipmappedArray")
    out_pointer(desc, "desc")
    fmt, channels = format_of(desc, "cudaMallocMipmappedArray")
    sides = (extent.width, extent.height, extent.depth)
    if numLevels < 1:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMallocMipmappedArray: {numLevels} levels")
    return _created(mipmappedArray, create_array(rt().device(), fmt, channels, sides, flags, desc_tuple(desc),
                                                 levels=numLevels, call="cudaMallocMipmappedArray"))


def array_level(mipmapped: CudaArray, level: int, call: str) -> CudaArray:
    if not 0 <= level < mipmapped.levels:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: level {level} of a mipmapped array of {mipmapped.levels}")
    sides = array_rules.level_sides(mipmapped.width, mipmapped.height, mipmapped.depth, mipmapped.flags, level)
    return rt().arrays.level(mipmapped, level, sides)


@cuda()
def cudaGetMipmappedArrayLevel(levelArray, mipmappedArray, level):
    out_pointer(levelArray, "levelArray")
    mipmapped = rt().arrays.get(address(mipmappedArray), "cudaGetMipmappedArrayLevel", mipmapped=True)
    levelArray[0] = ffi().cast("void *", array_level(mipmapped, level, "cudaGetMipmappedArrayLevel").handle)
    return SUCCESS


def _freeable(handle: int, call: str, mipmapped: bool = False) -> CudaArray | None:
    if handle == 0:
        return None  # freeing NULL does nothing, as cudaFree(NULL)
    array = rt().arrays.get(handle, call, mipmapped)
    if array.parent is not None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {handle:#x} is a level of a mipmapped array "
                                                         f"(cudaFreeMipmappedArray frees it)")
    return array


@cuda()
def cudaFreeArray(array):
    found = _freeable(address(array), "cudaFreeArray")
    if found is not None:
        free_array(found)
    return SUCCESS


@cuda()
def cudaFreeMipmappedArray(mipmappedArray):
    found = _freeable(address(mipmappedArray), "cudaFreeMipmappedArray", mipmapped=True)
    if found is not None:
        free_array(found)
    return SUCCESS


@cuda()
def cudaArrayGetInfo(desc, extent, flags, array):
    found = rt().arrays.get(address(array), "cudaArrayGetInfo")
    if desc != ffi().NULL:
        fill_desc(desc, found.desc)
    if extent != ffi().NULL:
        extent.width, extent.height, extent.depth = found.sides()
    if flags != ffi().NULL:
        flags[0] = found.flags
    return SUCCESS


# Sparse, deferred-mapping and multi-planar arrays are never made here
# (create_array refuses their flags and formats), so what CUDA answers for
# an array without them is every array's answer.


def no_sparse_properties(array: CudaArray, call: str) -> None:
    raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: the array is not sparse (rcuda makes no sparse arrays)")


def no_memory_requirements(array: CudaArray, device: int, call: str) -> None:
    rt().device(device)
    raise CudaError(cudaError.cudaErrorInvalidValue,
                    f"{call}: the array was not made for deferred mapping (rcuda makes none)")


def no_plane(array: CudaArray, call: str) -> None:
    raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: the array has no planes (not a multi-planar format)")


@cuda()
def cudaArrayGetSparseProperties(sparseProperties, array):
    out_pointer(sparseProperties, "sparseProperties")
    no_sparse_properties(rt().arrays.get(address(array), "cudaArrayGetSparseProperties"), "cudaArrayGetSparseProperties")


@cuda()
def cudaMipmappedArrayGetSparseProperties(sparseProperties, mipmap):
    out_pointer(sparseProperties, "sparseProperties")
    call = "cudaMipmappedArrayGetSparseProperties"
    no_sparse_properties(rt().arrays.get(address(mipmap), call, mipmapped=True), call)


@cuda()
def cudaArrayGetMemoryRequirements(memoryRequirements, array, device):
    out_pointer(memoryRequirements, "memoryRequirements")
    call = "cudaArrayGetMemoryRequirements"
    no_memory_requirements(rt().arrays.get(address(array), call), device, call)


@cuda()
def cudaMipmappedArrayGetMemoryRequirements(memoryRequirements, mipmap, device):
    out_pointer(memoryRequirements, "memoryRequirements")
    call = "cudaMipmappedArrayGetMemoryRequirements"
    no_memory_requirements(rt().arrays.get(address(mipmap), call, mipmapped=True), device, call)


@cuda()
def cudaArrayGetPlane(pPlaneArray, hArray, planeIdx):
    out_pointer(pPlaneArray, "pPlaneArray")
    no_plane(rt().arrays.get(address(hArray), "cudaArrayGetPlane"), "cudaArrayGetPlane")


@cuda()
def cudaGetChannelDesc(desc, array):
    out_pointer(desc, "desc")
    fill_desc(desc, rt().arrays.get(address(array), "cudaGetChannelDesc").desc)
    return SUCCESS


def texture_1d_linear_max_width(device) -> int:
    """The most elements a texture over linear memory may span (the
    device's maxTexture1DLinear, whatever the element)."""
    return device.properties.get("maxTexture1DLinear", 1 << 27)


@cuda()
def cudaDeviceGetTexture1DLinearMaxWidth(maxWidthInElements, fmtDesc, device):
    out_pointer(maxWidthInElements, "maxWidthInElements")
    out_pointer(fmtDesc, "fmtDesc")
    format_of(fmtDesc, "cudaDeviceGetTexture1DLinearMaxWidth")  # a format arrays may have
    maxWidthInElements[0] = texture_1d_linear_max_width(rt().device(device))
    return SUCCESS
