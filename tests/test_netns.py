"""Four hosts for real: network namespaces joined by veth pairs, an `rcuda
server` in each bound to its own address (the non-loopback listen path,
with --auth and a key pair per host, as `rcuda hosts up` does by default),
and the CUDA programs run from a fifth namespace with the client's key.

Needs root and iproute2; skipped, saying why, only where a network
namespace cannot be created.  Every server and namespace is removed at the
end, also when a test fails (and leftovers of a crashed run are removed
before starting)."""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import RCUDA
from multi_helpers import MULTI_KERNELS, listed_count, listed_devices
from rcuda import auth, netns
from rcuda.hosts import Hosts

UNAVAILABLE = netns.unavailable_reason()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"network namespaces unavailable: {UNAVAILABLE}")

PREFIX = "rct"  # test networks are named rct<pid>...: leftovers of dead runs are recognisable
PROGRAM_TIMEOUT = 180


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    netns.remove_stale_networks(PREFIX)
    hosts = Hosts(4, name=f"{PREFIX}{os.getpid()}", subnet="10.77.0",
                  server_args=["--backend", "sim", "--kernels", str(MULTI_KERNELS)],
                  state_dir=tmp_path_factory.mktemp("hosts"))
    with hosts:
        yield hosts
    assert not [ns for ns in netns.namespaces() if ns.startswith(hosts.network.name + "-")]


