"""The lane (rcuda/lane.py): synchronous calls on a plain TCP connection
beside each device's ZeroMQ socket.  Its framing, its order with the
socket's traffic, and what a server does with strangers and garbage on it."""
from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
import zmq

from rcuda import protocol
from rcuda.client.runtime import Runtime
from rcuda.config import ClientConfig, parse_server
from rcuda.errors import ProtocolError
from rcuda.lane import FRAME_LENGTH, PREFIX, Lane, LaneClosed, set_timeouts


@pytest.fixture
def lane_pair():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    server.close()
    left, right = Lane(client), Lane(accepted)
    yield left, right
    left.close()
    right.close()


def frame_bytes(frames) -> list[bytes]:
    return [bytes(f.buffer) for f in frames]


def test_messages_keep_their_header_and_frames(lane_pair):
    left, right = lane_pair
    big = np.arange(300_000, dtype=np.uint8).tobytes()
    cases = [({"op": "a", "seq": 1}, []), ({"op": "b", "n": [1, 2]}, [b"", b"x", big]),
             ({"op": "c"}, [memoryview(np.arange(10, dtype=np.float32))])]
    for header, frames in cases:
        left.send(header, frames)
        got, got_frames = right.receive()
        assert got == header
        assert frame_bytes(got_frames) == [bytes(memoryview(f).cast("B")) for f in frames]


def test_pieces_and_runs_of_messages_are_reassembled(lane_pair):
    """One message dribbled a byte at a time, then three messages in one
    write: the reader returns each whole, in order."""
    left, right = lane_pair
    head = protocol.pack({"op": "slow", "seq": 9})
    message = PREFIX.pack(len(head), 1) + FRAME_LENGTH.pack(5) + head + b"hello"

    def dribble():
        for i in range(len(message)):
            left.sock.send(message[i:i + 1])
            time.sleep(0.001)

    writer = threading.Thread(target=dribble)
    writer.start()
    header, frames = right.receive()
    writer.join()
    assert header == {"op": "slow", "seq": 9} and frame_bytes(frames) == [b"hello"]
    left.sock.sendall(message * 3)
    for _ in range(3):
        assert right.receive()[0]["seq"] == 9
    assert not right.readable()


def test_a_timed_out_read_loses_nothing(lane_pair):
    left, right = lane_pair
    set_timeouts(right.sock, 0.05, 1.0)
    head = protocol.pack({"op": "x", "seq": 3})
    message = PREFIX.pack(len(head), 1) + FRAME_LENGTH.pack(3) + head + b"abc"
    left.sock.sendall(message[:11])
    with pytest.raises(BlockingIOError):
        right.receive()
    left.sock.sendall(message[11:])
    header, frames = right.receive()
    assert header["seq"] == 3 and frame_bytes(frames) == [b"abc"]


def test_oversized_messages_and_a_closed_lane_are_named(lane_pair):
    left, right = lane_pair
    right.max_payload = 1000
    left.send({"op": "big"}, [b"\0" * 1001])
    with pytest.raises(ProtocolError, match="1001 payload bytes"):
        right.receive()
    left.close()
    with pytest.raises(LaneClosed):
        while True:  # the rest of the refused message, then the end
            right.receive()


# ------------------------------------------------------------------ against a real server


@pytest.fixture
def runtime(sim_server):
    def make(**config):
        rt = Runtime(ClientConfig(servers=[parse_server(sim_server.address)], timeout=10.0, **config))
        made.append(rt)
        return rt

    made: list[Runtime] = []
    yield make
    for rt in made:
        rt.shutdown()


def test_synchronous_calls_take_the_lane_after_the_socket_traffic_before_them(runtime):
    """Asynchronous memsets travel on the ZeroMQ socket, each read-back on
    the lane: every read must see the memset just before it, so the server
    must serve the socket's messages first although the lane is faster."""
    device = runtime().device(0)
    assert device.channel.has_lane
    ptr = device.malloc(4096)
    for i in range(200):
        for value in (i % 251, (i + 1) % 251):
            device.post("memset", ptr=ptr, value=value, size=4096, stream=0)
        frames = device.copy_from_device(ptr, 4096)
        data = b"".join(bytes(f.buffer) for f in frames)
        assert data == bytes([(i + 1) % 251]) * 4096, f"read {i} overtook the memset before it"
    assert device.channel.lane_calls >= 201


