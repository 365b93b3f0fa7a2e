"""PyTorch as a CUDA host, through `rcuda run` on sim servers: everything
that needs no kernel of PyTorch's (tests/python_hosts/torch_host.py), on two
GPUs of one server and on one GPU each of two servers, and a clean exit.

PyTorch runs in a Python that has both torch and rcuda: RCUDA_TORCH_PYTHON,
else the repository's .venv-torch (which .ci/run makes: torch pins older
nvidia-* wheels than the test extra's, so it lives apart), else this one if
it has torch.  Without one the tests skip, saying so."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rcuda.benchmarks.micro.torch_startup import OUTSIDE, torch_python

HOST = Path(__file__).resolve().parent / "python_hosts" / "torch_host.py"
EXIT_STATUS = 3  # what torch_host.py exits with

EXPECTED = ["ok devices 2", "ok to and from the device", "ok non_blocking with pinned memory",
            "ok copies between GPUs", "ok streams and timed events", "ok caching allocator"]


@pytest.fixture(scope="module")
def python():
    found = torch_python()
    if found is None:
        pytest.skip("no Python with both torch and rcuda: run .ci/run's .venv-torch step, or set "
                    "RCUDA_TORCH_PYTHON to one")
    return found


def run_torch(python: str, servers: list) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run([python, "-m", "rcuda.cli", "run", "--servers", ",".join(s.address for s in servers),
                           "--", python, str(HOST)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=OUTSIDE)


def check(result) -> None:
    assert result.returncode == EXIT_STATUS, f"exit {result.returncode}\n{result.stdout}\n{result.stderr[-4000:]}"
    lines = [line for line in result.stdout.splitlines() if line.startswith("ok ")]
    assert [line for line in lines if not line.startswith(("ok properties", "ok kernel"))] == EXPECTED, lines
    assert any(line.startswith("ok properties rcuda sim GPU") and line.endswith("True True") for line in lines)
    # A kernel of PyTorch's on a sim server: refused, and the log names it.
    assert lines[-1] == "ok kernel refused: CUDA error: invalid device function", lines
    assert "the sim backend has no implementation of kernel" in result.stderr
    assert "vectorized_elementwise_kernel" in result.stderr
    assert "Traceback" not in result.stderr and "terminate called" not in result.stderr, result.stderr[-4000:]


def test_pytorch_on_two_gpus_of_one_server(python, server_factory):
    check(run_torch(python, [server_factory("--backend", "sim", "--devices", "2")]))


def test_pytorch_on_gpus_of_two_servers(python, server_factory):
    servers = [server_factory("--backend", "sim", "--devices", "1") for _ in range(2)]
    check(run_torch(python, servers))
