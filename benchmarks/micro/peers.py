"""The other end of the baseline measurements, run as a process of its own:

    python -m rcuda.benchmarks.micro.peers MODE ARGS...

    tcp-pingpong REQUEST_BYTES REPLY_BYTES   raw TCP: read a request, write a reply
    tcp-stream MAX_BYTES                     raw TCP: receive or send SIZE bytes on request
    zmq-pingpong ENDPOINT REPLY_BYTES        ZeroMQ ROUTER: answer each message with REPLY_BYTES
    zmq-msgpack ENDPOINT                     ZeroMQ ROUTER speaking rcuda's framing: decode the
                                             msgpack header, answer synchronous ops with a
                                             mem_info-like reply carrying its seq, nothing for
                                             asynchronous ones (what a server costs, minus rcuda)
    zmq-stream ENDPOINT MAX_BYTES            ZeroMQ ROUTER: receive or send SIZE bytes in frames
    pipe-echo CPU                            on CPU (-1: any), echo each byte from stdin to
                                             stdout: what waking another process costs

Each prints `ready ADDRESS` once it listens, then serves until killed.  The
loops are as bare as Python allows: they are the baselines rcuda is held to.
"""
from __future__ import annotations

import socket
import struct
import sys

#: tcp-stream / zmq-stream request: op (b"U" upload to the peer, b"D" download from it), size, chunk.
STREAM_HEADER = struct.Struct("<cQQ")
#: The mem_info-like reply of zmq-msgpack: what rcuda's server answers cudaMemGetInfo with.
MEM_INFO_REPLY = {"free": 16 << 30, "total": 16 << 30, "err": 0}


def recv_exactly(sock: socket.socket, view: memoryview) -> None:
    while view:
        got = sock.recv_into(view)
        if not got:
            raise EOFError
        view = view[got:]


def listen_tcp() -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    host, port = server.getsockname()
    print(f"ready {host}:{port}", flush=True)
    return server


def tcp_pingpong(request_bytes: int, reply_bytes: int) -> None:
    server = listen_tcp()
    request, reply = memoryview(bytearray(request_bytes)), b"r" * reply_bytes
    while True:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            try:
                while True:
                    recv_exactly(conn, request)
                    conn.sendall(reply)
            except (EOFError, ConnectionError):
                pass


def tcp_stream(max_bytes: int) -> None:
    server = listen_tcp()
    buffer = memoryview(bytearray(max_bytes))
    header = memoryview(bytearray(STREAM_HEADER.size))
    while True:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            try:
                while True:
                    recv_exactly(conn, header)
                    op, size, _ = STREAM_HEADER.unpack(header)
                    if op == b"U":
                        recv_exactly(conn, buffer[:size])
                        conn.sendall(b"k")
                    else:
                        conn.sendall(buffer[:size])
            except (EOFError, ConnectionError):
                pass


def bind_router(endpoint: str):
    import zmq

    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.bind(endpoint)
    print(f"ready {sock.getsockopt_string(zmq.LAST_ENDPOINT)}", flush=True)
    return sock


def zmq_pingpong(endpoint: str, reply_bytes: int) -> None:
    sock = bind_router(endpoint)
    reply = b"r" * reply_bytes
    while True:
        peer, _ = sock.recv_multipart()
        sock.send_multipart([peer, reply])


def zmq_msgpack(endpoint: str) -> None:
    from rcuda import protocol

    sock = bind_router(endpoint)
    while True:
        parts = sock.recv_multipart(copy=False)
        header = protocol.unpack(parts[1].buffer)
        if not protocol.expects_reply(header):
            continue
        sock.send_multipart([parts[0].bytes, protocol.pack({**MEM_INFO_REPLY, "seq": header.get("seq")})])


def zmq_stream(endpoint: str, max_bytes: int) -> None:
    sock = bind_router(endpoint)
    buffer = memoryview(bytearray(max_bytes))
    while True:
        parts = sock.recv_multipart(copy=False)
        peer = parts[0].bytes
        op, size, chunk = STREAM_HEADER.unpack(parts[1].buffer)
        if op == b"U":
            offset = 0
            for frame in parts[2:]:  # one copy, as a device write is
                data = frame.buffer
                buffer[offset:offset + len(data)] = data
                offset += len(data)
            sock.send_multipart([peer, b"k"])
        else:
            frames = [buffer[i:min(i + chunk, size)] for i in range(0, size, chunk)]
            sock.send_multipart([peer, b"k", *frames], copy=False)


def pipe_echo(cpu: int) -> None:
    import os

    if cpu >= 0:
        os.sched_setaffinity(0, {cpu})
    print("ready pipe", flush=True)
    while True:
        byte = os.read(0, 1)
        if not byte:
            return
        os.write(1, byte)


MODES = {"tcp-pingpong": (tcp_pingpong, (int, int)), "tcp-stream": (tcp_stream, (int,)),
         "zmq-pingpong": (zmq_pingpong, (str, int)), "zmq-msgpack": (zmq_msgpack, (str,)),
         "zmq-stream": (zmq_stream, (str, int)), "pipe-echo": (pipe_echo, (int,))}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in MODES or len(argv) - 1 != len(MODES[argv[0]][1]):
        sys.stderr.write(__doc__)
        return 2
    function, types = MODES[argv[0]]
    function(*(kind(value) for kind, value in zip(types, argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
