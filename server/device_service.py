"""Serves one GPU to one client session, in a thread that owns its socket.

The client's forwarding thread for this device talks to this thread alone,
so a message goes from socket to backend with no hand-off in between.  Every
message is checked before anything is done with it; a bad one gets an error
reply and changes nothing.

CUDA's error model is kept: asynchronous ops (launches) get no reply, their
failures are reported by the next reply; a sticky error (illegal address,
assert, launch failure) makes every later op fail with it; device output
(printf) is collected and returned with the next reply.
"""
from __future__ import annotations

import logging
import threading

import zmq

from rcuda import protocol
from rcuda.errors import CudaError, ProtocolError, cudaError, is_sticky
from rcuda.server.backends.base import ParamLayout
from rcuda.server.peer import PeerOps

log = logging.getLogger(__name__)

#: CUDA's limit on a kernel's parameter buffer (bytes).
MAX_PARAM_BYTES = 32764
POLL_MS = 200


class DeviceService:
    def __init__(self, context: zmq.Context, backend, index: int, bind_host: str, inbox=None,
                 peer_token: str | None = None):
        self.backend = backend
        self.index = index
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        self.port = self.socket.bind_to_random_port(f"tcp://{bind_host}")
        self.token: str | None = None
        self.closed = threading.Event()
        self._stop = threading.Event()
        self._peer: bytes | None = None
        self.device = None
        self._sticky: CudaError | None = None
        self._deferred: CudaError | None = None
        self._modules: set[str] = set()
        self._functions: dict[int, tuple] = {}  # fn id -> (handle, layout)
        self._output: list[str] = []
        self._handlers = {
            "open": self._open, "malloc": self._malloc, "free": self._free, "htod": self._htod,
            "dtoh": self._dtoh, "dtod": self._dtod, "memset": self._memset, "function": self._function,
            "launch": self._launch, "sync": self._sync, "mem_info": self._mem_info, "close": self._close,
        }
        # Server-to-server copies (server/peer.py): `inbox` holds the worker's
        # incoming transfers, `peer_token` authorises them.
        self.peer_ops = PeerOps(self, context, inbox, peer_token)
        self._handlers.update(self.peer_ops.handlers())
        self._thread = threading.Thread(target=self._run, name=f"rcuda GPU{index}", daemon=True)

    def start(self, token: str) -> None:
        self.token = token
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._release()

    # ---------------------------------------------------------- the loop

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self.closed.is_set():
                if not self.socket.poll(POLL_MS, zmq.POLLIN):
                    continue
                self._serve(self.socket.recv_multipart(copy=False))
        except Exception:  # a bug must end the session, not hang it
            log.exception("GPU%d service stopped", self.index)
            self.closed.set()
        finally:
            self.peer_ops.close()
            self.socket.close(linger=0)

    # -- for server/peer.py, which runs in this thread

    @property
    def sticky(self) -> CudaError | None:
        return self._sticky

    def stopping(self) -> bool:
        return self._stop.is_set()

    def notify(self, message: dict) -> None:
        """An unsolicited message to the client (seq null), e.g. a failed
        peer_push it must abort at the destination."""
        if self._peer is not None:
            self.socket.send_multipart([self._peer, protocol.pack({"seq": None, **message})])

    def _serve(self, parts: list) -> None:
        if len(parts) < 2:
            return  # not even a header: nothing to answer
        peer, header_frame, payload = parts[0].bytes, parts[1], parts[2:]
        try:
            header = protocol.unpack(header_frame.buffer)
        except ProtocolError as exc:
            log.warning("GPU%d: %s", self.index, exc)
            self._reply(peer, {"seq": None, "err": int(cudaError.cudaErrorInvalidValue), "msg": str(exc)})
            return
        seq = header.get("seq")
        try:
            op = protocol.check_header(header)
            if self._peer is None and op != "open":
                raise ProtocolError(f"{op} before open")
            if self._peer is not None and peer != self._peer:
                raise ProtocolError("this GPU socket belongs to another connection")
            if op not in _STICKY_EXEMPT and self._sticky is not None:
                raise self._sticky
            result = self._handlers[op](header, payload)
            if op == "open":
                self._peer = peer  # from now on, only this connection
        except (CudaError, ProtocolError) as exc:
            self._failed(peer, seq, header.get("op"), exc)
            return
        except Exception as exc:  # a backend bug: report it, keep serving
            log.exception("GPU%d: %s failed", self.index, header.get("op"))
            self._failed(peer, seq, header.get("op"), CudaError(cudaError.cudaErrorUnknown,
                                                                f"server error: {exc}"))
            return
        if op in protocol.ASYNC_OPS:
            self._collect_output()
            return
        reply, frames = result if isinstance(result, tuple) else (result or {}, [])
        reply["seq"] = seq
        reply["err"] = 0
        if self._deferred is not None:  # an earlier asynchronous failure
            reply["err"], reply["msg"] = int(self._deferred.status), self._deferred.message
            self._deferred = None
        self._reply(peer, reply, frames)

    def _failed(self, peer: bytes, seq, op, exc) -> None:
        status = exc.status if isinstance(exc, CudaError) else cudaError.cudaErrorInvalidValue
        if isinstance(exc, CudaError) and is_sticky(status) and self._sticky is None:
            self._sticky = exc
            log.warning("GPU%d: sticky error in %s: %s", self.index, op, exc)
        if op in protocol.ASYNC_OPS:
            if self._deferred is None and exc is not self._sticky:
                self._deferred = exc if isinstance(exc, CudaError) else CudaError(status, str(exc))
            self._collect_output()
            return
        self._reply(peer, {"seq": seq, "err": int(status), "msg": str(exc)})

    def _reply(self, peer: bytes, reply: dict, frames=()) -> None:
        self._collect_output()
        if self._output:
            reply["out"] = "".join(self._output)
            self._output.clear()
        self.socket.send_multipart([peer, protocol.pack(reply), *frames], copy=False)

    def _collect_output(self) -> None:
        if self.device is not None:
            text = self.device.take_output()
            if text:
                self._output.append(text)

    # ---------------------------------------------------------- ops

    def _open(self, header, payload):
        if self._peer is not None:
            raise ProtocolError("device already open")
        if header["token"] != self.token or header["dev"] != self.index:
            raise CudaError(cudaError.cudaErrorDevicesUnavailable, "wrong session token or device")
        va_base = header["va_base"]
        self.device = self.backend.open_device(self.index, va_base)
        return {"props": self.device.properties()}

    def _malloc(self, header, payload):
        return {"ptr": self.device.malloc(_non_negative(header, "size"))}

    def _free(self, header, payload):
        self.device.free(header["ptr"])

    def _htod(self, header, payload):
        size = _non_negative(header, "size")
        if sum(len(f.buffer) for f in payload) != size:
            raise ProtocolError(f"htod: header says {size} bytes, frames carry "
                                f"{sum(len(f.buffer) for f in payload)}")
        offset = 0
        for frame in payload:
            view = frame.buffer
            self.device.memcpy_htod(header["dst"] + offset, view)
            offset += len(view)

    def _dtoh(self, header, payload):
        data = memoryview(self.device.memcpy_dtoh(header["src"], _non_negative(header, "size")))
        return {}, protocol.chunks(data.cast("B") if data.format != "B" else data)

    def _dtod(self, header, payload):
        self.device.memcpy_dtod(header["dst"], header["src"], _non_negative(header, "size"))

    def _memset(self, header, payload):
        self.device.memset(header["ptr"], header["value"], _non_negative(header, "size"))

    def _function(self, header, payload):
        offsets, sizes = header["offsets"], header["sizes"]
        if (len(offsets) != len(sizes) or not all(isinstance(v, int) and v >= 0 for v in offsets + sizes)
                or any(s == 0 for s in sizes)):
            raise ProtocolError("function: offsets and sizes must be lists of equal length of "
                                "non-negative integers (sizes positive)")
        layout = ParamLayout(tuple(offsets), tuple(sizes))
        if layout.buffer_size > MAX_PARAM_BYTES:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"kernel parameters take {layout.buffer_size} "
                                                             f"bytes, more than CUDA's {MAX_PARAM_BYTES}")
        key = header["module"]
        if key not in self._modules:
            if len(payload) != 1:
                raise CudaError(cudaError.cudaErrorInvalidKernelImage, f"module {key} was never sent")
            self.device.load_module(key, bytes(payload[0].buffer))
            self._modules.add(key)
        handle = self.device.get_function(key, header["name"], layout)
        self._functions[header["fn"]] = (handle, layout)

    def _launch(self, header, payload):
        entry = self._functions.get(header["fn"])
        if entry is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"unknown function id {header['fn']}")
        handle, layout = entry
        grid, block = _dims(header, "grid"), _dims(header, "block")
        if len(payload) != 1 or len(payload[0].buffer) != layout.buffer_size:
            raise ProtocolError(f"launch: parameter buffer must be one frame of {layout.buffer_size} bytes")
        self.device.launch(handle, grid, block, bytes(payload[0].buffer), _non_negative(header, "shmem"),
                           header["stream"])

    def _sync(self, header, payload):
        self.device.synchronize()

    def _mem_info(self, header, payload):
        free, total = self.device.mem_get_info()
        return {"free": free, "total": total}

    def _close(self, header, payload):
        self.closed.set()
        self._release()

    def _release(self) -> None:
        device, self.device = self.device, None
        if device is not None:
            try:
                device.close()
            except Exception:  # noqa: BLE001 - freeing must not stop the session's end
                log.exception("GPU%d: error while freeing the session's memory", self.index)


#: Ops that run even after a sticky error: peer ops must still settle their
#: transfer with the other server (peer.py checks the sticky error itself).
_STICKY_EXEMPT = frozenset({"open", "close", "peer_push", "peer_wait"})


def _non_negative(header: dict, field: str) -> int:
    value = header[field]
    if not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{header.get('op')}: {field} must be a non-negative integer")
    return value


def _dims(header: dict, field: str) -> tuple[int, int, int]:
    value = header[field]
    if len(value) != 3 or not all(isinstance(v, int) and 0 < v < 2**32 for v in value):
        raise ProtocolError(f"launch: {field} must be three positive 32-bit integers")
    return tuple(value)
