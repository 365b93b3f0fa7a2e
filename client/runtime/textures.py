"""CUDA runtime functions: texture and surface objects.

An object is made by the server of the resource's GPU (texture_create,
surface_create), which answers with the handle a kernel receives: on a GPU
the driver's own CUtexObject, so a kernel's parameters carry it unchanged.
What the program described is kept here (client/memory/arrays.py,
SamplerTable) and answers the Get*Desc queries without a round trip.

A resource is held here as a dict the driver's face (client/driver/textures.py)
shares: {"type": "array" | "mipmappedArray" | "linear" | "pitch2D",
"array": CudaArray, or "ptr", "desc" (a channel format), "size" | "width",
"height", "pitch"}.  Textures are described by cudaTextureDesc's field names.
"""
from __future__ import annotations

from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

from .. import interposer
from rcuda.array_rules import SURFACE_LOAD_STORE, layered

from ..memory.arrays import FORMAT_BYTES, SamplerObject
from .arrays import desc_tuple, fill_desc, format_of
from .core import SUCCESS, cuda
from ..interposer import address, out_pointer

RESOURCE_TYPES = {number: name[len("cudaResourceType"):][0].lower() + name[len("cudaResourceType") + 1:]
                  for name, number in ENUMS["cudaResourceType"].items()}  # 0 -> "array", 3 -> "pitch2D"
RESOURCE_NUMBERS = {name: number for number, name in RESOURCE_TYPES.items()}
TEXTURE_FIELDS = ("filterMode", "readMode", "sRGB", "normalizedCoords", "maxAnisotropy", "mipmapFilterMode",
                  "mipmapLevelBias", "minMipmapLevelClamp", "maxMipmapLevelClamp", "disableTrilinearOptimization",
                  "seamlessCubemap")
VIEW_FIELDS = ("format", "width", "height", "depth", "firstMipmapLevel", "lastMipmapLevel", "firstLayer",
               "lastLayer")


def rt():
    return interposer.rt


def ffi():
    return interposer.ffi


# ------------------------------------------------------------------ shared by both faces


def resource_device(resource: dict, call: str):
    """The GPU a resource lives on, which must be the current one."""
    current = rt().device()
    if "array" in resource:
        device = resource["array"].device
    else:
        allocation = rt().allocations.find(resource["ptr"], 1)
        if allocation is None:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"{call}: {resource['ptr']:#x} is not inside a device allocation")
        device = allocation.device
    if device is not current:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: the resource is on {device.label}, the current device is {current.label}")
    return device


def wire_resource(resource: dict) -> dict:
    """The resource as the server takes it (rcuda/protocol.py)."""
    kind = resource["type"]
    if kind in ("array", "mipmappedArray"):
        array = resource["array"]
        return {"type": kind, "array": array.server_id, "level": array.level}
    fmt, channels = resource["format"]
    wire = {"type": kind, "ptr": resource["ptr"], "format": fmt, "channels": channels}
    if kind == "linear":
        wire["size"] = resource["size"]
    else:
        wire.update(width=resource["width"], height=resource["height"], pitch=resource["pitch"])
    return wire


#: cudaResourceViewFormat (CUresourceViewFormat's numbers too) -> (wire format, channels), but the
#: block-compressed formats, whose texels are blocks.
VIEW_FORMATS = {
    ENUMS["cudaResourceViewFormat"][f"cudaResViewFormat{name}{channels}"]: (fmt, channels)
    for name, fmt in (("UnsignedChar", "uint8"), ("SignedChar", "int8"), ("UnsignedShort", "uint16"),
                      ("SignedShort", "int16"), ("UnsignedInt", "uint32"), ("SignedInt", "int32"),
                      ("Half", "float16"), ("Float", "float32"))
    for channels in (1, 2, 4)}
VIEW_NONE = ENUMS["cudaResourceViewFormat"]["cudaResViewFormatNone"]


