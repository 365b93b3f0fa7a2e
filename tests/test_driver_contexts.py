"""The driver API's devices, contexts, streams, events, pointer and function
attributes and occupancy: tests/cuda/driver_contexts.cu, a program using the
runtime and the driver (linked to rcuda's libcuda.so.1), run unmodified
through `rcuda run` against a sim server with two GPUs, and where there is a
GPU against cupy servers."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from program_paths import check_passed, check_section, run_on_gpu, run_on_sim
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc
LINK_DRIVER = (f"-L{dropin_dir()}", "-l:libcuda.so.1")

SECTIONS = ["before_init", "no_context", "devices", "primary_contexts", "primary_is_runtime_device",
            "push_pop_two_devices", "created_context", "streams_across_apis", "pointer_attributes",
            "functions_and_occupancy", "runtime_binds_primary", "attach_detach"]


@pytest.fixture(scope="module")
def result(compile_cuda):
    return run_on_sim(compile_cuda, "driver_contexts.cu", "driver_context_kernels.py", flags=LINK_DRIVER)


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    assert f"ok {section}\n" in result.stdout, result.stdout + result.stderr[-3000:]


def test_whole_program_passed(result):
    assert result.returncode == 0 and "PASSED driver_contexts" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "internal error" not in result.stderr, result.stderr


def test_bad_calls_are_logged_by_name(result):
    """Bad input is answered with CUDA's codes, and the log names the call."""
    assert "cuCtxGetDevice: no context is current in this thread" in result.stderr, result.stderr
    assert "cuCtxGetDevice: the thread's current context was destroyed" in result.stderr, result.stderr


def test_on_a_gpu(compile_cuda):
    """The cupy backend: the same program, the real driver behind rcuda's
    contexts.  Two GPUs: another server's GPU0 where this machine has one
    (rcuda's contexts are the client's, one set per GPU it is given)."""
    result = run_on_gpu(compile_cuda, "driver_contexts.cu", devices=2, one_server=False, flags=LINK_DRIVER)
    check_section(result, *SECTIONS)
    check_passed(result, "driver_contexts.cu")
    assert "internal error" not in result.stderr, result.stderr[-3000:]
