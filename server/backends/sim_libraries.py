"""Device memory as numpy arrays, for the sim's implementations of the CUDA
libraries (sim_cublas.py, sim_cufft.py, sim_curand.py).

Views, not copies: a library call reads and writes the device's bytes in
place, as the real library's kernels do.  A range outside the session's
allocations is an illegal address, as it would be for a kernel on a GPU."""
from __future__ import annotations

import functools

import numpy as np

from rcuda import blas_rules, curand_calls
from rcuda.errors import CudaError, ProtocolError, cudaError
from rcuda.library_errors import LibraryError

from ..library_calls import matmul_epilogue


class LibraryMemory:
    """`region(ptr, size, what)` gives a writable uint8 view of `size`
    device bytes at `ptr` or raises CudaError (SimDevice._bytes)."""

    def __init__(self, region, what: str = "library call"):
        self._region = region
        self.what = what

    def _flat(self, ptr: int, dtype, count: int, what: str) -> np.ndarray:
        dtype = np.dtype(dtype)
        if count <= 0:
            return np.zeros(0, dtype)
        if ptr == 0:
            raise CudaError(cudaError.cudaErrorIllegalAddress, f"{what or self.what}: NULL device pointer")
        try:
            raw = self._region(ptr, count * dtype.itemsize, what or self.what)
        except CudaError as exc:
            raise CudaError(cudaError.cudaErrorIllegalAddress, exc.message) from None
        return raw.view(dtype)

    def array(self, ptr: int, dtype, count: int, stride: int = 1, what: str = "") -> np.ndarray:
        """`count` elements of `dtype` at `ptr`, `stride` elements apart (a
        negative stride, as BLAS's incx < 0, starts at the far end: element
        i is at ptr + (count - 1 - i) * |stride| elements)."""
        step = abs(stride) or 1
        span = (count - 1) * step + 1 if count > 0 else 0
        flat = self._flat(ptr, dtype, span, what)
        view = flat[::step]
        return view[::-1] if stride < 0 else view

    def matrix(self, ptr: int, dtype, rows: int, cols: int, ld: int, what: str = "") -> np.ndarray:
        """A column-major `rows` x `cols` matrix with leading dimension `ld`:
        a (rows, cols) view whose element [i, j] is at ptr + (i + j * ld) elements."""
        dtype = np.dtype(dtype)
        if rows <= 0 or cols <= 0:
            return np.zeros((max(rows, 0), max(cols, 0)), dtype)
        if ld < rows:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what or self.what}: leading dimension {ld} < {rows} rows")
        flat = self._flat(ptr, dtype, ld * (cols - 1) + rows, what)
        # np.ndarray over the buffer: the same view as as_strided, in a tenth of the time
        return np.ndarray((rows, cols), dtype, buffer=flat, strides=(dtype.itemsize, ld * dtype.itemsize))

    def batch(self, ptr: int, dtype, batch: int, rows: int, cols: int, ld: int, stride: int,
              what: str = "") -> np.ndarray:
        """`batch` such matrices, `stride` elements apart (0: one matrix
        `batch` times): a (batch, rows, cols) view whose element [b, i, j]
        is at ptr + (b * stride + i + j * ld) elements."""
        dtype = np.dtype(dtype)
        if batch <= 0 or rows <= 0 or cols <= 0:
            return np.zeros((max(batch, 0), max(rows, 0), max(cols, 0)), dtype)
        if ld < rows or stride < 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what or self.what}: leading dimension {ld} < "
                                                             f"{rows} rows, or batch stride {stride} < 0")
        flat = self._flat(ptr, dtype, stride * (batch - 1) + ld * (cols - 1) + rows, what)
        item = dtype.itemsize
        return np.ndarray((batch, rows, cols), dtype, buffer=flat, strides=(stride * item, item, ld * item))

    def pointers(self, ptr: int, count: int, what: str = "") -> list[int]:
        """An array of `count` device pointers in device memory (the batched calls' Aarray)."""
        return [int(p) for p in self._flat(ptr, np.uint64, count, what)]


class SimObject:
    """A handle, plan or generator: the library it belongs to and its state."""

    __slots__ = ("library", "state", "host")

    def __init__(self, library: str, state, host: bool = False):
        self.library, self.state, self.host = library, state, host


