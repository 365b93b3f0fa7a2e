"""The cupy backend's library provider (server/library_calls.py): NVIDIA's own
cuBLAS, cuFFT and cuRAND, called through ctypes on the session's streams.

Every cuBLAS computation is called by its exported name with the arguments
the client encoded (client/libraries/cublas.py), converted by the parameter
declarations of rcuda/_generated/libraries_api.py: values as their C type,
device pointers as addresses, host scalars as pointers to a local copy
(the handle in CUBLAS_POINTER_MODE_HOST), device scalars and results as
device addresses (CUBLAS_POINTER_MODE_DEVICE).  cuFFT plans are made with
cufftMakePlanMany64, cuRAND generators (device and host ones) with their
own calls, so a host generator runs the same library as a device one;
cuRAND's host tables (direction vectors, scramble constants) are copied
from the library's.

The libraries are found as the program's would be (the loader's path),
else in the nvidia-* wheels' folder."""
from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import numpy as np

from rcuda import blas_rules, curand_calls
from rcuda._generated.libraries_api import LIBRARIES, LIBRARY_FUNCTIONS
from rcuda.errors import ProtocolError
from rcuda.library_errors import LibraryError

from ..library_calls import matmul_epilogue

#: C parameter types -> ctypes, for values passed as they are.
VALUE_TYPES = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "long long": ctypes.c_longlong,
               "size_t": ctypes.c_size_t, "float": ctypes.c_float, "double": ctypes.c_double,
               "unsigned long long": ctypes.c_ulonglong, "unsigned int": ctypes.c_uint}
SCALAR_TYPES = {"f4": ctypes.c_float, "f8": ctypes.c_double, "c8": ctypes.c_float * 2, "c16": ctypes.c_double * 2,
                "f2": ctypes.c_uint16, "i4": ctypes.c_int, "i8": ctypes.c_int64}
#: The cuFFT executions and how many arguments follow the plan (the input, the output, a direction).
CUFFT_EXECUTIONS = {"cufftExecC2C": 3, "cufftExecZ2Z": 3, "cufftExecR2C": 2, "cufftExecC2R": 2,
                    "cufftExecD2Z": 2, "cufftExecZ2D": 2}
#: struct formats of cuRAND's values (rcuda/curand_calls.py) -> ctypes
CTYPES = {"Q": ctypes.c_ulonglong, "i": ctypes.c_int, "I": ctypes.c_uint, "f": ctypes.c_float, "d": ctypes.c_double}
_loaded: dict[str, ctypes.CDLL] = {}


def load(library: str) -> ctypes.CDLL:
    """NVIDIA's `library` (cublas, cufft, curand)."""
    if library not in _loaded:
        soname = LIBRARIES[library]["soname"]
        try:
            _loaded[library] = ctypes.CDLL(soname)
        except OSError:
            spec = importlib.util.find_spec("nvidia")
            folders = [Path(f) / "cu13" / "lib" / soname for f in (spec.submodule_search_locations or [])] \
                if spec else []
            found = next((f for f in folders if f.exists()), None)
            if found is None:
                raise LibraryError(LIBRARIES[library]["not_supported"],
                                   f"{soname} is not installed on this server (pip install nvidia-{library})") \
                    from None
            _loaded[library] = ctypes.CDLL(str(found))
    return _loaded[library]


def check(library: str, call: str, status: int) -> None:
    if status:
        name = next((n for n, v in LIBRARIES[library]["statuses"].items() if v == status), str(status))
        raise LibraryError(name, f"{call} returned {name}")


class CudaObject:
    __slots__ = ("library", "handle", "host")

    def __init__(self, library: str, handle, host: bool = False):
        self.library, self.handle, self.host = library, handle, host


