"""cuRAND programs (tests/cuda/curand_generators.cu): every generator type,
seed, offset and ordering, every distribution on a stream, repeatability,
host generators agreeing with device ones, Sobol' dimensions and cuRAND's
errors, run unmodified through rcuda against a sim server, where rcuda's
drop-in libcurand.so.10 and no real one serves them; and on the cupy
backend (the real cuRAND) when a GPU is usable."""
from __future__ import annotations


import pytest

from conftest import requires_nvcc, run_program
from nvidia_libraries import assert_library_is_rcudas, library_flags
from program_paths import check_section, run_on_sim

pytestmark = requires_nvcc

SECTIONS = ["types", "distributions", "repeatable", "host_vs_device", "quasi", "errors"]


@pytest.fixture(scope="module")
def result(compile_cuda):
    return run_on_sim(compile_cuda, "curand_generators.cu", "sim_kernels.py", flags=library_flags("curand"))


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    assert result.returncode == 0 and "PASSED curand_generators" in result.stdout, result.stdout + result.stderr[-3000:]


def test_library_is_rcudas_drop_in(result):
    """The program's cuRAND is rcuda's libcurand.so.10, not a real copy."""
    assert_library_is_rcudas(result.stdout, "curand")


def test_on_a_zeromq_link(compile_cuda, tmp_path):
    """A --auth server: the library calls take the Python link."""
    result = run_on_sim(compile_cuda, "curand_generators.cu", "sim_kernels.py", "repeatable", "host_vs_device", "errors",
                        auth_root=tmp_path, flags=library_flags("curand"))
    for section in ("repeatable", "host_vs_device", "errors"):
        check_section(result, section)


def test_on_a_gpu(compile_cuda, server_factory):
    """The cupy backend: the real cuRAND on the server's GPU."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    result = run_program(compile_cuda("curand_generators.cu", *library_flags("curand")), server, timeout=300)
    assert result.returncode == 0 and "PASSED curand_generators" in result.stdout, result.stdout + result.stderr[-3000:]
