"""PyTorch as a CUDA host, through `rcuda run` on sim servers: everything
that needs no kernel of PyTorch's (tests/python_hosts/torch_host.py), on two
GPUs of one server and on one GPU each of two servers, and a clean exit;
on a GPU server, PyTorch's own kernels and an MLP's training steps
(tests/python_hosts/torch_mlp.py) against the local GPU.

PyTorch runs in a Python that has both torch and rcuda: RCUDA_TORCH_PYTHON,
else the repository's .venv-torch (which .ci/run makes: torch pins older
nvidia-* wheels than the test extra's, so it lives apart), else this one if
it has torch.  Without one the tests skip, saying so."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rcuda.benchmarks.micro.torch_startup import OUTSIDE, torch_python

HOST = Path(__file__).resolve().parent / "python_hosts" / "torch_host.py"
MLP = HOST.with_name("torch_mlp.py")  # PyTorch's own kernels: on a GPU server
EXIT_STATUS = 3  # what torch_host.py exits with

EXPECTED = ["ok devices 2", "ok to and from the device", "ok non_blocking with pinned memory",
            "ok copies between GPUs", "ok streams and timed events", "ok caching allocator", "ok linear"]


@pytest.fixture(scope="module")
def python():
    found = torch_python()
    if found is None:
        pytest.skip("no Python with both torch and rcuda: run .ci/run's .venv-torch step, or set "
                    "RCUDA_TORCH_PYTHON to one")
    return found


def run_torch(python: str, servers: list, host: Path = HOST) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run([python, "-m", "rcuda.cli", "run", "--servers", ",".join(s.address for s in servers),
                           "--", python, str(host)], capture_output=True, text=True, timeout=300, env=env,
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


def mlp_result(result: subprocess.CompletedProcess, where: str) -> dict:
    assert result.returncode == 0, f"{where}: exit {result.returncode}\n{result.stdout}\n{result.stderr[-4000:]}"
    line = next((line for line in result.stdout.splitlines() if line.startswith("RESULT ")), None)
    assert line, f"{where}: no RESULT line\n{result.stdout}\n{result.stderr[-4000:]}"
    return json.loads(line[len("RESULT "):])


def test_pytorch_mlp_on_a_gpu(python, server_factory):
    """PyTorch's kernels, torch.matmul and an MLP's training steps on a GPU
    server give the losses the local GPU gives (the same kernels and
    libraries on the same numbers); the step times are printed beside."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
    local = mlp_result(subprocess.run([python, str(MLP)], capture_output=True, text=True, timeout=300, env=env,
                                      cwd=OUTSIDE), "the local GPU")
    server = server_factory("--backend", "cupy", "--devices", "1")
    remote = mlp_result(run_torch(python, [server], MLP), "through rcuda")
    print(f"MLP step: local GPU {local['seconds_per_step'] * 1e3:.3f} ms, through rcuda "
          f"{remote['seconds_per_step'] * 1e3:.3f} ms")
    assert len(remote["losses"]) == len(local["losses"])
    for mine, theirs in zip(remote["losses"], local["losses"]):
        assert abs(mine - theirs) <= 1e-4 * abs(theirs), (remote["losses"], local["losses"])
