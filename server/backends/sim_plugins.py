"""Sim kernel plugins: the files, the names, and the `launch` object they see.

A plugin file is Python that defines `KERNELS = {name: fn(launch)}` and
optionally `COSTS = {name: fn(launch) -> seconds}` (see docs/design.md, "Sim kernel
plugins", a stable interface).  A name is the kernel's mangled name, its
demangled signature, or the demangled name without parameter list and return
type (`vectorAdd`, `ns::scale<float>`); a mangled match wins over the others.
"""
from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import math
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import cxxfilt
import numpy as np

from .base import AllocationTable, ParamLayout

log = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "RCUDA_SIM_KERNELS"

_module_numbers = itertools.count()


class PluginLoadError(Exception):
    """A plugin file could not be loaded; the message names the file."""


# ---------------------------------------------------------------- names


def demangle(mangled: str) -> str:
    """The C++ name behind `mangled`; names that are not mangled (extern "C"
    kernels) come back unchanged."""
    try:
        return cxxfilt.demangle(mangled)
    except cxxfilt.Error:
        return mangled


def strip_parameter_list(demangled: str) -> str:
    """`ns::scale<float>(float*, float, int)` -> `ns::scale<float>`: drop the
    final balanced parenthesised group (the one that ends the string)."""
    text = demangled.rstrip()
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return text[:i].rstrip()
    return text  # unbalanced: leave it alone


def strip_return_type(name: str) -> str:
    """`void scale<float>` -> `scale<float>`: demangled function templates
    carry their return type.  Keeps what follows the last space that is not
    inside (), [], {} or <> (so `foo<unsigned int>` and
    `(anonymous namespace)::foo` stay whole)."""
    nesting = 0  # (), [], {}
    angles = 0   # <>, counted outside (), [], {} only: `foo<(3>2)>`
    last_space = -1
    for i, char in enumerate(name):
        if char in "([{":
            nesting += 1
        elif char in ")]}":
            nesting -= 1
        elif nesting == 0 and char == "<":
            angles += 1
        elif nesting == 0 and char == ">":
            angles -= 1
        elif char == " " and nesting == 0 and angles == 0:
            last_space = i
    return name[last_space + 1:]


def short_name(demangled: str) -> str:
    """The plugin key a user writes: no parameter list, no return type."""
    return strip_return_type(strip_parameter_list(demangled))


def lookup_keys(mangled: str) -> list[str]:
    """The keys that may name kernel `mangled`, strongest first."""
    demangled = demangle(mangled)
    keys = [mangled, demangled, short_name(demangled)]
    return list(dict.fromkeys(keys))  # unique, order kept


# ---------------------------------------------------------------- files


@dataclass(frozen=True)
class KernelImplementation:
    name: str                       # the key that matched
    run: Callable                   # fn(launch)
    cost: Callable | None           # fn(launch) -> seconds of modelled GPU time
    source: str                     # the plugin file


class KernelLibrary:
    """The kernels of all plugin files of one backend, loaded once."""

    def __init__(self, paths=()):
        self.files: list[str] = []
        self._kernels: dict[str, tuple[Callable, str]] = {}  # key -> (fn, file)
        self._costs: dict[str, Callable] = {}
        for path in paths:
            self.load(path)

    def load(self, path: str | os.PathLike) -> None:
        path = str(Path(path).resolve())
        if path in self.files:
            return  # named twice (e.g. --kernels and RCUDA_SIM_KERNELS): load once
        module = _import_file(path)
        kernels = _read_table(module, path, "KERNELS", required=True)
        costs = _read_table(module, path, "COSTS", required=False)
        for key, fn in kernels.items():
            if key in self._kernels:
                log.warning("sim kernel %r from %s replaces the one from %s", key, path, self._kernels[key][1])
            self._kernels[key] = (fn, path)
        self._costs.update(costs)
        self.files.append(path)
        log.info("sim kernels from %s: %s", path, ", ".join(sorted(kernels)) or "(none)")

    def find(self, mangled: str) -> KernelImplementation | None:
        for key in lookup_keys(mangled):
            if key in self._kernels:
                fn, source = self._kernels[key]
                return KernelImplementation(key, fn, self._cost_for(mangled), source)
        return None

    def _cost_for(self, mangled: str) -> Callable | None:
        for key in lookup_keys(mangled):
            if key in self._costs:
                return self._costs[key]
        return None

    def __len__(self) -> int:
        return len(self._kernels)


