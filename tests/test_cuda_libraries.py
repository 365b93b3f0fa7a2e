"""The cupy backend's library provider (server/backends/cuda_libraries.py)
driving NVIDIA's real libraries through ctypes, as far as a machine without
a GPU allows: cuRAND's host generators run on the CPU, so the provider's
calls, argument types and results are checked against the real cuRAND; a
cuBLAS handle cannot be made without a GPU, and the provider reports
cuBLAS's own status for that."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from rcuda.library_errors import LibraryError
from rcuda.server.backends import cuda_libraries


class NoGpu:
    """What the provider needs of a CupyDevice, with no GPU to make current."""

    _streams = {0: 0}

    @contextlib.contextmanager
    def _cuda(self, what):
        yield


@pytest.fixture
def provider():
    try:
        cuda_libraries.load("curand")
    except (LibraryError, OSError) as exc:
        pytest.skip(f"NVIDIA's cuRAND cannot be loaded here (pip install -e '.[test]'): {exc}")
    return cuda_libraries.CudaLibraries(NoGpu())


def numbers(provider, generator, call, count, *parameters, dtype=np.float32):
    results, frames = provider.run(call, generator, [None, count, *parameters], 0, True)
    assert results == [] and len(frames) == 1
    return np.frombuffer(frames[0], dtype)


def test_host_generator_runs_nvidias_curand(provider):
    generator = provider.create("curandCreateGeneratorHost", [101])  # XORWOW
    try:
        provider.run("curandSetPseudoRandomGeneratorSeed", generator, [1234], 0, True)
        normal = numbers(provider, generator, "curandGenerateNormal", 200_000, 2.0, 0.5)
        assert abs(normal.mean() - 2.0) < 0.01 and abs(normal.std() - 0.5) < 0.01  # float mean and stddev
        uniform = numbers(provider, generator, "curandGenerateUniformDouble", 100_000, dtype=np.float64)
        assert 0.0 < uniform.min() and uniform.max() <= 1.0 and abs(uniform.mean() - 0.5) < 0.01
        poisson = numbers(provider, generator, "curandGeneratePoisson", 100_000, 4.0, dtype=np.uint32)
        assert abs(poisson.mean() - 4.0) < 0.05
        # the same seed again goes on (cuRAND keeps its place, the sim follows it); offset 0 starts over
        provider.run("curandSetPseudoRandomGeneratorSeed", generator, [1234], 0, True)
        assert not np.array_equal(numbers(provider, generator, "curandGenerateNormal", 200_000, 2.0, 0.5), normal)
        provider.run("curandSetGeneratorOffset", generator, [0], 0, True)
        assert np.array_equal(numbers(provider, generator, "curandGenerateNormal", 200_000, 2.0, 0.5), normal)
    finally:
        provider.destroy(generator)


def test_curand_statuses_come_back_by_name(provider):
    generator = provider.create("curandCreateGeneratorHost", [101])
    try:
        with pytest.raises(LibraryError) as error:
            numbers(provider, generator, "curandGenerateNormal", 3, 0.0, 1.0)  # odd length
        assert error.value.library_status == "CURAND_STATUS_LENGTH_NOT_MULTIPLE"
    finally:
        provider.destroy(generator)


def test_cublas_without_a_gpu_is_not_initialized(provider):
    try:
        cuda_libraries.load("cublas")
    except (LibraryError, OSError) as exc:
        pytest.skip(f"NVIDIA's cuBLAS cannot be loaded here: {exc}")
    with pytest.raises(LibraryError) as error:
        provider.create("cublasCreate_v2", [])
    assert error.value.library_status == "CUBLAS_STATUS_NOT_INITIALIZED"
