"""CUDA driver API: the legacy texture and surface references
(cuModuleGetTexRef, cuTexRef*, cuModuleGetSurfRef, cuSurfRef*).

A texture reference is a module-scope variable of the legacy `texture<>`
type: in PTX a `.global .texref` (`.surfref` for `surface<>`), in a cubin a
symbol of the CUDA texture type (rcuda/fatbin.py `references`).  CUDA 13's
nvcc no longer compiles `texture<>`, but old binaries and hand-written PTX
still declare them, and the driver still binds them.

A CUtexref is a client object (a handle from client/driver/handles.py's
range) holding what a texture object holds: the resource it is bound to
(the shared resource dicts of client/runtime/textures.py, over an array, a
mipmapped array, linear or pitch2D memory) and its sampling state, kept in a
CUDA_TEXTURE_DESC (every cuTexRefSet* field is one of its fields, flags
included), plus the format cuTexRefSetFormat gives.  Every Get answers from
there.  A reference of a module (cuModuleGetTexRef: one handle per module
and name, invalid once the module is unloaded) is sent to the module's GPU
(the `texref` op) each time a Set leaves it bound with a known format: the
server binds it for the module's next launches, so launches recorded in C
see it too (the op follows them on the GPU's link).  The sim gives it to a
kernel's plugin by name (`launch.texref(name)`, `launch.surfref(name)`: the
objects `launch.texture(i)` and `launch.surface(i)` give); a GPU binds the
driver's own reference of the loaded module with the driver's cuTexRefSet*.
A reference made with cuTexRefCreate belongs to no module: it keeps its
state and no kernel can read it (cuParamSetTexRef refuses it, as CUDA does).

A Set the server refuses changes nothing.  What CUDA leaves undocumented,
rcuda chooses: a new reference has address modes WRAP, point filtering, no
flags and no format (cuTexRefGetFormat answers 0 and 0 channels until one
is set or an array bound); cuTexRefGetAddress answers the address the
texture reads from, cuTexRefSetAddress's pointer rounded down to the texture
alignment; a module's reference cannot be destroyed (its module owns it:
CUDA_ERROR_INVALID_VALUE).  The 32-bit exports (cuTexRefSetAddress,
cuTexRefSetAddress2D, cuTexRefGetAddress without _v2/_v3: CUDA 3.2's ABI)
stay unsupported, as the other 32-bit exports do.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from rcuda.array_rules import SURFACE_LOAD_STORE
from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..interposer import address, out_pointer
from ..runtime import textures as runtime_textures
from ..memory.arrays import FORMAT_BYTES
from ..runtime.arrays import desc_of
from .arrays import array_of, format_number, wire_format
from .handles import DriverModule, handles
from .registry import SUCCESS, driver, require_initialized
from .textures import KNOWN_FLAGS, texture_from

#: cuTexRefSetArray's and cuTexRefSetMipmappedArray's only flag: take the
#: array's format (cuda.h's CU_TRSA_OVERRIDE_FORMAT).
CU_TRSA_OVERRIDE_FORMAT = 0x01
#: CUaddress_mode (WRAP, CLAMP, MIRROR, BORDER) and CUfilter_mode (POINT, LINEAR).
ADDRESS_MODES, FILTER_MODES = range(4), range(2)
#: The dimensions an address mode is set for (CUDA_TEXTURE_DESC's addressMode[3]).
DIMENSIONS = range(3)

_lock = threading.RLock()
#: (DriverModule, name, "texture" | "surface") -> the module's reference: one handle each.
_module_references: dict[tuple, object] = {}


def ffi():
    return interposer.ffi


def rt():
    return interposer.rt


def _invalid(call: str, why: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {why}")


@dataclass(eq=False)
class TextureReference:
    handle: int
    module: DriverModule | None  # None: cuTexRefCreate's
    name: str | None
    desc: object                 # a cffi CUDA_TEXTURE_DESC *: the sampling state
    resource: dict | None = None  # what it is bound to (client/runtime/textures.py's dicts, without a format)
    format: tuple | None = None  # (wire format, channels): cuTexRefSetFormat's, or the bound array's


@dataclass(eq=False)
class SurfaceReference:
    handle: int
    module: DriverModule
    name: str
    array: object = None  # the CudaArray it is bound to


def _reference(handle, kind: type, call: str):
    require_initialized()
    value = address(handle)
    if not value:
        raise _invalid(call, f"a NULL {'CUtexref' if kind is TextureReference else 'CUsurfref'}")
    found = handles.find(value, kind)
    if found is None or (found.module is not None and found.module.unloaded):
        raise DriverError(CUresult.CUDA_ERROR_INVALID_HANDLE,
                          f"{call}: {value:#x} is not a live {'texture' if kind is TextureReference else 'surface'} "
                          f"reference (its module may be unloaded)")
    return found


def texture_reference(hTexRef, call: str) -> TextureReference:
    """The live texture reference `hTexRef` names."""
    return _reference(hTexRef, TextureReference, call)


def _device(ref):
    """The GPU a reference's resources must be on: its module's, or (a
    reference of no module) the current one."""
    return ref.module.device if ref.module is not None else rt().device()


def _check_on(ref, device, call: str) -> None:
    if device is not _device(ref):
        raise _invalid(call, f"the resource is on {device.label}, the reference's context is "
                             f"{_device(ref).label}'s")


def _memory(ref, ptr: int, size: int, call: str) -> None:
    """[ptr, ptr + size) lies in one device allocation of the reference's GPU."""
    allocation = rt().allocations.find(ptr, max(size, 1))
    if allocation is None:
        raise _invalid(call, f"{size} bytes at {ptr:#x} are not inside one device allocation")
    _check_on(ref, allocation.device, call)


