"""CUDA arrays, 3-D copies, and texture and surface objects on a real GPU,
through the CUDA driver API.

CuPy binds none of cuArray3DCreate, cuMemcpy3DAsync or cuTexObjectCreate,
so they go through ctypes to libcuda.so.1, as cuda_vmm.py's calls do.  The
structures below are cuda.h's of CUDA 13, field for field
(tests/test_cuda_arrays_layout.py compares them with the C compiler's
layout).  Every call works on the calling thread's current context: the
cupy backend makes its GPU's primary context current first.

Wire values (rcuda/protocol.py) become driver values here: channel formats
by name, cudaTextureDesc by its fields, cudaResourceViewDesc, and a linear
box of memory split into the 2-D pieces cuMemsetD2D* sets.
"""
from __future__ import annotations

import ctypes
import functools

from rcuda._generated.cuda_enums import ENUMS, MACROS
from rcuda.driver_errors import error_name
from rcuda.errors import CudaError, cudaError

from .arrays import FORMATS, ArraySpec, invalid
from .cuda_status import driver_status

# cuda.h's CUmemorytype (the runtime has no array memory type to share).
CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_ARRAY = 0x01, 0x02, 0x03
# CUresourcetype's values are cudaResourceType's.
CU_RESOURCE_TYPE_ARRAY, CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, CU_RESOURCE_TYPE_LINEAR, CU_RESOURCE_TYPE_PITCH2D = (
    ENUMS["cudaResourceType"][f"cudaResourceType{kind}"] for kind in ("Array", "MipmappedArray", "Linear", "Pitch2D"))
CU_TRSF_READ_AS_INTEGER = MACROS["CU_TRSF_READ_AS_INTEGER"]
CU_TRSF_NORMALIZED_COORDINATES = MACROS["CU_TRSF_NORMALIZED_COORDINATES"]
CU_TRSF_SRGB = MACROS["CU_TRSF_SRGB"]
CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION = MACROS["CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION"]
CU_TRSF_SEAMLESS_CUBEMAP = MACROS["CU_TRSF_SEAMLESS_CUBEMAP"]

#: Wire channel formats -> CUarray_format (CU_AD_FORMAT_*).
ARRAY_FORMATS = {"uint8": 0x01, "uint16": 0x02, "uint32": 0x03, "int8": 0x08, "int16": 0x09, "int32": 0x0a,
                 "float16": 0x10, "float32": 0x20}

READ_MODE_ELEMENT_TYPE = ENUMS["cudaTextureReadMode"]["cudaReadModeElementType"]
READ_MODE_NORMALIZED_FLOAT = ENUMS["cudaTextureReadMode"]["cudaReadModeNormalizedFloat"]
#: cudaTextureDesc's yes/no fields -> the CU_TRSF_* flag each one sets.
TEXTURE_FLAGS = {"normalizedCoords": CU_TRSF_NORMALIZED_COORDINATES, "sRGB": CU_TRSF_SRGB,
                 "disableTrilinearOptimization": CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION,
                 "seamlessCubemap": CU_TRSF_SEAMLESS_CUBEMAP}
#: cudaResourceViewDesc's fields, CUDA_RESOURCE_VIEW_DESC's too (the
#: cudaResourceViewFormat numbers are CUresourceViewFormat's).
VIEW_FIELDS = ("format", "width", "height", "depth", "firstMipmapLevel", "lastMipmapLevel", "firstLayer",
               "lastLayer")

size_t, u64 = ctypes.c_size_t, ctypes.c_uint64


# ---------------------------------------------------------------- cuda.h's structures
# Handles (CUarray, CUmipmappedArray) are pointers: c_void_p; CUdeviceptr
# is an unsigned long long; enums are ints.

class CUDA_ARRAY3D_DESCRIPTOR(ctypes.Structure):
    _fields_ = [("Width", size_t), ("Height", size_t), ("Depth", size_t), ("Format", ctypes.c_int),
                ("NumChannels", ctypes.c_uint), ("Flags", ctypes.c_uint)]


