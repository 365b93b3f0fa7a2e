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