class CudaLibraries:
    def __init__(self, device):
        self.device = device

    def _stream(self, stream: int) -> int:
        return self.device._streams[stream]

    def create(self, call: str, args: list) -> CudaObject:
        library = "cublas" if call.startswith("cublas") else "cufft" if call.startswith("cufft") else "curand"
        lib = load(library)
        with self.device._cuda(call):
            if library == "curand":
                handle = ctypes.c_void_p()
                check(library, call, getattr(lib, call)(ctypes.byref(handle), ctypes.c_int(args[0])))
                return CudaObject(library, handle, host=call.endswith("Host"))
            handle = ctypes.c_void_p() if library == "cublas" else ctypes.c_int()
            check(library, call, getattr(lib, call)(ctypes.byref(handle)))
        return CudaObject(library, handle)

    def table(self, call: str, args: list) -> bytes:
        """One of cuRAND's host tables (curandGetDirectionVectors32/64 of a
        set, curandGetScrambleConstants32/64), whole: NVIDIA's own, copied
        from the library's host memory.  No GPU work: no context needed."""
        _, _, sets = curand_calls.TABLES[call]
        if len(args) != (1 if sets else 0) or not all(isinstance(a, int) for a in args):
            raise ProtocolError(f"lib: {call} takes {'a direction vector set' if sets else 'no arguments'}")
        lib = load("curand")
        pointer = ctypes.c_void_p()
        check("curand", call, getattr(lib, call)(ctypes.byref(pointer), *(ctypes.c_int(a) for a in args)))
        if not pointer.value:
            raise LibraryError("CURAND_STATUS_INTERNAL_ERROR", f"{call} gave a NULL table")
        return ctypes.string_at(pointer.value, curand_calls.table_bytes(call))

    def destroy(self, obj: CudaObject) -> None:
        name = {"cublas": "cublasDestroy_v2", "cufft": "cufftDestroy", "curand": "curandDestroyGenerator"}
        with self.device._cuda(name[obj.library]):
            getattr(load(obj.library), name[obj.library])(obj.handle)

    def run(self, call: str, obj: CudaObject, args: list, stream: int, answered: bool):
        with self.device._cuda(call):
            return {"cublas": self._cublas, "cufft": self._cufft, "curand": self._curand}[obj.library](
                call, obj, args, self._stream(stream))

    def _cublas(self, call: str, obj: CudaObject, args: list, stream: int):
        lib = load("cublas")
        check("cublas", "cublasSetStream", lib.cublasSetStream_v2(obj.handle, ctypes.c_void_p(stream)))
        if call in ("cublasSetMathMode", "cublasSetAtomicsMode"):
            check("cublas", call, getattr(lib, call)(obj.handle, ctypes.c_int(args[0])))
            return [], []
        if call == "cublasSetWorkspace_v2":
            check("cublas", call, lib.cublasSetWorkspace_v2(obj.handle, ctypes.c_void_p(args[0]),
                                                            ctypes.c_size_t(args[1])))
            return [], []
        if call == blas_rules.MATMUL_EPILOGUE:  # rcuda's own call: library_calls.py defines it, for CuPy here
            self._matmul_epilogue(args, stream)
            return [], []
        row = LIBRARY_FUNCTIONS.get(call)
        if row is None or not row.get("roles"):
            raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"{call} is not a cuBLAS computation")
        if len(args) != len(row["params"]) - 1:  # ctypes would pass whatever it is given
            raise ProtocolError(f"lib: {call} takes {len(row['params']) - 1} arguments after the handle, "
                                f"not {len(args)}")
        device_mode = any(isinstance(a, dict) and (a.get("scalar") or a.get("out")) for a in args)
        check("cublas", "cublasSetPointerMode", lib.cublasSetPointerMode_v2(obj.handle, int(device_mode)))
        converted, outputs = [obj.handle], []
        for (_, decl), role, arg in zip(row["params"][1:], row["roles"][1:], args):
            converted.append(_convert(decl, role, arg, outputs))
        check("cublas", call, getattr(lib, call)(*converted))
        return [_python(box) for box in outputs], []

    def _matmul_epilogue(self, args: list, stream: int) -> None:
        """cuBLASLt's epilogue (library_calls.matmul_epilogue) with CuPy's
        array operations in `stream` (a cudaStream_t), on views of the
        device's memory: CuPy arrays over memory it does not own (the
        session's cudaMalloc memory), strided as the matrices are laid out.
        Its temporaries come from CuPy's memory pool, which keeps them."""
        import cupy
        index = self.device.index

        def view(ptr: int, dtype, batch: int, rows: int, cols: int, ld: int, stride: int):
            dtype = np.dtype(dtype)
            item = dtype.itemsize
            size = (stride * (batch - 1) + ld * (cols - 1) + rows) * item
            memory = cupy.cuda.UnownedMemory(ptr, size, None, index)
            return cupy.ndarray((batch, rows, cols), dtype, cupy.cuda.MemoryPointer(memory, 0),
                                strides=(stride * item, item, ld * item))

        with cupy.cuda.Device(index), cupy.cuda.ExternalStream(stream, index):
            matmul_epilogue(cupy, view, args)

    def _cufft(self, call: str, obj: CudaObject, args: list, stream: int):
        lib = load("cufft")
        plan = obj.handle
        if call == "cufftMakePlanMany64":
            rank, n, inembed, istride, idist, onembed, ostride, odist, fft_type, batch = args
            if rank not in (1, 2, 3) or any(v is not None and len(v) != rank for v in (n, inembed, onembed)):
                raise ProtocolError(f"lib: {call}: rank {rank!r:.20} and size lists that do not match it")
            sizes = (ctypes.c_longlong * rank)(*n)
            embeds = [(ctypes.c_longlong * rank)(*e) if e is not None else None for e in (inembed, onembed)]
            work = ctypes.c_size_t()
            check("cufft", call, lib.cufftMakePlanMany64(plan, rank, sizes, embeds[0], ctypes.c_longlong(istride),
                                                         ctypes.c_longlong(idist), embeds[1],
                                                         ctypes.c_longlong(ostride), ctypes.c_longlong(odist),
                                                         fft_type, ctypes.c_longlong(batch), ctypes.byref(work)))
            return [work.value], []
        if call == "cufftSetWorkArea":
            check("cufft", call, lib.cufftSetWorkArea(plan, ctypes.c_void_p(args[0])))
            return [], []
        if call == "cufftSetAutoAllocation":
            check("cufft", call, lib.cufftSetAutoAllocation(plan, args[0]))
            return [], []
        arity = CUFFT_EXECUTIONS.get(call)
        if arity is None or len(args) != arity or not all(isinstance(a, int) for a in args):
            raise ProtocolError(f"lib: {call} is not a cuFFT execution of {arity} integer arguments")
        check("cufft", "cufftSetStream", lib.cufftSetStream(plan, ctypes.c_void_p(stream)))
        pointers = [ctypes.c_void_p(a) for a in args[:2]]
        check("cufft", call, getattr(lib, call)(plan, *pointers, *(ctypes.c_int(a) for a in args[2:])))
        return [], []

    def _curand(self, call: str, obj: CudaObject, args: list, stream: int):
        lib = load("curand")
        generator = obj.handle
        if call in curand_calls.SETTINGS:
            value_type = CTYPES[curand_calls.SETTINGS[call][0]]
            check("curand", call, getattr(lib, call)(generator, value_type(args[0])))
            return [], []
        if not obj.host:
            check("curand", "curandSetStream", lib.curandSetStream(generator, ctypes.c_void_p(stream)))
        if call == "curandGenerateSeeds":
            check("curand", call, lib.curandGenerateSeeds(generator))
            return [], []
        generate = curand_calls.GENERATES.get(call)
        if generate is None:
            raise LibraryError("CURAND_STATUS_INTERNAL_ERROR", f"{call} is not served")
        fmt, expected, _ = generate
        ptr, count, *parameters = args
        if not isinstance(count, int) or count < 0 or len(parameters) != expected:
            raise ProtocolError(f"lib: {call} takes a pointer, a count and {expected} parameters")
        host = np.empty(count, np.dtype(fmt)) if obj.host else None
        target = ctypes.c_void_p(host.ctypes.data if obj.host else ptr)
        # each parameter as the C call reads it (ctypes would pass a double where a float is read): the
        # float forms' mean and stddev are floats, Poisson's lambda a double, its method an int
        extra = [CTYPES[kind](p) for kind, p in zip(curand_calls.PARAMETERS.get(call, ""), parameters)]
        check("curand", call, getattr(lib, call)(generator, target, ctypes.c_size_t(count), *extra))
        return [], ([memoryview(host.tobytes())] if obj.host else [])