class CUDA_MEMCPY3D(ctypes.Structure):
    _fields_ = [("srcXInBytes", size_t), ("srcY", size_t), ("srcZ", size_t), ("srcLOD", size_t),
                ("srcMemoryType", ctypes.c_int), ("srcHost", ctypes.c_void_p), ("srcDevice", u64),
                ("srcArray", ctypes.c_void_p), ("reserved0", ctypes.c_void_p), ("srcPitch", size_t),
                ("srcHeight", size_t),
                ("dstXInBytes", size_t), ("dstY", size_t), ("dstZ", size_t), ("dstLOD", size_t),
                ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p), ("dstDevice", u64),
                ("dstArray", ctypes.c_void_p), ("reserved1", ctypes.c_void_p), ("dstPitch", size_t),
                ("dstHeight", size_t),
                ("WidthInBytes", size_t), ("Height", size_t), ("Depth", size_t)]


class _ArrayResource(ctypes.Structure):
    _fields_ = [("hArray", ctypes.c_void_p)]


class _MipmapResource(ctypes.Structure):
    _fields_ = [("hMipmappedArray", ctypes.c_void_p)]


class _LinearResource(ctypes.Structure):
    _fields_ = [("devPtr", u64), ("format", ctypes.c_int), ("numChannels", ctypes.c_uint),
                ("sizeInBytes", size_t)]


class _Pitch2DResource(ctypes.Structure):
    _fields_ = [("devPtr", u64), ("format", ctypes.c_int), ("numChannels", ctypes.c_uint), ("width", size_t),
                ("height", size_t), ("pitchInBytes", size_t)]


class _ReservedResource(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_int * 32)]


class _Resource(ctypes.Union):
    _fields_ = [("array", _ArrayResource), ("mipmap", _MipmapResource), ("linear", _LinearResource),
                ("pitch2D", _Pitch2DResource), ("reserved", _ReservedResource)]


class CUDA_RESOURCE_DESC(ctypes.Structure):
    _fields_ = [("resType", ctypes.c_int), ("res", _Resource), ("flags", ctypes.c_uint)]


class CUDA_TEXTURE_DESC(ctypes.Structure):
    _fields_ = [("addressMode", ctypes.c_int * 3), ("filterMode", ctypes.c_int), ("flags", ctypes.c_uint),
                ("maxAnisotropy", ctypes.c_uint), ("mipmapFilterMode", ctypes.c_int),
                ("mipmapLevelBias", ctypes.c_float), ("minMipmapLevelClamp", ctypes.c_float),
                ("maxMipmapLevelClamp", ctypes.c_float), ("borderColor", ctypes.c_float * 4),
                ("reserved", ctypes.c_int * 12)]


class CUDA_RESOURCE_VIEW_DESC(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("width", size_t), ("height", size_t), ("depth", size_t),
                ("firstMipmapLevel", ctypes.c_uint), ("lastMipmapLevel", ctypes.c_uint),
                ("firstLayer", ctypes.c_uint), ("lastLayer", ctypes.c_uint), ("reserved", ctypes.c_uint * 16)]


# ---------------------------------------------------------------- the driver's functions

