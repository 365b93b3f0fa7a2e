"""Helpers for the tests of --auth and of the peer port (test_auth.py,
test_peer_security.py): key folders laid out as `rcuda keys` makes them,
and a session driven by hand with raw ZeroMQ sockets and lanes."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq

from rcuda import auth, protocol
from rcuda.lane import Lane, dial


@dataclass
class Keys:
    server_dir: Path          # what `rcuda server --auth` takes
    client_secret: Path       # an accepted client's key pair
    client_public: Path
    stranger_secret: Path     # a valid key pair the server does not know

    @property
    def server_public(self) -> Path:
        return self.server_dir / "server.key"

    def env(self, secret: Path | None = None, server_key: Path | str | None = None) -> dict:
        return {"RCUDA_KEY": str(secret or self.client_secret),
                "RCUDA_SERVER_KEY": str(server_key or self.server_public)}


def make_keys(root: Path) -> Keys:
    server_dir = root / "auth"
    auth.create_key_pair(server_dir, "server")
    (server_dir / "clients").mkdir()
    public, secret = auth.create_key_pair(root / "alice", "alice")
    shutil.copy(public, server_dir / "clients")
    _, stranger = auth.create_key_pair(root / "mallory", "mallory")
    return Keys(server_dir, secret, public, stranger)


class KeyedSession:
    """A session opened by hand with an accepted key: hello, then GPU0."""

    def __init__(self, address: str, curve: auth.Curve | None):
        self.context = zmq.Context()
        self.host = address.rsplit(":", 1)[0]
        self.curve = curve
        daemon = self.socket(int(address.rsplit(":", 1)[1]))
        daemon.send(protocol.pack({"op": "hello", "seq": 1, "version": protocol.PROTOCOL_VERSION,
                                   "client": {"program": "test"}}))
        assert daemon.poll(20000), "no hello reply"
        self.hello = protocol.unpack(daemon.recv())
        daemon.close()
        self.gpu = self.socket(self.hello["ports"][0])
        self.gpu.send(protocol.pack({"op": "open", "seq": 1, "dev": 0, "token": self.hello["token"],
                                     "va_base": None}))
        assert self.gpu.poll(20000) and protocol.unpack(self.gpu.recv())["err"] == 0
        self.seq = 1

    def socket(self, port: int, curve="mine") -> zmq.Socket:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        # A refused handshake can take the connection's pipe away before a
        # send: then the send would wait forever instead of raising zmq.Again.
        sock.setsockopt(zmq.SNDTIMEO, 5000)
        auth.apply(sock, self.curve if curve == "mine" else curve)
        sock.connect(f"tcp://{self.host}:{port}")
        return sock

    def send(self, header: dict, frames=()) -> None:
        self.seq += 1
        self.gpu.send_multipart([protocol.pack(dict(header, seq=self.seq)), *frames])

    def receive(self, timeout: float = 20) -> dict:
        assert self.gpu.poll(int(timeout * 1000)), "no message from the server"
        return protocol.unpack(self.gpu.recv_multipart()[0])

    def call(self, header: dict, frames=()) -> dict:
        self.send(header, frames)
        return self.receive()

    def read(self, ptr: int, size: int) -> bytes:
        """`size` bytes of device memory at `ptr` (a dtoh in the legacy stream)."""
        self.send({"op": "dtoh", "src": ptr, "size": size, "stream": 0})
        assert self.gpu.poll(20000), "no dtoh reply"
        return b"".join(self.gpu.recv_multipart()[1:])

    def peer_lane(self, secret="mine") -> Lane:
        """A connection to the session's peer port, sealed with the session's
        peer secret (or `secret`) where the server runs --auth."""
        return dial(self.host, self.hello["peer_port"], 10,
                    self.hello.get("peer_secret") if secret == "mine" else secret)

    @property
    def peer_endpoint(self) -> str:
        return f"tcp://{self.host}:{self.hello['peer_port']}"

    def close(self) -> None:
        self.context.destroy(linger=0)


