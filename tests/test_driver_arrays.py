"""The driver API's CUDA arrays, texture and surface objects
(tests/cuda/driver_arrays.cu): arrays and their descriptors, 1-D, 2-D, 3-D
and peer copies with array sides, mipmapped arrays, objects queried by both
APIs, a kernel sampling a texture and writing a surface, and bad input; run
unmodified through rcuda against a two-GPU sim server, on the lane and on a
--auth server's ZeroMQ link.  And the driver's legacy execution control
and texture and surface references (tests/cuda/driver_legacy.cu), below.
Where there is a GPU, both programs on cupy servers too."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import CUDA_SOURCES, nvcc_path, requires_nvcc, run_program, start_server
from program_paths import check_passed, check_section, run_on_gpu, run_on_sim
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc

SECTIONS = ["arrays", "copies", "peer", "mipmapped", "objects", "kernels", "bad_input", "queries", "old_abi"]
KERNELS = "driver_array_kernels.py"
LINK_DRIVER = (f"-L{dropin_dir()}", "-l:libcuda.so.1")


def run(compile_cuda, *sections: str, auth_root=None):
    return run_on_sim(compile_cuda, "driver_arrays.cu", KERNELS, *sections, auth_root=auth_root, flags=LINK_DRIVER)


@pytest.fixture(scope="module")
def result(compile_cuda):
    return run(compile_cuda, *SECTIONS)


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    check_passed(result, "driver_arrays.cu")


def test_on_a_zeromq_link(compile_cuda, tmp_path):
    """A --auth server: every call takes the Python link, none is made in C."""
    result = run(compile_cuda, "copies", "kernels", "async_pinned", auth_root=tmp_path)
    check_section(result, "copies", "kernels", "async_pinned")


def test_on_a_gpu(compile_cuda):
    """The cupy backend: the driver's real arrays and objects, the kernel
    sampling and writing them on the GPU."""
    sections = [s for s in SECTIONS if s != "peer"] + ["async_pinned"]
    result = run_on_gpu(compile_cuda, "driver_arrays.cu", *sections, flags=LINK_DRIVER)
    check_section(result, *sections)
    check_passed(result, "driver_arrays.cu")


def test_peer_copies_on_a_gpu(compile_cuda):
    """Array copies between two GPUs (another server's GPU0 where this machine has one)."""
    result = run_on_gpu(compile_cuda, "driver_arrays.cu", "peer", devices=2, one_server=False, flags=LINK_DRIVER)
    check_section(result, "peer")
    check_passed(result, "driver_arrays.cu")


def test_async_copies_into_pinned_memory(compile_cuda):
    """Asynchronous copies out of arrays into pinned memory have landed when
    cuStreamSynchronize returns (on the lane: the reply's bytes are written
    by the link's service thread)."""
    check_section(run(compile_cuda, "async_pinned"), "async_pinned")


# ---------------------------------------------------------------- the legacy execution control and references
# tests/cuda/driver_legacy.cu: launches through cuFuncSetBlockShape,
# cuFuncSetSharedSize, cuParamSet* and cuLaunch/cuLaunchGrid(Async), every
# cuTexRef*/cuSurfRef* state function and its errors, and kernels reading a
# PTX module's `.global .texref`/`.surfref` (driver_legacy_kernels.ptx; the
# sim runs driver_legacy_kernels.py, which reads them with launch.texref and
# launch.surfref).

LEGACY_SECTIONS = ["legacy_launch", "legacy_errors", "texref_lookup", "texref_state", "texref_sampling", "unloaded"]
LEGACY_PTX = CUDA_SOURCES / "driver_legacy_kernels.ptx"


@pytest.fixture(scope="module")
def legacy_result(compile_cuda):
    program = compile_cuda("driver_legacy.cu", *LINK_DRIVER)
    server = start_server("--backend", "sim", "--kernels", str(CUDA_SOURCES / "driver_legacy_kernels.py"))
    try:
        return run_program(program, server, str(LEGACY_PTX))
    finally:
        server.stop()


@pytest.mark.parametrize("section", LEGACY_SECTIONS)
def test_legacy_section(legacy_result, section):
    check_section(legacy_result, section)


def test_legacy_program_passes(legacy_result):
    check_passed(legacy_result, "driver_legacy.cu")


def test_legacy_program_on_a_gpu(compile_cuda):
    """The cupy backend: the driver's JIT compiles the PTX module, its
    references bound to real arrays and memory, the GPU sampling through them."""
    result = run_on_gpu(compile_cuda, "driver_legacy.cu", str(LEGACY_PTX), flags=LINK_DRIVER)
    check_section(result, *LEGACY_SECTIONS)
    check_passed(result, "driver_legacy.cu")


def test_the_legacy_module_is_ptx_a_gpu_takes(tmp_path):
    """The hand-written PTX compiles (ptxas) for the GPUs rcuda serves, and
    its cubin declares the references the PTX does."""
    from rcuda import fatbin
    ptxas = Path(nvcc_path()).with_name("ptxas")
    ptx_refs = fatbin.parse_image(LEGACY_PTX.read_bytes() + b"\0").references()
    assert ptx_refs == {"texLinear": "texture", "texImage": "texture", "surfImage": "surface"}
    for arch in ("sm_80", "sm_90"):
        cubin = tmp_path / f"legacy_{arch}.cubin"
        subprocess.run([str(ptxas), f"-arch={arch}", str(LEGACY_PTX), "-o", str(cubin)], check=True,
                       capture_output=True, text=True, timeout=120)
        assert fatbin.parse_image(cubin.read_bytes()).references() == ptx_refs


def test_ptx_references_in_each_spelling():
    """`.global .texref`/`.surfref`, the deprecated `.tex` space, linkage
    words and an initializer name references; variables and kernels do not."""
    from rcuda import fatbin
    ptx = (b".version 8.0\n.target sm_80\n.address_size 64\n.global .texref plain;\n.tex .u32 old_style;\n"
           b".extern .global .texref elsewhere;\n.global .texref initialised = { filter_mode = linear };\n"
           b".visible .global .surfref surf;\n.global .u32 counter;\n.global .samplerref sampler;\n"
           b".visible .entry k() { ret; }\n\0")
    assert fatbin.parse_image(ptx).references() == {
        "plain": "texture", "old_style": "texture", "elsewhere": "texture", "initialised": "texture",
        "surf": "surface"}
    assert set(fatbin.parse_image(ptx).variables()) == {"counter"}
