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


def _frames(provider, name, *args) -> bytes:
    return provider.table(name, list(args))


def test_host_tables_are_nvidias_and_the_sims_plain_ones_equal_them(provider):
    """curandGetDirectionVectors*/curandGetScrambleConstants* copied out of
    NVIDIA's cuRAND, whole; its Joe-Kuo sets are bit for bit the sim's (so
    the sim's plain Sobol' is cuRAND's); its scrambled sets are its own data,
    shaped as the sim's are (each vector keeps its leading bit, the 32-bit
    tables are the 64-bit ones' upper halves)."""
    from rcuda import curand_calls
    from rcuda.server.backends import sim_curand
    for name, (fmt, per, sets) in curand_calls.TABLES.items():
        for which in sets or (None,):
            args = [] if which is None else [which]
            data = _frames(provider, name, *args)
            assert len(data) == curand_calls.table_bytes(name)
            if which in (101, 103):
                assert data == sim_curand.table(name, args), name
    s32 = np.frombuffer(_frames(provider, "curandGetDirectionVectors32", 102), np.uint32).reshape(-1, 32)
    s64 = np.frombuffer(_frames(provider, "curandGetDirectionVectors64", 104), np.uint64).reshape(-1, 64)
    c32 = np.frombuffer(_frames(provider, "curandGetScrambleConstants32"), np.uint32)
    c64 = np.frombuffer(_frames(provider, "curandGetScrambleConstants64"), np.uint64)
    assert ((s64[:, :32] >> np.uint64(32)).astype(np.uint32) == s32).all()
    assert ((c64 >> np.uint64(32)).astype(np.uint32) == c32).all()
    assert s32[0].tolist() != [1 << (31 - j) for j in range(32)]
    assert all(int(s32[0, j]).bit_length() == 32 - j for j in range(32))
    with pytest.raises(LibraryError) as error:
        provider.table("curandGetDirectionVectors32", [103])
    assert error.value.library_status == "CURAND_STATUS_OUT_OF_RANGE"


def test_scrambled_host_generator_follows_nvidias_tables(provider):
    """What the sim's scrambled Sobol' copies: cuRAND's starts each dimension
    at its scramble constant and XORs in the scrambled vectors in Gray-code order."""
    s32 = np.frombuffer(_frames(provider, "curandGetDirectionVectors32", 102), np.uint32).reshape(-1, 32)
    c32 = np.frombuffer(_frames(provider, "curandGetScrambleConstants32"), np.uint32)
    generator = provider.create("curandCreateGeneratorHost", [202])
    try:
        provider.run("curandSetQuasiRandomGeneratorDimensions", generator, [2], 0, True)
        points = numbers(provider, generator, "curandGenerate", 8, dtype=np.uint32).reshape(2, 4)
        for d in range(2):
            assert points[d].tolist() == [c32[d], c32[d] ^ s32[d, 0], c32[d] ^ s32[d, 0] ^ s32[d, 1],
                                          c32[d] ^ s32[d, 1]]
    finally:
        provider.destroy(generator)


def test_poisson_method_passes_its_method_as_an_int(provider):
    generator = provider.create("curandCreateGeneratorHost", [161])
    try:
        provider.run("curandSetPseudoRandomGeneratorSeed", generator, [5], 0, True)
        for method in (0, 9, 11):
            x = numbers(provider, generator, "curandGeneratePoissonMethod", 100_000, 7.5, method, dtype=np.uint32)
            assert abs(x.mean() - 7.5) < 0.05 and abs(x.var() - 7.5) < 0.2
        with pytest.raises(LibraryError) as error:
            numbers(provider, generator, "curandGeneratePoissonMethod", 100, 7.5, 1, dtype=np.uint32)
        assert error.value.library_status == "CURAND_STATUS_OUT_OF_RANGE"
    finally:
        provider.destroy(generator)
