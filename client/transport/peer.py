"""Copies between GPUs of different servers, and peer access.

A copy from GPU A to GPU B (cudaMemcpyPeer, cudaMemcpyPeerAsync, cudaMemcpy
with cudaMemcpyDefault or DeviceToDevice across devices) never passes
through this process.  The client posts two asynchronous ops:

    to B (destination): peer_wait {xfer, dst, size, source, stream}
    to A (source):      peer_push {xfer, src, size, endpoint + token of B's peer port, stream}

A's server sends the bytes straight to B's (server/peer.py).  Each GPU's
server thread runs its ops in the order they were posted, and each half
runs in its stream there (cudaMemcpyPeerAsync's stream on its GPU, the
legacy stream otherwise), so the push reads the source after the earlier
work in its stream on A, and the later work in its stream on B sees the
bytes.  Two GPUs of the same server copy inside their worker.

Why this cannot deadlock.  A GPU thread blocks only in a peer_wait, until
the matching push has run on the source GPU.  All posts of peer ops happen
under one client-wide lock, a wait immediately followed by its push, so
all peer ops of the process have one total order in which each push comes
right after its wait; each GPU runs its ops in that order.  Take the
earliest wait (in the total order) that never ends, W(T) on B.  Its push
P(T) on A comes next in the order, so everything before P(T) on A was
posted before W(T): pushes, which never block, and waits earlier than W(T),
which all end by the choice of W(T).  So A reaches P(T) and W(T) ends: a
contradiction.  Without the lock, two threads copying in opposite
directions could post A:[W(T2), P(T1)] and B:[W(T1), P(T2)], a cycle.
(Should GPU ops ever run out of post order, e.g. on independent streams,
a wait and its push must keep this order on the streams they are put on.)

A wait ends when its bytes arrive or its transfer is aborted: the source
worker reports a failed push to us (`peer_failed` notice) and we abort the
transfer at the destination; a source server that goes away makes us abort
every transfer from it.  So a copy from a server that died or cannot reach
the destination fails with cudaErrorDevicesUnavailable naming both, never
hangs.

With --auth on the destination, `peer_push` also carries the destination
session's peer secret, with which the source worker seals its connection
(server/peer.py).  A source with --auth pushes only to servers that
authenticate, so copies from it to a server without --auth go through this
process.

Set RCUDA_PEER_COPY=client to stage copies through this process instead
(a server that cannot reach another at the address the client uses, e.g.
behind separate tunnels).
"""
from __future__ import annotations

import itertools
import logging
import os
import threading

from rcuda.errors import CudaError, RcudaError, cudaError
from rcuda.lane import dial

log = logging.getLogger(__name__)

#: RCUDA_PEER_COPY: "direct" (server to server, the default) or "client".
MODES = ("direct", "client")


