"""The CUDA driver API (libcuda.so.1): real programs linked to rcuda's drop-in
libcuda.so.1 only, run through `rcuda run` against a sim server and, where
there is a GPU, a cupy server; a runtime program reaching the driver through
cudaGetDriverEntryPointByVersion under LD_PRELOAD; `rcuda run` telling
driver programs from static-runtime ones."""
from __future__ import annotations

import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from conftest import CUDA_SOURCES, RCUDA, nvcc_path, requires_nvcc, run_program
from program_paths import BACKENDS, servers_of
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc


@pytest.fixture(params=BACKENDS)
def servers(request):
    """A sim server, and a GPU's (cupy) server where there is a GPU."""
    with servers_of(request.param, "sim_kernels.py") as servers:
        yield servers


@pytest.fixture(scope="module")
def driver_program(build_dir):
    """tests/cuda/driver_basics.cu, linked to our libcuda.so.1 (the only one here)."""
    out = build_dir / "driver_basics"
    subprocess.run([nvcc_path(), "-cudart", "none", "-x", "c++", "-o", str(out),
                    str(CUDA_SOURCES / "driver_basics.cu"), f"-L{dropin_dir()}", "-l:libcuda.so.1"],
                   check=True, capture_output=True, text=True, timeout=300)
    return out


def needed(path) -> list[str]:
    with open(path, "rb") as f:
        dynamic = ELFFile(f).get_section_by_name(".dynamic")
        return [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]


def test_driver_program_runs_through_rcuda_run(driver_program, servers):
    assert "libcuda.so.1" in needed(driver_program) and not [n for n in needed(driver_program) if "cudart" in n]
    result = run_program(driver_program, servers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout and "PASSED driver_basics" in result.stdout, result.stdout
    # What rcuda leaves out is said once, with why, and the program went on.
    assert result.stderr.count("cuGraphicsUnregisterResource is not supported by rcuda, by design (graphics and "
                               "external-resource interop") == 1, result.stderr


def test_driver_program_needs_rcuda_to_start(driver_program):
    """No driver on this machine: without rcuda run's LD_LIBRARY_PATH the program cannot start."""
    result = subprocess.run([str(driver_program)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "libcuda.so.1" in result.stderr


def test_cuinit_without_servers_fails_with_cuda_code(driver_program, tmp_path):
    """No server answers: cuInit fails with a driver status, the program is told."""
    result = run_program(driver_program, "127.0.0.1:9", env_extra={"RCUDA_TIMEOUT": "2"})
    assert "FAILED init\n" in result.stdout and result.returncode == 1, result.stdout + result.stderr


def test_runtime_program_gets_driver_entry_points_under_preload(compile_cuda, servers):
    program = compile_cuda("driver_entry_point.cu")
    result = run_program(program, servers, via="preload")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED driver_entry_point" in result.stdout, result.stdout + result.stderr
    assert "cudaErrorNotSupported" not in result.stderr


def test_rcuda_run_refuses_static_runtime_even_with_libcuda(compile_cuda, build_dir):
    """A program with the static runtime and linked to libcuda.so.1 as well
    is still refused: its runtime calls cannot be intercepted."""
    static = compile_cuda("vector_add.cu", "-Xlinker=--no-as-needed", f"-L{dropin_dir()}", "-l:libcuda.so.1",
                          cudart="static")
    assert "libcuda.so.1" in needed(static)
    result = subprocess.run([*RCUDA, "run", "--servers", "127.0.0.1:9", "--", str(static)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "static CUDA runtime" in result.stderr, result.stderr
