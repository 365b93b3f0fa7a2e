"""cuBLAS programs run unmodified through rcuda (tests/cuda/cublas_*.cu):
GEMM of every type and transpose pair, gemmEx, both pointer modes, the
handle's settings, Levels 1 to 3, Set/Get of matrices and vectors, the
batched GEMMs and the batched LU.  Each program links NVIDIA's libcublas.so.13
at build time and must find rcuda's drop-in at run time, on a sim server
(the sim's numpy cuBLAS) and, when a GPU is at hand, on a cupy server (the
real library)."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from nvidia_libraries import assert_library_is_rcudas, library_flags, run_on_gpu
from program_paths import check_passed, check_section, run_on_sim

pytestmark = requires_nvcc

PROGRAMS = {
    "cublas_gemm.cu": ["types", "device_scalars", "gemm_ex", "beta_zero"],
    "cublas_levels.cu": ["handle", "level1", "device_results", "level2", "level3", "setget", "invalid"],
    "cublas_batched.cu": ["gemm_batched", "gemm_strided", "getrs", "singular", "getri", "matinv"],
}
CASES = [(program, section) for program, sections in PROGRAMS.items() for section in sections]


@pytest.fixture(scope="module")
def results(compile_cuda):
    """program -> its one run (all sections) on a sim server."""
    flags = library_flags("cublas")
    cache: dict = {}

    def run(program: str):
        if program not in cache:
            cache[program] = run_on_sim(compile_cuda, program, "sim_kernels.py", devices=1, flags=flags)
        return cache[program]

    return run


@pytest.mark.parametrize("program,section", CASES)
def test_section(results, program, section):
    check_section(results(program), section)


@pytest.mark.parametrize("program", PROGRAMS)
def test_whole_program_passes_with_rcudas_cublas(results, program):
    result = results(program)
    check_passed(result, program)
    # rcuda's library, not a real copy of NVIDIA's
    assert_library_is_rcudas(result.stdout, "cublas")


@pytest.mark.parametrize("program", PROGRAMS)
def test_on_a_gpu(compile_cuda, program):
    """The cupy backend: the same programs against the real cuBLAS on the server's GPU."""
    result = run_on_gpu(compile_cuda, program, "cublas")
    check_section(result, *PROGRAMS[program])
    assert_library_is_rcudas(result.stdout, "cublas")


LT_SECTIONS = ["basic", "transposes", "batched", "device_scalars", "errors"]


@pytest.fixture(scope="module")
def lt_result(compile_cuda):
    return run_on_sim(compile_cuda, "cublaslt_matmul.cu", "sim_kernels.py", flags=library_flags("cublasLt"))


@pytest.mark.parametrize("section", LT_SECTIONS)
def test_cublaslt_section(lt_result, section):
    """cuBLASLt's GEMM path: layouts, the heuristic, cublasLtMatmul."""
    check_section(lt_result, section)


def test_cublaslt_program_passes(lt_result):
    check_passed(lt_result, "cublaslt_matmul.cu")
    assert_library_is_rcudas(lt_result.stdout, "cublasLt")


def test_cublaslt_on_a_gpu(compile_cuda):
    """The cupy backend: the cuBLASLt program against the real cuBLAS on the server's GPU."""
    check_section(run_on_gpu(compile_cuda, "cublaslt_matmul.cu", "cublasLt"), *LT_SECTIONS)


BLAS_HANDLE_SECTIONS = ["linear", "handle_kept"]


@pytest.fixture(scope="module")
def blas_handle_result(compile_cuda):
    return run_on_sim(compile_cuda, "cublaslt_blas_handle.cu", "sim_kernels.py", devices=1,
                      flags=library_flags("cublas", "cublasLt"))


@pytest.mark.parametrize("section", BLAS_HANDLE_SECTIONS)
def test_a_cublas_handle_serves_as_a_cublaslt_handle(blas_handle_result, section):
    """PyTorch's getCurrentCUDABlasLtHandle() is its cuBLAS handle, cast:
    the heuristic and a bias-epilogue cublasLtMatmul take it, and leave its
    stream and pointer mode as the program set them."""
    check_section(blas_handle_result, section)


def test_a_cublas_handle_serves_as_a_cublaslt_handle_on_a_gpu(compile_cuda):
    check_section(run_on_gpu(compile_cuda, "cublaslt_blas_handle.cu", "cublas", "cublasLt"), *BLAS_HANDLE_SECTIONS)


def test_runs_with_only_the_dropins_on_the_library_path(compile_cuda, sim_server):
    """No LD_PRELOAD: the program's libcublas.so.13 and libcudart.so.13 are
    the drop-ins (filters of librcuda.so, with NVIDIA's version nodes), as on
    a client with no CUDA at all; and without them it cannot start."""
    import os
    import subprocess

    from rcuda.binaries import dropin_dir

    program = compile_cuda("cublas_levels.cu", *library_flags("cublas"))
    bare = {"PATH": "/usr/bin:/bin", "RCUDA_SERVERS": sim_server.address, "HOME": os.environ.get("HOME", "/")}
    without = subprocess.run([str(program), "handle"], capture_output=True, text=True, timeout=120, env=bare)
    assert without.returncode != 0 and "libcublas.so.13" in without.stderr
    through = subprocess.run([str(program), "handle", "level1"], capture_output=True, text=True, timeout=120,
                             env=dict(bare, LD_LIBRARY_PATH=str(dropin_dir())))
    check_section(through, "handle", "level1")
    assert_library_is_rcudas(through.stdout, "cublas")
