"""Shared fixtures: compile real CUDA programs, start real rcuda servers.

Programs are compiled with `nvcc -cudart shared` exactly as a user would,
then run unmodified through `rcuda run` against `rcuda server` processes on
ephemeral loopback ports.  Every server is stopped at the end of its test,
also when the test fails.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CUDA_SOURCES = TESTS / "cuda"
SERVER_START_TIMEOUT = 60
PROGRAM_TIMEOUT = 120

RCUDA = [sys.executable, "-m", "rcuda.cli"]


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or (shutil.which("nvcc", path="/usr/local/cuda/bin"))


requires_nvcc = pytest.mark.skipif(nvcc_path() is None,
                                   reason="nvcc not found: install the CUDA 13 toolkit to build test programs")


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cuda-build")


@pytest.fixture(scope="session")
def compile_cuda(build_dir):
    """compile_cuda("vector_add.cu", "-arch=sm_80") -> path of the binary.
    Sources are in tests/cuda; each (source, flags) pair is built once."""
    nvcc = nvcc_path()
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA 13 toolkit to build test programs")
    built: dict = {}
    lock = threading.Lock()

    def compile_(source: str, *flags: str, cudart: str = "shared") -> Path:
        src = CUDA_SOURCES / source
        key = hashlib.sha1(f"{src.read_bytes()!r}{flags}{cudart}".encode()).hexdigest()[:12]
        with lock:
            if key not in built:
                out = build_dir / f"{src.stem}-{key}"
                cmd = [nvcc, "-cudart", cudart, "-o", str(out), str(src), *flags]
                result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                if result.returncode != 0:
                    raise RuntimeError(f"nvcc failed: {' '.join(cmd)}\n{result.stderr}")
                built[key] = out
            return built[key]

    return compile_


@pytest.fixture(scope="session")
def module_image(tmp_path_factory) -> bytes:
    """tests/cuda_sources/fatbin_kernels.cu as a fatbinary (sm_75 code and PTX),
    for the tests that load a module into a backend device directly."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA 13 toolkit to build test programs")
    out = tmp_path_factory.mktemp("backend") / "kernels.fatbin"
    subprocess.run([nvcc, "-fatbin", "-o", str(out), str(TESTS / "cuda_sources" / "fatbin_kernels.cu"),
                    "-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_75,code=compute_75"],
                   check=True, capture_output=True, timeout=300)
    return out.read_bytes()


@dataclass
class Server:
    """A running `rcuda server`."""

    process: subprocess.Popen
    address: str  # HOST:PORT
    ready_line: str
    log: list[str] = field(default_factory=list)
    log_reader: threading.Thread | None = None

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log_reader is not None:
            self.log_reader.join(timeout=10)  # everything it wrote is in `log` now

    def wait_for_log(self, text: str, timeout: float = 20.0) -> bool:
        """Whether the server logs `text` within `timeout` seconds: for tests
        of what an operator is told (a log line is written after the event
        it reports, so it is waited for, never just looked for)."""
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def kill(self) -> None:
        """Like a machine going away: the daemon and its workers, at once."""
        self.stop(signal.SIGKILL)

    @property
    def stderr(self) -> str:
        return "".join(self.log)


def start_server(*args: str, env: dict | None = None, listen: str = "tcp://127.0.0.1:0") -> Server:
    cmd = [*RCUDA, "server", "--listen", listen, *args]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, start_new_session=True)
    log: list[str] = []
    log_reader = threading.Thread(target=lambda: log.extend(iter(process.stderr.readline, "")), daemon=True)
    log_reader.start()
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(SERVER_START_TIMEOUT)
    line = lines[0] if lines else ""
    match = re.search(r"ready on tcp://(\S+):(\d+)", line)
    if not match:
        process.kill()
        process.wait()
        time.sleep(0.1)
        raise RuntimeError(f"server did not start: {' '.join(cmd)}\nstdout: {line!r}\nstderr: {''.join(log)}")
    return Server(process, f"{match[1]}:{match[2]}", line, log, log_reader)


@pytest.fixture
def server_factory():
    """server_factory("--kernels", path, ...) -> a started Server; all are
    stopped when the test ends."""
    servers: list[Server] = []

    def factory(*args: str, **kwargs) -> Server:
        server = start_server(*args, **kwargs)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.stop()


@pytest.fixture
def sim_server(server_factory):
    """One sim server with the test kernels of tests/cuda/sim_kernels.py."""
    return server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / "sim_kernels.py"))


@pytest.fixture(scope="module")
def sim_program_output(compile_cuda):
    """sim_program_output("prog.cu", "kernels.py") -> the CompletedProcess of
    one run of the program through rcuda against a fresh sim server with
    those kernels (tests/cuda/ paths); each program runs once per module."""
    results: dict = {}

    def run(source: str, kernels: str):
        if (source, kernels) not in results:
            server = start_server("--backend", "sim", "--kernels", str(CUDA_SOURCES / kernels))
            try:
                results[(source, kernels)] = run_program(compile_cuda(source), server)
            finally:
                server.stop()
        return results[(source, kernels)]

    return run


def wait_for(predicate, seconds: float, what: str):
    """predicate()'s first true value, asked every 0.3 s for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"not within {seconds}s: {what}")


def run_program(binary, servers, *args: str, env_extra: dict | None = None, timeout: float = PROGRAM_TIMEOUT,
                via: str = "run") -> subprocess.CompletedProcess:
    """Run a program unmodified through rcuda (`rcuda run`, or plain
    LD_PRELOAD when via="preload")."""
    servers = ",".join(s.address if isinstance(s, Server) else s for s in
                       (servers if isinstance(servers, (list, tuple)) else [servers]))
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(env_extra or {})
    if via == "run":
        cmd = [*RCUDA, "run", "--servers", servers, "--", str(binary), *args]
    else:
        lib = subprocess.run([*RCUDA, "lib"], capture_output=True, text=True, check=True).stdout.strip()
        env.update(LD_PRELOAD=lib, RCUDA_SERVERS=servers)
        cmd = [str(binary), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


# ---------------------------------------------------------------- a GPU server's thread, stood in for


@pytest.fixture(scope="session")
def stand_in(tmp_path_factory):
    """The stand-in driver library (tests/stand_in_service.py)."""
    import stand_in_service
    library = stand_in_service.build(tmp_path_factory.mktemp("driver"))
    if library is None:
        pytest.skip("no C compiler to build the stand-in driver")
    return library


@pytest.fixture
def driver(stand_in):
    """The stand-in, its log and answers reset."""
    stand_in.stand_in_reset()
    stand_in.stand_in_set_current(0xC0)
    return stand_in


@pytest.fixture
def service(driver):
    """A session's GPU thread (DeviceService) on the cupy backend, CuPy
    stood in for by tests/fake_cuda.py and the driver by the stand-in."""
    import stand_in_service
    with stand_in_service.service(driver.path) as gpu_service:
        assert gpu_service.device.batch_executor is not None
        yield gpu_service
