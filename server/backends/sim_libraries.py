"""Device memory as numpy arrays, for the sim's implementations of the CUDA
libraries (sim_cublas.py, sim_cufft.py, sim_curand.py).

Views, not copies: a library call reads and writes the device's bytes in
place, as the real library's kernels do.  A range outside the session's
allocations is an illegal address, as it would be for a kernel on a GPU."""
from __future__ import annotations

import numpy as np

from rcuda.errors import CudaError, cudaError


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
        return np.lib.stride_tricks.as_strided(flat, shape=(rows, cols), strides=(dtype.itemsize, ld * dtype.itemsize),
                                               writeable=True)

    def pointers(self, ptr: int, count: int, what: str = "") -> list[int]:
        """An array of `count` device pointers in device memory (the batched calls' Aarray)."""
        return [int(p) for p in self._flat(ptr, np.uint64, count, what)]
