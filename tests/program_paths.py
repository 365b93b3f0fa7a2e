"""A sectioned test program (tests/cuda/*.cu, each section printing "ok
NAME") run on a sim server on the paths a call can take: the device's lane
(C; sealed on a --auth server), the ZeroMQ link (Python; CURVE on a --auth
server), and, with RCUDA_STATS, every call through Python.  And the same
program on cupy servers, the real driver and GPU behind rcuda (run_on_gpu,
servers_of): the GPU tests, named *on_a_gpu* or with a cupy case (what
benchmarks/gpu/run.sh selects), which skip, saying why, where cupy sees no
GPU."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from auth_helpers import make_keys
from conftest import CUDA_SOURCES, run_program, start_server

#: The backends a program can run on: the sim everywhere, the real driver and
#: GPU (cupy) where there is one.
BACKENDS = ["sim", "cupy"]

#: RCUDA_STATS=1: no call is made or recorded in C, launches aside.
THROUGH_PYTHON = {"RCUDA_STATS": "1"}
#: Each GPU's ZeroMQ socket, never its lane.
ON_SOCKETS = {"RCUDA_LINK": "socket"}


def run_on_sim(compile_cuda, source: str, kernels: str, *sections: str, auth_root=None, env: dict | None = None,
               devices: int = 2, timeout: float = 300, flags=()):
    """Run `source`'s `sections` (all by default) against a sim server of
    `devices` GPUs with the plugin file tests/cuda/`kernels`; a --auth server
    when `auth_root` is a folder for its keys, reached on its ZeroMQ link
    (CURVE), or on its sealed lanes with `env` RCUDA_LINK=lane.  `flags`:
    nvcc's, to build the program (a library's -I, -L and -l)."""
    args = ["--backend", "sim", "--devices", str(devices), "--kernels", str(CUDA_SOURCES / kernels)]
    env = dict(env or {})
    if auth_root is not None:
        keys = make_keys(auth_root)
        args += ["--auth", str(keys.server_dir)]
        env = {**ON_SOCKETS, **keys.env(), **env}
    server = start_server(*args)
    try:
        return run_program(compile_cuda(source, *flags), server, *sections, env_extra=env, timeout=timeout)
    finally:
        server.stop()


def check_section(result, *sections: str) -> None:
    """The sections ran, and nothing in the run failed."""
    assert "FAILED" not in result.stdout, result.stdout + result.stderr[-3000:]
    for section in sections:
        assert f"ok {section}" in result.stdout, result.stdout + result.stderr[-3000:]


def check_passed(result, source: str) -> None:
    """The whole program `source` (foo.cu) ran: exit 0 and its "PASSED foo" line."""
    assert result.returncode == 0 and f"PASSED {Path(source).stem}" in result.stdout, \
        result.stdout + result.stderr[-3000:]


def gpu_count() -> int:
    """The GPUs the cupy backend sees here; skips the test, saying why, where none."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    import cupy
    return cupy.cuda.runtime.getDeviceCount()


@contextlib.contextmanager
def gpu_servers(devices: int = 1, one_server: bool = True, peers: bool = False):
    """Started cupy servers giving a program `devices` GPUs: one server of
    that many; or, where this machine has fewer and the program needs no GPUs
    of one server (`one_server` False), one server per GPU, each serving
    GPU0, as benchmarks/gpu's remote GPUs do.  `peers`: the one server's GPUs
    must reach each other's memory.  Skips the test, saying why, where that
    cannot be had; stops the servers after."""
    count = gpu_count()
    if count < devices and (one_server or peers):
        pytest.skip(f"needs {devices} GPUs on one server; cupy sees {count}")
    if peers and devices > 1:  # (one server's GPUs)
        import cupy
        if not cupy.cuda.runtime.deviceCanAccessPeer(0, 1):
            pytest.skip("needs GPUs of one server that are peers: GPU0 and GPU1 are not")
    servers = []
    try:
        for gpus in [devices] if count >= devices else [1] * devices:
            servers.append(start_server("--backend", "cupy", "--devices", str(gpus)))
        yield servers
    finally:
        for server in servers:
            server.stop()


def run_on_gpu(compile_cuda, source: str, *args: str, devices: int = 1, one_server: bool = True,
               peers: bool = False, env: dict | None = None, timeout: float = 300, flags=()):
    """Run `source` with `args` (its sections) on the cupy servers of
    `gpu_servers`; `flags`: nvcc's, to build it."""
    with gpu_servers(devices, one_server, peers) as servers:
        return run_program(compile_cuda(source, *flags), servers, *args, env_extra=env, timeout=timeout)


@contextlib.contextmanager
def servers_of(backend: str, kernels: str, devices: int = 1, one_server: bool = True):
    """Servers giving a program `devices` GPUs of `backend` (one of
    BACKENDS): a sim server running the plugins of tests/cuda/`kernels`, or
    those of `gpu_servers`.  For fixtures parametrized over BACKENDS."""
    if backend == "cupy":
        with gpu_servers(devices, one_server) as servers:
            yield servers
        return
    server = start_server("--backend", "sim", "--devices", str(devices), "--kernels", str(CUDA_SOURCES / kernels))
    try:
        yield [server]
    finally:
        server.stop()
