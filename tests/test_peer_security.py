"""The peer-copy path under hostile use: a client chooses the endpoint a
worker pushes to, and anyone holding a session's peer token can send it
bytes.  Pushes go only to endpoints that pass the rcuda peer handshake
(with --auth: only to peers holding the destination session's peer secret,
over a sealed connection); what arrives before the destination GPU asks for
it is bounded."""
from __future__ import annotations

import socket
import threading
import time

import pytest
import zmq

from auth_helpers import KeyedSession, make_keys
from multi_helpers import MULTI_KERNELS
from rcuda import protocol
from rcuda.auth import ClientKeys
from rcuda.config import parse_server
from rcuda.errors import CudaError, ProtocolError, cudaError
from rcuda.lane import Lane, LaneClosed, set_timeouts
from rcuda.server import peer
from rcuda.server.peer import Inbox

MIB = 1 << 20


@pytest.fixture
def session(server_factory):
    server = server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS), "--peer-buffer", str(4 * MIB))
    session = KeyedSession(server.address, None)
    yield session
    session.close()


def push(session: KeyedSession, endpoint: str, size: int = MIB, token: str = "t" * 32, **extra) -> dict:
    """peer_push of a fresh allocation to `endpoint`; the notice it causes."""
    ptr = session.call({"op": "malloc", "size": size})["ptr"]
    session.send({"op": "peer_push", "xfer": 7, "src": ptr, "size": size, "endpoint": endpoint, "token": token,
                  "dest": "GPU9 (elsewhere)", "timeout": 2, **extra})
    notice = session.receive(timeout=20)
    assert notice["seq"] is None and notice["notice"] == "peer_failed", notice
    return notice


def test_no_data_goes_to_a_zeromq_socket_that_is_not_a_peer_port(session):
    """Some other ZeroMQ service reachable from the server gets not even a
    message: the peer handshake is not ZeroMQ."""
    context = zmq.Context.instance()
    stranger = context.socket(zmq.ROUTER)
    stranger.setsockopt(zmq.LINGER, 0)
    port = stranger.bind_to_random_port("tcp://127.0.0.1")
    try:
        notice = push(session, f"tcp://127.0.0.1:{port}", size=4 * MIB)
        assert "did not answer the rcuda peer handshake" in notice["msg"], notice
        assert not stranger.poll(500)
    finally:
        stranger.close()


def test_a_tcp_service_that_is_not_a_peer_port_gets_only_the_handshake(session):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    received = bytearray()

    def accept():
        listener.settimeout(20)
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.settimeout(5)
        try:
            while chunk := conn.recv(65536):
                received.extend(chunk)
        except OSError:
            pass
        conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        notice = push(session, f"tcp://127.0.0.1:{listener.getsockname()[1]}", size=4 * MIB)
        assert "did not answer the rcuda peer handshake" in notice["msg"], notice
        assert time.monotonic() - started < 15
    finally:
        listener.close()
        thread.join(10)
    assert len(received) < 1024, f"{len(received)} bytes reached a plain TCP service"  # the peer_hello only


def test_a_wrong_token_is_refused_before_any_data(server_factory, session):
    other_server = server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS))
    other = KeyedSession(other_server.address, None)
    try:
        notice = push(session, other.peer_endpoint, token="0" * 32)
        assert "wrong peer token" in notice["msg"], notice
    finally:
        other.close()
    # The right token gets through: the receiving session sees the bytes.
    other = KeyedSession(other_server.address, None)
    try:
        dst = other.call({"op": "malloc", "size": MIB})["ptr"]
        src = session.call({"op": "malloc", "size": MIB})["ptr"]
        assert session.call({"op": "memset", "ptr": src, "value": 0x5A, "size": MIB, "stream": 0})["err"] == 0
        other.send({"op": "peer_wait", "xfer": 3, "dst": dst, "size": MIB, "source": "test"})
        session.send({"op": "peer_push", "xfer": 3, "src": src, "size": MIB, "endpoint": other.peer_endpoint,
                      "token": other.hello["peer_token"], "dest": "GPU1", "timeout": 10})
        other.send({"op": "dtoh", "src": dst, "size": MIB, "stream": 0})
        assert other.gpu.poll(20000)
        parts = other.gpu.recv_multipart()
        assert protocol.unpack(parts[0])["err"] == 0 and b"".join(parts[1:]) == b"\x5a" * MIB
    finally:
        other.close()


def send_transfer(lane: Lane, token: str, xfer: int, total: int, chunk: int = MIB) -> list[dict]:
    """Send `total` bytes as transfer `xfer` to a peer port; the acks."""
    for offset in range(0, total, chunk):
        size = min(chunk, total - offset)
        lane.send({"op": "peer_data", "seq": 0, "token": token, "xfer": xfer, "offset": offset, "total": total},
                  [bytes([xfer]) * size])
    acks = []
    set_timeouts(lane.sock, 2, 2)
    try:
        while True:
            acks.append(lane.receive()[0])
    except (BlockingIOError, TimeoutError):
        return acks


