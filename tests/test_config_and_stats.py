"""Configuration layers (file < environment < flags), `rcuda config`,
RCUDA_LOG=debug call tracing and the RCUDA_STATS=1 summary, against real
programs and servers."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import CUDA_SOURCES, RCUDA, requires_nvcc, run_program, start_server
from rcuda.config import ConfigError, resolve


def write(path, text):
    path.write_text(text)
    return path


def test_precedence_file_then_environment_then_flags(tmp_path):
    config = write(tmp_path / "c.toml", '[client]\nservers = ["a:1", "b:2"]\ntimeout = 5\nlog = "info"\n'
                                        '[server]\nbackend = "sim"\ndevices = 3\n')
    env = {"RCUDA_CONFIG": str(config), "RCUDA_TIMEOUT": "2.5"}
    client = resolve("client", env)
    assert [str(s) for s in client["servers"].value] == ["a:1", "b:2"] and client["servers"].source == str(config)
    assert client["timeout"].value == 2.5 and client["timeout"].source == "RCUDA_TIMEOUT"
    assert client["log"].value == "info" and client["stats"].source == "default"
    server = resolve("server", env, flags={"devices": 2, "backend": None})
    assert server["devices"].value == 2 and server["devices"].source == "--devices"
    assert server["backend"].value == "sim" and server["backend"].source == str(config)


def test_config_file_mistakes_are_named(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting.*servrs"):
        resolve("client", {"RCUDA_CONFIG": str(write(tmp_path / "a.toml", '[client]\nservrs = "x:1"\n'))})
    with pytest.raises(ConfigError, match="timeout.*positive"):
        resolve("client", {"RCUDA_CONFIG": str(write(tmp_path / "b.toml", "[client]\ntimeout = -1\n"))})
    with pytest.raises(ConfigError, match="no such file"):
        resolve("client", {"RCUDA_CONFIG": str(tmp_path / "missing.toml")})
    with pytest.raises(ConfigError, match=r"cannot read config file"):
        resolve("client", {"RCUDA_CONFIG": str(write(tmp_path / "c.toml", "[client\n"))})


def test_rcuda_config_shows_values_and_sources(tmp_path):
    config = write(tmp_path / "c.toml", '[client]\nservers = "gpu1:7777"\n')
    env = dict(os.environ, RCUDA_CONFIG=str(config), RCUDA_STATS="1")
    out = subprocess.run([*RCUDA, "config"], capture_output=True, text=True, env=env, check=True).stdout
    assert f"config file: {config}" in out
    assert re.search(rf"servers\s+= gpu1:7777\s+\({re.escape(str(config))}\)", out)
    assert re.search(r"stats\s+= True\s+\(RCUDA_STATS\)", out)
    assert re.search(r"timeout\s+= 10.0\s+\(default\)", out)


@requires_nvcc
def test_server_takes_its_settings_from_the_config_file(tmp_path, compile_cuda):
    config = write(tmp_path / "c.toml", f'[server]\nbackend = "sim"\ndevices = 2\n'
                                        f'kernels = ["{CUDA_SOURCES / "sim_kernels.py"}"]\n')
    server = start_server(env=dict(os.environ, RCUDA_CONFIG=str(config)))
    try:
        assert "sim backend, 2 device(s)" in server.ready_line
        result = run_program(compile_cuda("vector_add.cu"), server, "1000")
        assert "devices: 2" in result.stdout and "PASSED" in result.stdout, result.stderr
    finally:
        server.stop()


@requires_nvcc
def test_a_bad_config_file_fails_the_programs_cuda_calls_clearly(tmp_path, compile_cuda, sim_server):
    config = write(tmp_path / "c.toml", "[client]\ntimeout = \"soon\"\n")
    result = run_program(compile_cuda("errors.cu"), sim_server, "count", env_extra={"RCUDA_CONFIG": str(config)})
    assert "cudaGetDeviceCount(&n) -> 1 cudaErrorInvalidValue" in result.stdout
    assert str(config) in result.stderr and "timeout" in result.stderr


@requires_nvcc
def test_trace_logs_every_forwarded_call(compile_cuda, sim_server):
    result = run_program(compile_cuda("vector_add.cu"), sim_server, "1000", env_extra={"RCUDA_LOG": "debug"})
    assert "PASSED" in result.stdout
    label = re.escape(f"GPU0 ({sim_server.address} GPU0)")
    assert len(re.findall(rf"DEBUG: htod {label}: 4000 B out, 0 B back, \d+ us", result.stderr)) == 2
    assert re.search(rf"DEBUG: dtoh {label}: 0 B out, 4000 B back, \d+ us", result.stderr)
    assert re.search(rf"DEBUG: launch {label}: \d+ B out, 0 B back, async", result.stderr)


@requires_nvcc
def test_stats_summary_at_exit(compile_cuda, server_factory):
    server = server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / "runtime_kernels.py"))
    result = run_program(compile_cuda("runtime_streams.cu"), server, "launch_batches",
                         env_extra={"RCUDA_STATS": "1"})
    assert "ok launch_batches" in result.stdout, result.stderr
    summary = result.stderr[result.stderr.index("rcuda: CUDA API summary"):]
    row = r"^\s+[\d.]+\s+[\d.]+\s+(\d+)\s+[\d.]+\s+[\d.]+\s+(\S.*)$"  # time%, total, calls, avg, max, name
    rows = {m[2]: int(m[1]) for m in re.finditer(row, summary, re.M)}
    assert rows["cudaMemcpyAsync"] == 14 and rows["cudaStreamSynchronize"] == 4
    # 4,000 launches of one kernel: the first teaches the C path, which takes the rest.
    assert rows["cudaLaunchKernel (through Python)"] == 1
    traffic = re.search(r"GPU0 \(\S+ GPU0\)\s+(.+)$", summary, re.M)[1].split()
    assert traffic[-1] == "3999"  # C launches


def test_the_clients_start_leaves_out_what_it_does_not_use(tmp_path):
    """Every CUDA program imports the client: modules only some programs
    need (a config file's parser, key files, pyzmq's asyncio helpers, the
    fatbin dump's command line, the server) stay out of its start-up."""
    code = ("import sys; from rcuda.client import entrypoints; "
            "print(' '.join(sorted(m for m in sys.modules)))")
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path), RCUDA_CONFIG="")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert "rcuda.client.state" in loaded  # it did import the client
    for module in ("tomllib", "zmq.auth", "asyncio", "zmq.utils.monitor", "argparse", "rcuda.server",
                   "numpy"):
        assert module not in loaded, f"{module} is imported at every program's start"