@functools.cache
def driver():
    lib = ctypes.CDLL("libcuda.so.1")
    handle, stream = ctypes.c_void_p, ctypes.c_void_p
    out = ctypes.POINTER
    signatures = {
        "cuArray3DCreate_v2": [out(handle), out(CUDA_ARRAY3D_DESCRIPTOR)],
        "cuArrayDestroy": [handle],
        "cuMipmappedArrayCreate": [out(handle), out(CUDA_ARRAY3D_DESCRIPTOR), ctypes.c_uint],
        "cuMipmappedArrayGetLevel": [out(handle), handle, ctypes.c_uint],
        "cuMipmappedArrayDestroy": [handle],
        "cuMemcpy3DAsync_v2": [out(CUDA_MEMCPY3D), stream],
        "cuMemsetD2D8Async": [u64, size_t, ctypes.c_ubyte, size_t, size_t, stream],
        "cuMemsetD2D16Async": [u64, size_t, ctypes.c_ushort, size_t, size_t, stream],
        "cuMemsetD2D32Async": [u64, size_t, ctypes.c_uint, size_t, size_t, stream],
        "cuTexObjectCreate": [out(ctypes.c_ulonglong), out(CUDA_RESOURCE_DESC), out(CUDA_TEXTURE_DESC),
                              out(CUDA_RESOURCE_VIEW_DESC)],
        "cuTexObjectDestroy": [ctypes.c_ulonglong],
        "cuSurfObjectCreate": [out(ctypes.c_ulonglong), out(CUDA_RESOURCE_DESC)],
        "cuSurfObjectDestroy": [ctypes.c_ulonglong],
    }
    for name, argtypes in signatures.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = ctypes.c_int
    return lib


def call(name: str, *args) -> None:
    """Call driver function `name`; a failure becomes the CudaError of the
    runtime status that matches the CUresult."""
    status = getattr(driver(), name)(*args)
    if status:
        raise CudaError(driver_status(status), f"{name} failed with {error_name(status) or 'CUresult'} ({status})")


# ---------------------------------------------------------------- arrays

def array_format(format: str, channels: int) -> tuple[int, int]:
    """(CUarray_format, NumChannels) of a wire channel format."""
    if format not in ARRAY_FORMATS or channels not in (1, 2, 4):
        raise CudaError(cudaError.cudaErrorInvalidChannelDescriptor,
                        f"{channels} channel(s) of {format!r}: 1, 2 or 4 channels of {', '.join(ARRAY_FORMATS)}")
    return ARRAY_FORMATS[format], channels


def array_bytes(spec: ArraySpec) -> int:
    """The texels' bytes, every level's (the driver may round up)."""
    return sum(spec.nbytes(level) for level in range(max(spec.levels, 1)))


def array_descriptor(spec: ArraySpec) -> CUDA_ARRAY3D_DESCRIPTOR:
    """The driver's description of an array: the same sides in the same
    convention, and flags of the same values (CUDA_ARRAY3D_*)."""
    number, channels = array_format(spec.format, spec.channels)
    return CUDA_ARRAY3D_DESCRIPTOR(Width=spec.width, Height=spec.height, Depth=spec.depth, Format=number,
                                   NumChannels=channels, Flags=spec.flags)


class DriverArray:
    """A CUDA array (spec.levels 0) or mipmapped array made by the driver.

    Copies, textures and surfaces name one level of it as a CUarray: a
    plain array is its own level 0; a mipmapped array's levels are asked of
    the driver once each, and belong to it (destroying it frees them)."""

    def __init__(self, spec: ArraySpec):
        self.spec = spec
        descriptor, made = array_descriptor(spec), ctypes.c_void_p()
        if spec.levels:
            call("cuMipmappedArrayCreate", ctypes.byref(made), ctypes.byref(descriptor), spec.levels)
        else:
            call("cuArray3DCreate_v2", ctypes.byref(made), ctypes.byref(descriptor))
        self.handle: int = made.value  # CUarray or CUmipmappedArray
        self._levels: dict[int, int] = {} if spec.levels else {0: self.handle}

    def level(self, level: int) -> int:
        """The CUarray of a level (cudaErrorInvalidValue for one it lacks)."""
        self.spec.check_level(level)
        if level not in self._levels:
            found = ctypes.c_void_p()
            call("cuMipmappedArrayGetLevel", ctypes.byref(found), self.handle, level)
            self._levels[level] = found.value
        return self._levels[level]

    def resource(self, mipmapped: bool, level: int, what: str) -> CUDA_RESOURCE_DESC:
        """A resource over a whole mipmapped array ("mipmappedArray"), or
        over one array: a plain one, or a level of a mipmapped one ("array")."""
        if mipmapped:
            if not self.spec.levels or level:
                raise invalid(f"{what}: a mipmappedArray resource over a plain CUDA array (or a level)")
            return mipmap_resource(self.handle)
        return array_resource(self.level(level))

    def destroy(self) -> None:
        call("cuMipmappedArrayDestroy" if self.spec.levels else "cuArrayDestroy", self.handle)


