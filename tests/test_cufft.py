"""cuFFT programs (tests/cuda/cufft_transforms.cu): plans of every kind,
every exec type in 1-3 dimensions, advanced layouts, work areas, an FFT
convolution, the typed and 64-bit plan forms, cuFFT's errors and its
callbacks refused by name, run unmodified through rcuda against a sim
server, where rcuda's drop-in libcufft.so.12 and no real one serves them;
and on the cupy backend (the real cuFFT) when a GPU is usable."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from nvidia_libraries import assert_library_is_rcudas, library_flags, run_on_gpu
from program_paths import check_passed, check_section, run_on_sim

pytestmark = requires_nvcc

SECTIONS = ["plan1d_c2c", "r2c_c2r_1d", "double_1d", "plan2d", "plan3d", "plan_many", "make_plans", "convolution",
            "errors", "xt_plans", "plans64", "callbacks"]


@pytest.fixture(scope="module")
def result(compile_cuda):
    return run_on_sim(compile_cuda, "cufft_transforms.cu", "sim_kernels.py", flags=library_flags("cufft"))


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    check_passed(result, "cufft_transforms.cu")


def test_library_is_rcudas_drop_in(result):
    """The program's cuFFT is rcuda's libcufft.so.12, not a real copy."""
    assert_library_is_rcudas(result.stdout, "cufft")


def test_on_a_zeromq_link(compile_cuda, tmp_path):
    """A --auth server: the library calls take the Python link."""
    sections = ("plan_many", "make_plans", "errors")
    result = run_on_sim(compile_cuda, "cufft_transforms.cu", "sim_kernels.py", *sections, auth_root=tmp_path,
                        flags=library_flags("cufft"))
    check_section(result, *sections)


def test_on_a_gpu(compile_cuda):
    """The cupy backend: the real cuFFT on the server's GPU."""
    check_passed(run_on_gpu(compile_cuda, "cufft_transforms.cu", "cufft"), "cufft_transforms.cu")


MULTI_GPU_SECTIONS = ["descriptor", "c2c_1d", "z2z_2d", "batched", "errors"]


@pytest.fixture(scope="module")
def multi_gpu_result(compile_cuda):
    return run_on_sim(compile_cuda, "cufft_multi_gpu.cu", "sim_kernels.py", devices=2,
                      flags=library_flags("cufft"))


@pytest.mark.parametrize("section", MULTI_GPU_SECTIONS)
def test_multi_gpu_section(multi_gpu_result, section):
    """cufftXt* on the two GPUs of one sim server."""
    check_section(multi_gpu_result, section)


def test_multi_gpu_program_passes(multi_gpu_result):
    check_passed(multi_gpu_result, "cufft_multi_gpu.cu")
    assert_library_is_rcudas(multi_gpu_result.stdout, "cufft")


def test_multi_gpu_on_a_gpu_server_with_two(compile_cuda):
    """The cupy backend with two GPUs: the same multi-GPU program against the real cuFFT."""
    result = run_on_gpu(compile_cuda, "cufft_multi_gpu.cu", "cufft", devices=2)
    check_section(result, *MULTI_GPU_SECTIONS)
