"""The runtime's library management and kernel handles (cudaLibrary*,
cudaGetKernel, cudaKernelSetAttributeForDevice, cudaKernel_t launches) and
device notifications: tests/cuda/runtime_libraries.cu, linked to rcuda's
libcuda.so.1 too (the driver's faces of the same handles), run through
`rcuda run` against a two-GPU sim server, loading driver_module_kernels.cu
as nvcc built it (a fatbinary, a cubin, PTX)."""
from __future__ import annotations

import subprocess

import pytest

from conftest import CUDA_SOURCES, nvcc_path, requires_nvcc, run_program, start_server
from program_paths import check_passed, check_section
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc

SECTIONS = ["load_and_enumerate", "launch_library_kernel", "launch_ex_library_kernel", "library_global",
            "library_other_device", "kernel_attribute_for_device", "get_kernel", "load_from_file", "bad_input",
            "not_managed", "unload", "async_notification"]


def nvcc(*args: str) -> None:
    subprocess.run([nvcc_path(), *args], check=True, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def result(build_dir):
    """One run of runtime_libraries.cu; its kernels' plugins and the libraries'."""
    source = CUDA_SOURCES / "driver_module_kernels.cu"
    images = []
    for kind, flags in (("fatbin", ()), ("cubin", ("-arch=sm_80",)), ("ptx", ())):
        images.append(build_dir / f"runtime_libraries_kernels.{kind}")
        nvcc(f"-{kind}", *flags, "-o", str(images[-1]), str(source))
    program = build_dir / "runtime_libraries"
    nvcc("-cudart", "shared", "-o", str(program), str(CUDA_SOURCES / "runtime_libraries.cu"), f"-L{dropin_dir()}",
         "-l:libcuda.so.1")
    server = start_server("--backend", "sim", "--devices", "2",
                          "--kernels", str(CUDA_SOURCES / "driver_module_kernels.py"),
                          "--kernels", str(CUDA_SOURCES / "runtime_kernels.py"))
    try:
        return run_program(program, server, *map(str, images))
    finally:
        server.stop()


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes_and_explains(result):
    check_passed(result, "runtime_libraries.cu")
    assert "ptx info log: sim: module" in result.stdout, result.stdout
    # Refusals are explained in the program's log, naming the call.
    for said in ("cudaLibraryGetKernel: the library has no kernel 'no_such_kernel'",
                 "cudaLibraryGetGlobal: the library has no variable 'no_such_variable'"):
        assert said in result.stderr, result.stderr[-3000:]