# ---------------------------------------------------------------- 3-D copies and memsets

def copy_3d(extent: tuple[int, int, int]) -> CUDA_MEMCPY3D:
    """A copy of a box of `extent` (bytes, rows, slices); its two sides are
    set with the set_* functions below."""
    width, height, depth = extent
    return CUDA_MEMCPY3D(WidthInBytes=width, Height=height, Depth=depth)


def _set_side(copy: CUDA_MEMCPY3D, side: str, **fields) -> None:
    for name, value in fields.items():
        setattr(copy, side + name, value)


def set_host(copy: CUDA_MEMCPY3D, side: str, address: int) -> None:
    """`side` ("src" or "dst") is packed host memory at `address`: rows of
    the copy's width back to back, slices of its height."""
    _set_side(copy, side, MemoryType=CU_MEMORYTYPE_HOST, Host=address, Pitch=copy.WidthInBytes,
              Height=copy.Height)


def set_device(copy: CUDA_MEMCPY3D, side: str, ptr: int, pitch: int, rows: int) -> None:
    """`side` is linear device memory from `ptr`: rows `pitch` bytes apart,
    slices `rows` rows apart.  The driver checks a pitch and a slice height
    only where they are used ("if specified"), so a one-row box gets its
    width as pitch and a one-slice box no slice height."""
    single_row = copy.Height == 1 and copy.Depth == 1
    _set_side(copy, side, MemoryType=CU_MEMORYTYPE_DEVICE, Device=ptr,
              Pitch=copy.WidthInBytes if single_row else pitch, Height=rows if copy.Depth > 1 else 0)


def set_array(copy: CUDA_MEMCPY3D, side: str, array: int, x: int, y: int, z: int) -> None:
    """`side` is a CUarray, from byte `x` of row `y` of slice (or layer) `z`."""
    _set_side(copy, side, MemoryType=CU_MEMORYTYPE_ARRAY, Array=array, XInBytes=x, Y=y, Z=z)


def copy_async(copy: CUDA_MEMCPY3D, stream: int) -> None:
    call("cuMemcpy3DAsync_v2", ctypes.byref(copy), stream)


def box_planes(ptr: int, pitch: int, rows: int, extent: tuple[int, int, int]):
    """The 2-D pieces (start, pitch, rows) that make a box of linear memory
    (rows `pitch` bytes apart, slices `rows` rows apart), for cuMemsetD2D*.

    One piece when the slices' rows follow one another; else as few pieces
    as the box allows: slice by slice, or, for many short slices, the same
    row of every slice at a time (a piece of one row gets the width as
    pitch, which the driver then does not use)."""
    width, height, depth = extent
    if depth == 1 or rows == height:
        pieces = [(ptr, pitch, height * depth)]
    elif depth <= height:
        pieces = ((ptr + z * rows * pitch, pitch, height) for z in range(depth))
    else:
        pieces = ((ptr + y * pitch, rows * pitch, depth) for y in range(height))
    for start, piece_pitch, piece_rows in pieces:
        yield start, piece_pitch if piece_rows > 1 else width, piece_rows


def memset_box(ptr: int, pitch: int, rows: int, value: int, extent: tuple[int, int, int], elem: int,
               stream: int) -> None:
    """Set a box of linear memory to `value`'s low `elem` bytes, repeated
    (cuMemsetD2D8/16/32Async: the width is a whole number of `elem`s)."""
    name = {1: "cuMemsetD2D8Async", 2: "cuMemsetD2D16Async", 4: "cuMemsetD2D32Async"}[elem]
    pattern, width = value & ((1 << 8 * elem) - 1), extent[0] // elem
    for start, piece_pitch, piece_rows in box_planes(ptr, pitch, rows, extent):
        call(name, start, piece_pitch, pattern, width, piece_rows, stream)


