"""`rcuda demo`: MNIST trained data-parallel on four rcuda servers, in one command.

It builds examples/mnist_dp with nvcc (once; cached), makes the default data
set (the 5k MNIST subset, rcuda/demo_data.py), starts four local `rcuda
server`s on free loopback ports (backend auto: real GPUs through cupy when
there are any, the sim backend with the example's numpy kernels otherwise),
runs the unmodified program through `rcuda run` with its progress on the
terminal, prints a summary, and stops the servers it started, also on Ctrl-C
or failure.  With RCUDA_SERVERS set it uses those servers instead; with
--netns the servers run in four network-namespace hosts (needs root).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, TextIO

from rcuda import demo_data
from rcuda.python_command import python_module_command


def _example_dir() -> Path:
    """examples/mnist_dp, which setup.py installs as package data of
    rcuda.examples: rcuda/examples/mnist_dp beside this module in an
    installed rcuda; in an editable install, the checkout's examples/ (mapped
    to rcuda.examples too, but not importable there: it has no __init__.py)."""
    package = Path(__file__).resolve().parent
    for examples in (package / "examples", package.parent / "examples"):
        if (examples / "mnist_dp" / "mnist_dp.cu").is_file():
            return examples / "mnist_dp"
    return package / "examples" / "mnist_dp"  # missing: example_sources() says so


EXAMPLE_DIR = _example_dir()
SIM_KERNELS = EXAMPLE_DIR / "sim_kernels.py"
LOCAL_SERVERS = 4
SERVER_START_TIMEOUT = 60.0  # seconds for a server to print its ready line
SERVER_STOP_TIMEOUT = 15.0
BUILD_TIMEOUT = 600.0
NVCC_FLAGS = ("-cudart", "shared", "-O3", "-std=c++17")  # -O3: the host's loops vectorised
ZLIB_HEADERS = (Path("/usr/include/zlib.h"), Path("/usr/local/include/zlib.h"))

class DemoError(Exception):
    """Something the user can fix; the message says what."""


# ---------------------------------------------------------------- building


def find_nvcc() -> str:
    nvcc = shutil.which("nvcc") or shutil.which("nvcc", path="/usr/local/cuda/bin")
    if nvcc is None:
        raise DemoError(
            "the demo builds a CUDA program and needs nvcc, the CUDA compiler, which is not on PATH. Install the "
            "CUDA 13 toolkit (https://developer.nvidia.com/cuda-downloads, or your distribution's cuda-toolkit "
            "package) and add its bin directory (usually /usr/local/cuda/bin) to PATH. rcuda itself needs no GPU: "
            "the demo runs on simulated GPUs when this machine has none.")
    return nvcc


def example_sources() -> list[Path]:
    if not (EXAMPLE_DIR / "mnist_dp.cu").is_file():
        raise DemoError(f"the example's sources are not at {EXAMPLE_DIR}: this rcuda was installed without its "
                        f"package data; reinstall it from a source checkout (pip install .)")
    return sorted(p for p in EXAMPLE_DIR.iterdir() if p.suffix in (".cu", ".cuh", ".h"))


def build_flags() -> tuple[list[str], list[str]]:
    """(compiler flags, libraries to link)."""
    if any(h.is_file() for h in ZLIB_HEADERS):
        return [*NVCC_FLAGS, "-DMNIST_DP_ZLIB"], ["-lz"]  # gzipped IDX files
    return list(NVCC_FLAGS), []


def build_example(say, cache: Path | None = None) -> Path:
    """The built program, compiled now unless an identical build is cached
    (same sources, flags and nvcc)."""
    nvcc = find_nvcc()
    sources = example_sources()
    flags, libraries = build_flags()
    key = hashlib.sha256()
    for item in (nvcc, _nvcc_version(nvcc), *flags, *libraries):
        key.update(item.encode() + b"\0")
    for path in sources:
        key.update(path.name.encode() + b"\0" + path.read_bytes())
    out_dir = (cache or demo_data.cache_dir()) / "build"
    binary = out_dir / f"mnist_dp-{key.hexdigest()[:16]}"
    if binary.is_file():
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    say(f"building {EXAMPLE_DIR / 'mnist_dp.cu'} with nvcc (once; kept in {out_dir})")
    partial = binary.with_name(binary.name + f".partial-{os.getpid()}")
    command = [nvcc, *flags, "-o", str(partial), str(EXAMPLE_DIR / "mnist_dp.cu"), *libraries]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise DemoError(f"nvcc took more than {BUILD_TIMEOUT:.0f} s: {' '.join(command)}") from None
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise DemoError(f"building the example failed:\n{' '.join(command)}\n{result.stderr.strip()}")
    os.replace(partial, binary)
    return binary


def _nvcc_version(nvcc: str) -> str:
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


# ---------------------------------------------------------------- servers


@dataclass
class Servers:
    """Where the program's GPUs are: the RCUDA_SERVERS value, how to say it,
    and (netns) the namespace the program must run in."""

    addresses: str
    description: str
    namespace: str | None = None
    environment: dict | None = None  # e.g. the client's keys for servers with --auth


def _server_arguments() -> list[str]:
    return ["--backend", "auto", "--devices", "1", "--kernels", str(SIM_KERNELS)]


@contextlib.contextmanager
def local_servers(count: int, say) -> Iterator[Servers]:
    """`count` rcuda servers on free loopback ports, stopped on the way out."""
    processes: list[subprocess.Popen] = []
    try:
        for _ in range(count):
            processes.append(subprocess.Popen(
                [*python_module_command("rcuda.cli"), "server", "--listen", "tcp://127.0.0.1:0",
                 *_server_arguments()],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                start_new_session=True))  # Ctrl-C reaches the demo, which stops them in order
        lines = [_ready_line(p, SERVER_START_TIMEOUT) for p in processes]
        addresses = [re.search(r"ready on tcp://(\S+)", line)[1] for line in lines]
        backends = sorted({m[1] for line in lines if (m := re.search(r"\((\w+) backend", line))})
        description = f"{count} local rcuda servers ({', '.join(backends)} backend)"
        say(f"started {description}: {', '.join(addresses)}")
        yield Servers(",".join(addresses), description)
    finally:
        for process in processes:
            _stop(process)


def _ready_line(process: subprocess.Popen, timeout: float) -> str:
    """The server's first line of output, once it is ready; its log after
    that is drained in the background so it never blocks on a full pipe."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(iter(process.stderr.readline, "")), daemon=True).start()
    line = lines[0] if lines else ""
    if "ready on tcp://" not in line:
        process.kill()
        process.wait()
        time.sleep(0.2)  # let the drain thread pick up the last of stderr
        raise DemoError(f"an rcuda server did not start within {timeout:.0f} s:\n{line}{''.join(errors[-30:])}")
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    return line


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # the daemon stops its session workers
    try:
        process.wait(timeout=SERVER_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the daemon and its workers
        process.wait()


@contextlib.contextmanager
def netns_servers(count: int, say) -> Iterator[Servers]:
    """`count` network-namespace hosts with a server each (rcuda/hosts.py);
    everything is removed on the way out.  Kept in this one function so the
    host machinery can change without touching the demo."""
    try:
        from rcuda.hosts import Hosts
        from rcuda.netns import NetnsError, unavailable_reason
    except ImportError:
        raise DemoError("--netns is not available in this rcuda yet: it needs the network-namespace hosts "
                        "(rcuda hosts), which this installation does not have") from None
    reason = unavailable_reason()
    if reason:
        raise DemoError(f"--netns needs network namespaces: {reason}")
    hosts = Hosts(count, name=f"rcuda-demo{os.getpid()}", server_args=_server_arguments(),
                  state_dir=demo_data.cache_dir() / f"demo-hosts-{os.getpid()}")
    try:
        try:
            hosts.up()
        except (NetnsError, ValueError) as exc:
            raise DemoError(f"--netns: cannot start the hosts: {exc}") from None
        description = f"{count} rcuda servers in network-namespace hosts"
        say(f"started {description}: {hosts.servers_variable} (program in namespace "
            f"{hosts.network.client_namespace})")
        yield Servers(hosts.servers_variable, description, namespace=hosts.network.client_namespace,
                      environment=hosts.client_environment)
    finally:
        hosts.down()


@contextlib.contextmanager
def given_servers(addresses: str) -> Iterator[Servers]:
    count = len([a for a in addresses.split(",") if a.strip()])
    yield Servers(addresses, f"{count} rcuda server(s) from RCUDA_SERVERS")


# ---------------------------------------------------------------- running


def run_training(binary: Path, servers: Servers, program_args: list[str], out: TextIO) -> tuple[int, dict | None]:
    """Run the program through `rcuda run`, echoing its output; returns its
    exit status and its RESULT record."""
    command = [*python_module_command("rcuda.cli"), "run", "--servers", servers.addresses, "--", str(binary),
               *program_args]
    if servers.namespace:
        command = ["ip", "netns", "exec", servers.namespace, *command]
    result = None
    env = dict(os.environ, **(servers.environment or {}))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1,
                               env=env)
    try:
        for line in process.stdout:
            if line.startswith("RESULT "):
                with contextlib.suppress(ValueError):
                    result = json.loads(line[len("RESULT "):])
                continue
            out.write(line)
            out.flush()
        status = process.wait()
    finally:
        if process.poll() is None:  # Ctrl-C or an error here: the program goes too
            process.terminate()
            try:
                process.wait(timeout=SERVER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return status, result


def summary(result: dict, servers: Servers) -> str:
    return (f"test accuracy {100 * result['test_accuracy']:.2f}% after {result['epochs']} epoch(s) "
            f"({result['model']}, {result['train_samples']} training / {result['test_samples']} test images); "
            f"{result['train_seconds']:.1f} s of training on {result['devices']} remote GPU(s) "
            f"({servers.description}), {result['samples_per_second']:.0f} images/s, sync {result['sync']}")


def run(options, program_args: list[str], out: TextIO = sys.stdout) -> int:
    """The whole demo; `options` are DemoCommand's parsed arguments."""
    with _stopped_by_termination():
        return _run(options, program_args, out)


@contextlib.contextmanager
def _stopped_by_termination():
    """SIGTERM and SIGHUP end the demo like Ctrl-C does: through the finally
    blocks that stop the servers (they run in sessions of their own and
    would otherwise outlive it)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(options, program_args: list[str], out: TextIO) -> int:
    def say(text: str) -> None:
        out.write(f"rcuda demo: {text}\n")
        out.flush()

    binary = build_example(say)
    data = options.data or str(demo_data.ensure_mnist5k())
    args = ["--data", data, "--model", options.model, "--sync", options.sync]
    if options.epochs is not None:
        args += ["--epochs", str(options.epochs)]
    if options.devices is not None:
        args += ["--devices", str(options.devices)]
    args += program_args
    if options.netns:
        servers = netns_servers(LOCAL_SERVERS, say)
    elif os.environ.get("RCUDA_SERVERS", "").strip():
        servers = given_servers(os.environ["RCUDA_SERVERS"])
    else:
        say(f"starting {LOCAL_SERVERS} local rcuda servers")
        servers = local_servers(LOCAL_SERVERS, say)
    with servers as where:
        say(f"training: {binary.name} {' '.join(args)}")
        status, result = run_training(binary, where, args, out)
        if status != 0:
            raise DemoError(f"the training program failed (exit status {status}); its messages are above")
        if result is None:
            raise DemoError("the training program printed no RESULT line")
        say(summary(result, where))
    return 0
