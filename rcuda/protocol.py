"""rcuda's wire protocol: what travels between a client and a server.

A client process talks to each server's daemon once (`hello`), which hands
it a session worker; then each of the client's devices has ONE connection
to the worker's thread for that GPU: its lane (a TCP connection, framed as
rcuda/lane.py says, sealed as rcuda/sealed.py says on servers with --auth)
or, when the lane cannot be reached, its DEALER socket to the worker's
ROUTER socket for that GPU (CURVE-encrypted with --auth).  One more
socket per session carries heartbeats.  A device's requests are served
in the order they arrive on its connection; replies may come in any other
order (a synchronisation is answered when its work is done), each echoing
its request's `seq`.

Every message is a multipart:
    frame 0     msgpack map, the header: {"op": str, "seq": int, ...}
    frames 1..  raw bytes (copies, parameter buffers, module images); bulk
                data never goes inside msgpack
A reply echoes `seq` and carries `err` (a cudaError_t; 0 = success), `msg`
(an explanation when err != 0) and op-specific fields.  Asynchronous
requests (see ALWAYS_ASYNC, MAY_BE_ASYNC) get no reply: their errors are
reported by the next reply on the same device, as CUDA reports asynchronous
errors at a later call.

Ops are names, never list positions; OPS below is the whole vocabulary with
the fields each header must carry (checked on receipt by `check_header`).

Daemon (the `--listen` address):
    hello   {version, client}        -> {version, session, token, ports, control_port, devices, server,
                                         peer_port, peer_token, peer_secret, lane_ports, lane_secret}
            optional `progress: true`: while no worker is free the daemon
            sends {progress: true, queued: N} now and then (N: hellos ahead);
            the client keeps waiting while N goes down.  peer_secret
            (servers with --auth, 32 bytes): seals connections to the peer
            port, see server/peer.py
            lane_ports: a lane port per GPU; a lane connection starts with
            {op: "lane", token, dev} -> {err}, then carries the device's
            requests from `open` on.  lane_secret (servers with --auth, 32
            bytes): the lanes are sealed with keys made from it, and begin
            with the sealing's handshake
    info    {version}                -> {version, devices, server, backend}
    status  {version}                -> {version, devices, server, backend, gpus, sessions}
                                        what `rcuda smi` shows: per GPU memory used and
                                        utilisation, per session its client, memory and
                                        calls/s (from each worker's report every
                                        STATUS_INTERVAL seconds)
Session worker, per-device connection (ids of streams, events and functions
are chosen by the client, so creating one needs no round trip; stream 0 is
the legacy default stream):
    open          {dev, token, va_base}               -> {props, attributes, va_base, vmm_base}   first message
                  va_base: where the client would like the GPU's window of
                  VA_WINDOW_SIZE bytes (None: no window); optional vmm_base:
                  where it would like the session's VMM window (VMM_WINDOW_SIZE
                  bytes, shared by the session's GPUs).  Both are hints: the
                  reply says where the server's driver reserved them
    move_window   {window, hint}                      -> {base}    window "device" or
                  "vmm": reserve it again at (or, if the driver will not, away
                  from) hint, then give back the old one; only while nothing
                  lies in it.  The client's way out when a window collides
                  with another GPU's or with its own memory
    malloc        {size}                              -> {ptr}
    free          {ptr}                               -> {}
    mem_info      {}                                  -> {free, total}
    htod          {dst, size, stream} + data frames   -> {}
    dtoh          {src, size, stream}                 -> {} + data frames
    dtod          {dst, src, size, stream}            -> {}
    copy_batch    {copies, uploads, stream} + data frames -> {}   cudaMemcpyBatchAsync's copies
                  within this GPU, in `stream`: copies [dst, src, size, ...]
                  device to device, uploads [dst, size, ...] from the host,
                  their bytes back to back in the frames; at most
                  MAX_BATCH_COPIES of the two together; every range is
                  checked before anything is copied.  Answered (without
                  "async") once the stream has run it
    memset        {ptr, value, size, stream}          -> {}        optional elem: 1, 2 or 4, the
                  pattern's size in bytes (cuMemsetD16/D32): `value`'s low
                  elem bytes repeated over `size` bytes (a multiple of elem)
    htod3d        {dst, extent, stream} + packed bytes -> {}   a box of extent [width in bytes,
                  height, depth] (none 0): cudaMemcpy2D/3D, to and from arrays.
                  A place (dst, src) is linear memory {ptr, pitch, rows} (rows:
                  a slice's rows) or an array {array, level, x, y, z} (x in
                  bytes); host bytes are packed, rows and slices back to back
    dtoh3d        {src, extent, stream}               -> {} + packed bytes
    dtod3d        {dst, src, extent, stream}          -> {}
    memset3d      {dst, value, extent, stream}        -> {}        dst linear; optional elem as
                  memset's (width a multiple of elem)
    array_create  {array, format, channels, width, height, depth, flags, levels} -> {}
                  a CUDA array named by the client's id: format "int8".."float32",
                  1, 2 or 4 channels, sides in CUDA's convention (height 0: 1-D;
                  depth 0 unless 3-D or layered), cudaArray* flags; levels 0 for a
                  plain array, n for a mipmapped array of n levels
    array_destroy {array}                             -> {}
    texture_create{resource, texture, view}           -> {handle}  cudaCreateTextureObject: resource
                  {type: "array"|"mipmappedArray"|"linear"|"pitch2D", array | ptr,
                  format, channels, size | width, height, pitch}; texture:
                  cudaTextureDesc's fields by name; view: cudaResourceViewDesc's
                  or null.  handle: what a kernel is given
    texture_destroy {handle}                          -> {}
    surface_create{resource}                          -> {handle}  an array resource
    surface_destroy {handle}                          -> {}
    texref        {module, name, surface, resource, texture} -> {}  the driver's legacy texture
                  (surface 0) or surface (surface 1) reference `name` of a module
                  bound for its kernels' next launches: resource as texture_create's
                  (a texture reference's linear memory may start anywhere: the
                  texture reads from its address rounded down to the texture
                  alignment, cuTexRefSetAddress's offset), texture: cudaTextureDesc's
                  fields (null for a surface)
    ipc_export    {ptr}                               -> {worker, token, size}   cudaIpcGetMemHandle of
                  the allocation at ptr (or cudaMemPoolExportPointer of a pool's
                  block): another session of this server opens it by the
                  worker's name and the token (server/ipc.py) until the
                  allocation is freed or this session closes
    ipc_open      {worker, token}                     -> {ptr, size}   cudaIpcOpenMemHandle
    ipc_close     {ptr}                               -> {}        cudaIpcCloseMemHandle
    ipc_event_export {event}                          -> {worker, token}   cudaIpcGetEventHandle: an
                  event made with cudaEventInterprocess, which another session
                  of this server opens (event_create's `ipc`) until it is
                  destroyed or this session closes
    tensor_map_encode {map}                           -> {} + 128 bytes   cuTensorMapEncode*:
                  map: rcuda/tensor_maps.py's TensorMap fields; the bytes are
                  the server's driver's CUtensorMap (the sim's own encoding)
    tensor_map_replace {address} + 128 bytes          -> {} + 128 bytes   cuTensorMapReplaceAddress
    module        {module} + module image             -> {info}    once per module; the image is a
                  fatbinary, a cubin or PTX text (cuModuleLoadData's); info: the
                  JIT compiler's info log; bad PTX fails with its error log as msg
    link          {names, sizes} + input images       -> {info} + the linked image   cuLinkComplete:
                  inputs (fatbinary, cubin, PTX) of `sizes` bytes each, back to
                  back in the payload, named for the log
    function      {fn, module, name, offsets, sizes}  -> {attrs}   kernel `name` is now id `fn`
    func_attrs    {fn}                                -> {attrs}   cudaFuncAttributes fields
    func_set_attr {fn, attr, value}                   -> {}        attr: a cudaFuncAttribute name
    symbol        {module, name}                      -> {ptr, size}
    launch        {fn, grid, block, shmem, stream, cooperative[, cluster]} + parameter buffer   (never answered);
                  cooperative 1: cudaLaunchCooperativeKernel; cluster [x, y, z]: a
                  thread block cluster launch of that shape (the kernel's own
                  __cluster_dims__, or cudaLaunchAttributeClusterDimension's)
    launches      {count} + records                  (never answered)   launches recorded in C,
                  laid out as rcuda/wire.py says (LAUNCH_RECORD, RECORD_*); one
                  frame, or CHUNK_SIZE pieces of it on a ZeroMQ socket
    sync          {}                                  -> {}        cudaDeviceSynchronize
    stream_create {stream, flags, priority}           -> {}
    stream_destroy{stream}                            -> {}
    stream_sync   {stream}                            -> {}
    stream_query  {stream}                            -> {ready}
    stream_wait   {stream, event}                     -> {}
    event_create  {event, flags}                      -> {}        optional ipc: [worker, token],
                  another session's exported event (cudaIpcOpenEventHandle)
    event_destroy {event}                             -> {}
    event_record  {event, stream}                     -> {}
    event_sync    {event}                             -> {}
    event_query   {event}                             -> {ready}
    event_elapsed {start, end}                        -> {ms}
    marker        {stream}                            -> {}        answered once the stream's
                                                                   earlier work is done
    stream_mem_ops {stream, ops}                     (never answered)   cuStreamWriteValue32/64,
                  cuStreamWaitValue32/64 and cuStreamBatchMemOp: `ops`, 1 to 255
                  operations [kind, address, value, flags] (rcuda/stream_memops.py:
                  a CUstreamBatchMemOpType and its flags), run in order in `stream`
    graph_create  {graph} + work                      -> {}        an executable CUDA graph's work
                  (client/graphs.py, server/graphs.py): one msgpack list, in
                  frames of at most CHUNK_SIZE, of [header, [frame, ...]]
                  pairs: requests a graph may hold, each sent without a reply;
                  replaces the graph's earlier work
    graph_launch  {graph, stream, first, count}       (never answered)   run requests
                  first..first+count of the graph in `stream`, each with that
                  stream in place of its own
    graph_destroy {graph}                             -> {}
    stream_attr   {stream, attr, value}               -> {}        cudaStreamSetAttribute, checked
                  by the client: attr a cudaLaunchAttributeID name, value an
                  int or a list (client/stream_attributes.py); a hint the
                  backend applies or ignores
    reset_persisting_l2 {}                            -> {}        cudaCtxResetPersistingL2Cache
    reset         {}                                  -> {}        cudaDeviceReset
    close         {}                                  -> {}
    peer_push     {xfer, src, size, endpoint, token, dest, timeout}  (never answered)
                  read [src, src+size) in stream order, and send it to the
                  peer port `endpoint` (another worker's, or this one's) as
                  transfer `xfer`; optional peer_secret (the destination
                  session's) to seal the connection with, required by a
                  server with --auth; optional stream (the copy's, else the
                  legacy stream)
    peer_wait     {xfer, dst, size, source}           (never answered)
                  wait for transfer `xfer` (from server `source`) on this
                  worker's peer port and write it to [dst, dst+size) in
                  stream order: later work in the stream sees the bytes;
                  optional stream (the copy's, else the legacy stream)
    peer_access   {peer, enable}                      -> {}        cudaDeviceEnable/DisablePeerAccess
                                                                   between two GPUs of this server
    mem_access    {ptr, peer, flags}                  -> {}        kernels on GPU `peer` of this server
                                                                   may use the allocation at `ptr`
                                                                   (flags: cudaMemAccessFlags; 0 takes
                                                                   it away): cudaMemPoolSetAccess,
                                                                   cuMemSetAccess on a mapping
    vmm_create    {handle, size}                      -> {}        cuMemCreate: physical memory on this
                                                                   GPU, named `handle` (the client's)
    vmm_retain    {handle}                            -> {}        one more reference to it
    vmm_release   {handle}                            -> {}        one reference fewer; freed once it has
                                                                   none and is mapped nowhere
    vmm_export    {handle}                            -> {worker, token, size}   cuMemExportToShareableHandle
                                                                   of one made with shareable: 1
    vmm_import    {handle, worker, token}             -> {size}    cuMemImportFromShareableHandle
    vmm_map       {ptr, size, offset, handle}         -> {}        cuMemMap: bytes [offset, offset+size)
                                                                   of it at device address `ptr` (the
                                                                   client's VMM window), an allocation
                                                                   of the session from now on
    vmm_unmap     {ptr}                               -> {}        cuMemUnmap of the mapping at `ptr`
    lib           {call, obj, args, stream}           -> {results} (+ frames)  a call of cuBLAS,
                  cuFFT or cuRAND (server/library_calls.py), in stream order:
                  `obj` the client's id of its handle, plan or generator
                  (a creation call names the new one), `args` the call's
                  arguments as client/libraries/registry.py encodes them; a library
                  status other than success answers {status, msg} (its
                  enumerator's name).  With "async" no reply comes
    mirror_htod   {runs} + data frames                (never answered)   mapped host memory: the
                  host's writes to mapped ranges, written to their device
                  copies at once, outside every stream (a kernel on any stream
                  launched after it sees them); see client/memory/mapped.py.
                  runs: [dst, size, dst, size, ...]; the frames carry their
                  bytes in that order (a frame per run on a lane)
    mirror_zero   {ptr, size}                         -> {}        a new mapped range's
                  device copy zeroed at once, as its host copy starts
    mirror_dtoh   {src, size, [offset, length]}       -> {} + data frames, or {runs} + frames
                  a mapped range's device copy (or its part [offset, offset
                  + length), on wire.MIRROR_CHUNK boundaries) as it is now
                  (not in any stream), for its host copy after a
                  synchronisation: all of it, or only the chunks that
                  changed since the client last had them
                  (server/mirror_views.py): `runs` pairs (offset in the
                  mirror, length) as little-endian uint64 in the first frame, their
                  bytes back to back after it; the reply carries neither
                  device output nor an earlier asynchronous error (the next
                  reply does)
    mirror_wait   {}                                  -> {}        all of the GPU's work
                  done, for a host thread that touched managed memory while
                  the GPU may have been writing it (native/mapped_memory.c);
                  transparent as mirror_dtoh: a failure is the next reply's too
Ops in MAY_BE_ASYNC take `"async": true` to be sent without waiting: then no
reply comes at all.  Ops in ALWAYS_ASYNC are never answered.
Session worker, peer port (one per worker, port and token in the hello
reply; connections framed as lanes, sealed under --auth): bytes of
cudaMemcpyPeer between servers, never through the client.
    peer_hello {token}               -> peer_welcome {err, msg}  first, on a new
                                        connection: no data goes to an endpoint
                                        that is not a peer port taking `token`
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

#: How a GPU's calls travel, as `rcuda devices` and `rcuda config` name it.
TRANSPORT_LANE = "TCP lane, not encrypted"
TRANSPORT_SEALED_LANE = "TCP lane sealed with AES-256-GCM, keyed over ZeroMQ CURVE (Curve25519)"
TRANSPORT_SOCKET = "ZeroMQ socket, not encrypted"
TRANSPORT_CURVE_SOCKET = "ZeroMQ socket under CURVE (Curve25519, XSalsa20-Poly1305)"


def transport(link: str, authenticated: bool) -> str:
    """What a session's calls travel on: `link` is the client's setting
    ("lane" or "socket"), `authenticated` whether the server runs --auth."""
    if link == "lane":
        return TRANSPORT_SEALED_LANE if authenticated else TRANSPORT_LANE
    return TRANSPORT_CURVE_SOCKET if authenticated else TRANSPORT_SOCKET


PROTOCOL_VERSION = 19

#: Bulk bytes on a ZeroMQ socket travel in frames of this size: ZeroMQ slows
#: down on messages above ~32 MiB (fresh buffers page-fault).
CHUNK_SIZE = 1 << 20

#: Each device's allocations live inside a window of this size, reserved by
#: its server where the client asked (the open op's va_base) or, if the
#: driver would not, where the client then accepts: windows never overlap,
#: so pointers never collide across devices.
VA_WINDOW_SIZE = 1 << 40

#: The window of a program's cuMemAddressReserve ranges: one per program,
#: reserved on each of its servers (the open op's vmm_base).
VMM_WINDOW_SIZE = 1 << 42

#: Most copies (device-to-device and uploads together) one copy_batch
#: message carries; a client splits a longer batch.
MAX_BATCH_COPIES = 4096

#: Seconds between heartbeats on a session's heartbeat socket.
HEARTBEAT_INTERVAL = 1.0

#: Seconds between a session worker's reports to its daemon (rcuda smi).
STATUS_INTERVAL = 1.0

_INT = int
_STR = str
_LIST = (list, tuple)

#: op -> {field: type} that its header must carry (besides op and seq).
OPS: dict[str, dict[str, type | tuple]] = {
    "hello": {"version": _INT, "client": dict},
    "info": {"version": _INT},
    "status": {"version": _INT},
    "open": {"dev": _INT, "token": _STR, "va_base": (_INT, type(None))},
    "move_window": {"window": _STR, "hint": _INT},
    "malloc": {"size": _INT},
    "free": {"ptr": _INT},
    "mem_info": {},
    "htod": {"dst": _INT, "size": _INT, "stream": _INT},
    "dtoh": {"src": _INT, "size": _INT, "stream": _INT},
    "dtod": {"dst": _INT, "src": _INT, "size": _INT, "stream": _INT},
    "copy_batch": {"copies": _LIST, "uploads": _LIST, "stream": _INT},
    "memset": {"ptr": _INT, "value": _INT, "size": _INT, "stream": _INT},
    "htod3d": {"dst": dict, "extent": _LIST, "stream": _INT},
    "dtoh3d": {"src": dict, "extent": _LIST, "stream": _INT},
    "dtod3d": {"dst": dict, "src": dict, "extent": _LIST, "stream": _INT},
    "memset3d": {"dst": dict, "value": _INT, "extent": _LIST, "stream": _INT},
    "array_create": {"array": _INT, "format": _STR, "channels": _INT, "width": _INT, "height": _INT,
                     "depth": _INT, "flags": _INT, "levels": _INT},
    "array_destroy": {"array": _INT},
    "texture_create": {"resource": dict, "texture": dict, "view": (dict, type(None))},
    "texture_destroy": {"handle": _INT},
    "surface_create": {"resource": dict},
    "surface_destroy": {"handle": _INT},
    "texref": {"module": _STR, "name": _STR, "surface": _INT, "resource": dict, "texture": (dict, type(None))},
    "ipc_export": {"ptr": _INT},
    "ipc_open": {"worker": _STR, "token": _STR},
    "ipc_close": {"ptr": _INT},
    "ipc_event_export": {"event": _INT},
    "tensor_map_encode": {"map": dict},
    "tensor_map_replace": {"address": _INT},
    "module": {"module": _STR},
    "link": {"names": _LIST, "sizes": _LIST},
    "function": {"fn": _INT, "module": _STR, "name": _STR, "offsets": _LIST, "sizes": _LIST},
    "func_attrs": {"fn": _INT},
    "func_set_attr": {"fn": _INT, "attr": _STR, "value": _INT},
    "symbol": {"module": _STR, "name": _STR},
    "launch": {"fn": _INT, "grid": _LIST, "block": _LIST, "shmem": _INT, "stream": _INT, "cooperative": _INT},
    "launches": {"count": _INT},
    "sync": {},
    "stream_create": {"stream": _INT, "flags": _INT, "priority": _INT},
    "stream_destroy": {"stream": _INT},
    "stream_sync": {"stream": _INT},
    "stream_query": {"stream": _INT},
    "stream_wait": {"stream": _INT, "event": _INT},
    "event_create": {"event": _INT, "flags": _INT},
    "event_destroy": {"event": _INT},
    "event_record": {"event": _INT, "stream": _INT},
    "event_sync": {"event": _INT},
    "event_query": {"event": _INT},
    "event_elapsed": {"start": _INT, "end": _INT},
    "marker": {"stream": _INT},
    "stream_mem_ops": {"stream": _INT, "ops": _LIST},
    "stream_attr": {"stream": _INT, "attr": _STR, "value": (_INT, *_LIST)},
    "reset_persisting_l2": {},
    "reset": {},
    "close": {},
    "ping": {},
    # -- server-to-server copies (cudaMemcpyPeer), see client/transport/peer.py and server/peer.py
    "peer_push": {"xfer": _INT, "src": _INT, "size": _INT, "endpoint": _STR, "token": _STR, "dest": _STR,
                  "timeout": (_INT, float)},
    "peer_wait": {"xfer": _INT, "dst": _INT, "size": _INT, "source": _STR},
    "peer_access": {"peer": _INT, "enable": _INT},
    "mem_access": {"ptr": _INT, "peer": _INT, "flags": _INT},
    # -- the driver's virtual memory management, see client/driver/vmm.py
    "vmm_create": {"handle": _INT, "size": _INT},
    "vmm_retain": {"handle": _INT},
    "vmm_release": {"handle": _INT},
    "vmm_map": {"ptr": _INT, "size": _INT, "offset": _INT, "handle": _INT},
    "vmm_export": {"handle": _INT},
    "vmm_import": {"handle": _INT, "worker": _STR, "token": _STR},
    "vmm_unmap": {"ptr": _INT},
    # -- executable CUDA graphs, see client/graphs.py and server/graphs.py
    "graph_create": {"graph": _INT},
    "graph_launch": {"graph": _INT, "stream": _INT, "first": _INT, "count": _INT},
    "graph_destroy": {"graph": _INT},
    # -- mapped host memory, see client/memory/mapped.py and native/mapped_memory.c
    "lib": {"call": _STR, "obj": _INT, "args": _LIST, "stream": _INT},
    "mirror_htod": {"runs": _LIST},
    "mirror_zero": {"ptr": _INT, "size": _INT},
    "mirror_dtoh": {"src": _INT, "size": _INT},
    "mirror_wait": {},
    "peer_data": {"token": _STR, "xfer": _INT, "offset": _INT, "total": _INT},
    "peer_abort": {"token": _STR, "xfer": (_INT, type(None)), "source": _STR, "upto": _INT, "msg": _STR},
    "peer_hello": {"token": _STR},
}

#: op -> {field: type} it may carry; checked when present.
OPTIONAL_FIELDS: dict[str, dict[str, type | tuple]] = {
    "open": {"vmm_base": _INT},
    "event_create": {"ipc": _LIST},
    "vmm_create": {"shareable": _INT},
    "launch": {"cluster": _LIST},
    "memset": {"elem": _INT},
    "memset3d": {"elem": _INT},
    "peer_push": {"peer_secret": bytes, "stream": _INT},
    "peer_wait": {"stream": _INT},
    "mirror_dtoh": {"offset": _INT, "length": _INT},
}

#: Ops that are never answered: their errors surface in a later reply.
ALWAYS_ASYNC = frozenset({"launch", "launches", "peer_push", "peer_wait", "mirror_htod", "graph_launch",
                          "stream_mem_ops"})

#: Ops that may carry `"async": true` (sent without waiting, no reply).
MAY_BE_ASYNC = frozenset({
    "htod", "dtod", "copy_batch", "memset", "htod3d", "dtod3d", "memset3d",
    "array_destroy", "texture_destroy", "surface_destroy",
    "stream_create", "stream_destroy", "stream_wait", "stream_attr",
    "event_create", "event_destroy", "event_record", "lib", "graph_create", "graph_destroy",
})


def expects_reply(header: dict) -> bool:
    """Whether the server answers this (already checked) request."""
    op = header["op"]
    return op not in ALWAYS_ASYNC and not (op in MAY_BE_ASYNC and header.get("async") is True)

#: Ops of the peer socket (never valid on a GPU socket).
PEER_SOCKET_OPS = frozenset({"peer_data", "peer_abort", "peer_hello"})


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
    optional = OPTIONAL_FIELDS.get(op, {})
    for field, kind in [*OPS[op].items(), *((f, k) for f, k in optional.items() if f in header)]:
        value = header.get(field)
        if field not in header or not isinstance(value, kind) or isinstance(value, bool):  # (a null one too)
            raise ProtocolError(f"{op}: field {field!r} must be {_type_name(kind)}, got {value!r:.60}")
    if "async" in header and (op not in MAY_BE_ASYNC or not isinstance(header["async"], bool)):
        raise ProtocolError(f"{op}: cannot be sent with 'async'" if op not in MAY_BE_ASYNC
                            else f"{op}: field 'async' must be a bool")
    return op


def _type_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def chunks(view: memoryview, size: int = CHUNK_SIZE) -> list[memoryview]:
    """Split a byte view into frames of at most `size` bytes."""
    return [view[i:i + size] for i in range(0, len(view), size)] or [view[:0]]