# ---------------------------------------------------------------- textures and surfaces

def _wire_ints(value: dict, names, what: str) -> list[int]:
    """The fields `names` of a wire map, each a non-negative integer."""
    numbers = [value.get(name) for name in names]
    if not all(type(number) is int and number >= 0 for number in numbers):
        raise invalid(f"{what}: the fields {', '.join(names)} are non-negative integers, got {value!r:.120}")
    return numbers


def array_resource(array: int) -> CUDA_RESOURCE_DESC:
    """A resource over one CUarray."""
    resource = CUDA_RESOURCE_DESC(resType=CU_RESOURCE_TYPE_ARRAY)
    resource.res.array.hArray = array
    return resource


def mipmap_resource(mipmap: int) -> CUDA_RESOURCE_DESC:
    """A resource over a whole CUmipmappedArray."""
    resource = CUDA_RESOURCE_DESC(resType=CU_RESOURCE_TYPE_MIPMAPPED_ARRAY)
    resource.res.mipmap.hMipmappedArray = mipmap
    return resource


def memory_resource(resource: dict, what: str) -> tuple[CUDA_RESOURCE_DESC, int, int]:
    """A wire resource over linear memory ("linear" or "pitch2D"): (the
    driver's description, its pointer, how many bytes from there a texture
    over it may read) -- the caller checks those bytes are the session's."""
    kind = resource.get("type")
    if kind == "linear":
        ptr, size = _wire_ints(resource, ("ptr", "size"), f"{what}: a linear resource")
        number, channels = array_format(resource.get("format"), resource.get("channels"))
        described = CUDA_RESOURCE_DESC(resType=CU_RESOURCE_TYPE_LINEAR)
        described.res.linear = _LinearResource(ptr, number, channels, size)
        return described, ptr, size
    if kind == "pitch2D":
        ptr, width, height, pitch = _wire_ints(resource, ("ptr", "width", "height", "pitch"),
                                               f"{what}: a pitch2D resource")
        number, channels = array_format(resource.get("format"), resource.get("channels"))
        if not width or not height:
            raise invalid(f"{what}: a pitch2D resource of {width} x {height}")
        described = CUDA_RESOURCE_DESC(resType=CU_RESOURCE_TYPE_PITCH2D)
        described.res.pitch2D = _Pitch2DResource(ptr, number, channels, width, height, pitch)
        row_bytes = width * FORMATS[resource["format"]].itemsize * channels
        return described, ptr, (height - 1) * pitch + row_bytes
    raise invalid(f"{what}: a resource of type {kind!r:.40} (array, mipmappedArray, linear or pitch2D)")


def texture_flags(texture: dict) -> int:
    """CUDA_TEXTURE_DESC's flags for a cudaTextureDesc.  Reading elements as
    they are (cudaReadModeElementType) is the driver's READ_AS_INTEGER; it
    only changes what 8- and 16-bit integer formats read, as readMode does."""
    read_mode = texture["readMode"]
    if read_mode not in (READ_MODE_ELEMENT_TYPE, READ_MODE_NORMALIZED_FLOAT):
        raise invalid(f"cudaCreateTextureObject: readMode {read_mode!r:.20}")
    flags = CU_TRSF_READ_AS_INTEGER if read_mode == READ_MODE_ELEMENT_TYPE else 0
    for field, flag in TEXTURE_FLAGS.items():
        if texture[field]:
            flags |= flag
    return flags