def check_view(resource: dict, view: dict, call: str) -> None:
    """A resource view reinterprets an array's texels: same size, levels
    and layers within the array's."""
    if resource["type"] not in ("array", "mipmappedArray"):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: a resource view is for arrays, not "
                                                         f"{resource['type']} memory")
    array = resource["array"]
    if view["format"] != VIEW_NONE:
        fmt, channels = VIEW_FORMATS.get(view["format"], (None, 0))
        if fmt is None:
            raise CudaError(cudaError.cudaErrorNotSupported, f"{call}: view format {view['format']} (block-compressed "
                                                             f"views are not supported by rcuda)")
        if FORMAT_BYTES[fmt] * channels != array.element_size:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"{call}: a view of {channels} x {fmt} over texels of {array.element_size} bytes")
    levels, layers = max(array.levels, 1), max(array.depth, 1) if layered(array.flags) else 1
    if not view["firstMipmapLevel"] <= view["lastMipmapLevel"] < levels \
            or not view["firstLayer"] <= view["lastLayer"] < layers:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: a view of levels {view['firstMipmapLevel']}..{view['lastMipmapLevel']} and layers "
                        f"{view['firstLayer']}..{view['lastLayer']} of an array of {levels} and {layers}")


def create_object(resource: dict, texture: dict | None, view: dict | None, call: str) -> int:
    """A texture object (texture given) or a surface object: its handle."""
    device = resource_device(resource, call)
    if view is not None:
        check_view(resource, view, call)
    if texture is None:
        check_surface(resource, call)
        reply, _ = device.request("surface_create", resource=wire_resource(resource))
    else:
        reply, _ = device.request("texture_create", resource=wire_resource(resource), texture=texture, view=view)
    handle = reply["handle"]
    rt().samplers.add(SamplerObject(device, handle, texture is None, resource, texture, view))
    return handle


def check_surface(resource: dict, call: str) -> None:
    """A surface is over an array made with cudaArraySurfaceLoadStore
    (CUDA_ARRAY3D_SURFACE_LDST), as CUDA documents.  Checked here, for both
    APIs, because a GPU's driver does not check it (the H100's made the
    surface) and the sim should not be the only one refusing."""
    if resource["type"] != "array":
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: a surface is over an array, not "
                                                         f"{resource['type']} memory")
    if not resource["array"].flags & SURFACE_LOAD_STORE:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: the array was made without cudaArraySurfaceLoadStore (CUDA_ARRAY3D_SURFACE_LDST)")


def destroy_object(handle: int, surface: bool, call: str) -> None:
    if handle == 0:
        return  # destroying no object does nothing
    entry = rt().samplers.find(handle, surface, rt().device(), call)
    rt().samplers.remove(entry)
    entry.device.post("surface_destroy" if surface else "texture_destroy", handle=handle)


def find_object(handle: int, surface: bool, call: str) -> SamplerObject:
    return rt().samplers.find(handle, surface, rt().device(), call)


def view_of(handle: int, call: str) -> dict:
    """The view texture object `handle` was made with: both APIs' query of
    an object made without one is an invalid value."""
    view = find_object(handle, False, call).view
    if view is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: texture object {handle} was made without a view")
    return view


# ------------------------------------------------------------------ the runtime's structs


def resource_from(res, call: str) -> dict:
    """A cudaResourceDesc as the shared dict."""
    kind = RESOURCE_TYPES.get(res.resType)
    if kind is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: resource type {res.resType}")
    if kind == "array":
        return {"type": kind, "array": rt().arrays.get(address(res.res.array.array), call)}
    if kind == "mipmappedArray":
        return {"type": kind, "array": rt().arrays.get(address(res.res.mipmap.mipmap), call, mipmapped=True)}
    side = res.res.linear if kind == "linear" else res.res.pitch2D
    resource = {"type": kind, "ptr": address(side.devPtr), "desc": desc_tuple(side.desc),
                "format": format_of(side.desc, call)}
    if kind == "linear":
        resource["size"] = side.sizeInBytes
    else:
        resource.update(width=side.width, height=side.height, pitch=side.pitchInBytes)
    return resource


