"""NVIDIA's conjugateGradientMultiBlockCG flow, unmodified through rcuda on a
sim server: managed memory filled by the host, one cooperative kernel with
grid-wide barriers (computed whole by its plugin), the residual checked by
the host through the same pointers, and a grid one block too large refused."""
from __future__ import annotations

import re

import pytest

from conftest import run_program
from program_paths import THROUGH_PYTHON, run_on_sim


@pytest.mark.parametrize("env", [{}, THROUGH_PYTHON], ids=["lane", "through-python"])
def test_solves_the_system(compile_cuda, env):
    result = run_on_sim(compile_cuda, "conjugate_gradient.cu", "conjugate_gradient_kernels.py", "262144",
                        devices=1, env=env)
    assert result.returncode == 0 and "ok conjugate_gradient" in result.stdout, result.stdout + result.stderr[-3000:]
    residual = float(re.search(r"residual (\S+)", result.stdout).group(1))
    assert residual < 1e-3


def test_on_a_gpu(compile_cuda, server_factory):
    """The cupy backend: the driver's cooperative launch, the real kernel."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    result = run_program(compile_cuda("conjugate_gradient.cu"), server, timeout=300)
    assert result.returncode == 0 and "ok conjugate_gradient" in result.stdout, result.stdout + result.stderr[-3000:]
