"""The sealed lane's record layer in Python (rcuda/sealed.py): the server's
and the fuzzer's side of a lane under --auth.  Two Lanes on a socketpair;
the attacks are records cut, copied, swapped or altered on the wire."""
from __future__ import annotations

import os
import socket
import threading

import pytest

from rcuda import sealed
from rcuda.lane import Lane, LaneClosed
from rcuda.wire import RECORD_HEAD, RECORD_MAX, SEAL_TAG

SECRET = bytes(range(32))


def sealed_pair(client_secret=SECRET, server_secret=SECRET, rekey_records=sealed.REKEY_RECORDS):
    """(client Lane, server Lane) of one connection, each sealed by its own handshake."""
    client_sock, server_sock = tcp_pair()
    for sock in (client_sock, server_sock):
        sock.settimeout(10)
    server_seal = {}
    thread = threading.Thread(target=lambda: server_seal.setdefault(
        "seal", sealed.server_handshake(server_sock, server_secret, rekey_records)))
    thread.start()
    client_seal = sealed.client_handshake(client_sock, client_secret, rekey_records)
    thread.join(10)
    return Lane(client_sock, seal=client_seal), Lane(server_sock, seal=server_seal["seal"])


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


def records_of(seal: sealed.Seal, *parts) -> list[bytes]:
    """The wire bytes of each record carrying `parts`."""
    return [bytes(record) for record in seal.records(parts)]


def raw(lane: Lane) -> socket.socket:
    return lane.sock


def test_messages_of_every_size_arrive_whole_in_both_directions():
    client, server = sealed_pair()
    sizes = [0, 1, 7, RECORD_MAX - 40, RECORD_MAX, RECORD_MAX + 1, 3 * RECORD_MAX + 12345, 5 << 20]
    payloads = [os.urandom(size) for size in sizes]

    def serve():
        for _ in sizes:
            header, frames = server.receive()
            server.send({"seq": header["seq"], "n": len(frames)}, [bytes(f.buffer)[::-1] for f in frames])

    thread = threading.Thread(target=serve)
    thread.start()
    for i, payload in enumerate(payloads):
        client.send({"op": "htod", "seq": i}, [payload, b"tail"])
        reply, frames = client.receive()
        assert reply == {"seq": i, "n": 2}
        assert bytes(frames[0].buffer) == payload[::-1] and bytes(frames[1].buffer) == b"liat"
    thread.join(10)
    # Nothing crossed in clear: the payloads' bytes are not on the wire (checked below on a record).


def test_record_bytes_are_not_the_plaintext_and_carry_a_tag():
    client, _ = sealed_pair()
    message = b"x" * 1000
    [record] = records_of(client.seal, message)
    assert RECORD_HEAD.unpack_from(record)[0] == 1000
    assert len(record) == RECORD_HEAD.size + 1000 + SEAL_TAG
    assert message[:64] not in record


def test_a_large_upload_is_read_into_place_record_by_record():
    client, server = sealed_pair()
    payload = os.urandom(2 * RECORD_MAX + 999)
    thread = threading.Thread(target=client.send, args=({"op": "htod", "seq": 1}, [payload]))
    thread.start()
    head, lengths = server.receive_head()
    target = bytearray(lengths[0])
    server.read_into(memoryview(target)[:RECORD_MAX // 3], on_idle=lambda: None)  # less than a record
    server.read_into(memoryview(target)[RECORD_MAX // 3:], on_idle=lambda: None)
    thread.join(10)
    assert bytes(target) == payload and not server.buffered


def test_both_sides_move_to_new_keys_every_rekey_records():
    client, server = sealed_pair(rekey_records=4)
    first_key = client.seal.send.key
    for i in range(11):
        client.send({"seq": i}, [os.urandom(100)])
        header, _ = server.receive()
        assert header["seq"] == i
    assert client.seal.send.number == server.seal.receive.number == 11
    assert client.seal.send.key == server.seal.receive.key != first_key
    assert client.seal.send.key == sealed.rekey(sealed.rekey(first_key))


@pytest.mark.parametrize("attack", ["altered", "replayed", "reordered", "oversized"])
def test_a_tampered_stream_breaks_the_lane(attack):
    client, server = sealed_pair()
    first, second = records_of(client.seal, b"a" * 300), records_of(client.seal, b"b" * 300)
    if attack == "altered":
        flipped = bytearray(first[0])
        flipped[RECORD_HEAD.size + 17] ^= 0x04
        wire = bytes(flipped)
    elif attack == "replayed":
        wire = first[0] + first[0]
    elif attack == "reordered":
        wire = second[0] + first[0]
    else:
        wire = RECORD_HEAD.pack(RECORD_MAX + 1) + bytes(64)
    if attack == "replayed":  # the first copy opens; the second must not
        raw(client).sendall(wire)
        assert server.seal.read_into(memoryview(bytearray(300)), server._recv_plain) == 300
    else:
        raw(client).sendall(wire)
    with pytest.raises(sealed.SealBroken):
        server.seal.read_into(memoryview(bytearray(300)), server._recv_plain)


def test_a_stream_cut_inside_a_record_breaks_the_lane_and_a_clean_end_closes_it():
    client, server = sealed_pair()
    [record] = records_of(client.seal, b"c" * 500)
    raw(client).sendall(record[:200])
    raw(client).close()
    with pytest.raises(sealed.SealBroken, match="ended inside a sealed record"):
        server.receive()
    client, server = sealed_pair()
    client.send({"seq": 1})
    raw(client).close()
    assert server.receive()[0] == {"seq": 1}
    with pytest.raises(LaneClosed) as closed:
        server.receive()
    assert not isinstance(closed.value, sealed.SealBroken)


def test_another_sessions_secret_opens_nothing():
    client, server = sealed_pair(client_secret=bytes(32))
    client.send({"op": "lane", "seq": 0, "token": "t", "dev": 0})
    with pytest.raises(sealed.SealBroken, match="another session's key"):
        server.receive()


def test_every_connection_has_keys_of_its_own():
    one, _ = sealed_pair()
    two, _ = sealed_pair()
    assert one.seal.send.key != two.seal.send.key and one.seal.send.key != one.seal.receive.key


def test_a_read_timeout_inside_a_record_keeps_what_was_read():
    client, server = sealed_pair()
    [record] = records_of(client.seal, b"d" * 1000)
    raw(server).settimeout(0.05)
    raw(client).sendall(record[:300])
    with pytest.raises((TimeoutError, BlockingIOError)):
        server.seal.read_into(memoryview(bytearray(1000)), server._recv_plain)
    raw(client).sendall(record[300:])
    raw(server).settimeout(10)
    target = bytearray(1000)
    assert server.seal.read_into(memoryview(target), server._recv_plain) == 1000 and target == b"d" * 1000