def texture_descriptor(texture: dict) -> CUDA_TEXTURE_DESC:
    """The driver's CUDA_TEXTURE_DESC for a wire cudaTextureDesc (the
    address and filter mode numbers are the same in both APIs)."""
    try:
        address_mode, border_color = texture["addressMode"], texture["borderColor"]
        if len(address_mode) != 3 or len(border_color) != 4:
            raise ValueError("addressMode has 3 entries, borderColor 4")
        return CUDA_TEXTURE_DESC(
            addressMode=(ctypes.c_int * 3)(*address_mode), filterMode=texture["filterMode"],
            flags=texture_flags(texture), maxAnisotropy=texture["maxAnisotropy"],
            mipmapFilterMode=texture["mipmapFilterMode"], mipmapLevelBias=texture["mipmapLevelBias"],
            minMipmapLevelClamp=texture["minMipmapLevelClamp"], maxMipmapLevelClamp=texture["maxMipmapLevelClamp"],
            borderColor=(ctypes.c_float * 4)(*border_color))
    except (KeyError, TypeError, ValueError) as exc:
        raise invalid(f"cudaCreateTextureObject: a texture description {texture!r:.200}: {exc}") from None


def view_descriptor(view: dict) -> CUDA_RESOURCE_VIEW_DESC:
    """The driver's CUDA_RESOURCE_VIEW_DESC for a wire cudaResourceViewDesc."""
    numbers = _wire_ints(view, VIEW_FIELDS, "cudaCreateTextureObject: a resource view")
    return CUDA_RESOURCE_VIEW_DESC(**dict(zip(VIEW_FIELDS, numbers)))


def create_texture(resource: CUDA_RESOURCE_DESC, texture: CUDA_TEXTURE_DESC,
                   view: CUDA_RESOURCE_VIEW_DESC | None) -> int:
    """A CUtexObject: the value kernels are given (cudaTextureObject_t)."""
    made = ctypes.c_ulonglong()
    call("cuTexObjectCreate", ctypes.byref(made), ctypes.byref(resource), ctypes.byref(texture),
         ctypes.byref(view) if view is not None else None)
    return made.value


def destroy_texture(handle: int) -> None:
    call("cuTexObjectDestroy", handle)


def create_surface(resource: CUDA_RESOURCE_DESC) -> int:
    """A CUsurfObject over an array resource (cudaSurfaceObject_t)."""
    made = ctypes.c_ulonglong()
    call("cuSurfObjectCreate", ctypes.byref(made), ctypes.byref(resource))
    return made.value


def destroy_surface(handle: int) -> None:
    call("cuSurfObjectDestroy", handle)


# ---------------------------------------------------------------- texture and surface references
# The driver's legacy references (a module's `.global .texref` / `.surfref`,
# what `texture<>` and `surface<>` declared), bound on the module the GPU
# loaded: cuModuleGetTexRef and one cuTexRefSet* per part of the state.
# The driver keeps the state and applies it to the module's next launches.

#: cuda.h's CU_TRSA_OVERRIDE_FORMAT: cuTexRefSetArray takes the array's format.
CU_TRSA_OVERRIDE_FORMAT = 0x01


class CUDA_ARRAY_DESCRIPTOR(ctypes.Structure):
    _fields_ = [("Width", size_t), ("Height", size_t), ("Format", ctypes.c_int), ("NumChannels", ctypes.c_uint)]


def reference_driver():
    """libcuda.so.1 with the texture and surface reference functions' signatures."""
    lib = driver()
    if getattr(lib, "_rcuda_reference_signatures", False):
        return lib
    handle, out = ctypes.c_void_p, ctypes.POINTER
    signatures = {
        "cuModuleGetTexRef": [out(handle), handle, ctypes.c_char_p],
        "cuModuleGetSurfRef": [out(handle), handle, ctypes.c_char_p],
        "cuTexRefSetArray": [handle, handle, ctypes.c_uint],
        "cuTexRefSetMipmappedArray": [handle, handle, ctypes.c_uint],
        "cuTexRefSetAddress_v2": [out(size_t), handle, u64, size_t],
        "cuTexRefSetAddress2D_v3": [handle, out(CUDA_ARRAY_DESCRIPTOR), u64, size_t],
        "cuTexRefSetFormat": [handle, ctypes.c_int, ctypes.c_int],
        "cuTexRefSetAddressMode": [handle, ctypes.c_int, ctypes.c_int],
        "cuTexRefSetFilterMode": [handle, ctypes.c_int],
        "cuTexRefSetMipmapFilterMode": [handle, ctypes.c_int],
        "cuTexRefSetMipmapLevelBias": [handle, ctypes.c_float],
        "cuTexRefSetMipmapLevelClamp": [handle, ctypes.c_float, ctypes.c_float],
        "cuTexRefSetMaxAnisotropy": [handle, ctypes.c_uint],
        "cuTexRefSetBorderColor": [handle, out(ctypes.c_float)],
        "cuTexRefSetFlags": [handle, ctypes.c_uint],
        "cuSurfRefSetArray": [handle, handle, ctypes.c_uint],
    }
    for name, argtypes in signatures.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = ctypes.c_int
    lib._rcuda_reference_signatures = True
    return lib


