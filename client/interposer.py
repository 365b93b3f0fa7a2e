"""The interposer as the client's functions see it: its cffi `ffi` and
`lib`, the process's client state `rt` (client/state.py's Runtime), and
helpers that read and write C arguments.

`bind` sets them once, when the interposer starts the embedded interpreter
(client/entrypoints.py); every implementation of a CUDA function reads them
from here.  This module imports nothing of the client, so every package may
import it.
"""
from __future__ import annotations

from rcuda.errors import CudaError, cudaError

ffi = None  # the interposer's cffi FFI
lib = None  # its library (rcuda_* functions, CUDA's constants)
rt = None   # the process's client state: a client/state.py Runtime


def bind(the_ffi, the_lib, runtime) -> None:
    global ffi, lib, rt
    ffi, lib, rt = the_ffi, the_lib, runtime


def address(pointer) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def out_pointer(pointer, what: str):
    if pointer == ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what} is NULL")
    return pointer


def c_string(text: str):
    """A NUL-terminated C string that lives as long as the process (CUDA's
    name and error strings are static too)."""
    cached = rt.c_strings.get(text)
    if cached is None:
        cached = rt.c_strings[text] = ffi.new("char[]", text.encode())
    return cached


def stream_of(handle, per_thread: bool = False, device=None):
    """The Stream a program's cudaStream_t means (see client/streams.py)."""
    return rt.streams.resolve(address(handle), device or rt.device(), per_thread)


def fill_struct(pointer, values: dict) -> None:
    """Set a cffi struct's fields from a dict, zeroing the rest.  Strings are
    stored NUL-terminated, bytes raw (e.g. the 16-byte uuid), lists into
    arrays.  Names this CUDA does not know are skipped: a newer server may
    send fields an older client lacks."""
    struct = pointer[0]
    size = ffi.sizeof(struct)
    ffi.memmove(pointer, bytes(size), size)
    fields = dict(ffi.typeof(struct).fields)
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            continue
        if isinstance(value, str):
            value = value.encode()[:ffi.sizeof(field.type) - 1]
        if isinstance(value, bytes):
            ffi.memmove(ffi.addressof(struct, name), value[:ffi.sizeof(field.type)],
                        min(len(value), ffi.sizeof(field.type)))
        elif isinstance(value, (list, tuple)):
            array = getattr(pointer, name)
            for i, item in enumerate(value[:len(array)]):
                array[i] = item
        else:
            setattr(pointer, name, value)
