"""The sim's CUDA arrays, texture and surface objects, and boxes of bytes.

An array level is a numpy byte block shaped (slices, rows, bytes per row);
a box of linear memory is a strided view of its allocation, so every region
copy is one numpy assignment.  Texture and surface objects are handles to
what a kernel plugin gets from `launch.texture(i)` / `launch.surface(i)`:
the texels as numpy views, [layer or z][y][x] then channels (the plugin
interface in docs/design.md), which the plugin samples itself.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from rcuda.array_rules import SURFACE_LOAD_STORE
from rcuda.errors import CudaError, cudaError

from .arrays import FORMATS, ArraySpec, Place, invalid
from .sim_plugins import IllegalAddress

#: cudaDevAttrTextureAlignment and cudaDevAttrTexturePitchAlignment of the
#: sim (its allocations start at the former: sim.PLACEMENT_ALIGNMENT).
TEXTURE_ALIGNMENT, TEXTURE_PITCH_ALIGNMENT = 512, 32

ADDRESS_MODES, FILTER_MODES, READ_MODES = range(4), range(2), range(2)
TEXTURE_FIELDS = {
    "addressMode": list, "filterMode": int, "readMode": int, "sRGB": int, "borderColor": list,
    "normalizedCoords": int, "maxAnisotropy": int, "mipmapFilterMode": int, "mipmapLevelBias": float,
    "minMipmapLevelClamp": float, "maxMipmapLevelClamp": float, "disableTrilinearOptimization": int,
    "seamlessCubemap": int,
}


@dataclass
class SimArray:
    spec: ArraySpec
    levels: list[np.ndarray]  # uint8, (slices, rows, bytes per row) each

    def texels(self, level: int = 0) -> np.ndarray:
        """A level as the plugin interface shapes it (a view)."""
        spec = self.spec
        return self.levels[level].view(spec.dtype).reshape(spec.texel_shape(level))


@dataclass
class TextureView:
    """What `launch.texture(i)` and `launch.surface(i)` return."""

    data: np.ndarray
    desc: dict
    resource: str
    view: dict | None = None
    levels: list[np.ndarray] = field(default_factory=list)  # a mipmapped array's, level 0 first


@dataclass
class _Object:
    resource: dict
    texture: dict | None
    view: dict | None
    texels: Callable[[], TextureView]  # resolved at each launch: the memory may be gone by then


class SimArrays:
    """One sim device's arrays and texture/surface objects."""

    def __init__(self, allocate: Callable[[int, str], np.ndarray], linear: Callable[[int, int, str], np.ndarray]):
        self._allocate = allocate  # (size, what) -> zeroed bytes, counted against the device's memory
        self._linear = linear      # (ptr, size, what) -> the session's device bytes there, checked
        self._arrays: dict[int, SimArray] = {}
        self._objects: dict[int, _Object] = {}
        self._surfaces: set[int] = set()
        self._handles = itertools.count(1)  # 0 is no object, as in CUDA
        # The driver's legacy texture and surface references, bound:
        # (module key, name, surface?) -> what a kernel of the module samples.
        self._references: dict[tuple[str, str, bool], _Object] = {}

    @property
    def bytes_in_use(self) -> int:
        return sum(level.nbytes for array in self._arrays.values() for level in array.levels)

    def clear(self) -> None:
        self._arrays.clear()
        self._objects.clear()
        self._surfaces.clear()
        self._references.clear()

    # ---------------------------------------------------------- arrays

    def create(self, array: int, spec: ArraySpec) -> None:
        if array in self._arrays:
            raise invalid(f"array id {array} is in use")
        levels = [self._allocate(spec.nbytes(level), "cudaMallocArray").reshape(spec.storage(level))
                  for level in range(max(spec.levels, 1))]
        self._arrays[array] = SimArray(spec, levels)

    def destroy(self, array: int) -> None:
        self._array(array, "cudaFreeArray")
        del self._arrays[array]

    def _array(self, array: int, what: str) -> SimArray:
        found = self._arrays.get(array)
        if found is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"{what}: no CUDA array {array}")
        return found

    # ---------------------------------------------------------- boxes

    def region(self, place: Place, extent: tuple[int, int, int], what: str) -> np.ndarray:
        """The box at `place` as a writable (depth, height, width) byte view."""
        width, height, depth = extent
        if place.is_array:
            found = self._array(place.array, what)
            place.check_in_array(found.spec, extent, what)
            level = found.levels[place.level]
            return level[place.z:place.z + depth, place.y:place.y + height, place.x:place.x + width]
        span = place.linear_span(extent, what)
        base = self._linear(place.ptr, span, what)
        return as_strided(base, shape=(depth, height, width), strides=(place.rows * place.pitch, place.pitch, 1))

    # ---------------------------------------------------------- textures, surfaces

    def texture_create(self, resource: dict, texture: dict, view: dict | None) -> int:
        _check_texture_desc(texture)
        texels = self._resolver(resource, "cudaCreateTextureObject")
        texels()  # every reference is checked now; a launch finds out again what is gone since
        handle = next(self._handles)
        self._objects[handle] = _Object(resource, dict(texture), view, texels)
        return handle

    def surface_create(self, resource: dict) -> int:
        if resource.get("type") != "array":
            raise invalid(f"cudaCreateSurfaceObject: a surface is over an array, not {resource.get('type')!r}")
        # An array without cudaArraySurfaceLoadStore is refused by the client
        # (client/runtime/textures.py check_surface); a GPU's driver takes it.
        handle = next(self._handles)
        self._objects[handle] = _Object(resource, None, None, self._resolver(resource, "cudaCreateSurfaceObject"))
        self._surfaces.add(handle)
        return handle

    def destroy_object(self, handle: int, surface: bool) -> None:
        what = "cudaDestroySurfaceObject" if surface else "cudaDestroyTextureObject"
        if handle not in self._objects or (handle in self._surfaces) != surface:
            raise invalid(f"{what}: no {'surface' if surface else 'texture'} object {handle}")
        del self._objects[handle]
        self._surfaces.discard(handle)

    def lookup(self, handle: int, surface: bool, kernel: str) -> TextureView:
        """The object a kernel was given, as the plugin interface shows it."""
        found = self._objects.get(handle)
        if found is None or (handle in self._surfaces) != surface:
            raise IllegalAddress(f"kernel {kernel}: {'surface' if surface else 'texture'} object {handle} "
                                 f"does not exist (destroyed, or never made on this GPU)")
        return self._view(found, surface)

    # ---------------------------------------------------------- texture and surface references

    def bind_reference(self, module_key: str, name: str, surface: bool, resource: dict,
                       texture: dict | None) -> None:
        """Bind a module's texture (or surface) reference for its kernels'
        next launches, checked as an object over the same resource is.  A
        texture reference over linear memory reads from its address rounded
        down to the texture alignment (the offset cuTexRefSetAddress gave the
        program, which its kernel adds to its fetches)."""
        what = f"{'surface' if surface else 'texture'} reference {name}"
        if surface:
            if resource.get("type") != "array":
                raise invalid(f"{what}: a surface reference is bound to an array, not {resource.get('type')!r:.40}")
            spec = self._array(_int(resource, "array"), what).spec
            if not spec.flags & SURFACE_LOAD_STORE:
                raise invalid(f"{what}: the array was made without CUDA_ARRAY3D_SURFACE_LDST")
            bound = _Object(resource, None, None, self._resolver(resource, what))
        else:
            if not isinstance(texture, dict):
                raise invalid(f"{what}: no texture description")
            _check_texture_desc(texture)
            if resource.get("type") == "linear":
                ptr, size = _int(resource, "ptr"), _int(resource, "size")
                offset = ptr % TEXTURE_ALIGNMENT
                resource = {**resource, "ptr": ptr - offset, "size": size + offset}
            texels = self._resolver(resource, what)
            texels()
            bound = _Object(resource, dict(texture), None, texels)
        self._references[(module_key, name, surface)] = bound

    def reference(self, module_key: str, name: str, surface: bool, kernel: str) -> TextureView:
        """What `launch.texref(name)` (`launch.surfref(name)`) gives a kernel
        of the module: the reference as it is bound now."""
        found = self._references.get((module_key, name, surface))
        if found is None:
            raise IllegalAddress(f"kernel {kernel}: {'surface' if surface else 'texture'} reference {name} is not "
                                 f"bound (cu{'Surf' if surface else 'Tex'}RefSet* never bound it to memory or an "
                                 f"array)")
        return self._view(found, surface)

    def _view(self, found: _Object, surface: bool) -> TextureView:
        view = found.texels()
        if not surface:
            view.data = view.data.view()
            view.data.flags.writeable = False
            view.desc = found.texture
            view.view = found.view
        return view

    def _resolver(self, resource: dict, what: str) -> Callable[[], TextureView]:
        kind = resource.get("type")
        if kind in ("array", "mipmappedArray"):
            array, level = _int(resource, "array"), resource.get("level", 0)
            found = self._array(array, what)
            if kind == "mipmappedArray" and not found.spec.levels:
                raise invalid(f"{what}: array {array} is not a mipmapped array")
            found.spec.check_level(level if type(level) is int else -1)

            def texels() -> TextureView:
                current = self._arrays.get(array)
                if current is None:
                    raise IllegalAddress(f"{what}: its CUDA array was freed")
                if kind == "array":
                    return TextureView(current.texels(level), {}, kind)
                levels = [current.texels(n) for n in range(len(current.levels))]
                return TextureView(levels[0], {}, kind, levels=levels)
            return texels
        if kind not in ("linear", "pitch2D"):
            raise invalid(f"{what}: resource type {kind!r}")
        dtype, channels = _format(resource, what)
        element = dtype.itemsize * channels
        ptr = _int(resource, "ptr")
        if ptr % TEXTURE_ALIGNMENT:
            raise invalid(f"{what}: {ptr:#x} is not aligned to {TEXTURE_ALIGNMENT} bytes (cudaDevAttrTextureAlignment)")
        if kind == "linear":
            count = _int(resource, "size") // element
            rows, strides, span = (count,), (element,), count * element
        else:
            width, height, pitch = (_int(resource, f) for f in ("width", "height", "pitch"))
            if pitch % TEXTURE_PITCH_ALIGNMENT or pitch < width * element or not width or not height:
                raise invalid(f"{what}: a pitch2D resource of {width} x {height} elements with a pitch of {pitch} "
                              f"bytes (a multiple of {TEXTURE_PITCH_ALIGNMENT}, at least a row)")
            rows, strides, span = (height, width), (pitch, element), (height - 1) * pitch + width * element
        self._linear(ptr, span, what)

        def texels() -> TextureView:
            try:
                base = self._linear(ptr, span, what)
            except CudaError as exc:
                raise IllegalAddress(f"{what}: {exc}") from None
            # Each element's bytes as the last axis, which the dtype view turns into channels.
            data = as_strided(base, shape=rows + (element,), strides=strides + (1,)).view(dtype)
            return TextureView(data if channels > 1 else data[..., 0], {}, kind)
        return texels


