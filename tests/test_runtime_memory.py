"""Memory: memsets, 2-D/pitched copies, symbols, cudaMemcpyDefault, pinned
host memory, pointer attributes and the errors of bad requests, from
tests/cuda/runtime_memory.cu run unmodified through rcuda on a sim server."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc

pytestmark = requires_nvcc

SECTIONS = ["memsets", "2d", "symbols", "default", "host", "bad_requests"]


@pytest.fixture(scope="module")
def result(sim_program_output):
    return sim_program_output("runtime_memory.cu", "runtime_kernels.py")


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    assert "FAILED" not in result.stdout, result.stdout + result.stderr
    assert f"ok {section}" in result.stdout, result.stdout + result.stderr


def test_whole_program_passes(result):
    assert result.returncode == 0 and "PASSED runtime_memory" in result.stdout, result.stdout + result.stderr
