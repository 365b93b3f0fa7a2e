"""Where the paper table's remote GPUs are: four rcuda servers, and how the
program reaches them.

    loopback        four sim servers on 127.0.0.1 with the cost model
                    (EMULATED GPUs, this machine's loopback as the network)
    netns-RATE      four network-namespace hosts (rcuda/hosts.py) on one
                    bridge, each host's link shaped to RATE both ways with tc
                    tbf, a sim server with the cost model on each, the
                    program in the client namespace (EMULATED: GPUs and
                    network).  No added latency: netem is not available on
                    these machines, so the links have the veth pairs' own
                    (tens of microseconds), far less than a real switch's.
    cupy-loopback   four cupy servers on 127.0.0.1, each serving GPU0 of
                    this machine (real GPU; only where one is present).
                    They share one GPU, so 2 and 4 of them measure rcuda's
                    overheads, not scaling.

Each is a context manager yielding a Testbed; servers and namespaces go away
on the way out, also on failure.
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Iterator

from .. import common
from .model import SIM_KERNELS, CostModel

SERVERS = 4
NETNS_PREFIX = "rcbp"  # namespaces rcbp<pid>-c, rcbp<pid>-h1, ...
NETNS_SUBNET = "10.86.0"
LINK_CHECK_BYTES = 32 << 20


@dataclass
class Testbed:
    key: str
    label: str  # says EMULATED where anything is
    emulated: bool
    servers: str  # RCUDA_SERVERS
    prefix: list[str] = field(default_factory=list)  # runs a command where the program runs
    rate: str | None = None
    server_pids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    link_gbit_per_s: float | None = None  # measured with one raw TCP stream (netns only)

    def wait_idle(self) -> None:
        """Let the servers settle (a new session makes each daemon start a
        spare worker, which competes with the next run on a small machine)."""
        for pid in self.server_pids:
            common.wait_idle(pid, timeout=5.0)

    def describe(self) -> dict:
        return {"key": self.key, "label": self.label, "emulated": self.emulated, "rate": self.rate,
                "link_gbit_per_s_measured": self.link_gbit_per_s, "servers": self.servers, "notes": self.notes}


def _server_command(listen: str, backend_args: list[str]) -> list[str]:
    return [*common.RCUDA, "server", "--listen", listen, *backend_args, "--log-level", "warning"]


def sim_arguments() -> list[str]:
    return ["--backend", "sim", "--devices", "1", "--kernels", str(SIM_KERNELS)]


@contextlib.contextmanager
def _loopback(key: str, label: str, emulated: bool, backend_args: list[str], env: dict) -> Iterator[Testbed]:
    processes = []
    try:
        for _ in range(SERVERS):
            processes.append(common.start_process(_server_command("tcp://127.0.0.1:0", backend_args),
                                                  r"ready on tcp://\S+:\d+", env=env))
        addresses = [re.search(r"ready on tcp://(\S+:\d+)", p.ready_line)[1] for p in processes]
        bed = Testbed(key, label, emulated, ",".join(addresses), server_pids=[p.popen.pid for p in processes])
        bed.wait_idle()
        yield bed
    finally:
        for process in processes:
            process.stop()


def loopback_sim(model: CostModel) -> contextlib.AbstractContextManager[Testbed]:
    label = f"EMULATED: {SERVERS} sim servers ({model.name}) on loopback"
    return _loopback("loopback", label, True, sim_arguments(), dict(os.environ, **model.environment()))


def loopback_cupy() -> contextlib.AbstractContextManager[Testbed]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")  # every server serves GPU0
    label = f"real GPU: {SERVERS} cupy servers on loopback, all serving GPU0"
    return _loopback("cupy-loopback", label, False, ["--backend", "cupy", "--devices", "1"], env)


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values`, restored on the way out: rcuda.hosts starts
    its servers with this process's environment."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def netns_unavailable() -> str | None:
    from rcuda.netns import unavailable_reason

    if sys.platform != "linux":
        return "network namespaces are Linux-only"
    if os.geteuid() != 0:
        return "network namespaces need root"
    reason = unavailable_reason()
    if reason is None and subprocess.run(["which", "tc"], capture_output=True).returncode != 0:
        reason = "iproute2's `tc` is not installed (the links are shaped with tc tbf)"
    return reason


@contextlib.contextmanager
def netns_sim(model: CostModel, rate: str) -> Iterator[Testbed]:
    from rcuda.hosts import Hosts
    from rcuda.netns import NetnsError, remove_stale_networks

    remove_stale_networks(NETNS_PREFIX)
    name = f"{NETNS_PREFIX}{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="rcuda-paper-hosts-") as state:
        # Unencrypted, like the paper's system and the committed results: CURVE
        # would add its own cost to every byte of the parameter exchange.
        hosts = Hosts(SERVERS, name=name, subnet=NETNS_SUBNET, rate=rate, state_dir=state, auth=False,
                      server_args=[*sim_arguments(), "--log-level", "warning"])
        try:
            with _environment(model.environment()):
                hosts.up()
        except (NetnsError, ValueError) as exc:
            hosts.down()
            raise common.BenchmarkError(f"netns testbed at {rate}: {exc}") from None
        try:
            network = hosts.network
            bed = Testbed(
                f"netns-{rate}",
                f"EMULATED: {SERVERS} network-namespace hosts, links shaped to {_rate_words(rate)} (tc tbf), "
                f"sim servers ({model.name})",
                True, hosts.servers_variable, prefix=network.exec_argv(network.client_namespace, []), rate=rate,
                server_pids=[s.pid for s in hosts.servers],
                notes=["no added latency (netem is not available): veth round trips only"])
            measured = _link_check(network)
            bed.link_gbit_per_s = measured
            bed.notes.append(f"raw TCP from a host to the client namespace ({LINK_CHECK_BYTES >> 20} MiB, one "
                             f"stream): " + (f"{measured:.2f} Gbit/s" if measured else "check failed"))
            bed.wait_idle()
            yield bed
        finally:
            hosts.down()


def _rate_words(rate: str) -> str:
    match = re.fullmatch(r"(\d+)gbit", rate)
    return f"{match[1]} Gbit/s" if match else rate


_SENDER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 0)); s.listen(1); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); data = bytes(1 << 20)
for _ in range(int(sys.argv[2]) >> 20): c.sendall(data)
c.close()
"""
_RECEIVER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); buf = bytearray(1 << 20); got = 0
t = time.perf_counter()
while True:
    n = c.recv_into(buf)
    if not n: break
    got += n
print(got, time.perf_counter() - t)
"""


def _link_check(network) -> float | None:
    """Gbit/s of one raw TCP stream from host 1 to the client namespace:
    what the shaped link (and this machine's CPUs) really give; None if the
    check itself failed."""
    try:
        return _stream_gbit_per_s(network)
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def _stream_gbit_per_s(network) -> float:
    host = network.hosts[0]
    sender = subprocess.Popen(network.exec_argv(host.namespace, [sys.executable, "-c", _SENDER, host.address,
                                                                 str(LINK_CHECK_BYTES)]),
                              stdout=subprocess.PIPE, text=True)
    try:
        port = sender.stdout.readline().strip()
        out = subprocess.run(network.exec_argv(network.client_namespace,
                                               [sys.executable, "-c", _RECEIVER, host.address, port]),
                             capture_output=True, text=True, timeout=120).stdout.split()
        got, seconds = int(out[0]), float(out[1])
        return got * 8 / seconds / 1e9
    finally:
        sender.kill()
        sender.wait()