def run_in_client(hosts, binary, *args, servers=None, env_extra=None, timeout=PROGRAM_TIMEOUT):
    """Run a program unmodified through `rcuda run` inside the client namespace."""
    servers = servers or hosts.servers_variable
    env = client_env(hosts)
    env.update(env_extra or {})
    cmd = hosts.network.exec_argv(hosts.network.client_namespace,
                                  [*RCUDA, "run", "--servers", servers, "--", str(binary), *args])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def client_env(hosts) -> dict:
    """The test's environment plus the client's keys (RCUDA_KEY, RCUDA_SERVER_KEY)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "RCUDA_KEY", "RCUDA_SERVER_KEY")}
    return env | hosts.client_environment


def server_log(server) -> str:
    return Path(server.log).read_text(errors="replace")


def test_servers_listen_on_their_namespace_addresses(hosts):
    for i, (server, host) in enumerate(zip(hosts.servers, hosts.network.hosts), start=1):
        assert server.address == f"10.77.0.{i}:7777"
        assert f"ready on tcp://10.77.0.{i}:7777" in server_log(server)
        listening = netns.run("ip", "netns", "exec", host.namespace, "ss", "-ltnH").stdout
        assert f"10.77.0.{i}:7777" in listening and "127.0.0.1:7777" not in listening, listening


def test_devices_from_the_client_namespace(hosts, compile_cuda):
    result = run_in_client(hosts, compile_cuda("device_list.cu"))
    assert listed_count(result.stdout) == (4, "cudaSuccess"), result.stdout + result.stderr
    assert len({d["uuid8"] for d in listed_devices(result.stdout)}) == 4
    table = subprocess.run(hosts.network.exec_argv(hosts.network.client_namespace,
                                                   [*RCUDA, "devices", "--servers", hosts.servers_variable]),
                           capture_output=True, text=True, timeout=60, env=client_env(hosts))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    rows = [line.split() for line in lines[1:5]]
    assert [(r[0], r[1]) for r in rows] == [(str(i), f"10.77.0.{i + 1}:7777") for i in range(4)]
    # Then how each server's sessions travel: these servers run with --auth.
    assert lines[5:] == [f"10.77.0.{i + 1}:7777: TCP lane sealed with AES-256-GCM, keyed over ZeroMQ CURVE "
                         f"(Curve25519)" for i in range(4)]


def test_servers_refuse_a_client_without_the_key(hosts, compile_cuda):
    """--auth over the network: no key, or a key the servers do not know,
    fails at connect with a message saying so, within the timeout."""
    program = compile_cuda("device_list.cu")
    no_key = {k: v for k, v in client_env(hosts).items() if k not in ("RCUDA_KEY", "RCUDA_SERVER_KEY")}
    cmd = hosts.network.exec_argv(hosts.network.client_namespace,
                                  [*RCUDA, "run", "--servers", hosts.servers_variable, "--", str(program)])
    started = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT, env=no_key)
    assert listed_count(result.stdout)[1] == "cudaErrorDevicesUnavailable", result.stdout + result.stderr
    assert "requires a key (it runs with --auth)" in result.stderr, result.stderr
    assert time.monotonic() - started < 30
    stranger = hosts.state_dir / "stranger"
    auth.create_key_pair(stranger, "client")
    env = client_env(hosts) | {"RCUDA_KEY": str(stranger / "client.key_secret")}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT, env=env)
    assert "does not accept this client's key" in result.stderr, result.stderr


def test_simple_multi_gpu_across_four_hosts(hosts, compile_cuda):
    result = run_in_client(hosts, compile_cuda("multi_gpu.cu"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED simpleMultiGPU gpus=4" in result.stdout


def test_peer_ring_across_four_hosts(hosts, compile_cuda):
    result = run_in_client(hosts, compile_cuda("peer_ring.cu"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED peer_ring gpus=4 bytes=9437187" in result.stdout
    for i, server in enumerate(hosts.servers):
        following = hosts.servers[(i + 1) % 4].address.split(":")[0]
        assert re.search(rf"sent 9437187 bytes to GPU\d \({re.escape(following)}:7777 GPU0\) "
                         rf"\(tcp://{re.escape(following)}:\d+\)", server_log(server)), server_log(server)[-2000:]


def test_cross_host_copy_bytes_go_host_to_host_not_through_the_client(hosts, compile_cuda):
    """The interface counters say where 64 MiB went: out of host 1 and into
    host 2, never through the client's interface.  Staged through the
    client (RCUDA_PEER_COPY=client), the same copy shows up there."""
    size = 64 << 20
    program = compile_cuda("peer_copy.cu")
    two = ",".join(s.address for s in hosts.servers[:2])
    h1, h2 = hosts.network.hosts[:2]

    def measure(**env):
        before = (hosts.network.client_bytes(), hosts.network.link_bytes(h1), hosts.network.link_bytes(h2))
        result = run_in_client(hosts, program, "peer", str(size), "1", servers=two, env_extra=env)
        after = (hosts.network.client_bytes(), hosts.network.link_bytes(h1), hosts.network.link_bytes(h2))
        assert result.returncode == 0 and "PASSED peer_copy" in result.stdout, result.stdout + result.stderr
        client, source, destination = ((a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before))
        return client, source, destination  # (sent, received) each

    client, source, destination = measure()
    print(f"direct: client sent/received {client}, host1 {source}, host2 {destination}")
    assert source[0] >= size and destination[1] >= size  # host 1 sent it, host 2 received it
    assert client[0] + client[1] < size // 8, client  # only requests, replies and samples

    client, source, destination = measure(RCUDA_PEER_COPY="client")
    print(f"staged: client sent/received {client}, host1 {source}, host2 {destination}")
    assert client[1] >= size and client[0] >= size  # now it came to the client and left it again


def test_killing_a_host_fails_only_its_device(hosts, compile_cuda):
    """Last in this module: it takes host 3's server down."""
    env = client_env(hosts)
    env["RCUDA_TIMEOUT"] = "3"
    cmd = hosts.network.exec_argv(hosts.network.client_namespace, [
        *RCUDA, "run", "--servers", hosts.servers_variable, "--", str(compile_cuda("survivor.cu")), "40", "100000"])
    program = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    timer = threading.Timer(PROGRAM_TIMEOUT, program.kill)
    timer.start()
    out, killed_at, error_at = [], None, None
    try:
        for line in program.stdout:
            out.append(line)
            if killed_at is None and line.startswith("GPU2 round 5"):
                hosts.kill(2)
                killed_at = time.monotonic()
            if line.startswith("GPU2 error"):
                error_at = time.monotonic()
        err = program.stderr.read()
        program.wait()
    finally:
        timer.cancel()
    stdout = "".join(out)
    assert killed_at and error_at, stdout + err
    for gpu in (0, 1, 3):
        assert f"GPU{gpu}: ok after 40 rounds" in stdout, stdout + err
    assert re.search(r"GPU2: failed after \d+ rounds with 46 cudaErrorDevicesUnavailable", stdout), stdout
    assert "GPU2 (10.77.0.3:7777 GPU0)" in err
    assert error_at - killed_at < 3 + 5