class SimLibraries:
    """The sim's library provider (server/library_calls.py): cuBLAS, cuFFT
    and cuRAND computed with numpy on the device's memory, at once, in issue
    order like every sim operation (sim_cublas.py, sim_cufft.py, sim_curand.py)."""

    def __init__(self, device):
        self.device = device
        self.memory = LibraryMemory(device._bytes)

    def create(self, call: str, args: list) -> SimObject:
        if call == "cublasCreate_v2":
            from . import sim_cublas
            return SimObject("cublas", sim_cublas.BlasHandle())
        if call == "cufftCreate":
            from . import sim_cufft
            return SimObject("cufft", sim_cufft.SimPlan())
        from . import sim_curand
        (rng_type,) = args
        return SimObject("curand", sim_curand.SimGenerator(rng_type), host=call == "curandCreateGeneratorHost")

    def destroy(self, obj: SimObject) -> None:
        """Nothing to free: the state is Python's."""

    def table(self, call: str, args: list) -> bytes:
        """One of cuRAND's host tables, whole (sim_curand.table: the sim's own)."""
        from . import sim_curand
        return sim_curand.table(call, args)

    def run(self, call: str, obj: SimObject, args: list, stream: int, answered: bool):
        """(the host outputs' values, frames) of `call` on `obj`."""
        run = {"cublas": self._cublas, "cufft": self._cufft, "curand": self._curand}[obj.library]
        results, frames = run(call, obj, args)
        self.device._op(stream)  # its moment in stream order (sim.py: modelled time)
        return results, frames

    # -- cuBLAS: the generic calls of client/libraries/registry.py

    def _cublas(self, call: str, obj: SimObject, args: list):
        from . import sim_cublas
        if call == blas_rules.MATMUL_EPILOGUE:  # rcuda's own call: library_calls.py defines it, for numpy here
            matmul_epilogue(np, functools.partial(self.memory.batch, what=call), args)
            return [], []
        handle = obj.state
        function = sim_cublas.CALLS.get(call)  # the handle's settings are there too
        if function is None:
            raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"{call} is not implemented by the sim backend")
        inputs = [self._value(arg) for arg in args if not _is_output(arg)]
        outputs = [arg for arg in args if _is_output(arg)]
        value = function(self.memory, handle, *inputs)
        values = value if isinstance(value, tuple) else (value,) if outputs else ()
        return self._store(call, outputs, values), []

    def _value(self, arg):
        """An argument as the implementation takes it: a complex for {c},
        the value in device memory now for {scalar} (device pointer mode)."""
        if isinstance(arg, dict):
            if "c" in arg:
                return complex(*arg["c"])
            if "v" in arg:
                return complex(*arg["v"]) if isinstance(arg["v"], list) else arg["v"]
            return _python(self.memory.array(arg["scalar"], np.dtype(arg["dtype"]), 1, what="scalar argument")[0])
        return arg

    def _store(self, call: str, outputs: list, values) -> list:
        if len(values) != len(outputs):
            raise RuntimeError(f"{call}: the sim implementation gave {len(values)} outputs for {len(outputs)}")
        results = []
        for out, value in zip(outputs, values):
            if out["out"] is None:
                results.append(_wire(value))
            else:
                self.memory.array(out["out"], np.dtype(out["dtype"]), 1, what="scalar result")[0] = value
        return results

    # -- cuFFT: plans made by cufftMakePlanMany64, executed by cufftExec*

    def _cufft(self, call: str, obj: SimObject, args: list):
        from . import sim_cufft
        plan = obj.state
        if call == "cufftMakePlanMany64":
            return [int(plan.make_plan_many(*args))], []
        if call in ("cufftSetWorkArea", "cufftSetAutoAllocation"):
            return [], []  # the sim needs no work area
        function = sim_cufft.CALLS.get(call)
        if function is None:
            raise LibraryError("CUFFT_NOT_SUPPORTED", f"{call} is not implemented by the sim backend")
        function(self.memory, plan, *args)
        return [], []

    # -- cuRAND: settings and generating calls; a host generator's numbers go back as a frame

    def _curand(self, call: str, obj: SimObject, args: list):
        generator = obj.state
        setting = curand_calls.SETTINGS.get(call)
        if setting is not None:
            getattr(generator, setting[1])(*args)
            return [], []
        if call == "curandGenerateSeeds":
            return [], []  # the sim's generators need no seeding step
        generate = curand_calls.GENERATES.get(call)
        if generate is None:
            raise LibraryError("CURAND_STATUS_INTERNAL_ERROR", f"{call} is not implemented by the sim backend")
        fmt, extra, method = generate
        dtype = np.dtype(fmt)
        ptr, count, *parameters = args
        if len(parameters) != extra or not isinstance(count, int) or count < 0:
            raise ProtocolError(f"lib: {call} takes a pointer, a count and {extra} parameters")
        numbers = np.asarray(getattr(generator, method)(count, *parameters), dtype)
        if obj.host:
            return [], [memoryview(numbers.tobytes())]
        self.memory.array(ptr, dtype, count, what=call)[:] = numbers
        return [], []


def _is_output(arg) -> bool:
    return isinstance(arg, dict) and "out" in arg


def _python(value):
    """A numpy scalar as the Python number it is."""
    return complex(value) if np.iscomplexobj(value) else value.item() if hasattr(value, "item") else value


def _wire(value):
    """A result as msgpack carries it: a complex as [re, im]."""
    value = _python(value)
    return [value.real, value.imag] if isinstance(value, complex) else value
