"""Sealed lanes: a lane's bytes under authenticated encryption, for servers
run with --auth.

Keys.  CURVE (rcuda/auth.py) authenticates the client and the server and
encrypts the hello reply, which carries the session's lane secret: 32
random bytes, one per session.  A sealed lane starts with a random salt
from each side, in clear, the client's first; each direction's key is
HKDF-SHA256 of the secret with both salts, so every connection has keys of
its own: a connection recorded and played back meets a new salt, and keys
that open nothing.  The first sealed message is the lane hello with the
session token, as on a plain lane.

Records.  The byte stream (rcuda/lane.py's framing, unchanged) is cut into
records (rcuda/wire.py): u32 plaintext length, ciphertext, 16-byte tag,
AES-256-GCM with the length as associated data.  A record's nonce is its
number in its direction, never sent (the AESGCM nonce of the Noise
protocol framework: four zero bytes, then the number big-endian), so a
record replayed, reordered or left out fails its tag, as does one altered
or sealed with another key.  Every REKEY_RECORDS records both sides move to
the next key, Noise's REKEY: the first 32 bytes of the current key's
encryption of 32 zero bytes under the nonce 2^64-1, which no record uses.

A record that fails its tag, one that claims more than RECORD_MAX bytes
and a stream that ends inside a record break the lane (SealBroken): the
other side closes it.

The cipher is OpenSSL's: through the `cryptography` package here (the
server, the fuzzer, a client's handshake), through libcrypto in the
interposer, which carries on a lane after the handshake with the keys and
numbers this side reached (native/sealed_records.c).
"""
from __future__ import annotations

import os
import secrets
import socket
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from rcuda.errors import LaneClosed
from rcuda.wire import RECORD_HEAD, RECORD_MAX, REKEY_RECORDS, SEAL_KEY, SEAL_SALT, SEAL_TAG

#: The most a record takes on the wire.
RECORD_WIRE_MAX = RECORD_HEAD.size + RECORD_MAX + SEAL_TAG
#: Ciphertext read ahead beyond the record being opened: small records
#: (most replies and requests) then cost one recv for several.
READ_AHEAD = 64 << 10
_TO_SERVER, _TO_CLIENT = b"rcuda lane 1: client to server", b"rcuda lane 1: server to client"
_REKEY_NONCE = b"\0" * 4 + b"\xff" * 8


class SealBroken(LaneClosed):
    """A sealed record failed its check, or could not be one: the lane is
    broken (whoever reads it closes it, and says why)."""


def new_secret() -> bytes:
    """A session's lane secret."""
    return secrets.token_bytes(SEAL_KEY)


#: A record's nonce: four zero bytes, its number big-endian.
NONCE = struct.Struct(">4xQ")


def rekey(key: bytes) -> bytes:
    """The key after `key` (Noise's REKEY)."""
    return AESGCM(key).encrypt(_REKEY_NONCE, bytes(SEAL_KEY), b"")[:SEAL_KEY]


def derive_key(secret: bytes, client_salt: bytes, server_salt: bytes, to_server: bool) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=SEAL_KEY, salt=client_salt + server_salt,
                info=_TO_SERVER if to_server else _TO_CLIENT).derive(secret)


class Direction:
    """One direction's cipher state: its key and the next record's number."""

    __slots__ = ("key", "number", "rekey_records", "_aead")

    def __init__(self, key: bytes, number: int = 0, rekey_records: int = REKEY_RECORDS):
        self.key, self.number, self.rekey_records = key, number, rekey_records
        self._aead = AESGCM(key)

    def next_nonce(self) -> bytes:
        """The nonce of the record now being sealed or opened; moves on."""
        number = self.number
        self.number = number + 1
        if (number + 1) % self.rekey_records == 0:
            self.key = rekey(self.key)
            self._aead = AESGCM(self.key)
        return NONCE.pack(number)

    def seal(self, plaintext, head: bytes) -> bytes:
        """Ciphertext and tag (a small record: `encrypt` allocates less
        time than `encrypt_into` takes to parse its buffers)."""
        return self._aead.encrypt(self.next_nonce(), plaintext, head)

    def seal_into(self, plaintext, head, out: memoryview) -> None:
        self._aead.encrypt_into(self.next_nonce(), plaintext, head, out)

    def open_into(self, body: memoryview, head: memoryview, out: memoryview) -> None:
        try:
            self._aead.decrypt_into(self.next_nonce(), body, head, out)
        except InvalidTag:
            raise SealBroken("a sealed record failed its check (altered, replayed, reordered, or sealed "
                             "with another session's key)") from None


