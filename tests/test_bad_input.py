"""Bad input at the edges: a session's memory quota, and client and server
speaking different protocol versions (a clear error at connect, both ways)."""
from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import zmq

from conftest import CUDA_SOURCES, requires_nvcc, run_program
from rcuda import protocol
from rcuda.config import parse_server
from rcuda.errors import VersionMismatch, cudaError


@requires_nvcc
def test_allocation_beyond_the_memory_limit(compile_cuda, server_factory):
    server = server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / "sim_kernels.py"),
                            "--memory-limit", str(64 << 20))
    refused = run_program(compile_cuda("hold_memory.cu"), server, "96", "0")
    assert "FAILED cudaMalloc: cudaErrorMemoryAllocation" in refused.stdout, refused.stdout + refused.stderr
    within = run_program(compile_cuda("hold_memory.cu"), server, "48", "0")
    assert "released" in within.stdout, within.stdout + within.stderr


def test_an_older_client_is_told_at_hello(sim_server):
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(parse_server(sim_server.address).endpoint)
    try:
        sock.send(protocol.pack({"op": "hello", "seq": 1, "version": protocol.PROTOCOL_VERSION - 1,
                                 "client": {"program": "old"}}))
        assert sock.poll(10_000)
        reply = protocol.unpack(sock.recv())
    finally:
        sock.close()
        context.term()
    assert reply["err"] == int(cudaError.cudaErrorDevicesUnavailable)
    assert f"protocol version {protocol.PROTOCOL_VERSION - 1} is not this server's" in reply["msg"]


def fake_daemon(version: int):
    """A daemon speaking another protocol version: answers one hello."""
    context = zmq.Context()
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")

    def answer():
        if sock.poll(20_000):
            peer, frame = sock.recv_multipart()
            request = protocol.unpack(frame)
            sock.send_multipart([peer, protocol.pack({"seq": request["seq"], "version": version, "err": 0})])
        sock.close()
        context.term()

    threading.Thread(target=answer, daemon=True).start()
    return f"127.0.0.1:{port}"


def test_the_client_names_a_server_of_another_version():
    from rcuda.client.transport.session import ServerSession
    address = fake_daemon(protocol.PROTOCOL_VERSION + 1)
    context = zmq.Context()
    try:
        try:
            ServerSession.connect(context, parse_server(address), 5.0)
        except VersionMismatch as exc:
            message = str(exc)
        else:
            raise AssertionError("connected to a server of another protocol version")
    finally:
        context.term()
    assert f"speaks protocol version {protocol.PROTOCOL_VERSION + 1}" in message and address in message
    assert "install the same rcuda version on both sides" in message


@requires_nvcc
def test_a_program_gets_the_version_mismatch_as_a_cuda_error(compile_cuda):
    address = fake_daemon(protocol.PROTOCOL_VERSION + 1)
    result = run_program(compile_cuda("errors.cu"), address, "count")
    assert "cudaGetDeviceCount(&n) -> 46 cudaErrorDevicesUnavailable" in result.stdout
    assert "install the same rcuda version on both sides" in result.stderr


@requires_nvcc
def test_a_server_started_beside_a_folder_named_rcuda_still_starts_its_workers(compile_cuda, tmp_path):
    """Started from a clone of this repository (or any folder holding one
    named `rcuda`), the daemon's session workers must import the installed
    rcuda, not the folder: they used to fail to start, every session refused.
    Its --listen is a bare HOST:PORT, as `rcuda run --servers` takes one."""
    (tmp_path / "rcuda").mkdir()
    (tmp_path / "rcuda" / "__init__.py").write_text("raise ImportError('the wrong rcuda')\n")
    rcuda = Path(sys.executable).with_name("rcuda")  # the console script, as a user runs it
    process = subprocess.Popen([str(rcuda), "server", "--listen", "127.0.0.1:0", "--backend", "sim",
                                "--kernels", str(CUDA_SOURCES / "sim_kernels.py")], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = process.stdout.readline()
        address = re.search(r"ready on tcp://(\S+:\d+)", line)
        assert address, f"server did not start from {tmp_path}: {line!r} {process.stderr.read()}"
        result = run_program(compile_cuda("vector_add.cu"), address[1])
        assert "PASSED" in result.stdout, result.stdout + result.stderr
    finally:
        process.terminate()
        process.wait(timeout=30)
