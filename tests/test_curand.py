"""cuRAND programs (tests/cuda/curand_generators.cu): every generator type,
seed, offset and ordering, every distribution on a stream, repeatability,
host generators agreeing with device ones, Sobol' dimensions and cuRAND's
errors, the host tables (direction vectors, scramble constants) and the
scrambled and 64-bit Sobol' generators that follow them,
curandGeneratePoissonMethod, and Poisson distributions a kernel draws from
with the device API's curand_discrete, run unmodified through rcuda against
a sim server, where rcuda's drop-in libcurand.so.10 and no real one serves
them; and on the cupy backend (the real cuRAND) when a GPU is usable."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from nvidia_libraries import assert_library_is_rcudas, library_flags, run_on_gpu
from program_paths import check_passed, check_section, run_on_sim

pytestmark = requires_nvcc

SECTIONS = ["types", "distributions", "repeatable", "host_vs_device", "quasi", "errors", "tables", "scrambled",
            "poisson_method", "discrete"]


@pytest.fixture(scope="module")
def result(compile_cuda):
    return run_on_sim(compile_cuda, "curand_generators.cu", "sim_kernels.py", flags=library_flags("curand"))


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    check_passed(result, "curand_generators.cu")


def test_library_is_rcudas_drop_in(result):
    """The program's cuRAND is rcuda's libcurand.so.10, not a real copy."""
    assert_library_is_rcudas(result.stdout, "curand")


def test_on_a_zeromq_link(compile_cuda, tmp_path):
    """A --auth server: the library calls take the Python link."""
    sections = ("repeatable", "host_vs_device", "errors", "tables", "discrete")
    result = run_on_sim(compile_cuda, "curand_generators.cu", "sim_kernels.py", *sections, auth_root=tmp_path,
                        flags=library_flags("curand"))
    check_section(result, *sections)


def test_on_a_gpu(compile_cuda):
    """The cupy backend: the real cuRAND on the server's GPU."""
    check_passed(run_on_gpu(compile_cuda, "curand_generators.cu", "curand"), "curand_generators.cu")


def test_a_host_generator_s_poisson_method_is_asked_as_curand_generate_poisson(monkeypatch):
    """cuRAND 10.4.5 (rcuda's libcurand's version) gives a host generator
    curandGeneratePoisson's numbers whatever method
    curandGeneratePoissonMethod names; CUDA 13.0's cuRAND 10.4.0 on a GPU
    server answers 999 for CURAND_CHOOSE_BEST there.  So the client asks the
    server for curandGeneratePoisson, after checking the method; a device
    generator's call goes as it is."""
    import struct
    import types

    import cffi

    from rcuda.client import interposer
    from rcuda.client.libraries import curand
    from rcuda.library_errors import LibraryError

    ffi = cffi.FFI()
    monkeypatch.setattr(interposer, "ffi", ffi)
    asked = []

    def call(name, args, wait=False):
        asked.append((name, args))
        return [], [struct.pack("4I", 7, 8, 6, 9)]

    generator = types.SimpleNamespace(rng_type=161, host=True, dimensions=1, call=call)
    monkeypatch.setattr(curand, "generator_of", lambda handle, name: generator)
    out = ffi.new("unsigned int[4]")
    for method in (0, 9, 11):
        assert curand.curandGeneratePoissonMethod(None, out, 4, 7.5, method) == curand.SUCCESS
        assert asked.pop() == ("curandGeneratePoisson", [None, 4, 7.5]) and list(out) == [7, 8, 6, 9]
    with pytest.raises(LibraryError) as refused:  # a method cuRAND refuses is still refused
        curand.curandGeneratePoissonMethod(None, out, 4, 7.5, 1)
    assert refused.value.library_status == "CURAND_STATUS_OUT_OF_RANGE" and asked == []
    generator.host = False
    monkeypatch.setattr(interposer, "address", lambda pointer: 0x1000)
    assert curand.curandGeneratePoissonMethod(None, out, 4, 7.5, 0) == curand.SUCCESS
    assert asked.pop() == ("curandGeneratePoissonMethod", [0x1000, 4, 7.5, 0])


def test_the_real_curand_gives_a_host_generator_poisson_numbers_whatever_the_method():
    """What the test above relies on, asked of NVIDIA's cuRAND through the
    GPU server's own code (host generators need no GPU), when the installed
    one is the version rcuda's libcurand reports."""
    import contextlib
    import ctypes
    import types

    from rcuda import curand_calls
    from rcuda._generated.libraries_api import LIBRARIES
    from rcuda.library_errors import LibraryError
    from rcuda.server.backends import cuda_libraries

    try:
        lib = cuda_libraries.load("curand")
    except (LibraryError, OSError) as exc:
        pytest.skip(f"no cuRAND to ask: {exc}")
    version, (major, minor, patch) = ctypes.c_int(), LIBRARIES["curand"]["version"]
    lib.curandGetVersion(ctypes.byref(version))
    if version.value != major * 1000 + minor * 100 + patch:
        pytest.skip(f"cuRAND {version.value} installed, rcuda's libcurand is {major}.{minor}.{patch}")
    libraries = cuda_libraries.CudaLibraries(types.SimpleNamespace(_cuda=lambda what: contextlib.nullcontext(),
                                                                   _streams={0: 0}))

    def numbers(call: str, *method: int) -> bytes:
        generator = libraries.create("curandCreateGeneratorHost", [161])  # Philox, as the test program's
        libraries.run("curandSetPseudoRandomGeneratorSeed", generator, [11], 0, True)
        _, frames = libraries.run(call, generator, [None, 4096, 7.5, *method], 0, True)
        libraries.destroy(generator)
        return bytes(frames[0])

    plain = numbers("curandGeneratePoisson")
    assert len(plain) == 4096 * 4
    for method in curand_calls.POISSON_METHODS:
        assert numbers("curandGeneratePoissonMethod", method) == plain