class Seal:
    """A sealed lane's two directions, with the buffers of each."""

    def __init__(self, send: Direction, receive: Direction):
        self.send, self.receive = send, receive
        self._out_view = memoryview(bytearray(RECORD_WIRE_MAX))
        self._raw = bytearray(RECORD_WIRE_MAX + READ_AHEAD)  # ciphertext read, not yet opened
        self._raw_view = memoryview(self._raw)
        self._raw_start = self._raw_end = 0
        self._plain = bytearray(RECORD_MAX)  # an opened record's bytes not yet asked for
        self._plain_view = memoryview(self._plain)
        self._plain_start = self._plain_end = 0

    # -- sending

    def records(self, parts):
        """The records carrying `parts` (byte buffers, in order): bytes for
        a message that fits one record (most), else views of one buffer
        that the next record reuses: send each before asking for the next."""
        if sum(map(len, parts)) <= RECORD_MAX:
            plaintext = b"".join(parts)
            if plaintext:
                head = RECORD_HEAD.pack(len(plaintext))
                yield head + self.send.seal(plaintext, head)
            return
        out = self._out_view
        for plaintext in _pieces([memoryview(p).cast("B") for p in parts if len(p)]):
            size = len(plaintext)
            out[:RECORD_HEAD.size] = head = RECORD_HEAD.pack(size)
            end = RECORD_HEAD.size + size + SEAL_TAG
            self.send.seal_into(plaintext, head, out[RECORD_HEAD.size:end])
            yield out[:end]

    # -- receiving

    @property
    def buffered(self) -> bool:
        """Whether bytes of the stream have been read already (opened or not)."""
        return self._plain_start < self._plain_end or self._raw_start < self._raw_end

    def read_into(self, view: memoryview, recv) -> int:
        """Plaintext into `view` (at least a byte, at most a record's):
        how many bytes.  `recv(view) -> int` reads the socket (LaneClosed at
        its end, timeouts passed through with what was read kept)."""
        if self._plain_start < self._plain_end:
            count = min(len(view), self._plain_end - self._plain_start)
            view[:count] = self._plain[self._plain_start:self._plain_start + count]
            self._plain_start += count
            return count
        if self._raw_end - self._raw_start < RECORD_HEAD.size:
            self._fill(RECORD_HEAD.size, recv)
        (size,) = RECORD_HEAD.unpack_from(self._raw, self._raw_start)
        if not 0 < size <= RECORD_MAX:
            raise SealBroken(f"a sealed record of {size} bytes (at most {RECORD_MAX})")
        total = RECORD_HEAD.size + size + SEAL_TAG
        if self._raw_end - self._raw_start < total:
            self._fill(total, recv)
        start, raw = self._raw_start, self._raw_view
        head, body = raw[start:start + RECORD_HEAD.size], raw[start + RECORD_HEAD.size:start + total]
        if len(view) >= size:
            self.receive.open_into(body, head, view[:size])
            count = size
        else:
            self.receive.open_into(body, head, self._plain_view[:size])
            count = len(view)
            view[:] = self._plain_view[:count]
            self._plain_start, self._plain_end = count, size
        self._raw_start = start + total
        if self._raw_start == self._raw_end:
            self._raw_start = self._raw_end = 0
        return count

    def _fill(self, needed: int, recv) -> None:
        """At least `needed` bytes of ciphertext read, from _raw_start on.
        A large record is read to its end only; small ones read ahead."""
        if self._raw_end - self._raw_start >= needed:
            return
        if self._raw_start + needed > len(self._raw):  # make room: move what is left to the front
            left = self._raw_end - self._raw_start
            self._raw[:left] = self._raw[self._raw_start:self._raw_end]
            self._raw_start, self._raw_end = 0, left
        view = self._raw_view
        limit = len(self._raw) if needed <= READ_AHEAD else self._raw_start + needed
        try:
            while self._raw_end - self._raw_start < needed:
                self._raw_end += recv(view[self._raw_end:limit])
        except SealBroken:
            raise
        except LaneClosed as exc:
            if self._raw_end > self._raw_start:  # cut inside a record: not a clean end of the stream
                raise SealBroken(f"the stream ended inside a sealed record ({exc})") from None
            raise


def _pieces(views: list[memoryview]):
    """The plaintext of consecutive records: up to RECORD_MAX bytes each,
    a view of a part where a record lies within one, else the pieces joined."""
    pending, pending_size = [], 0
    for view in views:
        while len(view):
            take = min(len(view), RECORD_MAX - pending_size)
            if not pending and take == RECORD_MAX:
                yield view[:take]
            else:
                pending.append(view[:take])
                pending_size += take
                if pending_size == RECORD_MAX:
                    yield b"".join(pending)
                    pending, pending_size = [], 0
            view = view[take:]
    if pending:
        yield pending[0] if len(pending) == 1 else b"".join(pending)


# ---------------------------------------------------------------- the handshake

def client_handshake(sock: socket.socket, secret: bytes, rekey_records: int = REKEY_RECORDS) -> Seal:
    """The client's side of a new sealed lane: salts exchanged, keys made."""
    client_salt = os.urandom(SEAL_SALT)
    sock.sendall(client_salt)
    return _seal(secret, client_salt, _receive_exactly(sock, SEAL_SALT), rekey_records, client=True)


def server_handshake(sock: socket.socket, secret: bytes, rekey_records: int = REKEY_RECORDS) -> Seal:
    client_salt = _receive_exactly(sock, SEAL_SALT)
    server_salt = os.urandom(SEAL_SALT)
    sock.sendall(server_salt)
    return _seal(secret, client_salt, server_salt, rekey_records, client=False)


def _seal(secret: bytes, client_salt: bytes, server_salt: bytes, rekey_records: int, client: bool) -> Seal:
    """One side's Seal: it sends with the key of its own direction."""
    to_server, to_client = (Direction(derive_key(secret, client_salt, server_salt, towards_server), 0, rekey_records)
                            for towards_server in (True, False))
    return Seal(to_server, to_client) if client else Seal(to_client, to_server)


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        got = sock.recv(count - len(data))
        if not got:
            raise ConnectionError("the lane closed during its handshake")
        data += got
    return bytes(data)
