"""Device and kernel queries, occupancy, flags, limits, cudaDeviceReset and
cudaLaunchKernelEx, from tests/cuda/runtime_queries.cu run unmodified through
rcuda on a sim server."""
from __future__ import annotations

import re

import pytest

from conftest import requires_nvcc

pytestmark = requires_nvcc

SECTIONS = ["attributes", "kernels", "occupancy", "flags", "reset", "launch_ex"]


@pytest.fixture(scope="module")
def result(sim_program_output):
    return sim_program_output("runtime_queries.cu", "runtime_kernels.py")


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    assert "FAILED" not in result.stdout, result.stdout + result.stderr
    assert f"ok {section}" in result.stdout, result.stdout + result.stderr


def test_whole_program_passes(result):
    assert result.returncode == 0 and "PASSED runtime_queries" in result.stdout, result.stdout + result.stderr


def test_reported_values(result):
    assert "versions 13000 13000" in result.stdout
    assert "fillKernel is _Z10fillKernelPiii" in result.stdout
    # A100-like sim GPU: 2048 threads per SM, so 8 blocks of 256 for a light kernel.
    blocks = int(re.search(r"occupancy: (\d+) blocks of 256", result.stdout)[1])
    assert blocks == 8
