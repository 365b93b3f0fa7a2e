"""One program, many servers: GPU0..N across servers, CUDA_VISIBLE_DEVICES,
`rcuda devices`, simpleMultiGPU, server-to-server peer copies, devices
working in parallel, and a server going away.  Real nvcc-built programs run
unmodified against real sim servers on loopback (test_netns.py does the same
across network-namespace hosts)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest
import zmq

from conftest import RCUDA, requires_nvcc, run_program
from multi_helpers import (addresses, devices_json, free_port, json_lines, listed_count, listed_devices,
                           rcuda_devices, start_sim_servers, stop_all)
from rcuda import protocol
from rcuda.lane import LaneClosed, dial

pytestmark = requires_nvcc


@pytest.fixture(scope="module")
def four_servers():
    """Four one-GPU sim servers."""
    servers = start_sim_servers(1, 1, 1, 1)
    yield servers
    stop_all(servers)


@pytest.fixture(scope="module")
def mixed_servers():
    """A three-GPU sim server and a one-GPU one."""
    servers = start_sim_servers(3, 1)
    yield servers
    stop_all(servers)


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(extra)
    return env


def uuids(servers) -> list[str]:
    """The GPUs' UUIDs in server order, from `rcuda devices --json`."""
    return [row["uuid"] for row in devices_json(servers, env=clean_env())["devices"]]


# ------------------------------------------------------------------ enumeration