def _int(resource: dict, name: str) -> int:
    value = resource.get(name)
    if type(value) is not int or value < 0:
        raise invalid(f"resource field {name!r} must be a non-negative integer, not {value!r:.40}")
    return value


def _format(resource: dict, what: str) -> tuple[np.dtype, int]:
    name, channels = resource.get("format"), resource.get("channels")
    if name not in FORMATS or channels not in (1, 2, 4):
        raise CudaError(cudaError.cudaErrorInvalidChannelDescriptor,
                        f"{what}: {channels} channel(s) of {name!r}")
    return FORMATS[name], channels


def _check_texture_desc(texture: dict) -> None:
    for name, kind in TEXTURE_FIELDS.items():
        value = texture.get(name)
        if kind is float and type(value) is int:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise invalid(f"cudaCreateTextureObject: texture field {name} = {value!r:.40}")
    modes = texture["addressMode"]
    if len(modes) != 3 or any(mode not in ADDRESS_MODES for mode in modes) or len(texture["borderColor"]) != 4 \
            or texture["filterMode"] not in FILTER_MODES or texture["readMode"] not in READ_MODES \
            or texture["mipmapFilterMode"] not in FILTER_MODES:
        raise invalid(f"cudaCreateTextureObject: a texture description out of range: {texture}")