def test_RCUDA_LANE_off_uses_the_socket_alone(runtime):
    device = runtime(lane=False).device(0)
    assert not device.channel.has_lane
    ptr = device.malloc(64)
    device.memset(ptr, 7, 64)
    assert bytes(device.copy_from_device(ptr, 64)[0].buffer) == b"\x07" * 64
    assert device.channel.lane_calls == 0


def test_strangers_and_garbage_on_the_lane_cost_the_session_nothing(sim_server):
    """A wrong token is refused; garbage on the session's own lane closes
    that lane only: the device socket keeps serving."""
    host, port = sim_server.address.rsplit(":", 1)
    context = zmq.Context()
    try:
        daemon = context.socket(zmq.DEALER)
        daemon.setsockopt(zmq.LINGER, 0)
        daemon.connect(f"tcp://{host}:{port}")
        daemon.send(protocol.pack({"op": "hello", "seq": 1, "version": protocol.PROTOCOL_VERSION,
                                   "client": {"program": "test"}}))
        assert daemon.poll(20000)
        hello = protocol.unpack(daemon.recv())
        daemon.close()
        address = (host, hello["lane_ports"][0])

        stranger = Lane(socket.create_connection(address, timeout=10))
        stranger.send({"op": "lane", "seq": 0, "token": "0" * 32, "dev": 0})
        refused, _ = stranger.receive()
        assert refused["err"] and "token" in refused["msg"]
        with pytest.raises(LaneClosed):
            stranger.receive()

        mine = Lane(socket.create_connection(address, timeout=10))
        mine.send({"op": "lane", "seq": 0, "token": hello["token"], "dev": 0})
        assert mine.receive()[0]["err"] == 0

        gpu = context.socket(zmq.DEALER)
        gpu.setsockopt(zmq.LINGER, 0)
        gpu.connect(f"tcp://{host}:{hello['ports'][0]}")
        gpu.send(protocol.pack({"op": "open", "seq": 1, "dev": 0, "token": hello["token"], "va_base": None}))
        assert gpu.poll(20000) and protocol.unpack(gpu.recv())["err"] == 0

        mine.send({"op": "mem_info", "seq": 2, "after": 1})
        assert mine.receive()[0]["total"] > 0
        mine.send({"op": "open", "seq": 3, "after": 1, "dev": 0, "token": hello["token"], "va_base": None})
        assert "device socket" in mine.receive()[0]["msg"]
        mine.sock.sendall(PREFIX.pack(1 << 30, 1) + b"garbage!")
        with pytest.raises(LaneClosed):
            mine.receive()
        mine.close()

        gpu.send(protocol.pack({"op": "mem_info", "seq": 4}))
        assert gpu.poll(20000)
        reply = protocol.unpack(gpu.recv())
        assert reply["err"] == 0 and reply["seq"] == 4
        gpu.send(protocol.pack({"op": "close", "seq": 5}))
        assert gpu.poll(20000)
        gpu.close()
    finally:
        context.term()
    assert "lane closed after a malformed message" in sim_server.stderr


def test_spinning_can_be_turned_off_on_both_ends(server_factory):
    server = server_factory("--backend", "sim", "--spin-us", "0")
    rt = Runtime(ClientConfig(servers=[parse_server(server.address)], timeout=10.0, spin_us=0))
    try:
        device = rt.device(0)
        assert device.channel.has_lane
        for _ in range(50):
            assert device.mem_info()[1] > 0
        assert device.channel.lane_calls >= 50
    finally:
        rt.shutdown()


def test_spin_settings_are_checked():
    from rcuda.config import ConfigError

    assert ClientConfig.load({"RCUDA_SPIN_US": "50", "RCUDA_CONFIG": "/dev/null"}).spin_us == 50
    with pytest.raises(ConfigError, match="RCUDA_SPIN_US must not be negative"):
        ClientConfig.load({"RCUDA_SPIN_US": "-1", "RCUDA_CONFIG": "/dev/null"})