def test_bytes_arriving_before_the_wait_are_bounded(session):
    """--peer-buffer 4 MiB: a 6 MiB transfer nobody waits for yet is refused
    at 5 MiB with cudaErrorMemoryAllocation, and its wait fails saying why;
    what it held is freed, so a 3 MiB transfer then works."""
    token = session.hello["peer_token"]
    lane = session.peer_lane()
    acks = send_transfer(lane, token, 9, 6 * MIB)
    assert acks and acks[0]["err"] == int(cudaError.cudaErrorMemoryAllocation), acks
    assert "may hold in transit (4194304 bytes" in acks[0]["msg"]
    big = session.call({"op": "malloc", "size": 6 * MIB})["ptr"]
    session.send({"op": "peer_wait", "xfer": 9, "dst": big, "size": 6 * MIB, "source": "test"})
    reply = session.call({"op": "sync"})
    assert reply["err"] == int(cudaError.cudaErrorMemoryAllocation) and "peer copy 9" in reply["msg"], reply
    acks = send_transfer(lane, token, 10, 3 * MIB)
    assert [a["err"] for a in acks] == [0], acks
    small = session.call({"op": "malloc", "size": 3 * MIB})["ptr"]
    session.send({"op": "peer_wait", "xfer": 10, "dst": small, "size": 3 * MIB, "source": "test"})
    session.send({"op": "dtoh", "src": small, "size": 3 * MIB, "stream": 0})
    assert session.gpu.poll(20000)
    parts = session.gpu.recv_multipart()
    assert protocol.unpack(parts[0])["err"] == 0 and b"".join(parts[1:]) == b"\x0a" * (3 * MIB)
    lane.close()


def test_inbox_accounting_and_open_transfer_limit(monkeypatch):
    inbox = Inbox(limit=3 * MIB)
    chunk = memoryview(bytes(MIB))
    assert inbox.deliver(1, 0, 2 * MIB, chunk) == (False, None)
    assert inbox.deliver(2, 0, MIB, chunk) == (True, None)
    assert inbox.buffered == 2 * MIB
    complete, problem = inbox.deliver(1, MIB, 2 * MIB, chunk)
    assert complete and problem is None and inbox.buffered == 3 * MIB
    _, problem = inbox.deliver(3, 0, MIB, chunk)
    assert problem.status == cudaError.cudaErrorMemoryAllocation
    assert list(inbox.receive(2, "s", MIB, lambda: False)) == [chunk]
    assert inbox.buffered == 2 * MIB
    inbox.abort(1, "gone")
    assert inbox.buffered == 0  # an aborted transfer's bytes are freed at once
    with pytest.raises(CudaError, match="gone"):
        list(inbox.receive(1, "s", 2 * MIB, lambda: False))
    # Later chunks of a failed transfer are dropped, and its sender hears at the end.
    assert inbox.deliver(3, 0, 2 * MIB, chunk) == (False, None)
    _, problem = inbox.deliver(3, MIB, 2 * MIB, chunk)
    assert problem is not None and inbox.buffered == 0
    monkeypatch.setattr(peer, "MAX_OPEN_TRANSFERS", 8)
    many = Inbox()
    for xfer in range(100, 108):
        assert many.deliver(xfer, 0, 1, memoryview(b"x")) == (True, None)
    _, problem = many.deliver(200, 0, 1, memoryview(b"x"))
    assert problem is not None and "transfers are already open" in problem.message


def test_abandoned_and_gone_sources_are_remembered_within_bounds(monkeypatch):
    monkeypatch.setattr(peer, "MAX_SOURCES_GONE", 4)
    inbox = Inbox()
    for xfer in range(peer.RECENT_TRANSFERS * 2):
        inbox.abandon(xfer)
    assert len(inbox._abandoned._ids) <= peer.RECENT_TRANSFERS
    for i in range(50):
        inbox.abort_source(f"server{i}:1", i, "gone")
    assert len(inbox._sources_gone) == 4


@pytest.mark.parametrize("extra, complaint", [
    ({}, "runs with --auth and sends peer copies only to servers that authenticate"),
    ({"peer_secret": b"x"}, "peer_secret must be 32 bytes"),
])
def test_auth_server_pushes_only_to_authenticated_peers(tmp_path, server_factory, extra, complaint):
    keys = make_keys(tmp_path)
    server = server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS), "--auth", str(keys.server_dir))
    curve = ClientKeys(str(keys.client_secret), [str(keys.server_public)]).for_server(parse_server(server.address))
    session = KeyedSession(server.address, curve)
    plain_server = server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS))
    plain = KeyedSession(plain_server.address, None)
    try:
        notice = push(session, plain.peer_endpoint, token=plain.hello["peer_token"], **extra)
        assert complaint in notice["msg"], notice
        if not extra:
            assert notice["err"] == int(cudaError.cudaErrorNotPermitted)
    finally:
        session.close()
        plain.close()


def test_a_peer_secret_from_another_session_opens_nothing(tmp_path, server_factory):
    """With --auth, a source worker's connection to a destination's peer
    port is sealed with the destination session's peer secret: another
    session's secret gets no welcome, and a connection without any secret
    nothing at all; the session's own secret gets through."""
    keys = make_keys(tmp_path)
    server = server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS), "--auth", str(keys.server_dir))
    curve = ClientKeys(str(keys.client_secret), [str(keys.server_public)]).for_server(parse_server(server.address))
    source, target, bystander = (KeyedSession(server.address, curve) for _ in range(3))
    try:
        token = target.hello["peer_token"]
        notice = push(source, target.peer_endpoint, token=token, peer_secret=bystander.hello["peer_secret"])
        assert "did not answer the rcuda peer handshake" in notice["msg"], notice
        for secret in (bystander.hello["peer_secret"], None):
            lane = target.peer_lane(secret)
            lane.send({"op": "peer_hello", "seq": 0, "token": token})
            with pytest.raises((LaneClosed, ProtocolError)):  # closed; or, plain, the server's salt
                lane.receive()
        lane = target.peer_lane()
        lane.send({"op": "peer_hello", "seq": 0, "token": token})
        assert lane.receive()[0] == {"op": "peer_welcome", "seq": 0, "xfer": None, "err": 0, "msg": ""}
        lane.close()
    finally:
        for s in (source, target, bystander):
            s.close()