# ------------------------------------------------------------------ sending the binding


def _publish(ref) -> None:
    """Bind a module's reference on its GPU as it now is, if it can be read:
    bound, with a format (an array's, or cuTexRefSetFormat's for memory)."""
    if ref.module is None or ref.module.unloaded:
        return
    device, module = ref.module.device, ref.module.module
    if isinstance(ref, SurfaceReference):
        if ref.array is None:
            return
        device.ensure_module(module)
        device.request("texref", module=module.key, name=ref.name, surface=1, texture=None,
                       resource=runtime_textures.wire_resource({"type": "array", "array": ref.array}))
        return
    resource = ref.resource
    if resource is None:
        return
    if resource["type"] in ("linear", "pitch2D"):
        if ref.format is None:
            return
        resource = {**resource, "format": ref.format, "desc": desc_of(*ref.format)}
    device.ensure_module(module)
    device.request("texref", module=module.key, name=ref.name, surface=0,
                   resource=runtime_textures.wire_resource(resource), texture=texture_from(ref.desc, ref.name))


def _change(ref, change) -> None:
    """Apply `change(ref)` and send the result; a refusal restores the state."""
    with _lock:
        if isinstance(ref, SurfaceReference):
            before = ref.array
        else:
            size = ffi().sizeof("CUDA_TEXTURE_DESC")
            before = (ref.resource, ref.format, bytes(ffi().buffer(ref.desc, size)))
        change(ref)
        try:
            _publish(ref)
        except BaseException:
            if isinstance(ref, SurfaceReference):
                ref.array = before
            else:
                ref.resource, ref.format = before[0], before[1]
                ffi().memmove(ref.desc, before[2], size)
            raise


# ------------------------------------------------------------------ references of a module, and new ones


def _module_reference(pRef, hmod, name, kind: str, call: str):
    out_pointer(pRef, "pTexRef" if kind == "texture" else "pSurfRef")
    require_initialized()
    module = handles.get(address(hmod), DriverModule, call)
    name = ffi().string(out_pointer(name, "name")).decode(errors="replace")
    if module.module.parsed.references().get(name) != kind:
        raise DriverError(CUresult.CUDA_ERROR_NOT_FOUND, f"{call}: the module has no {kind} reference {name!r}")
    with _lock:
        found = _module_references.get((module, name, kind))
        if found is None:
            if kind == "texture":
                found = TextureReference(handles.new_handle(), module, name, ffi().new("CUDA_TEXTURE_DESC *"))
            else:
                found = SurfaceReference(handles.new_handle(), module, name)
            handles.add(found)
            _module_references[(module, name, kind)] = found
    pRef[0] = ffi().cast("CUtexref" if kind == "texture" else "CUsurfref", found.handle)
    return SUCCESS


