"""Several hosts on one machine: Linux network namespaces joined by veth pairs.

    NAME-c   the client's namespace: a bridge br0 at SUBNET.254/24
    NAME-h1  host 1: eth0 at SUBNET.1/24, its veth peer h1 on the bridge
    ...
    NAME-hN  host N: eth0 at SUBNET.N/24

Everything, the bridge included, lives inside the namespaces, so the
machine's own network is never touched and several networks (even with the
same subnet) can exist at once.  Hosts reach each other and the client
through the bridge.  An optional rate limit (`tc` tbf, both directions of
each host's link) emulates a slower network; netem (delay, loss) is not
available everywhere, so it is not used.

Needs root and iproute2's `ip` (and `tc` for rate limits).  `Network` is a
context manager that removes everything it made, also on failure, and
removes leftovers of an earlier run of the same name first.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

IP_TIMEOUT = 30  # seconds for one `ip`/`tc` command
CLIENT_ADDRESS_SUFFIX = 254
MAX_HOSTS = 250


class NetnsError(RuntimeError):
    """A namespace command failed; the message has the command and its error."""


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT)
    if check and result.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here, or None if they can
    (checked by creating and removing one)."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    name = f"rcuda-probe-{os.getpid()}"
    try:
        result = run("ip", "netns", "add", name, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`ip netns add` could not run: {exc}"
    if result.returncode != 0:
        return f"cannot create a network namespace (root needed?): {result.stderr.strip()}"
    run("ip", "netns", "del", name, check=False)
    return None


def namespaces() -> list[str]:
    """The names of all network namespaces."""
    out = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def pids_in(namespace: str) -> list[int]:
    out = run("ip", "netns", "pids", namespace, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def remove_namespace(namespace: str, grace: float = 10.0) -> None:
    """End the processes inside `namespace` (SIGTERM, then SIGKILL after
    `grace` seconds), then delete it.  A namespace with processes left in it
    would outlive its deletion."""
    _signal_all(pids_in(namespace), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids_in(namespace) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_all(pids_in(namespace), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pids_in(namespace) and time.monotonic() < deadline:
        time.sleep(0.05)
    run("ip", "netns", "del", namespace, check=False)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def remove_network(name: str, grace: float = 10.0) -> list[str]:
    """Remove every namespace of network `name` (NAME-c, NAME-h1, ...)."""
    pattern = re.compile(rf"^{re.escape(name)}-(c|h\d+)$")
    removed = [ns for ns in namespaces() if pattern.match(ns)]
    # Hosts first: their servers end while the client side still exists.
    for ns in sorted(removed, key=lambda n: n.endswith("-c")):
        remove_namespace(ns, grace)
    return removed


def remove_stale_networks(prefix: str) -> list[str]:
    """Remove networks named PREFIX<pid>-... whose creating process <pid> is
    gone: leftovers of crashed test runs."""
    pattern = re.compile(rf"^({re.escape(prefix)}(\d+))-(c|h\d+)$")
    stale = set()
    for ns in namespaces():
        match = pattern.match(ns)
        if match and not _alive(int(match[2])):
            stale.add(match[1])
    for name in stale:
        log.info("removing network %s left by an earlier run", name)
        remove_network(name, grace=2.0)
    return sorted(stale)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Host:
    namespace: str
    address: str  # its IPv4 address
    client_side: str  # its veth end on the client's bridge (in the client namespace)


class Network:
    """N hosts and a client namespace on one bridge; see the module docstring."""

    def __init__(self, count: int, name: str = "rcuda", subnet: str = "10.77.0", rate: str | None = None,
                 burst: str = "256kb"):
        if not 1 <= count <= MAX_HOSTS:
            raise ValueError(f"between 1 and {MAX_HOSTS} hosts, not {count}")
        if not re.fullmatch(r"\d{1,3}\.\d{1,3}\.\d{1,3}", subnet):
            raise ValueError(f"subnet {subnet!r}: give the first three numbers of a /24, e.g. 10.77.0")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", name):
            raise ValueError(f"network name {name!r}: letters, digits, _ . - only")
        self.name = name
        self.subnet = subnet
        self.rate = rate
        self.burst = burst
        self.client_namespace = f"{name}-c"
        self.client_address = f"{subnet}.{CLIENT_ADDRESS_SUFFIX}"
        self.hosts = [Host(f"{name}-h{i}", f"{subnet}.{i}", f"h{i}") for i in range(1, count + 1)]

    def __enter__(self) -> "Network":
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> None:
        remove_network(self.name, grace=2.0)  # an earlier run's leftovers
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        log.info("network %s: client %s in %s, hosts %s", self.name, self.client_address, self.client_namespace,
                 ", ".join(f"{h.namespace}={h.address}" for h in self.hosts))

    def down(self) -> None:
        remove_network(self.name)

    def _build(self) -> None:
        client = self.client_namespace
        run("ip", "netns", "add", client)
        run("ip", "-n", client, "link", "set", "lo", "up")
        run("ip", "-n", client, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", client, "addr", "add", f"{self.client_address}/24", "dev", "br0")
        run("ip", "-n", client, "link", "set", "br0", "up")
        for host in self.hosts:
            run("ip", "netns", "add", host.namespace)
            run("ip", "-n", host.namespace, "link", "set", "lo", "up")
            # Both ends are created inside their namespaces: no name ever
            # appears in the machine's own namespace.
            run("ip", "-n", client, "link", "add", host.client_side, "type", "veth",
                "peer", "name", "eth0", "netns", host.namespace)
            run("ip", "-n", client, "link", "set", host.client_side, "master", "br0")
            run("ip", "-n", client, "link", "set", host.client_side, "up")
            run("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
            run("ip", "-n", host.namespace, "link", "set", "eth0", "up")
            if self.rate:
                # Egress of each end: the host's upload, and its download.
                for namespace, device in ((host.namespace, "eth0"), (client, host.client_side)):
                    run("tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "tbf", "rate", self.rate,
                        "burst", self.burst, "latency", "100ms")

    def exec_argv(self, namespace: str, argv: list[str]) -> list[str]:
        """`argv` run inside `namespace`."""
        return ["ip", "netns", "exec", namespace, *argv]

    def link_bytes(self, host: Host) -> tuple[int, int]:
        """(bytes the host sent, bytes it received) on its link so far."""
        return self._counters(host.namespace, "eth0")

    def client_bytes(self) -> tuple[int, int]:
        """(bytes the client namespace sent, received) on its bridge address:
        traffic to or from the client, not traffic between hosts."""
        return self._counters(self.client_namespace, "br0")

    @staticmethod
    def _counters(namespace: str, device: str) -> tuple[int, int]:
        out = run("ip", "netns", "exec", namespace, "cat", f"/sys/class/net/{device}/statistics/tx_bytes",
                  f"/sys/class/net/{device}/statistics/rx_bytes").stdout.split()
        return int(out[0]), int(out[1])