def _convert(decl: str, role: str, arg, outputs: list):
    """One argument as ctypes passes it to the library."""
    if role == "value":
        base = decl.rsplit(" ", 1)[0].replace("const", "").strip()
        ctype = VALUE_TYPES.get(base, ctypes.c_int)  # enums are ints
        return ctype(arg)
    if role == "dev":
        return ctypes.c_void_p(arg)
    if isinstance(arg, dict) and "scalar" in arg:
        return ctypes.c_void_p(arg["scalar"])
    if isinstance(arg, dict) and "out" in arg:
        if arg["out"] is not None:
            return ctypes.c_void_p(arg["out"])
        box = SCALAR_TYPES[arg["dtype"]]()
        outputs.append(box)
        return ctypes.byref(box)
    dtype = arg["dtype"] if isinstance(arg, dict) and "dtype" in arg else role.split(":")[1]
    if isinstance(arg, dict):
        raw = arg.get("c", arg.get("v"))
        value = complex(*raw) if isinstance(raw, list) else raw
    else:
        value = arg
    if isinstance(value, complex):
        box = (ctypes.c_double * 2 if dtype == "c16" else ctypes.c_float * 2)(value.real, value.imag)
    elif dtype == "f2":
        box = ctypes.c_uint16(int(np.float16(value).view(np.uint16)))
    else:
        box = SCALAR_TYPES.get(dtype, ctypes.c_double)(value)
    return ctypes.byref(box)


def _python(box):
    if isinstance(box, ctypes.Array):
        return [box[0], box[1]]
    if isinstance(box, ctypes.c_uint16):
        return float(np.uint16(box.value).view(np.float16))
    return box.value