@pytest.mark.parametrize("count", [1, 2, 4])
def test_each_server_contributes_its_gpu_in_order(compile_cuda, four_servers, count):
    servers = four_servers[:count]
    expected = uuids(servers)
    result = run_program(compile_cuda("device_list.cu"), servers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert listed_count(result.stdout) == (count, "cudaSuccess")
    devices = listed_devices(result.stdout)
    assert [d["index"] for d in devices] == list(range(count))
    assert [d["current"] for d in devices] == list(range(count))
    assert ["GPU-" + d["uuid8"] == u[:12] for d, u in zip(devices, expected)] == [True] * count
    assert len({d["uuid8"] for d in devices}) == count  # every sim server's GPU is distinct
    assert all(d["malloc"] == "cudaSuccess" and d["cc"] == "8.0" for d in devices)
    windows = {d["ptr"] >> 40 for d in devices}  # each device allocates in its own address window
    assert len(windows) == count
    # ... so the allocation map tells which device owns an address.
    for i in range(count):
        assert f"attributes {i}: type 2 device {i} devicePointer same (cudaSuccess)" in result.stdout
    assert "host attributes: type 0 device -2 hostPointer same (cudaSuccess)" in result.stdout


def test_multi_gpu_server_and_server_order(compile_cuda, mixed_servers):
    three, one = mixed_servers
    program = compile_cuda("device_list.cu")
    result = run_program(program, [three, one])
    assert listed_count(result.stdout) == (4, "cudaSuccess"), result.stdout + result.stderr
    names = [d["name"] for d in listed_devices(result.stdout)]
    assert names == ["rcuda sim GPU 0", "rcuda sim GPU 1", "rcuda sim GPU 2", "rcuda sim GPU 0"]
    expected = uuids([three, one])
    assert ["GPU-" + d["uuid8"] for d in listed_devices(result.stdout)] == [u[:12] for u in expected]

    swapped = run_program(program, [one, three])
    got = ["GPU-" + d["uuid8"] for d in listed_devices(swapped.stdout)]
    assert got == [u[:12] for u in expected[3:] + expected[:3]], swapped.stdout


@pytest.mark.parametrize("visible, picks", [
    ("3,1", [3, 1]),          # subset, reordered
    ("2,0,1,3", [2, 0, 1, 3]),
    ("2,7,0", [2]),           # an out-of-range entry ends the list
    ("1,x,0", [1]),           # so does an unreadable one
    ("0,0,1", [0]),           # and a repeated one
    ("1,-1,2", [1]),
])
def test_cuda_visible_devices_selects_and_reorders(compile_cuda, mixed_servers, visible, picks):
    everything = uuids(mixed_servers)  # GPU0-2 on the first server, GPU3 on the second
    result = run_program(compile_cuda("device_list.cu"), mixed_servers, env_extra={"CUDA_VISIBLE_DEVICES": visible})
    assert listed_count(result.stdout) == (len(picks), "cudaSuccess"), result.stdout + result.stderr
    got = ["GPU-" + d["uuid8"] for d in listed_devices(result.stdout)]
    assert got == [everything[i][:12] for i in picks]
    for ordinal in range(len(picks)):  # pointer attributes name the visible ordinal
        assert f"attributes {ordinal}: type 2 device {ordinal} " in result.stdout
    # `rcuda devices` shows the same selection.
    rows = devices_json(mixed_servers, env=clean_env(CUDA_VISIBLE_DEVICES=visible))["devices"]
    assert [r["uuid"] for r in rows] == [everything[i] for i in picks]
    assert [r["index"] for r in rows] == list(range(len(picks)))


def test_cuda_visible_devices_by_uuid_prefix(compile_cuda, mixed_servers):
    everything = uuids(mixed_servers)
    visible = f"{everything[3][:14]},0"  # GPU-<prefix> of the second server's GPU, then GPU0
    result = run_program(compile_cuda("device_list.cu"), mixed_servers, env_extra={"CUDA_VISIBLE_DEVICES": visible})
    got = ["GPU-" + d["uuid8"] for d in listed_devices(result.stdout)]
    assert got == [everything[3][:12], everything[0][:12]], result.stdout + result.stderr


def test_cuda_visible_devices_selecting_nothing_is_no_device(compile_cuda, mixed_servers):
    result = run_program(compile_cuda("device_list.cu"), mixed_servers, env_extra={"CUDA_VISIBLE_DEVICES": "9"})
    assert listed_count(result.stdout) == (0, "cudaErrorNoDevice"), result.stdout + result.stderr
    assert "CUDA_VISIBLE_DEVICES" in result.stderr


# ------------------------------------------------------------------ rcuda devices


def test_rcuda_devices_table(mixed_servers):
    three, one = mixed_servers
    result = rcuda_devices(mixed_servers, env=clean_env())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["GPU", "SERVER", "SERVER", "GPU"]
    rows = [line.split() for line in lines[1:5]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("0", three.address, "0"), ("1", three.address, "1"),
                                                   ("2", three.address, "2"), ("3", one.address, "0")]
    assert all("16.0 GiB" in line and " 8.0 " in line and " sim " in line for line in lines[1:5])
    # Then how each server's sessions travel: servers without --auth offer the lane.
    assert lines[5:] == [f"{three.address}: TCP lane, not encrypted", f"{one.address}: TCP lane, not encrypted"]
    data = devices_json(mixed_servers, env=clean_env())
    assert [d["server_index"] for d in data["devices"]] == [0, 1, 2, 0]
    assert data["devices"][1] | {"uuid": ""} == {
        "index": 1, "server": three.address, "server_index": 1, "name": "rcuda sim GPU 1",
        "memory": 16 << 30, "compute_capability": "8.0", "backend": "sim", "uuid": ""}
    assert [s["devices"] for s in data["servers"]] == [3, 1]
    assert {s["transport"] for s in data["servers"]} == {"TCP lane, not encrypted"}
    assert all(s["reachable"] for s in data["servers"])


def test_rcuda_devices_honours_cuda_visible_devices(mixed_servers):
    result = rcuda_devices(mixed_servers, env=clean_env(CUDA_VISIBLE_DEVICES="3,0"))
    assert result.returncode == 0
    assert "CUDA_VISIBLE_DEVICES=3,0: 2 of 4 GPU(s) visible" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines()[1:3]]
    assert [(r[0], r[1]) for r in rows] == [("0", mixed_servers[1].address), ("1", mixed_servers[0].address)]


