"""Failures of the forwarded CUDA libraries (cuBLAS, cuFFT, cuRAND), named by
the library's own status (CUBLAS_STATUS_INVALID_VALUE, CUFFT_INVALID_PLAN,
CURAND_STATUS_LENGTH_NOT_MULTIPLE...), which is what the program gets back."""
from __future__ import annotations

from .errors import RcudaError


class LibraryError(RcudaError):
    """`status`: the name of the library's status enumerator."""

    def __init__(self, status: str, message: str = ""):
        super().__init__(f"{status}: {message}" if message else status)
        self.status = status
        self.message = message
