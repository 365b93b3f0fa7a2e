"""A --auth server's lanes, sealed (rcuda/sealed.py): real server processes,
a real program, and connections that lack the session's keys or tamper
with its records."""
from __future__ import annotations

import socket

import pytest
import zmq

from auth_helpers import make_keys
from conftest import CUDA_SOURCES, requires_nvcc, run_program
from rcuda import auth, protocol
from rcuda.auth import ClientKeys
from rcuda.config import parse_server
from rcuda.lane import Lane, LaneClosed, dial
from rcuda.wire import RECORD_HEAD


@pytest.fixture
def keys(tmp_path):
    return make_keys(tmp_path)


@pytest.fixture
def auth_server(server_factory, keys):
    return server_factory("--backend", "sim", "--devices", "2", "--kernels", str(CUDA_SOURCES / "sim_kernels.py"),
                          "--auth", str(keys.server_dir))


def hello(server, keys) -> dict:
    """A session's hello reply, over CURVE with the accepted key (no GPU opened)."""
    curve = ClientKeys(str(keys.client_secret), [str(keys.server_public)]).for_server(parse_server(server.address))
    context = zmq.Context.instance()
    daemon = context.socket(zmq.DEALER)
    daemon.setsockopt(zmq.LINGER, 0)
    auth.apply(daemon, curve)
    daemon.connect(f"tcp://{server.address}")
    daemon.send(protocol.pack({"op": "hello", "seq": 1, "version": protocol.PROTOCOL_VERSION,
                               "client": {"program": "test"}}))
    assert daemon.poll(20000), "no hello reply"
    reply = protocol.unpack(daemon.recv())
    daemon.close()
    assert reply["err"] == 0 and len(reply["lane_secret"]) == 32, reply
    return reply


def connect(server, reply: dict, dev: int, secret: bytes | None = None) -> Lane:
    """A lane to GPU `dev`, sealed with `secret` (the session's by default)."""
    host = server.address.rsplit(":", 1)[0]
    return dial(host, reply["lane_ports"][dev], 10, reply["lane_secret"] if secret is None else secret)


def closed_unanswered(lane: Lane) -> bool:
    """Whether the server closes the lane without a message on it."""
    try:
        lane.receive()
    except LaneClosed:
        return True
    return False


def call(lane: Lane, header: dict) -> dict:
    lane.send(header)
    return lane.receive()[0]


def test_lane_connections_without_the_sessions_keys_or_token_are_closed_and_the_session_goes_on(
        auth_server, keys):
    reply = hello(auth_server, keys)
    other_session = hello(auth_server, keys)
    host = auth_server.address.rsplit(":", 1)[0]
    # A plain lane's hello, in clear: taken for a salt, then no record opens.
    with socket.create_connection((host, reply["lane_ports"][0]), timeout=10) as plain:
        plain.sendall(b"\x10\x00\x00\x00\x00\x00\x00\x00" + protocol.pack({"op": "lane", "seq": 0,
                                                                           "token": reply["token"], "dev": 0}))
        received = b""
        while chunk := plain.recv(4096):
            received += chunk
        assert len(received) <= 16  # the server's salt at most: nothing answered
    # Another session's secret, with this session's token: nothing opens.
    stranger = connect(auth_server, reply, 0, secret=other_session["lane_secret"])
    stranger.send({"op": "lane", "seq": 0, "token": reply["token"], "dev": 0})
    assert closed_unanswered(stranger)
    # The session's keys without its token: refused, in a sealed reply.
    no_token = connect(auth_server, reply, 0)
    refused = call(no_token, {"op": "lane", "seq": 0, "token": "0" * 32, "dev": 0})
    assert refused["err"] != 0 and "wrong session token" in refused["msg"]
    assert closed_unanswered(no_token)
    # The session's own lanes still connect and serve.
    lanes = [connect(auth_server, reply, dev) for dev in (0, 1)]
    for dev, lane in enumerate(lanes):
        assert call(lane, {"op": "lane", "seq": 0, "token": reply["token"], "dev": dev})["err"] == 0
        opened = call(lane, {"op": "open", "seq": 1, "dev": dev, "token": reply["token"], "va_base": None})
        assert opened["err"] == 0, opened
        assert call(lane, {"op": "mem_info", "seq": 2})["err"] == 0


@pytest.mark.parametrize("attack", ["altered", "replayed", "reordered", "oversized"])
def test_a_tampered_record_closes_its_lane_and_the_sessions_other_gpu_goes_on(auth_server, keys, attack):
    reply = hello(auth_server, keys)
    lanes = [connect(auth_server, reply, dev) for dev in (0, 1)]
    for dev, lane in enumerate(lanes):
        assert call(lane, {"op": "lane", "seq": 0, "token": reply["token"], "dev": dev})["err"] == 0
        assert call(lane, {"op": "open", "seq": 1, "dev": dev, "token": reply["token"], "va_base": None})["err"] == 0
    victim = lanes[0]
    first = bytes(next(victim.seal.records([_framed({"op": "mem_info", "seq": 10})])))
    second = bytes(next(victim.seal.records([_framed({"op": "mem_info", "seq": 11})])))
    if attack == "altered":
        flipped = bytearray(first)
        flipped[-3] ^= 0x80  # in the tag
        sent = bytes(flipped) + second
    elif attack == "replayed":
        sent = first + first
    elif attack == "reordered":
        sent = second + first
    else:
        sent = RECORD_HEAD.pack(1 << 30) + first
    victim.sock.sendall(sent)
    answered = []
    try:
        while True:
            answered.append(victim.receive()[0]["seq"])
    except LaneClosed:
        pass
    assert answered == ([10] if attack == "replayed" else [])  # the genuine first copy, nothing after
    assert call(lanes[1], {"op": "mem_info", "seq": 3})["err"] == 0
    assert call(lanes[1], {"op": "malloc", "seq": 4, "size": 64})["err"] == 0
    assert auth_server.process.poll() is None and "Traceback" not in auth_server.stderr


def _framed(header: dict) -> bytes:
    """A lane message (rcuda/lane.py's framing) with no payload."""
    head = protocol.pack(header)
    return len(head).to_bytes(4, "little") + bytes(4) + head


@requires_nvcc
@pytest.mark.parametrize("link, transport", [("lane", protocol.TRANSPORT_SEALED_LANE),
                                             ("socket", protocol.TRANSPORT_CURVE_SOCKET)])
def test_a_program_takes_the_sealed_lane_and_says_so(auth_server, keys, compile_cuda, link, transport):
    result = run_program(compile_cuda("vector_add.cu"), auth_server, "300000",
                         env_extra=keys.env() | {"RCUDA_STATS": "1", "RCUDA_LINK": link})
    assert "PASSED vectorAdd n=300000" in result.stdout, result.stdout + result.stderr
    links = result.stderr[result.stderr.index("rcuda: links"):].splitlines()[1:3]
    assert [line.split(")", 1)[1].strip() for line in links] == [transport] * 2, result.stderr[-2000:]