def kernel_files_from_environment() -> list[str]:
    """The files listed in RCUDA_SIM_KERNELS (separated by ':')."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "")
    return [entry for entry in value.split(os.pathsep) if entry.strip()]


def _import_file(path: str):
    if not os.path.isfile(path):
        raise PluginLoadError(f"sim kernel plugin {path}: no such file")
    # A unique module name per load: two plugins called kernels.py must not
    # replace each other in sys.modules.
    stem = re.sub(r"\W", "_", Path(path).stem)
    module_name = f"rcuda_sim_plugin_{next(_module_numbers)}_{stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginLoadError(f"sim kernel plugin {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, SystemExit, ...: all refuse the file
        del sys.modules[module_name]
        raise PluginLoadError(f"sim kernel plugin {path} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _read_table(module, path: str, name: str, required: bool) -> dict:
    table = getattr(module, name, None)
    if table is None:
        if required:
            raise PluginLoadError(f"sim kernel plugin {path} defines no {name} = {{name: function}} dict")
        return {}
    if not isinstance(table, dict):
        raise PluginLoadError(f"sim kernel plugin {path}: {name} must be a dict, not {type(table).__name__}")
    for key, fn in table.items():
        if not isinstance(key, str) or not callable(fn):
            raise PluginLoadError(f"sim kernel plugin {path}: {name}[{key!r}] must map a kernel name (str) "
                                  f"to a function, not {type(fn).__name__}")
    return dict(table)


# ---------------------------------------------------------------- launch


class IllegalAddress(Exception):
    """A kernel touched memory outside the session's allocations: the launch
    fails with cudaErrorIllegalAddress."""


class Launch:
    """What a plugin kernel gets: the launch configuration, its parameters,
    and views of device memory."""

    def __init__(self, *, name: str, demangled: str, grid, block, shared_mem: int, stream: int, device: int,
                 params: bytes, layout: ParamLayout, memory: AllocationTable, symbols: Callable | None = None,
                 objects: Callable | None = None, cluster=(1, 1, 1), references: Callable | None = None):
        self.name = name  # mangled
        self.demangled = demangled
        self.grid = tuple(grid)
        self.block = tuple(block)
        # Blocks per thread block cluster in x, y, z ((1, 1, 1): not a cluster
        # launch); the grid is a whole number of clusters.  An rcuda addition.
        self.cluster = tuple(cluster)
        self.shared_mem = shared_mem
        self.stream = stream
        self.device = device
        self._raw = params
        self._layout = layout
        self._memory = memory
        self._symbols = symbols
        self._objects = objects  # (handle, surface?, kernel) -> the texture or surface object's view
        self._references = references  # (name, surface?, kernel) -> a module reference's view

    @property
    def params(self) -> list[bytes]:
        """The raw bytes of each parameter."""
        return [bytes(self._raw[o:o + s]) for o, s in zip(self._layout.offsets, self._layout.sizes)]

    def param(self, index: int, fmt: str):
        """Parameter `index` unpacked with struct format `fmt` (from its first
        byte; a format may read less than the whole parameter).  One value,
        or a tuple when the format has several."""
        offsets, sizes = self._layout.offsets, self._layout.sizes
        if not 0 <= index < len(offsets):
            raise ValueError(f"launch.param({index}, {fmt!r}): kernel {self.demangled} has "
                             f"{len(offsets)} parameter(s)")
        needed = struct.calcsize(fmt)
        if needed > sizes[index]:
            raise ValueError(f"launch.param({index}, {fmt!r}): the format needs {needed} bytes, parameter "
                             f"{index} of kernel {self.demangled} has {sizes[index]}")
        values = struct.unpack_from(fmt, self._raw, offsets[index])
        return values[0] if len(values) == 1 else values

    def array(self, ptr: int, dtype, shape) -> np.ndarray:
        """A writable numpy view of `shape` elements of `dtype` at device
        address `ptr`.  IllegalAddress unless the whole range lies inside one
        of the session's allocations on this GPU or on a peer it enabled."""
        dtype = np.dtype(dtype)
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise ValueError(f"launch.array: negative shape {shape}")
        ptr = int(ptr)
        size = math.prod(shape) * dtype.itemsize
        if size == 0:
            return np.empty(shape, dtype)  # touches no memory, like a kernel with n == 0
        allocation = self._memory.containing(ptr, size)
        if allocation is None:
            raise IllegalAddress(f"kernel {self.demangled}: access to {size} bytes at {ptr:#x} "
                                 f"{self._explain(ptr, size)}")
        offset = ptr - allocation.start
        return allocation.memory[offset:offset + size].view(dtype).reshape(shape)

    def symbol(self, name: str) -> int:
        """The device address of a `__device__` or `__constant__` variable of
        the kernel's program, by its name in the source (`counter`,
        `ns::table`) or mangled: for kernels that read such variables
        directly (an rcuda addition to the plugin interface)."""
        if self._symbols is None:
            raise ValueError(f"launch.symbol({name!r}): no variables are known for kernel {self.demangled}")
        return self._symbols(name)

    def texture(self, index: int):
        """Parameter `index`, a cudaTextureObject_t: the object's `.data`
        (read-only texels, [layer or z][y][x] then channels), `.desc` (its
        cudaTextureDesc by field name) and `.resource` ("linear", "pitch2D",
        "array", "mipmappedArray").  A destroyed object is an illegal address."""
        return self._object(index, surface=False)

    def surface(self, index: int):
        """Parameter `index`, a cudaSurfaceObject_t: `.data`, writable texels."""
        return self._object(index, surface=True)

    def texref(self, name: str):
        """The kernel's module's texture reference `name` (a `.global .texref`,
        what the legacy `texture<>` declared; cuModuleGetTexRef's), as the
        program bound it with cuTexRefSet*: the same object `texture(i)`
        gives (`.data` over linear memory starts at the address rounded down
        to the texture alignment, as the hardware reads it).  By its name,
        mangled or demangled.  An rcuda addition to the interface; an
        unbound or unknown reference is an illegal address."""
        return self._reference(name, surface=False)

    def surfref(self, name: str):
        """The module's surface reference `name` (cuModuleGetSurfRef's),
        bound with cuSurfRefSetArray: as `surface(i)`.  An rcuda addition."""
        return self._reference(name, surface=True)

    def _reference(self, name: str, surface: bool):
        if self._references is None:
            raise IllegalAddress(f"kernel {self.demangled}: reference {name!r}: this device has no texture "
                                 f"references")
        return self._references(name, surface, self.demangled)

    def _object(self, index: int, surface: bool):
        handle = self.param(index, "Q")
        if self._objects is None:
            raise IllegalAddress(f"kernel {self.demangled}: object {handle}: this device has no texture objects")
        return self._objects(handle, surface, self.demangled)

    def _explain(self, ptr: int, size: int) -> str:
        start = self._memory.containing(ptr, 1)
        if start is not None:
            return (f"runs {ptr + size - start.end} bytes past the end of the {start.size}-byte allocation "
                    f"at {start.start:#x}")
        return "is outside every allocation of this session"
