"""CUDA arrays, and texture and surface objects, as the program knows them.

A `CudaArray` is what a cudaArray_t / CUarray (or cudaMipmappedArray_t /
CUmipmappedArray) handle stands for: texel storage on one GPU, which the
server keeps under the handle's value (a level of a mipmapped array under
the mipmapped array's, with its level).  Handles are chosen here, so
creating an array answers the program before anything else is needed.

Texture and surface objects are the server's: their handles are what a
kernel receives, so the server picks them (a GPU's own).  Kept here is what
the program described, for the Get*Desc queries, by (device, handle).
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from rcuda.errors import CudaError, cudaError

#: Where array handles start: far from 0, and unlike any host or device pointer.
HANDLE_BASE = 0x7A00_0000_0000
#: Handles per array: the levels of a mipmapped array come after its own.
HANDLE_STRIDE = 64

#: The wire's channel formats and their bytes per channel.
FORMAT_BYTES = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "int32": 4, "uint32": 4, "float32": 4}


@dataclass
class CudaArray:
    handle: int
    device: object          # RemoteDevice
    format: str             # the wire's channel format: "uint8", ..., "float32"
    channels: int
    width: int
    height: int
    depth: int
    flags: int
    desc: tuple             # (x, y, z, w, kind): the cudaChannelFormatDesc a query returns
    levels: int = 0         # mipmapped: its number of levels; a plain array: 0
    level: int = 0          # a mipmapped array's level: which
    parent: "CudaArray | None" = None  # a level: its mipmapped array
    level_arrays: dict = field(default_factory=dict)  # a mipmapped array: level -> CudaArray

    @property
    def element_size(self) -> int:
        return FORMAT_BYTES[self.format] * self.channels

    @property
    def mipmapped(self) -> bool:
        return self.levels > 0

    @property
    def server_id(self) -> int:
        """The id the server knows the storage by (a level: its mipmapped array's)."""
        return self.parent.handle if self.parent is not None else self.handle

    def sides(self) -> tuple[int, int, int]:
        """(width, height, depth) in CUDA's convention, of this level."""
        return self.width, self.height, self.depth

    def storage(self) -> tuple[int, int, int]:
        """(bytes per row, rows, slices) of this array (level)."""
        return self.width * self.element_size, max(self.height, 1), max(self.depth, 1)


class ArrayTable:
    """The process's arrays by handle."""

    def __init__(self):
        self._lock = threading.Lock()
        self._arrays: dict[int, CudaArray] = {}
        self._next = itertools.count(0)

    def new_handle(self) -> int:
        return HANDLE_BASE + next(self._next) * HANDLE_STRIDE

    def add(self, array: CudaArray) -> CudaArray:
        with self._lock:
            self._arrays[array.handle] = array
        return array

    def find(self, handle: int) -> CudaArray | None:
        return self._arrays.get(handle)

    def get(self, handle: int, call: str, mipmapped: bool = False) -> CudaArray:
        found = self._arrays.get(handle)
        if found is None or found.mipmapped != mipmapped:
            kind = "mipmapped array" if mipmapped else "CUDA array"
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                            f"{call}: {handle:#x} is no {kind} of this process (freed already?)")
        return found

    def level(self, mipmapped: CudaArray, level: int, sides: tuple[int, int, int]) -> CudaArray:
        """The handle of one level (the same one each time it is asked for)."""
        with self._lock:
            found = mipmapped.level_arrays.get(level)
            if found is None:
                width, height, depth = sides
                found = CudaArray(mipmapped.handle + 1 + level, mipmapped.device, mipmapped.format,
                                  mipmapped.channels, width, height, depth, mipmapped.flags, mipmapped.desc,
                                  level=level, parent=mipmapped)
                mipmapped.level_arrays[level] = found
                self._arrays[found.handle] = found
            return found

    def remove(self, array: CudaArray) -> None:
        with self._lock:
            self._arrays.pop(array.handle, None)
            for level in array.level_arrays.values():
                self._arrays.pop(level.handle, None)

    def forget_device(self, device) -> None:
        with self._lock:
            self._arrays = {h: a for h, a in self._arrays.items() if a.device is not device}

    def clear(self) -> None:
        with self._lock:
            self._arrays.clear()


@dataclass
class SamplerObject:
    """A texture or surface object: what the program described, and where."""

    device: object
    handle: int
    surface: bool
    resource: dict   # the cudaResourceDesc fields as the program gave them
    texture: dict | None = None
    view: dict | None = None


class SamplerTable:
    """Texture and surface objects by (device ordinal, handle)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._objects: dict[tuple[int, int], SamplerObject] = {}

    def add(self, entry: SamplerObject) -> None:
        with self._lock:
            self._objects[(entry.device.ordinal, entry.handle)] = entry

    def find(self, handle: int, surface: bool, current, call: str) -> SamplerObject:
        """The object `handle` names: the current device's, else the only
        other device's that has one by that number (handles are per GPU)."""
        with self._lock:
            found = self._objects.get((current.ordinal, handle))
            if found is None or found.surface != surface:
                others = [o for (_, h), o in self._objects.items() if h == handle and o.surface == surface]
                found = others[0] if len(others) == 1 else None
        if found is None:
            kind = "surface" if surface else "texture"
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: no {kind} object {handle} (destroyed already?)")
        return found

    def remove(self, entry: SamplerObject) -> None:
        with self._lock:
            self._objects.pop((entry.device.ordinal, entry.handle), None)

    def forget_device(self, device) -> None:
        with self._lock:
            self._objects = {key: o for key, o in self._objects.items() if o.device is not device}

    def clear(self) -> None:
        with self._lock:
            self._objects.clear()
