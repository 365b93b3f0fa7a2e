"""Failures of the forwarded CUDA libraries (cuBLAS, cuFFT, cuRAND), named by
the library's own status (CUBLAS_STATUS_INVALID_VALUE, CUFFT_INVALID_PLAN,
CURAND_STATUS_LENGTH_NOT_MULTIPLE...), which is what the program gets back."""
from __future__ import annotations

from .errors import RcudaError, cudaError


class LibraryError(RcudaError):
    """`library_status`: the name of the library's status enumerator;
    `detail`: what was wrong."""

    status = cudaError.cudaErrorInvalidValue  # seen from the runtime's side

    def __init__(self, library_status: str, detail: str = ""):
        super().__init__(f"{library_status}: {detail}" if detail else library_status)
        self.library_status = library_status
        self.detail = detail
