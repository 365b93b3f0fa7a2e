"""CUDA driver API: texture and surface objects.

The runtime's objects (client/runtime/textures.py) behind the driver's
names: a CUtexObject is a cudaTextureObject_t.  The driver's structures
become the dicts both faces share (a resource by its parts, a texture by
cudaTextureDesc's field names, a view by cudaResourceViewDesc's, which are
CUDA_RESOURCE_VIEW_DESC's too), and the queries read those dicts back, so an
object made with either API answers the other's queries.

CUDA_TEXTURE_DESC keeps in `flags` what cudaTextureDesc has as fields:
CU_TRSF_READ_AS_INTEGER is readMode cudaReadModeElementType (without it,
integer texels read as normalised floats), and the yes/no fields one flag each.
"""
from __future__ import annotations

from rcuda._generated.cuda_enums import ENUMS, MACROS
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..runtime import textures as runtime_textures
from ..runtime.arrays import desc_of
from ..interposer import out_pointer
from .arrays import array_of, format_number, wire_format
from .registry import SUCCESS, driver, require_initialized

CU_TRSF_READ_AS_INTEGER = MACROS["CU_TRSF_READ_AS_INTEGER"]
CU_TRSF_NORMALIZED_COORDINATES = MACROS["CU_TRSF_NORMALIZED_COORDINATES"]
CU_TRSF_SRGB = MACROS["CU_TRSF_SRGB"]
CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION = MACROS["CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION"]
CU_TRSF_SEAMLESS_CUBEMAP = MACROS["CU_TRSF_SEAMLESS_CUBEMAP"]
#: cudaTextureDesc's yes/no fields -> the flag each one is.
FLAG_FIELDS = {"normalizedCoords": CU_TRSF_NORMALIZED_COORDINATES, "sRGB": CU_TRSF_SRGB,
               "disableTrilinearOptimization": CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION,
               "seamlessCubemap": CU_TRSF_SEAMLESS_CUBEMAP}
KNOWN_FLAGS = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB | \
    CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP
#: The fields both structures have, by the same name.
SHARED_FIELDS = ("filterMode", "maxAnisotropy", "mipmapFilterMode", "mipmapLevelBias", "minMipmapLevelClamp",
                 "maxMipmapLevelClamp")
assert {*SHARED_FIELDS, *FLAG_FIELDS, "readMode"} == set(runtime_textures.TEXTURE_FIELDS)
READ_MODES = ENUMS["cudaTextureReadMode"]
ELEMENT_TYPE, NORMALIZED_FLOAT = READ_MODES["cudaReadModeElementType"], READ_MODES["cudaReadModeNormalizedFloat"]


def ffi():
    return interposer.ffi


def _zero(pointer, struct: str) -> None:
    ffi().memmove(pointer, bytes(ffi().sizeof(struct)), ffi().sizeof(struct))


# ------------------------------------------------------------------ resources


