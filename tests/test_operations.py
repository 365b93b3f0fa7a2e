"""Running a server for others: rcuda smi and the status behind it, the
metrics endpoint, what a killed client leaves behind (nothing), sessions
that cannot hurt each other, and a graceful SIGTERM."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import CUDA_SOURCES, RCUDA, requires_nvcc, run_program, wait_for

pytestmark = requires_nvcc
KERNELS = str(CUDA_SOURCES / "sim_kernels.py")
TIMEOUT = 60


def start_program(binary, server, *args, **env):
    """The program through rcuda, in the background; returns once it says
    it is holding its memory."""
    process = subprocess.Popen([*RCUDA, "run", "--servers", server.address, "--", str(binary), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, **env))
    line = process.stdout.readline()
    assert line.startswith("holding"), line + process.stderr.read()
    return process


def smi_json(*servers, timeout=3) -> list[dict]:
    out = subprocess.run([*RCUDA, "smi", "--json", "--timeout", str(timeout), "--servers", ",".join(servers)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def status_when(server, test, seconds: float, what: str) -> dict:
    """The server's status once `test(status)` holds."""
    def check():
        status = smi_json(server.address)[0]
        return status if test(status) else None
    return wait_for(check, seconds, what)


def test_smi_shows_memory_and_sessions_and_unreachable_servers(compile_cuda, server_factory):
    server = server_factory("--backend", "sim", "--devices", "2", "--kernels", KERNELS)
    program = start_program(compile_cuda("hold_memory.cu"), server, "96", "8")
    try:
        status = status_when(server, lambda s: s["gpus"][0]["memory_used"] >= 96 << 20, 10, "smi sees 96 MiB")
        (session,) = status["sessions"]
        assert session["program"].startswith("hold_memory") and session["pid"] == program.pid
        assert session["memory"] == {"0": 96 << 20, "1": 0} and status["gpus"][1]["memory_used"] == 0

        started = time.monotonic()
        text = subprocess.run([*RCUDA, "smi", "--timeout", "2", "--servers", f"{server.address},127.0.0.1:1"],
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert text.returncode == 1 and time.monotonic() - started < 10
        assert "127.0.0.1:1: unreachable" in text.stdout
        assert re.search(r"0  rcuda sim GPU 0\s+96 MiB / 16,384 MiB", text.stdout), text.stdout
        assert re.search(rf"{program.pid}\s+hold_memory\S*\s+GPU0: 96 MiB", text.stdout), text.stdout
    finally:
        program.kill()
        program.wait()


def test_smi_watch_refreshes(sim_server):
    out = subprocess.run([*RCUDA, "smi", "--watch", "0.2", "--count", "3", "--servers", sim_server.address],
                         capture_output=True, text=True, timeout=TIMEOUT).stdout
    assert out.count("rcuda smi ") == 3 and out.count("no client sessions") == 3


def test_sigkilled_client_frees_everything(compile_cuda, server_factory):
    """The session ends (its lane closes with the process; without a lane,
    its heartbeats stop) and everything it held is freed."""
    server = server_factory("--backend", "sim", "--kernels", KERNELS, "--session-timeout", "3")
    program = start_program(compile_cuda("hold_memory.cu"), server, "200", "60")
    wait_for(lambda: smi_json(server.address)[0]["gpus"][0]["memory_used"] >= 200 << 20, 10, "200 MiB held")
    program.send_signal(signal.SIGKILL)
    program.wait()
    status = status_when(server, lambda s: not s["sessions"], 15, "the killed client's session ends")
    assert status["gpus"][0]["memory_used"] == 0


def test_sessions_cannot_hurt_each_other(compile_cuda, server_factory):
    server = server_factory("--backend", "sim", "--kernels", KERNELS)
    bystander = start_program(compile_cuda("hold_memory.cu"), server, "32", "6")
    try:
        # A sticky error (an illegal address) in another session on the same GPU...
        sticky = run_program(compile_cuda("errors.cu"), server, "oob")
        assert "cudaDeviceSynchronize() -> 700 cudaErrorIllegalAddress" in sticky.stdout
        # ...and another session's worker process dying outright.
        victim = start_program(compile_cuda("hold_memory.cu"), server, "16", "30")
        status = status_when(server, lambda s: len(s["sessions"]) == 2, 10, "two sessions")
        worker = next(s["worker_pid"] for s in status["sessions"] if s["pid"] == victim.pid)
        os.kill(worker, signal.SIGKILL)
        out, err = victim.communicate(timeout=TIMEOUT)
        assert victim.returncode == 1 and "cudaErrorDevicesUnavailable" in out, out + err
        # The bystander saw none of it: its memory stayed intact throughout.
        out, err = bystander.communicate(timeout=TIMEOUT)
        assert bystander.returncode == 0 and "released" in out, out + err
    finally:
        for process in (bystander, victim):
            if process.poll() is None:
                process.kill()


def test_metrics_endpoint(compile_cuda, server_factory):
    server = server_factory("--backend", "sim", "--kernels", KERNELS, "--metrics-port", "0")
    port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", server.ready_line)[1])

    def scrape() -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()

    assert 'rcuda_gpu_memory_total_bytes{gpu="0",name="rcuda sim GPU 0"} 1.7179869184e+10' in scrape()
    result = run_program(compile_cuda("vector_add.cu"), server, "1000")
    assert "PASSED" in result.stdout

    def counted():  # once the session has ended, its final counts are in the totals
        text = scrape()
        calls = float(re.search(r"rcuda_gpu_calls_total\{[^}]*\} (\S+)", text)[1])
        moved = float(re.search(r'rcuda_gpu_bytes_total\{direction="to_device"[^}]*\} (\S+)', text)[1])
        return (calls, moved) if "rcuda_sessions 0.0" in text and calls > 0 else None
    calls, moved = wait_for(counted, 15, "the program's session ends and is counted")
    assert calls >= 8 and moved == 8000  # two 4,000-byte copies to the device


def test_sigterm_ends_sessions_and_stops(compile_cuda, server_factory):
    server = server_factory("--backend", "sim", "--kernels", KERNELS)
    program = start_program(compile_cuda("hold_memory.cu"), server, "32", "60", RCUDA_TIMEOUT="5")
    worker = wait_for(lambda: smi_json(server.address)[0]["sessions"], 10, "a session")[0]["worker_pid"]
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    assert time.monotonic() - started < 20
    assert "ending 1 session(s)" in server.stderr and "server stopped" in server.stderr
    wait_for(lambda: not os.path.exists(f"/proc/{worker}"), 10, "the session worker exits")
    out, _ = program.communicate(timeout=TIMEOUT)
    assert program.returncode == 1 and "cudaErrorDevicesUnavailable" in out  # told, not hung