class PeerCopies:
    """The process's peer copies and peer-access state (part of Runtime)."""

    def __init__(self, mode: str | None = None):
        mode = (mode or os.environ.get("RCUDA_PEER_COPY") or "direct").strip().lower()
        if mode not in MODES:
            log.warning("RCUDA_PEER_COPY=%s is not one of %s: copying server to server", mode, ", ".join(MODES))
            mode = "direct"
        self.mode = mode
        self._lock = threading.Lock()  # the total order of peer posts: see the module docstring
        self._xfer_ids = itertools.count(1)
        #: source server -> {destination device: last transfer posted}: what
        #: to abort if that server goes away.
        self._outstanding: dict[str, dict] = {}
        self._devices_by_label: dict[str, object] = {}
        self._watched: set[int] = set()  # ids of sessions and links we hooked
        self._enabled: set[tuple[int, int]] = set()  # (device, peer) with peer access enabled
        self._staged: set = set()  # (source session, destination session) pairs copied through us

    # ---------------------------------------------------------- copies

    def copy(self, dst_device, dst: int, src_device, src: int, size: int, *, synchronous: bool,
             call: str = "cudaMemcpyPeer", stream=None) -> None:
        """Copy `size` bytes from `src` on `src_device` to `dst` on
        `dst_device` (two different devices), in `stream` (a Stream, or None:
        the legacy streams).  Synchronous: returns once the destination holds
        the bytes, raising the copy's error."""
        if size == 0:
            return
        src_stream, dst_stream = self._streams(stream, src_device, dst_device, call)
        dst_session = dst_device.session
        if self.mode == "client" or dst_session.peer_endpoint is None or not self._direct_allowed(src_device,
                                                                                                 dst_device):
            self._copy_through_client(dst_device, dst, dst_stream, src_device, src, src_stream, size)
            return
        source = str(src_device.session.address)
        self._watch(src_device)
        with self._lock:
            xfer = next(self._xfer_ids)
            self._devices_by_label[dst_device.label] = dst_device
            self._outstanding.setdefault(source, {})[dst_device] = xfer
            dst_device.post("peer_wait", xfer=xfer, dst=dst, size=size, source=source, stream=dst_stream)
            try:
                src_device.post("peer_push", xfer=xfer, src=src, size=size, endpoint=dst_session.peer_endpoint,
                                token=dst_session.peer_token, dest=dst_device.label,
                                timeout=src_device.session.timeout, stream=src_stream,
                                **self._peer_secret(dst_session))
            except RcudaError as exc:  # the wait is posted: it must not wait for nothing
                self._abort(dst_device, xfer, f"{call} from {src_device.label}: {exc}", exc.status)
                raise
        log.debug("%s: transfer %d, %d bytes %s -> %s", call, xfer, size, src_device.label, dst_device.label)
        if synchronous:
            try:
                dst_device.synchronize()
            except CudaError as exc:
                raise CudaError(exc.status, f"{call} {src_device.label} -> {dst_device.label}: {exc}") from None

    def _direct_allowed(self, src_device, dst_device) -> bool:
        """A source server with --auth pushes only to servers that
        authenticate: to one without, the bytes go through this process."""
        if src_device.session.curve is None or dst_device.session.curve is not None:
            return True
        if (src_device.session, dst_device.session) not in self._staged:
            self._staged.add((src_device.session, dst_device.session))
            log.info("peer copies %s -> %s go through this process: %s runs with --auth, %s without",
                     src_device.session.address, dst_device.session.address, src_device.session.address,
                     dst_device.session.address)
        return False

    @staticmethod
    def _peer_secret(dst_session) -> dict:
        """With --auth on the destination: the secret the source worker
        seals its connection to the peer port with (server/peer.py)."""
        return {} if dst_session.peer_secret is None else {"peer_secret": dst_session.peer_secret}

    @staticmethod
    def _streams(stream, src_device, dst_device, call: str) -> tuple[int, int]:
        """The stream ids each half runs in: a copy in a stream runs there
        on its GPU (each server orders its half in it: the read after the
        stream's earlier work, the write before its later work), and in the
        other GPU's legacy stream; a copy in no stream, in both legacy ones."""
        if stream is None or stream.id == 0:
            return 0, 0
        if stream.id in stream.device.sinks:  # capturing: a copy between servers makes no graph node here
            stream.device.sinks[stream.id].refuse(call)
        if stream.device is src_device:
            return stream.id, 0
        if stream.device is dst_device:
            return 0, stream.id
        stream.device.request("stream_sync", stream=stream.id)  # a third GPU's stream: its order, kept here
        return 0, 0

    @staticmethod
    def _copy_through_client(dst_device, dst, dst_stream, src_device, src, src_stream, size) -> None:
        frames = src_device.copy_from_device(src, size, src_stream)
        dst_device.copy_to_device(dst, memoryview(b"".join(f.buffer for f in frames)), dst_stream)

    def _watch(self, src_device) -> None:
        """Hook the source's link (failed pushes) and session (server
        gone) the first time it sends a peer copy."""
        link, session = src_device.link, src_device.session
        if id(link) not in self._watched:
            self._watched.add(id(link))
            link.on_notice = self._on_notice
        if id(session) not in self._watched:
            self._watched.add(id(session))
            session.on_failure(lambda error, source=str(session.address): self._source_lost(source, error))

    def _on_notice(self, header: dict) -> None:
        """A source worker could not push a transfer: fail its wait."""
        if header.get("notice") != "peer_failed":
            log.warning("unknown notice %r from a server", header.get("notice"))
            return
        dst_device = self._devices_by_label.get(header.get("dest"))
        xfer = header.get("xfer")
        if dst_device is None or not isinstance(xfer, int):
            log.warning("peer_failed notice for an unknown transfer: %r", header)
            return
        message = str(header.get("msg") or "peer copy failed at its source")
        log.error("peer copy %d to %s failed at its source: %s", xfer, dst_device.label, message)
        self._abort(dst_device, xfer, message, header.get("err"))

    def _source_lost(self, source: str, error: BaseException) -> None:
        """Server `source` went away: abort every transfer from it that a
        live destination may still wait for."""
        with self._lock:
            targets = self._outstanding.pop(source, {})
        for dst_device, upto in targets.items():
            if str(dst_device.session.address) == source or dst_device.link.failed:
                continue
            self._send(dst_device.session, {"op": "peer_abort", "xfer": None, "source": source, "upto": upto,
                                            "msg": f"{error}"})

    def _abort(self, dst_device, xfer: int, message: str, status=None) -> None:
        if dst_device.link.failed:
            return
        header = {"op": "peer_abort", "xfer": xfer, "source": "", "upto": 0, "msg": message}
        if isinstance(status, int):
            header["err"] = int(status)
        self._send(dst_device.session, header)

    @staticmethod
    def _send(session, header: dict) -> None:
        """One message to a worker's peer port (which never answers aborts),
        from a thread of its own: the caller (a link's or the heartbeat's
        thread) does not wait for a connection."""
        def send() -> None:
            try:
                lane = dial(session.address.host, session.peer_port, session.timeout, session.peer_secret)
            except OSError as exc:
                log.warning("%s to %s's peer port failed: %s", header["op"], session.address, exc)
                return
            try:
                lane.send(dict(header, seq=0, token=session.peer_token))
            except OSError as exc:
                log.warning("%s to %s's peer port failed: %s", header["op"], session.address, exc)
            finally:
                lane.close()

        threading.Thread(target=send, name="rcuda peer abort", daemon=True).start()

    # ---------------------------------------------------------- peer access

    @staticmethod
    def link_attribute(device, peer, name: str) -> int:
        """cudaDeviceGetP2PAttribute `name` from `device` to `peer`: what
        their server says of two of its GPUs (the `rcudaPeers` property);
        0 across servers, where there is no link, only copies."""
        if device is peer or device.session is not peer.session:
            return 0
        links = device.properties.get("rcudaPeers", [])
        return links[peer.local_index].get(name, 0) if peer.local_index < len(links) else 0

    def can_access(self, device, peer) -> bool:
        """Direct load/store: only between GPUs of one server whose backend
        says so.  Across servers there is no shared address space."""
        return bool(self.link_attribute(device, peer, "cudaDevP2PAttrAccessSupported"))

    def enable(self, device, peer) -> None:
        if device is peer:
            raise CudaError(cudaError.cudaErrorInvalidDevice,
                            f"cudaDeviceEnablePeerAccess: {device.label} cannot be its own peer")
        if (device.ordinal, peer.ordinal) in self._enabled:
            raise CudaError(cudaError.cudaErrorPeerAccessAlreadyEnabled,
                            f"cudaDeviceEnablePeerAccess: {device.label} already accesses {peer.label}")
        if not self.can_access(device, peer):
            where = ("they are on different servers, so kernels on one cannot load or store the other's memory"
                     if device.session is not peer.session else "their server's backend does not support it")
            log.warning("cudaDeviceEnablePeerAccess(%s -> %s): not supported: %s; cudaMemcpyPeer and "
                        "cudaMemcpy(cudaMemcpyDefault) still copy between them, server to server",
                        device.label, peer.label, where)
            raise CudaError(cudaError.cudaErrorPeerAccessUnsupported,
                            f"cudaDeviceEnablePeerAccess {device.label} -> {peer.label}: {where}")
        device.request("peer_access", peer=peer.local_index, enable=1)
        self._enabled.add((device.ordinal, peer.ordinal))

    def forget_device(self, device) -> None:
        """cudaDeviceReset of `device`: its peer access and its peers' access
        to it went with its context."""
        self._enabled = {pair for pair in self._enabled if device.ordinal not in pair}

    def disable(self, device, peer) -> None:
        if (device.ordinal, peer.ordinal) not in self._enabled:
            raise CudaError(cudaError.cudaErrorPeerAccessNotEnabled,
                            f"cudaDeviceDisablePeerAccess: {device.label} does not access {peer.label}")
        device.request("peer_access", peer=peer.local_index, enable=0)
        self._enabled.discard((device.ordinal, peer.ordinal))