@driver()
def cuModuleGetTexRef(pTexRef, hmod, name):
    """A `.global .texref` of the module: the same handle each time;
    CUDA_ERROR_NOT_FOUND for any other name."""
    return _module_reference(pTexRef, hmod, name, "texture", "cuModuleGetTexRef")


@driver()
def cuModuleGetSurfRef(pSurfRef, hmod, name):
    """A `.global .surfref` of the module; CUDA_ERROR_NOT_FOUND for any other name."""
    return _module_reference(pSurfRef, hmod, name, "surface", "cuModuleGetSurfRef")


@driver()
def cuTexRefCreate(pTexRef):
    """A reference of no module: state only."""
    out_pointer(pTexRef, "pTexRef")
    require_initialized()
    created = TextureReference(handles.new_handle(), None, None, ffi().new("CUDA_TEXTURE_DESC *"))
    handles.add(created)
    pTexRef[0] = ffi().cast("CUtexref", created.handle)
    return SUCCESS


@driver()
def cuTexRefDestroy(hTexRef):
    """cuTexRefCreate's references only: a module's belongs to its module."""
    ref = texture_reference(hTexRef, "cuTexRefDestroy")
    if ref.module is not None:
        raise _invalid("cuTexRefDestroy", f"texture reference {ref.name} belongs to its module (cuModuleGetTexRef): "
                                          f"it is destroyed with the module")
    handles.remove(ref.handle)
    return SUCCESS


# ------------------------------------------------------------------ binding


def _array_flags(Flags: int, call: str) -> None:
    if Flags != CU_TRSA_OVERRIDE_FORMAT:
        raise _invalid(call, f"Flags {Flags:#x} (must be CU_TRSA_OVERRIDE_FORMAT)")


def _bind_array(hTexRef, hArray, Flags, mipmapped: bool, call: str):
    ref = texture_reference(hTexRef, call)
    _array_flags(Flags, call)
    array = array_of(hArray, call, mipmapped=mipmapped)
    _check_on(ref, array.device, call)

    def bind(ref):
        ref.resource = {"type": "mipmappedArray" if mipmapped else "array", "array": array}
        ref.format = (array.format, array.channels)
    _change(ref, bind)
    return SUCCESS


@driver()
def cuTexRefSetArray(hTexRef, hArray, Flags):
    """Flags must be CU_TRSA_OVERRIDE_FORMAT: the reference takes the array's format."""
    return _bind_array(hTexRef, hArray, Flags, False, "cuTexRefSetArray")


@driver()
def cuTexRefSetMipmappedArray(hTexRef, hMipmappedArray, Flags):
    return _bind_array(hTexRef, hMipmappedArray, Flags, True, "cuTexRefSetMipmappedArray")


def _properties(ref) -> dict:
    return _device(ref).properties


def _element_bytes(fmt: tuple) -> int:
    return FORMAT_BYTES[fmt[0]] * fmt[1]


@driver()
def cuTexRefSetAddress_v2(ByteOffset, hTexRef, dptr, bytes):  # noqa: A002 - cuda.h's name
    """Linear memory.  The texture reads from `dptr` rounded down to the
    texture alignment; *ByteOffset (ByteOffset may be NULL) is what the
    kernel adds to its fetches, 0 for memory cuMemAlloc gave."""
    call = "cuTexRefSetAddress"
    ref = texture_reference(hTexRef, call)
    _memory(ref, dptr, bytes, call)
    props = _properties(ref)
    if ref.format is not None:
        texels = bytes // _element_bytes(ref.format)
        if texels > props.get("maxTexture1DLinear", 1 << 27):
            raise _invalid(call, f"{texels} texels, more than the device's maxTexture1DLinear")
    offset = dptr % (props.get("textureAlignment") or 512)

    def bind(ref):
        ref.resource = {"type": "linear", "ptr": dptr, "size": bytes}
    _change(ref, bind)
    if ByteOffset != ffi().NULL:
        ByteOffset[0] = offset
    return SUCCESS


