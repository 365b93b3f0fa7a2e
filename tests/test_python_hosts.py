"""Python programs as CUDA hosts (tests/python_hosts/host.py) through
`rcuda run` against sim servers: the client starts inside the program's own
interpreter whichever thread makes the first CUDA call, holding the GIL (a C
extension) or not (ctypes), and the program exits with its own status."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import CUDA_SOURCES, RCUDA, nvcc_path, requires_nvcc

HOSTS = Path(__file__).resolve().parent / "python_hosts"
EXIT_STATUS = 3  # what host.py exits with


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory) -> Path:
    """tests/python_hosts/probe.c built as the extension module cuda_probe,
    by nvcc (which knows the toolkit's headers) against the shared runtime
    (rcuda's drop-in at run time)."""
    nvcc = nvcc_path()
    include = Path(sysconfig.get_paths()["include"])
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA 13 toolkit to build the extension")
    if not (include / "Python.h").exists():
        pytest.skip(f"building a C extension needs Python's headers ({include}/Python.h; python3-dev)")
    folder = tmp_path_factory.mktemp("probe")
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", f"-I{include}",
                    str(HOSTS / "probe.c"), "-o", str(folder / f"cuda_probe{sysconfig.get_config_var('EXT_SUFFIX')}")],
                   check=True)
    return folder


@pytest.fixture
def two_gpus(server_factory):
    return server_factory("--backend", "sim", "--devices", "2", "--kernels", str(CUDA_SOURCES / "sim_kernels.py"))


def run_host(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RCUDA, "run", "--servers", server.address, "--", sys.executable,
                           str(HOSTS / "host.py"), *args], capture_output=True, text=True, timeout=120)


def ok_lines(result) -> list[str]:
    assert result.returncode == EXIT_STATUS, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return [line for line in result.stdout.splitlines() if line.startswith("ok ")]


@requires_nvcc
def test_a_ctypes_host_starts_the_client_and_keeps_its_exit_status(two_gpus):
    assert ok_lines(run_host(two_gpus, "ctypes")) == ["ok devices 2"]


@requires_nvcc
def test_the_first_call_may_come_from_another_thread(two_gpus):
    assert ok_lines(run_host(two_gpus, "thread")) == ["ok devices 2"]


@requires_nvcc
def test_an_extension_holding_the_gil_after_a_library_registered_its_modules(two_gpus, probe_dir, compile_cuda):
    """The library's modules, registered when ctypes loaded it (before any
    CUDA call), reach the client at the extension's first call: the
    library's own kernel then runs, on device memory and on managed memory
    the program reads with the GIL held right after the launch."""
    library = compile_cuda("module_library.cu", "-shared", "-Xcompiler", "-fPIC")
    assert ok_lines(run_host(two_gpus, "extension", str(library), str(probe_dir))) == [
        "ok devices 2 status 0", "ok round trip", "ok library kernel", "ok managed memory"]


@requires_nvcc
def test_first_calls_at_once_with_and_without_the_gil(two_gpus, probe_dir):
    """Threads holding the GIL wait for the start without it: the one that
    starts the client needs the GIL."""
    assert ok_lines(run_host(two_gpus, "race", str(probe_dir))) == ["ok devices [2, 2, 2, 2, 2, 2]"]


@requires_nvcc
def test_a_forked_child_gets_a_client_of_its_own(two_gpus):
    assert ok_lines(run_host(two_gpus, "fork")) == [
        "ok devices 2", "ok child devices 2", "ok child exit 5", "ok devices again 2"]


@requires_nvcc
def test_calls_after_the_client_closed_at_exit(two_gpus):
    """An exit handler that runs after the client's own (a library's
    destructors, in PyTorch): what is done succeeds, anything new gets CUDA's
    shutting-down status, and nothing reaches the finalized interpreter."""
    lines = ok_lines(run_host(two_gpus, "after_exit"))
    assert lines == ["ok devices 2", "ok after exit " + str({
        "cudaFree": 0, "cudaSetDevice": 0, "cudaGetDevice": (0, 1), "cudaEventCreate": 0, "cudaEventRecord": 0,
        "cudaEventSynchronize": 0, "cudaStreamIsCapturing": (0, 0), "cudaDeviceSynchronize": 0,
        "cudaGetLastError": 0, "cudaMalloc": 4, "cudaGetErrorString(4)": "driver shutting down"})]