def test_rcuda_devices_shows_an_unreachable_server_without_hanging(mixed_servers):
    dead = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = rcuda_devices([mixed_servers[0], dead], "--timeout", "2", env=clean_env())
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert elapsed < 15, f"took {elapsed:.1f}s with --timeout 2"
    assert f"{dead}: unreachable" in result.stdout
    assert "GPU numbers are not shown" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines()[1:4]]
    assert [(r[0], r[1]) for r in rows] == [("-", mixed_servers[0].address)] * 3
    data = rcuda_devices([mixed_servers[0], dead], "--json", "--timeout", "2", env=clean_env())
    servers = json.loads(data.stdout)["servers"]
    assert [s["reachable"] for s in servers] == [True, False]
    assert dead in servers[1]["error"]


# ------------------------------------------------------------------ programs


def test_simple_multi_gpu_on_four_servers(compile_cuda, four_servers):
    result = run_program(compile_cuda("multi_gpu.cu"), four_servers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED simpleMultiGPU gpus=4" in result.stdout
    assert len(re.findall(r"^GPU\d \(rcuda sim GPU 0\): 1048576 elements", result.stdout, re.M)) == 4


def test_simple_multi_gpu_on_a_multi_gpu_server(compile_cuda, mixed_servers):
    result = run_program(compile_cuda("multi_gpu.cu"), mixed_servers, "1000003")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED simpleMultiGPU gpus=4 n=1000003" in result.stdout


def test_peer_ring_on_four_servers_goes_server_to_server(compile_cuda, four_servers):
    result = run_program(compile_cuda("peer_ring.cu"), four_servers)
    assert result.returncode == 0, result.stdout + result.stderr
    for part in ("ring cudaMemcpyPeer", "ring cudaMemcpyPeerAsync then kernel", "ring cudaMemcpy kind 4",
                 "ring cudaMemcpy kind 3", "opposite concurrent copies"):
        assert f"ok {part}" in result.stdout
    assert "PASSED peer_ring gpus=4 bytes=9437187" in result.stdout
    # Honest about peer access: copies work, load/store across servers does not.
    assert result.stdout.count(": 0 0 0 0\n") == 4
    assert "cudaDeviceEnablePeerAccess(1, 0) -> 217 cudaErrorPeerAccessUnsupported" in result.stdout
    assert "cudaDeviceDisablePeerAccess(1) -> 705 cudaErrorPeerAccessNotEnabled" in result.stdout
    assert "different servers" in result.stderr and "cudaMemcpyPeer and cudaMemcpy(cudaMemcpyDefault) still copy" \
        in result.stderr
    # Wrong arguments are refused before anything moves.
    assert "cudaMemcpyPeer(recv[1], 0, buf[0], 0, 16) -> 1 cudaErrorInvalidValue" in result.stdout
    assert "cudaMemcpyPeer(recv[1], 1, buf[0], 99, 16) -> 101 cudaErrorInvalidDevice" in result.stdout
    assert "cudaMemcpyPeer(recv[1], 1, buf[0], 0, size + 1) -> 1 cudaErrorInvalidValue" in result.stdout
    # Each server sent its buffer to the next one and received from the previous one.
    for i, server in enumerate(four_servers):
        previous, following = four_servers[i - 1], four_servers[(i + 1) % 4]
        assert re.search(rf"sent 9437187 bytes to GPU\d \({re.escape(following.address)} GPU0\) \(tcp://",
                         server.stderr), server.stderr[-3000:]
        assert server.wait_for_log(f"received 9437187 bytes from {previous.address}")


def test_peer_copies_between_gpus_of_one_server_stay_inside_its_worker(compile_cuda, mixed_servers):
    three, _ = mixed_servers
    result = run_program(compile_cuda("peer_ring.cu"), [three], "100000")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED peer_ring gpus=3 bytes=100000" in result.stdout
    assert re.search(r"sent 100000 bytes to GPU1 \(\S+ GPU1\) \(inside this worker\)", three.stderr)
    # The sim GPUs of one server share its memory: each can access the others
    # (tests/test_peer_topology.py runs kernels on each other's memory).
    for i, row in enumerate(["0 1 1", "1 0 1", "1 1 0"]):
        assert f"canAccessPeer {i}: {row}\n" in result.stdout
    assert "cudaDeviceEnablePeerAccess(1, 0) -> 0 cudaSuccess" in result.stdout
    assert "cudaDeviceDisablePeerAccess(1) -> 0 cudaSuccess" in result.stdout


def test_client_staging_is_still_available(compile_cuda, four_servers):
    """RCUDA_PEER_COPY=client: for servers that cannot reach each other."""
    result = run_program(compile_cuda("peer_copy.cu"), four_servers[:2], "peer", "3000000", "1",
                         env_extra={"RCUDA_PEER_COPY": "client"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED peer_copy" in result.stdout
    assert [r["ok"] for r in json_lines(result.stdout)] == [True]


def test_devices_work_in_parallel(compile_cuda, four_servers):
    """Four host threads, four devices on four servers, 2 x 0.5 s of modelled
    kernel time each: the wall time is about one device's, not four."""
    program = compile_cuda("parallel.cu")
    one = run_program(program, four_servers, "2", "500000", env_extra={"CUDA_VISIBLE_DEVICES": "0"})
    four = run_program(program, four_servers, "2", "500000")
    for result in (one, four):
        assert result.returncode == 0, result.stdout + result.stderr
        assert "PASSED parallel" in result.stdout
    wall_one = float(re.search(r"wall (\S+) s for 1 device", one.stdout)[1])
    wall_four = float(re.search(r"wall (\S+) s for 4 device", four.stdout)[1])
    print(f"one device {wall_one:.3f}s, four devices {wall_four:.3f}s")
    assert wall_one >= 0.95, one.stdout  # the modelled time was really taken
    assert wall_four < 2 * wall_one, f"four devices took {wall_four:.2f}s, one took {wall_one:.2f}s"


# ------------------------------------------------------------------ a server goes away


def kill_machine(server) -> None:
    """SIGKILL the daemon and its workers at once (their own process group)."""
    try:
        os.killpg(server.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.process.wait()


def test_killing_one_server_fails_only_its_device(compile_cuda):
    servers = start_sim_servers(1, 1, 1, 1)
    try:
        env = dict(os.environ, RCUDA_TIMEOUT="3")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        cmd = [*RCUDA, "run", "--servers", addresses(servers), "--", str(compile_cuda("survivor.cu")), "40", "100000"]
        program = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        out, killed_at, error_seen_at = [], None, None
        timer = threading.Timer(120, program.kill)  # bounds the whole run
        timer.start()
        try:
            for line in program.stdout:
                out.append(line)
                if killed_at is None and line.startswith("GPU2 round 5"):
                    kill_machine(servers[2])
                    killed_at = time.monotonic()
                if line.startswith("GPU2 error"):
                    error_seen_at = time.monotonic()
            err = program.stderr.read()
            program.wait()
        finally:
            timer.cancel()
        stdout = "".join(out)
        assert killed_at is not None and error_seen_at is not None, stdout + err
        assert program.returncode == 0, stdout + err
        for gpu in (0, 1, 3):
            assert f"GPU{gpu}: ok after 40 rounds" in stdout, stdout + err
        match = re.search(r"GPU2: failed after (\d+) rounds with 46 cudaErrorDevicesUnavailable", stdout)
        assert match, stdout + err
        assert int(match[1]) < 40
        # The error names the device and the server, and came within the timeout (plus slack).
        assert f"GPU2 ({servers[2].address} GPU0)" in err and "stopped answering" in err, err
        for other in (0, 1, 3):
            assert servers[other].address not in err, err
        failed_after = error_seen_at - killed_at
        print(f"GPU2 failed {failed_after:.2f}s after its server was killed (RCUDA_TIMEOUT=3)")
        assert failed_after < 3 + 5, f"{failed_after:.1f}s with RCUDA_TIMEOUT=3"
    finally:
        stop_all(servers)


def test_source_server_lost_during_a_peer_copy_fails_the_wait(compile_cuda):
    """The destination waits behind the source's long kernel; the source
    server dies: the destination's synchronize fails within the timeout
    naming it, and the destination keeps working."""
    servers = start_sim_servers(1, 1)
    try:
        env = dict(os.environ, RCUDA_TIMEOUT="2")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        cmd = [*RCUDA, "run", "--servers", addresses(servers), "--", str(compile_cuda("peer_fail.cu"))]
        program = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        out = []
        timer = threading.Timer(60, program.kill)
        timer.start()
        try:
            for line in program.stdout:
                out.append(line)
                if line.startswith("posted"):
                    time.sleep(0.5)
                    kill_machine(servers[1])
            err = program.stderr.read()
            program.wait()
        finally:
            timer.cancel()
        stdout = "".join(out)
        assert "cudaMemcpyPeerAsync(a0, 0, b1, 1, size, 0) -> 0 cudaSuccess" in stdout, stdout + err
        lines = stdout.splitlines()
        sync0 = lines.index("cudaSetDevice(0) -> 0 cudaSuccess", lines.index("posted")) + 1
        assert lines[sync0] == "cudaDeviceSynchronize() -> 46 cudaErrorDevicesUnavailable", stdout
        waited = float(re.search(r"GPU0 synchronize returned after (\S+) s", stdout)[1])
        assert waited < 15, f"the destination waited {waited}s with RCUDA_TIMEOUT=2 (the kernel models 20s)"
        assert "GPU0 still works: yes" in stdout
        assert lines[-1] == "cudaDeviceSynchronize() -> 46 cudaErrorDevicesUnavailable"
        assert f"source server {servers[1].address} went away" in err, err
    finally:
        stop_all(servers)


# ------------------------------------------------------------------ the server checks peer messages


class RawSession:
    """A hand-driven session with one server: hello, then GPU0's socket."""

    def __init__(self, address: str):
        self.context = zmq.Context()
        self.address = address
        hello = self._daemon({"op": "hello", "version": protocol.PROTOCOL_VERSION, "client": {"program": "test"}})
        self.hello = hello
        self.gpu = self.context.socket(zmq.DEALER)
        self.gpu.setsockopt(zmq.LINGER, 0)
        self.gpu.connect(f"tcp://{address.rsplit(':', 1)[0]}:{hello['ports'][0]}")
        self.seq = 0
        assert self.call({"op": "open", "dev": 0, "token": hello["token"], "va_base": None})["err"] == 0

    def _daemon(self, header: dict) -> dict:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://{self.address}")
        sock.send(protocol.pack(dict(header, seq=1)))
        assert sock.poll(10000), "no hello reply"
        reply = protocol.unpack(sock.recv())
        sock.close()
        return reply

    def send(self, header: dict, frames=()) -> None:
        self.seq += 1
        self.gpu.send_multipart([protocol.pack(dict(header, seq=self.seq)), *frames])

    def receive(self, timeout: float = 10) -> dict:
        assert self.gpu.poll(int(timeout * 1000)), "no message from the server"
        return protocol.unpack(self.gpu.recv_multipart()[0])

    def call(self, header: dict, frames=()) -> dict:
        self.send(header, frames)
        return self.receive()

    def peer_lane(self):
        return dial(self.address.rsplit(":", 1)[0], self.hello["peer_port"], 10)

    def close(self) -> None:
        self.context.destroy(linger=0)


@pytest.fixture
def raw_session(server_factory):
    from multi_helpers import MULTI_KERNELS
    server = server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS))
    session = RawSession(server.address)
    yield session
    session.close()


def test_peer_wait_refuses_memory_the_session_does_not_own(raw_session):
    raw_session.send({"op": "peer_wait", "xfer": 1, "dst": 0x1234, "size": 16, "source": "elsewhere:1"})
    reply = raw_session.call({"op": "sync"})  # the asynchronous op's error comes with the next reply
    assert reply["err"] == 1 and "cudaMemcpyPeer destination" in reply["msg"], reply


def test_peer_push_to_an_unreachable_server_tells_the_client(raw_session):
    ptr = raw_session.call({"op": "malloc", "size": 1 << 20})["ptr"]
    started = time.monotonic()
    raw_session.send({"op": "peer_push", "xfer": 7, "src": ptr, "size": 1 << 20,
                      "endpoint": f"tcp://127.0.0.1:{free_port()}", "token": "t" * 32, "dest": "GPU9 (nowhere)",
                      "timeout": 1})
    notice = raw_session.receive(timeout=15)
    assert notice["seq"] is None and notice["notice"] == "peer_failed", notice
    assert notice["xfer"] == 7 and notice["dest"] == "GPU9 (nowhere)" and notice["err"] == 46
    assert "cannot send to server GPU9 (nowhere)" in notice["msg"]
    assert time.monotonic() - started < 10
    assert raw_session.call({"op": "sync"})["err"] == 0  # reported once, through the destination


@pytest.mark.parametrize("fields, complaint", [
    ({"endpoint": "ipc:///tmp/somewhere"}, "is not tcp://HOST:PORT"),
    ({"src": 0x1234}, "cudaMemcpyPeer source"),
    ({"timeout": 0}, "bad size"),
])
def test_peer_push_arguments_are_checked(raw_session, fields, complaint):
    ptr = raw_session.call({"op": "malloc", "size": 4096})["ptr"]
    header = {"op": "peer_push", "xfer": 3, "src": ptr, "size": 4096, "endpoint": "tcp://127.0.0.1:1",
              "token": "x", "dest": "GPU1", "timeout": 1}
    raw_session.send(header | fields)
    notice = raw_session.receive()
    assert notice["notice"] == "peer_failed" and complaint in notice["msg"], notice


def test_peer_port_refuses_a_wrong_token_and_malformed_chunks(raw_session):
    lane = raw_session.peer_lane()
    lane.send({"op": "peer_data", "seq": 0, "token": "wrong", "xfer": 1, "offset": 0, "total": 4}, [b"abcd"])
    ack, _ = lane.receive()
    assert ack["op"] == "peer_ack" and ack["err"] == 46 and "wrong peer token" in ack["msg"]
    with pytest.raises(LaneClosed):  # a connection without the token ends there
        lane.receive()
    lane = raw_session.peer_lane()
    token = raw_session.hello["peer_token"]
    lane.send({"op": "peer_data", "seq": 0, "token": token, "xfer": 2, "offset": 8, "total": 4}, [b"abcd"])
    ack, _ = lane.receive()
    assert ack["err"] == 1 and "does not follow" in ack["msg"]
    lane.send_raw(b"\xc1 not msgpack")  # a bad header after the token: refused, the connection goes on
    lane.send({"op": "peer_hello", "seq": 0, "token": token})
    assert lane.receive()[0]["op"] == "peer_welcome"
    lane.close()
    # A peer-port message on a GPU socket is refused too.
    reply = raw_session.call({"op": "peer_abort", "token": token, "xfer": 1, "source": "", "upto": 0, "msg": ""})
    assert reply["err"] == 1 and "peer port" in reply["msg"]


def test_bytes_from_a_peer_arrive_in_device_memory(raw_session):
    """The destination half, driven by hand: data that arrives before the
    wait is buffered, then written where the wait says."""
    ptr = raw_session.call({"op": "malloc", "size": 8})["ptr"]
    lane = raw_session.peer_lane()
    token = raw_session.hello["peer_token"]
    for offset, chunk in ((0, b"abcd"), (4, b"efgh")):
        lane.send({"op": "peer_data", "seq": 0, "token": token, "xfer": 5, "offset": offset, "total": 8}, [chunk])
    assert lane.receive()[0]["err"] == 0  # the ack: all of it arrived
    raw_session.send({"op": "peer_wait", "xfer": 5, "dst": ptr, "size": 8, "source": "test:1"})
    raw_session.send({"op": "dtoh", "src": ptr, "size": 8, "stream": 0})
    assert raw_session.gpu.poll(10000)
    parts = raw_session.gpu.recv_multipart()
    assert protocol.unpack(parts[0])["err"] == 0 and b"".join(parts[1:]) == b"abcdefgh"
    lane.close()