@driver("cuTexRefSetAddress2D_v3", "cuTexRefSetAddress2D_v2")
def cuTexRefSetAddress2D_v3(hTexRef, desc, dptr, Pitch):
    """Pitched memory (cuTexRefSetAddress2D_v2 has the same ABI): dptr and
    Pitch aligned as the device's texture and texture pitch alignments say,
    the sides within its maxTexture2DLinear.  The descriptor's format
    becomes the reference's."""
    call = "cuTexRefSetAddress2D"
    ref = texture_reference(hTexRef, call)
    out_pointer(desc, "desc")
    fmt = wire_format(desc.Format, desc.NumChannels, call)
    width, height = desc.Width, desc.Height
    props = _properties(ref)
    alignment, pitch_alignment = props.get("textureAlignment") or 512, props.get("texturePitchAlignment") or 32
    if dptr % alignment:
        raise _invalid(call, f"{dptr:#x} is not aligned to {alignment} bytes (CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT)")
    if Pitch % pitch_alignment:
        raise _invalid(call, f"a pitch of {Pitch} bytes is not a multiple of {pitch_alignment} "
                             f"(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT)")
    element = _element_bytes(fmt)
    limits = props.get("maxTexture2DLinear") or [1 << 17, 65000, 1 << 21]
    if not 0 < width <= limits[0] or not 0 < height <= limits[1] or Pitch > limits[2] or Pitch < width * element:
        raise _invalid(call, f"{width} x {height} texels of {element} bytes with a pitch of {Pitch} (the device "
                             f"allows {limits[0]} x {limits[1]}, a pitch up to {limits[2]})")
    _memory(ref, dptr, (height - 1) * Pitch + width * element, call)

    def bind(ref):
        ref.resource = {"type": "pitch2D", "ptr": dptr, "width": width, "height": height, "pitch": Pitch}
        ref.format = fmt
    _change(ref, bind)
    return SUCCESS


@driver()
def cuTexRefSetFormat(hTexRef, fmt, NumPackedComponents):
    """1, 2 or 4 components of a CUarray_format rcuda's textures read."""
    call = "cuTexRefSetFormat"
    ref = texture_reference(hTexRef, call)
    wire = wire_format(fmt, NumPackedComponents, call)

    def set_format(ref):
        ref.format = wire
    _change(ref, set_format)
    return SUCCESS


# ------------------------------------------------------------------ sampling state


def _set(hTexRef, call: str, apply) -> CUresult:
    _change(texture_reference(hTexRef, call), lambda ref: apply(ref.desc))
    return SUCCESS


def _dimension(dim: int, call: str) -> int:
    if dim not in DIMENSIONS:
        raise _invalid(call, f"dimension {dim} (0, 1 or 2)")
    return dim


@driver()
def cuTexRefSetAddressMode(hTexRef, dim, am):
    call = "cuTexRefSetAddressMode"
    texture_reference(hTexRef, call)
    _dimension(dim, call)
    if am not in ADDRESS_MODES:
        raise _invalid(call, f"address mode {am}")
    return _set(hTexRef, call, lambda desc: desc.addressMode.__setitem__(dim, am))


def _filter_mode(fm: int, call: str) -> int:
    if fm not in FILTER_MODES:
        raise _invalid(call, f"filter mode {fm}")
    return fm


@driver()
def cuTexRefSetFilterMode(hTexRef, fm):
    call = "cuTexRefSetFilterMode"
    texture_reference(hTexRef, call)
    _filter_mode(fm, call)
    return _set(hTexRef, call, lambda desc: setattr(desc, "filterMode", fm))


@driver()
def cuTexRefSetMipmapFilterMode(hTexRef, fm):
    call = "cuTexRefSetMipmapFilterMode"
    texture_reference(hTexRef, call)
    _filter_mode(fm, call)
    return _set(hTexRef, call, lambda desc: setattr(desc, "mipmapFilterMode", fm))