def test_network_is_removed_even_when_the_body_fails():
    name = f"{PREFIX}{os.getpid()}x"
    with pytest.raises(RuntimeError, match="body failed"):
        with netns.Network(2, name=name, subnet="10.79.0"):
            assert {f"{name}-c", f"{name}-h1", f"{name}-h2"} <= set(netns.namespaces())
            raise RuntimeError("body failed")
    assert not [ns for ns in netns.namespaces() if ns.startswith(name)]


def test_leftovers_of_a_crashed_run_are_removed():
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs: the "crashed" run
    name = f"{PREFIX}{gone.pid}"
    netns.run("ip", "netns", "add", f"{name}-h1")
    netns.run("ip", "netns", "add", f"{name}-c")
    assert name in netns.remove_stale_networks(PREFIX)
    assert not [ns for ns in netns.namespaces() if ns.startswith(name + "-")]
    # A live run's network is left alone.
    mine = f"{PREFIX}{os.getpid()}-h9"
    netns.run("ip", "netns", "add", mine)
    try:
        netns.remove_stale_networks(PREFIX)
        assert mine in netns.namespaces()
    finally:
        netns.run("ip", "netns", "del", mine)


def test_rcuda_hosts_command(tmp_path, compile_cuda):
    """What a user runs: rcuda hosts up / run / status / down."""
    name = f"{PREFIX}{os.getpid()}cli"
    state = str(tmp_path)
    base = [*RCUDA, "hosts"]
    try:
        up = subprocess.run([*base, "up", "--count", "2", "--name", name, "--subnet", "10.80.0", "--state-dir", state,
                             "--kernels", str(MULTI_KERNELS), "--devices", "2"],
                            capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"{name}-h1: rcuda server on 10.80.0.1:7777" in up.stdout
        assert "servers run with --auth" in up.stdout and "RCUDA_KEY=" in up.stdout
        pid = up.stdout.split("(pid ")[1].split(",")[0]
        assert b"\0--auth\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
        status = subprocess.run([*base, "status", "--name", name, "--state-dir", state], capture_output=True,
                                text=True, timeout=30)
        assert status.stdout.count("running") == 2, status.stdout
        run = subprocess.run([*base, "run", "--name", name, "--state-dir", state, "--",
                              str(compile_cuda("multi_gpu.cu"))], capture_output=True, text=True, timeout=120)
        assert "PASSED simpleMultiGPU gpus=4" in run.stdout, run.stdout + run.stderr
    finally:
        down = subprocess.run([*base, "down", "--name", name, "--state-dir", state], capture_output=True, text=True,
                              timeout=60)
    assert down.returncode == 0 and "removed 3 namespace(s)" in down.stdout, down.stdout + down.stderr
    assert not [ns for ns in netns.namespaces() if ns.startswith(name + "-")]


def test_rate_limited_links(tmp_path):
    """tc tbf on each host's link: a copy between hosts takes at least
    size / rate."""
    name = f"{PREFIX}{os.getpid()}r"
    with netns.Network(2, name=name, subnet="10.81.0", rate="80mbit") as network:
        h1, h2 = network.hosts
        receiver = subprocess.Popen(network.exec_argv(h2.namespace, [
            "python3", "-c", "import socket; s=socket.socket(); s.bind(('0.0.0.0', 9000)); s.listen(); "
                             "c,_=s.accept(); n=0\nwhile (b:=c.recv(1<<16)): n+=len(b)\nprint(n)"]),
            stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        started = time.monotonic()
        subprocess.run(network.exec_argv(h1.namespace, [
            "python3", "-c", f"import socket; s=socket.create_connection(('{h2.address}', 9000), timeout=30); "
                             f"s.sendall(bytes(5 << 20)); s.close()"]), check=True, timeout=60)
        received = int(receiver.communicate(timeout=60)[0])
        elapsed = time.monotonic() - started
    assert received == 5 << 20
    assert elapsed >= (5 << 20) * 8 / 80e6 * 0.8, f"5 MiB at 80 mbit took only {elapsed:.2f}s"
