"""What every benchmark shares: the machine's description, building the
benchmark programs, starting servers and helper processes, running a
program through rcuda, statistics and JSON results.

Servers are started the way the test suite starts them (tests/conftest.py):
`rcuda server --listen tcp://127.0.0.1:0` in a session of its own, its
"ready on" line read with a deadline, and stopped (SIGTERM, then SIGKILL)
even when a benchmark fails.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rcuda.python_command import python_module_command

log = logging.getLogger(__name__)

BENCH_DIR = Path(__file__).resolve().parent
CUDA_DIR = BENCH_DIR / "cuda"
SIM_KERNELS = CUDA_DIR / "bench_kernels.py"
#: The source checkout this package lives in, if it does (an editable install).
REPO = BENCH_DIR.parent if (BENCH_DIR.parent / "setup.py").is_file() else None

START_TIMEOUT = 60.0  # seconds for a server or helper process to say it is ready
PROGRAM_TIMEOUT = 600.0

#: `python -m rcuda.cli`, importing nothing from the current directory (a checkout there is not this rcuda).
RCUDA = python_module_command("rcuda.cli")


class BenchmarkError(RuntimeError):
    """A benchmark could not run (no nvcc, a server that did not start, a
    program that failed); the message says which and why."""


def default_results_dir(quick: bool) -> Path:
    """benchmarks/results in a source checkout (quick runs in a subfolder, so
    they never overwrite a committed full run); ./rcuda-bench-results
    otherwise."""
    base = REPO / "benchmarks" / "results" if REPO else Path.cwd() / "rcuda-bench-results"
    return base / "quick" if quick else base


# ---------------------------------------------------------------- the machine


def describe_machine() -> dict:
    """Everything a reader needs to judge where the numbers come from."""
    import msgpack
    import zmq

    from rcuda import __version__

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "virtualised": _virtualised(),
        "memory_bytes": _meminfo("MemTotal"),
        "os": _os_name(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "numpy": np.__version__,
        "msgpack": ".".join(map(str, msgpack.version)),
        "rcuda": __version__,
        "rcuda_commit": _git_commit(),
        "nvcc": _nvcc_version(),
        "gpus": _gpus(),
        "load_average": list(os.getloadavg()),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _virtualised() -> bool:
    try:
        return " hypervisor" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _meminfo(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()


def _git_commit() -> str | None:
    """HEAD of the checkout, with "-dirty" when it has uncommitted changes."""
    if REPO is None or shutil.which("git") is None:
        return None
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if head and dirty else head or None


def _nvcc_version() -> str | None:
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release ([\d.]+), (V[\d.]+)", out)
    if match:
        return f"{match[1]} ({match[2]})"
    return out.strip().splitlines()[-1] if out.strip() else None


def _gpus() -> list[dict]:
    """Local GPUs, from nvidia-smi; none on a GPU-less machine."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "memory": parts[1], "driver": parts[2]})
    return gpus


# ---------------------------------------------------------------- programs


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or shutil.which("nvcc", path="/usr/local/cuda/bin")


def build_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "rcuda" / "bench-build"
    path.mkdir(parents=True, exist_ok=True)
    return path


_build_lock = threading.Lock()