@driver()
def cuTexRefSetMipmapLevelBias(hTexRef, bias):
    return _set(hTexRef, "cuTexRefSetMipmapLevelBias", lambda desc: setattr(desc, "mipmapLevelBias", bias))


@driver()
def cuTexRefSetMipmapLevelClamp(hTexRef, minMipmapLevelClamp, maxMipmapLevelClamp):
    def apply(desc):
        desc.minMipmapLevelClamp, desc.maxMipmapLevelClamp = minMipmapLevelClamp, maxMipmapLevelClamp
    return _set(hTexRef, "cuTexRefSetMipmapLevelClamp", apply)


@driver()
def cuTexRefSetMaxAnisotropy(hTexRef, maxAniso):
    return _set(hTexRef, "cuTexRefSetMaxAnisotropy", lambda desc: setattr(desc, "maxAnisotropy", maxAniso))


@driver()
def cuTexRefSetBorderColor(hTexRef, pBorderColor):
    """Four floats, R, G, B, A (integer colours reinterpreted as floats)."""
    call = "cuTexRefSetBorderColor"
    texture_reference(hTexRef, call)
    color = [float(out_pointer(pBorderColor, "pBorderColor")[i]) for i in range(4)]

    def apply(desc):
        for i in range(4):
            desc.borderColor[i] = color[i]
    return _set(hTexRef, call, apply)


@driver()
def cuTexRefSetFlags(hTexRef, Flags):
    """CU_TRSF_READ_AS_INTEGER, NORMALIZED_COORDINATES, SRGB,
    DISABLE_TRILINEAR_OPTIMIZATION, SEAMLESS_CUBEMAP; any other bit is
    CUDA_ERROR_INVALID_VALUE."""
    call = "cuTexRefSetFlags"
    texture_reference(hTexRef, call)
    if Flags & ~KNOWN_FLAGS:
        raise _invalid(call, f"Flags {Flags:#x}")
    return _set(hTexRef, call, lambda desc: setattr(desc, "flags", Flags))


# ------------------------------------------------------------------ queries


def _bound(ref, kinds: tuple, call: str) -> dict:
    if ref.resource is None or ref.resource["type"] not in kinds:
        raise _invalid(call, f"the reference is bound to {ref.resource['type'] if ref.resource else 'nothing'}")
    return ref.resource


@driver()
def cuTexRefGetAddress_v2(pdptr, hTexRef):
    """The address the texture reads from; CUDA_ERROR_INVALID_VALUE unless
    bound to memory."""
    call = "cuTexRefGetAddress"
    out_pointer(pdptr, "pdptr")
    ref = texture_reference(hTexRef, call)
    resource = _bound(ref, ("linear", "pitch2D"), call)
    ptr = resource["ptr"]
    pdptr[0] = ptr - ptr % (_properties(ref).get("textureAlignment") or 512)
    return SUCCESS


@driver()
def cuTexRefGetArray(phArray, hTexRef):
    call = "cuTexRefGetArray"
    out_pointer(phArray, "phArray")
    phArray[0] = ffi().cast("CUarray", _bound(texture_reference(hTexRef, call), ("array",), call)["array"].handle)
    return SUCCESS


@driver()
def cuTexRefGetMipmappedArray(phMipmappedArray, hTexRef):
    call = "cuTexRefGetMipmappedArray"
    out_pointer(phMipmappedArray, "phMipmappedArray")
    array = _bound(texture_reference(hTexRef, call), ("mipmappedArray",), call)["array"]
    phMipmappedArray[0] = ffi().cast("CUmipmappedArray", array.handle)
    return SUCCESS


def _get(out, name: str, hTexRef, call: str, read) -> CUresult:
    out_pointer(out, name)
    out[0] = read(texture_reference(hTexRef, call).desc)
    return SUCCESS


@driver()
def cuTexRefGetAddressMode(pam, hTexRef, dim):
    call = "cuTexRefGetAddressMode"
    _dimension(dim, call)
    return _get(pam, "pam", hTexRef, call, lambda desc: desc.addressMode[dim])