def fill_resource(out, resource: dict) -> None:
    ffi().memmove(out, bytes(ffi().sizeof("struct cudaResourceDesc")), ffi().sizeof("struct cudaResourceDesc"))
    kind = resource["type"]
    out.resType = RESOURCE_NUMBERS[kind]
    if kind == "array":
        out.res.array.array = ffi().cast("void *", resource["array"].handle)
    elif kind == "mipmappedArray":
        out.res.mipmap.mipmap = ffi().cast("void *", resource["array"].handle)
    else:
        side = out.res.linear if kind == "linear" else out.res.pitch2D
        side.devPtr = ffi().cast("void *", resource["ptr"])
        fill_desc(side.desc, resource["desc"])
        if kind == "linear":
            side.sizeInBytes = resource["size"]
        else:
            side.width, side.height, side.pitchInBytes = resource["width"], resource["height"], resource["pitch"]


def texture_from(desc) -> dict:
    texture = {name: getattr(desc, name) for name in TEXTURE_FIELDS}
    texture["addressMode"] = [desc.addressMode[i] for i in range(3)]
    texture["borderColor"] = [float(desc.borderColor[i]) for i in range(4)]
    return texture


def view_from(desc) -> dict | None:
    return None if desc == ffi().NULL else {name: getattr(desc, name) for name in VIEW_FIELDS}


@cuda()
def cudaCreateTextureObject(pTexObject, pResDesc, pTexDesc, pResViewDesc):
    out_pointer(pTexObject, "pTexObject")
    call = "cudaCreateTextureObject"
    resource = resource_from(out_pointer(pResDesc, "pResDesc"), call)
    texture = texture_from(out_pointer(pTexDesc, "pTexDesc"))
    pTexObject[0] = create_object(resource, texture, view_from(pResViewDesc), call)
    return SUCCESS


@cuda()
def cudaDestroyTextureObject(texObject):
    destroy_object(texObject, False, "cudaDestroyTextureObject")
    return SUCCESS


@cuda()
def cudaCreateSurfaceObject(pSurfObject, pResDesc):
    out_pointer(pSurfObject, "pSurfObject")
    resource = resource_from(out_pointer(pResDesc, "pResDesc"), "cudaCreateSurfaceObject")
    pSurfObject[0] = create_object(resource, None, None, "cudaCreateSurfaceObject")
    return SUCCESS


@cuda()
def cudaDestroySurfaceObject(surfObject):
    destroy_object(surfObject, True, "cudaDestroySurfaceObject")
    return SUCCESS


@cuda()
def cudaGetTextureObjectResourceDesc(pResDesc, texObject):
    fill_resource(out_pointer(pResDesc, "pResDesc"),
                  find_object(texObject, False, "cudaGetTextureObjectResourceDesc").resource)
    return SUCCESS


@cuda()
def cudaGetSurfaceObjectResourceDesc(pResDesc, surfObject):
    fill_resource(out_pointer(pResDesc, "pResDesc"),
                  find_object(surfObject, True, "cudaGetSurfaceObjectResourceDesc").resource)
    return SUCCESS


@cuda()
def cudaGetTextureObjectTextureDesc(pTexDesc, texObject):
    out_pointer(pTexDesc, "pTexDesc")
    texture = find_object(texObject, False, "cudaGetTextureObjectTextureDesc").texture
    for name in TEXTURE_FIELDS:
        setattr(pTexDesc, name, texture[name])
    for i in range(3):
        pTexDesc.addressMode[i] = texture["addressMode"][i]
    for i in range(4):
        pTexDesc.borderColor[i] = texture["borderColor"][i]
    return SUCCESS


@cuda()
def cudaGetTextureObjectResourceViewDesc(pResViewDesc, texObject):
    out_pointer(pResViewDesc, "pResViewDesc")
    view = view_of(texObject, "cudaGetTextureObjectResourceViewDesc")
    size = ffi().sizeof("struct cudaResourceViewDesc")
    ffi().memmove(pResViewDesc, bytes(size), size)
    for name, value in view.items():
        setattr(pResViewDesc, name, value)
    return SUCCESS