def compile_cuda(source: str, *flags: str) -> Path:
    """Build benchmarks/cuda/SOURCE with `nvcc -cudart shared` (once per
    content and flags; cached across runs)."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise BenchmarkError("nvcc not found: the benchmarks build CUDA programs; install the CUDA 13 toolkit")
    src = CUDA_DIR / source
    inputs = src.read_bytes() + (CUDA_DIR / "bench_common.h").read_bytes()
    key = hashlib.sha1(inputs + repr((flags, nvcc)).encode()).hexdigest()[:12]
    out = build_dir() / f"{src.stem}-{key}"
    with _build_lock:
        if not out.is_file():
            partial = out.with_suffix(".partial")
            cmd = [nvcc, "-cudart", "shared", "-O2", "-o", str(partial), str(src), *flags]
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                raise BenchmarkError(f"nvcc failed: {' '.join(cmd)}\n{result.stderr}")
            partial.rename(out)
    return out


def rcuda_environment(servers: str, extra: dict | None = None) -> dict:
    """The environment `rcuda run` gives a program (see RunCommand): the
    interposer preloaded (libpython findable beside it), the servers, and
    this Python's rcuda."""
    from rcuda.libpython import native_library

    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    library, libpython_dir = native_library()
    env["LD_PRELOAD"] = str(library)
    if libpython_dir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [env.get("LD_LIBRARY_PATH"), libpython_dir]))
    env["RCUDA_SERVERS"] = servers
    env["RCUDA_PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env.update(extra or {})
    return env


def run_program(cmd: list, env: dict | None = None, timeout: float = PROGRAM_TIMEOUT, pass_fds=()) -> dict:
    """Run a benchmark program (giving it `pass_fds`); returns the JSON of its
    `RESULT {...}` line.  A failure raises BenchmarkError with the program's output."""
    try:
        result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                                env=env, pass_fds=pass_fds)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"{' '.join(map(str, cmd))} did not finish within {timeout:.0f}s") from None
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise BenchmarkError(f"{' '.join(map(str, cmd))} failed (exit {result.returncode}):\n"
                             f"{result.stdout[-2000:]}{result.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


# ---------------------------------------------------------------- processes


@dataclass
class Process:
    """A helper process (an rcuda server, a ping-pong peer) that printed the
    line saying where it listens."""

    popen: subprocess.Popen
    ready_line: str
    stderr_lines: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream:
                stream.close()


def start_process(cmd: list, ready: str, env: dict | None = None) -> Process:
    """Start `cmd` in a session of its own and wait for a stdout line matching
    the regex `ready`."""
    popen = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, start_new_session=True)
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(iter(popen.stderr.readline, "")), daemon=True).start()
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(popen.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    line = lines[0] if lines else ""
    process = Process(popen, line.strip(), errors)
    if not re.search(ready, line):
        process.stop()
        raise BenchmarkError(f"{' '.join(map(str, cmd))} did not start:\nstdout: {line!r}\n"
                             f"stderr: {''.join(errors)[-4000:]}")
    return process


@dataclass
class Server:
    """A running `rcuda server` (and its session workers, all in one
    process group)."""

    process: Process
    address: str  # HOST:PORT
    #: What a client of this server needs in its environment (its keys, for --auth).
    client_env: dict = field(default_factory=dict)

    def usage(self) -> dict:
        """The server's totals over its GPUs and sessions (`rcuda smi`'s
        counters: calls, serve_seconds, bytes moved), once the session
        workers have reported what happened so far."""
        import zmq

        from rcuda import protocol
        from rcuda.auth import ClientKeys
        from rcuda.config import ClientConfig, parse_server
        from rcuda.smi import query

        time.sleep(1.5 * protocol.STATUS_INTERVAL)  # workers report every STATUS_INTERVAL
        keys = ClientKeys.from_config(ClientConfig.load(dict(os.environ, **self.client_env)))
        context = zmq.Context()
        try:
            status = query(parse_server(self.address), 10.0, context, keys)
        finally:
            context.term()
        if "error" in status:
            raise BenchmarkError(f"rcuda server at {self.address}: {status['error']}")
        return {key: sum(gpu.get(key, 0) for gpu in status["gpus"])
                for key in ("calls", "serve_seconds", "bytes_to_device", "bytes_from_device")}

    def wait_idle(self, quiet: float = 0.2, timeout: float = 10.0) -> bool:
        """Wait until the server's processes stop using CPU (a new session
        makes the daemon start a spare worker, which would compete with the
        next measurement on a small machine).  False if still busy at the
        timeout."""
        return wait_idle(self.process.popen.pid, quiet, timeout)

    def cpu_seconds(self) -> float:
        """CPU time used so far by the daemon and its workers."""
        return process_group_cpu_seconds(self.process.popen.pid)


@contextmanager
def sim_server(devices: int = 1, kernels: Path = SIM_KERNELS, extra_args=(), client_env: dict | None = None,
               server_env: dict | None = None):
    """An `rcuda server --backend sim` on a free loopback port (`server_env`:
    variables added to its environment, which its workers inherit)."""
    process = start_process([*RCUDA, "server", "--listen", "tcp://127.0.0.1:0", "--backend", "sim",
                             "--devices", str(devices), "--kernels", str(kernels), "--log-level", "warning",
                             *extra_args], r"ready on tcp://\S+:\d+",
                            env=dict(os.environ, **server_env) if server_env else None)
    try:
        match = re.search(r"ready on tcp://(\S+):(\d+)", process.ready_line)
        server = Server(process, f"{match[1]}:{match[2]}", dict(client_env or {}))
        server.wait_idle()
        yield server
    finally:
        process.stop()


@contextmanager
def auth_sim_server(devices: int = 1, kernels: Path = SIM_KERNELS):
    """A sim server with --auth (fresh keys): its devices' links are their
    CURVE-encrypted ZeroMQ sockets.  `client_env` holds the client's keys."""
    import tempfile

    from rcuda import auth

    with tempfile.TemporaryDirectory(prefix="rcuda-bench-keys-") as root:
        server_dir = Path(root) / "server"
        auth.create_key_pair(server_dir, "server")
        (server_dir / "clients").mkdir()
        public, secret = auth.create_key_pair(Path(root) / "client", "client")
        shutil.copy(public, server_dir / "clients")
        env = {"RCUDA_KEY": str(secret), "RCUDA_SERVER_KEY": str(server_dir / "server.key")}
        with sim_server(devices, kernels, ["--auth", str(server_dir)], env) as server:
            yield server


def process_group_cpu_seconds(pgid: int) -> float:
    """CPU time used so far by the live threads of a process group's
    processes, to the nanosecond (schedstat; threads that ended are not
    counted, which is fine for long-lived servers and peers)."""
    total_ns = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # after the name: state ppid pgrp ...
                continue
            for task in (entry / "task").iterdir():
                total_ns += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a process or thread that just ended
    return total_ns / 1e9


def process_group_cpu(pgid: int) -> dict[int, float]:
    """Per process of a process group: the CPU seconds it used so far, its
    reaped children's included (a session worker ends with its session and
    its time moves to the daemon).  Clock ticks (10 ms) are the resolution."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # after the name: state ppid pgrp ...; then utime stime cutime cstime
                used[int(entry.name)] = sum(int(x) for x in fields[11:15]) / tick
        except (OSError, ValueError, IndexError):
            continue  # a process that just ended
    return used


def cpu_used_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds a process group used between two `process_group_cpu`
    readings, leaving out processes that started in between and are still
    there (a daemon's next spare worker, importing its libraries)."""
    return sum(after.values()) - sum(before.values()) - sum(t for pid, t in after.items() if pid not in before)


def wait_idle(pgid: int, quiet: float = 0.2, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    used = process_group_cpu_seconds(pgid)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = process_group_cpu_seconds(pgid)
        if now - used < 0.05 * quiet:  # under 5% of one CPU over the interval
            return True
        used = now
    return False


@dataclass
class Peer:
    """A ping-pong or stream peer (benchmarks/micro/peers.py)."""

    process: Process
    address: str  # what it printed: HOST:PORT or a ZeroMQ endpoint

    def cpu_seconds(self) -> float:
        return process_group_cpu_seconds(self.process.popen.pid)


@contextmanager
def peer(*args: str):
    """A peer in its own process (and process group)."""
    process = start_process([*python_module_command("rcuda.benchmarks.micro.peers"), *args], r"^ready \S+")
    try:
        yield Peer(process, process.ready_line.split()[1])
    finally:
        process.stop()


def children_cpu_seconds() -> float:
    """CPU time of this process's children that have been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------- statistics

PERCENTILES = (50, 90, 99, 99.9)


def summarise(samples_us) -> dict:
    """Percentiles, mean, extremes and a 201-point CDF of microsecond samples."""
    a = np.asarray(samples_us, dtype=float)
    stats = {f"p{p:g}": float(np.percentile(a, p)) for p in PERCENTILES}
    stats.update(mean=float(a.mean()), min=float(a.min()), max=float(a.max()), n=int(a.size))
    stats["cdf_us"] = [round(float(v), 2) for v in np.percentile(a, np.linspace(0, 100, 201))]
    return stats


def goal(value: float, op: str, target: float) -> dict:
    met = value <= target if op == "<=" else value >= target
    return {"value": round(float(value), 4), "goal": f"{op} {target:g}", "met": bool(met)}


# ---------------------------------------------------------------- results


def write_json(path: Path, payload: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    tmp.replace(path)
    return path


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class Progress:
    """Progress lines for a person watching: `[  12.3s] micro/latency: ...`."""

    def __init__(self, stream=None):
        self.stream = stream
        self.started = time.monotonic()
        self.prefix = ""

    def __call__(self, message: str) -> None:
        if self.stream is not None:
            self.stream.write(f"[{time.monotonic() - self.started:7.1f}s] {self.prefix}{message}\n")
            self.stream.flush()


@dataclass
class Context:
    """What a benchmark's run() is given."""

    quick: bool
    out_dir: Path
    progress: Progress