def _reference_call(name: str, *args) -> None:
    reference_driver()
    call(name, *args)


def bind_surface_reference(module: int, name: str, array: int) -> None:
    """Bind surface reference `name` of a CUmodule to a CUarray."""
    found = ctypes.c_void_p()
    _reference_call("cuModuleGetSurfRef", ctypes.byref(found), module, name.encode())
    _reference_call("cuSurfRefSetArray", found, array, 0)


def bind_texture_reference(module: int, name: str, resource: dict, array: int | None, texture: dict) -> None:
    """Bind texture reference `name` of a CUmodule: to `array` (a CUarray,
    or a CUmipmappedArray for a "mipmappedArray" resource) or to the linear
    or pitch2D memory of the wire `resource`, then set its sampling state
    from the wire cudaTextureDesc `texture` (checked as an object's is)."""
    described = texture_descriptor(texture)  # checks the description first
    ref = ctypes.c_void_p()
    _reference_call("cuModuleGetTexRef", ctypes.byref(ref), module, name.encode())
    kind = resource.get("type")
    if kind == "array":
        _reference_call("cuTexRefSetArray", ref, array, CU_TRSA_OVERRIDE_FORMAT)
    elif kind == "mipmappedArray":
        _reference_call("cuTexRefSetMipmappedArray", ref, array, CU_TRSA_OVERRIDE_FORMAT)
    else:
        number, channels = array_format(resource.get("format"), resource.get("channels"))
        if kind == "linear":
            ptr, size = _wire_ints(resource, ("ptr", "size"), "cuTexRefSetAddress")
            _reference_call("cuTexRefSetFormat", ref, number, channels)
            offset = size_t()
            _reference_call("cuTexRefSetAddress_v2", ctypes.byref(offset), ref, ptr, size)
        elif kind == "pitch2D":
            ptr, width, height, pitch = _wire_ints(resource, ("ptr", "width", "height", "pitch"),
                                                   "cuTexRefSetAddress2D")
            desc = CUDA_ARRAY_DESCRIPTOR(Width=width, Height=height, Format=number, NumChannels=channels)
            _reference_call("cuTexRefSetAddress2D_v3", ref, ctypes.byref(desc), ptr, pitch)
        else:
            raise invalid(f"texture reference {name}: a resource of type {kind!r:.40}")
    for dim in range(3):
        _reference_call("cuTexRefSetAddressMode", ref, dim, described.addressMode[dim])
    _reference_call("cuTexRefSetFilterMode", ref, described.filterMode)
    _reference_call("cuTexRefSetFlags", ref, described.flags)
    _reference_call("cuTexRefSetMaxAnisotropy", ref, described.maxAnisotropy)
    _reference_call("cuTexRefSetMipmapFilterMode", ref, described.mipmapFilterMode)
    _reference_call("cuTexRefSetMipmapLevelBias", ref, described.mipmapLevelBias)
    _reference_call("cuTexRefSetMipmapLevelClamp", ref, described.minMipmapLevelClamp, described.maxMipmapLevelClamp)
    _reference_call("cuTexRefSetBorderColor", ref, described.borderColor)
