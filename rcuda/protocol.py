"""rcuda's wire protocol: what travels between a client and a server.

Transport: ZeroMQ.  A client process talks to each server's daemon once
(`hello`), which hands it a session worker; then each of the client's devices
has its own DEALER socket to the worker's ROUTER socket for that GPU, and one
more socket per session carries heartbeats.

Every message is a multipart:
    frame 0     msgpack map, the header: {"op": str, "seq": int, ...}
    frames 1..  raw bytes (copies, parameter buffers, module images); bulk
                data never goes inside msgpack
A reply echoes `seq` and carries `err` (a cudaError_t; 0 = success), `msg`
(an explanation when err != 0) and op-specific fields.  Asynchronous ops
(ASYNC_OPS) get no reply: their errors are reported by the next reply on the
same device, as CUDA reports asynchronous errors at a later call.

Ops are names, never list positions; OPS below is the whole vocabulary with
the fields each header must carry (checked on receipt by `check_header`).

Daemon (the `--listen` address):
    hello   {version, client}        -> {version, session, token, ports, control_port, devices, server,
                                         peer_port, peer_token}
    info    {version}                -> {version, devices, server, backend}
Session worker, per-device socket:
    open    {dev, token, va_base}    -> {props}            first message on a socket
    malloc  {size}                   -> {ptr}
    free    {ptr}                    -> {}
    htod    {dst, size}  + data      -> {}                 data in one or more frames
    dtoh    {src, size}              -> {} + data frames
    dtod    {dst, src, size}         -> {}
    memset  {ptr, value, size}       -> {}
    function{fn, module, name, offsets, sizes} [+ image]  -> {}
                                     registers kernel `name` as id `fn`; the
                                     module image rides along the first time
    launch  {fn, grid, block, shmem, stream} + params      (async)
    sync    {}                       -> {}                 cudaDeviceSynchronize
    mem_info{}                       -> {free, total}
    close   {}                       -> {}
    peer_push {xfer, src, size, endpoint, token, dest, timeout}     (async)
                                     read [src, src+size) once every earlier op
                                     on this GPU is done, and send it to the
                                     peer socket `endpoint` (another worker's,
                                     or this one's) as transfer `xfer`
    peer_wait {xfer, dst, size, source}                             (async)
                                     wait for transfer `xfer` (from server
                                     `source`) on this worker's peer socket and
                                     write it to [dst, dst+size): later ops on
                                     this GPU see the bytes
    peer_access {peer, enable}       -> {}                 cudaDeviceEnable/DisablePeerAccess
                                     between two GPUs of this server
Session worker, peer socket (one per worker, port and token in the hello
reply): bytes of cudaMemcpyPeer between servers, never through the client.
    peer_data  {token, xfer, offset, total} + one frame (<= CHUNK_SIZE bytes)
                                     -> peer_ack {xfer, err, msg} after the last
                                        chunk (or at once, refusing)
    peer_abort {token, xfer, source, upto, msg}
                                     the client gives up transfer `xfer` (or
                                     every transfer <= `upto` from server
                                     `source`, which went away)
A worker whose peer_push fails tells its client with an unsolicited message
{seq: null, notice: "peer_failed", xfer, err, msg} on the GPU socket; the
client then aborts the transfer at the destination.
Session worker, heartbeat socket:
    ping    {}                       -> {}  (op "pong")
Every reply may carry `out`: device-side output (printf) to print at the
client, in order.
"""
from __future__ import annotations

import msgpack

from rcuda.errors import ProtocolError

PROTOCOL_VERSION = 1

#: Bulk copies are split into frames of this size: ZeroMQ slows down on
#: messages above ~32 MiB (fresh buffers page-fault), see CUDA-NOTES.
CHUNK_SIZE = 4 << 20

#: Seconds between heartbeats on a session's heartbeat socket.
HEARTBEAT_INTERVAL = 1.0

_INT = int
_STR = str
_LIST = (list, tuple)

#: op -> {field: type} that its header must carry (besides op and seq).
OPS: dict[str, dict[str, type | tuple]] = {
    "hello": {"version": _INT, "client": dict},
    "info": {"version": _INT},
    "open": {"dev": _INT, "token": _STR, "va_base": (_INT, type(None))},
    "malloc": {"size": _INT},
    "free": {"ptr": _INT},
    "htod": {"dst": _INT, "size": _INT},
    "dtoh": {"src": _INT, "size": _INT},
    "dtod": {"dst": _INT, "src": _INT, "size": _INT},
    "memset": {"ptr": _INT, "value": _INT, "size": _INT},
    "function": {"fn": _INT, "module": _STR, "name": _STR, "offsets": _LIST, "sizes": _LIST},
    "launch": {"fn": _INT, "grid": _LIST, "block": _LIST, "shmem": _INT, "stream": _INT},
    "sync": {},
    "mem_info": {},
    "close": {},
    "ping": {},
    # -- server-to-server copies (cudaMemcpyPeer), see client/peer.py and server/peer.py
    "peer_push": {"xfer": _INT, "src": _INT, "size": _INT, "endpoint": _STR, "token": _STR, "dest": _STR,
                  "timeout": (_INT, float)},
    "peer_wait": {"xfer": _INT, "dst": _INT, "size": _INT, "source": _STR},
    "peer_access": {"peer": _INT, "enable": _INT},
    "peer_data": {"token": _STR, "xfer": _INT, "offset": _INT, "total": _INT},
    "peer_abort": {"token": _STR, "xfer": (_INT, type(None)), "source": _STR, "upto": _INT, "msg": _STR},
}

#: Ops sent without waiting for a reply.
ASYNC_OPS = frozenset({"launch", "peer_push", "peer_wait"})

#: Ops of the peer socket (never valid on a GPU socket).
PEER_SOCKET_OPS = frozenset({"peer_data", "peer_abort"})

_packer = msgpack.Packer(use_bin_type=True)


def pack(header: dict) -> bytes:
    return _packer.pack(header)


def unpack(frame) -> dict:
    """Decode a header frame; ProtocolError if it is not a msgpack map."""
    try:
        header = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable header: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"header is a {type(header).__name__}, not a map")
    return header


def check_header(header: dict) -> str:
    """Validate a request header against OPS; returns its op."""
    op = header.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise ProtocolError(f"unknown op {op!r}")
    if not isinstance(header.get("seq"), int):
        raise ProtocolError(f"{op}: missing or non-integer seq")
    for field, kind in OPS[op].items():
        value = header.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ProtocolError(f"{op}: field {field!r} must be {_type_name(kind)}, got {value!r:.60}")
    return op


def _type_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def chunks(view: memoryview, size: int = CHUNK_SIZE) -> list[memoryview]:
    """Split a byte view into frames of at most `size` bytes."""
    return [view[i:i + size] for i in range(0, len(view), size)] or [view[:0]]
