"""A sectioned test program (tests/cuda/*.cu, each section printing "ok
NAME") run on a sim server on the paths a call can take: the device's lane
(C; sealed on a --auth server), the ZeroMQ link (Python; CURVE on a --auth
server), and, with RCUDA_STATS, every call through Python."""
from __future__ import annotations

from pathlib import Path

from auth_helpers import make_keys
from conftest import CUDA_SOURCES, run_program, start_server

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
