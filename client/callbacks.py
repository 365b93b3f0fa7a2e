"""Host functions in streams: cudaLaunchHostFunc, cudaStreamAddCallback.

CUDA runs a host function after the work enqueued before it in its stream,
and holds back the stream's later work until the function returns.  rcuda
does it this way, per device:

  1. a `marker` request on the stream is answered once the stream's earlier
     work is done on the server;
  2. a `Gate` in the device's outbox holds back every later message to the
     device (not only the stream's: simpler, and never wrong, merely less
     concurrent while a host function runs);
  3. when the marker's answer arrives, a callback thread of that device runs
     the function and then opens the gate.  Mapped host memory gets the
     device's writes first (client/memory/mapped.py), so the function sees
     what the stream's kernels wrote; what it writes goes to the device
     before the work behind the gate.

CUDA forbids CUDA calls inside a host function; here one would wait for the
gate it holds shut, so it fails at once with cudaErrorNotPermitted instead
(`in_host_function`).
"""
from __future__ import annotations

import logging
import queue
import threading

from .transport.link import Gate

log = logging.getLogger(__name__)

_local = threading.local()


def in_host_function() -> bool:
    return getattr(_local, "running", False)


class HostCallbacks:
    """One callback thread per device, started on first use."""

    def __init__(self):
        self._lock = threading.Lock()
        self._queues: dict[object, queue.SimpleQueue] = {}

    def enqueue(self, device, stream_id: int, run) -> None:
        """Run `run(status)` on the client once the stream's earlier work is
        done (status: 0, or the error the stream met); hold later work on
        the device until it returns."""
        gate = Gate()
        work = self._queue(device)
        mirrors = device.mirror_token("marker", stream=stream_id)

        def before():
            device.refresh_mirrors(mirrors)

        def reached(reply, frames, error):
            status = getattr(error, "status", 0) if error is not None else int(reply.get("err", 0))
            work.put((run, status, gate, before if mirrors is not None and mirrors.pending else None))

        device.link.post_awaited({"op": "marker", "stream": stream_id}, (), reached)
        device.link.add_gate(gate)

    def _queue(self, device) -> queue.SimpleQueue:
        with self._lock:
            work = self._queues.get(device)
            if work is None:
                work = self._queues[device] = queue.SimpleQueue()
                threading.Thread(target=self._serve, args=(work,), name=f"rcuda callbacks {device}",
                                 daemon=True).start()
        return work

    @staticmethod
    def _serve(work: queue.SimpleQueue) -> None:
        _local.running = True
        while True:
            run, status, gate, before = work.get()
            try:
                if before is not None and not status:
                    try:
                        before()  # mapped memory: the device's writes, ahead of the gate
                    except Exception as exc:  # noqa: BLE001 - the function then sees the failure
                        log.error("before a host function: %s", exc)
                        status = int(getattr(exc, "status", 999))
                run(status)
            except Exception:  # noqa: BLE001 - the program's function must not stop the stream
                log.exception("host function raised")
            finally:
                gate.open()