@driver()
def cuTexRefGetFilterMode(pfm, hTexRef):
    return _get(pfm, "pfm", hTexRef, "cuTexRefGetFilterMode", lambda desc: desc.filterMode)


@driver()
def cuTexRefGetMipmapFilterMode(pfm, hTexRef):
    return _get(pfm, "pfm", hTexRef, "cuTexRefGetMipmapFilterMode", lambda desc: desc.mipmapFilterMode)


@driver()
def cuTexRefGetMipmapLevelBias(pbias, hTexRef):
    return _get(pbias, "pbias", hTexRef, "cuTexRefGetMipmapLevelBias", lambda desc: desc.mipmapLevelBias)


@driver()
def cuTexRefGetMipmapLevelClamp(pminMipmapLevelClamp, pmaxMipmapLevelClamp, hTexRef):
    call = "cuTexRefGetMipmapLevelClamp"
    out_pointer(pminMipmapLevelClamp, "pminMipmapLevelClamp")
    out_pointer(pmaxMipmapLevelClamp, "pmaxMipmapLevelClamp")
    desc = texture_reference(hTexRef, call).desc
    pminMipmapLevelClamp[0], pmaxMipmapLevelClamp[0] = desc.minMipmapLevelClamp, desc.maxMipmapLevelClamp
    return SUCCESS


@driver()
def cuTexRefGetMaxAnisotropy(pmaxAniso, hTexRef):
    return _get(pmaxAniso, "pmaxAniso", hTexRef, "cuTexRefGetMaxAnisotropy", lambda desc: desc.maxAnisotropy)


@driver()
def cuTexRefGetBorderColor(pBorderColor, hTexRef):
    call = "cuTexRefGetBorderColor"
    out_pointer(pBorderColor, "pBorderColor")
    desc = texture_reference(hTexRef, call).desc
    for i in range(4):
        pBorderColor[i] = desc.borderColor[i]
    return SUCCESS


@driver()
def cuTexRefGetFlags(pFlags, hTexRef):
    return _get(pFlags, "pFlags", hTexRef, "cuTexRefGetFlags", lambda desc: desc.flags)


@driver()
def cuTexRefGetFormat(pFormat, pNumChannels, hTexRef):
    """The format set or taken from the bound array (either output may be
    NULL); 0 and 0 channels while the reference has none."""
    ref = texture_reference(hTexRef, "cuTexRefGetFormat")
    number, channels = (format_number(ref.format[0]), ref.format[1]) if ref.format else (0, 0)
    if pFormat != ffi().NULL:
        pFormat[0] = number
    if pNumChannels != ffi().NULL:
        pNumChannels[0] = channels
    return SUCCESS


# ------------------------------------------------------------------ surface references


@driver()
def cuSurfRefSetArray(hSurfRef, hArray, Flags):
    """Flags must be 0; the array must have been made with
    CUDA_ARRAY3D_SURFACE_LDST."""
    call = "cuSurfRefSetArray"
    ref = _reference(hSurfRef, SurfaceReference, call)
    if Flags != 0:
        raise _invalid(call, f"Flags {Flags:#x} (must be 0)")
    array = array_of(hArray, call)
    if not array.flags & SURFACE_LOAD_STORE:
        raise _invalid(call, "the array was made without CUDA_ARRAY3D_SURFACE_LDST")
    _check_on(ref, array.device, call)

    def bind(ref):
        ref.array = array
    _change(ref, bind)
    return SUCCESS


@driver()
def cuSurfRefGetArray(phArray, hSurfRef):
    """CUDA_ERROR_INVALID_VALUE while no array is bound."""
    call = "cuSurfRefGetArray"
    out_pointer(phArray, "phArray")
    ref = _reference(hSurfRef, SurfaceReference, call)
    if ref.array is None:
        raise _invalid(call, f"surface reference {ref.name} is bound to no array")
    phArray[0] = ffi().cast("CUarray", ref.array.handle)
    return SUCCESS