def resource_from(res, call: str) -> dict:
    """A CUDA_RESOURCE_DESC as the shared dict."""
    lib = interposer.lib
    if res.flags:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: resource flags {res.flags:#x} (must be 0)")
    kind = res.resType
    if kind == lib.CU_RESOURCE_TYPE_ARRAY:
        return {"type": "array", "array": array_of(res.res.array.hArray, call)}
    if kind == lib.CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        return {"type": "mipmappedArray", "array": array_of(res.res.mipmap.hMipmappedArray, call, mipmapped=True)}
    if kind not in (lib.CU_RESOURCE_TYPE_LINEAR, lib.CU_RESOURCE_TYPE_PITCH2D):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: resource type {kind}")
    linear = kind == lib.CU_RESOURCE_TYPE_LINEAR
    side = res.res.linear if linear else res.res.pitch2D
    fmt = wire_format(side.format, side.numChannels, call)
    resource = {"type": "linear" if linear else "pitch2D", "ptr": side.devPtr, "desc": desc_of(*fmt), "format": fmt}
    if linear:
        resource["size"] = side.sizeInBytes
    else:
        resource.update(width=side.width, height=side.height, pitch=side.pitchInBytes)
    return resource


def fill_resource(out, resource: dict) -> None:
    lib = interposer.lib
    _zero(out, "CUDA_RESOURCE_DESC")
    kind = resource["type"]
    if kind == "array":
        out.resType = lib.CU_RESOURCE_TYPE_ARRAY
        out.res.array.hArray = ffi().cast("void *", resource["array"].handle)
    elif kind == "mipmappedArray":
        out.resType = lib.CU_RESOURCE_TYPE_MIPMAPPED_ARRAY
        out.res.mipmap.hMipmappedArray = ffi().cast("void *", resource["array"].handle)
    else:
        linear = kind == "linear"
        out.resType = lib.CU_RESOURCE_TYPE_LINEAR if linear else lib.CU_RESOURCE_TYPE_PITCH2D
        side = out.res.linear if linear else out.res.pitch2D
        fmt, channels = resource["format"]
        side.devPtr, side.format, side.numChannels = resource["ptr"], format_number(fmt), channels
        if linear:
            side.sizeInBytes = resource["size"]
        else:
            side.width, side.height, side.pitchInBytes = resource["width"], resource["height"], resource["pitch"]


# ------------------------------------------------------------------ texture descriptions


def texture_from(desc, call: str) -> dict:
    """A CUDA_TEXTURE_DESC as cudaTextureDesc's fields."""
    flags = desc.flags
    if flags & ~KNOWN_FLAGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: texture flags {flags:#x}")
    texture = {name: getattr(desc, name) for name in SHARED_FIELDS}
    texture.update({name: int(bool(flags & flag)) for name, flag in FLAG_FIELDS.items()})
    texture["readMode"] = ELEMENT_TYPE if flags & CU_TRSF_READ_AS_INTEGER else NORMALIZED_FLOAT
    texture["addressMode"] = [desc.addressMode[i] for i in range(3)]
    texture["borderColor"] = [float(desc.borderColor[i]) for i in range(4)]
    return texture


def fill_texture(out, texture: dict) -> None:
    _zero(out, "CUDA_TEXTURE_DESC")
    for name in SHARED_FIELDS:
        setattr(out, name, texture[name])
    flags = CU_TRSF_READ_AS_INTEGER if texture["readMode"] == ELEMENT_TYPE else 0
    out.flags = flags | sum(flag for name, flag in FLAG_FIELDS.items() if texture[name])
    for i in range(3):
        out.addressMode[i] = texture["addressMode"][i]
    for i in range(4):
        out.borderColor[i] = texture["borderColor"][i]


# ------------------------------------------------------------------ the functions


@driver()
def cuTexObjectCreate(pTexObject, pResDesc, pTexDesc, pResViewDesc):
    require_initialized()
    call = "cuTexObjectCreate"
    out_pointer(pTexObject, "pTexObject")
    resource = resource_from(out_pointer(pResDesc, "pResDesc"), call)
    texture = texture_from(out_pointer(pTexDesc, "pTexDesc"), call)
    pTexObject[0] = runtime_textures.create_object(resource, texture, runtime_textures.view_from(pResViewDesc), call)
    return SUCCESS


@driver()
def cuTexObjectDestroy(texObject):
    require_initialized()
    runtime_textures.destroy_object(texObject, False, "cuTexObjectDestroy")
    return SUCCESS


@driver()
def cuTexObjectGetResourceDesc(pResDesc, texObject):
    require_initialized()
    out_pointer(pResDesc, "pResDesc")
    fill_resource(pResDesc, runtime_textures.find_object(texObject, False, "cuTexObjectGetResourceDesc").resource)
    return SUCCESS


@driver()
def cuTexObjectGetTextureDesc(pTexDesc, texObject):
    require_initialized()
    out_pointer(pTexDesc, "pTexDesc")
    fill_texture(pTexDesc, runtime_textures.find_object(texObject, False, "cuTexObjectGetTextureDesc").texture)
    return SUCCESS


@driver()
def cuTexObjectGetResourceViewDesc(pResViewDesc, texObject):
    require_initialized()
    out_pointer(pResViewDesc, "pResViewDesc")
    view = runtime_textures.view_of(texObject, "cuTexObjectGetResourceViewDesc")
    _zero(pResViewDesc, "CUDA_RESOURCE_VIEW_DESC")
    for name, value in view.items():
        setattr(pResViewDesc, name, value)
    return SUCCESS


@driver()
def cuSurfObjectCreate(pSurfObject, pResDesc):
    """Over an array made with CUDA_ARRAY3D_SURFACE_LDST (runtime_textures.check_surface)."""
    require_initialized()
    out_pointer(pSurfObject, "pSurfObject")
    resource = resource_from(out_pointer(pResDesc, "pResDesc"), "cuSurfObjectCreate")
    pSurfObject[0] = runtime_textures.create_object(resource, None, None, "cuSurfObjectCreate")
    return SUCCESS


@driver()
def cuSurfObjectDestroy(surfObject):
    require_initialized()
    runtime_textures.destroy_object(surfObject, True, "cuSurfObjectDestroy")
    return SUCCESS


@driver()
def cuSurfObjectGetResourceDesc(pResDesc, surfObject):
    require_initialized()
    out_pointer(pResDesc, "pResDesc")
    fill_resource(pResDesc, runtime_textures.find_object(surfObject, True, "cuSurfObjectGetResourceDesc").resource)
    return SUCCESS
