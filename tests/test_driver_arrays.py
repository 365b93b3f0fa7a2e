"""The driver API's CUDA arrays, texture and surface objects
(tests/cuda/driver_arrays.cu): arrays and their descriptors, 1-D, 2-D, 3-D
and peer copies with array sides, mipmapped arrays, objects queried by both
APIs, a kernel sampling a texture and writing a surface, and bad input; run
unmodified through rcuda against a two-GPU sim server, on the lane and on a
--auth server's ZeroMQ link."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from program_paths import check_passed, check_section, run_on_sim
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc

SECTIONS = ["arrays", "copies", "peer", "mipmapped", "objects", "kernels", "bad_input"]
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


def test_async_copies_into_pinned_memory(compile_cuda):
    """Asynchronous copies out of arrays into pinned memory have landed when
    cuStreamSynchronize returns (on the lane: the reply's bytes are written
    by the link's service thread)."""
    check_section(run(compile_cuda, "async_pinned"), "async_pinned")
